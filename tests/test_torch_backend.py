"""Tests of the torch backend: kernels, TorchProblem, batched and matrix-free
solves, parity with Numba, and backend resolution."""

import importlib.util
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

torch = pytest.importorskip("torch")

from shared import noisy, planted, tokens  # noqa: E402

from sklearn_falcon import FalconNCut  # noqa: E402
from sklearn_falcon._affinity import cosine_power_affinity, make_affinity  # noqa: E402
from sklearn_falcon._backends import (  # noqa: E402
    make_problem,
    make_problem_from_features,
    resolve_backend,
)
from sklearn_falcon._backends._numba import _kernels as nk  # noqa: E402
from sklearn_falcon._backends._numba import _polish as npol  # noqa: E402
from sklearn_falcon._backends._torch import TorchProblem  # noqa: E402
from sklearn_falcon._backends._torch import _kernels as tk  # noqa: E402
from sklearn_falcon._batch import falcon_batch  # noqa: E402
from sklearn_falcon._inits import random_labels  # noqa: E402
from sklearn_falcon._solver import SolverOptions, solve  # noqa: E402
from sklearn_falcon.metrics import normalized_cut  # noqa: E402

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="CUDA is not available")


def opts(**kw):
    return SolverOptions(**kw)


# --------------------------------------------------------------- kernels
def test_kernels_match_numba():
    W, _ = planted(300, 4, seed=1)
    Wd = W.toarray()
    d = np.asarray(W.sum(axis=1)).ravel()
    rng = np.random.default_rng(0)
    old = random_labels(300, 4, rng)
    new = old.copy()
    moved = rng.random(300) < 0.1
    new[moved] = rng.integers(4, size=moved.sum())

    WX_nb = nk.cluster_weights_csr(W.indptr, W.indices, W.data, old, 4)
    t = lambda a: torch.as_tensor(a)  # noqa: E731
    ip, ix, dv = t(W.indptr.astype(np.int64)), t(W.indices.astype(np.int64)), t(W.data)
    WX_csr = tk.cluster_weights_csr(ip, ix, dv, t(old), 4)
    WX_dense = tk.cluster_weights_dense(t(Wd)[None], t(old)[None], 4)[0]
    np.testing.assert_allclose(WX_csr.numpy(), WX_nb, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(WX_dense.numpy(), WX_nb, rtol=1e-12, atol=1e-12)

    up_nb = nk.cluster_weights_csr(W.indptr, W.indices, W.data, new, 4)
    up_csr = tk.update_cluster_weights_csr(ip, ix, dv, t(old), t(new), WX_csr)
    up_dense = tk.update_cluster_weights_dense(t(Wd)[None], t(old)[None], t(new)[None],
                                               WX_dense[None])[0]
    np.testing.assert_allclose(up_csr.numpy(), up_nb, atol=1e-12)
    np.testing.assert_allclose(up_dense.numpy(), up_nb, atol=1e-12)
    # the input WX is not modified
    np.testing.assert_allclose(WX_csr.numpy(), WX_nb, atol=1e-12)

    vol_nb, assoc_nb = nk.cluster_stats(WX_nb, old, d, 4)
    vol, assoc = tk.cluster_stats(WX_csr[None], t(old)[None], t(d)[None], 4)
    np.testing.assert_allclose(vol[0].numpy(), vol_nb)
    np.testing.assert_allclose(assoc[0].numpy(), assoc_nb)
    assert tk.objective(vol, assoc)[0].item() == pytest.approx(
        nk.objective(vol_nb, assoc_nb), abs=1e-12)
    for tau in (0.0, 1e-3, 0.05):
        lab_nb, m_nb = nk.proximal_step(WX_nb, d, vol_nb, assoc_nb, old, tau)
        lab, m = tk.proximal_step(WX_csr[None], t(d)[None], vol, assoc, t(old)[None],
                                  torch.tensor([tau], dtype=torch.float64))
        np.testing.assert_array_equal(lab[0].numpy(), lab_nb)
        assert int(m[0]) == m_nb


def test_proximal_step_never_empties_a_cluster():
    # every node prefers cluster 0 with tau = 0: the guard keeps 1 and 2 alive
    W = np.ones((6, 6))
    labels = torch.tensor([[0, 0, 0, 0, 1, 2]])
    WX = tk.cluster_weights_dense(torch.as_tensor(W)[None], labels, 3)
    d = torch.as_tensor(W.sum(1))[None]
    vol, assoc = tk.cluster_stats(WX, labels, d, 3)
    new, moved = tk.proximal_step(WX, d, vol, assoc, labels,
                                  torch.zeros(1, dtype=torch.float64))
    assert set(new[0].tolist()) == {0, 1, 2}
    assert int(moved[0]) == 0


def test_float32_problem_is_close_and_monotone():
    X, y = tokens(400, 4, seed=6)
    W = cosine_power_affinity(X, power=2.0)[0].astype(np.float32)
    y0 = noisy(y, 4, 0.5, seed=7)
    r64 = solve(make_problem(W, 4, backend="numba"), y0, opts(polish=False))
    r32 = solve(make_problem(W, 4, backend="torch", device="cpu", dtype="float32"),
                y0, opts(polish=False))
    assert r32.objective[0] == pytest.approx(r64.objective[0], abs=1e-4)
    assert np.all(np.diff(r32.objective_path[0]) >= 0)


@pytest.mark.filterwarnings("ignore:Sparse:UserWarning")
def test_inputs_not_modified_and_torch_csr_input():
    W, y = planted(400, 3, seed=9)
    Wd = W.toarray()
    Wd_copy, data_copy = Wd.copy(), W.data.copy()
    y0 = noisy(y, 3, 0.4, seed=1)
    r1 = solve(make_problem(Wd, 3, backend="torch", device="cpu"), y0)
    r2 = solve(make_problem(W, 3, backend="torch", device="cpu"), y0)
    np.testing.assert_array_equal(Wd, Wd_copy)
    np.testing.assert_array_equal(W.data, data_copy)
    Wt = torch.sparse_csr_tensor(torch.as_tensor(W.indptr.astype(np.int64)),
                                 torch.as_tensor(W.indices.astype(np.int64)),
                                 torch.as_tensor(W.data), size=W.shape)
    r3 = solve(TorchProblem.from_affinity(Wt, 3, device="cpu"), y0)
    assert r1.objective[0] == pytest.approx(r2.objective[0], abs=1e-9)
    assert r3.objective[0] == pytest.approx(r2.objective[0], abs=1e-12)


@pytest.mark.parametrize("dtype", [None, torch.float32])
def test_a_read_only_array_becomes_a_tensor_of_its_own(dtype):
    # torch has no read-only tensors: sharing the memory of a read-only
    # array (a joblib memmap) made writing to it undefined behaviour
    from sklearn_falcon._backends._boundary import to_tensor

    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    a.setflags(write=False)
    t = to_tensor(a, torch.device("cpu"), dtype)
    assert not np.shares_memory(t.numpy(), a)
    assert t.dtype == (dtype or torch.float64)
    np.testing.assert_array_equal(t.numpy(), a)
    w = np.arange(4.0)
    assert np.shares_memory(to_tensor(w, torch.device("cpu")).numpy(), w)


@pytest.mark.parametrize("host", [True, False])
@pytest.mark.parametrize("polish", [False, True])
def test_csr_solve_on_the_cpu_host_and_torch_kernels(monkeypatch, host, polish):
    # on the CPU a CSR problem runs the Numba CSR kernels on views of its
    # tensors; host=False runs torch's CSR kernels (the CUDA path) instead
    from sklearn_falcon._backends._torch import _problem as tp

    monkeypatch.setattr(tp, "HOST_CSR_ON_CPU", host)
    Ws = [planted(300, 3, seed=s)[0] for s in (12, 13)]
    y0s = [noisy(planted(300, 3, seed=s)[1], 3, 0.4, seed=s) for s in (12, 13)]
    P = make_problem(Ws, 3, backend="torch", device="cpu")
    assert (P._host_csr is not None) == host
    res = solve(P, y0s, opts(polish=polish))
    for b, (W, y0) in enumerate(zip(Ws, y0s)):
        ref = solve(make_problem(W, 3, backend="numba"), y0, opts(polish=polish))
        assert res.objective[b] == pytest.approx(ref.objective[0], abs=1e-9)
        assert np.mean(res.labels[b] != ref.labels[0]) < 1e-2  # exact ties only
        assert np.all(np.diff(res.objective_path[b]) >= 0)
    assert res.labels.dtype == np.int64


# ----------------------------------------------------------- matrix-free
@pytest.mark.parametrize("kind,kw", [("cosine", {"power": 4.0}),
                                     ("rbf", {"gamma": 0.02})])
def test_matrix_free_matches_dense(kind, kw):
    X, y = tokens(450, 4, seed=10)
    W = make_affinity(kind, **kw).fit(X)
    P = make_problem_from_features(X, 4, affinity=kind, device="cpu", **kw)
    assert P.kind == "features"
    np.testing.assert_allclose(P.affinity.dense()[0].numpy(), W, atol=1e-12)
    np.testing.assert_allclose(P.degrees_numpy()[0], W.sum(axis=1), rtol=1e-12)
    y0 = noisy(y, 4, 0.5, seed=11)
    r_mf = solve(P, y0, opts(polish=False))
    r_d = solve(make_problem(W, 4, backend="numba"), y0, opts(polish=False))
    assert r_mf.objective[0] == pytest.approx(r_d.objective[0], abs=1e-9)
    assert normalized_cut(W, r_mf.labels[0]) == pytest.approx(
        normalized_cut(W, r_d.labels[0]), abs=1e-6)
    assert r_mf.n_iter[0] == r_d.n_iter[0] > 0
    assert np.all(np.diff(r_mf.objective_path[0]) >= 0)
    if kind == "cosine":
        lo, hi = P.cosine_range
        S = X / np.linalg.norm(X, axis=1, keepdims=True) @ (
            X / np.linalg.norm(X, axis=1, keepdims=True)).T
        assert lo[0] == pytest.approx(S.min()) and hi[0] == pytest.approx(S.max())



def test_matrix_free_rbf_in_float32_far_from_the_origin():
    """In float32 (the CUDA default) the matrix-free rbf formed
    ||x||^2 + ||y||^2 - 2 x.y of the raw features: 1e3 from the origin its
    entries were off by 0.3, and 1e4 from it the squared distances cancelled
    to garbage and the NCut of three separated blobs was 1.58 instead of
    0.01.  The features are centred first (rbf is translation invariant)."""
    from sklearn.datasets import make_blobs
    from sklearn.metrics.pairwise import rbf_kernel

    X, _ = make_blobs(300, centers=3, cluster_std=0.4, random_state=0)
    ref = falcon_batch([X], 3, affinity="rbf", dtype="float64", init="kmeans",
                       random_state=0, backend="torch", device="cpu")
    for offset in (1e3, 1e4):
        Z = X + offset
        P = make_problem_from_features(Z, 3, affinity="rbf", dtype="float32")
        np.testing.assert_allclose(P.affinity.dense()[0].numpy(),
                                   rbf_kernel(Z, gamma=1.0), atol=1e-5)
        res = falcon_batch([Z], 3, affinity="rbf", dtype="float32", init="kmeans",
                           random_state=0, backend="torch", device="cpu")
        assert res.ncut[0] == pytest.approx(ref.ncut[0], rel=1e-4)


@pytest.mark.parametrize("kind,kw", [("cosine", {"power": 2.0}),
                                     ("rbf", {"gamma": 0.02})])
@pytest.mark.parametrize("scale", [1e19, 1e30, 1e40])
def test_matrix_free_float32_of_features_beyond_its_range(kind, kw, scale):
    """float64 features are checked against float64's range, but the
    matrix-free rows were computed in the compute dtype: in float32 (the
    CUDA default) features of 1e19 overflowed their squared norms, so that
    every cosine degree was n (a flat W) and every rbf row NaN.  A cosine
    row is scaled to unit norm and rbf features by a power of two (gamma
    by its square) on the host, when the compute dtype needs it; and so is
    the cosine W that affinity_matrix_ recomputes in the device's dtype."""
    X, _ = tokens(60, 3, seed=3)
    g = {"gamma": kw["gamma"] / scale**2} if kind == "rbf" else kw
    ref = make_problem_from_features(X, 3, affinity=kind, device="cpu",
                                     dtype="float64", **kw)
    P = make_problem_from_features(X * scale, 3, affinity=kind, device="cpu",
                                   dtype="float32", **g)
    np.testing.assert_allclose(P.affinity.dense()[0].numpy(),
                               ref.affinity.dense()[0].numpy(), atol=2e-5)
    np.testing.assert_allclose(P.degrees_numpy()[0], ref.degrees_numpy()[0],
                               rtol=1e-4)
    if kind == "cosine":  # affinity_matrix_ of a CUDA fit: W in float32 too
        A = make_affinity("cosine", **kw)
        A.adopt(X * scale, P)
        np.testing.assert_allclose(A.recompute(), ref.affinity.dense()[0].numpy(),
                                   atol=2e-5)


def test_matrix_free_rbf_in_float32_of_tiny_features():
    """The other end of float32's range: rbf features of 1e-22 (with a gamma
    of their scale) had squared distances below float32's smallest normal,
    so that the rows were rounding noise (degrees off by 7%).  They are
    scaled up by a power of two (gamma down by its square)."""
    X, _ = tokens(60, 3, seed=3)
    ref = make_problem_from_features(X, 3, affinity="rbf", gamma=0.02,
                                     device="cpu", dtype="float64")
    P = make_problem_from_features(X * 1e-22, 3, affinity="rbf", gamma=0.02e44,
                                   device="cpu", dtype="float32")
    np.testing.assert_allclose(P.affinity.dense()[0].numpy(),
                               ref.affinity.dense()[0].numpy(), atol=2e-5)


@pytest.mark.parametrize("scale", [1e39, 1e-50])
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_float32_graphs_of_weights_beyond_its_range(scale, fmt, monkeypatch):
    """A float64 graph is solved in float32 on CUDA (or dtype="float32"):
    weights of 1e39 became inf (NaN scores, ncut and objective NaN) and
    weights of 1e-50 zero (every score 0).  A graph whose degrees float32
    cannot hold is solved scaled by a power of two; degrees and statistics
    are reported unscaled."""
    from sklearn_falcon._backends._torch import _problem

    monkeypatch.setattr(_problem, "HOST_CSR_ON_CPU", False)  # the CUDA path
    X, y = tokens(60, 3, seed=5)
    W = make_affinity("rbf", gamma=0.1).fit(X)
    G = (lambda A: A) if fmt == "dense" else sp.csr_matrix
    y0 = noisy(y, 3, 0.5, seed=1)
    ref = solve(make_problem(G(W), 3, backend="torch", device="cpu"), y0,
                opts(polish=True))
    P = make_problem(G(W * scale), 3, backend="torch", device="cpu",
                     dtype="float32")
    np.testing.assert_allclose(P.degrees_numpy()[0], W.sum(axis=1) * scale,
                               rtol=1e-12)
    res = solve(P, y0, opts(polish=True))
    np.testing.assert_array_equal(res.labels[0], ref.labels[0])
    assert res.objective[0] == pytest.approx(ref.objective[0], rel=1e-5)
    vol, assoc = P.cluster_statistics(res.labels[0])
    np.testing.assert_allclose(
        vol[0], np.bincount(res.labels[0], W.sum(axis=1), 3) * scale, rtol=1e-5)


@pytest.mark.parametrize("form", ["requires_grad", "coo", "csr", "bfloat16"])
def test_callable_affinity_returning_a_tensor(form):
    """A callable affinity that returned a torch tensor other than a plain
    CPU one failed with torch's own message ("Can't call numpy() on Tensor
    that requires grad", "can't convert Sparse layout tensor to numpy",
    "Got unsupported ScalarType BFloat16"); it is brought to the host as a
    tensor X is (a sparse one as CSR)."""
    from sklearn.metrics.pairwise import rbf_kernel

    X, _ = tokens(40, 2, seed=4)
    as_form = {"requires_grad": lambda t: t.requires_grad_(),
               "coo": lambda t: t.to_sparse(), "csr": lambda t: t.to_sparse_csr(),
               "bfloat16": lambda t: t.bfloat16()}[form]

    def kernel(A, B=None):
        return as_form(torch.as_tensor(rbf_kernel(A, B, gamma=0.5)))

    def reference(A, B=None):
        K = torch.as_tensor(rbf_kernel(A, B, gamma=0.5))
        return K.bfloat16().float().numpy() if form == "bfloat16" else K.numpy()

    est = FalconNCut(2, affinity=kernel, init="random", random_state=0).fit(X)
    ref = FalconNCut(2, affinity=reference, init="random", random_state=0).fit(X)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(X[:7]), ref.predict(X[:7]))


