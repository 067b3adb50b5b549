"""Minimal tiktoken-style byte-level BPE for the tiny generated rank file (fixtures only).

- Rank file: lines "base64(token) rank"; ranks 0..255 are the single bytes in GPT-2 printable order.
- Pre-split: a hand-written matcher of the Kimi K2 pat_str (8 alternatives, leftmost-first). Unicode
  classes come from unicodedata; Han is approximated by the CJK ideograph blocks. Exact for
  ASCII + CJK text (what the fixtures use), not a general replacement for the JS tokenizer.
- Encode: whole piece in the table -> its rank; else repeatedly merge the adjacent pair whose
  concatenated bytes have the lowest rank (leftmost on ties).
- Special tokens (from tokenizer_config) are matched as whole strings before splitting when allowed.
"""
import base64
import collections
import unicodedata

WS = set("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {chr(c) for c in range(0x2000, 0x200B)}
HAN_RANGES = [(0x2E80, 0x2E99), (0x2E9B, 0x2EF3), (0x2F00, 0x2FD5), (0x3005, 0x3005), (0x3007, 0x3007),
              (0x3021, 0x3029), (0x3038, 0x303B), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFA6D),
              (0xFA70, 0xFAD9), (0x20000, 0x2A6DF), (0x2A700, 0x2EBE0), (0x2F800, 0x2FA1D), (0x30000, 0x323AF)]


def bytes_order():
    """The 256 byte values in GPT-2 printable order ('!'..'~', '¡'..'¬', '®'..'ÿ', then the rest)."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    return bs + [b for b in range(256) if b not in bs]


def is_han(c):
    o = ord(c)
    return any(a <= o <= b for a, b in HAN_RANGES)


def cat(c):
    return unicodedata.category(c)


def is_L(c):
    return cat(c)[0] == "L"


def is_N(c):
    return cat(c)[0] == "N"


def upperish(c):   # [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
    k = cat(c)
    return (k in ("Lu", "Lt", "Lm", "Lo") or k[0] == "M") and not is_han(c)


def lowerish(c):   # [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]
    k = cat(c)
    return (k in ("Ll", "Lm", "Lo") or k[0] == "M") and not is_han(c)


def prefix_ok(c):  # [^\r\n\p{L}\p{N}]
    return c not in "\r\n" and not is_L(c) and not is_N(c)


CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]


def _run(s, i, pred):
    j = i
    while j < len(s) and pred(s[j]):
        j += 1
    return j


def _contraction(s, j):
    for c in CONTRACTIONS:
        if s[j:j + len(c)].lower() == c:
            return j + len(c)
    return j


def _alt_letters(s, i, a_plus):
    """Alternatives 2 (a_plus False: A* B+) and 3 (A+ B*), with the optional prefix char."""
    starts = ([i + 1] if i < len(s) and prefix_ok(s[i]) else []) + [i]
    for st in starts:
        amax = _run(s, st, upperish)
        if a_plus:
            if amax == st:
                continue
            j = _run(s, amax, lowerish)
            return _contraction(s, j)
        for a_end in range(amax, st - 1, -1):
            j = _run(s, a_end, lowerish)
            if j > a_end:
                return _contraction(s, j)
    return None


def match_at(s, i):
    c = s[i]
    if is_han(c):                                                       # 1
        return _run(s, i, is_han)
    for a_plus in (False, True):                                        # 2, 3
        e = _alt_letters(s, i, a_plus)
        if e is not None:
            return e
    if is_N(c):                                                         # 4
        j = i
        while j < len(s) and j - i < 3 and is_N(s[j]):
            j += 1
        return j
    punct = lambda ch: ch not in WS and not is_L(ch) and not is_N(ch)  # noqa: E731
    st = i + 1 if c == " " and i + 1 < len(s) and punct(s[i + 1]) else i
    if st < len(s) and punct(s[st]):                                    # 5
        j = _run(s, st, punct)
        return _run(s, j, lambda ch: ch in "\r\n")
    if c in WS:
        e = _run(s, i, lambda ch: ch in WS)
        nl = [k for k in range(i, e) if s[k] in "\r\n"]
        if nl:                                                          # 6
            return nl[-1] + 1
        if e == len(s):                                                 # 7
            return e
        if e - 1 > i:
            return e - 1
        return e                                                        # 8
    raise ValueError(f"no alternative matches {c!r}")


def split(s):
    out, i = [], 0
    while i < len(s):
        e = match_at(s, i)
        out.append(s[i:e])
        i = e
    return out


def bpe(piece, ranks):
    if piece in ranks:
        return [ranks[piece]]
    parts = [bytes([b]) for b in piece]
    while len(parts) > 1:
        best, bi = None, -1
        for k in range(len(parts) - 1):
            r = ranks.get(parts[k] + parts[k + 1])
            if r is not None and (best is None or r < best):
                best, bi = r, k
        if best is None:
            break
        parts = parts[:bi] + [parts[bi] + parts[bi + 1]] + parts[bi + 2:]
    return [ranks[p] for p in parts]


def train(text, n_merges):
    """Byte-level BPE training on the split pieces of text. Returns the list of tokens (bytes) by rank."""
    vocab = [bytes([b]) for b in bytes_order()]
    have = set(vocab)
    words = collections.Counter(tuple(bytes([b]) for b in p.encode("utf-8")) for p in split(text))
    words = dict(words)
    while len(vocab) < 256 + n_merges:
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            raise ValueError("training text too short for the requested number of merges")
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0][0] + kv[0][1], kv[0]))
        new = a + b
        if new not in have:
            vocab.append(new)
            have.add(new)
        nw = {}
        for w, n in words.items():
            out, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                    out.append(new)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + n
        words = nw
    return vocab


def write_rank_file(path, vocab):
    with open(path, "w") as f:
        for r, tok in enumerate(vocab):
            f.write(f"{base64.b64encode(tok).decode()} {r}\n")


def read_rank_file(path):
    ranks = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                b64, r = line.split()
                ranks[base64.b64decode(b64)] = int(r)
    return ranks


class Tokenizer:
    def __init__(self, ranks, specials):
        self.ranks = ranks
        self.inv = {v: k for k, v in ranks.items()}
        self.specials = specials          # {string: id}
        self.inv_specials = {v: k for k, v in specials.items()}

    def encode(self, text, allow_special=True):
        ids, i, seg = [], 0, 0
        while i <= len(text):
            hit = None
            if allow_special and i < len(text):
                for s, sid in self.specials.items():
                    if text.startswith(s, i):
                        hit = (s, sid)
                        break
            if hit or i == len(text):
                for p in split(text[seg:i]):
                    ids += bpe(p.encode("utf-8"), self.ranks)
                if hit:
                    ids.append(hit[1])
                    i += len(hit[0])
                    seg = i
                    continue
                break
            i += 1
        return ids

    def decode_bytes(self, ids):
        return b"".join(self.inv[i] if i in self.inv else self.inv_specials[i].encode() for i in ids)
