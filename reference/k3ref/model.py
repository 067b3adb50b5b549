"""Config-driven forward for the K3 text model (nested config, language_model. prefix) and
Kimi-Linear-48B (flat config), float64. Features are switched by config keys, not by model name:

  linear_attn_config.full_attn_layers (1-based, required)   -> MLA layers, the rest KDA
  linear_attn_config.gate_lower_bound                       -> K3 bounded gate, else 48B softplus gate
  linear_attn_config.use_full_rank_gate                     -> g_proj, else g_a_proj/g_b_proj
  q_lora_rank (non-null)                                    -> q_a_proj/q_a_layernorm/q_b_proj, else q_proj
  mla_use_output_gate                                       -> MLA sigmoid output gate (g_proj)
  routed_expert_hidden_size                                 -> latent MoE (down/norm/up)
  hidden_act "situ" (activation_situ_beta/_linear_beta)     -> SiTU-GLU, else SiLU-GLU
  attn_res_block_size                                       -> block attention residuals, else plain residuals
Experts are read as MXFP4 (weight_packed/weight_scale, decoded exactly) when present, else .weight.
"""
import json
import os

import torch

from . import attnres, kda, mla, moe, mxfp4, st
from .ops import linear, rmsnorm


class Config:
    def __init__(self, raw):
        self.raw = raw
        self.nested = "text_config" in raw
        tc = raw["text_config"] if self.nested else raw
        self.prefix = "language_model." if self.nested else ""
        self.hidden = tc["hidden_size"]
        self.n_layers = tc["num_hidden_layers"]
        self.vocab = tc["vocab_size"]
        self.eps = tc["rms_norm_eps"]
        la = tc.get("linear_attn_config")
        if not la or "full_attn_layers" not in la:
            raise ValueError("linear_attn_config.full_attn_layers is required (refusing to guess a layer map)")
        full = la["full_attn_layers"]
        if any((not isinstance(i, int)) or i < 1 or i > self.n_layers for i in full):
            raise ValueError("full_attn_layers must be 1-based layer numbers in [1, num_hidden_layers]")
        self.is_kda = [(l + 1) not in full for l in range(self.n_layers)]
        if "kda_layers" in la:
            kl = sorted(la["kda_layers"])
            if kl != [l + 1 for l in range(self.n_layers) if self.is_kda[l]]:
                raise ValueError("kda_layers is not the complement of full_attn_layers")
        self.kda_heads = la["num_heads"]
        self.kda_head_dim = la["head_dim"]
        self.conv_size = la.get("short_conv_kernel_size", 4)
        self.gate_lower_bound = la.get("gate_lower_bound")
        self.full_rank_gate = bool(la.get("use_full_rank_gate", False))
        self.mla = {"num_heads": tc["num_attention_heads"], "q_lora_rank": tc.get("q_lora_rank"),
                    "kv_lora_rank": tc["kv_lora_rank"], "qk_nope_head_dim": tc["qk_nope_head_dim"],
                    "qk_rope_head_dim": tc["qk_rope_head_dim"], "v_head_dim": tc["v_head_dim"],
                    "output_gate": bool(tc.get("mla_use_output_gate", False))}
        if not tc.get("mla_use_nope", True):
            raise ValueError("only NoPE MLA is supported")
        self.n_experts = tc["num_experts"]
        self.top_k = tc["num_experts_per_token"]
        self.n_shared = tc.get("num_shared_experts") or 0
        self.moe_inter = tc["moe_intermediate_size"]
        self.inter = tc["intermediate_size"]
        self.first_dense = tc.get("first_k_dense_replace", 0)
        self.moe_freq = tc.get("moe_layer_freq", 1)
        self.scaling = tc.get("routed_scaling_factor", 1.0)
        self.renorm = tc.get("moe_renormalize", True)
        if tc.get("moe_router_activation_func", "sigmoid") != "sigmoid":
            raise ValueError("only the sigmoid router is supported")
        if tc.get("num_expert_group", 1) != 1 or tc.get("topk_group", 1) != 1:
            raise ValueError("grouped routing with >1 group is not implemented")
        self.latent = tc.get("routed_expert_hidden_size")
        self.latent_norm = bool(tc.get("latent_moe_use_norm", True))
        act = tc.get("hidden_act", "silu")
        if act == "situ":
            b1, b2 = tc.get("activation_situ_beta", 4.0), tc.get("activation_situ_linear_beta", 25.0)
            self.act = lambda a, b: moe.situ_glu(a, b, b1, b2)
        elif act == "silu":
            self.act = moe.silu_glu
        else:
            raise ValueError(f"hidden_act {act} unsupported")
        self.attn_res = tc.get("attn_res_block_size")

    def is_moe(self, l):
        return l >= self.first_dense and l % self.moe_freq == 0

    @classmethod
    def from_dir(cls, d):
        with open(os.path.join(d, "config.json")) as f:
            return cls(json.load(f))