@pytest.mark.parametrize("block_elems", [None, 5000])
def test_matrix_free_polish_matches_numba_dense(block_elems):
    # the streamed sweep is the Numba dense sweep, node for node
    X, y = tokens(350, 4, seed=15)
    W = cosine_power_affinity(X, power=1.0)[0]
    d = W.sum(axis=1)
    y0 = random_labels(350, 4, np.random.default_rng(16))
    P = make_problem_from_features(X, 4, power=1.0, block_elems=block_elems)
    lab = P.from_labels(y0)
    WX = P.weights(lab)
    vol, assoc = P.stats(WX, lab)
    moves = P.polish(lab, WX, vol, assoc)
    lab_nb = y0.copy()
    WX_nb = nk.cluster_weights_dense(W, lab_nb, 4)
    vol_nb, assoc_nb = nk.cluster_stats(WX_nb, lab_nb, d, 4)
    m_nb = npol.local_move_sweep_dense(W, d, lab_nb, WX_nb, vol_nb, assoc_nb)
    assert m_nb > 10 and moves[0] == m_nb
    np.testing.assert_array_equal(lab[0].numpy(), lab_nb)
    np.testing.assert_allclose(WX[0].numpy(), WX_nb, atol=1e-9)
    np.testing.assert_allclose(vol[0].numpy(), vol_nb, rtol=1e-12)
    np.testing.assert_allclose(assoc[0].numpy(), assoc_nb, rtol=1e-9)
    # and a whole solve with polishing agrees
    y1 = noisy(y, 4, 1.0, seed=17)
    r_mf = solve(P, y1, opts(polish=True))
    r_nb = solve(make_problem(W, 4, backend="numba"), y1, opts(polish=True))
    assert r_mf.n_polish[0] == r_nb.n_polish[0]
    np.testing.assert_array_equal(r_mf.labels, r_nb.labels)
    assert r_mf.objective[0] == pytest.approx(r_nb.objective[0], abs=1e-9)
    assert np.all(np.diff(r_mf.objective_path[0]) >= 0)


