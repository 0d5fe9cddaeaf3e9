"""Regression tests of the defects a hostile user found (issue 18).

Each test names its defect; each failed before the fix.  The CLI defects
(3 and 5) are tested in ``tests/test_cli.py``, the verbose progress of the
matrix-free torch fit (defect 2) in ``tests/test_logging.py``.
"""

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import config_context
from sklearn.datasets import make_blobs
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.utils import get_tags
from sklearn.utils.estimator_checks import (
    check_fit_score_takes_y,
    check_pipeline_consistency,
)

from sklearn_falcon import FalconNCut, _memory, normalized_cut
from sklearn_falcon._backends._device import torch_available

needs_torch = pytest.mark.skipif(not torch_available(), reason="torch is not installed")


# ------------------------------------------------ 2. dense affinity too large
@pytest.mark.parametrize("affinity", ["rbf", "cosine"])
def test_dense_affinity_that_cannot_fit_is_refused_with_advice(affinity):
    # 200,000 x 16 features: W would take 298 GiB.  numpy used to fail deep in
    # rbf_kernel with "Unable to allocate 298. GiB"; now the estimate refuses
    # it before anything is allocated, and says what to do instead.
    X = np.ones((200_000, 16))
    with pytest.raises(MemoryError) as info:
        FalconNCut(3, affinity=affinity, backend="numba").fit(X)
    msg = str(info.value)
    assert f"(200000, 200000) float64 {affinity} affinity needs about 298 GiB" in msg
    assert "affinity='nearest_neighbors'" in msg and "backend='torch'" in msg


def test_dense_affinity_refused_against_the_available_memory(monkeypatch):
    X = make_blobs(n_samples=100, random_state=0)[0]
    monkeypatch.setattr(_memory, "available_memory", lambda: 10_000)
    with pytest.raises(MemoryError, match="needs about 78.1 KiB, but only 9.77 KiB"):
        FalconNCut(3, affinity="rbf").fit(X)
    FalconNCut(3, affinity="nearest_neighbors").fit(X)  # sparse: fits
    monkeypatch.setattr(_memory, "available_memory", lambda: None)  # unknown
    FalconNCut(3, affinity="rbf").fit(X)


def test_score_on_too_many_samples_is_refused(monkeypatch):
    X = make_blobs(n_samples=100, random_state=0)[0]
    est = FalconNCut(3, affinity="cosine", random_state=0).fit(X)
    monkeypatch.setattr(_memory, "available_memory", lambda: 50_000)
    with pytest.raises(MemoryError, match="nearest_neighbors"):
        est.score(X)  # W of X itself: (100, 100) float64 = 78 KiB


def _peak_bytes(func):
    tracemalloc.start()
    try:
        func()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("affinity", ["rbf", "cosine"])
def test_predict_runs_in_bounded_memory(affinity):
    # predict on many rows against an rbf fit used to form the whole
    # (n_new, n_train) cross-affinity at once (2M rows: numpy's MemoryError);
    # now it goes in row chunks within sklearn's working_memory
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 2))
    est = FalconNCut(3, affinity=affinity, gamma=0.5, random_state=0).fit(X)
    X_new = rng.normal(size=(20_000, 2))
    dense = X_new.shape[0] * X.shape[0] * 8  # 80 MB
    with config_context(working_memory=1024):
        expected = est.predict(X_new)
    with config_context(working_memory=2):
        peak = _peak_bytes(lambda: est.predict(X_new))
        got = est.predict(X_new)
    np.testing.assert_array_equal(got, expected)
    assert peak < dense / 8, (peak, dense)


# ------------------------------------- 4. torch backend with sparse features
@needs_torch
@pytest.mark.parametrize("affinity", ["rbf", "cosine"])
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_torch_backend_accepts_sparse_features(affinity, fmt):
    # the torch backend said "features must be 2-D arrays ... got shapes
    # [()]"; it now densifies the (n, p) features, and agrees with Numba
    X = sp.random(80, 12, density=0.4, random_state=0, format=fmt)
    X = X + sp.random(80, 12, density=0.1, random_state=1, format=fmt)  # no 0 row
    kw = dict(affinity=affinity, gamma=0.5, random_state=0, init="random")
    est = FalconNCut(3, backend="torch", device="cpu", **kw).fit(X)
    ref = FalconNCut(3, backend="numba", **kw).fit(X)
    np.testing.assert_allclose(est.affinity_matrix_, ref.affinity_matrix_,
                               rtol=1e-10, atol=1e-12)
    assert est.ncut_ == pytest.approx(ref.ncut_, abs=1e-9)
    assert est.predict(X[:5]).shape == (5,)


