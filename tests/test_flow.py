"""The pairwise max-flow refinement (``_inits/_flow.py`` and its kernels in
``_backends/_numba/_flow.py``) and its use in the multilevel start."""

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp
from shared import random_graph as _graph
from shared import spy_on

from sklearn_falcon._backends._numba import (flow_corridor, flow_network,
                                             min_cut_sides, move_nodes_csr)
from sklearn_falcon._inits import _flow, _moves, _multilevel
from sklearn_falcon._solver import SolverOptions
from sklearn_falcon._stats import cluster_statistics, objective_of


def _f(W, y, K):
    return objective_of(*cluster_statistics(W, y, K))


def _grid(rows, cols, weight=None, seed=0):
    """A 4-neighbour grid; ``weight(r, c, r2, c2)`` gives an edge's weight
    (uniform in [0.1, 1] when None)."""
    rng = np.random.default_rng(seed)
    idx = np.arange(rows * cols).reshape(rows, cols)
    a = np.r_[idx[:, :-1].ravel(), idx[:-1, :].ravel()]
    b = np.r_[idx[:, 1:].ravel(), idx[1:, :].ravel()]
    if weight is None:
        w = rng.uniform(0.1, 1.0, size=a.size)
    else:
        w = np.array([weight(i // cols, i % cols, j // cols, j % cols)
                      for i, j in zip(a, b)], dtype=np.float64)
    U = sp.coo_matrix((w, (a, b)), shape=(rows * cols,) * 2)
    W = (U + U.T).tocsr()
    W.sort_indices()
    return W


def _degrees(W):
    return np.asarray(W.sum(1), dtype=np.float64).ravel()


def test_corridor_takes_the_nearest_nodes_within_the_volume():
    # a 4 x 10 grid cut between columns 4 and 5: the corridor of a holds
    # whole columns from the boundary outwards while their volume allows
    W = _grid(4, 10, weight=lambda *e: 1.0)
    d = _degrees(W)
    y = (np.arange(40) % 10 >= 5).astype(np.int64)
    loc = np.full(40, -1, dtype=np.int64)
    col_vol = d.reshape(4, 10).sum(0)  # 14 per inner column
    nodes, n_a = flow_corridor(W.indptr, W.indices, d, y, 0, 1,
                               col_vol[3:5].sum(), col_vol[5], loc)
    assert sorted(np.arange(40)[nodes[:n_a]] % 10) == [3] * 4 + [4] * 4
    assert sorted(nodes[n_a:] % 10) == [5] * 4
    assert (loc[nodes] == np.arange(nodes.size)).all()
    loc[nodes] = -1
    assert (loc == -1).all()
    # no room: no nodes, and loc left as it was
    nodes, n_a = flow_corridor(W.indptr, W.indices, d, y, 0, 1, 0.0, 0.0, loc)
    assert nodes.size == 0 and n_a == 0 and (loc == -1).all()


def test_network_joins_the_rest_of_each_cluster_to_its_terminal():
    # path 0-1-2-3-4 plus node 5 (a third cluster) tied to 2, and a self-loop
    W = sp.lil_matrix((6, 6))
    for i, j, w in [(0, 1, 1.0), (1, 2, 2.0), (2, 3, 3.0), (3, 4, 4.0), (2, 5, 5.0)]:
        W[i, j] = W[j, i] = w
    W[2, 2] = 7.0
    W = W.tocsr()
    W.sort_indices()
    y = np.array([0, 0, 0, 1, 1, 2])
    loc = np.full(6, -1, dtype=np.int64)
    nodes = np.array([1, 2, 3])  # the corridor: 1, 2 of a, 3 of b
    loc[nodes] = np.arange(3)
    r, c, w = flow_network(W.indptr, W.indices, W.data, y, nodes, loc, 0, 1)
    edges = sorted(zip(r.tolist(), c.tolist(), w.tolist()))
    s, t = 3, 4
    assert edges == sorted([(s, 0, 1.0), (0, 1, 2.0), (1, 0, 2.0), (1, 2, 3.0),
                            (2, 1, 3.0), (2, t, 4.0)])


def _scipy_cut_sides(rows, cols, cap, n, s, t):
    """The two extreme minimum cuts by scipy's maximum flow (the reference;
    the flows used it until min_cut_sides replaced it)."""
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    G = sp.csr_matrix((cap.astype(np.int32), (rows, cols)), shape=(n, n))
    G.sum_duplicates()
    F = maximum_flow(G, s, t, method="dinic").flow
    R = (G - F).tocsr()
    R.data[R.data < 0] = 0
    R.eliminate_zeros()
    small = np.zeros(n, dtype=bool)
    small[breadth_first_order(R, s, directed=True,
                              return_predecessors=False)] = True
    to_t = np.zeros(n, dtype=bool)
    to_t[breadth_first_order(R.T.tocsr(), t, directed=True,
                             return_predecessors=False)] = True
    return small, ~to_t


@pytest.mark.parametrize("seed", range(40))
def test_min_cut_sides_match_scipys_maximum_flow(seed):
    # random networks with parallel edges, ties (small integer capacities)
    # and nodes cut off from s or t: both extreme cuts are unique, so they
    # agree with scipy's whatever paths each finds
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 60))
    E = int(rng.integers(1, 400))
    rows, cols = rng.integers(0, m + 2, E), rng.integers(0, m + 2, E)
    keep = (rows != cols) & (cols != m) & (rows != m + 1)
    rows, cols = rows[keep].astype(np.int64), cols[keep].astype(np.int64)
    cap = rng.integers(1, 4 if seed % 2 else 1000, rows.size).astype(np.int64)
    small, large = min_cut_sides(rows, cols, cap, m + 2, m, m + 1)
    ref_small, ref_large = _scipy_cut_sides(rows, cols, cap, m + 2, m, m + 1)
    np.testing.assert_array_equal(small, ref_small)
    np.testing.assert_array_equal(large, ref_large)
    assert small[m] and large[m] and not small[m + 1] and not large[m + 1]
    assert not (small & ~large).any()  # the smallest side within the largest
    # both are minimum cuts: the capacity leaving each side is the same
    def cut(side):
        return cap[side[rows] & ~side[cols]].sum()
    assert cut(small) == cut(large)


