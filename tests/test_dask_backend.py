"""FalconNCut on a Dask array of row blocks (backend="dask").

The parity of the problem's operations with the NumPy references and the
Numba backend (one block) is in test_backends.py; here: several blocks,
the estimator on Dask input, the initialization at scale, validation
without gathering, a process cluster that never gathers the graph on the
client and survives a killed worker.
"""

import logging
import os
import signal
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from shared import noisy, parallel_edges, planted

from sklearn_falcon import FalconNCut, normalized_cut
from sklearn_falcon._backends import make_problem
from sklearn_falcon._solver import SolverOptions, solve

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from sklearn_falcon._backends._dask import DaskProblem, ShardedGraph  # noqa: E402

K = 4


def shards(W, n_blocks, *, dense=False, rows=None):
    """``W`` as a Dask array of ``n_blocks`` row blocks (CSR or dense);
    ``rows`` gives each block an unknown number of rows."""
    n = W.shape[0]
    bounds = np.linspace(0, n, n_blocks + 1).astype(int)
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        blk = sp.csr_matrix(W[a:b])
        blk = blk.toarray() if dense else blk
        meta = np.empty((0, 0)) if dense else sp.csr_matrix((0, 0))
        parts.append(da.from_delayed(dask.delayed(blk), shape=(rows or b - a, n),
                                     dtype=W.dtype, meta=meta))
    return da.concatenate(parts, axis=0)


def write_shards(W, n_blocks, folder):
    """``W`` written as ``n_blocks`` .npz row blocks, read back lazily by
    :func:`load_guarded` (on the workers)."""
    n = W.shape[0]
    bounds = np.linspace(0, n, n_blocks + 1).astype(int)
    parts = []
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        path = str(folder / f"shard{s}.npz")
        sp.save_npz(path, sp.csr_matrix(W[a:b]))
        parts.append(da.from_delayed(dask.delayed(load_guarded)(path),
                                     shape=(b - a, n), dtype=W.dtype,
                                     meta=sp.csr_matrix((0, 0))))
    return da.concatenate(parts, axis=0)


def load_guarded(path):
    """A shard, carrying a guard that fails if it is unpickled in the client
    (or scheduler) process."""
    block = sp.load_npz(path)
    block._guard = ClientGuard()
    return block


def _refuse_on_client():
    if str(os.getpid()) == os.environ.get("SKF_TEST_CLIENT_PID"):
        raise AssertionError("a row block of the graph was sent to the client")
    return ClientGuard()


class ClientGuard:
    """Attached to a row block: unpickling it in the client process fails."""

    def __reduce__(self):
        return (_refuse_on_client, ())


@pytest.fixture(scope="module")
def graph():
    return planted(1600, K, seed=3)


@pytest.fixture(scope="module")
def thread_client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        with distributed.Client(cluster) as client:
            yield client


def _est(**kw):
    return FalconNCut(K, affinity="precomputed", random_state=0, **kw)


# ------------------------------------------------------------------ solver
@pytest.mark.parametrize("polish", [False, True])
def test_blocks_solve_like_one_machine(graph, polish):
    """From the same start, the proximal loop on 5 blocks takes the same
    steps as the Numba backend (exact passes: the same labels up to exact
    ties); the blockwise polish ends at least as high."""
    W, y = graph
    y0 = noisy(y, K, 0.6, seed=1)
    if polish:  # a weak graph and a random start leave moves to polish
        W, _ = planted(1600, K, seed=3, p_in=0.5)
        y0 = np.random.default_rng(0).integers(K, size=W.shape[0])
    opt = SolverOptions(polish=polish)
    ref = solve(make_problem(W, K), y0, opt)
    P = DaskProblem(ShardedGraph.from_matrix(W, 5), K)
    res = solve(P, y0, opt)
    assert np.all(np.diff(res.objective_path[0]) >= 0)
    if polish:
        assert res.objective[0] >= ref.objective[0] - 1e-3
        assert res.n_polish[0] > 0 and ref.n_polish[0] > 0
    else:
        assert res.n_iter[0] == ref.n_iter[0]
        assert np.mean(res.labels != ref.labels) < 1e-3
        assert res.objective[0] == pytest.approx(ref.objective[0], abs=1e-9)


def test_polish_keeps_the_best_block_when_the_combined_moves_lose():
    """Nodes 0 (block 0) and 2 (block 1) are tied strongly but start apart:
    each block alone moves its node to the other's cluster, together they
    swap and lose.  The global rule keeps one block's move; f rises."""
    W = np.array([[0, 1, 5, 0], [1, 0, 0, 1], [5, 0, 0, 1], [0, 1, 1, 0.]]) + 0.01
    np.fill_diagonal(W, 0)
    P = DaskProblem(ShardedGraph.from_matrix(W, 2), 2)
    X = P.from_labels([0, 0, 1, 1])
    WX = P.weights(X)
    vol, assoc = P.stats(WX, X)
    f0 = P.objective(vol, assoc)[0]
    assert 2 - normalized_cut(W, [1, 0, 0, 1]) < f0  # both moves together
    assert P.polish(X, WX, vol, assoc)[0] == 1
    labels = P.to_numpy(X)[0]
    assert labels.tolist() in ([1, 0, 1, 1], [0, 0, 0, 1])
    f1 = P.objective(vol, assoc)[0]
    assert f1 > f0
    assert f1 == pytest.approx(2 - normalized_cut(W, labels))
    assert f1 == pytest.approx(P.objective(*P.stats(WX, X))[0])


