#!/usr/bin/python3
"""PyTorch reference perplexity of a text on a checkpoint (the number `k3 eval --text` must match),
and optionally the greedy continuation of a prompt (the ids `k3 run --raw --max-tokens N` must match).

usage: eval_text.py --model DIR --text FILE [--max-tokens N] [--chunk 64]
                    [--prompt TEXT --greedy N] [--threads 1]
Prints one JSON object: tokens, scored, mean_nll, perplexity (and prompt_ids, greedy_ids).
The text is [BOS] + the text encoded with specials off, as `k3 eval` does.
"""
import argparse
import json
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from k3ref.evaluate import sequence_nll, summary  # noqa: E402
from k3ref.model import Model  # noqa: E402
from models_fixtures import load_tokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text")
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--prompt")
    ap.add_argument("--greedy", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = Model(a.model)
    tok = load_tokenizer(a.model)
    bos = m.cfg.raw.get("bos_token_id")
    out = {"model": a.model}
    if a.text:
        with open(a.text, encoding="utf-8") as f:
            ids = [bos] + tok.encode(f.read(), allow_special=False)
        if a.max_tokens is not None:
            ids = ids[:a.max_tokens + 1]
        out.update({"tokens": len(ids), **summary(sequence_nll(m, ids, a.chunk))})
    if a.prompt is not None and a.greedy > 0:
        prompt = [bos] + tok.encode(a.prompt, allow_special=False)
        gen, _ = m.greedy(prompt, a.greedy, incremental=True)
        out.update({"prompt_ids": prompt, "greedy_ids": gen})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
