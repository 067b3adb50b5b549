"""Component (op-level) fixtures: fixtures/components/*.safetensors + MANIFEST.json.

Every function returns (filename, items, manifest_entry). Inputs meant for fp32 kernels are stored F32;
the reference is computed in float64 from exactly those F32 values; expected outputs are F64.
"""
import math

import torch

from k3ref import attnres, kda, mla, moe, mxfp4
from k3ref.ops import rmsnorm, silu
from k3ref.util import f32, f64, gen, linspace32, rand32, randn32

DEFAULT_TOL = {"atol": 1e-5, "rtol": 1e-4}


def _entry(name, tests, invariant, tol, tensors_doc):
    return {"file": f"{name}.safetensors", "name": name, "tests": tests, "invariant": invariant,
            "tolerance": tol, "tensors": tensors_doc}


# ----------------------------------------------------------------------------------------- mxfp4
def c_mxfp4():
    items = []
    # hand bytes: 0x21 -> low nibble 1 (0.5, element 0), high nibble 2 (1.0, element 1)
    hp = torch.zeros(2, 16, dtype=torch.uint8)
    hp[:, 0] = 0x21
    hp[:, 1] = 0x7F   # elements 2,3 = -6 (code 15), 6 (code 7)
    hp[:, 15] = 0x98  # elements 30,31: low code 8 = -0, high code 9 = -0.5
    hs = torch.tensor([[127], [126]], dtype=torch.uint8)
    items += [("hand.packed", hp), ("hand.scale", hs), ("hand.expected", mxfp4.decode(hp, hs))]
    # every code under several scales: low nibbles 0..15, high nibbles 15..0
    scales = [0, 1, 64, 120, 126, 127, 128, 140, 200, 252]
    row = torch.tensor([j | ((15 - j) << 4) for j in range(16)], dtype=torch.uint8)
    ap = row.repeat(len(scales), 1)
    asc = torch.tensor(scales, dtype=torch.uint8).reshape(-1, 1)
    swapped = ((ap & 0x0F) << 4) | (ap >> 4)
    items += [("codes.packed", ap), ("codes.scale", asc), ("codes.expected", mxfp4.decode(ap, asc)),
              ("codes.nibble_swapped_expected", mxfp4.decode(swapped.to(torch.uint8), asc))]
    # random packed matrix [64 out, 128 in] from quantising random weights, + x, y = W x
    g = gen(101)
    w = randn32(g, 64, 128, std=0.05)
    rp, rs = mxfp4.quantize(w)
    x = randn32(g, 128)
    dq = mxfp4.decode(rp, rs)
    items += [("matvec.packed", rp), ("matvec.scale", rs), ("matvec.x", x),
              ("matvec.dequant", dq), ("matvec.y", dq @ f64(x)),
              ("matvec.y_blockwise", mxfp4.matvec_blockwise(rp, rs, f64(x)))]
    # quantise round trip: random rows, exact grid midpoints (RNE ties), zeros, a zero block
    q = randn32(g, 8, 64)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0], dtype=torch.float32)
    q[0, :32] = torch.cat([mids, -mids, mids * 2.0 ** -3, -mids * 2.0 ** 5])
    q[1, :32] = 0.0
    q[2, 32:] = linspace32(-1e-3, 1e-3, 32)
    q[3, :] = q[3, :] * 1000.0
    qp, qs = mxfp4.quantize(q)
    qd = mxfp4.decode(qp, qs)
    qp2, qs2 = mxfp4.quantize(qd)
    assert torch.equal(mxfp4.decode(qp2, qs2), qd), "MXFP4 quantise(decode(.)) must be idempotent"
    items += [("quant.input", q), ("quant.packed", qp), ("quant.scale", qs), ("quant.decoded", qd)]
    # a block with scale 0xFF that readers must reject
    items += [("reject.packed", torch.full((1, 16), 0x22, dtype=torch.uint8)),
              ("reject.scale", torch.tensor([[255]], dtype=torch.uint8))]
    doc = {
        "hand.packed U8[2,16], hand.scale U8[2,1]": "byte 0x21 etc.; row 0 scale 127, row 1 scale 126",
        "hand.expected F64[2,32]": "row0 starts [0.5, 1.0, -6, 6]; row1 is half of row0",
        "codes.* ": "every code in low and high nibble under scales 0,1,64,120,126,127,128,140,200,252 (scale 0 => 2^-127, subnormal in fp32: never flush)",
        "codes.nibble_swapped_expected F64": "what a low/high nibble swap would decode to (must NOT match)",
        "matvec.packed U8[64,64], matvec.scale U8[64,4], matvec.x F32[128]": "random expert-like matrix",
        "matvec.dequant F64[64,128], matvec.y F64[64], matvec.y_blockwise F64[64]": "y = W x (dequant-then-matmul and the spec 5.4 per-block order; equal to ~1e-15)",
        "quant.input F32[8,64] -> quant.packed U8[8,32], quant.scale U8[8,2], quant.decoded F64": "quantiser: s=127+e, e smallest with 6*2^e >= block amax; RNE onto E2M1 (ties to even code), saturate at 6; sign bit kept (-0 possible). Bytes must match exactly.",
        "reject.packed/reject.scale": "scale 0xFF must be refused",
    }
    tol = {"decode": {"atol": 0, "rtol": 0}, "quantize": "byte-exact",
           "matvec.y": {"atol": 1e-6, "rtol": 1e-5}}
    return "mxfp4", items, _entry("mxfp4", "MXFP4 E2M1/E8M0 decode, packed matvec, quantise",
                                  "section 7.4 nibble order (low = even), scale bias 127, blocks along input dim",
                                  tol, doc)


