"""Small shared math: RMSNorm, activations, softplus."""
import torch


def rmsnorm(x, w, eps):
    """w * x / sqrt(mean(x^2) + eps) over the last dim (plain weight, not 1+w)."""
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def sigmoid(x):
    return torch.sigmoid(x)


def silu(x):
    return x * torch.sigmoid(x)


def softplus(x):
    """ln(1 + e^x), evaluated stably without a threshold cut-off."""
    return torch.clamp(x, min=0) + torch.log1p(torch.exp(-x.abs()))


def linear(x, w):
    """y = W x with W stored [out, in]."""
    return x @ w.t()