def test_matrix_free_blocks_do_not_change_the_result():
    X, y = tokens(300, 3, seed=12)
    y0 = noisy(y, 3, 0.2, seed=13)  # few moves: exercises the row update
    big = solve(make_problem_from_features(X, 3, power=2.0), y0, opts(polish=False))
    small = solve(make_problem_from_features(X, 3, power=2.0, block_elems=1000), y0,
                  opts(polish=False))
    assert small.objective[0] == pytest.approx(big.objective[0], abs=1e-10)
    np.testing.assert_array_equal(small.labels, big.labels)


def test_matrix_free_rejects_other_affinities():
    with pytest.raises(ValueError, match="affinity='nearest_neighbors'"):
        make_problem_from_features(np.ones((4, 2)), 2, affinity="nearest_neighbors")


# --------------------------------------------------------------- batched
def _graphs(kind):
    sizes = [260, 200, 300, 230]
    out, inits = [], []
    for b, n in enumerate(sizes):
        if kind == "features":
            X, y = tokens(n, 3, seed=20 + b)
            out.append(X)
        else:
            W, y = planted(n, 3, seed=20 + b, degree=10)
            out.append(W if kind == "sparse" else W.toarray())
        inits.append(noisy(y, 3, 0.5, seed=30 + b))
    return out, inits


@pytest.mark.parametrize("kind", ["sparse", "dense", "features"])
def test_batched_solve_matches_single_solves(kind):
    graphs, inits = _graphs(kind)
    taus = np.array([0.1, 0.05, 0.2, 0.1])
    polish = True

    def problem(G):
        if kind == "features":
            return TorchProblem.from_features(G, 3, power=3.0, device="cpu")
        return TorchProblem.from_affinity(G, 3, device="cpu")

    P = problem(graphs)
    assert P.n_graphs == 4 and P.n_nodes == 300
    res = solve(P, inits, opts(tau=taus, polish=polish))
    # padding nodes never move
    for b, n in enumerate(P.sizes):
        assert np.all(res.labels[b, n:] == 0)
    labels = P.labels_list(res.labels)
    for b, G in enumerate(graphs):
        single = solve(problem(G), inits[b], opts(tau=taus[b], polish=polish))
        np.testing.assert_array_equal(labels[b], single.labels[0])
        assert res.objective[b] == pytest.approx(single.objective[0], abs=1e-10)
        assert res.n_iter[b] == single.n_iter[0]
        assert res.n_backtracks[b] == single.n_backtracks[0]
        np.testing.assert_allclose(res.objective_path[b], single.objective_path[0],
                                   atol=1e-10)
        assert np.all(np.diff(res.objective_path[b]) >= 0)


def test_per_graph_tau_and_stopping():
    graphs, inits = _graphs("sparse")
    P = TorchProblem.from_affinity(graphs, 3, device="cpu")
    # a huge tau freezes graph 1 only; max_iter=2 stops the others early
    res = solve(P, inits, opts(tau=np.array([0.1, 1e9, 0.1, 0.1]), max_iter=2,
                               polish=False))
    # graph 1 stops after one iteration that moves nothing
    assert res.n_iter[1] == 1 and res.converged[1]
    assert len(res.objective_path[1]) == 1
    np.testing.assert_array_equal(P.labels_list(res.labels)[1], inits[1])
    assert all(len(res.objective_path[b]) > 1 for b in (0, 2, 3))
    assert np.all(res.n_iter <= 2)


def test_falcon_batch_torch_and_numba_agree():
    graphs, inits = _graphs("features")
    kw = dict(affinity="cosine", power=3.0, init=inits, polish=False)
    rt = falcon_batch(graphs, 3, backend="torch", device="cpu", **kw)
    rn = falcon_batch(graphs, 3, backend="numba", **kw)
    assert rt.backend == "torch" and rn.backend == "numba"
    np.testing.assert_allclose(rt.ncut, rn.ncut, atol=1e-6)
    for b, G in enumerate(graphs):
        W = cosine_power_affinity(G, 3.0)[0]
        assert rt.ncut[b] == pytest.approx(normalized_cut(W, rt.labels[b]), abs=1e-9)
    rp = falcon_batch([cosine_power_affinity(G, 3.0)[0] for G in graphs], 3,
                      affinity="precomputed", init=inits, device="cpu")
    assert np.all(rp.ncut <= rt.ncut + 1e-9)  # polish only improves
    rf = falcon_batch(graphs, 3, affinity="cosine", power=3.0, init=inits,
                      device="cpu")
    np.testing.assert_allclose(rf.ncut, rp.ncut, atol=1e-9)