def test_polish_moves_a_block_s_last_node_of_a_cluster_held_elsewhere():
    """Node 0 is the only node of cluster 0 in block 0, but node 3 (block 1)
    is in cluster 0 too: moving node 0 to cluster 1 empties nothing and
    lowers the NCut.  The blockwise sweep guarded clusters by the block's own
    counts and never made that move: the Dask fit ended on labels that one
    exact move improves, where the one-machine polish makes it."""
    W = np.array([[0, 0.137, 0.748, 0.470], [0.137, 0, 0.845, 0.322],
                  [0.748, 0.845, 0, 0.290], [0.470, 0.322, 0.290, 0]])
    y0 = np.array([0, 2, 1, 0])
    moved = np.array([1, 2, 1, 0])  # node 0 to cluster 1: all clusters kept
    assert normalized_cut(W, moved) < normalized_cut(W, y0) - 0.05
    P = DaskProblem(ShardedGraph.from_matrix(W, 2), 3)
    X = P.from_labels(y0)
    WX = P.weights(X)
    vol, assoc = P.stats(WX, X)
    f0 = P.objective(vol, assoc)[0]
    assert P.polish(X, WX, vol, assoc)[0] >= 1
    labels = P.to_numpy(X)[0]
    assert len(np.unique(labels)) == 3
    assert P.objective(vol, assoc)[0] > f0
    # nodes 1 (block 0) and 2 (block 1) are cluster 2: each block alone moves
    # its node out, together they would empty it: one block's move is kept
    W2 = np.array([[0, 5, 0.1, 0.1], [5, 0, 1, 0.1], [0.1, 1, 0, 5],
                   [0.1, 0.1, 5, 0]])
    P = DaskProblem(ShardedGraph.from_matrix(W2, 2), 3)
    X = P.from_labels([0, 2, 2, 1])
    WX = P.weights(X)
    vol, assoc = P.stats(WX, X)
    assert P.polish(X, WX, vol, assoc)[0] == 1
    assert P.to_numpy(X)[0].tolist() in ([0, 0, 2, 1], [0, 2, 1, 1])
    assert P.polish(X, WX, vol, assoc)[0] == 0
    # the estimator's blockwise fit from that start ends where one machine does
    ref = FalconNCut(3, affinity="precomputed", init=y0).fit(W)
    est = FalconNCut(3, affinity="precomputed", init=y0).fit(shards(W, 2))
    assert est.ncut_ == pytest.approx(ref.ncut_)
    assert est.ncut_ == pytest.approx(normalized_cut(W, est.labels_))


# --------------------------------------------------------------- estimator
def test_fit_on_a_cluster_matches_one_machine(graph, thread_client):
    W, y = graph
    ref = _est(backend="numba").fit(W)
    est = _est().fit(shards(W, 4))  # backend="auto" picks Dask
    assert est.backend_ == "dask"
    assert isinstance(est.labels_, np.ndarray) and est.labels_.dtype == np.int64
    assert est.ncut_ <= ref.ncut_ + 1e-9
    assert est.ncut_ == pytest.approx(normalized_cut(W, est.labels_), abs=1e-9)
    assert np.all(np.diff(est.objective_path_) >= 0)
    np.testing.assert_allclose(est.cluster_volumes_,
                               np.bincount(est.labels_, weights=W.sum(1).A1))
    # predict on an in-memory cross-affinity, as on one machine
    np.testing.assert_array_equal(est.predict(W[:50]), est.labels_[:50])


def test_coarsened_start_reaches_the_one_machine_ncut(graph):
    """Forced to coarsen (a tiny coarse_max_entries), blockwise: with shards
    that keep communities together the levels shrink to the limit and the
    NCut is that of one machine; with nodes in random order (a block holds a
    tenth of each node's edges) coarsening stalls above the limit, and the
    start is random labels on the last level, with a warning.  (10 blocks:
    the tasks read joined arrays.)"""
    W, y = graph
    order = np.argsort(y, kind="stable")
    local = W[order][:, order].tocsr()
    conf = {"sklearn_falcon.dask.coarse_max_entries": 3000}
    for G, ordered in ((local, True), (W, False)):
        ref = _est(backend="numba").fit(G)
        with dask.config.set(conf):
            if ordered:
                est = _est().fit(shards(G, 10))
            else:
                with pytest.warns(UserWarning, match="stopped coarsening"):
                    est = _est().fit(shards(G, 10))
        levels = est._dask_info["levels"]
        assert len(levels) >= (3 if ordered else 1)
        assert [n for n, _ in levels] == sorted(n for n, _ in levels)[::-1]
        assert (levels[-1][1] <= 3000) == ordered
        assert est.ncut_ <= ref.ncut_ * 1.01


def test_a_start_coarsened_from_shards_without_locality_warns(graph):
    """Coarsened below the limit from nodes in random order (a block of 4
    holds a quarter of the edge weight), the start was poorer than random
    labels on harder graphs (the Dask guide), silently; shards that keep
    communities together do not warn."""
    W, y = graph
    order = np.argsort(y, kind="stable")
    local = W[order][:, order].tocsr()
    with dask.config.set({"sklearn_falcon.dask.coarse_max_entries": 6000}):
        with pytest.warns(UserWarning, match="hold 25% of its edge weight"):
            est = _est().fit(shards(W, 4))
        assert est._dask_info["levels"][-1][1] <= 6000  # it did not stall
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _est().fit(shards(local, 4))


def test_coarsening_stopped_by_n_clusters_says_so(graph):
    # it said the shards held few edges among their own nodes (and to
    # reorder them) when a coarser level would have had fewer than
    # n_clusters nodes, on shards that keep communities together
    W, y = graph
    order = np.argsort(y, kind="stable")
    local = W[order][:, order].tocsr()
    with dask.config.set({"sklearn_falcon.dask.coarse_max_entries": 4000}):
        with pytest.warns(UserWarning, match="fewer than n_clusters=200") as rec:
            FalconNCut(200, affinity="precomputed", random_state=0).fit(
                shards(local, 2))
    assert not any("few edges among" in str(w.message) for w in rec)


