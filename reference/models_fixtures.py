"""Model-level fixtures for the tiny checkpoints: fixtures/models/<name>/expected.safetensors + expected.json."""
import json
import os

import torch

from k3ref import st
from k3ref import tokenizer as tk
from k3ref.evaluate import sequence_nll, summary
from k3ref.model import Model

T_TF = 24
N_GREEDY = 20

TEXTS = {
    "tiny-k3": {
        "tf": "The quick brown fox jumps over the lazy dog. 今天天气很好。def add(a, b): return a + b",
        "prompt": '<|open|>message role="user"<|sep|>Write a function that adds two numbers.<|close|>message<|sep|>'
                  '<|end_of_msg|><|open|>message role="assistant"<|sep|><|open|>think<|sep|>',
    },
    "tiny-kimi-linear": {
        "tf": "Mixture of experts: the router picks a few experts for each token. 专家混合模型。x = 12345",
        "prompt": "<|im_user|>user<|im_middle|>Write a function that adds two numbers.<|im_end|>"
                  "<|im_assistant|>assistant<|im_middle|>",
    },
}
# Perplexity case (`k3 eval`): [BOS] + this text, scored with carried state; long enough (> 64 tokens)
# that the engine's prefill crosses a chunk boundary.
EVAL_TEXT = ("A small model reads the text one token at a time and keeps a state for every layer. "
             "The router picks a few experts for each token; the shared expert always runs. "
             "def add(a, b):\n    return a + b\n今天天气很好，我们一起去公园散步。Numbers like 12, 345 and 2026.")
TOKENIZER_CASES = ["Hello world", "Hello, world!", "It's 2026-11-30; we're testing.", "中文English混合",
                   "HTTPRequestHandler", "   \t\n   ", "def add(a, b):\n    return a + b\n", "今天天气很好，我们一起去公园散步。"]


def load_tokenizer(d):
    ranks = tk.read_rank_file(os.path.join(d, "tiktoken.model"))
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        tc = json.load(f)
    specials = {v["content"]: int(k) for k, v in tc["added_tokens_decoder"].items()}
    return tk.Tokenizer(ranks, specials)


def model_fixture(model_dir, name):
    m = Model(model_dir)
    tok = load_tokenizer(model_dir)
    c = m.cfg
    bos = (m.cfg.raw.get("bos_token_id"))
    tf_ids = ([bos] + tok.encode(TEXTS[name]["tf"]))[:T_TF]
    assert len(tf_ids) == T_TF, len(tf_ids)
    prompt = tok.encode(TEXTS[name]["prompt"])
    stats = []
    logits, dumps, _ = m.forward(tf_ids, stats=stats)
    final_hidden = m.last_final_hidden
    route = torch.stack([idx for _, idx, _ in stats])          # [n_moe_layers, T, k]
    gen_ids, gen_logits = m.greedy(prompt, N_GREEDY, incremental=True)
    eval_ids = [bos] + tok.encode(EVAL_TEXT, allow_special=False)
    eval_nll = sequence_nll(m, eval_ids, chunk=64)
    gstats = []
    m.forward(prompt + gen_ids[:-1], stats=gstats)
    # health
    rms = dumps.pow(2).mean(-1).sqrt().mean(-1)
    srt = torch.sort(gen_logits, -1, descending=True).values
    probs = torch.softmax(logits, -1)
    health = {
        "hidden_rms_per_layer": [round(x, 4) for x in rms.tolist()],
        "tf_logits_std": round(logits.std().item(), 4),
        "tf_logits_absmax": round(logits.abs().max().item(), 4),
        "tf_mean_top1_prob": round(probs.max(-1).values.mean().item(), 4),
        "distinct_experts_used_tf": len(set(route.flatten().tolist())),
        "experts_total": c.n_experts,
        "min_router_selection_margin": min(s[2] for s in stats + gstats),
        "greedy_distinct_tokens": len(set(gen_ids)),
        "greedy_min_top1_top2_logit_gap": (srt[:, 0] - srt[:, 1]).min().item(),
        "tf_min_top1_top2_logit_gap": (lambda s_: (s_[:, 0] - s_[:, 1]).min().item())(
            torch.sort(logits, -1, descending=True).values),
    }
    items = [("tf.ids", torch.tensor(tf_ids, dtype=torch.int64)), ("tf.logits", logits),
             ("tf.argmax", torch.argmax(logits, -1)), ("tf.hidden", dumps), ("tf.final_hidden", final_hidden),
             ("tf.route_idx", route),
             ("greedy.prompt_ids", torch.tensor(prompt, dtype=torch.int64)),
             ("greedy.ids", torch.tensor(gen_ids, dtype=torch.int64)), ("greedy.logits", gen_logits)]
    meta = {
        "model": name, "tf_text": TEXTS[name]["tf"], "tf_ids": tf_ids, "prompt_text": TEXTS[name]["prompt"],
        "prompt_ids": prompt, "greedy_ids": gen_ids, "greedy_note": "exactly 20 greedy steps, no stop tokens; "
        "greedy.logits[i] is the distribution token i was picked from (incremental decode == full recompute)",
        "layer_types": ["KDA" if k else "MLA" for k in c.is_kda],
        "moe_layers": [l for l in range(c.n_layers) if c.is_moe(l)],
        "health": health,
        "eval": {"text": EVAL_TEXT, "ids": eval_ids, **summary(eval_nll),
                 "note": "k3 eval: [BOS] + text, position p scores token p+1 (log-softmax, float64), mean over "
                         "len(ids)-1 tokens; perplexity = exp(mean_nll)"},
        "tokenizer_cases": [{"text": s, "ids": tok.encode(s, allow_special=False)} for s in TOKENIZER_CASES],
        "tensors": {
            "tf.ids I64[24]": "teacher-forcing input (BOS + encoded tf_text, truncated to 24)",
            "tf.logits F64[24,1024]": "logits at every position", "tf.argmax I64[24]": "argmax per position",
            "tf.hidden F64[n_layers+1,24,128]": "0 = embedding, l+1 = hidden after layer l (K3: the running "
            "stream p returned by the layer). K3 AttnRes snapshots: the block list after layer l is "
            "[tf.hidden[b] for b in 0, B, 2B, ... if b <= l] (B = attn_res_block_size), so any single layer can be "
            "replayed from tf.hidden alone",
            "tf.final_hidden F64[24,128]": "input of the final RMSNorm (K3: after the output AttnRes mix; 48B: = tf.hidden[-1])",
            "tf.route_idx I64[n_moe_layers,24,k]": "router choice per MoE layer (descending biased score)",
            "greedy.prompt_ids I64[P]": "chat-formatted prompt", "greedy.ids I64[20]": "greedy continuation",
            "greedy.logits F64[20,1024]": "logits each greedy token was chosen from"},
        "tolerance": {"tf.logits": {"atol": 1e-4, "rtol": 1e-4}, "tf.hidden": {"atol": 1e-4, "rtol": 1e-4},
                      "greedy.ids": "exact", "tf.argmax": "exact", "eval.mean_nll": {"rtol": 1e-4}},
    }
    return items, meta


def write_all(root, verbose=False):
    out = []
    for name in ("tiny-k3", "tiny-kimi-linear"):
        d = os.path.join(root, "fixtures", "models", name)
        items, meta = model_fixture(d, name)
        st.save(os.path.join(d, "expected.safetensors"), items, sort_by_width=True)
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(meta, f, indent=1, ensure_ascii=False)
            f.write("\n")
        out.append(d)
        if verbose:
            print(f"{name}: greedy {meta['greedy_ids']}")
            print(f"  health: {json.dumps(meta['health'])}")
    return out
