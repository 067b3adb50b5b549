"""Kimi Delta Attention (docs/architecture.md §2), float64.

Shapes: T tokens, H heads, dk = dv = head_dim. q, k, g: [T, H, dk]; v: [T, H, dv]; beta: [T, H];
state S: [H, dk, dv] (rows = key channels, fla's [K, V] layout).
"""
import torch

from .ops import linear, rmsnorm, sigmoid, silu, softplus

L2_EPS = 1e-6


def l2norm(x, eps=L2_EPS):
    """x / sqrt(sum(x^2) + eps) over the last dim (eps inside the sqrt of the SUM)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


def head_A_log(A_log, num_heads, padded_ok):
    """Per-head A_log vector [H]. 48B stores [1,1,H,1]; K3 stores head_dim entries, first H real, rest 0."""
    a = A_log.reshape(-1).double()
    if padded_ok:
        if a.numel() < num_heads:
            raise ValueError("A_log shorter than num_heads")
        if (a[num_heads:] != 0).any():
            raise ValueError("K3 A_log padding entries beyond num_heads must be zero")
        a = a[:num_heads]
    elif a.numel() != num_heads:
        raise ValueError(f"A_log has {a.numel()} entries, expected num_heads={num_heads}")
    return a


def gate_48b(z_raw, A_log, dt_bias, num_heads):
    """g[h,d] = -exp(A_log[h]) * softplus(z[h,d] + dt_bias[h,d]). z_raw = f_b(f_a x): [T, H*dk]."""
    T = z_raw.shape[0]
    a = head_A_log(A_log, num_heads, padded_ok=False)
    z = (z_raw + dt_bias.double()).reshape(T, num_heads, -1)
    return -torch.exp(a).reshape(1, num_heads, 1) * softplus(z)


def gate_k3(z_raw, A_log, dt_bias, num_heads, lower_bound=-5.0):
    """g[h,d] = lower_bound * sigmoid(exp(A_log[h]) * (z[h,d] + dt_bias[h,d])), A_log sliced to H."""
    T = z_raw.shape[0]
    a = head_A_log(A_log, num_heads, padded_ok=True)
    z = (z_raw + dt_bias.double()).reshape(T, num_heads, -1)
    return lower_bound * sigmoid(torch.exp(a).reshape(1, num_heads, 1) * z)


def short_conv(x, w, state=None):
    """Depthwise causal conv (kernel K) + SiLU. x: [T, C] pre-conv inputs, w: [C, K] (or [C,1,K]),
    state: [K-1, C] previous pre-conv inputs (oldest first) or None (= zeros).
    u_t[c] = SiLU(sum_j w[c,j] * x_{t-(K-1)+j}[c]); tap K-1 multiplies the current token.
    Returns (u [T, C], new_state [K-1, C] = last K-1 pre-conv inputs)."""
    w = w.reshape(w.shape[0], -1).double()
    K = w.shape[1]
    T, C = x.shape
    if state is None:
        state = torch.zeros(K - 1, C)
    xx = torch.cat([state, x], 0)
    y = torch.zeros(T, C)
    for j in range(K):
        y = y + w[:, j] * xx[j:j + T]
    return silu(y), xx[T:].clone()


def recurrent(q, k, v, g, beta, S0=None):
    """Token-by-token KDA recurrence. q must already be L2-normalised AND scaled; k L2-normalised.
    S <- diag(exp(g_t)) S;  e = v_t - S^T k_t;  S <- S + beta_t k_t e^T;  o_t = S^T q_t."""
    T, H, dk = q.shape
    dv = v.shape[-1]
    S = torch.zeros(H, dk, dv) if S0 is None else S0.double().clone()
    o = torch.zeros(T, H, dv)
    for t in range(T):
        S = S * torch.exp(g[t]).unsqueeze(-1)
        e = v[t] - torch.einsum("hkv,hk->hv", S, k[t])
        S = S + beta[t].reshape(H, 1, 1) * k[t].unsqueeze(-1) * e.unsqueeze(1)
        o[t] = torch.einsum("hkv,hk->hv", S, q[t])
    return o, S


def _forward_subst_inverse(M):
    """(I + M)^-1 for strictly lower-triangular M, by forward substitution."""
    n = M.shape[0]
    Tm = torch.zeros(n, n)
    for i in range(n):
        row = torch.zeros(n)
        row[i] = 1.0
        for j in range(i):
            row = row - M[i, j] * Tm[j]
        Tm[i] = row
    return Tm


def chunked(q, k, v, g, beta, S0=None, chunk=64, variant=None):
    """Chunkwise WY/UT form of the same recurrence (spec 2.6), plain math, per head and chunk.
    variant (tests only): 'inv_sign' uses (I - M)^-1, 'p_no_diag' drops P's diagonal."""
    T, H, dk = q.shape
    dv = v.shape[-1]
    S_all = torch.zeros(H, dk, dv) if S0 is None else S0.double().clone()
    o = torch.zeros(T, H, dv)
    S_out = torch.zeros(H, dk, dv)
    for h in range(H):
        S = S_all[h]
        for c0 in range(0, T, chunk):
            c1 = min(T, c0 + chunk)
            n = c1 - c0
            Q, K, V, G, B = q[c0:c1, h], k[c0:c1, h], v[c0:c1, h], g[c0:c1, h], beta[c0:c1, h]
            Gam = torch.cumsum(G, 0)                          # [n, dk], inclusive
            D = Gam.unsqueeze(1) - Gam.unsqueeze(0)           # D[i,j] = Gam_i - Gam_j
            ii = torch.arange(n).unsqueeze(1)
            jj = torch.arange(n).unsqueeze(0)
            neg_inf = torch.full_like(D, float("-inf"))
            E_strict = torch.exp(torch.where((jj < ii).unsqueeze(-1), D, neg_inf))
            E_incl = torch.exp(torch.where((jj <= ii).unsqueeze(-1), D, neg_inf))
            M = B.unsqueeze(1) * torch.einsum("id,jd,ijd->ij", K, K, E_strict)
            Tinv = _forward_subst_inverse(-M if variant == "inv_sign" else M)
            A = Tinv * B.unsqueeze(0)                        # T diag(beta)
            W = A @ (torch.exp(Gam) * K)
            U = A @ V
            Vn = U - W @ S
            P = torch.einsum("id,jd,ijd->ij", Q, K, E_strict if variant == "p_no_diag" else E_incl)
            o[c0:c1, h] = (Q * torch.exp(Gam)) @ S + P @ Vn
            gl = Gam[-1]
            S = torch.exp(gl).unsqueeze(1) * S + (K * torch.exp(gl.unsqueeze(0) - Gam)).t() @ Vn
        S_out[h] = S
    return o, S_out


