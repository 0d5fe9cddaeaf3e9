"""The pinned fixed-seed results of ``tests/behaviour_cases.py`` still hold.

A failure here means a change altered the labels, ``ncut_`` or the
iterations of some fit.  If that was the intent, regenerate the file with
``python tests/behaviour_cases.py --write`` and explain the change in the
commit; otherwise it is a regression.
"""

import json

import pytest

import behaviour_cases as bc

PINNED = json.loads(bc.DATA.read_text())
PINNED_ENV = json.loads(bc.ENV_DATA.read_text())
CASES = bc.cases()


def _close(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return a == pytest.approx(b, rel=1e-12, abs=1e-14)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def test_every_case_is_pinned():
    """New cases need a regenerated file; pinned cases must still run (torch
    cases are skipped without torch)."""
    missing = sorted(set(CASES) - set(PINNED))
    assert not missing, f"cases without a pinned result: {missing}"
    gone = sorted(k for k in set(PINNED) - set(CASES) if not k.startswith(
        ("torch/", "batch/torch/")))
    assert not gone, f"pinned cases that no longer exist: {gone}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_pinned_result(name):
    if bc.blas_cores() != {bc.BLAS_CORE}:
        pytest.skip(f"the pins were made with OpenBLAS's {bc.BLAS_CORE} kernels; "
                    f"this process runs {sorted(bc.blas_cores())} (on x86-64, "
                    f"OPENBLAS_CORETYPE={bc.BLAS_CORE} before NumPy loads)")
    if bc.uses_blas(name) and (env := bc.environment()) != PINNED_ENV:
        pytest.skip(f"a BLAS/LAPACK-based case, pinned with {PINNED_ENV}; "
                    f"this process has {env}")
    got = CASES[name]()
    want = PINNED[name]
    assert _close(got, want), f"{name}: got {got}, pinned {want}"
