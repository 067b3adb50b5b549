"""Perplexity of a token sequence (what `k3 eval` computes), float64: the sequence runs in chunks
with carried state; position p's logits score token p + 1 (log-softmax), so n ids score n - 1
tokens. The chunk size does not change the result beyond rounding (the reference KDA is the
token-by-token recurrence and its state is carried exactly)."""
import math

import torch


def sequence_nll(model, ids, chunk=64):
    """Returns the list of per-token NLLs (nats) of ids[1:], each given the ones before it."""
    if len(ids) < 2:
        raise ValueError("at least 2 ids are needed to score one")
    state, nll = None, []
    for c0 in range(0, len(ids) - 1, chunk):
        piece = ids[c0:min(c0 + chunk, len(ids) - 1)]
        logits, _, state = model.forward(piece, state)
        lp = torch.log_softmax(logits.double(), -1)
        nll += [-lp[t, ids[c0 + t + 1]].item() for t in range(len(piece))]
    return nll


def summary(nll):
    mean = math.fsum(nll) / len(nll)
    return {"scored": len(nll), "mean_nll": mean, "perplexity": math.exp(mean)}