# ------------------------------------ 6. cosine rows of (near) zero norm
def _tiny_rows(dtype, n_tiny, positive, norm=1e-28, n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    if positive:
        X = np.abs(X)
    X[:n_tiny] *= norm
    return X.astype(dtype)


@needs_torch
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n_tiny, positive, norm", [
    (3, True, 1e-28), (3, False, 1e-28), (20, True, 0.0), (60, False, 1e-28),
])
def test_matrix_free_cosine_zero_norm_rows_agree_with_dense(dtype, n_tiny, positive,
                                                            norm):
    # ncut_ of a matrix-free torch fit was 0.0 while normalized_cut of its
    # affinity_matrix_ was 0.833 (tiny rows scaled to unit norm on torch,
    # left unscaled by the dense path); all-tiny float32 rows gave NaN
    X = _tiny_rows(dtype, n_tiny, positive, norm)
    kw = dict(affinity="cosine", power=2.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zero-degree samples
        dense = FalconNCut(3, backend="numba", **kw).fit(X)
        free = FalconNCut(3, backend="torch", device="cpu", **kw).fit(X)
    W = free.affinity_matrix_
    assert np.all(np.isfinite(W))
    tol = 1e-5 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(W, dense.affinity_matrix_, atol=tol)
    assert free.ncut_ == pytest.approx(normalized_cut(W, free.labels_), abs=tol)
    # rows of zero norm have similarity 0 to every row, themselves included
    lo, hi = free._affinity.cos_min_, free._affinity.cos_max_
    w0 = np.clip((0.0 - lo) / (hi - lo), 0, 1) ** 2 if hi > lo else 1.0  # S = 0
    np.testing.assert_allclose(W[:n_tiny], w0, atol=tol)


@needs_torch
def test_matrix_free_cosine_keeps_the_features_zero_norm_threshold():
    """float32 rows of norm 1e-9: zero rows by float32's threshold (1.2e-6),
    not by float64's (2.2e-15), on the device and in the affinity_matrix_
    recomputed from a torch fit alike (the recompute, in the device's
    float64, took them for unit rows: ncut_ 0.372, the NCut of its W 0.591;
    found by hypothesis) and in predict."""
    X = np.array([[1.0], [1e-9], [-1.0], [-1.0], [-1.0]], dtype=np.float32)
    kw = dict(affinity="cosine", random_state=0)
    dense = FalconNCut(2, backend="numba", **kw).fit(X)
    free = FalconNCut(2, backend="torch", device="cpu", **kw).fit(X)
    np.testing.assert_allclose(free.affinity_matrix_, dense.affinity_matrix_,
                               atol=1e-6)
    assert free.ncut_ == pytest.approx(
        normalized_cut(free.affinity_matrix_, free.labels_), abs=1e-6)
    np.testing.assert_array_equal(free.predict(X.astype(np.float64)),
                                  dense.predict(X))


def test_cosine_zero_norm_threshold_is_sklearns():
    from sklearn.preprocessing import normalize

    from sklearn_falcon._affinity import cosine_similarity, zero_norm

    for dtype in (np.float32, np.float64):
        z = zero_norm(dtype)
        X = np.array([[z * 0.9, 0.0], [z * 1.1, 0.0], [1.0, 1.0]], dtype=dtype)
        # sklearn's normalize leaves exactly the rows below the threshold
        left = np.all(normalize(X) == X, axis=1)
        S = cosine_similarity(X)
        np.testing.assert_array_equal(np.all(S == 0, axis=1), left)


# ------------------------------------------------ 7. precomputed affinity
@pytest.mark.parametrize("affinity", ["precomputed", "precomputed_nearest_neighbors"])
@pytest.mark.parametrize("check", [check_fit_score_takes_y, check_pipeline_consistency])
def test_precomputed_passes_score_checks(affinity, check):
    check("FalconNCut", FalconNCut(affinity=affinity, n_clusters=3))


@pytest.mark.parametrize("affinity, positive", [
    ("precomputed", True), ("precomputed_nearest_neighbors", True),
    ("rbf", False), ("nearest_neighbors", False),
])
def test_tags_say_precomputed_input_is_nonnegative(affinity, positive):
    assert get_tags(FalconNCut(affinity=affinity)).input_tags.positive_only is positive


def test_precomputed_negative_input_is_refused_as_sklearn_expects():
    W = rbf_kernel(make_blobs(n_samples=30, random_state=0)[0])
    W[0, 1] = W[1, 0] = -0.5
    with pytest.raises(ValueError, match="Negative values in data.*-0.5"):
        FalconNCut(2, affinity="precomputed").fit(W)


# ------------------------------------------------------------- 8. max_iter=0
def test_max_iter_zero_is_documented_and_keeps_the_initial_labels():
    doc = FalconNCut.__doc__
    entry = doc[doc.index("max_iter : int"):doc.index("tol : float")]
    assert "``max_iter=0``" in entry and "n_iter_" in entry
    X, y = make_blobs(n_samples=90, centers=3, cluster_std=3.0, random_state=0)
    y0 = (y + (np.arange(90) % 7 == 0)) % 3  # a start that can be improved
    est = FalconNCut(3, init=y0, max_iter=0, polish=False).fit(X)
    assert est.n_iter_ == 0 and est.objective_path_.shape == (1,)
    np.testing.assert_array_equal(est.labels_, y0)
    assert est.ncut_ == pytest.approx(normalized_cut(est.affinity_matrix_, y0))
    polished = FalconNCut(3, init=y0, max_iter=0).fit(X)
    assert polished.n_iter_ == 0 and polished.ncut_ <= est.ncut_


# ------------------------------------------------- 9. disconnected kNN graph
def test_disconnected_knn_graph_warns_with_the_number_of_components():
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(40, 2)) + 100 * c for c in range(4)])
    with pytest.warns(UserWarning, match=r"4 connected components \(n_clusters=3\)"
                                         r".*Increase n_neighbors \(now 5\)"):
        FalconNCut(3, n_neighbors=5, random_state=0).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a connected graph: no warning
        FalconNCut(3, n_neighbors=30, random_state=0).fit(X[:40])


