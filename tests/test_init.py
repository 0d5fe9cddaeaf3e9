"""The initializations: the registry, coarsening and the choice of starts."""

import numpy as np
import pytest
import scipy.sparse as sp
from shared import dense_token_graph as _dense_token_graph
from shared import random_graph as _graph
from threadpoolctl import threadpool_info

from sklearn_falcon import FalconNCut
from sklearn_falcon._inits import INITS, InitContext, _coarsen, _multilevel
from sklearn_falcon._inits import _coarsen as nk
from sklearn_falcon._solver import SolverOptions
from sklearn_falcon.metrics import normalized_association


def _onehot(labels, K):
    X = np.zeros((labels.size, K))
    X[np.arange(labels.size), labels] = 1
    return X


def test_coarsen_dense_matches_sparse_and_preserves_f():
    W = _dense_token_graph(200)
    d = W.sum(1)
    Wc, dc, m = _coarsen.coarsen(W, d)
    Sc, sc, ms = _coarsen.coarsen(sp.csr_matrix(W), d)
    np.testing.assert_array_equal(m, ms)
    np.testing.assert_allclose(Wc, Sc.toarray(), rtol=1e-12)
    np.testing.assert_allclose(dc, Wc.sum(1))
    yc = np.arange(Wc.shape[0]) % 3
    assert normalized_association(Wc, yc) == pytest.approx(
        normalized_association(W, yc[m]), rel=1e-12
    )


def _spectral_levels(monkeypatch, W, K):
    seen = []
    real = _multilevel.spectral_embedding_labels

    def spy(Wl, dl, k, rng, **kw):
        seen.append(Wl.shape[0])
        return real(Wl, dl, k, rng, **kw)

    monkeypatch.setattr(_multilevel, "spectral_embedding_labels", spy)
    d = np.asarray(W.sum(axis=1)).ravel()
    cands, H = _multilevel.multilevel_candidates(W, d, K, np.random.default_rng(0))
    return seen, cands, H


def test_spectral_start_is_on_a_cheap_level(monkeypatch):
    # dense 400-token graph: 160,000 entries > spectral_max_nnz, so the
    # eigensolve runs on a coarse level
    W = _dense_token_graph(400)
    seen, cands, H = _spectral_levels(monkeypatch, W, 4)
    assert len(seen) == 1 and seen[0] < 400
    assert seen[0] ** 2 <= 100_000
    assert all(c.shape == (400,) for c in cands)
    # a small sparse graph gets its spectral start on the input graph itself
    S = sp.csr_matrix(np.where(W > np.quantile(W, 0.97), W, 0.0))
    S = sp.csr_matrix(S.maximum(S.T))
    seen, _, _ = _spectral_levels(monkeypatch, S, 4)
    assert seen == [400]


def test_only_the_best_coarse_candidate_reaches_the_finest_level(monkeypatch):
    K = 4
    W = _dense_token_graph(400)
    seen, cands, H = _spectral_levels(monkeypatch, W, K)
    assert seen[0] < 400  # the spectral start is on a coarse level
    # the depth-16K random start falls back to the input graph when no
    # coarse level holds 16 K nodes; every other start is on a coarse level
    on_input = int(not any(s >= 16 * K for s in H.sizes[1:]))
    # the best coarse candidate, plus one per start made on the input graph
    assert len(cands) == 1 + on_input


def test_fit_restores_blas_threads():
    def blas_threads():
        return [(i["internal_api"], i["num_threads"]) for i in threadpool_info()
                if i["user_api"] == "blas"]

    before = blas_threads()
    FalconNCut(3, affinity="precomputed", random_state=0).fit(
        _dense_token_graph(150, 3))
    assert blas_threads() == before


@pytest.mark.parametrize("name", sorted(INITS))
def test_every_init_gives_valid_starts_through_the_registry(name):
    W, S = _graph(n=120, seed=1, density=0.3)
    X = np.random.default_rng(0).normal(size=(120, 3))
    ctx = InitContext(4, np.random.default_rng(0), SolverOptions(), W=S,
                      degrees=W.sum(1), X=X)
    starts = INITS[name].make(ctx)
    assert starts and all(y.shape == (120,) for y in starts)
    assert all(set(np.unique(y)) == set(range(4)) for y in starts)
    # the same seed gives the same starts
    ctx2 = InitContext(4, np.random.default_rng(0), SolverOptions(), W=S,
                       degrees=W.sum(1), X=X)
    for a, b in zip(starts, INITS[name].make(ctx2)):
        np.testing.assert_array_equal(a, b)