# --------------------------------------------------------------------------------------- rmsnorm
def c_rmsnorm():
    g = gen(102)
    x = randn32(g, 6, 128)
    x[1] *= 1000.0
    x[2] *= 1e-3
    x[3] = 0.0
    w = randn32(g, 128, std=0.2, mean=1.0)
    items = [("x", x), ("w", w), ("eps", torch.tensor([1e-5], dtype=torch.float64)),
             ("y", rmsnorm(f64(x), f64(w), 1e-5))]
    doc = {"x F32[6,128]": "rows: random, x1000, x1e-3, zeros, random, random", "w F32[128]": "plain weight (not 1+w)",
           "eps F64[1]": "1e-5", "y F64[6,128]": "w * x / sqrt(mean(x^2) + eps)"}
    return "rmsnorm", items, _entry("rmsnorm", "RMSNorm", "plain weight, eps inside the sqrt of the mean",
                                     DEFAULT_TOL, doc)


# -------------------------------------------------------------------------------------- situ_glu
def c_situ():
    # 0.1 .. 1000 from decimal strings (correctly rounded parse; no vector pow)
    mags = torch.tensor([float(f"{m}e{k}") for k in range(-1, 3) for m in ("1", "1.25", "1.6", "2", "2.5", "3.2", "4", "5", "6.4", "8")]
                        + [1000.0], dtype=torch.float64)
    vals = torch.cat([-mags.flip(0), torch.zeros(1, dtype=torch.float64), mags])   # 81 values
    a = f32(vals.repeat_interleave(len(vals)))
    b = f32(vals.repeat(len(vals)))
    out = moe.situ_glu(f64(a), f64(b))
    assert out.abs().max() <= 100.0
    items = [("a", a), ("b", b), ("out", out), ("silu_glu_out", moe.silu_glu(f64(a), f64(b))),
             ("bound", torch.tensor([100.0], dtype=torch.float64))]
    doc = {"a F32[6561], b F32[6561]": "all pairs of {0, +-(1, 1.25, 1.6, 2, 2.5, 3.2, 4, 5, 6.4, 8) x 10^k spanning 0.1..1000} (gate a, up b)",
           "out F64": "SiTU-GLU: 4 tanh(a/4) sigmoid(a) * 25 tanh(b/25)", "silu_glu_out F64": "SiLU(a)*b (48B) for contrast",
           "bound F64[1]": "|out| <= 100"}
    return "situ_glu", items, _entry("situ_glu", "SiTU-GLU activation (K3) and SiLU-GLU (48B)",
                                      "beta1=4 beta2=25, sigmoid on the uncapped gate; bounded by 100",
                                      {"atol": 1e-5, "rtol": 1e-5}, doc)


# -------------------------------------------------------------------------------------- kda gate
def c_kda_gate(form):
    g = gen(103 if form == "k3" else 104)
    H, dk, T = 8, 16, 3
    A = linspace32(-0.4, 1.2, H)
    z_raw = randn32(g, T, H * dk, std=1.5)
    dt_bias = randn32(g, H * dk, std=1.0, mean=-1.0 if form == "k3" else -2.0)
    if form == "k3":
        A_store = torch.cat([A, torch.zeros(dk - H, dtype=torch.float32)])    # padded to head_dim
        gg = kda.gate_k3(f64(z_raw), f64(A_store), f64(dt_bias), H, -5.0)
        # invariant: per-channel A_log misindex gives a different answer
        wrong = -5.0 * torch.sigmoid(torch.exp(f64(A_store)).repeat(H) * (f64(z_raw) + f64(dt_bias))).reshape(T, H, dk)
    else:
        A_store = A.reshape(1, 1, H, 1)
        gg = kda.gate_48b(f64(z_raw), f64(A_store), f64(dt_bias), H)
        wrong = None
    items = [("z_raw", z_raw), ("A_log", A_store), ("dt_bias", dt_bias), ("g", gg), ("alpha", torch.exp(gg))]
    if wrong is not None:
        items.append(("g_wrong_per_channel", wrong))
    name = f"kda_gate_{form}"
    doc = {"z_raw F32[3,128]": "f_b(f_a x) before dt_bias, heads H=8 x dk=16",
           "A_log F32": "[16] = linspace(-0.4,1.2,8) then 8 zeros (K3 padding)" if form == "k3" else "[1,1,8,1] = linspace(-0.4,1.2,8)",
           "dt_bias F32[128]": "", "g F64[3,8,16]": ("-5*sigmoid(exp(A_log[h])*(z+dt_bias))" if form == "k3" else "-exp(A_log[h])*softplus(z+dt_bias)"),
           "alpha F64[3,8,16]": "exp(g)"}
    if wrong is not None:
        doc["g_wrong_per_channel F64"] = "what indexing A_log per channel would give (must NOT match)"
    return name, items, _entry(name, f"KDA forget gate, {form} form", "section 7.1: A_log per head; K3 uses first num_heads of the padded vector",
                               DEFAULT_TOL, doc)


