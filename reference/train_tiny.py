#!/usr/bin/python3
"""Trains a small K3-architecture model on CPU (PyTorch fp32) and writes it in the released K3 layout.

  K3_CORPUS=/path/en.txt /usr/bin/python3 reference/train_tiny.py --out DIR [--steps N] [--threads 1]

The model is the reference's graph (k3ref, followed to the letter), batched for training:
  - KDA (K3 bounded gate -5*sigmoid(e^A (z + dt_bias)), short convs, L2-normalised q/k, beta, full-rank
    output gate, o_norm), in the chunked WY/UT form of k3ref.kda.chunked run over (sequence, head) at once;
  - MLA (q_lora, NoPE, sigmoid output gate): k3ref.mla.mla_layer per sequence;
  - latent MoE: k3ref.moe.router (sigmoid scores, top-k on score + bias, unbiased renormalised weights),
    SiTU-GLU experts behind routed_expert_down/norm/up, shared experts on the full width; the selection
    bias e_score_correction_bias is not trained by gradient but updated aux-loss-free after every step
    (bias += rate * sign(mean load - expert load), DeepSeek-V3);
  - dense layer 0 (first_k_dense_replace 1), block attention residuals (k3ref.attnres.mix), RMSNorms.
Fixed seed; one progress line per --log-every steps (loss, tokens/s). Data: the corpus (K3_CORPUS,
default $K3_TEST_DATA/corpus/en.txt, else ../shared/data/corpus/en.txt beside the repo; never copied
into the repo) minus its last --heldout fraction (cut at a line start), which is held out. The
tokenizer is trained on the training slice with @k3/tiktoken-bpe (k3-bpe train, K3 specials).

Writes DIR/model/ in the released layout: nested config (text_config + linear_attn_config +
quantization_config), `language_model.` names, bf16 trunk (F32 A_log padded to head_dim, dt_bias,
conv1d, o_norm, e_score_correction_bias), routed experts packed to MXFP4 by k3ref.mxfp4.quantize
(compressed-tensors weight_packed/weight_scale, lexicographic expert order), 2 shards + index,
tiktoken.model and tokenizer_config.json. Also DIR/heldout.txt (the held-out text) and DIR/report.json:
held-out perplexity of the float64 reference (k3ref.model) on the written checkpoint, with the experts
MXFP4-packed (what ships) and as bf16 (what packing costs), over --eval-tokens tokens of the held-out
text as one sequence ([BOS] + ids, as `k3 eval --text DIR/heldout.txt --max-tokens N`).
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from k3ref import attnres, kda, mla, moe, mxfp4, st  # noqa: E402  (k3ref sets float64 as default)
from k3ref.evaluate import sequence_nll, summary  # noqa: E402
from k3ref.model import Model  # noqa: E402
from k3ref.ops import linear, rmsnorm, sigmoid  # noqa: E402
import make_tiny  # noqa: E402

torch.set_default_dtype(torch.float32)   # training runs in fp32; the evaluation model is float64
REPO = os.path.dirname(HERE)
BPE_CLI = os.path.join(REPO, "packages", "tiktoken-bpe", "dist", "cli.js")


# ----------------------------------------------------------------------------------- shape
def default_shape(a):
    """The model's sizes (see --help for the knobs). 8 layers: KKKM KKKM, layer 0 dense."""
    return {
        "vocab_ranks": a.vocab_ranks, "n_special": 256, "hidden": a.hidden, "layers": 8, "full_attn": [4, 8],
        "kda_heads": 4, "kda_head_dim": a.hidden // 4, "conv": 4,
        "mla_heads": 4, "q_lora": 64, "kv_lora": 64, "nope": 32, "rope": 16, "v_dim": a.hidden // 4,
        "experts": a.experts, "top_k": a.top_k, "shared": 1, "moe_inter": a.moe_inter, "latent": a.latent,
        "dense_inter": 3 * a.hidden, "attn_res_block": 2, "eps": 1e-5,
        "situ": (4.0, 25.0), "scaling": 1.0,
    }


