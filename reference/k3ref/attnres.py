"""K3 Block Attention Residuals (docs/architecture.md §6.2)."""
import torch


def mix(p, blocks, w_norm, w_proj, eps):
    """R(p, [b_1..b_n]): V = (b_1..b_n, p); kappa_i = V_i/sqrt(mean(V_i^2)+eps);
    score_i = sum_d kappa_i[d] w_norm[d] w_proj[d]; pi = softmax(score); return sum_i pi_i V_i.
    p and blocks: [..., D] (token-local). Returns (mixed, pi [..., n+1])."""
    V = torch.stack(list(blocks) + [p], dim=-2)          # [..., n+1, D]
    kappa = V / torch.sqrt((V * V).mean(-1, keepdim=True) + eps)
    score = (kappa * (w_norm * w_proj)).sum(-1)
    pi = torch.softmax(score, dim=-1)
    return (pi.unsqueeze(-1) * V).sum(-2), pi