def test_same_start_same_labels_dense_and_streamed():
    W, y = planted(700, K, seed=7)
    y0 = noisy(y, K, 0.5, seed=2)
    ref = _est(init=y0, polish=False, backend="numba").fit(W)
    Wd = W.toarray()
    a = _est(init=y0, polish=False).fit(shards(Wd, 3, dense=True))
    with dask.config.set({"sklearn_falcon.dask.persist": False}):
        b = _est(init=da.from_array(y0, chunks=300), polish=False).fit(shards(W, 3))
    assert b._dask_info["persisted"] is False and a._dask_info["persisted"] is True
    for est in (a, b):
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        assert est.n_iter_ == ref.n_iter_
        np.testing.assert_allclose(est.objective_path_, ref.objective_path_,
                                   rtol=1e-12)


def test_warm_start_refits_from_the_previous_labels():
    W, y = planted(700, K, seed=7)
    y0 = noisy(y, K, 0.5, seed=2)
    est = _est(init=y0, polish=False, max_iter=2, warm_start=True)
    first = est.fit(shards(W, 3)).labels_.copy()
    est.fit(shards(W, 3))  # two more iterations from `first`, not from y0
    ref = _est(init=first, polish=False, max_iter=2, backend="numba").fit(W)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert not np.array_equal(est.labels_, first)
    np.testing.assert_allclose(est.objective_path_, ref.objective_path_, rtol=1e-12)



@pytest.mark.parametrize("as_dask", [False, True])
def test_labels_as_init_with_n_init_warn_that_one_start_runs(as_dask):
    W, y = planted(700, K, seed=7)
    y0 = noisy(y, K, 0.5, seed=2)
    init = da.from_array(y0, chunks=300) if as_dask else y0
    with pytest.warns(RuntimeWarning, match="one start.*n_init=2") as record:
        _est(init=init, n_init=2, max_iter=2).fit(shards(W, 3))
    assert [w.filename for w in record] == [__file__]

def test_a_dask_fit_forgets_an_earlier_fit_s_feature_names(graph):
    # a Dask array has no column names: an earlier fit's feature_names_in_
    # (a DataFrame's) stayed, and predict would compare X's names with them
    W, _ = graph
    est = _est().fit(W)
    est.feature_names_in_ = np.array([f"n{i}" for i in range(W.shape[0])], object)
    est.fit(shards(W, 3))
    assert est.backend_ == "dask" and not hasattr(est, "feature_names_in_")


def test_an_in_memory_fit_forgets_an_earlier_dask_fit_s_diagnostics(graph):
    # the Dask fit's _dask_info (blocks, levels, timings) stayed after a
    # refit in memory, describing a fit that was no longer the estimator's
    W, _ = graph
    est = _est().fit(shards(W, 3))
    assert hasattr(est, "_dask_info")
    est.fit(W)
    assert est.backend_ == "numba" and not hasattr(est, "_dask_info")


def test_labels_as_a_dask_array_and_random_starts():
    W, _ = planted(600, K, seed=5)
    with dask.config.set({"sklearn_falcon.dask.labels": "dask"}):
        est = _est(init="random", n_init=2).fit(shards(W, 4))
    assert isinstance(est.labels_, da.Array)
    labels = est.labels_.compute()
    assert labels.shape == (W.shape[0],) and set(np.unique(labels)) == set(range(K))
    assert est.ncut_ == pytest.approx(normalized_cut(W, labels), abs=1e-9)


def test_isolated_nodes_and_empty_start_clusters():
    W, y = planted(600, 3, seed=4)
    W = sp.lil_matrix(W)
    W[5, :] = 0
    W[:, 5] = 0
    W = W.tocsr()
    W.eliminate_zeros()
    y0 = np.where(y == 2, 1, y)  # cluster 2 empty at the start
    with pytest.warns(UserWarning, match="1 sample"):
        ref = FalconNCut(3, affinity="precomputed", init=y0, random_state=0,
                         backend="numba").fit(W)
    with pytest.warns(UserWarning, match="1 sample"):
        est = FalconNCut(3, affinity="precomputed", init=y0,
                         random_state=0).fit(shards(W, 3))
    np.testing.assert_array_equal(est.isolated_, [5])
    assert est.labels_[5] == np.argmax(est.cluster_volumes_)
    assert np.bincount(est.labels_, minlength=3).min() > 0
    assert est.ncut_ == pytest.approx(ref.ncut_, abs=0.05)


@pytest.mark.filterwarnings("ignore:1 sample")
@pytest.mark.parametrize("init", ["multilevel", "random"])
def test_a_graph_of_subnormal_weights_is_solved_scaled_up(init):
    # 1 / vol overflowed on subnormal degrees: the random start's solve
    # stopped after one iteration, and the coarse start differed from that
    # of the same graph at unit scale (the in-memory fit scales it up)
    W, _ = planted(600, K, seed=5, degree=8, p_in=0.5)
    tiny = W * 2.0**-1045
    unit = tiny.copy()
    unit.data = np.ldexp(unit.data, 1045)  # the same weights, exactly
    ref = _est(init=init).fit(shards(unit, 3))
    est = _est(init=init).fit(shards(tiny, 3))
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert est.n_iter_ == ref.n_iter_
    assert est.ncut_ == pytest.approx(ref.ncut_, rel=1e-12)
    np.testing.assert_allclose(np.ldexp(est.cluster_volumes_, 1045),
                               ref.cluster_volumes_, rtol=1e-12)
    np.testing.assert_allclose(np.ldexp(est.cluster_associations_, 1045),
                               ref.cluster_associations_, rtol=1e-12)
    np.testing.assert_array_equal(est.predict(tiny[:200]), ref.predict(unit[:200]))