# ------------------------------------------------------------------------------------ short conv
def c_short_conv():
    g = gen(105)
    C = 64
    w = randn32(g, C, 1, 4, std=0.5)
    x1 = randn32(g, 5, C)
    x2 = randn32(g, 3, C)
    s0 = randn32(g, 3, C)
    o1, st1 = kda.short_conv(f64(x1), f64(w), None)
    o2, st2 = kda.short_conv(f64(x2), f64(w), st1)
    of, stf = kda.short_conv(torch.cat([f64(x1), f64(x2)]), f64(w), None)
    assert torch.allclose(torch.cat([o1, o2]), of, atol=0, rtol=1e-13)
    o3, st3 = kda.short_conv(f64(x2), f64(w), f64(s0))
    items = [("w", w), ("x1", x1), ("out1", o1), ("state1", st1), ("x2", x2), ("out2", o2), ("state2", st2),
             ("s0", s0), ("out3", o3), ("state3", st3)]
    doc = {"w F32[64,1,4]": "depthwise kernel, tap 3 multiplies the current token",
           "x1 F32[5,64] -> out1 F64[5,64], state1 F64[3,64]": "from zero state; out = SiLU(conv); state = last 3 pre-conv inputs (oldest first)",
           "x2 F32[3,64] -> out2, state2": "continuation from state1 (must equal a full 8-token run)",
           "s0 F32[3,64], x2 -> out3, state3": "from an arbitrary non-zero state"}
    return "short_conv", items, _entry("short_conv", "KDA causal depthwise conv + SiLU with carried state",
                                        "conv reads its carried state; tap order", DEFAULT_TOL, doc)


# ---------------------------------------------------------------------------------- kda core
def _kda_inputs(g, T, H, dk, s0_scale=0.5):
    q = f32(kda.l2norm(f64(randn32(g, T, H, dk))) * dk ** -0.5)
    k = f32(kda.l2norm(f64(randn32(g, T, H, dk))))
    v = randn32(g, T, H, dk)
    gg = rand32(g, T, H, dk, lo=-5.0, hi=0.0)       # log decay in (-5, 0] (the K3 range)
    beta = rand32(g, T, H, lo=0.02, hi=0.98)
    S0 = randn32(g, H, dk, dk, std=s0_scale)
    return q, k, v, gg, beta, S0


def c_kda_recurrent_tiny():
    g = gen(106)
    items = []
    for T in (1, 70):
        q, k, v, gg, beta, S0 = _kda_inputs(g, T, 4, 16)
        o, S = kda.recurrent(f64(q), f64(k), f64(v), f64(gg), f64(beta), f64(S0))
        p = f"t{T}."
        items += [(p + "q", q), (p + "k", k), (p + "v", v), (p + "g", gg), (p + "beta", beta), (p + "S0", S0),
                  (p + "o", o), (p + "S", S)]
    doc = {"t{1,70}.q F32[T,4,16]": "already L2-normalised and scaled by 16^-0.5", "t*.k F32": "L2-normalised",
           "t*.v F32[T,4,16], t*.g F32[T,4,16] (log decay, uniform in (-5,0]), t*.beta F32[T,4], t*.S0 F32[4,16,16] ([K,V] layout)": "",
           "t*.o F64[T,4,16], t*.S F64[4,16,16]": "decay, e=v-S^T k, S+=beta k e^T, o=S^T q (after the write)"}
    return "kda_recurrent", items, _entry("kda_recurrent", "KDA recurrence at tiny shape (T=1, T=70, non-zero S0)",
                                           "section 7.2 step order", DEFAULT_TOL, doc)


def c_kda_recurrent_k3():
    g = gen(107)
    T, H, dk = 3, 96, 128
    q = f32(kda.l2norm(f64(randn32(g, T, H, dk))) * dk ** -0.5)
    k = f32(kda.l2norm(f64(randn32(g, T, H, dk))))
    v = randn32(g, T, H, dk)
    gg = rand32(g, T, H, dk, lo=-5.0, hi=0.0)
    beta = rand32(g, T, H, lo=0.02, hi=0.98)
    u = randn32(g, H, dk, 2, std=0.3)
    w = randn32(g, H, dk, 2, std=0.3)
    S0 = f64(u) @ f64(w).transpose(1, 2)
    o, S = kda.recurrent(f64(q), f64(k), f64(v), f64(gg), f64(beta), S0)
    heads = torch.tensor([0, 95], dtype=torch.int64)
    items = [("q", q), ("k", k), ("v", v), ("g", gg), ("beta", beta), ("S0_u", u), ("S0_w", w),
             ("o", o), ("S_heads", heads), ("S_sel", S[heads]), ("S_head_sum", S.sum((1, 2))),
             ("S_head_sumsq", (S * S).sum((1, 2)))]
    doc = {"q,k,v,g F32[3,96,128], beta F32[3,96]": "as kda_recurrent (q pre-scaled by 128^-0.5; g uniform in (-5,0])",
           "S0_u, S0_w F32[96,128,2]": "S0[h] = S0_u[h] @ S0_w[h]^T (rank 2; keeps the file small)",
           "o F64[3,96,128]": "outputs", "S_heads I64[2], S_sel F64[2,128,128]": "final state of heads 0 and 95",
           "S_head_sum F64[96], S_head_sumsq F64[96]": "sum and sum of squares of every head's final state"}
    return "kda_recurrent_k3", items, _entry("kda_recurrent_k3", "KDA recurrence at K3's real head shape (96 x 128 x 128), T=3, non-zero S0",
                                              "section 7.2", DEFAULT_TOL, doc)