def k3_config(s):
    """make_tiny's released K3 config with this model's sizes."""
    c = make_tiny.k3_config()
    n = s["vocab_ranks"]
    V = n + s["n_special"]
    ids = {"bos_token_id": n + 0, "eos_token_id": n + 2, "pad_token_id": n + 255}
    c.update(ids)
    c["media_placeholder_token_id"] = n + 21
    tc = c["text_config"]
    tc.update(ids)
    L = s["layers"]
    tc.update({
        "hidden_size": s["hidden"], "num_hidden_layers": L, "vocab_size": V, "rms_norm_eps": s["eps"],
        "activation_situ_beta": s["situ"][0], "activation_situ_linear_beta": s["situ"][1],
        "linear_attn_config": {"num_heads": s["kda_heads"], "head_dim": s["kda_head_dim"],
                               "short_conv_kernel_size": s["conv"], "full_attn_layers": s["full_attn"],
                               "kda_layers": [i for i in range(1, L + 1) if i not in s["full_attn"]],
                               "gate_lower_bound": -5.0, "use_full_rank_gate": True},
        "num_attention_heads": s["mla_heads"], "num_key_value_heads": s["mla_heads"],
        "q_lora_rank": s["q_lora"], "kv_lora_rank": s["kv_lora"], "qk_nope_head_dim": s["nope"],
        "qk_rope_head_dim": s["rope"], "v_head_dim": s["v_dim"],
        "num_experts": s["experts"], "num_experts_per_token": s["top_k"], "num_shared_experts": s["shared"],
        "moe_intermediate_size": s["moe_inter"], "routed_expert_hidden_size": s["latent"],
        "intermediate_size": s["dense_inter"], "routed_scaling_factor": s["scaling"],
        "attn_res_block_size": s["attn_res_block"],
    })
    return c


# ----------------------------------------------------------------------------------- params
class Params:
    """Every trainable tensor by its checkpoint name (without the language_model. prefix), fp32."""

    def __init__(self, s, g):
        self.s = s
        self.p = {}
        self.bias = {}      # e_score_correction_bias per MoE layer: not trained by gradient
        D, V, L = s["hidden"], s["vocab_ranks"] + s["n_special"], s["layers"]
        out_scale = (2 * L) ** -0.5

        def mat(name, o, i, gain=1.0):
            self.p[name] = (torch.randn(o, i, generator=g) * gain * i ** -0.5).requires_grad_()

        def vec(name, n, val=1.0):
            self.p[name] = torch.full((n,), val).requires_grad_()

        self.p["model.embed_tokens.weight"] = torch.randn(V, D, generator=g).requires_grad_()
        for l in range(L):
            pre = f"model.layers.{l}."
            vec(pre + "input_layernorm.weight", D)
            vec(pre + "post_attention_layernorm.weight", D)
            for r in ("self_attention_res", "mlp_res"):
                vec(pre + r + "_norm.weight", D)
                vec(pre + r + "_proj.weight", D, 0.0)   # zero: AttnRes starts as a uniform mix
            a = pre + "self_attn."
            if self.is_kda(l):
                H, dk = s["kda_heads"], s["kda_head_dim"]
                P = H * dk
                for n in ("q_proj", "k_proj", "v_proj", "g_proj"):
                    mat(a + n + ".weight", P, D)
                for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
                    w = torch.randn(P, 1, s["conv"], generator=g) * 0.1
                    w[:, :, -1] += 1.0                    # the current-token tap starts near identity
                    self.p[a + n + ".weight"] = w.requires_grad_()
                mat(a + "f_a_proj.weight", dk, D)
                mat(a + "f_b_proj.weight", P, dk)
                self.p[a + "dt_bias"] = (torch.randn(P, generator=g) * 0.5 - 2.5).requires_grad_()
                self.p[a + "A_log"] = torch.zeros(H).requires_grad_()   # padded to head_dim when written
                mat(a + "b_proj.weight", H, D)
                vec(a + "o_norm.weight", dk)
                mat(a + "o_proj.weight", D, P, out_scale)
            else:
                H, n_, r_, dv = s["mla_heads"], s["nope"], s["rope"], s["v_dim"]
                mat(a + "q_a_proj.weight", s["q_lora"], D)
                vec(a + "q_a_layernorm.weight", s["q_lora"])
                mat(a + "q_b_proj.weight", H * (n_ + r_), s["q_lora"])
                mat(a + "kv_a_proj_with_mqa.weight", s["kv_lora"] + r_, D)
                vec(a + "kv_a_layernorm.weight", s["kv_lora"])
                mat(a + "kv_b_proj.weight", H * (n_ + dv), s["kv_lora"])
                mat(a + "o_proj.weight", D, H * dv, out_scale)
                mat(a + "g_proj.weight", H * dv, D)
            if l == 0:
                m = pre + "mlp."
                mat(m + "gate_proj.weight", s["dense_inter"], D)
                mat(m + "up_proj.weight", s["dense_inter"], D)
                mat(m + "down_proj.weight", D, s["dense_inter"], out_scale)
            else:
                m = pre + "block_sparse_moe."
                E, I, Lt = s["experts"], s["moe_inter"], s["latent"]
                mat(m + "gate.weight", E, D, 0.5)
                self.bias[l] = torch.zeros(E)
                si = I * s["shared"]
                mat(m + "shared_experts.gate_proj.weight", si, D)
                mat(m + "shared_experts.up_proj.weight", si, D)
                mat(m + "shared_experts.down_proj.weight", D, si, out_scale)
                mat(m + "routed_expert_down_proj.weight", Lt, D)
                vec(m + "routed_expert_norm.weight", Lt)
                mat(m + "routed_expert_up_proj.weight", D, Lt, out_scale)
                for e in range(E):
                    mat(m + f"experts.{e}.w1.weight", I, Lt)
                    mat(m + f"experts.{e}.w3.weight", I, Lt)
                    mat(m + f"experts.{e}.w2.weight", Lt, I)
        vec("model.norm.weight", D)
        vec("model.output_attn_res_norm.weight", D)
        vec("model.output_attn_res_proj.weight", D, 0.0)
        mat("lm_head.weight", V, D)

    def is_kda(self, l):
        return (l + 1) not in self.s["full_attn"]

    def count(self, experts=None):
        return sum(t.numel() for n, t in self.p.items() if experts is None or (".experts." in n) == experts)