@pytest.mark.parametrize("backend", ["torch", "numba"])
@pytest.mark.parametrize("init", ["multilevel", "spectral"])
def test_falcon_batch_every_affinity_and_graph_init(backend, init):
    # the batch offers the registry: kNN graphs are built per graph, and the
    # graph inits start a matrix-free graph from its kNN graph
    graphs, _ = _graphs("features")
    for affinity in ("nearest_neighbors", "cosine"):
        res = falcon_batch(graphs, 3, affinity=affinity, power=3.0, init=init,
                           random_state=0, backend=backend, device="cpu")
        for b, G in enumerate(graphs):
            W = make_affinity(affinity, power=3.0).fit(G)
            assert res.ncut[b] == pytest.approx(normalized_cut(W, res.labels[b]),
                                                abs=1e-9)
            assert len(np.unique(res.labels[b])) == 3
            assert np.all(np.diff(res.objective_path[b]) >= 0)


@pytest.mark.parametrize("backend", ["torch", "numba"])
@pytest.mark.parametrize("init", ["multilevel", "spectral"])
def test_falcon_batch_graph_init_with_isolated_nodes(backend, init):
    # a graph init ran on the whole graph, whose zero-degree nodes made its
    # normalized adjacency infinite ("array must not contain infs or NaNs");
    # it runs on the nodes of nonzero degree, as FalconNCut's does
    A = sp.random(30, 30, density=0.3, random_state=1)
    A = (A + A.T).tolil()
    A[[0, 5, 7], :] = 0
    A[:, [0, 5, 7]] = 0
    A = A.tocsr()
    res = falcon_batch([A, A.toarray()], 3, affinity="precomputed", init=init,
                       random_state=0, backend=backend, device="cpu")
    with pytest.warns(UserWarning, match="zero degree"):
        ref = FalconNCut(3, affinity="precomputed", init=init, random_state=0,
                         backend="numba").fit(A)
    for b in range(2):
        assert res.ncut[b] == pytest.approx(ref.ncut_, abs=1e-9)
        assert res.ncut[b] == pytest.approx(normalized_cut(A, res.labels[b]),
                                            abs=1e-9)
    active = np.asarray(A.sum(axis=1)).ravel() > 0
    # the first graph draws the estimator's random numbers
    np.testing.assert_array_equal(res.labels[0][active], ref.labels_[active])
    two_active = sp.block_diag([np.ones((2, 2)), np.zeros((2, 2))]).tocsr()
    with pytest.raises(ValueError, match=r"graphs\[1\] has 2"):
        falcon_batch([A, two_active], 3, affinity="precomputed", init=init,
                     backend=backend, device="cpu")


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_falcon_batch_leaves_zero_degree_nodes_out_of_the_solve(backend):
    # they stayed in the solve: a start with node 0 (isolated) alone in
    # cluster 2 kept it there, a cluster of zero volume, and the result had
    # two real clusters (NCut 0.50 where FalconNCut, which leaves such nodes
    # out and puts them in the largest cluster, finds 1.02 with three)
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 4)
    A = (rng.random((12, 12)) < np.where(y[:, None] == y, 0.9, 0.15)).astype(float)
    A = np.triu(A, 1)
    A = A + A.T
    A[0], A[:, 0] = 0.0, 0.0
    init = np.where(np.arange(12) < 6, 0, 1)
    init[0] = 2
    res = falcon_batch([A, sp.csr_matrix(A)], 3, affinity="precomputed",
                       init=[init, init], backend=backend, device="cpu")
    with pytest.warns(UserWarning, match="zero degree"):
        ref = FalconNCut(3, affinity="precomputed", init=init,
                         backend="numba").fit(A)
    d = A.sum(axis=1)
    for b in range(2):
        vol = np.bincount(res.labels[b], weights=d, minlength=3)
        assert np.all(vol > 0), vol
        assert res.ncut[b] == pytest.approx(ref.ncut_, abs=1e-9)
        # the same partition (its ids: each fills the empty cluster 2 its way)
        assert adjusted_rand_score(res.labels[b], ref.labels_) == 1.0
    # an all-zero graph is refused, as by FalconNCut
    with pytest.raises(ValueError, match=r"graphs\[0\] is all zeros"):
        falcon_batch([np.zeros((5, 5))], 2, affinity="precomputed",
                     backend=backend, device="cpu")


def test_falcon_batch_validation():
    X = [np.random.default_rng(0).random((20, 3))]
    with pytest.raises(ValueError, match="'affinity' parameter of falcon_batch"):
        falcon_batch(X, 2, affinity="euclid")
    with pytest.raises(ValueError, match="n_clusters=30"):
        falcon_batch(X, 30, device="cpu")
    with pytest.raises(ValueError, match="'tau' parameter of falcon_batch"):
        falcon_batch(X, 2, tau=0.0)
    with pytest.raises(ValueError, match="tau must be > 0"):
        falcon_batch(X, 2, tau=[0.0])
    # a float tau=inf is refused by the constraint; in an array it passed,
    # and the acceptance test warned "invalid value encountered in multiply"
    with pytest.raises(ValueError, match="tau must be > 0 and finite"):
        falcon_batch([X[0], X[0]], 2, tau=[np.inf, 0.1], device="cpu")
    with pytest.raises(ValueError, match=r"init\[0\]"):
        falcon_batch(X, 2, init=[np.zeros(5, dtype=int)], device="cpu")
    with pytest.raises(ValueError, match="same number of features"):
        falcon_batch([X[0], X[0][:, :2]], 2, device="cpu")
    with pytest.raises(ValueError, match="init='kmeans' needs features"):
        falcon_batch([np.eye(4)], 2, affinity="precomputed", init="kmeans",
                     device="cpu")


@pytest.mark.parametrize("backend", ["torch", "numba"])
def test_falcon_batch_takes_the_gamma_of_the_estimator(backend):
    # gamma=0 (the constant rbf affinity) was refused by falcon_batch while
    # FalconNCut, whose definition the batch documents, and scikit-learn's
    # rbf_kernel accept it
    X = np.random.default_rng(0).normal(size=(30, 3))
    res = falcon_batch([X], 3, affinity="rbf", gamma=0, random_state=0,
                       backend=backend, device="cpu")
    ref = FalconNCut(3, affinity="rbf", gamma=0, random_state=0,
                     backend="numba").fit(X)
    assert res.ncut[0] == pytest.approx(ref.ncut_) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="'gamma' parameter of falcon_batch"):
        falcon_batch([X], 3, affinity="rbf", gamma=-1.0)


