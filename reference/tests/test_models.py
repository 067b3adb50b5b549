"""Tiny-model checks: GATE 3 (incremental == full recompute), checkpoint layout, tokenizer files."""
import base64
import json
import os
import re

import torch

import common
from common import assert_close, model_dir
from k3ref import st
from k3ref.model import Model

NAMES = ("tiny-k3", "tiny-kimi-linear")


def _expected(d):
    return st.load(os.path.join(d, "expected.safetensors"))


def test_gate3_incremental_equals_full():
    for name in NAMES:
        d = model_dir(common.ROOT[0], name)
        m = Model(d)
        e = _expected(d)
        prompt = e["greedy.prompt_ids"].tolist()
        gen = e["greedy.ids"].tolist()
        # full recompute at every step
        for i in range(len(gen)):
            lg = m.forward(prompt + gen[:i])[0][-1]
            assert int(torch.argmax(lg)) == gen[i], f"{name}: full-recompute greedy differs at step {i}"
            assert_close(lg, e["greedy.logits"][i], 1e-10, f"{name} step {i} full vs incremental logits")
        # teacher forcing token by token with carried state == one pass
        ids = e["tf.ids"].tolist()
        full = m.forward(ids)[0]
        state, rows = None, []
        for t in ids:
            lg, _, state = m.forward([t], state)
            rows.append(lg[0])
        assert_close(torch.stack(rows), full, 1e-10, f"{name}: token-by-token vs full prefill")
        # chunked prefill (7 + rest) == one pass
        a, _, s = m.forward(ids[:7])
        b, _, _ = m.forward(ids[7:], s)
        assert_close(torch.cat([a, b]), full, 1e-10, f"{name}: split prefill")


def _shards(d):
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        idx = json.load(f)
    order = {}
    for shard in sorted(set(idx["weight_map"].values())):
        with open(os.path.join(d, shard), "rb") as f:
            data = f.read()
        n = int.from_bytes(data[:8], "little")
        hdr = json.loads(data[8:8 + n])
        hdr.pop("__metadata__", None)
        order[shard] = sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return idx, order


def test_checkpoint_layout():
    exp_re = re.compile(r"^(?:language_model\.)?model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.(.+)$")
    for name in NAMES:
        d = model_dir(common.ROOT[0], name)
        k3 = name == "tiny-k3"
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        tc = cfg["text_config"] if k3 else cfg
        idx, order = _shards(d)
        assert len(order) >= 2, "need >= 2 shards"
        total = 0
        layer_shards = {}
        for shard, ents in order.items():
            names = [n for n, _ in ents]
            for n, info in ents:
                total += info["data_offsets"][1] - info["data_offsets"][0]
                assert idx["weight_map"][n] == shard
            # experts: per layer contiguous, lexicographic ids, 6 (or 3) tensors adjacent
            runs = {}
            for i, n in enumerate(names):
                m = exp_re.match(n)
                if m:
                    runs.setdefault(int(m.group(1)), []).append((i, m.group(2), m.group(3), m.group(4)))
            for layer, r in runs.items():
                assert layer not in layer_shards, f"layer {layer} experts split across shards"
                layer_shards[layer] = shard
                pos = [i for i, *_ in r]
                assert pos == list(range(pos[0], pos[0] + len(pos))), f"layer {layer} experts not contiguous"
                ids = []
                for _, e, _, _ in r:
                    if not ids or ids[-1] != e:
                        ids.append(e)
                assert ids == sorted(ids), f"layer {layer} experts not in lexicographic order"
                per = 6 if k3 else 3
                assert len(r) == per * tc["num_experts"]
                sufs = [(w, s) for _, _, w, s in r[:per]]
                want = ([(w, s) for w in ("w1", "w2", "w3") for s in ("weight_packed", "weight_scale")] if k3
                        else [(w, "weight") for w in ("w1", "w2", "w3")])
                assert sufs == want, sufs
        assert idx["metadata"]["total_size"] == total
        assert len(set(layer_shards.values())) >= 2, "experts of all layers are in one shard"
        # dtypes
        raw = st.load_checkpoint(d)
        P = "language_model." if k3 else ""
        for n, t in raw.items():
            base = n[len(P):]
            if ".experts." in n:
                want = torch.uint8 if k3 else torch.bfloat16
            elif base.endswith(("A_log", "dt_bias", "e_score_correction_bias")):
                want = torch.float32
            elif k3 and (base.endswith("conv1d.weight") or base.endswith("o_norm.weight")):
                want = torch.float32
            else:
                want = torch.bfloat16
            assert t.dtype == want, f"{n}: {t.dtype} != {want}"
            assert n.startswith(P), n
        H = tc["linear_attn_config"]["num_heads"]
        dk = tc["linear_attn_config"]["head_dim"]
        a = raw[P + "model.layers.0.self_attn.A_log"]
        if k3:
            assert a.shape == (dk,) and (a[H:] == 0).all() and (a[:H] != 0).all()
        else:
            assert a.shape == (1, 1, H, 1)
        assert raw[P + "model.layers.0.self_attn.q_conv1d.weight"].shape == (H * dk, 1, 4)
        # 1-based layer map
        full = tc["linear_attn_config"]["full_attn_layers"]
        assert min(full) >= 1 and max(full) == tc["num_hidden_layers"]
        assert (P + f"model.layers.{full[0] - 1}.self_attn.kv_b_proj.weight") in raw