# ----------------------------------------------------------------------------------- forward
def short_conv_batched(x, w):
    """k3ref.kda.short_conv on [B, T, C] from a zero state: u_t = SiLU(sum_j w[c, j] x_{t-(K-1)+j})."""
    K = w.shape[-1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w, groups=w.shape[0])
    return F.silu(y.transpose(1, 2))


def kda_chunked_batched(q, k, v, g, beta, chunk):
    """k3ref.kda.chunked (WY/UT form, spec 2.6) from a zero state, over [N, T, dk] at once (N = B*H);
    (I + M)^-1 by a triangular solve instead of the reference's row-by-row forward substitution."""
    N, T, dk = q.shape
    S = q.new_zeros(N, dk, v.shape[-1])
    out = []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        n = c1 - c0
        Q, K_, V, G, B = q[:, c0:c1], k[:, c0:c1], v[:, c0:c1], g[:, c0:c1], beta[:, c0:c1]
        Gam = torch.cumsum(G, 1)
        D = Gam.unsqueeze(2) - Gam.unsqueeze(1)                   # [N, n, n, dk]: Gam_i - Gam_j
        ii = torch.arange(n).unsqueeze(1)
        jj = torch.arange(n).unsqueeze(0)
        ninf = torch.full_like(D, float("-inf"))
        E_strict = torch.exp(torch.where((jj < ii).unsqueeze(-1), D, ninf))
        E_incl = torch.exp(torch.where((jj <= ii).unsqueeze(-1), D, ninf))
        # (the three-operand einsum of the reference, as one broadcast product: torch's einsum path
        # for it ran as thousands of small matmuls)
        M = B.unsqueeze(2) * (K_.unsqueeze(2) * K_.unsqueeze(1) * E_strict).sum(-1)
        eye = torch.eye(n).expand(N, n, n)
        Tinv = torch.linalg.solve_triangular(eye + M, eye, upper=False)
        A = Tinv * B.unsqueeze(1)
        W = A @ (torch.exp(Gam) * K_)
        Vn = A @ V - W @ S
        P = (Q.unsqueeze(2) * K_.unsqueeze(1) * E_incl).sum(-1)
        out.append((Q * torch.exp(Gam)) @ S + P @ Vn)
        gl = Gam[:, -1]
        S = torch.exp(gl).unsqueeze(2) * S + (K_ * torch.exp(gl.unsqueeze(1) - Gam)).transpose(1, 2) @ Vn
    return torch.cat(out, 1)