def test_disconnected_precomputed_graph_warns():
    W = sp.block_diag([sp.csr_matrix(np.ones((5, 5)))] * 2, format="csr")
    with pytest.warns(UserWarning, match="2 connected components"):
        FalconNCut(2, affinity="precomputed").fit(W)


def test_disconnected_dense_graph_warns():
    # a dense adjacency, or an RBF kernel that underflows to exact zeros, was
    # not searched: NCut 0 without a word, where the same graph as a sparse
    # matrix warned
    W = np.kron(np.eye(2), np.ones((5, 5)))
    with pytest.warns(UserWarning, match="2 connected components"):
        FalconNCut(2, affinity="precomputed").fit(W)
    X = np.random.default_rng(0).normal(size=(30, 2))
    with pytest.warns(UserWarning, match=r"30 connected components.*Decrease gamma "
                                         r"\(now 1e\+300\) to connect it"):
        FalconNCut(3, affinity="rbf", gamma=1e300).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # zeros, but connected (a path)
        path = np.eye(6, k=1) + np.eye(6, k=-1)
        FalconNCut(2, affinity="precomputed").fit(path)


def test_dense_components_agree_with_scipy():
    from scipy.sparse.csgraph import connected_components

    from sklearn_falcon._affinity._check import _dense_n_components

    rng = np.random.default_rng(0)
    for p in (0.0, 0.01, 0.03, 0.1):
        A = np.triu(rng.random((80, 80)) < p, 1).astype(float)
        A = A + A.T
        expect = connected_components(sp.csr_matrix(A), directed=False)[0]
        assert _dense_n_components(A, chunk=1) == expect  # one row a step
        assert _dense_n_components(A) == expect


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", ["numba", pytest.param("torch", marks=needs_torch)])
def test_cosine_of_identical_rows_is_flat_not_rounding_noise(dtype, backend):
    # found by the fuzz test (tests/test_fuzz.py): identical rows have
    # cosines 1 +- a few eps; min-max normalisation stretched that rounding
    # noise to [0, 1], and the torch fit's ncut_ (0.92) disagreed with the
    # NCut of its affinity_matrix_ (0.0)
    X = np.full((13, 3), 1.5, dtype=dtype)
    est = FalconNCut(2, affinity="cosine", backend=backend, device="cpu",
                     random_state=0).fit(X)
    W = est.affinity_matrix_
    np.testing.assert_array_equal(W, np.ones((13, 13)))
    assert est.ncut_ == pytest.approx(normalized_cut(W, est.labels_), abs=1e-12)
    assert est.ncut_ == pytest.approx(1.0)  # any 2 clusters of a complete graph


