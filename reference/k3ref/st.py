"""safetensors read/write by hand (no safetensors package).

Layout: u64 LE header length N | N bytes of JSON (space padded to a multiple of 8) | data.
Writer keeps the caller's tensor order (checkpoint layout matters to us: experts contiguous in
lexicographic order), checks dtype alignment of every offset, and writes the JSON keys in data order.
"""
import ctypes
import json
import os
import struct

import torch

DTYPES = {
    "F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
    "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1), "BOOL": (torch.bool, 1),
}
TORCH2ST = {v[0]: k for k, v in DTYPES.items()}


def tensor_bytes(t):
    t = t.contiguous()
    n = t.numel() * t.element_size()
    if n == 0:
        return b""
    return ctypes.string_at(t.data_ptr(), n)


def serialize(items, metadata=None, sort_by_width=False):
    """items: list of (name, tensor) in the order the data is laid out. Returns bytes.
    sort_by_width: stable-sort by element size (widest first) so every offset is dtype-aligned."""
    if sort_by_width:
        items = sorted(items, key=lambda kv: -kv[1].element_size())
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs, off, names = [], 0, set()
    for name, t in items:
        if name in names:
            raise ValueError(f"duplicate tensor name {name}")
        names.add(name)
        st = TORCH2ST[t.dtype]
        size = DTYPES[st][1]
        if off % size:
            raise ValueError(f"{name}: offset {off} not aligned to {size} for {st}")
        b = tensor_bytes(t)
        header[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((-len(hj)) % 8)
    return struct.pack("<Q", len(hj)) + hj + b"".join(blobs)


def save(path, items, metadata=None, sort_by_width=False):
    if isinstance(items, dict):
        items = list(items.items())
    data = serialize(items, metadata, sort_by_width)
    with open(path, "wb") as f:
        f.write(data)
    return len(data)


def parse(data):
    """Returns (ordered list of (name, tensor), metadata dict). Validates offsets strictly."""
    if len(data) < 8:
        raise ValueError("header too small")
    (n,) = struct.unpack("<Q", data[:8])
    if n > 100_000_000 or 8 + n > len(data):
        raise ValueError("invalid header length")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None) or {}
    base = 8 + n
    entries = sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"]))
    pos = 0
    out = []
    buf = bytearray(data[base:])
    for name, info in entries:
        b, e = info["data_offsets"]
        dt, size = DTYPES[info["dtype"]]
        shape = info["shape"]
        numel = 1
        for s in shape:
            numel *= s
        if b != pos or e - b != numel * size:
            raise ValueError(f"invalid offsets for {name}")
        pos = e
        if numel == 0:
            t = torch.zeros(shape, dtype=dt)
        else:
            t = torch.frombuffer(buf, dtype=torch.uint8, count=e - b, offset=b).view(dt).reshape(shape).clone()
        out.append((name, t))
    if pos != len(buf):
        raise ValueError("incomplete metadata, file not fully covered")
    return out, meta


def load(path):
    with open(path, "rb") as f:
        items, _ = parse(f.read())
    return dict(items)


def load_meta(path):
    with open(path, "rb") as f:
        return parse(f.read())[1]


def load_checkpoint(model_dir):
    """Loads a (possibly sharded) checkpoint directory into {name: tensor} (original dtypes)."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(wm.values())):
            for name, t in load(os.path.join(model_dir, shard)).items():
                if wm.get(name) != shard:
                    raise ValueError(f"{name} in {shard} but index says {wm.get(name)}")
                out[name] = t
        missing = set(wm) - set(out)
        if missing:
            raise ValueError(f"tensors missing from shards: {sorted(missing)[:5]}")
        return out
    return load(os.path.join(model_dir, "model.safetensors"))


def save_sharded(model_dir, shards, metadata=None):
    """shards: list of lists of (name, tensor); writes model-0000i-of-0000n.safetensors + index."""
    n = len(shards)
    wm, total = {}, 0
    for i, items in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        save(os.path.join(model_dir, fn), items, metadata)
        for name, t in items:
            wm[name] = fn
            total += t.numel() * t.element_size()
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": wm}, f, indent=2)
        f.write("\n")