class Net:
    def __init__(self, params, chunk=32):
        self.P = params
        self.s = params.s
        self.chunk = chunk
        self.loads = {}

    def W(self, name):
        return self.P.p[name]

    def kda(self, l, x):
        s, a = self.s, f"model.layers.{l}.self_attn."
        B, T, D = x.shape
        H, dk = s["kda_heads"], s["kda_head_dim"]
        q = short_conv_batched(linear(x, self.W(a + "q_proj.weight")), self.W(a + "q_conv1d.weight"))
        k = short_conv_batched(linear(x, self.W(a + "k_proj.weight")), self.W(a + "k_conv1d.weight"))
        v = short_conv_batched(linear(x, self.W(a + "v_proj.weight")), self.W(a + "v_conv1d.weight"))
        q = kda.l2norm(q.reshape(B, T, H, dk)) * dk ** -0.5
        k = kda.l2norm(k.reshape(B, T, H, dk))
        v = v.reshape(B, T, H, dk)
        z = linear(linear(x, self.W(a + "f_a_proj.weight")), self.W(a + "f_b_proj.weight"))
        A_log = torch.cat([self.W(a + "A_log"), torch.zeros(dk - H)])
        g = kda.gate_k3(z.reshape(B * T, H * dk), A_log, self.W(a + "dt_bias"), H).reshape(B, T, H, dk).float()
        beta = sigmoid(linear(x, self.W(a + "b_proj.weight")))
        heads = lambda t: t.permute(0, 2, 1, 3).reshape(B * H, T, -1)  # noqa: E731
        o = kda_chunked_batched(heads(q), heads(k), heads(v), heads(g), beta.permute(0, 2, 1).reshape(B * H, T),
                                self.chunk).reshape(B, H, T, dk).permute(0, 2, 1, 3)
        gam = linear(x, self.W(a + "g_proj.weight")).reshape(B, T, H, dk)
        y = rmsnorm(o, self.W(a + "o_norm.weight"), s["eps"]) * sigmoid(gam)
        return linear(y.reshape(B, T, H * dk), self.W(a + "o_proj.weight"))

    def mla(self, l, x):
        s, a = self.s, f"model.layers.{l}.self_attn."
        W = {n: self.W(a + n + ".weight") for n in ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa",
                                                    "kv_a_layernorm", "kv_b_proj", "o_proj", "g_proj")}
        cfg = {"num_heads": s["mla_heads"], "q_lora_rank": s["q_lora"], "kv_lora_rank": s["kv_lora"],
               "qk_nope_head_dim": s["nope"], "qk_rope_head_dim": s["rope"], "v_head_dim": s["v_dim"],
               "output_gate": True}
        return torch.stack([mla.mla_layer(x[b], W, cfg)[0] for b in range(x.shape[0])])

    def act(self, a, b):
        return moe.situ_glu(a, b, *self.s["situ"])

    def ffn(self, l, x):
        s = self.s
        if l == 0:
            m = "model.layers.0.mlp."
            return moe.mlp(x, self.W(m + "gate_proj.weight"), self.W(m + "up_proj.weight"), self.W(m + "down_proj.weight"), self.act)
        m = f"model.layers.{l}.block_sparse_moe."
        B, T, D = x.shape
        xf = x.reshape(B * T, D)
        # The reference router (float64 inside): top-k on sigmoid + bias, unbiased renormalised weights.
        idx, w = moe.router(xf.double(), self.W(m + "gate.weight"), self.P.bias[l], s["top_k"], s["scaling"])
        w = w.float()
        self.loads[l] = torch.bincount(idx.flatten(), minlength=s["experts"])
        u = linear(xf, self.W(m + "routed_expert_down_proj.weight"))
        r = torch.zeros_like(u)
        for e in range(s["experts"]):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = moe.mlp(u[tok], self.W(m + f"experts.{e}.w1.weight"), self.W(m + f"experts.{e}.w3.weight"),
                        self.W(m + f"experts.{e}.w2.weight"), self.act)
            r = r.index_add(0, tok, w[tok, slot].unsqueeze(1) * y)
        r = rmsnorm(r, self.W(m + "routed_expert_norm.weight"), s["eps"])
        y = linear(r, self.W(m + "routed_expert_up_proj.weight"))
        y = y + moe.mlp(xf, self.W(m + "shared_experts.gate_proj.weight"), self.W(m + "shared_experts.up_proj.weight"),
                        self.W(m + "shared_experts.down_proj.weight"), self.act)
        return y.reshape(B, T, D)

    def forward(self, ids):
        """ids [B, T] -> logits [B, T, V]; k3ref.model.Model.layer's order, batched."""
        s, eps, bs = self.s, self.s["eps"], self.s["attn_res_block"]
        h = self.W("model.embed_tokens.weight")[ids]
        blocks = []
        for l in range(s["layers"]):
            pre = f"model.layers.{l}."
            res = lambda n: (self.W(pre + n + "_norm.weight"), self.W(pre + n + "_proj.weight"))  # noqa: E731
            p = h
            a_in = attnres.mix(p, blocks, *res("self_attention_res"), eps)[0] if blocks else h
            if l % bs == 0:
                blocks.append(p)
                p = None
            xin = rmsnorm(a_in, self.W(pre + "input_layernorm.weight"), eps)
            A = self.kda(l, xin) if self.P.is_kda(l) else self.mla(l, xin)
            p = A if p is None else p + A
            m_in = attnres.mix(p, blocks, *res("mlp_res"), eps)[0]
            h = p + self.ffn(l, rmsnorm(m_in, self.W(pre + "post_attention_layernorm.weight"), eps))
        h = attnres.mix(h, blocks, self.W("model.output_attn_res_norm.weight"), self.W("model.output_attn_res_proj.weight"), eps)[0]
        return linear(rmsnorm(h, self.W("model.norm.weight"), eps), self.W("lm_head.weight"))

    def update_bias(self, rate):
        """Aux-loss-free balancing: raise the selection bias of under-loaded experts, lower the others'."""
        for l, load in self.loads.items():
            load = load.float()
            self.P.bias[l] += rate * torch.sign(load.mean() - load)


