#!/usr/bin/python3
"""Writes the tiny checkpoints in the released layouts, deterministically:

  fixtures/models/tiny-k3/            K3 layout: nested config (text_config + linear_attn_config),
                                      language_model.* names, bf16 trunk, f32 A_log(padded)/dt_bias/conv/
                                      o_norm/correction bias, MXFP4 experts (compressed-tensors), 3 shards
  fixtures/models/tiny-kimi-linear/   Kimi-Linear-48B layout: flat config, model.* names, bf16 experts,
                                      g_a/g_b gate, A_log [1,1,H,1], SiLU, routed_scaling_factor 2.446

plus tiktoken.model (768 ranks trained here on an embedded sample) and tokenizer_config.json
(256 specials from id 768). usage: make_tiny.py [--out ROOT]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from k3ref import mxfp4, st, tokenizer  # noqa: E402
from k3ref.util import gen, rand32, randn32  # noqa: E402

REPO = os.path.dirname(HERE)
N_RANKS = 768
N_SPECIAL = 256
VOCAB = N_RANKS + N_SPECIAL

# Our own short mixed sample (English prose, code, Chinese) for training the tiny BPE merges.
SAMPLE = """The quick brown fox jumps over the lazy dog. A small model reads the text one token at a time,
keeps a state for every layer, and writes the next token. When the state is carried correctly, the
incremental answer equals the full recomputation, and the greedy continuation does not change.
Kimi reads long documents: it remembers what matters and forgets the rest, with a decay per channel.
Mixture of experts: the router picks a few experts for each token, the shared expert always runs.
Hello, world! It's a test; we're testing, they've tested, I'm sure it'll work, and you'd agree.
Numbers like 12, 345, 2024 and 3.14159 appear in text, as do dates such as 2026-11-30.

def add(a, b):
    return a + b

def greedy(model, prompt, steps=20):
    ids = list(prompt)
    for _ in range(steps):
        logits = model.forward(ids)
        ids.append(int(logits[-1].argmax()))
    return ids

for (let i = 0; i < n; i++) { sum += x[i] * w[i]; }
const state = new Float32Array(heads * dim * dim);
if (scale === 0xff) throw new Error("bad scale");
function matvec(w, x) { return w.map(row => row.reduce((s, v, j) => s + v * x[j], 0)); }

