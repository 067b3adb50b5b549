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
    with open(os.path.join(out, "MANIFEST.json"), "w") as fh:
        json.dump({"generator": "reference/make_fixtures.py (torch float64 reference, k3ref)",
                   "default_tolerance": components.DEFAULT_TOL,
                   "tolerance_rule": "pass if |got - expected| <= atol + rtol*|expected| elementwise",
                   "fixtures": manifest}, fh, indent=2)
        fh.write("\n")
    return [e["file"] for e in manifest]


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