@pytest.mark.parametrize("seed", range(6))
def test_min_cut_sides_on_grid_networks(seed):
    # the corridors of pixel graphs are grids: long augmenting paths, along
    # which the two search trees lose whole branches (orphans) and regrow
    # them; zero capacities are arcs that are never residual
    rng = np.random.default_rng(seed)
    h, w = 20 + 10 * seed, 30
    idx = np.arange(h * w).reshape(h, w)
    a = np.r_[idx[:, :-1].ravel(), idx[:-1, :].ravel()]
    b = np.r_[idx[:, 1:].ravel(), idx[1:, :].ravel()]
    s, t = h * w, h * w + 1
    rows = np.r_[a, b, np.full(h, s), idx[:, -1]].astype(np.int64)
    cols = np.r_[b, a, idx[:, 0], np.full(h, t)].astype(np.int64)
    cap = rng.integers(seed % 2, 1 << (3 + 5 * (seed % 3)), rows.size)
    cap = cap.astype(np.int64)
    small, large = min_cut_sides(rows, cols, cap, h * w + 2, s, t)
    ref_small, ref_large = _scipy_cut_sides(rows, cols, cap, h * w + 2, s, t)
    np.testing.assert_array_equal(small, ref_small)
    np.testing.assert_array_equal(large, ref_large)


@pytest.mark.parametrize("seed", range(4))
def test_moves_keep_exact_statistics(seed):
    rng = np.random.default_rng(seed)
    K = 4
    _, W = _graph(60, seed=seed, density=0.15, diagonal=rng.random(60))
    d = _degrees(W)
    y = rng.integers(K, size=60).astype(np.int64)
    vol, assoc = (np.array(v) for v in cluster_statistics(W, y, K, d))
    nodes = rng.choice(60, size=25, replace=False).astype(np.int64)
    new = rng.integers(K, size=25).astype(np.int64)
    changed = int((y[nodes] != new).sum())
    moved = move_nodes_csr(W.indptr, W.indices, W.data, d, y, nodes, new, vol, assoc)
    assert (y[nodes] == new).all() and moved == changed
    vol2, assoc2 = cluster_statistics(W, y, K, d)
    np.testing.assert_allclose(vol, vol2, rtol=1e-12)
    np.testing.assert_allclose(assoc, assoc2, rtol=1e-10, atol=1e-12)


