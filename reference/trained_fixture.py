"""The trained tiny K3 (fixtures/models/trained-k3, written by train_tiny.py and committed; CI never
retrains): its expected outputs from the float64 reference, fixtures/models/trained-k3/expected.json.

  - eval: [BOS] + eval.txt (a short text written for this fixture, not in the training corpus) scored
    with carried state in 64-token chunks: mean NLL and perplexity, the number `k3 eval --text` must give;
  - greedy: the raw-completion prompt `k3 run` uses by default with the embedded model, and its greedy
    continuation, the ids `k3 run --raw --max-tokens N` must give.
training.json beside them is train_tiny.py's report.json of the run that made the checkpoint (held-out
perplexity on the corpus's held-out end, MXFP4 vs bf16 experts); it is copied, not regenerated.
"""
import json
import os

from k3ref.evaluate import sequence_nll, summary
from k3ref.model import Model
from models_fixtures import load_tokenizer

TRAINED_DIR = "fixtures/models/trained-k3"
EXPECTED = "expected.json"
EVAL_FILE = "eval.txt"
PROMPT = "Rust is"
N_GREEDY = 32


def expected(model_dir):
    m = Model(model_dir)
    tok = load_tokenizer(model_dir)
    bos = m.cfg.raw["bos_token_id"]
    with open(os.path.join(model_dir, EVAL_FILE), encoding="utf-8") as f:
        text = f.read()
    ids = [bos] + tok.encode(text, allow_special=False)
    prompt = [bos] + tok.encode(PROMPT, allow_special=False)
    gen, _ = m.greedy(prompt, N_GREEDY, incremental=True)
    return {
        "eval": {"text_file": EVAL_FILE, "ids": ids, "chunk": 64, **summary(sequence_nll(m, ids, 64))},
        "greedy": {"prompt": PROMPT, "prompt_ids": prompt, "ids": gen,
                   "text": tok.decode_bytes(gen).decode("utf-8", errors="replace")},
    }


def write_expected(repo, out_root):
    """Computes expected.json from the committed checkpoint in repo and writes it under out_root."""
    out_dir = os.path.join(out_root, TRAINED_DIR)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, EXPECTED), "w", encoding="utf-8") as f:
        json.dump(expected(os.path.join(repo, TRAINED_DIR)), f, indent=1, ensure_ascii=False)
        f.write("\n")
    return os.path.join(TRAINED_DIR, EXPECTED)
