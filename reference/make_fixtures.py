#!/usr/bin/python3
"""Writes fixtures/components/* and fixtures/models/<name>/expected.safetensors.

usage: make_fixtures.py [--out ROOT] [--only components|models]
ROOT defaults to the repo root (fixtures/ is written under it). Models must exist (make_tiny.py).
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import components  # noqa: E402
from k3ref import st  # noqa: E402

REPO = os.path.dirname(HERE)


def write_components(root):
    out = os.path.join(root, "fixtures", "components")
    os.makedirs(out, exist_ok=True)
    manifest = []
    for f in components.ALL:
        name, items, entry = f()
        st.save(os.path.join(out, f"{name}.safetensors"), items, sort_by_width=True)
        manifest.append(entry)
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write(components_readme(manifest))
    with open(os.path.join(out, "MANIFEST.json"), "w") as fh:
        json.dump({"generator": "reference/make_fixtures.py (torch float64 reference, k3ref)",
                   "default_tolerance": components.DEFAULT_TOL,
                   "tolerance_rule": "pass if |got - expected| <= atol + rtol*|expected| elementwise",
                   "fixtures": manifest}, fh, indent=2)
        fh.write("\n")
    return [e["file"] for e in manifest]


README_HEAD = """# Component fixtures (generated: do not edit)

Written by `reference/make_fixtures.py` from the float64 PyTorch reference in `reference/k3ref/`
(`/usr/bin/python3 reference/regen.py` rewrites them; `--check` verifies them; `pnpm test:reference`).
This README and `MANIFEST.json` are generated from the same table.

Conventions
- Files are plain safetensors (little-endian, header padded to 8, tensors ordered widest dtype first so
  every offset is aligned to its dtype). Load them with `@k3/safetensors`.
- Tensor names are `group.name` (dots are just part of the name). Weights inside a layer fixture use the
  checkpoint suffixes (`w.q_proj`, `w.q_conv1d` [C,1,4], `experts.3.w1.weight_packed`, ...).
- Inputs for fp32 kernels are **F32**; the reference computes in float64 from exactly those F32 values;
  expected outputs are **F64**. Integer outputs (expert ids) are I64; MXFP4 bytes are U8.
- Pass rule: `|got - expected| <= atol + rtol*|expected|` element-wise, with the tolerance below
  (default atol 1e-5, rtol 1e-4 for fp32 engines). `exact` means bit-exact; `exact set` means the
  same expert ids irrespective of order.
- Tensors named `wrong.*` / `*_wrong_*` / `*nibble_swapped*` are the outputs of a known bug; an
  implementation must NOT match them (they show how far each silent bug moves the result).
- KDA conventions: q is L2-normalised (eps 1e-6 inside the sqrt of the sum) and pre-scaled by
  head_dim^-0.5 before the recurrence; k is L2-normalised; g is the log decay (alpha = exp(g)); the
  state S is [H, dk, dv] (rows = key channels); o_t is read after the write.

"""


def components_readme(manifest):
    out = [README_HEAD, "| file | tests | invariant | tolerance |", "|---|---|---|---|"]
    for e in manifest:
        out.append(f"| `{e['file']}` | {e['tests']} | {e['invariant']} | `{json.dumps(e['tolerance'])}` |")
    out.append("")
    for e in manifest:
        out.append(f"## {e['file']}\n\n{e['tests']}. Invariant: {e['invariant']}.\n")
        for k, v in e["tensors"].items():
            out.append(f"- `{k.strip()}`" + (f": {v}" if v else ""))
        out.append("")
    return "\n".join(out) + "\n"


def write_models(root, verbose=False):
    import models_fixtures
    return models_fixtures.write_all(root, verbose)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=REPO)
    ap.add_argument("--only", choices=["components", "models"])
    a = ap.parse_args()
    t = time.time()
    if a.only != "models":
        write_components(a.out)
        print(f"components written in {time.time() - t:.1f}s")
    if a.only != "components":
        t = time.time()
        write_models(a.out, verbose=True)
        print(f"model fixtures written in {time.time() - t:.1f}s")


if __name__ == "__main__":
    main()