def c_kda_chunked():
    g = gen(106)
    _ = _kda_inputs(g, 1, 4, 16)
    q, k, v, gg, beta, S0 = _kda_inputs(g, 70, 4, 16)   # the same T=70 inputs as kda_recurrent
    items = [("q", q), ("k", k), ("v", v), ("g", gg), ("beta", beta), ("S0", S0)]
    o_r, S_r = kda.recurrent(f64(q), f64(k), f64(v), f64(gg), f64(beta), f64(S0))
    for C in (16, 64):
        o, S = kda.chunked(f64(q), f64(k), f64(v), f64(gg), f64(beta), f64(S0), chunk=C)
        assert (o - o_r).abs().max() < 1e-12 and (S - S_r).abs().max() < 1e-12
        items += [(f"c{C}.o", o), (f"c{C}.S", S)]
    o_bad, _ = kda.chunked(f64(q), f64(k), f64(v), f64(gg), f64(beta), f64(S0), chunk=16, variant="inv_sign")
    o_nd, _ = kda.chunked(f64(q), f64(k), f64(v), f64(gg), f64(beta), f64(S0), chunk=16, variant="p_no_diag")
    items += [("wrong.inv_sign.o", o_bad), ("wrong.p_no_diag.o", o_nd)]
    doc = {"q,k,v,g,beta,S0": "identical to kda_recurrent t70.* (T=70: not a multiple of 16 or 64)",
           "c16.o/c16.S, c64.o/c64.S F64": "chunked WY/UT form with chunk 16 / 64 (equal to the recurrence to ~1e-15)",
           "wrong.inv_sign.o, wrong.p_no_diag.o F64": "outputs of the two classic chunk bugs (must NOT match)"}
    return "kda_chunked", items, _entry("kda_chunked", "chunked (WY/UT) KDA vs the recurrence",
                                         "section 7.2: (I+M)^-1 with M strictly lower, P keeps its diagonal",
                                         {"atol": 1e-5, "rtol": 1e-5}, doc)


# ----------------------------------------------------------------------------------- kda layer
KDA_W_NAMES_K3 = ["q_proj", "k_proj", "v_proj", "q_conv1d", "k_conv1d", "v_conv1d", "f_a_proj", "f_b_proj",
                  "dt_bias", "A_log", "b_proj", "g_proj", "o_norm", "o_proj"]


def make_kda_weights(g, D, H, dk, form, as_dtype=torch.float32):
    P = H * dk
    W = {}
    W["q_proj"] = randn32(g, P, D, std=D ** -0.5)
    W["k_proj"] = randn32(g, P, D, std=D ** -0.5)
    W["v_proj"] = randn32(g, P, D, std=D ** -0.5)
    for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
        w = randn32(g, P, 1, 4, std=0.3)
        w[:, :, 3] += 1.0   # current-token tap dominant: keeps conv outputs O(1)
        W[n] = w
    W["f_a_proj"] = randn32(g, dk, D, std=D ** -0.5)
    W["f_b_proj"] = randn32(g, P, dk, std=dk ** -0.5)
    if form == "k3":
        W["dt_bias"] = randn32(g, P, std=1.0, mean=-1.0)
        A = linspace32(-0.4, 1.2, H)
        W["A_log"] = torch.cat([A, torch.zeros(dk - H, dtype=torch.float32)]) if dk > H else A
    else:
        W["dt_bias"] = randn32(g, P, std=1.0, mean=-2.5)
        W["A_log"] = rand32(g, H, lo=0.0, hi=1.5).reshape(1, 1, H, 1)
    W["b_proj"] = randn32(g, H, D, std=D ** -0.5)
    if form == "k3":
        W["g_proj"] = randn32(g, P, D, std=D ** -0.5)
    else:
        W["g_a_proj"] = randn32(g, dk, D, std=D ** -0.5)
        W["g_b_proj"] = randn32(g, P, dk, std=dk ** -0.5)
    W["o_norm"] = randn32(g, dk, std=0.1, mean=1.0)
    W["o_proj"] = randn32(g, D, P, std=P ** -0.5)
    return W