@pytest.mark.parametrize("dtype", [np.float16, object, ">f8", ">f4"])
def test_dense_blocks_of_other_dtypes_are_converted(dtype):
    # dense float16 (or numeric object) blocks, which an in-memory fit
    # accepts, failed in a worker with scipy's "does not support dtype";
    # so did big-endian ones (an HDF5 or FITS file's, read as they are)
    W, _ = planted(300, 3, seed=2)
    D = W.toarray().astype(np.float16)
    ref = FalconNCut(3, affinity="precomputed", random_state=0).fit(
        shards(D.astype(np.float64), 3, dense=True))
    est = FalconNCut(3, affinity="precomputed", random_state=0).fit(
        da.from_array(D.astype(dtype), chunks=(100, 300)))
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert est.ncut_ == pytest.approx(ref.ncut_, rel=1e-12)


# -------------------------------------------------------------- validation
def _bad(kind):
    W, _ = planted(200, 2, seed=0)
    if kind == "asymmetric":
        W = sp.triu(W, format="csr")
    elif kind == "negative":
        W = W.copy()
        W.data[3] = -1.0
    elif kind == "nan":
        W = W.copy()
        W.data[3] = np.nan
    elif kind == "huge":  # degrees beyond float64, as in the in-memory check
        W = W * (1e307 / W.max())
    return shards(W, 2)


@pytest.mark.parametrize("kind, error, match", [
    ("asymmetric", ValueError, "must be symmetric"),
    ("negative", ValueError, "must be nonnegative"),
    ("nan", ValueError, "NaN or infinity"),
    ("huge", ValueError, r"degrees \(row sums\) of the affinity X overflow "
                         r"float64 in their total \(the volume\): its largest "
                         r"degree is .*e\+308\. Divide X by its maximum"),
])
def test_invalid_graphs_are_rejected_blockwise(kind, error, match):
    with pytest.raises(error, match=match):
        FalconNCut(2, affinity="precomputed").fit(_bad(kind))


def test_overflowing_degrees_are_refused_without_numpy_warnings():
    # the blocks' degrees overflowed in scipy's sum, which leaked one NumPy
    # "overflow encountered in reduceat" RuntimeWarning per block before the
    # error (the in-memory check raises alone)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        W, _ = planted(200, 2, seed=0)
        X = shards(W * (1e308 / W.max()), 2)  # every row sum overflows
        with pytest.raises(ValueError, match="overflow float64"):
            FalconNCut(2, affinity="precomputed").fit(X)


@pytest.mark.parametrize("dense", [False, True])
def test_overflowing_degrees_are_refused_as_on_one_machine(dense):
    # the sharded refusal said only "overflow float64", where the in-memory
    # one gives the largest entry (rows that overflow) or the largest
    # degree (only their total, the volume, overflows): the same message
    W = np.ones((10, 10)) - np.eye(10)
    W[:5, 5:] = W[5:, :5] = 0.0
    W[4, 5] = W[5, 4] = 1.0
    for scale, what in ((1e307, "in their total (the volume): its largest degree "
                                 "is 5e+307."),
                        (1.7e308, ": its largest entry is 1.7e+308.")):
        with pytest.raises(ValueError) as on_one:
            FalconNCut(2, affinity="precomputed").fit(W * scale)
        with pytest.raises(ValueError) as sharded:
            FalconNCut(2, affinity="precomputed").fit(
                shards(W * scale, 2, dense=dense))
        assert f"overflow float64{' ' * (what[0] == 'i')}{what}" in str(on_one.value)
        assert str(sharded.value) == str(on_one.value)
    # float32 blocks, whose row sums overflow float32: it said "float64"
    W32 = (W * 1e38).astype(np.float32)
    with pytest.raises(ValueError) as on_one:
        FalconNCut(2, affinity="precomputed").fit(W32)
    with pytest.raises(ValueError) as sharded:
        FalconNCut(2, affinity="precomputed").fit(shards(W32, 2, dense=dense))
    assert "overflow float32: its largest entry is 1e+38" in str(on_one.value)
    assert str(sharded.value) == str(on_one.value)


@pytest.mark.parametrize("dense", [False, True])
def test_a_complete_graph_of_equal_weights_warns_as_on_one_machine(dense):
    # the in-memory fit warns that every partition of such a W has the same
    # NCut (arbitrary labels); the sharded fit clustered it silently
    n = 30
    W = np.full((n, n), 0.5)
    np.fill_diagonal(W, 2.0)
    for X in (W, shards(W, 3, dense=dense)):
        with pytest.warns(UserWarning, match=r"Every off-diagonal affinity of X is "
                          r"equal \(0\.5\), so the graph is complete"):
            FalconNCut(3, affinity="precomputed", init="random",
                       random_state=0).fit(X)
    diag, edge = W.copy(), W.copy()
    diag[0, 0] = 1.0  # a diagonal that is not constant: not flat, on either path
    edge[3, 27] = edge[27, 3] = 0.25  # nor unequal weights (across blocks)
    for bad in (diag, edge):
        for X in (bad, shards(bad, 3, dense=dense)):
            with warnings.catch_warnings():
                warnings.filterwarnings("error", message="Every off-diagonal")
                FalconNCut(3, affinity="precomputed", init="random",
                           random_state=0).fit(X)