@needs_torch
def test_torch_cosine_range_is_the_dense_one():
    import torch

    from sklearn_falcon._affinity import cosine_range, cosine_similarity
    from sklearn_falcon._backends._torch._affinity import Affinity

    rng = np.random.default_rng(0)
    for X in (np.ones((6, 3)) + 1e-9 * rng.normal(size=(6, 3)),  # within rounding
              np.ones((6, 3)) + 1e-3 * rng.normal(size=(6, 3)),  # a real spread
              rng.normal(size=(6, 3))):
        lo, hi = cosine_range(cosine_similarity(X))
        A = Affinity(torch.as_tensor(X)[None], torch.ones(1, 6, dtype=torch.bool))
        assert (float(A.lo[0]) == float(A.hi[0])) == (lo == hi)
        assert float(A.lo[0]) == pytest.approx(lo, abs=1e-12)
        assert float(A.hi[0]) == pytest.approx(hi, abs=1e-12)


# ------------------------------------- weights across more than float64's range
# An 18-node graph of weights 1e-12, 1 and 1e6 (found by a random search):
# 1e6 + 1e-12 == 1e6 in float64, so once a heavy node joined a cluster of
# 1e-12-degree nodes and left it, the cluster's running volume was exactly 0
# and the exact-move sweep divided by it: ZeroDivisionError from the compiled
# loop, in the multilevel start's refinements.
_SPAN_EDGES = [
    (0, 1, 1e6), (0, 2, 1.0), (0, 4, 1e-12), (0, 6, 1.0), (0, 8, 1e6),
    (1, 2, 1.0), (2, 2, 2e6), (2, 8, 1e-12), (2, 12, 1.0), (2, 16, 1e-12),
    (3, 9, 1e-12), (4, 9, 1e-12), (4, 12, 1e6), (5, 13, 1e6), (6, 9, 1e6),
    (6, 13, 1.0), (7, 10, 1e-12), (7, 13, 1.0), (7, 14, 1e6), (7, 15, 1.0),
    (8, 11, 1e-12), (11, 12, 1e6), (11, 13, 1e-12), (12, 12, 2.0),
    (13, 14, 1.0), (13, 16, 1e-12), (14, 15, 1e6), (14, 16, 1e-12),
    (15, 15, 2e6), (17, 17, 2e-12),
]


def _span_graph():
    i, j, w = (np.array(v) for v in zip(*_SPAN_EDGES))
    U = sp.coo_matrix((w, (i, j)), shape=(18, 18)).tocsr()
    return (U + sp.triu(U, 1).T).tocsr()  # each off-diagonal edge both ways


@pytest.mark.parametrize("init", ["multilevel", "multilevel_fast"])
def test_weights_spanning_18_orders_of_magnitude_fit(init):
    W = _span_graph()
    assert abs(W - W.T).max() == 0
    est = FalconNCut(11, affinity="precomputed", init=init, random_state=387).fit(W)
    assert np.unique(est.labels_).size == 11
    assert est.ncut_ == pytest.approx(normalized_cut(W, est.labels_), rel=1e-9)
    assert np.all(np.diff(est.objective_path_) >= 0)


def test_move_kernels_take_a_running_volume_rounded_to_zero():
    # cluster 1 holds node 2 (degree 1e-12) but its running volume is 0.0,
    # as rounding leaves it: the sweeps and the FM round must not divide by it
    from sklearn_falcon._backends._numba import fm_round_csr, local_move_sweep_csr
    from sklearn_falcon._backends._numba import _kernels, _polish

    W = sp.csr_matrix(np.array([[0, 1e6, 0, 1.0], [1e6, 0, 1e-12, 1.0],
                                [0, 1e-12, 0, 0], [1.0, 1.0, 0, 0]]))
    d = np.asarray(W.sum(1)).ravel()
    y = np.array([0, 0, 1, 2], dtype=np.int64)
    vol = np.array([d[0] + d[1], 0.0, d[3]])
    assoc = np.array([2e6, 0.0, 0.0])
    args = (W.indptr.astype(np.int64), W.indices.astype(np.int64), W.data, d)
    local_move_sweep_csr(*args, y.copy(), vol.copy(), assoc.copy())
    Wd = W.toarray()
    WX = _kernels.cluster_weights_dense(Wd, y, 3)
    _polish.local_move_sweep_dense(Wd, d, y.copy(), WX, vol.copy(), assoc.copy())
    fm_round_csr(*args, y.copy(), vol.copy(), assoc.copy(), np.arange(4), 10, 3.0,
                 10 ** 9)