def c_kda_layer(form):
    g = gen(108 if form == "k3" else 109)
    D, H, dk = 128, 4, 16
    W = make_kda_weights(g, D, H, dk, form)
    Wd = {k: f64(v) for k, v in W.items()}
    x1 = randn32(g, 5, D)
    x2 = randn32(g, 3, D)
    o1, s1 = kda.kda_layer(f64(x1), Wd, form, H, dk, 1e-5)
    o2, s2 = kda.kda_layer(f64(x2), Wd, form, H, dk, 1e-5, state=s1)
    of, sf = kda.kda_layer(torch.cat([f64(x1), f64(x2)]), Wd, form, H, dk, 1e-5)
    assert (torch.cat([o1, o2]) - of).abs().max() < 1e-12
    # debug intermediates of the first call
    T = 5
    q, _ = kda.short_conv(f64(x1) @ Wd["q_proj"].t(), Wd["q_conv1d"])
    k, _ = kda.short_conv(f64(x1) @ Wd["k_proj"].t(), Wd["k_conv1d"])
    v, _ = kda.short_conv(f64(x1) @ Wd["v_proj"].t(), Wd["v_conv1d"])
    q = kda.l2norm(q.reshape(T, H, dk)) * dk ** -0.5
    k = kda.l2norm(k.reshape(T, H, dk))
    z = f64(x1) @ Wd["f_a_proj"].t() @ Wd["f_b_proj"].t()
    gg = kda.gate_k3(z, Wd["A_log"], Wd["dt_bias"], H) if form == "k3" else kda.gate_48b(z, Wd["A_log"], Wd["dt_bias"], H)
    beta = torch.sigmoid(f64(x1) @ Wd["b_proj"].t())
    oc, _ = kda.recurrent(q, k, v.reshape(T, H, dk), gg, beta)
    items = [("w." + k_, v_) for k_, v_ in W.items()]
    items += [("x1", x1), ("out1", o1)] + [("state1." + k_, v_) for k_, v_ in s1.items()]
    items += [("x2", x2), ("out2", o2)] + [("state2." + k_, v_) for k_, v_ in s2.items()]
    items += [("dbg1.q", q), ("dbg1.k", k), ("dbg1.v", v.reshape(T, H, dk)), ("dbg1.g", gg), ("dbg1.beta", beta),
              ("dbg1.o_core", oc)]
    name = f"kda_layer_{form}"
    doc = {"w.* F32": "layer weights with checkpoint suffix names (conv [64,1,4]; " +
                      ("A_log [16] = 4 real heads + 12 zeros; full-rank g_proj)" if form == "k3" else "A_log [1,1,4,1]; g_a_proj/g_b_proj)"),
           "x1 F32[5,128] -> out1 F64[5,128]": "mixer input is the already input-normed hidden; zero initial state",
           "state1.conv_q/conv_k/conv_v F64[3,64], state1.S F64[4,16,16]": "state after x1",
           "x2 F32[3,128] -> out2, state2.*": "continuation (equals an 8-token run)",
           "dbg1.q/k/v/g/beta/o_core F64": "intermediates of the x1 call (q pre-scaled; o_core before norm/gate)"}
    return name, items, _entry(name, f"full KDA layer ({form}): projections, conv, gate, recurrence, RMSNorm-then-sigmoid gate, o_proj",
                               "norm before sigmoid gate; per-head A_log; conv state carried", DEFAULT_TOL, doc)


