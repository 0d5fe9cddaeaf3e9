"""The multilevel initialization: coarsening and the choice of starts."""

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_info

from sklearn_falcon import FalconNCut, _init
from sklearn_falcon.metrics import normalized_association


def _dense_token_graph(n=400, groups=4, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(groups, 8))
    F = centers[rng.integers(groups, size=n)] + 0.6 * rng.normal(size=(n, 8))
    F /= np.linalg.norm(F, axis=1, keepdims=True)
    S = F @ F.T
    return ((S - S.min()) / (S.max() - S.min())) ** 3


def test_coarsen_dense_matches_sparse_and_preserves_f():
    W = _dense_token_graph(200)
    d = W.sum(1)
    Wc, dc, m = _init.coarsen(W, d)
    Sc, sc, ms = _init.coarsen(sp.csr_matrix(W), d)
    np.testing.assert_array_equal(m, ms)
    np.testing.assert_allclose(Wc, Sc.toarray(), rtol=1e-12)
    np.testing.assert_allclose(dc, Wc.sum(1))
    yc = np.arange(Wc.shape[0]) % 3
    assert normalized_association(Wc, yc) == pytest.approx(
        normalized_association(W, yc[m]), rel=1e-12
    )


def _spectral_levels(monkeypatch, W, K):
    seen = []
    real = _init.spectral_embedding_labels

    def spy(Wl, dl, k, rng, **kw):
        seen.append(Wl.shape[0])
        return real(Wl, dl, k, rng, **kw)

    monkeypatch.setattr(_init, "spectral_embedding_labels", spy)
    d = np.asarray(W.sum(axis=1)).ravel()
    cands, H = _init.multilevel_candidates(W, d, K, np.random.default_rng(0))
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
    FalconNCut(3, affinity="precomputed", random_state=0).fit(_dense_token_graph(150, 3))
    assert blas_threads() == before
