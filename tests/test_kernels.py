"""The Numba solver kernels against plain NumPy references."""

import numpy as np
import pytest
import scipy.sparse as sp
from shared import random_graph as _graph

from sklearn_falcon._backends._numba import _csr as ncsr
from sklearn_falcon._backends._numba import _kernels as nk
from sklearn_falcon._backends._numba import _polish as npol


def _onehot(labels, K):
    X = np.zeros((labels.size, K))
    X[np.arange(labels.size), labels] = 1
    return X


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cluster_weights_and_stats(dtype):
    W, S = _graph(dtype=dtype)
    rng = np.random.default_rng(1)
    labels = rng.integers(4, size=W.shape[0]).astype(np.int64)
    ref = W.astype(np.float64) @ _onehot(labels, 4)
    np.testing.assert_allclose(nk.cluster_weights_dense(W, labels, 4), ref, rtol=1e-5)
    np.testing.assert_allclose(
        nk.cluster_weights_csr(S.indptr, S.indices, S.data, labels, 4), ref, rtol=1e-5
    )
    d = W.sum(1).astype(np.float64)
    vol, assoc = nk.cluster_stats(ref, labels, d, 4)
    X = _onehot(labels, 4)
    np.testing.assert_allclose(vol, X.T @ d)
    np.testing.assert_allclose(assoc, np.einsum("ik,ik->k", X, W @ X), rtol=1e-5)
    assert nk.objective(vol, assoc) == pytest.approx(np.sum(assoc / vol))


def test_parallel_and_serial_paths_agree(monkeypatch):
    W, S = _graph(n=300, density=0.1)
    labels = np.random.default_rng(2).integers(5, size=300).astype(np.int64)
    serial = nk.cluster_weights_csr(S.indptr, S.indices, S.data, labels, 5)
    monkeypatch.setattr(nk, "PARALLEL_MIN", 0)
    parallel = nk.cluster_weights_csr(S.indptr, S.indices, S.data, labels, 5)
    np.testing.assert_allclose(serial, parallel)
    d = W.sum(1)
    vol, assoc = nk.cluster_stats(serial, labels, d, 5)
    a, _ = nk.proximal_step(serial, d, vol, assoc, labels, 0.01)
    monkeypatch.setattr(nk, "PARALLEL_MIN", 10**12)
    b, _ = nk.proximal_step(serial, d, vol, assoc, labels, 0.01)
    np.testing.assert_array_equal(a, b)


def _choices(S, labels, d, vol, assoc):
    n = labels.size
    out = (np.empty(n, dtype=np.int64),) + tuple(np.empty(n) for _ in range(4))
    ncsr.row_choices(S.indptr, S.indices, S.data, labels, d, vol, assoc, *out)
    return out


@pytest.mark.parametrize("weights", ["exact", "random"])
def test_row_choices_take_the_dense_step(weights):
    # the CSR step (one pass, no WX) is the WX step: bit for bit when the
    # weights sum exactly, up to exact ties of the scores otherwise
    W, S = _graph(n=300, seed=21, density=0.05)
    if weights == "exact":
        S.data[:] = np.round(S.data * 4) / 4 + 0.25
        W = S.toarray()
    d = W.sum(1)
    rng = np.random.default_rng(22)
    for K in (2, 5, 40):  # 40: many clusters absent from every row
        labels = rng.integers(K, size=300).astype(np.int64)
        labels[:K] = np.arange(K)
        WX = nk.cluster_weights_csr(S.indptr, S.indices, S.data, labels, K)
        vol, assoc = nk.cluster_stats(WX, labels, d, K)
        best, s_best, s_own, w_own, w_best = _choices(S, labels, d, vol, assoc)
        np.testing.assert_array_equal(w_own, WX[np.arange(300), labels])
        moved = best >= 0
        np.testing.assert_array_equal(w_best[moved], WX[np.arange(300), best][moved])
        for tau in (0.0, 1e-3, 1e9):
            ref, m_ref = nk.proximal_step(WX, d, vol, assoc, labels, tau)
            got, m = ncsr.threshold_step(best, s_best, s_own, labels, tau, K)
            if weights == "exact":
                np.testing.assert_array_equal(got, ref)
            else:
                assert np.mean(got != ref) < 0.01
            assert m == np.count_nonzero(got != labels)