# ----------------------------------------------------------------------------------- mla layer
def make_mla_weights(g, D, cfg):
    H, n, r, dv, L = (cfg["num_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                      cfg["v_head_dim"], cfg["kv_lora_rank"])
    W = {}
    if cfg.get("q_lora_rank"):
        R = cfg["q_lora_rank"]
        W["q_a_proj"] = randn32(g, R, D, std=D ** -0.5)
        W["q_a_layernorm"] = randn32(g, R, std=0.1, mean=1.0)
        W["q_b_proj"] = randn32(g, H * (n + r), R, std=R ** -0.5)
    else:
        W["q_proj"] = randn32(g, H * (n + r), D, std=D ** -0.5)
    W["kv_a_proj_with_mqa"] = randn32(g, L + r, D, std=D ** -0.5)
    W["kv_a_layernorm"] = randn32(g, L, std=0.1, mean=1.0)
    W["kv_b_proj"] = randn32(g, H * (n + dv), L, std=L ** -0.5)
    W["o_proj"] = randn32(g, D, H * dv, std=(H * dv) ** -0.5)
    if cfg.get("output_gate"):
        W["g_proj"] = randn32(g, H * dv, D, std=D ** -0.5)
    return W


def _mla_probs(x, Wd, cfg):
    """softmax probabilities [H,T,T] for a from-scratch run (debug)."""
    T = x.shape[0]
    H, n, r, L = cfg["num_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["kv_lora_rank"]
    dv = cfg["v_head_dim"]
    if cfg.get("q_lora_rank"):
        q = rmsnorm(x @ Wd["q_a_proj"].t(), Wd["q_a_layernorm"], mla.MLA_NORM_EPS) @ Wd["q_b_proj"].t()
    else:
        q = x @ Wd["q_proj"].t()
    q = q.reshape(T, H, n + r)
    a = x @ Wd["kv_a_proj_with_mqa"].t()
    c = rmsnorm(a[:, :L], Wd["kv_a_layernorm"], mla.MLA_NORM_EPS)
    kv = (c @ Wd["kv_b_proj"].t()).reshape(T, H, n + dv)
    sc = (torch.einsum("thn,shn->hts", q[..., :n], kv[..., :n]) + torch.einsum("thr,sr->hts", q[..., n:], a[:, L:])) * (n + r) ** -0.5
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    sc = torch.where(mask, sc, torch.full_like(sc, float("-inf")))
    return torch.softmax(sc, -1), c, a[:, L:]


def c_mla_layer(form):
    g = gen(110 if form == "k3" else 111)
    D = 128
    cfg = {"num_heads": 4, "qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32,
           "q_lora_rank": 64 if form == "k3" else None, "output_gate": form == "k3"}
    W = make_mla_weights(g, D, cfg)
    Wd = {k: f64(v) for k, v in W.items()}
    x = randn32(g, 6, D)
    out, cache = mla.mla_layer(f64(x), Wd, cfg)
    probs, c, kpe = _mla_probs(f64(x), Wd, cfg)
    x2 = randn32(g, 2, D)
    out2, _ = mla.mla_layer(f64(x2), Wd, cfg, cache)
    full, _ = mla.mla_layer(torch.cat([f64(x), f64(x2)]), Wd, cfg)
    assert (torch.cat([out, out2]) - full).abs().max() < 1e-12
    # position shift: rows 3 and 5 repeat rows 0 and 1 -> identical keys at different positions
    xs = x.clone()
    xs[3] = xs[0]
    xs[5] = xs[1]
    outs, _ = mla.mla_layer(f64(xs), Wd, cfg)
    ps, _, _ = _mla_probs(f64(xs), Wd, cfg)
    assert (ps[:, 5, 0] - ps[:, 5, 3]).abs().max() < 1e-14
    items = [("w." + k_, v_) for k_, v_ in W.items()]
    items += [("x", x), ("out", out), ("dbg.probs", probs), ("dbg.c", c), ("dbg.k_pe", kpe),
              ("x2", x2), ("out2", out2), ("shift.x", xs), ("shift.out", outs), ("shift.probs", ps),
              ("scale", torch.tensor([(24 + 8) ** -0.5], dtype=torch.float64))]
    name = f"mla_layer_{form}"
    doc = {"w.* F32": "heads 4, nope 24, rope 8, v 16, kv_lora 32, " + ("q_lora 64 (q_a_proj/q_a_layernorm/q_b_proj) + g_proj output gate" if form == "k3" else "plain q_proj, no output gate"),
           "x F32[6,128] -> out F64[6,128]": "mixer input is the already input-normed hidden; norms use eps 1e-6",
           "dbg.probs F64[4,6,6], dbg.c F64[6,32], dbg.k_pe F64[6,8]": "causal softmax probabilities; normalised latent; shared unrotated k_pe",
           "x2 F32[2,128] -> out2": "decode continuation against the cache from x (positions 6,7)",
           "shift.x F32[6,128] (rows 3,5 == rows 0,1) -> shift.out, shift.probs": "identical keys at different positions get identical probabilities (no RoPE)",
           "scale F64[1]": "(nope+rope)^-0.5 = 32^-0.5 = 0.1767767 (not 24^-0.5)"}
    return name, items, _entry(name, f"MLA layer ({form}), expanded form", "section 7.5: no RoPE, scale (nope+rope)^-1/2, kv_b rows [k_nope|v] per head",
                               DEFAULT_TOL, doc)


def c_mla_core_k3():
    g = gen(112)
    T, H, n, r, dv = 4, 96, 128, 64, 128
    qn = randn32(g, T, H, n, std=0.5)
    qp = randn32(g, T, H, r, std=0.5)
    kn = randn32(g, T, H, n, std=0.5)
    kp = randn32(g, T, r, std=0.5)
    v = randn32(g, T, H, dv)
    o = mla.attention_core(f64(qn), f64(qp), f64(kn), f64(kp), f64(v))
    items = [("q_nope", qn), ("q_pe", qp), ("k_nope", kn), ("k_pe", kp), ("v", v), ("o", o), ("scale", torch.tensor([192 ** -0.5], dtype=torch.float64))]
    # latent sub-case at the real kv_lora 512: 4 heads of kv_b_proj (BF16 like the checkpoint)
    Hs, L = 2, 512
    c = f32(kda.l2norm(f64(randn32(g, T, L))) * L ** 0.5)          # RMS-normalised latent (unit weight)
    kvb = (randn32(g, Hs * (n + dv), L, std=L ** -0.5)).to(torch.bfloat16)
    lq_n = randn32(g, T, Hs, n, std=0.5)
    lq_p = randn32(g, T, Hs, r, std=0.5)
    kv = (f64(c) @ f64(kvb).t()).reshape(T, Hs, n + dv)
    lo = mla.attention_core(f64(lq_n), f64(lq_p), kv[..., :n], f64(kp), kv[..., n:])
    items += [("latent.q_nope", lq_n), ("latent.q_pe", lq_p), ("latent.c", c), ("latent.k_pe", kp),
              ("latent.kv_b_proj", kvb), ("latent.o", lo)]
    doc = {"q_nope F32[4,96,128], q_pe F32[4,96,64]": "queries at positions 0..3",
           "k_nope F32[4,96,128], k_pe F32[4,64] (shared by heads), v F32[4,96,128]": "keys/values at positions 0..3",
           "o F64[4,96,128]": "causal softmax((q_nope.k_nope + q_pe.k_pe) * 192^-0.5) v",
           "scale F64[1]": "192^-0.5 (128^-0.5 would be a 22% error)",
           "latent.q_nope F32[4,2,128], latent.q_pe F32[4,2,64], latent.c F32[4,512], latent.k_pe F32[4,64] (= k_pe)": "latent case at kv_lora 512 (2 heads): c is the already-normalised latent",
           "latent.kv_b_proj BF16[512,512]": "rows [256h, 256h+128) = W_UK^h (k_nope), [256h+128, 256h+256) = W_UV^h (v)",
           "latent.o F64[4,2,128]": "attention output; expanded (k_nope = W_UK c, v = W_UV c) and absorbed (q~ = W_UK^T q_nope, o = W_UV sum p c) must both match"}
    return "mla_core_k3", items, _entry("mla_core_k3", "MLA attention core at K3's real head shapes (96 heads, nope 128, rope 64, v 128), T=4; plus a kv_lora-512 latent case (2 heads)",
                                         "scale 192^-1/2, shared unrotated k_pe", DEFAULT_TOL, doc)


# ---------------------------------------------------------------------------------- router
def c_router(form):
    E, k, scaling = (16, 4, 1.0) if form == "k3" else (16, 4, 2.446)
    D, T = 128, 6
    seed = 113 if form == "k3" else 114
    while True:
        g = gen(seed)
        x = randn32(g, T, D)
        W = randn32(g, E, D, std=D ** -0.5)
        bias = randn32(g, E, std=0.15)
        s = torch.sigmoid(f64(x) @ f64(W).t())
        sb = s + f64(bias)
        idx, w = moe.router(f64(x), f64(W), f64(bias), k, scaling)
        idx_u = torch.sort(-s, dim=-1, stable=True).indices[:, :k]
        differ = sum(set(idx[t].tolist()) != set(idx_u[t].tolist()) for t in range(T))
        srt = torch.sort(sb, dim=-1, descending=True).values
        margin = (srt[:, k - 1] - srt[:, k]).min().item()
        if differ >= T - 1 and differ < T and margin > 2e-3:
            break
        seed += 1000
    dense = torch.zeros(T, E)
    dense.scatter_(1, idx, w)
    _, w_biased = moe.router(f64(x), f64(W), f64(bias), k, scaling, variant="biased_weights")
    items = [("x", x), ("weight", W), ("e_score_correction_bias", bias), ("scores", s), ("topk_idx", idx),
             ("topk_weight", w), ("dense_weight", dense), ("unbiased_topk_idx", idx_u),
             ("wrong.biased_topk_weight", w_biased),
             ("routed_scaling_factor", torch.tensor([scaling], dtype=torch.float64)),
             ("min_selection_margin", torch.tensor([margin], dtype=torch.float64))]
    name = f"router_{form}"
    doc = {"x F32[6,128], weight F32[16,128], e_score_correction_bias F32[16]": f"E=16, top-{k}, factor {scaling}",
           "scores F64[6,16]": "sigmoid(W x)", "topk_idx I64[6,4]": "top-k of scores+bias, ordered by descending biased score",
           "topk_weight F64[6,4]": "unbiased scores renormalised over the chosen k (+1e-20), x factor",
           "dense_weight F64[6,16]": "weights scattered by expert id (order-free comparison)",
           "unbiased_topk_idx I64[6,4]": f"what selecting WITHOUT the bias would pick: differs on {differ}/6 rows",
           "wrong.biased_topk_weight": "weights from the biased scores (HF 48B aliasing bug; must NOT match)",
           "min_selection_margin F64[1]": "smallest gap between the k-th and (k+1)-th biased score"}
    return name, items, _entry(name, f"sigmoid router with selection-only bias ({form})", "section 7.3",
                               {"topk_idx": "exact set", "topk_weight": DEFAULT_TOL}, doc)


# ------------------------------------------------------------------------------------- moe
SITU_TEST_BETAS = (1.5, 3.0)


def c_moe(form):
    g = gen(115 if form == "k3" else 116)
    D, T = 128, 4
    if form == "k3":
        E, k, scaling, inter, latent, n_shared = 16, 4, 1.0, 64, 64, 2
    else:
        E, k, scaling, inter, latent, n_shared = 8, 2, 2.446, 32, None, 1
    x = randn32(g, T, D)
    Wr = randn32(g, E, D, std=D ** -0.5)
    bias = randn32(g, E, std=0.1)
    items = [("x", x), ("gate.weight", Wr), ("gate.e_score_correction_bias", bias)]
    din = latent if form == "k3" else D
    experts = []
    for e in range(E):
        mats = {}
        for wn, shape in (("w1", (inter, din)), ("w2", (din, inter)), ("w3", (inter, din))):
            w = randn32(g, *shape, std=shape[1] ** -0.5)
            if form == "k3":
                p, s = mxfp4.quantize(w)
                mats[wn] = mxfp4.decode(p, s)
                items += [(f"experts.{e}.{wn}.weight_packed", p), (f"experts.{e}.{wn}.weight_scale", s)]
            else:
                wb = w.to(torch.bfloat16)            # the 48B checkpoint stores experts in BF16
                mats[wn] = f64(wb)
                items += [(f"experts.{e}.{wn}.weight", wb)]
        experts.append((mats["w1"], mats["w2"], mats["w3"]))
    si = inter * n_shared
    sg = randn32(g, si, D, std=D ** -0.5)
    su = randn32(g, si, D, std=D ** -0.5)
    sd = randn32(g, D, si, std=si ** -0.5)
    items += [("shared_experts.gate_proj.weight", sg), ("shared_experts.up_proj.weight", su),
              ("shared_experts.down_proj.weight", sd)]
    W = {"gate": f64(Wr), "bias": f64(bias), "experts": experts, "shared": (f64(sg), f64(su), f64(sd))}
    cfg = {"top_k": k, "scaling": scaling}
    if form == "k3":
        ld = randn32(g, latent, D, std=D ** -0.5)
        ln = randn32(g, latent, std=0.1, mean=1.0)
        lu = randn32(g, D, latent, std=latent ** -0.5)
        items += [("routed_expert_down_proj.weight", ld), ("routed_expert_norm.weight", ln),
                  ("routed_expert_up_proj.weight", lu)]
        W.update(latent_down=f64(ld), latent_norm=f64(ln), latent_up=f64(lu))
        y, idx, w = moe.moe_k3_latent(f64(x), W, cfg, moe.situ_glu, 1e-5)
        y_sh = moe.mlp(f64(x), *W["shared"], moe.situ_glu)
        # The same block with SiTU bounds other than 4 / 25 (config activation_situ_beta /
        # _linear_beta): every GLU, routed and shared, must use them.
        b1, b2 = SITU_TEST_BETAS
        situ = lambda a, b: moe.situ_glu(a, b, b1, b2)  # noqa: E731
        y_b, idx_b, _ = moe.moe_k3_latent(f64(x), W, cfg, situ, 1e-5)
        assert torch.equal(idx_b, idx), "the bounds do not touch the router"
        items += [("situ.betas", torch.tensor([b1, b2], dtype=torch.float64)), ("situ.out", y_b),
                  ("situ.dbg.shared_out", moe.mlp(f64(x), *W["shared"], situ))]
    else:
        y, idx, w = moe.moe_48b(f64(x), W, cfg, moe.silu_glu)
        y_sh = moe.mlp(f64(x), *W["shared"], moe.silu_glu)
    items += [("out", y), ("dbg.topk_idx", idx), ("dbg.topk_weight", w), ("dbg.shared_out", y_sh)]
    name = "moe_k3_latent" if form == "k3" else "moe_48b"
    if form == "k3":
        doc = {"x F32[4,128]": "post-attention-normed hidden", "gate.*": "router E=16 top-4 factor 1.0",
               "experts.{e}.{w1,w2,w3}.weight_packed U8 / weight_scale U8": "MXFP4 experts on the 64-d latent (w1/w3 [64,64], w2 [64,64])",
               "shared_experts.* F32": "2 shared experts fused: [128,128]/[128,128]/[128,128], on full-width x, unweighted",
               "routed_expert_down_proj F32[64,128], routed_expert_norm F32[64], routed_expert_up_proj F32[128,64]": "latent projections + norm (eps 1e-5) applied once to the weighted sum",
               "out F64[4,128]": "up(RMSNorm(sum w_i E_i(down x))) + Shared(x), SiTU-GLU everywhere",
               "dbg.*": "router choice/weights and the shared-expert part",
               "situ.betas F64[2]": f"SiTU bounds {SITU_TEST_BETAS[0]} / {SITU_TEST_BETAS[1]} instead of 4 / 25 (activation_situ_beta / _linear_beta)",
               "situ.out F64[4,128], situ.dbg.shared_out F64[4,128]": "out and the shared part with those bounds in every GLU (routed and shared); same routing"}
    else:
        doc = {"x F32[4,128]": "post-attention-normed hidden", "gate.*": "router E=8 top-2 factor 2.446",
               "experts.{e}.{w1,w2,w3}.weight BF16": "w1 gate [32,128], w3 up [32,128], w2 down [128,32] (BF16 as in the checkpoint)",
               "shared_experts.* F32": "1 shared expert [32,128]/[32,128]/[128,32]",
               "out F64[4,128]": "sum w_i E_i(x) + Shared(x), SiLU-GLU", "dbg.*": "router choice/weights and shared part"}
    return name, items, _entry(name, "MoE block: " + ("K3 latent MoE with MXFP4 experts" if form == "k3" else "48B plain MoE, bf16-style experts"),
                               "w1=gate, w3=up; unbiased weights; latent norm once (K3)", DEFAULT_TOL, doc)


# --------------------------------------------------------------------------------- attn res
def c_attn_res():
    g = gen(117)
    D, T = 128, 3
    wn = randn32(g, D, std=0.1, mean=1.0)
    wp = randn32(g, D, std=0.1)
    items = [("w_norm", wn), ("w_proj", wp)]
    for n in (0, 1, 3, 8):
        p = randn32(g, T, D, std=3.0)
        blocks = randn32(g, n, T, D) * linspace32(0.5, 4.0, max(n, 1))[:n].reshape(n, 1, 1) if n else torch.zeros(0, T, D)
        out, pi = attnres.mix(f64(p), [f64(b) for b in blocks], f64(wn), f64(wp), 1e-5)
        items += [(f"n{n}.p", p), (f"n{n}.blocks", f32(blocks)), (f"n{n}.out", out), (f"n{n}.pi", pi)]
    doc = {"w_norm F32[128], w_proj F32[128]": "only w_norm*w_proj matters",
           "n{0,1,3,8}.p F32[3,128], n*.blocks F32[n,3,128]": "partial p and n block snapshots (oldest first)",
           "n*.out F64[3,128], n*.pi F64[3,n+1]": "softmax over (blocks..., p) of <x/rms(x), w_norm*w_proj>, sum of RAW sources; eps 1e-5"}
    return "attn_res", items, _entry("attn_res", "K3 attention-residual mix", "score on normalised sources, sum the raw ones; p last",
                                      DEFAULT_TOL, doc)


ALL = [c_mxfp4, c_rmsnorm, c_situ, lambda: c_kda_gate("k3"), lambda: c_kda_gate("48b"), c_short_conv,
       c_kda_recurrent_tiny, c_kda_recurrent_k3, c_kda_chunked, lambda: c_kda_layer("k3"), lambda: c_kda_layer("48b"),
       lambda: c_mla_layer("k3"), lambda: c_mla_layer("48b"), c_mla_core_k3, lambda: c_router("k3"),
       lambda: c_router("48b"), lambda: c_moe("k3"), lambda: c_moe("48b"), c_attn_res]
