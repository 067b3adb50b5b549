"""MXFP4 (OCP MX v1.0: FP4 E2M1 elements, E8M0 scale per 32) in compressed-tensors form.

weight_packed u8 [out, in/2]: byte b of a row = element 2b (LOW nibble) | element 2b+1 (HIGH nibble).
weight_scale  u8 [out, in/32]: value = E2M1[code] * 2^(s - 127). Blocks run along the input dim.
Decoding is exact in float64 (2^-127 .. 2^127 are normal doubles). Scale byte 0xFF is rejected.
"""
import math

import torch

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
LUT = torch.tensor(E2M1, dtype=torch.float64)
SCALE_LUT = torch.tensor([math.ldexp(1.0, s - 127) for s in range(256)], dtype=torch.float64)
BLOCK = 32
POW2_OFF = 400
POW2 = torch.tensor([math.ldexp(1.0, e - POW2_OFF) for e in range(2 * POW2_OFF + 1)], dtype=torch.float64)


def pow2(e):
    """Exact 2^e for integer tensors e (table lookup; torch.pow may go through an approximate vector pow)."""
    return POW2[(e + POW2_OFF).clamp(0, 2 * POW2_OFF)]


def check_scale(scale):
    if (scale == 255).any():
        raise ValueError("MXFP4 scale byte 0xFF (NaN in OCP MX) rejected")


def codes(packed):
    """u8 [..., n/2] -> int64 codes [..., n] (even element from the low nibble)."""
    p = packed.long()
    return torch.stack([p & 0x0F, p >> 4], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def decode(packed, scale):
    """Exact dequantisation to float64 [..., out, in]."""
    check_scale(scale)
    v = LUT[codes(packed)]
    n = v.shape[-1]
    if n != scale.shape[-1] * BLOCK:
        raise ValueError(f"packed/scale shape mismatch {tuple(packed.shape)} {tuple(scale.shape)}")
    v = v.reshape(*v.shape[:-1], n // BLOCK, BLOCK) * SCALE_LUT[scale.long()].unsqueeze(-1)
    return v.reshape(*v.shape[:-2], n)


def matvec_blockwise(packed, scale, x):
    """Spec 5.4 fp32 path order, in float64: per row, per block, p = sum(LUT*x) then acc += p*2^(s-127)."""
    check_scale(scale)
    v = LUT[codes(packed)]
    out_, n = v.shape
    p = (v.reshape(out_, n // BLOCK, BLOCK) * x.reshape(1, n // BLOCK, BLOCK)).sum(-1)
    return (p * SCALE_LUT[scale.long()]).sum(-1)


def _round_e2m1_magnitude(m):
    """Round non-negative magnitudes (already divided by the block scale) to E2M1 codes 0..7, RNE, saturating at 6."""
    grid = LUT[:8]
    m = torch.clamp(m, max=6.0)
    dist = (m.unsqueeze(-1) - grid).abs()
    best = dist.min(-1, keepdim=True).values
    tie = dist == best
    even = torch.tensor([c % 2 == 0 for c in range(8)])
    cand_even = tie & even
    has_even = cand_even.any(-1)
    return torch.where(has_even, cand_even.int().argmax(-1), tie.int().argmax(-1))


def block_exponent(amax):
    """Smallest integer e with 6*2^e >= amax (so amax/2^e in (3, 6]); amax == 0 -> e = 0."""
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    e = torch.ceil(torch.log2(safe / 6.0)).long()
    for _ in range(2):  # fix possible off-by-one of the float log2
        e = torch.where(6.0 * pow2(e) < safe, e + 1, e)
        e = torch.where(6.0 * pow2(e - 1) >= safe, e - 1, e)
    return torch.where(amax > 0, e, torch.zeros_like(e))


def quantize(w):
    """float [out, in] -> (packed u8 [out, in/2], scale u8 [out, in/32]).

    Shared exponent from the block max: s = 127 + e, e the smallest with 6*2^e >= amax (clamped to
    [0, 254]); elements w/2^e rounded to nearest E2M1 value, ties to even code, saturating at 6;
    sign bit from the sign of w (a negative value that rounds to 0 gives code 8 = -0)."""
    w = w.double()
    out_, n = w.shape
    if n % BLOCK:
        raise ValueError("input dim must be a multiple of 32")
    blocks = w.reshape(out_, n // BLOCK, BLOCK)
    e = block_exponent(blocks.abs().amax(-1))
    s = torch.clamp(e + 127, 0, 254)
    q = blocks / SCALE_LUT[s].unsqueeze(-1)
    c = _round_e2m1_magnitude(q.abs()) | torch.where(q < 0, 8, 0)
    c = c.reshape(out_, n)
    packed = (c[:, 0::2] | (c[:, 1::2] << 4)).to(torch.uint8)
    return packed, s.to(torch.uint8)