@pytest.mark.parametrize("init", ["random", "spectral"])
def test_verbose_logs_the_starts_as_on_one_machine(init, caplog):
    # a sharded fit logged its solves' iterations but neither the "init"
    # stage nor "solve: start i of n", which the in-memory fit logs
    W, _ = planted(200, 2, seed=0)
    logs = []
    for X in (W, shards(W, 2)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
            FalconNCut(2, affinity="precomputed", init=init, n_init=2, verbose=1,
                       random_state=0).fit(X)
        logs.append([r.getMessage().rsplit(" in ", 1)[0] for r in caplog.records
                     if r.stage in ("init", "solve")
                     and not r.getMessage().startswith("solve: iter")])
    # a graph start's restarts are solved on the coarsest graph: one start
    n = 2 if init == "random" else 1
    s = "s" if n > 1 else ""
    assert logs[1] == [f"init: {init}, n_init=2: {n} starting labelling{s}"] + [
        f"solve: start {i + 1} of {n}" for i in range(n)]
    if init == "random":
        assert logs[1] == logs[0]


def test_verbose_logs_the_start_of_a_worker_process_on_the_client(caplog):
    """The graph start runs on one worker; its progress ("level: hierarchy
    of 5 levels", ...) was logged on the synchronous and threaded
    schedulers, but in a worker process, whose logging the client does not
    see, it was lost.  The worker's records are logged on the client."""
    W, _ = planted(1200, 4, seed=0)
    logs = []
    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                                       processes=True, dashboard_address=":0")
    for on_cluster in (False, True):
        caplog.clear()
        client = distributed.Client(cluster) if on_cluster else None
        try:
            with caplog.at_level(logging.INFO, logger="sklearn_falcon"), (
                    dask.config.set(scheduler="sync") if client is None else
                    warnings.catch_warnings()):
                FalconNCut(4, affinity="precomputed", init="multilevel", verbose=1,
                           random_state=0).fit(shards(W, 2))
        finally:
            if client is not None:
                client.close()
        logs.append([r.getMessage() for r in caplog.records
                     if getattr(r, "stage", None) == "level"])
    cluster.close()
    assert logs[0] and logs[1] == logs[0]


def test_invalid_calls_name_the_parameter(graph):
    W, _ = graph
    X = shards(W, 2)
    with pytest.raises(ValueError, match="backend='numba' needs X in memory"):
        _est(backend="numba").fit(X)
    with pytest.raises(ValueError, match="affinity='rbf'"):
        FalconNCut(K, affinity="rbf").fit(X)
    with pytest.raises(ValueError, match="square"):
        _est().fit(X[:100])
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        _est().fit(shards(W, 2, rows=np.nan))
    with pytest.raises(TypeError, match="dtype=bool"):
        _est().fit(X.astype(bool))
    with pytest.raises(ValueError, match="n_clusters=2000 must be <="):
        FalconNCut(2000, affinity="precomputed").fit(X)
    with pytest.raises(ValueError, match="init labels must be integers"):
        _est(init=da.full(W.shape[0], 7, chunks=400)).fit(X)
    # labels of unknown chunk sizes (a filtered array) were refused as of
    # "shape (nan,)", however many they were
    labels = da.arange(W.shape[0] + 10, chunks=400) % K
    labels = labels[da.arange(labels.shape[0], chunks=400) >= 10]
    with pytest.raises(ValueError, match=r"init has unknown chunk sizes; call "
                       r"init.compute_chunk_sizes\(\)"):
        _est(init=labels).fit(X)
    _est(init=labels.compute_chunk_sizes()).fit(X)
    # strings raised numpy's UFuncTypeError from their min(); floats are
    # refused before any pass over them
    for dtype in (str, float):
        labels = da.zeros(W.shape[0], chunks=400).astype(dtype)
        with pytest.raises(ValueError, match=r"integers in \[0, n_clusters=4\); got "
                           f"dtype {labels.dtype}"):
            _est(init=labels).fit(X)
    with pytest.raises(ValueError, match="init='kmeans' needs features"):
        _est(init="kmeans").fit(X)
    with pytest.raises(ValueError, match="device='cuda'"):
        _est(device="cuda").fit(X)
    with pytest.raises(ValueError, match="sklearn_falcon.dask.labels"):
        with dask.config.set({"sklearn_falcon.dask.labels": "list"}):
            _est().fit(X)
    # a bad coarse_max_entries raised int()'s "invalid literal for int() with
    # base 10: '8e6'" (a YAML file gives 8e6 as a string), or was taken as 1
    for value in ("8e6", "many", None, True, 0, -5, 2.5):
        with pytest.raises(ValueError, match=r"sklearn_falcon.dask.coarse_max_"
                           rf"entries must be an integer >= 1; got {value!r}"):
            with dask.config.set({"sklearn_falcon.dask.coarse_max_entries": value}):
                _est().fit(X)
    with dask.config.set({"sklearn_falcon.dask.coarse_max_entries": 3000.0}):
        assert _est().fit(X)._dask_info["levels"][-1][1] <= 3000
    block = da.from_delayed(dask.delayed([[1.0, 1.0]]), shape=(1, 2), dtype=float,
                            meta=np.empty((0, 0)))
    with pytest.raises(TypeError, match="block of type list"):
        FalconNCut(2, affinity="precomputed").fit(da.concatenate([block, block]))