def test_row_choices_break_ties_like_the_dense_step():
    # equal weights and degrees: scores tie exactly, absent clusters tie in
    # pen; the first maximal index wins in both steps
    n, K = 60, 6
    S = sp.csr_matrix(np.kron(np.eye(n // 3), np.ones((3, 3))))
    d = np.asarray(S.sum(1)).ravel()
    rng = np.random.default_rng(23)
    for _ in range(20):
        labels = rng.integers(K, size=n).astype(np.int64)
        labels[:K] = np.arange(K)
        WX = S @ _onehot(labels, K)
        vol, assoc = nk.cluster_stats(WX, labels, d, K)
        best, s_best, s_own, _, _ = _choices(S, labels, d, vol, assoc)
        for tau in (-1.0, 0.0):
            ref, _ = nk.proximal_step(WX, d, vol, assoc, labels, tau)
            got, _ = ncsr.threshold_step(best, s_best, s_own, labels, tau, K)
            np.testing.assert_array_equal(got, ref)


def test_csr_passes_are_the_same_in_parallel_and_serial(monkeypatch):
    # more rows than ROW_BLOCK: several blocks
    import numba

    n, K = 2 * ncsr.ROW_BLOCK + 123, 7
    rng = np.random.default_rng(24)
    A = sp.random(n, n, density=6 / n, random_state=25, format="csr")
    S = (A + A.T).tocsr()
    d = np.asarray(S.sum(1)).ravel() + 1e-3
    old = rng.integers(K, size=n).astype(np.int64)
    new = old.copy()
    idx = rng.choice(n, n // 3, replace=False)
    new[idx] = rng.integers(K, size=idx.size)
    vol, assoc = ncsr.cluster_stats_csr(S.indptr, S.indices, S.data, old, d, K)
    out = {}
    for mode in ("serial", "parallel", "one thread"):
        monkeypatch.setattr(ncsr, "CSR_PARALLEL_MIN", 0 if mode != "serial" else 10**12)
        before = numba.get_num_threads()
        numba.set_num_threads(1 if mode == "one thread" else before)
        try:
            ch = _choices(S, old, d, vol, assoc)
            st = ncsr.cluster_stats_csr(S.indptr, S.indices, S.data, old, d, K)
            cs = ncsr.candidate_stats_rows(S.indptr, S.indices, S.data, d, old, new,
                                           ch[0], ch[3], ch[4], vol, assoc)
        finally:
            numba.set_num_threads(before)
        out[mode] = ch + st + cs
    for mode in ("parallel", "one thread"):  # the pass and the statistics: exact
        for a, b in zip(out["serial"][:7], out[mode][:7]):
            np.testing.assert_array_equal(a, b)
    # the candidate's statistics: added per block in parallel (in block order,
    # whatever the thread count); the serial kernel (small graphs) sums in
    # node order
    for a, b in zip(out["parallel"][7:], out["one thread"][7:]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(out["serial"][7:], out["parallel"][7:]):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    ref_v, ref_a = nk.cluster_stats(S @ _onehot(new, K), new, d, K)
    np.testing.assert_allclose(out["serial"][-2], ref_v, rtol=1e-12)
    np.testing.assert_allclose(out["serial"][-1], ref_a, rtol=1e-10)


def test_csr_statistics_are_those_of_the_pass(monkeypatch):
    W, S = _graph(n=90, seed=2)
    labels = np.random.default_rng(5).integers(4, size=90).astype(np.int64)
    d = W.sum(1)
    WX = nk.cluster_weights_csr(S.indptr, S.indices, S.data, labels, 4)
    own = ncsr._own_weights_par(S.indptr, S.indices, S.data, labels)
    np.testing.assert_array_equal(own, WX[np.arange(90), labels])  # same sums
    ref = nk.cluster_stats(WX, labels, d, 4)
    for threshold in (10**12, 0):  # serial, parallel
        monkeypatch.setattr(ncsr, "CSR_PARALLEL_MIN", threshold)
        got = ncsr.cluster_stats_csr(S.indptr, S.indices, S.data, labels, d, 4)
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])


def test_score_matrix_and_step():
    W, S = _graph()
    labels = np.random.default_rng(4).integers(3, size=W.shape[0]).astype(np.int64)
    d = W.sum(1)
    WX = W @ _onehot(labels, 3)
    vol, assoc = nk.cluster_stats(WX, labels, d, 3)
    mu = nk.score_matrix(WX, d, vol, assoc)
    np.testing.assert_allclose(mu, 2 * WX / vol - d[:, None] * assoc / vol**2)
    tau = 0.05
    new, moved = nk.proximal_step(WX, d, vol, assoc, labels, tau)
    bonus = mu + tau * _onehot(labels, 3)
    ref = np.where(bonus.max(1) > bonus[np.arange(labels.size), labels],
                   bonus.argmax(1), labels)
    np.testing.assert_array_equal(new, ref)
    assert moved == np.count_nonzero(new != labels)
    # a huge tau moves nothing
    same, m0 = nk.proximal_step(WX, d, vol, assoc, labels, 1e9)
    np.testing.assert_array_equal(same, labels)
    assert m0 == 0


def test_step_never_empties_a_cluster():
    # cluster 2 holds one node that is strongly attached to cluster 0
    W = np.ones((5, 5))
    labels = np.array([0, 0, 1, 1, 2], dtype=np.int64)
    d = W.sum(1)
    WX = W @ _onehot(labels, 3)
    vol, assoc = nk.cluster_stats(WX, labels, d, 3)
    new, _ = nk.proximal_step(WX, d, vol, assoc, labels, 0.0)
    assert set(new.tolist()) == {0, 1, 2}


@pytest.mark.parametrize("dense", [False, True])
def test_local_move_sweep_is_exact_and_monotone(dense):
    W, S = _graph(n=50, seed=5)
    labels = np.random.default_rng(6).integers(4, size=50).astype(np.int64)
    d = W.sum(1)
    WX = W @ _onehot(labels, 4)
    vol, assoc = nk.cluster_stats(WX, labels, d, 4)
    f0 = nk.objective(vol, assoc)
    if dense:
        moves = npol.local_move_sweep_dense(W, d, labels, WX, vol, assoc)
        # incremental state equals a recomputation
        np.testing.assert_allclose(WX, W @ _onehot(labels, 4), atol=1e-10)
    else:  # sums each node's weights from its row: no WX
        moves = npol.local_move_sweep_csr(S.indptr, S.indices, S.data, d, labels, vol,
                                          assoc)
    assert moves > 0
    v2, a2 = nk.cluster_stats(W @ _onehot(labels, 4), labels, d, 4)
    np.testing.assert_allclose(vol, v2)
    np.testing.assert_allclose(assoc, a2, atol=1e-10)
    assert nk.objective(vol, assoc) > f0


@pytest.mark.parametrize("n_moved", [15, 60])  # below / above a quarter of n
@pytest.mark.parametrize("dense", [False, True])
def test_candidate_stats_and_apply_moves_match_recompute(dense, n_moved):
    W, S = _graph(n=80, seed=8)
    np.fill_diagonal(W, 0.5)  # self-loops take part in the pair term
    S = sp.csr_matrix(W)
    rng = np.random.default_rng(9)
    old = rng.integers(4, size=80).astype(np.int64)
    new = old.copy()
    idx = rng.choice(80, n_moved, replace=False)
    new[idx] = (old[idx] + rng.integers(1, 4, size=n_moved)) % 4
    d = W.sum(1)
    WX = W @ _onehot(old, 4)
    vol, assoc = nk.cluster_stats(WX, old, d, 4)
    if dense:
        v2, a2 = nk.candidate_stats_dense(W, d, old, new, WX, vol, assoc)
    else:  # moves that are not the step's: their weights come from the rows
        best, _, _, w_own, w_best = _choices(S, old, d, vol, assoc)
        v2, a2 = ncsr.candidate_stats_rows(S.indptr, S.indices, S.data, d, old, new,
                                           best, w_own, w_best, vol, assoc)
    ref_v, ref_a = nk.cluster_stats(W @ _onehot(new, 4), new, d, 4)
    np.testing.assert_allclose(v2, ref_v, atol=1e-12)
    np.testing.assert_allclose(a2, ref_a, atol=1e-10)
    if dense:
        nk.apply_moves_dense(W, old, new, WX)
        np.testing.assert_allclose(WX, W @ _onehot(new, 4), atol=1e-12)


@pytest.mark.parametrize("n_chunks", [2, 3, 16])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_chunked_dense_pass_is_the_same_in_parallel_and_serial(n_chunks, dtype):
    import numba

    W, _ = _graph(n=701, seed=11, density=0.5, dtype=dtype)
    labels = np.random.default_rng(12).integers(6, size=701).astype(np.int64)
    par = nk._cluster_weights_dense_par(W, labels, 6, n_chunks)
    np.testing.assert_array_equal(
        par, nk._cluster_weights_dense_chunked(W, labels, 6, n_chunks))
    np.testing.assert_allclose(par, W.astype(np.float64).T @ _onehot(labels, 6),
                               rtol=1e-12)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = nk._cluster_weights_dense_par(W, labels, 6, n_chunks)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one, par)


def test_dense_chunks():
    assert nk._dense_chunks(1000, 8) == 1  # the compiled loop's sizes: one pass
    assert nk._dense_chunks(4472, 8) == 1
    assert nk._dense_chunks(16384, 8) == nk._DENSE_CHUNKS
    # the partial sums stay under their cap
    n, K = 50_000, 500
    c = nk._dense_chunks(n, K)
    assert c >= 1 and (c == 1 or c * 8 * K * n <= nk._DENSE_PARTIAL_BYTES)


def test_parallel_dense_moves_match_serial(monkeypatch):
    W, _ = _graph(n=300, seed=13)
    rng = np.random.default_rng(14)
    old = rng.integers(5, size=300).astype(np.int64)
    new = old.copy()
    idx = rng.choice(300, 40, replace=False)  # below a quarter: incremental
    new[idx] = (old[idx] + 1) % 5
    WX = W @ _onehot(old, 5)
    serial = WX.copy()
    nk._apply_moves_dense_ser(W, old, new, serial)
    monkeypatch.setattr(nk, "PARALLEL_MIN", 0)  # the Python dispatcher's threshold
    parallel = WX.copy()
    nk.apply_moves_dense(W, old, new, parallel)
    np.testing.assert_array_equal(parallel, serial)
    np.testing.assert_allclose(parallel, W @ _onehot(new, 5), atol=1e-12)
