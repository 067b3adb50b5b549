"""Deterministic random helpers for fixture/checkpoint generation."""
import torch


def gen(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def randn32(g, *shape, std=1.0, mean=0.0):
    """float32 ~N(mean, std^2) from generator g, bit-reproducible across CPUs.

    torch.randn's CPU kernel has an AVX2 path with its own log/cos, so its bits can depend on the
    machine. Instead: Irwin-Hall, the sum of 12 float32 uniforms (each a multiple of 2^-24, drawn
    serially from the Mersenne twister) minus 6. The sum is exact in float64 whatever the summation
    order; the cast to float32 and the scaling are single IEEE roundings. Mean 0, variance 1, |x| < 6."""
    u = torch.rand(*shape, 12, generator=g, dtype=torch.float32).double()
    x = (u.sum(-1) - 6.0).to(torch.float32)
    if std != 1.0:
        x = x * torch.tensor(std, dtype=torch.float32)
    if mean != 0.0:
        x = x + torch.tensor(mean, dtype=torch.float32)
    return x


def rand32(g, *shape, lo=0.0, hi=1.0):
    x = torch.rand(*shape, generator=g, dtype=torch.float32)
    return x * torch.tensor(hi - lo, dtype=torch.float32) + torch.tensor(lo, dtype=torch.float32)


def f32(x):
    return x.to(torch.float32)


def f64(x):
    return x.to(torch.float64)


def linspace32(a, b, n):
    """float32 linspace computed element by element in Python doubles (torch.linspace's bits depend on
    the CPU kernel path)."""
    if n == 1:
        return torch.tensor([a], dtype=torch.float32)
    return torch.tensor([a + (b - a) * i / (n - 1) for i in range(n)], dtype=torch.float64).to(torch.float32)