今天天气很好，我们一起去公园散步。模型会读取文本，然后生成下一个词。
中文和English混合的句子也很常见，例如：这个函数返回两个数字的和。
长上下文的记忆很重要，线性注意力用状态来保存过去的信息。
专家混合模型为每个词选择几个专家，共享专家总是参与计算。
<|open|>message role="user"<|sep|>Write a function that adds two numbers.<|close|>message<|sep|>
The answer is short: add the two numbers and return the sum. Thinking first, then the response.
"""

K3_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
               18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>",
               254: "[UNK]", 255: "[PAD]"}
KL_SPECIALS = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
               6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
               11: "<|tool_calls_section_begin|>", 12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>",
               14: "<|tool_call_argument_begin|>", 15: "<|tool_call_end|>", 17: "<|im_middle|>",
               254: "[UNK]", 255: "[PAD]"}
NOT_SPECIAL = {11, 12, 13, 14, 15}   # tool tokens are special=false in the Kimi tokenizer_config


def specials_table(named):
    return {N_RANKS + i: named.get(i, f"<|reserved_token_{N_RANKS + i}|>") for i in range(N_SPECIAL)}


def tokenizer_config(named, eos_name):
    table = specials_table(named)
    dec = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                    "special": (i - N_RANKS) not in NOT_SPECIAL or named is K3_SPECIALS}
           for i, s in table.items()}
    return {"added_tokens_decoder": dec, "bos_token": "[BOS]", "eos_token": eos_name, "pad_token": "[PAD]",
            "unk_token": "[UNK]", "model_max_length": 1048576, "tokenizer_class": "TikTokenTokenizer",
            "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
            "num_reserved_special_tokens": N_SPECIAL,
            "comment": "tiny generated tokenizer for k3 fixtures: 768 BPE ranks + 256 specials; ids are relative to this vocab"}


def write_tokenizer(d, named, eos_name, vocab_tokens):
    tokenizer.write_rank_file(os.path.join(d, "tiktoken.model"), vocab_tokens)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(named, eos_name), f, indent=2, ensure_ascii=False)
        f.write("\n")


# ----------------------------------------------------------------------------------- configs
def k3_config():
    L = 13
    full = [4, 8, 12, 13]
    return {
        "architectures": ["KimiK3ForConditionalGeneration"],
        "model_type": "kimi_k3",
        "bos_token_id": N_RANKS + 0, "eos_token_id": N_RANKS + 2, "pad_token_id": N_RANKS + 255,
        "media_placeholder_token_id": N_RANKS + 21,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "quantization_config": QUANT,
        "text_config": {
            "model_type": "kimi_linear",
            "architectures": ["KimiLinearForCausalLM"],
            "hidden_size": 128, "num_hidden_layers": L, "vocab_size": VOCAB,
            "bos_token_id": N_RANKS + 0, "eos_token_id": N_RANKS + 2, "pad_token_id": N_RANKS + 255,
            "rms_norm_eps": 1e-5, "max_position_embeddings": 1048576, "tie_word_embeddings": False,
            "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
            "linear_attn_config": {"num_heads": 4, "head_dim": 16, "short_conv_kernel_size": 4,
                                   "full_attn_layers": full,
                                   "kda_layers": [i for i in range(1, L + 1) if i not in full],
                                   "gate_lower_bound": -5.0, "use_full_rank_gate": True},
            "num_attention_heads": 4, "num_key_value_heads": 4,
            "q_lora_rank": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "v_head_dim": 16,
            "mla_use_nope": True, "mla_use_output_gate": True,
            "num_experts": 16, "num_experts_per_token": 4, "num_shared_experts": 2,
            "moe_intermediate_size": 32, "routed_expert_hidden_size": 64, "latent_moe_use_norm": True,
            "intermediate_size": 96, "first_k_dense_replace": 1, "moe_layer_freq": 1,
            "moe_router_activation_func": "sigmoid", "topk_method": "noaux_tc", "use_grouped_topk": True,
            "num_expert_group": 1, "topk_group": 1, "moe_renormalize": True, "routed_scaling_factor": 1.0,
            "attn_res_block_size": 3, "num_nextn_predict_layers": 0,
            "torch_dtype": "bfloat16",
            "quantization_config": QUANT,
        },
    }


QUANT = {
    "quant_method": "compressed-tensors",
    "format": "mxfp4-pack-quantized",
    "quantization_status": "compressed",
    "config_groups": {"group_0": {
        "format": "mxfp4-pack-quantized",
        "targets": ["re:.*block_sparse_moe\\.experts\\.\\d+\\.w[123]$"],
        "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32, "symmetric": True,
                    "dynamic": False, "scale_dtype": "uint8", "observer": "minmax"},
        "input_activations": None, "output_activations": None}},
    "ignore": ["lm_head", "re:.*shared_experts.*", "re:.*self_attn.*", "re:.*mlp\\..*",
               "re:.*routed_expert_(down|up)_proj$", "re:.*block_sparse_moe\\.gate$"],
}


def kl_config():
    L = 7
    full = [4, 7]
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "bos_token_id": N_RANKS + 0, "eos_token_id": N_RANKS + 2, "pad_token_id": N_RANKS + 255,
        "dtype": "bfloat16",
        "first_k_dense_replace": 1, "head_dim": 72, "hidden_act": "silu", "hidden_size": 128,
        "initializer_range": 0.02, "intermediate_size": 96, "kv_lora_rank": 32,
        "linear_attn_config": {"full_attn_layers": full, "head_dim": 16,
                               "kda_layers": [i for i in range(1, L + 1) if i not in full],
                               "num_heads": 4, "short_conv_kernel_size": 4},
        "mla_use_nope": True, "model_max_length": 1048576, "moe_intermediate_size": 16, "moe_layer_freq": 1,
        "moe_renormalize": True, "moe_router_activation_func": "sigmoid", "num_attention_heads": 4,
        "num_expert_group": 1, "num_experts": 12, "num_experts_per_token": 2, "num_hidden_layers": L,
        "num_key_value_heads": 4, "num_nextn_predict_layers": 0, "num_shared_experts": 1,
        "q_lora_rank": None, "qk_nope_head_dim": 24, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-05,
        "rope_scaling": None, "rope_theta": 10000.0, "routed_scaling_factor": 2.446, "tie_word_embeddings": False,
        "topk_group": 1, "use_cache": True, "use_grouped_topk": True, "v_head_dim": 16, "vocab_size": VOCAB,
    }


# ----------------------------------------------------------------------------------- weights
BF = torch.bfloat16
F32 = torch.float32


def lin(g, out_, in_, gain=1.0):
    return (randn32(g, out_, in_, std=gain * in_ ** -0.5)).to(BF)


def norm_w(g, n, dtype=BF, std=0.05):
    return randn32(g, n, std=std, mean=1.0).to(dtype)


def expert_order(n):
    return sorted(range(n), key=lambda e: str(e))


def kda_tensors(g, D, H, dk, k3):
    P = H * dk
    t = {}
    for n in ("q_proj", "k_proj", "v_proj"):
        t[f"{n}.weight"] = lin(g, P, D)
    for n in ("q_conv1d", "k_conv1d", "v_conv1d"):
        w = randn32(g, P, 1, 4, std=0.3)
        w[:, :, 3] += 1.0
        t[f"{n}.weight"] = w if k3 else w.to(BF)
    t["f_a_proj.weight"] = lin(g, dk, D)
    t["f_b_proj.weight"] = lin(g, P, dk)
    if k3:
        t["dt_bias"] = randn32(g, P, std=1.0, mean=-1.0)
        a = rand32(g, H, lo=-0.5, hi=1.0)
        t["A_log"] = torch.cat([a, torch.zeros(dk - H, dtype=F32)])
    else:
        t["dt_bias"] = randn32(g, P, std=1.0, mean=-2.5)
        t["A_log"] = rand32(g, H, lo=0.0, hi=1.5).reshape(1, 1, H, 1)
    t["b_proj.weight"] = lin(g, H, D)
    if k3:
        t["g_proj.weight"] = lin(g, P, D)
    else:
        t["g_a_proj.weight"] = lin(g, dk, D)
        t["g_b_proj.weight"] = lin(g, P, dk)
    t["o_norm.weight"] = norm_w(g, dk, F32 if k3 else BF)
    t["o_proj.weight"] = lin(g, D, P)
    return t


def mla_tensors(g, D, H, n, r, dv, L, q_lora, gate):
    t = {}
    if q_lora:
        t["q_a_proj.weight"] = lin(g, q_lora, D)
        t["q_a_layernorm.weight"] = norm_w(g, q_lora)
        t["q_b_proj.weight"] = lin(g, H * (n + r), q_lora, gain=1.5)
    else:
        t["q_proj.weight"] = lin(g, H * (n + r), D, gain=1.5)
    t["kv_a_proj_with_mqa.weight"] = lin(g, L + r, D)
    t["kv_a_layernorm.weight"] = norm_w(g, L)
    t["kv_b_proj.weight"] = lin(g, H * (n + dv), L, gain=1.5)
    t["o_proj.weight"] = lin(g, D, H * dv)
    if gate:
        t["g_proj.weight"] = lin(g, H * dv, D)
    return t


SEEDS = {"k3": 20274130, "kl": 20264131}  # picked from a 16-seed scan: router, greedy and tf argmax margins


def build(kind, seed=None):
    """Returns (config, shards as lists of (name, tensor))."""
    k3 = kind == "k3"
    cfg = k3_config() if k3 else kl_config()
    tc = cfg["text_config"] if k3 else cfg
    P = "language_model." if k3 else ""
    g = gen(SEEDS[kind] if seed is None else seed)
    D, V, NL = tc["hidden_size"], tc["vocab_size"], tc["num_hidden_layers"]
    la = tc["linear_attn_config"]
    H, dk = la["num_heads"], la["head_dim"]
    E, inter = tc["num_experts"], tc["moe_intermediate_size"]
    din = tc.get("routed_expert_hidden_size") or D
    n_shared = tc["num_shared_experts"]
    head = [(P + "model.embed_tokens.weight", randn32(g, V, D).to(BF))]
    layers = []
    for l in range(NL):
        pre = f"{P}model.layers.{l}."
        trunk = {"input_layernorm.weight": norm_w(g, D), "post_attention_layernorm.weight": norm_w(g, D)}
        if k3:
            trunk["self_attention_res_norm.weight"] = norm_w(g, D)
            trunk["self_attention_res_proj.weight"] = randn32(g, D, std=0.1).to(BF)
            trunk["mlp_res_norm.weight"] = norm_w(g, D)
            trunk["mlp_res_proj.weight"] = randn32(g, D, std=0.1).to(BF)
        if (l + 1) in la["full_attn_layers"]:
            at = mla_tensors(g, D, tc["num_attention_heads"], tc["qk_nope_head_dim"], tc["qk_rope_head_dim"],
                             tc["v_head_dim"], tc["kv_lora_rank"], tc.get("q_lora_rank"), tc.get("mla_use_output_gate"))
        else:
            at = kda_tensors(g, D, H, dk, k3)
        trunk.update({"self_attn." + k: v for k, v in at.items()})
        experts = []
        if l >= tc["first_k_dense_replace"]:
            m = "block_sparse_moe."
            trunk[m + "gate.weight"] = lin(g, E, D)
            trunk[m + "gate.e_score_correction_bias"] = randn32(g, E, std=0.05)
            si = inter * n_shared
            trunk[m + "shared_experts.gate_proj.weight"] = lin(g, si, D)
            trunk[m + "shared_experts.up_proj.weight"] = lin(g, si, D)
            trunk[m + "shared_experts.down_proj.weight"] = lin(g, D, si, gain=0.5)
            if k3:
                trunk[m + "routed_expert_down_proj.weight"] = lin(g, din, D)
                trunk[m + "routed_expert_norm.weight"] = norm_w(g, din)
                trunk[m + "routed_expert_up_proj.weight"] = lin(g, D, din, gain=0.5)
            gen_exp = {}
            for e in range(E):   # generate in numeric order, lay out in lexicographic order
                mats = {}
                for wn, (o, i) in (("w1", (inter, din)), ("w2", (din, inter)), ("w3", (inter, din))):
                    w = randn32(g, o, i, std=i ** -0.5)
                    if k3:
                        pk, sc = mxfp4.quantize(w)
                        mats[wn] = [("weight_packed", pk), ("weight_scale", sc)]
                    else:
                        mats[wn] = [("weight", w.to(BF))]
                gen_exp[e] = mats
            for e in expert_order(E):
                for wn in ("w1", "w2", "w3"):
                    for suf, t in gen_exp[e][wn]:
                        experts.append((f"{pre}{m}experts.{e}.{wn}.{suf}", t))
        else:
            trunk["mlp.gate_proj.weight"] = lin(g, tc["intermediate_size"], D)
            trunk["mlp.up_proj.weight"] = lin(g, tc["intermediate_size"], D)
            trunk["mlp.down_proj.weight"] = lin(g, D, tc["intermediate_size"], gain=0.5)
        trunk_items = [(pre + k, trunk[k]) for k in sorted(trunk)]
        layers.append((trunk_items, experts))
    tail = [(P + "model.norm.weight", norm_w(g, D))]
    if k3:
        tail += [(P + "model.output_attn_res_norm.weight", norm_w(g, D)),
                 (P + "model.output_attn_res_proj.weight", randn32(g, D, std=0.1).to(BF))]
    tail += [(P + "lm_head.weight", lin(g, V, D, gain=2.0))]
    # shard plan: shard 1 = embed + first half of layers; shard 2 = the rest; shard 3 (K3) = final
    # tensors + lm_head + the last layer's experts (a layer whose experts sit apart from its trunk).
    half = NL // 2
    s1 = list(head)
    for tr, ex in layers[:half]:
        s1 += tr + ex
    s2 = []
    for l, (tr, ex) in enumerate(layers[half:], start=half):
        s2 += tr + (ex if (not k3 or l != NL - 1) else [])
    if k3:
        s3 = tail + layers[NL - 1][1]
        shards = [s1, s2, s3]
    else:
        s2 += tail
        shards = [s1, s2]
    return cfg, shards


def write_model(root, kind, vocab_tokens, seed=None):
    name = "tiny-k3" if kind == "k3" else "tiny-kimi-linear"
    d = os.path.join(root, "fixtures", "models", name)
    os.makedirs(d, exist_ok=True)
    cfg, shards = build(kind, seed)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    st.save_sharded(d, shards, metadata={"format": "pt"})
    write_tokenizer(d, K3_SPECIALS if kind == "k3" else KL_SPECIALS,
                    "[EOS]", vocab_tokens)
    return d


def train_vocab():
    return tokenizer.train(SAMPLE, N_RANKS - 256)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=REPO)
    a = ap.parse_args()
    vocab_tokens = train_vocab()
    for kind in ("k3", "kl"):
        d = write_model(a.out, kind, vocab_tokens)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{d}: {size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