# ----------------------------------------------------------------------------------- data
def corpus_path():
    if os.environ.get("K3_CORPUS"):
        return os.environ["K3_CORPUS"]
    data = os.environ.get("K3_TEST_DATA") or os.path.join(REPO, "..", "shared", "data")
    return os.path.join(data, "corpus", "en.txt")


def split_corpus(text, frac):
    cut = text.rfind("\n", 0, int(len(text) * (1 - frac))) + 1
    return text[:cut], text[cut:]


def node(*args):
    r = subprocess.run(["node", BPE_CLI, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"k3-bpe {args[0]} failed: {r.stderr.strip()}")
    print(r.stdout.strip(), flush=True)


def read_u32(path):
    with open(path, "rb") as f:
        b = f.read()
    return torch.tensor(struct.unpack(f"<{len(b) // 4}I", b), dtype=torch.int64)


# ----------------------------------------------------------------------------------- writing
def bf16(t):
    return t.detach().to(torch.bfloat16)


def checkpoint_tensors(P, packed=True):
    """(shards as lists of (name, tensor)) in the released layout; experts MXFP4 or bf16."""
    s = P.s
    pre = "language_model."
    L = s["layers"]
    layers = []
    for l in range(L):
        lp = f"model.layers.{l}."
        trunk = {}
        experts = []
        for name, t in P.p.items():
            if not name.startswith(lp) or ".experts." in name:
                continue
            short = name[len(lp):]
            if short.endswith("A_log"):
                dk = s["kda_head_dim"]
                trunk[short] = torch.cat([t.detach(), torch.zeros(dk - t.numel())]).float()
            elif short.endswith(("dt_bias", "conv1d.weight", "o_norm.weight")):
                trunk[short] = t.detach().float().clone()
            else:
                trunk[short] = bf16(t)
        if l in P.bias:
            trunk["block_sparse_moe.gate.e_score_correction_bias"] = P.bias[l].float().clone()
            for e in make_tiny.expert_order(s["experts"]):
                for wn in ("w1", "w2", "w3"):
                    w = P.p[f"{lp}block_sparse_moe.experts.{e}.{wn}.weight"].detach()
                    base = f"{pre}{lp}block_sparse_moe.experts.{e}.{wn}."
                    if packed:
                        pk, sc = mxfp4.quantize(w)
                        experts += [(base + "weight_packed", pk), (base + "weight_scale", sc)]
                    else:
                        experts.append((base + "weight", bf16(w)))
        layers.append([(pre + lp + k, trunk[k]) for k in sorted(trunk)] + experts)
    head = [(pre + "model.embed_tokens.weight", bf16(P.p["model.embed_tokens.weight"]))]
    tail = [(pre + n, bf16(P.p[n])) for n in ("model.norm.weight", "model.output_attn_res_norm.weight",
                                              "model.output_attn_res_proj.weight", "lm_head.weight")]
    half = L // 2
    return [head + sum(layers[:half], []), sum(layers[half:], []) + tail]


def write_checkpoint(P, d, tok_dir, packed=True):
    os.makedirs(d, exist_ok=True)
    cfg = k3_config(P.s)
    if not packed:
        for c in (cfg, cfg["text_config"]):
            c.pop("quantization_config", None)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    st.save_sharded(d, checkpoint_tensors(P, packed), metadata={"format": "pt"})
    for name in ("tiktoken.model", "tokenizer_config.json"):
        with open(os.path.join(tok_dir, name), "rb") as src, open(os.path.join(d, name), "wb") as dst:
            dst.write(src.read())


class float64_default:
    """The reference (k3ref) allocates with the default dtype: float64 while it runs."""

    def __enter__(self):
        torch.set_default_dtype(torch.float64)

    def __exit__(self, *exc):
        torch.set_default_dtype(torch.float32)


def heldout_eval(d, ids, chunk=64):
    with float64_default():
        return _heldout_eval(d, ids, chunk)


def _heldout_eval(d, ids, chunk):
    m = Model(d)
    bos = m.cfg.raw["bos_token_id"]
    return summary(sequence_nll(m, [bos] + ids, chunk))


# ----------------------------------------------------------------------------------- main
def self_test():
    """The batched chunked KDA equals the reference recurrence (float64) on a small random case."""
    with float64_default():
        _self_test()


def _self_test():
    g = torch.Generator().manual_seed(7)
    N, T, dk = 3, 37, 8
    q = kda.l2norm(torch.randn(N, T, dk, generator=g)) * dk ** -0.5
    k = kda.l2norm(torch.randn(N, T, dk, generator=g))
    v = torch.randn(N, T, dk, generator=g)
    gg = -5 * torch.rand(N, T, dk, generator=g)
    b = torch.rand(N, T, generator=g)
    o = kda_chunked_batched(q.double(), k.double(), v.double(), gg.double(), b.double(), 16)
    for n in range(N):
        ref, _ = kda.recurrent(q[n].double().unsqueeze(1), k[n].double().unsqueeze(1), v[n].double().unsqueeze(1),
                               gg[n].double().unsqueeze(1), b[n].double().unsqueeze(1))
        err = (o[n] - ref[:, 0]).abs().max().item()
        if err > 1e-10:
            raise SystemExit(f"self-test: batched chunked KDA differs from the recurrence by {err}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (model/ is the checkpoint)")
    ap.add_argument("--steps", type=int, default=650, help="650 x 2048 tokens: ~86 min at the 258 tok/s measured on the shared 2-core box")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--bias-rate", type=float, default=1e-3, help="aux-free selection-bias step per update")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--kda-chunk", type=int, default=16, help="chunk of the WY/UT KDA form (memory ~ chunk*seq*head_dim)")
    ap.add_argument("--heldout", type=float, default=0.05, help="fraction of the corpus held out (its end)")
    ap.add_argument("--eval-tokens", type=int, default=1024)
    ap.add_argument("--vocab-ranks", type=int, default=3840, help="BPE ranks (+256 specials = vocab)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--moe-inter", type=int, default=128)
    ap.add_argument("--latent", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    self_test()

    out = os.path.abspath(a.out)
    work, model_dir = os.path.join(out, "work"), os.path.join(out, "model")
    os.makedirs(work, exist_ok=True)
    src = corpus_path()
    with open(src, encoding="utf-8") as f:
        train_text, held_text = split_corpus(f.read(), a.heldout)
    with open(os.path.join(work, "train.txt"), "w", encoding="utf-8") as f:
        f.write(train_text)
    with open(os.path.join(out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held_text)
    tok_dir = os.path.join(work, "tokenizer")
    node("train", "--input", os.path.join(work, "train.txt"), "--vocab-size", str(a.vocab_ranks), "--out", tok_dir, "--specials", "k3")
    node("encode", "--dir", tok_dir, "--input", os.path.join(work, "train.txt"), "--out", os.path.join(work, "train.u32"))
    node("encode", "--dir", tok_dir, "--input", os.path.join(out, "heldout.txt"), "--out", os.path.join(work, "heldout.u32"))
    train_ids = read_u32(os.path.join(work, "train.u32"))
    held_ids = read_u32(os.path.join(work, "heldout.u32")).tolist()[:a.eval_tokens]
    print(f"corpus {src}: train {len(train_text.encode())} bytes = {train_ids.numel()} tokens, "
          f"held out {len(held_text.encode())} bytes (eval on its first {len(held_ids)} tokens)", flush=True)

    s = default_shape(a)
    g = torch.Generator().manual_seed(a.seed)
    P = Params(s, g)
    net = Net(P, a.kda_chunk)
    print(f"params: {P.count() / 1e6:.2f} M ({P.count(False) / 1e6:.2f} M trunk, {P.count(True) / 1e6:.2f} M routed experts); "
          f"active per token ~{(P.count(False) + P.count(True) * s['top_k'] / s['experts']) / 1e6:.2f} M", flush=True)
    opt = torch.optim.AdamW(list(P.p.values()), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    sched = lambda st: min(1.0, (st + 1) / a.warmup) * 0.5 * (1 + math.cos(math.pi * min(st, a.steps) / a.steps))  # noqa: E731
    n_win = train_ids.numel() - a.seq - 1
    t0 = time.time()
    tokens = 0
    for step in range(a.steps):
        starts = torch.randint(0, n_win, (a.batch,), generator=g)
        x = torch.stack([train_ids[i:i + a.seq] for i in starts.tolist()])
        y = torch.stack([train_ids[i + 1:i + a.seq + 1] for i in starts.tolist()])
        for grp in opt.param_groups:
            grp["lr"] = a.lr * sched(step)
        logits = net.forward(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(P.p.values()), 1.0)
        opt.step()
        with torch.no_grad():
            net.update_bias(a.bias_rate)
        tokens += x.numel()
        if (step + 1) % a.log_every == 0 or step == 0 or step + 1 == a.steps:
            el = time.time() - t0
            loads = torch.stack([v.float() for v in net.loads.values()])
            imb = (loads.max(1).values / loads.mean(1)).mean().item()
            print(f"step {step + 1}/{a.steps} loss {loss.item():.4f} lr {a.lr * sched(step):.2e} "
                  f"tokens {tokens} {tokens / el:.0f} tok/s elapsed {el:.0f} s max/mean expert load {imb:.2f}", flush=True)
    train_s = time.time() - t0

    write_checkpoint(P, model_dir, tok_dir, packed=True)
    bf16_dir = os.path.join(work, "model-bf16-experts")
    write_checkpoint(P, bf16_dir, tok_dir, packed=False)
    size = sum(os.path.getsize(os.path.join(model_dir, f)) for f in os.listdir(model_dir))
    te = time.time()
    ev_packed = heldout_eval(model_dir, held_ids)
    ev_bf16 = heldout_eval(bf16_dir, held_ids)
    report = {
        "corpus": src, "heldout_fraction": a.heldout, "seed": a.seed, "steps": a.steps, "batch": a.batch, "seq": a.seq, "threads": a.threads,
        "train_tokens": tokens, "train_seconds": round(train_s, 1), "tokens_per_second": round(tokens / train_s, 1),
        "final_train_loss": loss.item(), "params": P.count(), "trunk_params": P.count(False), "expert_params": P.count(True),
        "checkpoint_bytes": size, "shape": s,
        "heldout": {"tokens_scored": len(held_ids), "mxfp4_experts": ev_packed, "bf16_experts": ev_bf16,
                    "eval_seconds": round(time.time() - te, 1),
                    "k3_eval": f"k3 eval --model {model_dir} --text {os.path.join(out, 'heldout.txt')} --max-tokens {len(held_ids)}"},
    }
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(f"wrote {model_dir} ({size / 1e6:.2f} MB); held-out perplexity (float64 reference, {len(held_ids)} tokens): "
          f"MXFP4 experts {ev_packed['perplexity']:.3f}, bf16 experts {ev_bf16['perplexity']:.3f}", flush=True)


if __name__ == "__main__":
    main()