def test_estimator_offers_the_registry():
    from sklearn_falcon import FalconNCut

    assert set(FalconNCut._parameter_constraints["init"][0].options) == set(INITS)


def _heaviest_reference(W, d):
    R = np.where(W > 0, W / d[None, :], -1.0)
    np.fill_diagonal(R, -1)
    ref = R.argmax(1)  # the first maximum: ties go to the smallest index
    return np.where(R.max(1) > 0, ref, np.arange(W.shape[0]))


@pytest.mark.parametrize("n", [30, 37])
def test_heaviest_neighbor(n):
    W, S = _graph(n=n, seed=7)
    d = W.sum(1)
    hs = nk.heaviest_neighbor_csr(S.indptr, S.indices, S.data, d)
    hd = nk.heaviest_neighbor_dense(W, d)
    np.testing.assert_array_equal(hs, _heaviest_reference(W, d))
    np.testing.assert_array_equal(hd, _heaviest_reference(W, d))


def test_heaviest_neighbor_ties_and_near_ties():
    # integer weights and equal degrees: many exact ties, which must go to the
    # smallest index; entries that differ only in the last bits of W_ij / d_j
    # (where W_ij * (1 / d_j) may round the other way) must follow the division
    rng = np.random.default_rng(3)
    A = rng.integers(0, 3, size=(41, 41)).astype(np.float64)
    W = A + A.T
    d = W.sum(1)
    np.testing.assert_array_equal(nk.heaviest_neighbor_dense(W, d),
                                  _heaviest_reference(W, d))
    W = np.ones((9, 9))
    d = np.full(9, 3.0)
    d[5] = 3.0 * (1 - 2**-52)  # W / d[5] is one ulp above the others
    np.testing.assert_array_equal(nk.heaviest_neighbor_dense(W, d),
                                  _heaviest_reference(W, d))
    assert nk.heaviest_neighbor_dense(W, d)[0] == 5
    # an isolated node points at itself
    W = np.zeros((3, 3))
    W[0, 1] = W[1, 0] = 1.0
    d = W.sum(1)
    np.testing.assert_array_equal(nk.heaviest_neighbor_dense(W, d), [1, 0, 2])


def test_forest_components_numbers_like_scipy():
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(5)
    for n in (1, 2, 17, 300):
        target = rng.integers(n, size=n).astype(np.int64)
        forest = sp.csr_matrix((np.ones(n), (np.arange(n), target)), shape=(n, n))
        n_ref, ref = connected_components(forest, directed=False)
        n_comp, mapping = nk.forest_components(target)
        assert n_comp == n_ref
        np.testing.assert_array_equal(mapping, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coarsen_dense_is_pt_w_p(dtype):
    W, S = _graph(n=40, seed=3, dtype=dtype)
    mapping = np.random.default_rng(0).integers(7, size=40).astype(np.int64)
    P = _onehot(mapping, 7)
    Wc = nk.coarsen_dense(W, mapping, 7)
    assert Wc.dtype == dtype and Wc.shape == (7, 7)
    np.testing.assert_allclose(Wc, P.T @ W.astype(np.float64) @ P, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coarsen_csr_is_pt_w_p(dtype):
    W, S = _graph(n=50, seed=5, dtype=dtype)
    np.fill_diagonal(W, 0.3)  # self-loops become part of the coarse diagonal
    S = sp.csr_matrix(W)
    mapping = np.random.default_rng(1).integers(9, size=50).astype(np.int64)
    indptr, indices, data = nk.coarsen_csr(S.indptr, S.indices, S.data, mapping, 9)
    Wc = sp.csr_matrix((data, indices, indptr), shape=(9, 9))
    assert data.dtype == dtype
    # one stored entry per coarse pair that has fine weight
    assert Wc.nnz == len({(a, b) for a, b in zip(*(mapping[x] for x in S.nonzero()))})
    P = _onehot(mapping, 9)
    np.testing.assert_allclose(Wc.toarray(), P.T @ W.astype(np.float64) @ P, rtol=1e-5)
    np.testing.assert_allclose(Wc.toarray(), nk.coarsen_dense(W, mapping, 9), rtol=1e-5)