def test_device_is_read_as_in_memory(graph):
    """A Dask fit passed ``device`` to the Dask backend unread: a
    ``torch.device`` (accepted by the in-memory fit) raised "'torch.device'
    object has no attribute 'startswith'", and a malformed string such as
    ``device="gpu"`` was taken for the CPU without a word.  It is read as
    in memory: a ``torch.device("cpu")`` (and ``"cpu:0"``) is the CPU,
    a CUDA one is refused naming the device, a malformed one naming
    ``device``."""
    torch = pytest.importorskip("torch")
    W, _ = graph
    X = shards(W, 2)
    want = _est().fit(X).labels_
    for device in (torch.device("cpu"), torch.device("cpu", 0), "cpu:0"):
        np.testing.assert_array_equal(_est(device=device).fit(X).labels_, want)
    with pytest.raises(ValueError, match="runs on the CPUs of its workers; got "
                       "device='cuda'"):
        _est(device=torch.device("cuda")).fit(X)
    with pytest.raises(ValueError, match="device must be 'auto', 'cpu'.*got "
                       "device='gpu'"):
        _est(device="gpu").fit(X)


# ------------------------------------------------------------ process cluster
def _at_the_second_step(monkeypatch, action):
    """Run ``action`` (a worker killed, the client restarted or closed) at
    the fit's second solver step; returns the list of the steps' calls."""
    step = DaskProblem.step
    calls = []

    def step_then_act(self, *args):
        calls.append(1)
        if len(calls) == 2:
            action()
        return step(self, *args)

    monkeypatch.setattr(DaskProblem, "step", step_then_act)
    return calls


def test_process_cluster_never_gathers_the_graph_and_survives_a_killed_worker(
        graph, monkeypatch, tmp_path):
    """Two worker processes; the row blocks carry a guard that fails if it
    is ever unpickled on the client.  In the second fit one worker process
    is killed at the second proximal step: Dask recomputes what it held from
    the shards, and the fit ends with the same labels."""
    W, y = graph
    monkeypatch.setenv("SKF_TEST_CLIENT_PID", str(os.getpid()))
    y0 = noisy(y, K, 0.5, seed=6)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        with distributed.Client(cluster) as client:
            X = write_shards(W, 4, tmp_path)
            ref = _est(init=y0).fit(X)
            pids = list(client.run(os.getpid).values())
            calls = _at_the_second_step(
                monkeypatch, lambda: os.kill(pids[0], signal.SIGKILL))
            est = _est(init=y0).fit(X)
            assert len(calls) > 2
            assert pids[0] not in client.run(os.getpid).values()
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.objective_path_, ref.objective_path_)
    assert est.ncut_ == pytest.approx(normalized_cut(W, est.labels_), abs=1e-9)


def test_a_cancelled_compute_of_falcon_batch_is_not_said_to_be_a_fit_of_falconncut():
    """The restart's message said "while FalconNCut.fit ran" and "Call fit
    again" of a ``falcon_batch`` run too (the scope of both)."""
    from concurrent.futures import CancelledError

    from sklearn_falcon._backends import BACKENDS

    with pytest.raises(RuntimeError, match="restarted") as info:
        with BACKENDS["dask"].scope():
            raise CancelledError("add_parts-1 cancelled for reason: lost dependencies")
    assert "falcon_batch" in str(info.value) and "Call fit" not in str(info.value)
    assert isinstance(info.value.__cause__, CancelledError)


@pytest.mark.parametrize("in_memory", [False, True])
def test_a_restart_of_the_cluster_during_a_fit_says_what_happened(
        graph, monkeypatch, in_memory):
    """client.restart() during a fit cancels what the workers held for it
    (the persisted blocks, labels and sums): the fit ended with Dask's
    "FutureCancelledError: add_parts-798bdadc-... cancelled for reason:
    lost dependencies.", which names neither the restart nor what to do.
    It raises a RuntimeError that says both, from Dask's error."""
    from concurrent.futures import CancelledError

    W, y = graph
    y0 = noisy(y, K, 0.5, seed=6)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        with distributed.Client(cluster) as client:
            _at_the_second_step(monkeypatch, client.restart)
            est = _est(init=y0, backend="dask")
            with pytest.raises(RuntimeError,
                               match=r"restarted .*Run it again") as info:
                est.fit(W if in_memory else shards(W, 4))
    assert isinstance(info.value.__cause__, CancelledError)
    assert not hasattr(est, "labels_")


@pytest.mark.parametrize("in_memory", [False, True])
def test_a_client_closed_during_a_fit_says_what_happened(graph, monkeypatch,
                                                         in_memory):
    """client.close() during a fit left its next compute, now on Dask's
    local scheduler, with futures of the closed client: the fit ended with
    "ValueError: Missing dependency getitem-... for dependents
    {'step_task-...'}" (or, where the client was the configured scheduler,
    Dask's ClosedClientError), which names neither the client nor what to do.  It
    raises a RuntimeError that says both, from Dask's error."""
    W, y = graph
    y0 = noisy(y, K, 0.5, seed=6)
    # the Client makes itself Dask's scheduler; closed within the scheduler
    # pinned below, it left "dask.distributed" configured for the next tests
    with dask.config.set(scheduler=None), distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True,
            dashboard_address=":0") as cluster:
        client = distributed.Client(cluster)  # the default client, as in a script
        try:
            _at_the_second_step(monkeypatch, client.close)
            est = _est(init=y0, backend="dask")
            # on this client alone (not on another test's, once it is closed)
            with pytest.raises(RuntimeError,
                               match=r"client the fit ran on was closed .*Run it "
                               "again on an open client. Dask said: ") as info, (
                    dask.config.set(scheduler=client)):
                est.fit(W if in_memory else shards(W, 4))
        finally:
            client.close()
    assert info.value.__cause__ is not None
    assert not hasattr(est, "labels_")