def new_state(H, dk, dv, Pk, Pv, K=4):
    return {"conv_q": torch.zeros(K - 1, Pk), "conv_k": torch.zeros(K - 1, Pk),
            "conv_v": torch.zeros(K - 1, Pv), "S": torch.zeros(H, dk, dv)}


def kda_layer(x, W, form, num_heads, head_dim, eps, state=None, lower_bound=-5.0, core="recurrent"):
    """Full KDA mixer on x [T, D] (already input-normed). W: dict of float64 tensors with keys
    q_proj k_proj v_proj q_conv1d k_conv1d v_conv1d f_a_proj f_b_proj dt_bias A_log b_proj o_norm o_proj
    and g_proj (full-rank gate) or g_a_proj/g_b_proj. form 'k3' = bounded sigmoid decay gate,
    '48b' = -exp(A)*softplus decay gate. Returns (out [T, D], new state dict)."""
    T = x.shape[0]
    H, dk = num_heads, head_dim
    if state is None:
        state = new_state(H, dk, dk, H * dk, H * dk)
    q, cq = short_conv(linear(x, W["q_proj"]), W["q_conv1d"], state["conv_q"])
    k, ck = short_conv(linear(x, W["k_proj"]), W["k_conv1d"], state["conv_k"])
    v, cv = short_conv(linear(x, W["v_proj"]), W["v_conv1d"], state["conv_v"])
    q = l2norm(q.reshape(T, H, dk)) * dk ** -0.5
    k = l2norm(k.reshape(T, H, dk))
    v = v.reshape(T, H, dk)
    z = linear(linear(x, W["f_a_proj"]), W["f_b_proj"])
    if form == "k3":
        g = gate_k3(z, W["A_log"], W["dt_bias"], H, lower_bound)
    else:
        g = gate_48b(z, W["A_log"], W["dt_bias"], H)
    beta = sigmoid(linear(x, W["b_proj"]))
    if core == "recurrent":
        o, S = recurrent(q, k, v, g, beta, state["S"])
    else:
        o, S = chunked(q, k, v, g, beta, state["S"], chunk=core)
    if "g_proj" in W:      # full-rank output gate (K3 use_full_rank_gate)
        gam = linear(x, W["g_proj"])
    else:                  # low-rank g_a/g_b (48B), no bias
        gam = linear(linear(x, W["g_a_proj"]), W["g_b_proj"])
    y = rmsnorm(o, W["o_norm"], eps) * sigmoid(gam.reshape(T, H, dk))
    out = linear(y.reshape(T, H * dk), W["o_proj"])
    return out, {"conv_q": cq, "conv_k": ck, "conv_v": cv, "S": S}