# ------------------------------------------------- resolution and errors
def test_missing_torch_is_reported(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name == "torch" or name.startswith("torch."):
            return None
        return real_find_spec(name, *args, **kwargs)

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` fails
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ImportError, match="backend='torch' requires PyTorch"):
        resolve_backend("torch", "cpu")
    with pytest.raises(ImportError, match="requires PyTorch"):
        make_problem(np.eye(3), 2, backend="torch")
    with pytest.raises(ImportError, match="requires PyTorch"):
        make_problem_from_features(np.ones((3, 2)), 2)
    with pytest.raises(ImportError, match="requires PyTorch"):
        FalconNCut(2, backend="torch").fit(np.random.default_rng(0).random((20, 2)))
    assert resolve_backend("auto", "auto") == ("numba", "cpu")
    res = falcon_batch([np.random.default_rng(0).random((30, 3))], 2,
                       affinity="rbf", random_state=0)
    assert res.backend == "numba"


def test_unavailable_cuda_is_reported(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_backend("torch", "cuda")
    with pytest.raises(ValueError, match="CUDA is not available"):
        make_problem_from_features(np.ones((3, 2)), 2, device="cuda:0")
    assert resolve_backend("torch", "auto") == ("torch", "cpu")
    assert resolve_backend("auto", "auto") == ("numba", "cpu")
    # a torch.device, or an int, went to torch unchecked: "Found no NVIDIA
    # driver on your system" (a RuntimeError) from pamr and TorchProblem
    from sklearn_falcon.image import pamr

    img, lab = np.zeros((4, 4, 3)), np.eye(4, dtype=int)
    for dev in (torch.device("cuda"), torch.device("cuda", 1)):
        with pytest.raises(ValueError, match="CUDA is not available"):
            TorchProblem.from_affinity(np.eye(3), 2, device=dev)
        with pytest.raises(ValueError, match="CUDA is not available"):
            pamr(img, lab, device=dev)
    with pytest.raises(ValueError, match="device must be .* got device=0"):
        pamr(img, lab, device=0)
    assert pamr(img, lab, device=torch.device("cpu")).shape == (4, 4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match=r"only 1 CUDA device"):
        resolve_backend("torch", "cuda:3")
    with pytest.raises(ValueError, match="device must be"):
        resolve_backend("torch", "gpu")
    with pytest.raises(ValueError, match="dtype must be float32 or float64"):
        TorchProblem.from_affinity(np.eye(3), 2, device="cpu", dtype="float16")


# ------------------------------------------------------------------ CUDA
@needs_cuda
def test_cuda_parity_float64():
    W, _ = planted(1500, 5, seed=2)
    y0 = random_labels(1500, 5, np.random.default_rng(3))
    r_nb = solve(make_problem(W, 5, backend="numba"), y0)
    for G in (W, W.toarray()):
        P = make_problem(G, 5, backend="torch", device="cuda", dtype="float64")
        r = solve(P, y0)
        assert r.objective[0] == pytest.approx(r_nb.objective[0], abs=1e-9)
        assert np.all(np.diff(r.objective_path[0]) >= 0)


@needs_cuda
def test_cuda_float32():
    W, _ = planted(1500, 5, seed=2)
    W32 = W.astype(np.float32)
    y0 = random_labels(1500, 5, np.random.default_rng(3))
    r_nb = solve(make_problem(W32, 5, backend="numba"), y0)
    # CSR: float32 values are accumulated in float64, as Numba does
    r = solve(make_problem(W32, 5, backend="torch", device="cuda"), y0)
    assert r.objective[0] == pytest.approx(r_nb.objective[0], abs=1e-6)
    # dense float32 products round differently: same quality, monotone
    r = solve(make_problem(W32.toarray(), 5, backend="torch", device="cuda"), y0)
    assert r.objective[0] == pytest.approx(r_nb.objective[0], rel=1e-2)
    assert np.all(np.diff(r.objective_path[0]) >= 0)


@needs_cuda
def test_cuda_batched_matrix_free():
    graphs, inits = _graphs("features")
    rc = falcon_batch(graphs, 3, power=3.0, init=inits, device="cuda",
                      dtype="float64")
    rn = falcon_batch(graphs, 3, power=3.0, init=inits, backend="numba",
                      polish=False)
    np.testing.assert_allclose(rc.ncut, rn.ncut, atol=1e-6)
    r32 = falcon_batch(graphs, 3, power=3.0, init=inits, device="cuda")
    np.testing.assert_allclose(r32.ncut, rn.ncut, rtol=1e-2, atol=1e-3)
    assert all(np.all(np.diff(p) >= 0) for p in r32.objective_path)


@needs_cuda
def test_cuda_estimator():
    X, _ = tokens(300, 3, seed=8)
    a = FalconNCut(3, backend="numba", random_state=0).fit(X)
    b = FalconNCut(3, backend="torch", device="cuda", random_state=0).fit(X)
    assert b.ncut_ == pytest.approx(a.ncut_, abs=1e-5)


@pytest.mark.parametrize("affinity", ["cosine", "rbf"])
@pytest.mark.parametrize("init", ["multilevel", "kmeans", "random"])
def test_estimator_matrix_free_matches_numba(affinity, init):
    from sklearn.datasets import make_blobs
    from sklearn.metrics import adjusted_rand_score

    from sklearn_falcon import FalconNCut, normalized_cut

    X, _ = make_blobs(300, centers=4, random_state=0)
    kw = dict(affinity=affinity, gamma=0.1, power=3.0, init=init, random_state=0)
    est = FalconNCut(4, backend="torch", device="cpu", **kw).fit(X)
    ref = FalconNCut(4, backend="numba", **kw).fit(X)
    assert est._affinity_matrix is None  # W was never stored during fit
    W = est.affinity_matrix_  # recomputed on access
    np.testing.assert_allclose(W, ref.affinity_matrix_, rtol=1e-12)
    assert est.ncut_ == pytest.approx(normalized_cut(W, est.labels_), abs=1e-9)
    if init == "multilevel":
        # matrix-free, the multilevel init runs on the kNN graph of X (it needs
        # an explicit W), so it starts elsewhere than on the dense W
        assert est.ncut_ <= 1.05 * ref.ncut_
    else:
        assert est.ncut_ == pytest.approx(ref.ncut_, abs=1e-9)
        assert adjusted_rand_score(est.predict(X[:60]), ref.predict(X[:60])) > 0.99



@pytest.mark.parametrize("init", ["random", "multilevel"])
def test_matrix_free_fit_with_zero_rows_stays_matrix_free(monkeypatch, init):
    """A zero row (an empty document in TF-IDF, a black patch's colour
    histogram) has zero degree in the cosine affinity of nonnegative
    features.  The torch fit then built the dense W anyway, silently O(n^2)
    memory, and where it did not fit raised a MemoryError telling the user
    to use backend='torch'.  The solve now stays matrix-free on the other
    samples, with the same W."""
    from sklearn.datasets import make_blobs

    from sklearn_falcon import normalized_cut
    from sklearn_falcon._affinity import _kinds

    X, _ = make_blobs(300, centers=3, random_state=0)
    X = np.abs(X)
    X[[5, 50]] = 0.0
    kw = dict(affinity="cosine", power=3.0, init=init, random_state=0)
    ref = FalconNCut(3, backend="numba", **kw).fit(X)

    def no_dense(*args, **kwargs):
        raise AssertionError("the dense affinity was formed")

    monkeypatch.setattr(_kinds, "cosine_power_affinity", no_dense)
    with pytest.warns(UserWarning, match="2 sample.s. have zero degree"):
        est = FalconNCut(3, backend="torch", device="cpu", **kw).fit(X)
    assert est._affinity_matrix is None
    np.testing.assert_array_equal(est.isolated_, [5, 50])
    W = est.affinity_matrix_
    np.testing.assert_allclose(W, ref.affinity_matrix_, atol=1e-12)
    assert est.ncut_ == pytest.approx(normalized_cut(W, est.labels_), abs=1e-9)
    np.testing.assert_allclose(est.cluster_volumes_.sum(), W.sum(), rtol=1e-12)
    if init == "random":  # the same start: the same solve
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        np.testing.assert_array_equal(est.predict(X[:40]), ref.predict(X[:40]))
    else:  # matrix-free, the graph inits start on the kNN graph of X
        assert est.ncut_ <= 1.05 * ref.ncut_



@pytest.mark.parametrize("affinity", ["cosine", "rbf"])
def test_score_after_a_matrix_free_fit_is_matrix_free(monkeypatch, affinity):
    """score built the dense affinity of X even after a matrix-free fit: an
    X too large for it raised a MemoryError advising backend='torch', the
    backend in use.  The graph of X is now formed in row blocks too."""
    from sklearn.datasets import make_blobs

    from sklearn_falcon import _memory

    X, _ = make_blobs(400, centers=3, random_state=0)
    kw = dict(affinity=affinity, gamma=0.1, power=2.0, init="random",
              random_state=0)
    ref = FalconNCut(3, backend="numba", **kw).fit(X[:300])
    est = FalconNCut(3, backend="torch", device="cpu", **kw).fit(X[:300])
    expected = ref.score(X[100:])
    # unpickled where torch is missing: from the explicit W, as before
    import dataclasses

    from sklearn_falcon._backends import BACKENDS

    absent = dataclasses.replace(BACKENDS["torch"], is_available=lambda: False)
    with monkeypatch.context() as m:
        m.setitem(BACKENDS, "torch", absent)
        m.setitem(sys.modules, "torch", None)  # `import torch` fails
        assert est.score(X[100:]) == pytest.approx(expected, abs=1e-9)
    monkeypatch.setattr(_memory, "available_memory", lambda: 200_000)
    assert est.score(X[100:]) == pytest.approx(expected, abs=1e-9)


# ------------------------------------------------------ torch tensors as input
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_torch_tensors_are_accepted_wherever_arrays_are(backend):
    """Every entry point read a tensor's ``dtype`` as a NumPy dtype and said
    "Cannot interpret 'torch.float64' as a data type": features, precomputed
    graphs (dense and sparse), init labels, predict, score, the metric and
    falcon_batch.  Tensors now give the NumPy input's results, unchanged."""
    from sklearn.datasets import make_blobs

    X, y = make_blobs(120, centers=3, random_state=0)
    W = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    Xt, Wt = torch.asarray(X), torch.asarray(W)
    kw = dict(random_state=0, backend=backend, device="cpu")
    ref = FalconNCut(3, **kw).fit(X)
    est = FalconNCut(3, **kw).fit(Xt.clone().requires_grad_())
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(Xt[:30]), ref.predict(X[:30]))
    assert est.score(Xt[:30]) == ref.score(X[:30])
    warm = FalconNCut(3, init=torch.asarray(ref.labels_), **kw).fit(Xt)
    np.testing.assert_array_equal(
        warm.labels_, FalconNCut(3, init=ref.labels_, **kw).fit(X).labels_)
    pre = dict(affinity="precomputed", **kw)
    dense = FalconNCut(3, **pre).fit(W).labels_
    np.testing.assert_array_equal(FalconNCut(3, **pre).fit(Wt).labels_, dense)
    sparse = FalconNCut(3, **pre).fit(sp.csr_matrix(W)).labels_
    for layout in (Wt.to_sparse_csr(), Wt.to_sparse_coo(), Wt.to_sparse_csc()):
        np.testing.assert_array_equal(FalconNCut(3, **pre).fit(layout).labels_, sparse)
    assert normalized_cut(Wt, torch.asarray(y)) == normalized_cut(W, y)
    batch = falcon_batch(torch.stack([Xt, Xt]), 3, random_state=0)
    np.testing.assert_array_equal(
        batch.labels[1], falcon_batch(np.stack([X, X]), 3, random_state=0).labels[1])
    assert torch.equal(Xt, torch.asarray(X)) and torch.equal(Wt, torch.asarray(W))


@pytest.mark.filterwarnings("ignore:Sparse BSR tensor support:UserWarning")
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_torch_tensors_of_block_sparse_layouts_are_accepted(backend):
    """A BSR or BSC tensor raised torch's "sparse_compressed_to_sparse_csr:
    expected SparseCsr or SparseCsc layout but got SparseBsr" from every
    entry point; it is read as the sparse matrix it holds."""
    A = sp.random(40, 40, density=0.2, random_state=0)
    W = (A + A.T).toarray()
    kw = dict(affinity="precomputed", random_state=0, backend=backend, device="cpu")
    ref = FalconNCut(3, **kw).fit(sp.csr_matrix(W))
    Wt = torch.asarray(W)
    for layout in (Wt.to_sparse_bsr((2, 2)), Wt.to_sparse_bsc((4, 4))):
        est = FalconNCut(3, **kw).fit(layout)
        assert sp.issparse(est.affinity_matrix_)
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        np.testing.assert_array_equal(est.predict(Wt[:8].to_sparse_bsr((2, 2))),
                                      ref.predict(W[:8]))
        assert normalized_cut(layout, ref.labels_) == pytest.approx(ref.ncut_)
        res = falcon_batch([layout], 3, affinity="precomputed", init=[ref.labels_],
                           backend=backend, device="cpu")
        assert res.ncut[0] == pytest.approx(
            normalized_cut(W, res.labels[0]), abs=1e-12)


@pytest.mark.filterwarnings("ignore:Sparse BSR tensor support:UserWarning")
@pytest.mark.parametrize("layout", ["coo", "csr", "bsr"])
def test_sparse_float16_tensors_are_read_as_dense_float16_ones(layout):
    """A sparse float16 tensor (a half-precision graph from a GPU) raised
    SciPy's "scipy.sparse does not support dtype float16" from every entry
    point, where the dense float16 tensor is accepted; it is read as
    float64, as NumPy's float16 is."""
    A = sp.random(30, 30, density=0.3, random_state=0)
    W = torch.asarray((A + A.T).toarray()).half()
    to = {"coo": lambda t: t.to_sparse_coo(), "csr": lambda t: t.to_sparse_csr(),
          "bsr": lambda t: t.to_sparse_bsr((5, 5))}[layout]
    kw = dict(affinity="precomputed", random_state=0, backend="numba")
    ref = FalconNCut(3, **kw).fit(W)
    est = FalconNCut(3, **kw).fit(to(W))
    assert est.affinity_matrix_.dtype == np.float64
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(to(W[:5])), ref.predict(W[:5]))
    assert normalized_cut(to(W), ref.labels_) == normalized_cut(W, ref.labels_)
    res = falcon_batch([to(W)], 3, affinity="precomputed", init=[ref.labels_],
                       backend="numba")
    assert res.ncut[0] == pytest.approx(normalized_cut(W, res.labels[0]), abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8])
def test_uncoalesced_integer_sparse_tensors_sum_without_wrapping(dtype):
    """An uncoalesced COO tensor of small integer weights (an edge list with
    repeated edges) was coalesced in its dtype: 300 parallel edges of
    weight 1 weighed 44 (int8: refused as negative), where the same edges
    as a SciPy COO matrix weigh 300; they are summed in float64."""
    rows, cols = [], []
    for a, b, m in [(0, 1, 300), (2, 3, 300), (1, 2, 1), (0, 3, 1)]:
        rows += [a, b] * m
        cols += [b, a] * m
    T = torch.sparse_coo_tensor(torch.tensor([rows, cols]),
                                torch.ones(len(rows), dtype=dtype), (4, 4))
    G = sp.coo_matrix((np.ones(len(rows), np.uint8), (rows, cols)), shape=(4, 4))
    W = np.zeros((4, 4))
    np.add.at(W, (rows, cols), 1.0)
    est = FalconNCut(2, affinity="precomputed", random_state=0).fit(T)
    np.testing.assert_array_equal(est.affinity_matrix_.toarray(), W)
    assert est.ncut_ == pytest.approx(normalized_cut(G, est.labels_), rel=1e-12)
    assert normalized_cut(T, est.labels_) == pytest.approx(est.ncut_, rel=1e-12)
    assert not T.is_coalesced()  # the caller's tensor is left as it was


def test_batched_and_hybrid_sparse_tensors():
    """A 3-D sparse COO tensor of graphs (``torch.stack`` of sparse ones)
    made falcon_batch say "too many values to unpack (expected 2)", and a
    hybrid COO tensor (rows stored dense) made fit say "not enough values to
    unpack"; the first is read graph by graph, the second as the matrix it
    holds, and a sparse tensor of another rank is refused by its shape."""
    rng = np.random.default_rng(0)
    A = (rng.random((3, 20, 20)) < 0.3).astype(float)
    W = A + A.transpose(0, 2, 1)
    Wt = torch.asarray(W)
    kw = dict(affinity="precomputed", device="cpu", random_state=0)
    ref = falcon_batch(W, 2, **kw)
    res = falcon_batch(Wt.to_sparse(), 2, **kw)
    np.testing.assert_array_equal(res.ncut, ref.ncut)
    est = FalconNCut(2, affinity="precomputed", random_state=0)
    np.testing.assert_array_equal(est.fit(Wt[0].to_sparse(1)).labels_,
                                  est.fit(W[0]).labels_)
    with pytest.raises(ValueError, match=r"2-D sparse tensor.*\(3, 20, 20\)"):
        est.fit(Wt.to_sparse())


def test_falcon_batch_takes_a_tensor_of_per_graph_tau():
    """An array of per-graph ``tau`` given as a tensor that requires grad
    (or of bfloat16) raised "Can't call numpy() on Tensor that requires
    grad"; it is read on the host as every other tensor input."""
    rng = np.random.default_rng(0)
    graphs = [rng.normal(size=(30, 3)) for _ in range(2)]
    kw = dict(affinity="rbf", init="kmeans", random_state=0, device="cpu")
    ref = falcon_batch(graphs, 2, tau=np.array([0.125, 0.25]), **kw)
    for tau in (torch.tensor([0.125, 0.25], requires_grad=True),
                torch.tensor([0.125, 0.25]).bfloat16()):
        res = falcon_batch(graphs, 2, tau=tau, **kw)
        np.testing.assert_array_equal(res.tau, ref.tau)
        np.testing.assert_array_equal(res.ncut, ref.ncut)


class _TensorSubclass(torch.Tensor):
    """As torchvision's ``tv_tensors.Image``: a subclass from another module."""


def test_tensor_subclasses_are_tensors():
    """A tensor subclass defined outside torch (torchvision's
    ``tv_tensors.Image``, which its v2 transforms return) was not taken for
    a tensor: load_image said "image must be ... a torch tensor; got Image",
    and fit called numpy() on it ("Can't call numpy() on Tensor that
    requires grad")."""
    from sklearn_falcon.image import load_image

    X = np.random.default_rng(0).normal(size=(30, 2))
    Xs = torch.asarray(X).as_subclass(_TensorSubclass).requires_grad_()
    ref = FalconNCut(2, random_state=0).fit(X)
    np.testing.assert_array_equal(FalconNCut(2, random_state=0).fit(Xs).labels_,
                                  ref.labels_)
    img = torch.randint(0, 255, (3, 6, 8), dtype=torch.uint8)
    np.testing.assert_array_equal(load_image(img.as_subclass(_TensorSubclass)),
                                  load_image(img))


@pytest.mark.filterwarnings("ignore:ComplexHalf support:UserWarning")
def test_torch_tensors_of_bool_or_complex_dtype_are_refused_by_name():
    X = torch.asarray(np.random.default_rng(0).normal(size=(20, 2)))
    with pytest.raises(TypeError, match="X has dtype=bool"):
        FalconNCut(2).fit(X > 0)
    with pytest.raises(ValueError, match="X has dtype=complex128"):
        FalconNCut(2).fit(X.to(torch.complex128))
    with pytest.raises(ValueError, match="Input X contains NaN"):
        FalconNCut(2).fit(torch.full((10, 2), float("nan")))
    # bfloat16, which NumPy lacks, is read as float32
    assert FalconNCut(2, random_state=0).fit(X.bfloat16()).labels_.shape == (20,)
    # and so are the float8 types, which said "Got unsupported ScalarType
    # Float8_e4m3fn"; complex32 is refused as complex, by name
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        Xq = X.to(dtype)
        ref = FalconNCut(2, random_state=0).fit(Xq.float().numpy()).labels_
        np.testing.assert_array_equal(FalconNCut(2, random_state=0).fit(Xq).labels_,
                                      ref)
    with pytest.raises(ValueError, match="X has dtype=complex64"):
        FalconNCut(2).fit(X.to(torch.complex32))


def test_torch_tensors_on_the_meta_device_are_refused_by_name():
    """A tensor on the "meta" device (a shape without data, as a model built
    with ``torch.device("meta")`` holds) raised torch's NotImplementedError
    "Cannot copy out of meta tensor; no data!" from fit; a ValueError says
    what it is, for dense and sparse ones, as X and as a precomputed W."""
    X = torch.zeros(20, 2, device="meta")
    with pytest.raises(ValueError, match=r"'meta' device.*holds no data"):
        FalconNCut(2).fit(X)
    with pytest.raises(ValueError, match=r"'meta' device.*holds no data"):
        FalconNCut(2, affinity="precomputed").fit(torch.zeros(20, 20, device="meta"))
    with pytest.raises(ValueError, match=r"'meta' device.*holds no data"):
        falcon_batch([X], 2, device="cpu")


def test_falcon_batch_cosine_zero_rows_are_left_out_of_the_solve():
    # rows of zero features have zero cosine affinity to every row; the
    # matrix-free path kept them in the solve, where a start with them alone in
    # a cluster kept them there: a cluster of zero volume, counted 0 in an
    # NCut of two real clusters (0.56, where the host path finds 1.15)
    rng = np.random.default_rng(0)
    y = rng.integers(3, size=20)
    X = np.abs(5.0 * np.eye(3)[y] + rng.normal(size=(20, 3)))
    X[:4] = 0.0
    init = np.r_[[2] * 4, rng.integers(2, size=16)]
    res = falcon_batch([X, X[4:]], 3, affinity="cosine", init=[init, init[4:]],
                       polish=False, backend="torch", device="cpu")
    ref = falcon_batch([X], 3, affinity="cosine", init=[init], polish=False,
                       backend="numba")
    W = make_affinity("cosine").fit(X)
    d = W.sum(axis=1)
    assert np.all(d[:4] == 0)
    vol = np.bincount(res.labels[0], weights=d, minlength=3)
    assert np.all(vol > 0), vol
    assert np.all(res.labels[0][:4] == np.argmax(vol))
    assert res.ncut[0] == pytest.approx(ref.ncut[0], abs=1e-9)
    assert res.ncut[0] == pytest.approx(normalized_cut(W, res.labels[0]), abs=1e-9)


def test_falcon_batch_cosine_zero_rows_stay_matrix_free(monkeypatch):
    # a graph with zero rows of features (zero-degree nodes) made the whole
    # batch build its dense n x n affinities on the host and solve them as
    # explicit graphs (a batch of 4,096-token images: 134 MB a graph); the
    # others' problem is formed from the features, as the estimator's is
    rng = np.random.default_rng(0)
    graphs, inits = [], []
    for b, n in enumerate((20, 26, 23)):
        y = rng.integers(3, size=n)
        X = np.abs(5.0 * np.eye(3)[y] + rng.normal(size=(n, 3)))
        if b != 1:
            X[b:b + 4] = 0.0
        graphs.append(X)
        inits.append(np.r_[rng.integers(3, size=n)])
    ref = falcon_batch(graphs, 3, affinity="cosine", init=inits, polish=False,
                       backend="numba")

    def explicit(*args, **kwargs):
        raise AssertionError("the affinities were built on the host")

    monkeypatch.setattr(TorchProblem, "from_affinity", explicit)
    for init in (inits, "kmeans"):
        res = falcon_batch(graphs, 3, affinity="cosine", init=init,
                           polish=init == "kmeans", random_state=0,
                           backend="torch", device="cpu")
        for b, X in enumerate(graphs):
            W = make_affinity("cosine").fit(X)
            d = W.sum(axis=1)
            vol = np.bincount(res.labels[b], weights=d, minlength=3)
            assert np.all(vol > 0), vol
            assert np.all(res.labels[b][d == 0] == np.argmax(vol))
            assert res.ncut[b] == pytest.approx(
                normalized_cut(W, res.labels[b]), abs=1e-9)
            if init is inits:
                assert res.ncut[b] == pytest.approx(ref.ncut[b], abs=1e-9)
                np.testing.assert_array_equal(res.labels[b], ref.labels[b])


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_falcon_batch_coo_features_with_zero_degree_nodes(backend):
    # COO features were kept as COO; leaving out the zero-degree nodes (zero
    # rows of a cosine graph) indexed them: "'coo_matrix' object is not
    # subscriptable"
    rng = np.random.default_rng(0)
    X = np.abs(5.0 * np.eye(3)[rng.integers(3, size=20)] + rng.normal(size=(20, 3)))
    X[:4] = 0.0
    ref = falcon_batch([X], 3, affinity="cosine", init="kmeans", random_state=0,
                       backend=backend, device="cpu")
    res = falcon_batch([sp.coo_matrix(X)], 3, affinity="cosine", init="kmeans",
                       random_state=0, backend=backend, device="cpu")
    assert res.ncut[0] == pytest.approx(ref.ncut[0], abs=1e-9)
    np.testing.assert_array_equal(res.labels[0], ref.labels[0])


@pytest.mark.filterwarnings("ignore:Sparse:UserWarning")
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_falcon_batch_takes_a_3d_sparse_tensor(layout):
    # a batch of sparse affinities as one (B, n, n) sparse tensor was brought
    # to the host as one 2-D matrix: "too many values to unpack (expected 2)"
    W = _graphs("dense")[0][0]
    p = np.random.default_rng(0).permutation(W.shape[0])
    dense = np.stack([W, W[p][:, p]])  # (a batched CSR needs equal nnz)
    T = torch.tensor(dense)
    T = T.to_sparse() if layout == "coo" else T.to_sparse(layout=torch.sparse_csr)
    res = falcon_batch(T, 3, affinity="precomputed", random_state=0, device="cpu")
    ref = falcon_batch(list(dense), 3, affinity="precomputed", random_state=0,
                       device="cpu")
    np.testing.assert_allclose(res.ncut, ref.ncut, atol=1e-12)
    for a, b in zip(res.labels, ref.labels):
        np.testing.assert_array_equal(a, b)


def test_matrix_free_start_graph_does_not_warn_that_it_is_complete():
    # a graph init of a matrix-free fit starts from a kNN graph of the
    # features; with n_samples <= n_neighbors it warned that "the labels are
    # arbitrary", though the labels are solved on the cosine affinity
    X = np.random.default_rng(0).random((8, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FalconNCut(2, affinity="cosine", backend="torch", device="cpu",
                   random_state=0).fit(X)
        falcon_batch([X, X], 2, affinity="cosine", backend="torch", device="cpu",
                     init="multilevel", random_state=0)
    with pytest.warns(UserWarning, match="every sample is a neighbour"):
        FalconNCut(2, random_state=0).fit(X)  # the user's own kNN graph


def test_matrix_free_ncut_is_that_of_the_labels():
    """A matrix-free fit reported ``K - f`` of the solver's running ``f`` as
    ``ncut_`` (1.790390e-10 at ``gamma=300``), while its
    ``cluster_associations_`` came from a fresh pass (``sum((vol - assoc)
    / vol)`` = 1.790408e-10): ``ncut_`` now comes from that pass, as on an
    explicit graph."""
    from sklearn.metrics.pairwise import rbf_kernel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 2)) * np.r_[1, 3]
    X[:200] += 4
    est = FalconNCut(5, affinity="rbf", gamma=300, backend="torch", device="cpu",
                     random_state=0).fit(X)
    vol, assoc = est.cluster_volumes_, est.cluster_associations_
    assert est.ncut_ == pytest.approx(np.sum((vol - assoc) / vol), rel=1e-12, abs=0)
    # vol - assoc cancels: about 1e-16 apart from the cut summed
    assert est.ncut_ == pytest.approx(
        normalized_cut(rbf_kernel(X, gamma=300), est.labels_), rel=0, abs=1e-14)


_THREAD_CALLS = {
    "fit": """
        X = np.random.default_rng(0).random((60, 3))
        for aff in ("rbf", "nearest_neighbors"):
            est = FalconNCut(3, affinity=aff, backend="torch", device="cpu",
                             n_jobs=2, random_state=0).fit(X)
            est.predict(X[:5])
            est.score(X[:20])
            seen.append(torch.get_num_threads())
        falcon_batch([X, X], 3, affinity="rbf", backend="torch", device="cpu")
    """,
    "pamr": """
        pamr(rng.random((600, 600, 3)), rng.integers(0, 3, (600, 600)), n_iter=1,
             dilations=(1,))
    """,
    "upsample_labels": """
        img = rng.random((600, 600, 3))
        upsample_labels(rng.integers(0, 3, (150, 150)), img, img[::4, ::4])
    """,
}


@pytest.mark.parametrize("call", sorted(_THREAD_CALLS))
def test_numba_threads_keep_the_torch_thread_count_of_the_user(call):
    """The first launch of Numba's OpenMP pool in a process (a fit with
    ``n_jobs``, the kernels of a large graph or image) sets OpenMP's thread
    count, which is torch's: ``torch.set_num_threads(3)`` became Numba's
    count for good (a Numba fit's BLAS limit restored it by chance)."""
    import os
    import subprocess
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, torch
        torch.set_num_threads(3)
        torch.ones(8).sum()  # torch's threads are set up
        from sklearn_falcon import FalconNCut, falcon_batch
        from sklearn_falcon.image import pamr, upsample_labels
        rng, seen = np.random.default_rng(0), []
    """) + textwrap.dedent(_THREAD_CALLS[call]) + (
        "seen.append(torch.get_num_threads())\nprint(seen)\n")
    env = {**os.environ, "NUMBA_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert set(eval(out.stdout.split("\n")[-2])) == {3}


def test_torch_default_device_does_not_move_a_cpu_fit():
    """``torch.set_default_device`` (``"cuda"`` in many notebooks) sent every
    array of a ``device="cpu"`` fit through it: ``torch.as_tensor`` of the
    boundary made the tensors there and copied them back (the dense ``W`` of
    a CPU fit went to the GPU and back); the ``"meta"`` device, which holds
    no data, shows it on any machine ("Cannot copy out of meta tensor")."""
    from sklearn.metrics.pairwise import rbf_kernel

    from sklearn_falcon.image import pamr

    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(30, 2)), rng.normal(size=(30, 2)) + 3]
    img, lab = rng.random((8, 8, 3)), rng.integers(0, 3, (8, 8))

    def run():
        out = []
        for aff, Xin in (("rbf", X), ("cosine", X), ("nearest_neighbors", X),
                         ("precomputed", rbf_kernel(X))):
            est = FalconNCut(2, affinity=aff, backend="torch", device="cpu",
                             random_state=0).fit(Xin)
            out += [est.labels_, est.predict(Xin[:5]), [est.score(Xin[:20])]]
        res = falcon_batch([X, X[:40]], 2, affinity="rbf", backend="torch",
                           device="cpu", init="kmeans", random_state=0)
        return out + res.labels + [pamr(img, lab, device="cpu")]

    expected = run()
    torch.set_default_device("meta")
    try:
        got = run()
    finally:
        torch.set_default_device(None)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)