@pytest.mark.parametrize("max_entries", [None, 3000])
def test_a_disconnected_sharded_graph_is_warned_of_as_in_memory(max_entries):
    """A Dask fit of a graph of several components said nothing, where the
    in-memory fit warns "not fully connected: it has 3 connected components"
    (the normalized cut separates them at no cost).  The graph start counts
    the components of the coarsest graph on its worker: the matching
    contracts edges only, so the count is the graph's, whether the graph is
    coarsened (``max_entries``) or not."""
    parts = [planted(200, 2, seed=s)[0] for s in range(3)]
    W = sp.block_diag(parts, format="csr")
    with dask.config.set({"sklearn_falcon.dask.coarse_max_entries": max_entries}
                         if max_entries else {}):
        with pytest.warns(UserWarning, match="not fully connected: it has 3 "
                          r"connected components \(n_clusters=4\)"):
            est = _est(init="multilevel").fit(shards(W, 3))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            _est(init="multilevel").fit(shards(parts[0], 3))
    assert (len(est._dask_info["levels"]) > 1) == bool(max_entries)


def test_predict_and_score_gather_a_dask_array_of_sparse_blocks(graph):
    """After a Dask fit, predict and score of rows of W held as Dask CSR
    blocks raised scikit-learn's "Expected 2D array, got scalar array"
    (dense blocks worked: NumPy gathers them); they are gathered too."""
    W, _ = graph
    est = _est().fit(shards(W, 3))
    rows = sp.csr_matrix(W)[:7]
    for X in (shards(W, 3)[:7], shards(W, 3, dense=True)[:7]):
        np.testing.assert_array_equal(est.predict(X), est.predict(rows))
        assert est.score(X) == pytest.approx(est.score(rows), rel=1e-12)


def test_malformed_sparse_row_blocks_are_refused_by_name():
    """A CSR row block built from ``(data, indices, indptr)`` is not checked
    by SciPy: indices past ``n`` or negative, or an ``indptr`` that decreases
    or runs past the entries, were refused only by the randomized symmetry
    check ("must be symmetric"), by SciPy's C++ (``vector::_M_default_
    append``), or read out of bounds by the kernels of a worker.  Each block
    is checked before any read, and the message names it (run in a
    subprocess: a regression may crash)."""
    import subprocess
    import sys

    code = r"""
import numpy as np, scipy.sparse as sp, dask, dask.array as da
from sklearn_falcon import FalconNCut

W = sp.csr_matrix((np.ones(12), [1, 2, 0, 2, 0, 1, 4, 5, 3, 5, 3, 4],
                   [0, 2, 4, 6, 8, 10, 12, 12, 12]), shape=(8, 8))
for case in range(6):
    blocks = [W[:4].tocsr(), W[4:].tocsr()]
    b = blocks[0]
    if case == 0:
        b.indices[-1] = 6_000_000
    elif case == 1:
        b.indices[0] = -300_000
    elif case == 2:
        b.indptr[1] = 5
    elif case == 3:
        b.indptr[-1] = 4000
    elif case == 4:
        b.indptr = b.indptr[:-1]
    X = da.concatenate([
        da.from_delayed(dask.delayed(blk), shape=(4, 8), dtype=float,
                        meta=sp.csr_matrix((0, 0))) for blk in blocks])
    try:
        FalconNCut(2, affinity="precomputed", random_state=0).fit(X)
    except ValueError as exc:
        ok = "X (its row block starting at row 0)" in str(exc)
        print("refused" if ok and "is malformed" in str(exc) else str(exc))
    else:
        print("accepted")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["refused"] * 5 + ["accepted"], out.stdout


def test_row_blocks_of_complex_or_text_values_are_refused_by_name():
    """A block's own dtype may differ from the Dask array's: a complex block
    lost its imaginary part with NumPy's ComplexWarning (once per pass), a
    block of text raised SciPy's "scipy.sparse does not support dtype <U32",
    naming no block."""
    W = np.kron(np.eye(2), np.ones((4, 4)))
    for bad in (sp.csr_matrix(W[4:] + 1j * W[4:]), W[4:] + 1j, W[4:].astype(str)):
        blocks = [W[:4], bad]
        X = da.concatenate([da.from_delayed(dask.delayed(b), shape=(4, 8),
                                            dtype=float, meta=np.empty((0, 0)))
                            for b in blocks])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match=r"The row block of X starting at "
                               rf"row 4 has dtype={bad.dtype}; pass real"):
                FalconNCut(2, affinity="precomputed").fit(X)


def test_a_row_block_of_the_wrong_shape_is_named_by_its_parameter():
    """The shape check of a row block named "X" whatever ``name`` its
    validation was given (its other messages use ``name``)."""
    from sklearn_falcon._backends._dask._blocks import summary_task

    with pytest.raises(ValueError, match=r"The row block of affinity starting "
                       r"at row 4 has shape \(3, 8\); its chunk says \(4, 8\)"):
        summary_task(np.ones((3, 8)), 4, 4, 8, 7, name="affinity")


@pytest.fixture
def no_pool_per_compute(monkeypatch):
    """Dask's "processes" scheduler fails a compute that would spawn a
    process pool of its own (not one the fit shares)."""
    import dask.multiprocessing

    def spawn_per_compute(*args, **kwargs):
        raise AssertionError("a compute spawned a process pool of its own")

    monkeypatch.setattr(dask.multiprocessing, "ProcessPoolExecutor",
                        spawn_per_compute)


def test_a_fit_on_the_processes_scheduler_starts_its_processes_once(
        no_pool_per_compute):
    """On Dask's "processes" scheduler without a pool of its own, Dask
    spawned a fresh pool at each of the fit's ~20 computes, whose processes
    imported the package and loaded its kernels again: 90 s for a fit that
    takes 1.5 s on one pool.  The fit runs its computes on one pool."""
    W, y = planted(200, 2, seed=0)
    y0 = noisy(y, 2, 0.3, seed=0)
    with dask.config.set(scheduler="processes", num_workers=1):
        est = FalconNCut(2, affinity="precomputed", init=y0).fit(shards(W, 2))
    ref = FalconNCut(2, affinity="precomputed", init=y0, backend="numba").fit(W)
    np.testing.assert_array_equal(est.labels_, ref.labels_)


@pytest.mark.parametrize("caller", ["FalconNCut", "falcon_batch"])
def test_an_in_memory_fit_on_the_processes_scheduler_starts_its_processes_once(
        no_pool_per_compute, caller):
    """backend="dask" on an in-memory matrix (not a Dask array) spawned a
    fresh process pool at each compute on Dask's "processes" scheduler, as
    Dask-array fits did before they shared one: 80 s for a fit of 200 nodes.
    Its computes, and falcon_batch's, run on one pool."""
    from sklearn_falcon import falcon_batch

    W, y = planted(200, 2, seed=0)
    y0 = noisy(y, 2, 0.3, seed=0)
    ref = FalconNCut(2, affinity="precomputed", init=y0, backend="numba").fit(W)
    with dask.config.set(scheduler="processes", num_workers=1):
        if caller == "FalconNCut":
            labels = FalconNCut(2, affinity="precomputed", init=y0,
                                backend="dask").fit(W).labels_
        else:
            labels = falcon_batch([W], 2, affinity="precomputed", init=[y0],
                                  backend="dask").labels[0]
    np.testing.assert_array_equal(labels, ref.labels_)


