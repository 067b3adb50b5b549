"""Self-checks of the reference math and the section-7 wrong variants."""
import torch

from common import assert_close, assert_wrong
from k3ref import kda, mla, moe, mxfp4, st
from k3ref.util import f32, f64, gen, randn32


def _kda_inputs(seed, T, H, dk):
    g = gen(seed)
    q = kda.l2norm(f64(randn32(g, T, H, dk))) * dk ** -0.5
    k = kda.l2norm(f64(randn32(g, T, H, dk)))
    v = f64(randn32(g, T, H, dk))
    gg = -5.0 * torch.sigmoid(f64(randn32(g, T, H, dk, std=2.0)))
    beta = torch.sigmoid(f64(randn32(g, T, H)))
    S0 = f64(randn32(g, H, dk, dk, std=0.5))
    return q, k, v, gg, beta, S0


def test_recurrent_vs_chunked():
    q, k, v, g, b, S0 = _kda_inputs(1, 70, 4, 16)
    o, S = kda.recurrent(q, k, v, g, b, S0)
    for C in (16, 32, 64):
        oc, Sc = kda.chunked(q, k, v, g, b, S0, chunk=C)
        assert_close(oc, o, 1e-12, f"chunked C={C} output")
        assert_close(Sc, S, 1e-12, f"chunked C={C} state")


def test_kda_wrong_variants():
    q, k, v, g, b, S0 = _kda_inputs(2, 70, 4, 16)
    o, _ = kda.recurrent(q, k, v, g, b, S0)
    assert_wrong(kda.chunked(q, k, v, g, b, S0, 16, variant="inv_sign")[0], o, 0.01, "KDA chunk: (I - M)^-1 instead of (I + M)^-1")
    assert_wrong(kda.chunked(q, k, v, g, b, S0, 16, variant="p_no_diag")[0], o, 0.3, "KDA chunk: P without its diagonal")
    # decay after the write
    T, H, dk = q.shape
    S = S0.clone()
    ow = torch.zeros_like(o)
    for t in range(T):
        e = v[t] - torch.einsum("hkv,hk->hv", S, k[t])
        S = S + b[t].reshape(H, 1, 1) * k[t].unsqueeze(-1) * e.unsqueeze(1)
        S = S * torch.exp(g[t]).unsqueeze(-1)
        ow[t] = torch.einsum("hkv,hk->hv", S, q[t])
    assert_wrong(ow, o, 0.05, "KDA recurrence: decay after the write")
    # read before the write
    S = S0.clone()
    for t in range(T):
        S = S * torch.exp(g[t]).unsqueeze(-1)
        ow[t] = torch.einsum("hkv,hk->hv", S, q[t])
        e = v[t] - torch.einsum("hkv,hk->hv", S, k[t])
        S = S + b[t].reshape(H, 1, 1) * k[t].unsqueeze(-1) * e.unsqueeze(1)
    assert_wrong(ow, o, 0.05, "KDA recurrence: read before the write")


def test_gate_per_head():
    g = gen(3)
    H, dk, T = 4, 16, 70
    A = torch.linspace(-0.4, 1.2, H, dtype=torch.float64)
    A_pad = torch.cat([A, torch.zeros(dk - H, dtype=torch.float64)])
    z = f64(randn32(g, T, H * dk, std=1.5))
    dt = f64(randn32(g, H * dk, mean=-1.0))
    gk3 = kda.gate_k3(z, A_pad, dt, H)
    # perturbing A_log[h] changes only head h
    A2 = A_pad.clone()
    A2[2] += 0.3
    d = (kda.gate_k3(z, A2, dt, H) - gk3).abs().sum((0, 2))
    assert d[2] > 0 and d[0] == 0 and d[1] == 0 and d[3] == 0
    # padding must be zero
    bad = A_pad.clone()
    bad[H + 1] = 0.5
    try:
        kda.gate_k3(z, bad, dt, H)
        raise AssertionError("non-zero A_log padding accepted")
    except ValueError:
        pass
    # wrong: per-channel A_log (A_log[d] for channel d), and the 48B family on K3
    wrong = -5.0 * torch.sigmoid(torch.exp(A_pad).repeat(H).reshape(1, H, dk) * (z + dt).reshape(T, H, dk))
    q, k, v, _, b, S0 = _kda_inputs(4, T, H, dk)
    o, _ = kda.recurrent(q, k, v, gk3, b, S0)
    assert_wrong(kda.recurrent(q, k, v, wrong, b, S0)[0], o, 0.01, "KDA gate: A_log indexed per channel")
    g48 = kda.gate_48b(z, A.reshape(1, 1, H, 1), dt, H)
    assert_wrong(kda.recurrent(q, k, v, g48, b, S0)[0], o, 0.05, "KDA gate: 48B softplus family on K3")


