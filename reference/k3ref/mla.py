"""MLA as used by Kimi (docs/architecture.md §3): NoPE, expanded (non-absorbed) form, float64.

The cache holds, per past position, the normalised latent c [kv_lora] and the shared k_pe [rope]
(what any engine caches); attention is computed by expanding c through kv_b_proj for every position.
"""
import torch

from .ops import linear, rmsnorm, sigmoid

MLA_NORM_EPS = 1e-6  # q_a_layernorm / kv_a_layernorm class default (Moonshot 48B + NeMo K3 code)


def attention_core(q_nope, q_pe, k_nope, k_pe, v, q_pos0=0, variant=None):
    """q_nope [T,H,n], q_pe [T,H,r], k_nope [S,H,n], k_pe [S,r] (shared by heads), v [S,H,dv].
    Query t sits at absolute position q_pos0+t, key s at position s; causal: s <= q_pos0+t.
    score = (q_nope.k_nope + q_pe.k_pe) * (n+r)^-1/2, softmax over s, o = sum p v. Returns [T,H,dv]."""
    T, H, n = q_nope.shape
    r = q_pe.shape[-1]
    S = k_nope.shape[0]
    scale = (n + r) ** -0.5 if variant != "scale_nope_only" else n ** -0.5
    sc = torch.einsum("thn,shn->hts", q_nope, k_nope) + torch.einsum("thr,sr->hts", q_pe, k_pe)
    sc = sc * scale
    mask = torch.arange(S).unsqueeze(0) <= (q_pos0 + torch.arange(T)).unsqueeze(1)
    sc = torch.where(mask.unsqueeze(0), sc, torch.full_like(sc, float("-inf")))
    p = torch.softmax(sc, dim=-1)
    return torch.einsum("hts,shv->thv", p, v)


def new_cache(kv_lora, rope):
    return {"c": torch.zeros(0, kv_lora), "k_pe": torch.zeros(0, rope)}


def mla_layer(x, W, cfg, cache=None):
    """x [T, D] (already input-normed). cfg keys: num_heads, q_lora_rank (None = plain q_proj),
    kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, output_gate (bool).
    W keys: q_proj | (q_a_proj, q_a_layernorm, q_b_proj), kv_a_proj_with_mqa, kv_a_layernorm,
    kv_b_proj, o_proj, [g_proj]. Returns (out [T, D], new cache)."""
    T = x.shape[0]
    H, n, r, dv, L = (cfg["num_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                      cfg["v_head_dim"], cfg["kv_lora_rank"])
    if cfg.get("q_lora_rank"):
        q = linear(rmsnorm(linear(x, W["q_a_proj"]), W["q_a_layernorm"], MLA_NORM_EPS), W["q_b_proj"])
    else:
        q = linear(x, W["q_proj"])
    q = q.reshape(T, H, n + r)
    q_nope, q_pe = q[..., :n], q[..., n:]
    a = linear(x, W["kv_a_proj_with_mqa"])
    c = rmsnorm(a[:, :L], W["kv_a_layernorm"], MLA_NORM_EPS)
    k_pe = a[:, L:]
    if cache is None:
        cache = new_cache(L, r)
    pos0 = cache["c"].shape[0]
    c_all = torch.cat([cache["c"], c], 0)
    kpe_all = torch.cat([cache["k_pe"], k_pe], 0)
    kv = linear(c_all, W["kv_b_proj"]).reshape(-1, H, n + dv)   # per head rows [k_nope | v]
    o = attention_core(q_nope, q_pe, kv[..., :n], kpe_all, kv[..., n:], q_pos0=pos0)
    o = o.reshape(T, H * dv)
    if cfg.get("output_gate"):
        o = o * sigmoid(linear(x, W["g_proj"]))
    return linear(o, W["o_proj"]), {"c": c_all, "k_pe": kpe_all}