def test_flow_finds_a_light_cut_beyond_the_reach_of_local_moves():
    # a 12 x 24 grid of unit weights with a light column of edges (0.05)
    # between columns 13 and 14: the best 2-way cut; start cut at column 7
    light = lambda r, c, r2, c2: 0.05 if {c, c2} == {13, 14} else 1.0  # noqa: E731
    W = _grid(12, 24, weight=light)
    d = _degrees(W)
    y0 = (np.arange(12 * 24) % 24 >= 7).astype(np.int64)
    y0, f0 = _moves.refine(W, d, y0, 2, SolverOptions())
    keep = y0.copy()
    y, f = _flow.flow_refine(W, d, y0, 2)
    np.testing.assert_array_equal(y0, keep)  # the input is left alone
    assert f > f0 and f == pytest.approx(_f(W, y, 2), rel=1e-12)
    best = (np.arange(12 * 24) % 24 >= 14).astype(np.int64)
    assert (y == best).all() or (y == 1 - best).all()


@pytest.mark.parametrize("seed", range(4))
def test_flow_never_lowers_f_nor_empties_a_cluster(seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 6))
    W = _grid(15, 15, seed=seed)
    d = _degrees(W)
    y0 = rng.integers(K, size=225).astype(np.int64)
    y0[:K] = np.arange(K)
    f0 = _f(W, y0, K)
    y, f = _flow.flow_refine(W, d, y0, K, fractions=(1.0, 0.5, 0.1),
                             max_rounds=3)
    assert f >= f0 and f == pytest.approx(_f(W, y, K), rel=1e-12)
    assert np.bincount(y, minlength=K).min() > 0


@pytest.mark.parametrize("seed", range(3))
def test_flow_memo_reuses_the_cuts_of_networks_met_again(monkeypatch, seed):
    # the multilevel start calls flow_refine again after FM searches; a pair
    # whose clusters did not change between the calls has the same network,
    # whose cuts the memo keeps: the same labels, fewer minimum cuts
    rng = np.random.default_rng(seed)
    K = 4
    W = _grid(16, 16, seed=seed)
    d = _degrees(W)
    y0 = rng.integers(K, size=256).astype(np.int64)
    y0[:K] = np.arange(K)
    solved = []

    def counted(rows, cols, cap, n, s, t):
        solved.append(n)
        return min_cut_sides(rows, cols, cap, n, s, t)

    monkeypatch.setattr(_flow, "min_cut_sides", counted)
    y1, f1 = _flow.flow_refine(W, d, y0, K)
    fresh = len(solved)
    y2, f2 = _flow.flow_refine(W, d, y1, K)
    again = len(solved) - fresh
    memo = {}
    del solved[:]
    z1, g1 = _flow.flow_refine(W, d, y0, K, memo=memo)
    assert len(solved) == fresh == len(memo)  # every network is new
    z, g = _flow.flow_refine(W, d, y0, K, memo=memo)  # all met again
    assert len(solved) == fresh and (g, z.tolist()) == (g1, z1.tolist())
    z2, g2 = _flow.flow_refine(W, d, z1, K, memo=memo)
    np.testing.assert_array_equal(z1, y1)
    np.testing.assert_array_equal(z2, y2)
    assert (g1, g2) == (f1, f2)
    # each solve adds one entry; the networks met again are not solved
    assert len(solved) - fresh == len(memo) - fresh <= again


def test_flow_leaves_a_partition_it_cannot_improve():
    W = _grid(10, 10, weight=lambda *e: 1.0)
    d = _degrees(W)
    y0 = (np.arange(100) % 10 >= 5).astype(np.int64)  # the best cut
    y, f = _flow.flow_refine(W, d, y0, 2)
    np.testing.assert_array_equal(y, y0)
    assert f == pytest.approx(_f(W, y0, 2), rel=1e-12)


def test_multilevel_flows_lower_the_ncut_of_a_mesh():
    # the multilevel start with the flows against the same without, on a
    # weighted grid of the benchmark's kind (grid2d-60x60-w-K4)
    from benchmarks.families import grid_graph

    W = sp.csr_matrix(grid_graph((60, 60), True, 0))
    d = _degrees(W)
    off = dataclasses.replace(_multilevel.SPARSE, flow_rounds=0)
    _, f0 = _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0),
                                          effort=off)
    y1, f1 = _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0))
    assert f1 > f0 + 2e-4  # 5e-4 here: NCut 0.0521 -> 0.0516
    assert f1 == pytest.approx(_f(W, y1, 4))
    assert _multilevel.DENSE.flow_rounds == 0  # dense (token) graphs: no flows


