import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.dirname(HERE)
REPO = os.path.dirname(REF)
if REF not in sys.path:
    sys.path.insert(0, REF)

import torch  # noqa: E402

MEASURED = {}   # name -> relative error of a wrong variant (reported by regen)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def assert_close(a, b, tol, what):
    r = rel(a, b)
    if not r <= tol:
        raise AssertionError(f"{what}: relative error {r:.3e} > {tol:.1e}")
    return r


def assert_wrong(a, b, min_rel, what):
    r = rel(a, b)
    MEASURED[what] = r
    if not r >= min_rel:
        raise AssertionError(f"wrong variant '{what}' only changed the output by {r:.3e} (< {min_rel})")
    return r


def model_dir(root, name):
    return os.path.join(root, "fixtures", "models", name)


ROOT = [REPO]   # regen --check points this at the freshly generated tree