def _absorbed(x, W, cfg):
    """Absorbed MLA decode (test-only): cache (c, k_pe); q~ = W_UK^T q_nope; o = W_UV (sum p c)."""
    T = x.shape[0]
    H, n, r, dv, L = cfg["num_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    from k3ref.ops import rmsnorm, linear
    if cfg.get("q_lora_rank"):
        q = linear(rmsnorm(linear(x, W["q_a_proj"]), W["q_a_layernorm"], mla.MLA_NORM_EPS), W["q_b_proj"])
    else:
        q = linear(x, W["q_proj"])
    q = q.reshape(T, H, n + r)
    a = linear(x, W["kv_a_proj_with_mqa"])
    c = rmsnorm(a[:, :L], W["kv_a_layernorm"], mla.MLA_NORM_EPS)
    kpe = a[:, L:]
    kvb = W["kv_b_proj"].reshape(H, n + dv, L)
    Wuk, Wuv = kvb[:, :n], kvb[:, n:]
    out = torch.zeros(T, H, dv)
    for t in range(T):
        for h in range(H):
            qt = Wuk[h].t() @ q[t, h, :n]
            sc = (c[:t + 1] @ qt + kpe[:t + 1] @ q[t, h, n:]) * (n + r) ** -0.5
            p = torch.softmax(sc, 0)
            out[t, h] = Wuv[h] @ (p @ c[:t + 1])
    o = out.reshape(T, H * dv)
    if cfg.get("output_gate"):
        o = o * torch.sigmoid(linear(x, W["g_proj"]))
    return linear(o, W["o_proj"])


def _mla_setup(form):
    import components
    g = gen(50)
    cfg = {"num_heads": 4, "qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32,
           "q_lora_rank": 64 if form == "k3" else None, "output_gate": form == "k3"}
    W = {k: f64(v) for k, v in components.make_mla_weights(g, 128, cfg).items()}
    x = f64(randn32(g, 9, 128))
    return cfg, W, x


def test_mla_absorbed_vs_expanded():
    for form in ("k3", "48b"):
        cfg, W, x = _mla_setup(form)
        o, _ = mla.mla_layer(x, W, cfg)
        assert_close(_absorbed(x, W, cfg), o, 1e-12, f"absorbed vs expanded MLA ({form})")
        # split prefill/decode with the latent cache equals one pass
        o1, cache = mla.mla_layer(x[:5], W, cfg)
        o2, _ = mla.mla_layer(x[5:], W, cfg, cache)
        assert_close(torch.cat([o1, o2]), o, 1e-12, f"MLA cache continuation ({form})")


def test_mla_wrong_variants():
    g = gen(51)
    T, H, n, r, dv = 8, 4, 24, 8, 16
    qn, qp, kn, v = (f64(randn32(g, T, H, d)) for d in (n, r, n, dv))
    kp = f64(randn32(g, T, r))
    o = mla.attention_core(qn, qp, kn, kp, v)
    assert_wrong(mla.attention_core(qn, qp, kn, kp, v, variant="scale_nope_only"), o, 0.01, "MLA: scale nope^-1/2 instead of (nope+rope)^-1/2")
    # RoPE applied to the 8 rope dims (theta 10000, neox halves)
    pos = torch.arange(T, dtype=torch.float64)
    inv = 10000.0 ** (-torch.arange(0, r, 2, dtype=torch.float64) / r)
    ang = pos[:, None] * inv[None]
    cos, sin = torch.cos(ang), torch.sin(ang)

    def rope(x):
        x1, x2 = x[..., : r // 2], x[..., r // 2:]
        cc = cos.reshape(T, *([1] * (x.dim() - 2)), r // 2)
        ss = sin.reshape(T, *([1] * (x.dim() - 2)), r // 2)
        return torch.cat([x1 * cc - x2 * ss, x1 * ss + x2 * cc], -1)
    assert_wrong(mla.attention_core(qn, rope(qp), kn, rope(kp), v), o, 0.01, "MLA: RoPE applied to the rope dims")
    # kv_b per-head split order [v | k_nope] instead of [k_nope | v]
    cfg, W, x = _mla_setup("k3")
    out, _ = mla.mla_layer(x, W, cfg)
    kvb = W["kv_b_proj"].reshape(4, 40, 32)
    W2 = dict(W)
    W2["kv_b_proj"] = torch.cat([kvb[:, 24:40], kvb[:, 0:16], kvb[:, 16:24]], 1).reshape(160, 32)
    assert_wrong(mla.mla_layer(x, W2, cfg)[0], out, 0.05, "MLA: kv_b rows [v|k_nope] instead of [k_nope|v]")


def test_router_and_moe_variants():
    import components
    name, items, _ = components.c_moe("k3")
    d = dict(items)
    assert name == "moe_k3_latent"
    # weights: unbiased renormalised x factor; biased weights differ
    x = f64(d["x"])
    idx, w = moe.router(x, f64(d["gate.weight"]), f64(d["gate.e_score_correction_bias"]), 4, 1.0)
    s = torch.sigmoid(x @ f64(d["gate.weight"]).t())
    ww = torch.gather(s, 1, idx)
    assert_close(w, ww / ww.sum(-1, keepdim=True), 1e-14, "router weights")
    _, wb = moe.router(x, f64(d["gate.weight"]), f64(d["gate.e_score_correction_bias"]), 4, 1.0, variant="biased_weights")
    assert_wrong(wb, w, 1e-3, "router: weights from biased scores")
    # 48B factor: a uniform 2.446x on the routed part
    _, w48 = moe.router(x, f64(d["gate.weight"]), f64(d["gate.e_score_correction_bias"]), 4, 2.446)
    assert_close(w48, w * 2.446, 1e-15, "routed_scaling_factor")
    # SiTU bounds other than 4 / 25 move the routed and the shared part alike
    routed = d["out"] - d["dbg.shared_out"]
    assert_wrong(d["situ.dbg.shared_out"], d["dbg.shared_out"], 1e-2, "SiTU: shared expert with bounds 4 / 25 instead of the config's")
    assert_wrong(d["situ.out"] - d["situ.dbg.shared_out"], routed, 1e-2, "SiTU: routed experts with bounds 4 / 25 instead of the config's")


def test_mxfp4():
    g = gen(60)
    w = randn32(g, 32, 128, std=0.1)
    p, s = mxfp4.quantize(w)
    d = mxfp4.decode(p, s)
    p2, s2 = mxfp4.quantize(d)
    assert torch.equal(mxfp4.decode(p2, s2), d), "quantize(decode(x)) must reproduce decode(x)"
    blocks = f64(w).reshape(32, 4, 32).abs().amax(-1) / mxfp4.SCALE_LUT[s.long()]
    assert ((blocks > 3) & (blocks <= 6)).all(), "block amax/scale must lie in (3, 6]"
    hp = torch.zeros(1, 16, dtype=torch.uint8)
    hp[0, 0] = 0x21
    assert mxfp4.decode(hp, torch.tensor([[127]], dtype=torch.uint8))[0, :2].tolist() == [0.5, 1.0]
    assert mxfp4.decode(hp, torch.tensor([[126]], dtype=torch.uint8))[0, :2].tolist() == [0.25, 0.5]
    try:
        mxfp4.decode(hp, torch.tensor([[255]], dtype=torch.uint8))
        raise AssertionError("scale 0xFF accepted")
    except ValueError:
        pass
    x = f64(randn32(g, 128))
    y = d @ x
    assert_close(mxfp4.matvec_blockwise(p, s, x), y, 1e-14, "blockwise matvec")
    sw = (((p & 0x0F) << 4) | (p >> 4)).to(torch.uint8)
    assert_wrong(mxfp4.decode(sw, s) @ x, y, 0.1, "MXFP4: low/high nibble swapped")
    # ggml order (first 16 / last 16 split) instead of even/odd
    c = mxfp4.codes(p).reshape(32, 4, 32)
    ggml = torch.cat([c[..., 0::2], c[..., 1::2]], -1).reshape(32, 128)
    vals = (mxfp4.LUT[ggml].reshape(32, 4, 32) * mxfp4.SCALE_LUT[s.long()].unsqueeze(-1)).reshape(32, 128)
    assert_wrong(vals @ x, y, 0.1, "MXFP4: ggml element order on compressed-tensors bytes")


def test_safetensors_roundtrip():
    import tempfile
    import os
    items = [("a.f64", torch.randn(3, 2, dtype=torch.float64)), ("b.f32", torch.randn(5, dtype=torch.float32)),
             ("c.bf16", torch.randn(2, 3).to(torch.bfloat16)), ("d.u8", torch.arange(6, dtype=torch.uint8).reshape(2, 3)),
             ("e.i64", torch.tensor([1, -2, 3], dtype=torch.int64)), ("f.empty", torch.zeros(2, 0))]
    with tempfile.TemporaryDirectory() as t:
        pth = os.path.join(t, "x.safetensors")
        st.save(pth, items, sort_by_width=True)
        back = st.load(pth)
        for n, v in items:
            assert back[n].dtype == v.dtype and torch.equal(back[n], v), n
        data = open(pth, "rb").read()
        try:
            st.parse(data + b"\0")
            raise AssertionError("trailing byte accepted")
        except ValueError:
            pass


def test_mla_core_latent_absorbed():
    import components
    _, items, _ = components.c_mla_core_k3()
    d = dict(items)
    H, n, dv, L = 2, 128, 128, 512
    c, kvb = f64(d["latent.c"]), f64(d["latent.kv_b_proj"]).reshape(H, n + dv, L)
    qn, qp, kp = f64(d["latent.q_nope"]), f64(d["latent.q_pe"]), f64(d["latent.k_pe"])
    T = c.shape[0]
    o = torch.zeros(T, H, dv)
    for t in range(T):
        for h in range(H):
            qt = kvb[h, :n].t() @ qn[t, h]
            p = torch.softmax((c[:t + 1] @ qt + kp[:t + 1] @ qp[t, h]) * 192 ** -0.5, 0)
            o[t, h] = kvb[h, n:] @ (p @ c[:t + 1])
    assert_close(o, d["latent.o"], 1e-12, "absorbed latent MLA at kv_lora 512")


def test_config_refusals():
    import copy
    import json
    import os
    import common
    from k3ref.model import Config
    with open(os.path.join(common.REPO, "fixtures", "models", "tiny-k3", "config.json")) as f:
        raw = json.load(f)
    for mutate, why in ((lambda c: c["text_config"]["linear_attn_config"].pop("full_attn_layers"), "no layer map"),
                        (lambda c: c["text_config"]["linear_attn_config"].__setitem__("full_attn_layers", [0, 3, 7, 11, 12]), "0-based map"),
                        (lambda c: c["text_config"]["linear_attn_config"].__setitem__("kda_layers", [1, 2]), "kda_layers mismatch"),
                        (lambda c: c["text_config"].__setitem__("hidden_act", "gelu"), "unknown activation")):
        bad = copy.deepcopy(raw)
        mutate(bad)
        try:
            Config(bad)
            raise AssertionError(f"config accepted with {why}")
        except ValueError:
            pass
    Config(raw)