def test_an_in_memory_graph_is_sent_to_the_workers_once(graph, thread_client):
    """backend="dask" on an in-memory matrix (falcon_batch's path) put it in
    the task graph twice, once for the validation and once to persist it:
    "Sending large graph of size 19.53 MiB" twice for a dense graph of 1,600
    nodes.  It is sent once (persisted, not scattered: a lost worker's
    blocks are recomputed from the graph)."""
    W, _ = graph
    D = W.toarray()
    ref = _est(backend="numba").fit(D)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est = _est(backend="dask").fit(D)
    assert len([w for w in record if "large graph" in str(w.message)]) == 1
    assert est.backend_ == "dask"
    np.testing.assert_array_equal(est.labels_, ref.labels_)


@pytest.mark.parametrize("backend", ["numba", "dask"])
def test_falcon_batch_gathers_graphs_held_as_dask_arrays_of_sparse_blocks(backend):
    """falcon_batch took a Dask array of dense blocks (NumPy gathers it) but
    refused one of CSR blocks with scikit-learn's "graphs[0]: Expected 2D
    array, got scalar array instead", as predict did; it is gathered too."""
    from sklearn_falcon import falcon_batch

    W, _ = planted(300, 3, seed=2)
    ref = falcon_batch([W], 3, affinity="precomputed", backend="numba",
                       random_state=0)
    for G in (shards(W, 2), shards(W, 2, dense=True)):
        res = falcon_batch([G, W], 3, affinity="precomputed", backend=backend,
                           random_state=0)
        np.testing.assert_array_equal(res.labels[0], ref.labels[0])
        assert res.ncut[0] == pytest.approx(ref.ncut[0], rel=1e-12)


def test_falcon_batch_takes_a_3d_dask_array():
    """A ``(B, n, p)`` Dask array of features was refused with "graphs must
    be ... or a 3-D array; got Array", where a NumPy one, a tensor and a
    list of Dask arrays are taken; it is gathered as they are."""
    from sklearn_falcon import falcon_batch

    rng = np.random.default_rng(0)
    centres = np.array([[5.0, 0.0], [0.0, 5.0]])
    G = np.stack([centres[rng.integers(2, size=40)] + rng.normal(size=(40, 2))
                  for _ in range(3)])
    kw = dict(affinity="rbf", gamma=0.5, init="kmeans", random_state=0,
              backend="numba")
    ref = falcon_batch(G, 2, **kw)
    res = falcon_batch(da.from_array(G, chunks=(2, 20, 2)), 2, **kw)
    assert len(res.labels) == 3
    for a, b in zip(res.labels, ref.labels):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_integer_coo_blocks_are_summed_without_wrapping(dtype):
    # the blocks of a sharded graph as COO matrices of small integer weights
    # with repeated edges: as_csr converted them to CSR in their dtype, so
    # 300 parallel edges weighed 44 (int8: -16, refused as negative), where
    # the in-memory fit of the same matrix sums them in float64
    from sklearn_falcon._backends._dask._blocks import as_csr

    rows, cols, G, W = parallel_edges(dtype)
    np.testing.assert_array_equal(as_csr(G).toarray(), W)

    def block(r0):
        m = (rows >= r0) & (rows < r0 + 2)
        return sp.coo_matrix((np.ones(m.sum(), dtype), (rows[m] - r0, cols[m])),
                             shape=(2, 4))

    meta = sp.coo_matrix((0, 0), dtype=dtype)
    X = da.concatenate([da.from_delayed(dask.delayed(block)(r0), shape=(2, 4),
                                        dtype=dtype, meta=meta) for r0 in (0, 2)])
    est = FalconNCut(2, affinity="precomputed", random_state=0).fit(X)
    ref = FalconNCut(2, affinity="precomputed", random_state=0).fit(W)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert est.ncut_ == pytest.approx(ref.ncut_, rel=1e-12)