@pytest.mark.parametrize("dtype, index", [(np.float32, np.int32), (np.float64, np.int64)])
def test_flow_takes_other_weight_and_index_types(dtype, index):
    W = _grid(15, 15, seed=2)
    d = _degrees(W)
    y0 = (np.arange(225) % 15 >= 4).astype(np.int64)
    y, f = _flow.flow_refine(W, d, y0, 2)
    W2 = W.astype(dtype)
    W2.indptr, W2.indices = W2.indptr.astype(index), W2.indices.astype(index)
    y2, f2 = _flow.flow_refine(W2, d, y0, 2)
    assert f > _f(W, y0, 2)
    if dtype is np.float64:  # the same weights: the same cuts
        np.testing.assert_array_equal(y2, y)
    assert f2 == pytest.approx(f, rel=1e-5)


@pytest.mark.parametrize("flow_large, min_gain, expect", [
    (False, 0.0, None),        # the default: no flows on a large graph
    (True, 0.0, "large"),      # light flows where the FM gate is open
    (True, 1.0, None),         # the FM gate has closed: no flows
])
def test_flows_on_large_graphs(monkeypatch, flow_large, min_gain, expect):
    W = _grid(40, 40, seed=2)
    d = _degrees(W)
    calls = spy_on(monkeypatch, _multilevel, "flow_refine", lambda a, kw: kw)
    eff = dataclasses.replace(_multilevel.SPARSE, large_entries=2000,
                              fm_min_gain=min_gain, fm_gate_levels=1,
                              flow_large=flow_large)
    y, f = _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0),
                                         effort=eff)
    assert f == pytest.approx(_f(W, y, 4))
    if expect is None:
        assert calls == []
    else:  # with the large graphs' settings
        assert calls and all(c["fractions"] == eff.flow_fractions_large
                             and c["max_work"] == eff.flow_work_large for c in calls)
    # a small graph (the default large_entries): the small-graph settings
    calls.clear()
    _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0))
    assert calls and all(c["fractions"] == _multilevel.SPARSE.flow_fractions
                         for c in calls)
    assert not _multilevel.SPARSE.flow_large


def test_flows_and_fm_alternate_while_they_gain(monkeypatch):
    # FM searches follow flows that raised f, then flows again, at most
    # flow_fm_rounds times; no FM after flows that found nothing
    W = _grid(30, 30, seed=4)
    d = _degrees(W)
    y0 = (np.arange(900) % 30 >= 9).astype(np.int64) + 2 * (np.arange(900) >= 450)
    y0, f0 = _moves.refine(W, d, y0, 4, SolverOptions())
    log = []
    real_fm, real_flow = _multilevel._fm, _multilevel.flow_refine

    def fm(*args, **kwargs):
        y, f = real_fm(*args, **kwargs)
        log.append(("fm", f > args[3]))
        return y, f

    def flow(*args, **kwargs):
        y, f = real_flow(*args, **kwargs)
        log.append(("flow", f > _f(W, args[2], 4)))
        return y, f

    monkeypatch.setattr(_multilevel, "_fm", fm)
    monkeypatch.setattr(_multilevel, "flow_refine", flow)
    eff = _multilevel.SPARSE
    y, f = _multilevel._flows(W, d, y0, f0, 4, np.random.default_rng(0), eff, False,
                              _multilevel._FMGate())
    assert f > f0 and f == pytest.approx(_f(W, y, 4))
    assert log[0] == ("flow", True) and log[1][0] == "fm"
    assert len(log) <= 1 + 2 * eff.flow_fm_rounds
    for (kind, gained), nxt in zip(log, log[1:]):  # each step follows a gain
        assert gained and kind != nxt[0]
    # flows that find nothing: no FM
    log.clear()
    _multilevel._flows(W, d, y, f, 4, np.random.default_rng(0), eff, False,
                       _multilevel._FMGate())
    assert log == [("flow", False)]