def test_tokenizer_files():
    for name in NAMES:
        d = model_dir(common.ROOT[0], name)
        ranks = []
        with open(os.path.join(d, "tiktoken.model")) as f:
            for line in f:
                b64, r = line.split()
                assert int(r) == len(ranks)
                ranks.append(base64.b64decode(b64))
        assert len(ranks) == 768 and len(set(ranks)) == 768
        bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        order = bs + [b for b in range(256) if b not in bs]
        assert [r[0] for r in ranks[:256]] == order and all(len(r) == 1 for r in ranks[:256])
        assert ranks[0] == b"!" and ranks[188] == b"\x00"
        rank_of = {t: i for i, t in enumerate(ranks)}
        for i, t in enumerate(ranks[256:], start=256):
            assert any(t[:j] in rank_of and t[j:] in rank_of and rank_of[t[:j]] < i and rank_of[t[j:]] < i
                       for j in range(1, len(t))), f"token {i} {t!r} is not a merge of two lower ranks"
        with open(os.path.join(d, "tokenizer_config.json")) as f:
            tcfg = json.load(f)
        dec = {int(k): v["content"] for k, v in tcfg["added_tokens_decoder"].items()}
        assert sorted(dec) == list(range(768, 1024))
        with open(os.path.join(d, "config.json")) as f:
            cfg = json.load(f)
        tc = cfg.get("text_config", cfg)
        assert tc["vocab_size"] == 1024
        assert dec[cfg["bos_token_id"]] == "[BOS]" and dec[1023] == "[PAD]" and cfg["pad_token_id"] == 1023
        if name == "tiny-k3":
            assert dec[cfg["eos_token_id"]] == "<|end_of_msg|>" and dec[771] == "<|open|>" and dec[789] == "<|media_pad|>"
        else:
            assert dec[cfg["eos_token_id"]] == "<|im_end|>" and dec[785] == "<|im_middle|>" and dec[778] == "<|im_system|>"


def test_model_wrong_variants_move_logits():
    """Each silent-garbage variant moves the tiny models' teacher-forced logits far beyond the fixture tolerance."""
    from common import assert_wrong
    from k3ref import attnres, kda, moe, mxfp4

    d3 = model_dir(common.ROOT[0], "tiny-k3")
    dl = model_dir(common.ROOT[0], "tiny-kimi-linear")
    ref3 = _expected(d3)["tf.logits"]
    refl = _expected(dl)["tf.logits"]
    ids3 = _expected(d3)["tf.ids"].tolist()
    idsl = _expected(dl)["tf.ids"].tolist()

    def run(d, ids):
        return Model(d).forward(ids)[0]

    saved = {}

    def patch(mod, name, fn):
        saved[(mod, name)] = getattr(mod, name)
        setattr(mod, name, fn)

    def restore():
        for (mod, name), fn in saved.items():
            setattr(mod, name, fn)
        saved.clear()

    try:
        orig_decode = mxfp4.decode
        patch(mxfp4, "decode", lambda p, s: orig_decode(((((p & 0x0F) << 4) | (p >> 4)).to(torch.uint8)), s))
        assert_wrong(run(d3, ids3), ref3, 1e-2, "tiny-k3 logits: MXFP4 nibble swap")
        restore()
        orig_router = moe.router
        patch(moe, "router", lambda *a, **k: orig_router(*a, **dict(k, variant="biased_weights")))
        assert_wrong(run(d3, ids3), ref3, 1e-3, "tiny-k3 logits: router weights from biased scores")
        assert_wrong(run(dl, idsl), refl, 1e-3, "tiny-kimi-linear logits: router weights from biased scores")
        restore()

        def per_channel_k3(z_raw, A_log, dt_bias, num_heads, lower_bound=-5.0):
            T = z_raw.shape[0]
            a = A_log.reshape(-1).double()
            dk = z_raw.shape[1] // num_heads
            z = (z_raw + dt_bias.double()).reshape(T, num_heads, dk)
            return lower_bound * torch.sigmoid(torch.exp(a[:dk]).repeat(num_heads).reshape(1, num_heads, dk) * z)
        patch(kda, "gate_k3", per_channel_k3)
        assert_wrong(run(d3, ids3), ref3, 1e-3, "tiny-k3 logits: A_log indexed per channel")
        restore()
        orig_mix = attnres.mix
        patch(attnres, "mix", lambda p, blocks, wn, wp, eps: orig_mix(p, blocks, wn, torch.ones_like(wp), eps))
        assert_wrong(run(d3, ids3), ref3, 1e-3, "tiny-k3 logits: AttnRes ignoring res_proj")
        restore()
        patch(moe, "situ_glu", lambda a, b, b1=4.0, b2=25.0: moe.silu_glu(a, b))
        assert_wrong(run(d3, ids3), ref3, 1e-3, "tiny-k3 logits: SiLU-GLU instead of SiTU-GLU")
        restore()
    finally:
        restore()


def test_single_layer_replay_from_dumps():
    """Any layer can be checked alone: input tf.hidden[l], AttnRes blocks = tf.hidden[b] for boundaries b < l."""
    for name in NAMES:
        d = model_dir(common.ROOT[0], name)
        m = Model(d)
        e = _expected(d)
        hid = e["tf.hidden"]
        B = m.cfg.attn_res
        for l in range(m.cfg.n_layers):
            blocks = [hid[b] for b in range(0, l, B)] if B else []
            out, _ = m.layer(l, hid[l], blocks, m.new_state()["layers"][l])
            assert_close(out, hid[l + 1], 1e-12, f"{name} layer {l} replay")
