"""The affinities: the registry, the one definition of each formula, and the
checks of precomputed matrices."""

import numpy as np
import pytest
from shared import random_graph as _graph
from sklearn.metrics.pairwise import cosine_similarity, rbf_kernel

from sklearn_falcon import FalconNCut
from sklearn_falcon._affinity import AFFINITIES, PRECOMPUTED, cosine_power_affinity
from sklearn_falcon._affinity import _check as nk
from sklearn_falcon._backends import BACKENDS


def test_constraints_and_precomputed_names_derive_from_the_registry():
    opts = FalconNCut._parameter_constraints["affinity"][0].options
    assert set(opts) == set(AFFINITIES)
    assert set(PRECOMPUTED) == {"precomputed", "precomputed_nearest_neighbors"}
    # a backend with matrix-free problems forms every matrix-free affinity
    matrix_free = {n for n, cls in AFFINITIES.items() if cls.matrix_free}
    assert matrix_free == {"cosine", "rbf"}
    assert any(spec.make_problem_from_features for spec in BACKENDS.values())
    torch = pytest.importorskip("torch")  # noqa: F841
    from sklearn_falcon._backends._torch._affinity import Affinity

    assert set(Affinity.KINDS) == matrix_free


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cosine_power_is_the_estimator_definition(dtype):
    X = np.random.default_rng(0).normal(size=(60, 5)).astype(dtype)
    W, lo, hi = cosine_power_affinity(X, 3.0)
    S = cosine_similarity(X)
    np.testing.assert_allclose(W, np.clip((S - lo) / (hi - lo), 0, 1) ** 3,
                               rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert W.dtype == dtype
    est = FalconNCut(3, affinity="cosine", power=3.0, random_state=0).fit(X)
    np.testing.assert_array_equal(est.affinity_matrix_, W)
    # new samples use the training range
    A = est._affinity.cross(X[:5])
    np.testing.assert_allclose(A, W[:5], rtol=1e-5)


def test_constant_similarities_give_all_ones():
    X = np.ones((6, 3))
    W, lo, hi = cosine_power_affinity(X, 2.0)
    np.testing.assert_array_equal(W, np.ones((6, 6)))


def test_rbf_is_sklearn_rbf_kernel():
    X = np.random.default_rng(1).normal(size=(40, 3))
    est = FalconNCut(3, affinity="rbf", gamma=0.3, random_state=0).fit(X)
    np.testing.assert_array_equal(est.affinity_matrix_, rbf_kernel(X, gamma=0.3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_self_products_by_row_blocks_agree(dtype, monkeypatch):
    # above SELF_PRODUCT_BLOCK rows the cosine and rbf self-products are made
    # of row blocks (NumPy's whole U @ U.T goes to an OpenBLAS syrk that
    # crashed at 16,384 float64 rows): the same matrices, to rounding
    from sklearn_falcon._affinity import _kinds

    X = np.random.default_rng(2).normal(size=(230, 7)).astype(dtype)
    S_lib, W_lib = _kinds.cosine_similarity(X), rbf_kernel(X, gamma=0.3)
    monkeypatch.setattr(_kinds, "SELF_PRODUCT_BLOCK", 64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(_kinds.cosine_similarity(X), S_lib, rtol=tol, atol=tol)
    est = FalconNCut(3, affinity="rbf", gamma=0.3, random_state=0).fit(X)
    np.testing.assert_allclose(est.affinity_matrix_, W_lib, rtol=tol, atol=tol)
    assert np.all(np.diag(est.affinity_matrix_) == 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_asymmetry_dense(dtype):
    W, _ = _graph(n=150, seed=4, dtype=dtype)  # more than two 64-wide tiles
    assert nk.max_asymmetry_dense(W) == 0.0
    A = W.copy()
    A[3, 140] += 0.25
    A[100, 7] -= 0.5
    assert nk.max_asymmetry_dense(A) == pytest.approx(np.abs(A - A.T).max())


