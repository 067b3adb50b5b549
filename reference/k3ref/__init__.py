"""k3ref: an independent, plain-PyTorch (float64) reference for Kimi K3 and Kimi-Linear-48B.

Follows docs/architecture.md to the letter. Clarity over speed; torch + stdlib only.
"""
import torch

torch.set_default_dtype(torch.float64)
F64 = torch.float64
