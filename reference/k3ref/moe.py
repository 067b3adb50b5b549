"""Router, experts (SiLU-GLU / SiTU-GLU), K3 latent MoE and 48B plain MoE (docs/architecture.md §4)."""
import torch

from .ops import linear, rmsnorm, sigmoid, silu

ROUTER_EPS = 1e-20


def router(x, W_r, bias, top_k, scaling, renormalize=True, variant=None):
    """s = sigmoid(W_r x); select top-k of s + bias; weights from UNBIASED s, renormalised over the
    chosen k (+1e-20), times routed_scaling_factor. Returns (idx [T,k] int64, w [T,k]) ordered by
    descending biased score (ties -> lower expert id first)."""
    s = sigmoid(linear(x, W_r.double()))
    sb = s + bias.double()
    # stable descending sort so equal scores keep the lower expert id first
    order = torch.sort(-sb, dim=-1, stable=True).indices
    idx = order[:, :top_k]
    src = sb if variant == "biased_weights" else s
    w = torch.gather(src, 1, idx)
    if renormalize:
        w = w / (w.sum(-1, keepdim=True) + ROUTER_EPS)
    return idx, w * scaling


def silu_glu(a, b):
    return silu(a) * b


def situ_glu(a, b, beta1=4.0, beta2=25.0):
    """[beta1 tanh(a/beta1) sigmoid(a)] * [beta2 tanh(b/beta2)]; sigmoid takes the uncapped a."""
    return (beta1 * torch.tanh(a / beta1) * sigmoid(a)) * (beta2 * torch.tanh(b / beta2))


def mlp(x, w_gate, w_up, w_down, act):
    """down(act(gate x, up x)); used for experts (w1=gate, w3=up, w2=down) and shared/dense MLPs."""
    return linear(act(linear(x, w_gate), linear(x, w_up)), w_down)


def moe_48b(x, W, cfg, act):
    """y = sum_i w_i E_i(x) + Shared(x). W: gate, bias, experts[e] = (w1, w2, w3), shared = (gate, up, down)."""
    idx, w = router(x, W["gate"], W["bias"], cfg["top_k"], cfg["scaling"], cfg.get("renormalize", True))
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            w1, w2, w3 = W["experts"][int(idx[t, j])]
            y[t] += w[t, j] * mlp(x[t:t + 1], w1, w3, w2, act)[0]
    if W.get("shared") is not None:
        y = y + mlp(x, *W["shared"], act)
    return y, idx, w


def moe_k3_latent(x, W, cfg, act, eps):
    """u = down x; r = sum_i w_i E_i(u); r = RMSNorm(r); y = up r + Shared(x). Routing on full-width x."""
    idx, w = router(x, W["gate"], W["bias"], cfg["top_k"], cfg["scaling"], cfg.get("renormalize", True))
    u = linear(x, W["latent_down"])
    r = torch.zeros_like(u)
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            w1, w2, w3 = W["experts"][int(idx[t, j])]
            r[t] += w[t, j] * mlp(u[t:t + 1], w1, w3, w2, act)[0]
    if W.get("latent_norm") is not None:   # latent_moe_use_norm
        r = rmsnorm(r, W["latent_norm"], eps)
    y = linear(r, W["latent_up"])
    if W.get("shared") is not None:
        y = y + mlp(x, *W["shared"], act)
    return y, idx, w
