#!/usr/bin/python3
"""Regenerate (default) or verify (--check) every committed reference artefact.

  regen.py           rewrite fixtures/models/tiny-*/ and fixtures/components/ in place, and the trained
                     model's expected.json from its committed checkpoint (trained_fixture.py), then self-test
  regen.py --check   generate into a temp dir, compare with the committed files, run the self-tests;
                     exit 1 with a diff summary on any drift or failure

Comparison rules: checkpoints, tokenizer files, configs and all non-F64 tensors must be byte-identical
(inputs are F32/BF16/U8/I64 from a seeded generator). F64 expected outputs may differ by at most
1e-12 (components) / 1e-10 (whole tiny models) relative to the tensor's max |value| (BLAS summation
order on another CPU can move the last bits). JSON files compare parsed, with numbers to 1e-9 relative.
Runs on Debian's python3-torch (1.13), CPU, torch + stdlib only.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True   # keep the source tree clean (CI runs --check in a checkout)
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "tests"))

import torch  # noqa: E402

torch.set_num_threads(1)

import make_fixtures  # noqa: E402
import make_tiny  # noqa: E402
import trained_fixture  # noqa: E402
from k3ref import st  # noqa: E402

REPO = os.path.dirname(HERE)
MODEL_DIRS = ["fixtures/models/tiny-k3", "fixtures/models/tiny-kimi-linear"]
COMP_DIR = "fixtures/components"


def generate(root):
    t0 = time.time()
    vocab = make_tiny.train_vocab()
    for kind in ("k3", "kl"):
        make_tiny.write_model(root, kind, vocab)
    t1 = time.time()
    make_fixtures.write_components(root)
    t2 = time.time()
    make_fixtures.write_models(root)
    t3 = time.time()
    # The trained model is not regenerated (training takes most of an hour): its expected outputs are,
    # from the committed checkpoint.
    trained_fixture.write_expected(REPO, root)
    t4 = time.time()
    return {"checkpoints_s": round(t1 - t0, 2), "components_s": round(t2 - t1, 2), "model_fixtures_s": round(t3 - t2, 2),
            "trained_expected_s": round(t4 - t3, 2)}


def generated_files(root):
    out = []
    for d in MODEL_DIRS + [COMP_DIR]:
        full = os.path.join(root, d)
        for f in sorted(os.listdir(full)):
            out.append(os.path.join(d, f))
    return out + [os.path.join(trained_fixture.TRAINED_DIR, trained_fixture.EXPECTED)]


def _json_close(a, b, path="$"):
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path}: keys differ {sorted(set(a) ^ set(b))[:5]}"
        for k in a:
            r = _json_close(a[k], b[k], f"{path}.{k}")
            if r:
                return r
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            r = _json_close(x, y, f"{path}[{i}]")
            if r:
                return r
        return None
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1e-300):
            return None
        return f"{path}: {a!r} != {b!r}"
    return None if a == b else f"{path}: {a!r} != {b!r}"


def compare_file(rel, committed_root, fresh_root):
    a_path, b_path = os.path.join(committed_root, rel), os.path.join(fresh_root, rel)
    if not os.path.exists(a_path):
        return f"{rel}: not committed (new file from the generator)"
    with open(a_path, "rb") as f:
        a = f.read()
    with open(b_path, "rb") as f:
        b = f.read()
    if a == b:
        return None
    if rel.endswith(".json"):
        r = _json_close(json.loads(a), json.loads(b))
        return f"{rel}: {r}" if r else None
    if not rel.endswith(".safetensors"):
        return f"{rel}: bytes differ"
    is_ckpt = "model-0" in rel
    if is_ckpt:
        return f"{rel}: checkpoint bytes differ"
    tol = 1e-10 if "/models/" in rel else 1e-12
    ia, _ = st.parse(a)
    ib, _ = st.parse(b)
    da, db = dict(ia), dict(ib)
    if list(da) != list(db) and set(da) != set(db):
        return f"{rel}: tensor names differ: {sorted(set(da) ^ set(db))[:6]}"
    problems = []
    for n in da:
        x, y = da[n], db[n]
        if x.dtype != y.dtype or x.shape != y.shape:
            problems.append(f"{n}: {x.dtype}{list(x.shape)} vs {y.dtype}{list(y.shape)}")
        elif x.dtype == torch.float64:
            scale = max(y.abs().max().item() if y.numel() else 0.0, 1e-300)
            diff = (x - y).abs().max().item() if x.numel() else 0.0
            if not diff <= tol * scale:
                problems.append(f"{n}: max|diff| {diff:.3e} (rel {diff / scale:.3e} > {tol:.0e})")
        elif not torch.equal(x.view(torch.uint8) if x.dtype == torch.bfloat16 else x,
                             y.view(torch.uint8) if y.dtype == torch.bfloat16 else y):
            problems.append(f"{n}: {x.dtype} values differ (must be bit-identical)")
    return f"{rel}: " + "; ".join(problems[:6]) if problems else None


def run_tests(root):
    import common
    import test_core
    import test_models
    common.ROOT[0] = root
    results = []
    for mod in (test_core, test_models):
        for n in sorted(dir(mod)):
            if n.startswith("test_"):
                t = time.time()
                try:
                    getattr(mod, n)()
                    results.append((n, True, time.time() - t, ""))
                except Exception as e:  # noqa: BLE001
                    results.append((n, False, time.time() - t, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))
    return results, dict(common.MEASURED)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="verify committed fixtures instead of rewriting them")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args()
    t0 = time.time()
    failures = []
    if a.check:
        tmp = tempfile.mkdtemp(prefix="k3-regen-")
        try:
            timing = generate(tmp)
            fresh = generated_files(tmp)
            for rel in fresh:
                r = compare_file(rel, REPO, tmp)
                if r:
                    failures.append("DRIFT " + r)
            for d in MODEL_DIRS + [COMP_DIR]:
                full = os.path.join(REPO, d)
                if os.path.isdir(full):
                    for f in sorted(os.listdir(full)):
                        if os.path.join(d, f) not in fresh:
                            failures.append(f"DRIFT {d}/{f}: committed but no longer generated")
                else:
                    failures.append(f"DRIFT {d}: missing from the repository")
            results, measured = run_tests(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    else:
        timing = generate(REPO)
        results, measured = run_tests(REPO)
    for n, ok, dt, msg in results:
        if not a.quiet or not ok:
            print(f"  {'ok  ' if ok else 'FAIL'} {n} ({dt:.2f}s)")
        if not ok:
            failures.append(f"TEST {n}: {msg}")
    if not a.quiet:
        print("wrong-variant relative changes (each must be large so the fixtures catch it):")
        for k, v in measured.items():
            print(f"  {v:8.3f}  {k}")
        print(f"timing: {timing}, total {time.time() - t0:.1f}s")
    if failures:
        print(f"\nreference {'check' if a.check else 'regen'} FAILED ({len(failures)} problems):")
        for f in failures:
            print("  " + f)
        if a.check:
            print("\nIf the change is intended, run `/usr/bin/python3 reference/regen.py` and commit fixtures/.")
        sys.exit(1)
    print("reference check OK: fixtures match the torch reference" if a.check else "fixtures regenerated; self-tests OK")


if __name__ == "__main__":
    main()