class Model:
    def __init__(self, model_dir):
        self.cfg = Config.from_dir(model_dir)
        raw = st.load_checkpoint(model_dir)
        self.raw = raw
        c = self.cfg
        P = c.prefix

        def T(name):
            return raw[P + name].double()

        self.embed = T("model.embed_tokens.weight")
        self.final_norm = T("model.norm.weight")
        self.lm_head = T("lm_head.weight")
        if c.attn_res:
            self.out_res = (T("model.output_attn_res_norm.weight"), T("model.output_attn_res_proj.weight"))
        self.layers = []
        for l in range(c.n_layers):
            p = f"model.layers.{l}."
            L = {"in_norm": T(p + "input_layernorm.weight"), "post_norm": T(p + "post_attention_layernorm.weight")}
            if c.attn_res:
                L["attn_res"] = (T(p + "self_attention_res_norm.weight"), T(p + "self_attention_res_proj.weight"))
                L["mlp_res"] = (T(p + "mlp_res_norm.weight"), T(p + "mlp_res_proj.weight"))
            names = [n[len(P + p + "self_attn."):] for n in raw if n.startswith(P + p + "self_attn.")]
            L["attn"] = {n.replace(".weight", ""): T(p + "self_attn." + n) for n in names}
            if c.is_moe(l):
                m = p + "block_sparse_moe."
                W = {"gate": T(m + "gate.weight"), "bias": T(m + "gate.e_score_correction_bias"), "experts": []}
                for e in range(c.n_experts):
                    mats = []
                    for wn in ("w1", "w2", "w3"):
                        base = P + m + f"experts.{e}.{wn}."
                        if base + "weight_packed" in raw:
                            mats.append(mxfp4.decode(raw[base + "weight_packed"], raw[base + "weight_scale"]))
                        else:
                            mats.append(raw[base + "weight"].double())
                    W["experts"].append(tuple(mats))
                if c.n_shared:
                    W["shared"] = tuple(T(m + f"shared_experts.{x}_proj.weight") for x in ("gate", "up", "down"))
                if c.latent:
                    W["latent_down"] = T(m + "routed_expert_down_proj.weight")
                    W["latent_norm"] = T(m + "routed_expert_norm.weight") if c.latent_norm else None
                    W["latent_up"] = T(m + "routed_expert_up_proj.weight")
                L["moe"] = W
            else:
                L["mlp"] = tuple(T(p + f"mlp.{x}_proj.weight") for x in ("gate", "up", "down"))
            self.layers.append(L)

    # ------------------------------------------------------------------ state
    def new_state(self):
        c = self.cfg
        s = []
        for l in range(c.n_layers):
            if c.is_kda[l]:
                H, dk = c.kda_heads, c.kda_head_dim
                s.append(kda.new_state(H, dk, dk, H * dk, H * dk, c.conv_size))
            else:
                s.append(mla.new_cache(c.mla["kv_lora_rank"], c.mla["qk_rope_head_dim"]))
        return {"layers": s, "pos": 0}

    # ------------------------------------------------------------------ pieces
    def mixer(self, l, x, state):
        c, L = self.cfg, self.layers[l]
        if c.is_kda[l]:
            form = "k3" if c.gate_lower_bound is not None else "48b"
            if c.full_rank_gate != ("g_proj" in L["attn"]):
                raise ValueError(f"layer {l}: use_full_rank_gate={c.full_rank_gate} but g_proj presence differs")
            return kda.kda_layer(x, L["attn"], form, c.kda_heads, c.kda_head_dim, c.eps, state,
                                 lower_bound=c.gate_lower_bound if c.gate_lower_bound is not None else -5.0)
        return mla.mla_layer(x, L["attn"], c.mla, state)

    def ffn(self, l, x, stats=None):
        c, L = self.cfg, self.layers[l]
        if "moe" in L:
            cfg = {"top_k": c.top_k, "scaling": c.scaling, "renormalize": c.renorm}
            if c.latent:
                y, idx, w = moe.moe_k3_latent(x, L["moe"], cfg, c.act, c.eps)
            else:
                y, idx, w = moe.moe_48b(x, L["moe"], cfg, c.act)
            if stats is not None:
                stats.append((l, idx, self._margin(x, L["moe"])))
            return y
        return moe.mlp(x, *L["mlp"], c.act)

    def _margin(self, x, W):
        s = torch.sigmoid(linear(x, W["gate"])) + W["bias"]
        srt = torch.sort(s, -1, descending=True).values
        return (srt[:, self.cfg.top_k - 1] - srt[:, self.cfg.top_k]).min().item()

    # ------------------------------------------------------------------ forward
    def layer(self, l, h, blocks, layer_state, stats=None):
        """One decoder layer on h [T, D]. blocks: AttnRes snapshot list (mutated: layer l pushes its input
        when l % block_size == 0). Returns (output h, new layer state)."""
        c, L = self.cfg, self.layers[l]
        if c.attn_res:
            p = h
            a_in = attnres.mix(p, blocks, *L["attn_res"], c.eps)[0] if blocks else h
            if l % c.attn_res == 0:
                blocks.append(p)
                p = None
            A, ns = self.mixer(l, rmsnorm(a_in, L["in_norm"], c.eps), layer_state)
            p = A if p is None else p + A
            m_in = attnres.mix(p, blocks, *L["mlp_res"], c.eps)[0]
            return p + self.ffn(l, rmsnorm(m_in, L["post_norm"], c.eps), stats), ns
        A, ns = self.mixer(l, rmsnorm(h, L["in_norm"], c.eps), layer_state)
        h = h + A
        return h + self.ffn(l, rmsnorm(h, L["post_norm"], c.eps), stats), ns

    def forward(self, ids, state=None, stats=None):
        """ids: list of token ids (the next len(ids) positions). Returns (logits [T,V], hidden
        dumps [n_layers+1, T, D] (0 = embedding, l+1 = output of layer l), new state)."""
        c = self.cfg
        if state is None:
            state = self.new_state()
        ids_t = torch.tensor(ids, dtype=torch.int64)
        h = self.embed[ids_t]
        dumps = [h]
        new_layers = []
        blocks = []
        for l in range(c.n_layers):
            h, ns = self.layer(l, h, blocks, state["layers"][l], stats)
            new_layers.append(ns)
            dumps.append(h)
        if c.attn_res:
            h = attnres.mix(h, blocks, *self.out_res, c.eps)[0]
        self.last_final_hidden = h          # input of the final RMSNorm (debug/fixtures)
        logits = linear(rmsnorm(h, self.final_norm, c.eps), self.lm_head)
        return logits, torch.stack(dumps), {"layers": new_layers, "pos": state["pos"] + len(ids)}

    def greedy(self, prompt, n, incremental=True):
        """Greedy continuation of n tokens (no stop tokens). Returns (ids, per-step logits [n, V])."""
        logits, _, state = self.forward(prompt)
        out, steps = [], []
        last = logits[-1]
        for i in range(n):
            nxt = int(torch.argmax(last))
            out.append(nxt)
            steps.append(last)
            if i == n - 1:
                break
            if incremental:
                lg, _, state = self.forward([nxt], state)
                last = lg[-1]
            else:
                last = self.forward(prompt + out)[0][-1]
        return out, torch.stack(steps)
