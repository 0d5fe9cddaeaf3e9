"""The initializations: the registry, coarsening and the choice of starts."""

import gc
import warnings
import weakref

import numpy as np
import pytest
import scipy.sparse as sp
from shared import dense_token_graph as _dense_token_graph
from shared import random_graph as _graph
from threadpoolctl import threadpool_info

from benchmarks.families import grid_graph

from sklearn_falcon import FalconNCut, falcon_batch
from sklearn_falcon._affinity import clean_csr
from shared import planted, spy_on
from sklearn.metrics import adjusted_rand_score

from sklearn_falcon._inits import INITS, InitContext, _coarsen, _coarsest, _moves
from sklearn_falcon._inits import _contract
from sklearn_falcon._inits import _hierarchy, _multilevel, _spectral
from sklearn_falcon._inits import _coarsen as nk
from sklearn_falcon._solver import SolverOptions
from sklearn_falcon.metrics import normalized_association


def _onehot(labels, K):
    X = np.zeros((labels.size, K))
    X[np.arange(labels.size), labels] = 1
    return X


def _f(W, y, K):
    return normalized_association(W, y)


def test_coarsen_dense_matches_sparse_and_preserves_f():
    W = _dense_token_graph(200)
    d = W.sum(1)
    Wc, dc, m = _coarsen.coarsen(W, d, np.random.default_rng(0))
    Sc, sc, ms = _coarsen.coarsen(sp.csr_matrix(W), d, np.random.default_rng(0))
    np.testing.assert_array_equal(m, ms)
    np.testing.assert_allclose(Wc, Sc.toarray(), rtol=1e-12)
    np.testing.assert_allclose(dc, Wc.sum(1))
    assert Wc.shape[0] <= 0.6 * 200  # a matching about halves the graph
    yc = np.arange(Wc.shape[0]) % 3
    assert normalized_association(Wc, yc) == pytest.approx(
        normalized_association(W, yc[m]), rel=1e-12
    )


def _match_reference(W, d, order, part, alpha):
    """The matching of ``match_csr``, written plainly."""
    n = W.shape[0]
    R = W / d[None, :]
    ok = (part[:, None] == part[None, :]) & (W > 0) & ~np.eye(n, dtype=bool)
    top = np.where(ok, R, 0.0).max(1)
    elig = ok & (R >= alpha * top[:, None]) & (R.T >= alpha * top[None, :])
    match = -np.ones(n, dtype=int)
    heavy = -np.ones(n, dtype=int)
    for u in order:
        if match[u] >= 0:
            continue
        for j in np.flatnonzero(elig[u]):
            if R[u, j] > 0 and R[u, j] == top[u]:
                heavy[u] = j
        free = [j for j in np.flatnonzero(elig[u]) if match[j] < 0]
        if free:
            j = max(free, key=lambda j: (R[u, j], -j))
            match[u], match[j] = j, u
    pending = {}
    for u in order:
        if match[u] >= 0 or heavy[u] < 0:
            continue
        v = pending.pop(heavy[u], None)
        if v is None:
            pending[heavy[u]] = u
        else:
            match[u], match[v] = v, u
    return match


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.6])
@pytest.mark.parametrize("n_parts", [1, 2])  # one part: the check is skipped
def test_matching_matches_a_plain_reference(alpha, n_parts):
    W, S = _graph(n=60, seed=4, density=0.15)
    d = W.sum(1)
    rng = np.random.default_rng(2)
    order = rng.permutation(60).astype(np.int64)
    part = rng.integers(n_parts, size=60).astype(np.int64) + 3
    match = _match_reference(W, d, order, part, alpha)
    for n_c, mapping in (nk.match_csr(S.indptr, S.indices, S.data, d, order, part,
                                      alpha),
                         nk.match_dense(W, d, order, part, alpha)):
        assert n_c == mapping.max() + 1
        for u in range(60):
            partners = np.flatnonzero(mapping == mapping[u])
            assert len(partners) <= 2
            assert (match[u] < 0 and len(partners) == 1) or set(partners) == {
                u, match[u]}
        # coarse nodes numbered in the order of their smallest node
        firsts = [np.flatnonzero(mapping == c)[0] for c in range(n_c)]
        assert firsts == sorted(firsts)
        assert np.all(part[mapping.argsort()] >= 0)
        for c in range(n_c):
            assert len(set(part[mapping == c])) == 1


def test_matching_keeps_a_weakly_attached_pair_whole():
    # a pair of nodes joined strongly to each other and by 1e-9 to a clique:
    # neither end of a weak edge is contracted across it, whatever the order
    W = np.ones((8, 8))
    np.fill_diagonal(W, 0)
    W = np.pad(W, ((0, 2), (0, 2)))
    W[8, 9] = W[9, 8] = 1.0
    W[8, :8] = W[:8, 8] = 1e-9
    for seed in range(20):
        _, _, m = _coarsen.coarsen(sp.csr_matrix(W), W.sum(1),
                                   np.random.default_rng(seed))
        assert m[8] == m[9] and not np.isin(m[:8], m[8]).any()


def test_hierarchy_preserves_f_and_respects_a_partition():
    W, y = planted(800, 4, seed=2)
    d = np.asarray(W.sum(1)).ravel()
    H = _hierarchy.Hierarchy(W, d, 4, np.random.default_rng(0), part=y)
    assert H.sizes[-1] <= max(_hierarchy.COARSE_PER_CLUSTER * 4, 0.9 * H.sizes[-2])
    for lv in range(1, len(H.sizes)):
        # every level represents the partition exactly
        np.testing.assert_array_equal(H.project(H.parts[lv], lv), y)
        Wl, dl = H.level(lv)
        assert _f(Wl, H.parts[lv], 4) == pytest.approx(_f(W, y, 4), rel=1e-10)


def test_hierarchy_over_its_budget_contracts_dropped_levels_again():
    # a random graph keeps most entries per level: with a budget of half of
    # W's entries every other level is dropped, and contracted again it is
    # the same graph, bit for bit; the multilevel labels are the same
    W, _ = planted(3000, 6, seed=4)
    d = np.asarray(W.sum(1)).ravel()
    full = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), budget=np.inf)
    lean = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), budget=0.5)
    def n_dropped(H):
        return sum(W is None for W, _ in H._graphs)

    assert n_dropped(full) == 0 and n_dropped(lean) >= 2
    assert lean.sizes == full.sizes
    for lv in range(len(full.sizes)):
        for a, b in zip(full.level(lv), lean.level(lv)):
            if sp.issparse(a):
                for name in ("indptr", "indices", "data"):
                    np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
            else:
                np.testing.assert_array_equal(a, b)
    labels = []
    for budget in (np.inf, 0.5):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_hierarchy, "HIERARCHY_BUDGET", budget)
            labels.append(_multilevel.multilevel_labels(
                W, d, 6, np.random.default_rng(1))[0])
    np.testing.assert_array_equal(labels[0], labels[1])


def _same_csr(a, b):
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_bucket_contraction_gives_the_same_arrays(monkeypatch):
    # rows read in order, then each coarse row's bucket merged: the same
    # first-appearance order and the same sums in the same order, bit for
    # bit (random weights, so that the order of the sums shows)
    W, _ = planted(2000, 5, seed=3)
    d = np.asarray(W.sum(1)).ravel()
    rng = np.random.default_rng(0)
    calls = spy_on(monkeypatch, _contract, "_coarsen_csr_buckets_into")
    for n_coarse in (1, 7, 300, 1999):
        m = rng.integers(0, n_coarse, W.shape[0])
        m = np.unique(m, return_inverse=True)[1].astype(np.int64)
        nc = int(m.max()) + 1
        plain = _contract.contract(W, d, m, nc)
        bucket = _contract.contract(W, d, m, nc, buckets=True)
        _same_csr(plain[0], bucket[0])
        np.testing.assert_array_equal(plain[1], bucket[1])
    assert len(calls) == 4  # the flag reaches the bucket kernel


@pytest.mark.parametrize("n_coarse", [1, 7, 300, 1999])
@pytest.mark.parametrize("buckets", [False, True])
def test_parallel_contractions_give_the_same_arrays(n_coarse, buckets):
    # runs of coarse rows written from where they would start if nothing
    # merged, each run with its own marker array, then moved down (and, with
    # buckets, runs of rows scattering into their own parts of each
    # bucket): the serial kernel's arrays, bit for bit, for any number of
    # runs (empty rows, at the start, in the middle and at the end, and
    # more runs than rows included)
    W, _ = planted(2000, 5, seed=3)
    W = sp.csr_matrix(W)
    W.data = np.random.default_rng(1).random(W.nnz)  # the order of sums shows
    keep = np.ones(2000)
    keep[np.r_[0:5, 900:950, 1990:2000]] = 0.0
    W = clean_csr(sp.diags(keep) @ W @ sp.diags(keep))
    assert (np.diff(W.indptr) == 0).sum() == 65
    m = np.random.default_rng(0).integers(0, n_coarse, W.shape[0])
    m = np.unique(m, return_inverse=True)[1].astype(np.int64)
    nc = int(m.max()) + 1
    args = (W.indptr, W.indices, W.data, m, nc)

    def run(kernel, *extra):
        out_idx = np.empty(W.nnz, W.indices.dtype)
        acc = np.empty(W.nnz)
        ptr = kernel(*args, out_idx, acc, *extra)
        return ptr, out_idx[:ptr[-1]], acc[:ptr[-1]]

    serial, par = ((_contract._coarsen_csr_buckets_into,
                    _contract._coarsen_csr_buckets_par) if buckets else
                   (_contract._coarsen_csr_into, _contract._coarsen_csr_par))
    ref = run(serial)
    for chunks in (1, 2, 3, 4, 5000):
        for a, b in zip(ref, run(par, chunks)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("buckets", [False, True])
def test_large_contractions_run_on_numbas_threads(monkeypatch, buckets):
    # from PARALLEL_MIN entries (here every graph) on Numba's threads, at
    # most CONTRACT_THREADS_MAX; one thread runs the serial kernel
    numba = pytest.importorskip("numba")
    W, _ = planted(600, 3, seed=2)
    d = np.asarray(W.sum(1)).ravel()
    m = (np.arange(600) // 4).astype(np.int64)
    ref = _contract.contract(W, d, m, 150)
    monkeypatch.setattr(_contract, "PARALLEL_MIN", 0)
    name = "_coarsen_csr_buckets" if buckets else "_coarsen_csr"
    par = spy_on(monkeypatch, _contract, name + "_par",
                 lambda args, kwargs: args[-1])
    ser = spy_on(monkeypatch, _contract, name + "_into")
    previous = numba.get_num_threads()
    try:
        for threads in (1, 2, 8):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            _same_csr(ref[0], _contract.contract(W, d, m, 150, buckets=buckets)[0])
    finally:
        numba.set_num_threads(previous)
    assert len(ser) == 1
    expected = [min(t, numba.config.NUMBA_NUM_THREADS, _contract.CONTRACT_THREADS_MAX)
                for t in (2, 8)]
    assert par == [t for t in expected if t > 1]


def test_random_graph_levels_come_from_the_input_and_hold_one_at_a_time(
        monkeypatch):
    # on a large random graph (every graph counts as large here) a level
    # coarsened from a level of over half the input's entries is contracted
    # from the input through the composed maps: the same graph as from its
    # finer neighbour (entries in another order), and the level it was drawn
    # from is let go first; no budget changes a level or the labels
    W, _ = planted(3000, 6, seed=4)
    d = np.asarray(W.sum(1)).ravel()
    kw = dict(large_entries=0, input_source_entries=0, shrink=16.0)
    full = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), budget=np.inf,
                                **kw)
    assert full.random and 0 in full.sources[2:]
    for lv in range(2, len(full.sizes)):
        src = full.sources[lv]
        assert src in (0, lv - 1)
        if src == 0:
            assert full.entries[lv - 1] > _hierarchy.INPUT_SOURCE * full.entries[0]
            # the same graph as the contraction of its finer neighbour
            step, _ = _contract.contract(*full.level(lv - 1), full.maps[lv - 1],
                                        full.sizes[lv])
            assert abs(step - full.level(lv)[0]).max() < 1e-12
    lean = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), budget=1.5, **kw)
    assert sum(g is None for g, _ in lean._graphs) >= 2
    assert lean.sizes == full.sizes and lean.sources == full.sources
    for lv in range(len(full.sizes)):
        _same_csr(full.level(lv)[0], lean.level(lv)[0])
    # while a level is contracted from the input, no other coarse level of
    # over half the input's entries is alive (building, then going down)
    refs, alive = [], []
    real = _hierarchy.contract

    def spy(Wf, df, mapping, n_coarse, buckets=False):
        gc.collect()
        if Wf is W:
            alive.append([r for r in refs if r() is not None
                          and r().nnz > _hierarchy.INPUT_SOURCE * W.nnz])
        out = real(Wf, df, mapping, n_coarse, buckets)
        refs.append(weakref.ref(out[0]))
        return out

    monkeypatch.setattr(_hierarchy, "contract", spy)
    H = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), **kw)
    top = len(H.maps)
    y = np.arange(H.sizes[top]) % 6
    labels, f = _multilevel._uncoarsen(H, y, top, 6, np.random.default_rng(0),
                                       SolverOptions(), release=True)
    assert len(alive) > 3 and not any(alive)
    assert f == pytest.approx(_f(W, labels, 6), rel=1e-10)
    labels = []
    for budget in (np.inf, 0.5):
        monkeypatch.setattr(_hierarchy, "HIERARCHY_BUDGET", budget)
        labels.append(_multilevel.multilevel_labels(
            W, d, 6, np.random.default_rng(1),
            effort=_multilevel.Effort(large_entries=0, input_source_entries=0))[0])
    np.testing.assert_array_equal(labels[0], labels[1])


def test_uncoarsen_lets_go_of_coarser_levels_before_contracting_again(monkeypatch):
    # the last pass down releases the levels it is done with; a dropped
    # level contracted again must not find a coarser graph still held (on a
    # random graph each level holds about as many entries as the input)
    W, _ = planted(3000, 6, seed=4)
    d = np.asarray(W.sum(1)).ravel()
    monkeypatch.setattr(_hierarchy, "HIERARCHY_BUDGET", 0.5)
    H = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0))
    top = len(H.maps)
    refs = {lv: weakref.ref(H._graphs[lv][0]) for lv in range(1, top + 1)
            if H._graphs[lv][0] is not None}
    held = []
    real = _hierarchy.contract

    def spy(Wf, df, mapping, n_coarse, buckets=False):
        gc.collect()
        out = H.sizes.index(n_coarse)  # the level being contracted again
        held.append([lv for lv, r in refs.items() if lv > out and r() is not None])
        return real(Wf, df, mapping, n_coarse, buckets)

    monkeypatch.setattr(_hierarchy, "contract", spy)
    y = np.arange(H.sizes[top]) % 6
    labels, f = _multilevel._uncoarsen(H, y, top, 6, np.random.default_rng(0),
                                       SolverOptions(), release=True)
    assert held and not any(held)
    assert f == pytest.approx(_f(W, labels, 6), rel=1e-10)


def _lp_reference(W, d, order, part, max_vol, rounds):
    """Plain-Python size-constrained label propagation (``cluster_csr``)."""
    n = W.shape[0]
    cl = list(range(n))
    vol = list(d)
    for _ in range(rounds):
        moved = 0
        for u in order:
            rating = {}
            for q in range(W.indptr[u], W.indptr[u + 1]):
                v = W.indices[q]
                if v != u and part[v] == part[u]:
                    rating[cl[v]] = rating.get(cl[v], 0.0) + W.data[q]
            best, best_w = cl[u], rating.get(cl[u], 0.0)
            for c, w in rating.items():  # first appearance wins a tie
                if c != cl[u] and w > best_w and vol[c] + d[u] <= max_vol:
                    best, best_w = c, w
            if best != cl[u]:
                vol[cl[u]] -= d[u]
                vol[best] += d[u]
                cl[u] = best
                moved += 1
        if not moved:
            break
    ids = {}
    return len(set(cl)), np.array([ids.setdefault(c, len(ids)) for c in cl])


@pytest.mark.parametrize("max_vol", [3.0, 8.0, np.inf])
@pytest.mark.parametrize("n_parts", [1, 2])  # one part: the check is skipped
def test_label_propagation_matches_a_plain_reference(max_vol, n_parts):
    _, W = _graph(80, seed=3, density=0.1)
    d = np.asarray(W.sum(1)).ravel()
    rng = np.random.default_rng(0)
    part = rng.integers(0, n_parts, 80) + 3
    for rounds in (1, 3):
        order = rng.permutation(80)
        nc, m = _coarsen.cluster_csr(W.indptr, W.indices, W.data, d, order, part,
                                     max_vol, rounds)
        ref_nc, ref = _lp_reference(W, d, order, part, max_vol, rounds)
        assert nc == ref_nc
        np.testing.assert_array_equal(m, ref)
        vol = np.bincount(m, weights=d)
        big = np.bincount(m) > 1
        assert (vol[big] <= max_vol + 1e-12).all()  # the cap holds
        for c in range(nc):  # one part per cluster
            assert np.unique(part[m == c]).size == 1


def test_hierarchy_clusters_random_graphs_and_keeps_matchings_on_meshes():
    # every level counts as large here (large_entries=0): the SBM, whose
    # first matching keeps over 90 % of its entries, is then clustered by
    # label propagation, and needs fewer levels; the grid keeps matchings
    # (the same hierarchy as without label propagation)
    W, y = planted(3000, 6, seed=4)
    d = np.asarray(W.sum(1)).ravel()
    kw = dict(large_entries=0, budget=np.inf)
    lp = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), shrink=16.0, **kw)
    mt = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), shrink=0.0, **kw)
    assert len(lp.sizes) < len(mt.sizes)
    assert lp.sizes[-1] >= 6
    assert lp.sizes[1] == mt.sizes[1]  # the first level is a matching
    assert lp.sizes[2] < mt.sizes[2] / 2
    # the levels within a partition (a V-cycle's) represent it exactly
    H = _hierarchy.Hierarchy(W, d, 6, np.random.default_rng(0), part=y,
                              shrink=16.0, **kw)
    assert len(H.sizes) < len(mt.sizes)
    for lv in range(1, len(H.sizes)):
        np.testing.assert_array_equal(H.project(H.parts[lv], lv), y)
        assert _f(H.level(lv)[0], H.parts[lv], 6) == pytest.approx(_f(W, y, 6),
                                                                   rel=1e-10)
    G = grid_graph((60, 60))  # a mesh: a matching keeps about half its entries
    dg = np.asarray(G.sum(1)).ravel()
    a = _hierarchy.Hierarchy(G, dg, 4, np.random.default_rng(0), shrink=16.0, **kw)
    b = _hierarchy.Hierarchy(G, dg, 4, np.random.default_rng(0), shrink=0.0, **kw)
    assert a.sizes == b.sizes


def test_multilevel_with_label_propagation_recovers_a_planted_partition():
    # (the planted labels are not quite optimal: both starts end above them)
    W, y = planted(3000, 6, seed=4)
    d = np.asarray(W.sum(1)).ravel()
    for shrink in (0.0, 16.0):
        eff = _multilevel.Effort(large_entries=0, lp_shrink=shrink)
        labels, f = _multilevel.multilevel_labels(W, d, 6, np.random.default_rng(1),
                                                  effort=eff)
        assert adjusted_rand_score(y, labels) > 0.99
        assert f >= _f(W, y, 6)
        assert f == pytest.approx(_f(W, labels, 6), rel=1e-10)


def test_beam_stops_at_levels_of_many_entries(monkeypatch):
    # the kept coarse candidates go up together only through levels of at
    # most beam_max_nodes nodes *and* beam_max_entries entries (the small
    # levels of a random graph are dense); labels stay valid and exact
    W, y = planted(3000, 6, seed=4)
    d = np.asarray(W.sum(1)).ravel()
    beam = spy_on(monkeypatch, _multilevel, "_uncoarsen",
                  lambda a, kw: "to_level" in kw)  # a step of the beam
    runs = {}
    for cap in (10**12, 0):
        beam.clear()
        eff = _multilevel.Effort(beam_max_entries=cap)
        labels, f = _multilevel.multilevel_labels(W, d, 6, np.random.default_rng(1),
                                                  effort=eff)
        runs[cap] = sum(beam)
        assert set(np.unique(labels)) == set(range(6))
        assert f == pytest.approx(_f(W, labels, 6), rel=1e-10)
        assert adjusted_rand_score(y, labels) > 0.99
    assert runs[10**12] > 0 and runs[0] == 0
    # on a random graph (matchings keep most entries) the cap is the
    # tighter beam_max_entries_random; a mesh keeps the general one
    mesh = grid_graph((60, 60))
    dm = np.asarray(mesh.sum(1)).ravel()
    for graph, deg, on_mesh in ((W, d, False), (mesh, dm, True)):
        beam.clear()
        eff = _multilevel.Effort(beam_max_entries=10**12, beam_max_entries_random=0)
        _multilevel.multilevel_labels(graph, deg, 6, np.random.default_rng(1),
                                      effort=eff)
        assert (sum(beam) > 0) == on_mesh


def test_sweep_is_the_best_prefix_split():
    W, S = _graph(n=25, seed=8, density=0.4, diagonal=0.2)
    d = W.sum(1) + np.random.default_rng(0).random(25)  # external degree
    order = np.random.default_rng(1).permutation(25).astype(np.int64)

    def value(t):
        y = np.zeros(25, dtype=np.int64)
        y[order[t + 1:]] = 1
        a = [W[np.ix_(y == k, y == k)].sum() for k in (0, 1)]
        v = [d[y == k].sum() for k in (0, 1)]
        return a[0] / v[0] + a[1] / v[1]

    ref = [value(t) for t in range(24)]
    for val, t in (_moves.sweep_csr(S.indptr, S.indices, S.data, d, order),
                   _moves.sweep_dense(W, d, order)):
        assert t == int(np.argmax(ref)) and val == pytest.approx(max(ref))


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_subgraph_csr_matches_scipy(index):
    _, S = _graph(n=70, seed=9, density=0.2, diagonal=1.0)
    S.indices, S.indptr = S.indices.astype(index), S.indptr.astype(index)
    idx = np.sort(np.random.default_rng(0).choice(70, 31, replace=False))
    ptr, ind, _ = _moves.subgraph_csr(S.indptr, S.indices, S.data, idx, 70)
    assert ptr.dtype == ind.dtype == index  # W's type: no check, no copy
    got = _moves.subgraph(S, idx)
    np.testing.assert_array_equal(got.toarray(), S[idx][:, idx].toarray())


@pytest.mark.parametrize("m", [40, 600])  # dense eigensolve, then multilevel split
def test_best_bisection_finds_two_blocks(m):
    W, y = planted(m, 2, seed=3, degree=10, p_in=0.97)
    d = np.asarray(W.sum(1)).ravel() * 1.1  # external edges count in volumes
    val, mask = _moves.best_bisection(W, d, np.random.default_rng(0))
    assert adjusted_rand_score(y, mask) > 0.9
    two = mask.astype(np.int64)
    a = [W[two == k][:, two == k].sum() for k in (0, 1)]
    assert val == pytest.approx(sum(a[k] / d[two == k].sum() for k in (0, 1)))


def test_best_bisection_of_a_disconnected_set_is_a_component():
    W = np.kron(np.eye(3), np.ones((4, 4)))
    val, mask = _moves.best_bisection(sp.csr_matrix(W), W.sum(1),
                                      np.random.default_rng(0))
    assert mask.sum() == 4 and val == pytest.approx(2.0)


def _speck_graph():
    """Two big blobs and a tiny, nearly isolated pair: the best 3-way cut
    isolates the pair, which no single-node move reaches from the two blobs
    plus a split blob."""
    W = np.kron(np.eye(2), np.ones((20, 20)))
    W[:20, 20:] = W[20:, :20] = 0.05
    W = np.pad(W, ((0, 2), (0, 2)))
    W[40, 41] = W[41, 40] = 1.0
    W[40:, :40] = 1e-6
    W[:40, 40:] = 1e-6
    np.fill_diagonal(W, 0)
    return W


def test_split_merge_isolates_a_weakly_attached_pair():
    W = _speck_graph()
    d = W.sum(1)
    y0 = np.r_[np.zeros(10), np.ones(10), np.full(20, 2), [0, 1]].astype(np.int64)
    f0 = _f(W, y0, 3)
    y, f = _moves.split_merge(W, d, y0, 3, np.random.default_rng(0), SolverOptions())
    assert f > f0
    assert y[40] == y[41] and np.sum(y == y[40]) == 2
    assert f == pytest.approx(_f(W, y, 3))


def test_pair_rebisection_never_lowers_f_and_fixes_a_boundary():
    W, yt = planted(600, 2, seed=5, degree=10, p_in=0.95)
    d = np.asarray(W.sum(1)).ravel()
    y0 = np.where(np.arange(600) < 300, 0, 1)  # a boundary across the blocks
    f0 = _f(W, y0, 2)
    y, f = _moves.pair_rebisection(W, d, y0, 2, np.random.default_rng(0),
                                   SolverOptions())
    assert f >= f0 and adjusted_rand_score(yt, y) > 0.9


def test_pair_rebisection_memo_gives_the_same_labels_and_random_stream(monkeypatch):
    # several starts of one coarse graph share a memo of their pairs' unions
    # (the bisection and the 2-way solve of a union of at most
    # _DENSE_EIGH_MAX nodes use no random numbers): the same labels, f and
    # random stream as without it, and a start met again solves nothing
    W, _ = planted(240, 6, seed=3, degree=8, p_in=0.85)
    d = np.asarray(W.sum(1)).ravel()
    starts = [np.random.default_rng(s).integers(0, 6, 240) for s in range(3)]
    starts = [_moves.fill_empty(y, 6, np.random.default_rng(0)) for y in starts]
    calls = spy_on(monkeypatch, _moves, "best_bisection")
    out = {}
    for memo in (None, {}):
        rng = np.random.default_rng(7)
        out[memo is None] = [_moves.pair_rebisection(W, d, y, 6, rng, SolverOptions(),
                                                     memo=memo) for y in starts]
        out[memo is None].append(rng.random())
    assert len(calls) > 0
    for (y1, f1), (y2, f2) in zip(out[True][:-1], out[False][:-1]):
        assert np.array_equal(y1, y2) and f1 == f2
    assert out[True][-1] == out[False][-1]  # the same random numbers drawn
    memo, again, solved = {}, [], []
    for _ in range(2):
        n = len(calls)
        again.append(_moves.pair_rebisection(W, d, starts[0], 6,
                                             np.random.default_rng(7),
                                             SolverOptions(), memo=memo))
        solved.append(len(calls) - n)
    assert solved[0] > 0 and solved[1] == 0  # the second call: all from memo
    assert np.array_equal(again[0][0], again[1][0]) and again[0][1] == again[1][1]


@pytest.mark.parametrize("dense", [False, True])
def test_multilevel_labels_are_valid_and_seeded(dense):
    W, yt = planted(900, 5, seed=1)
    W = W.toarray() if dense else W
    d = np.asarray(W.sum(1)).ravel()
    y, f = _multilevel.multilevel_labels(W, d, 5, np.random.default_rng(0))
    assert set(np.unique(y)) == set(range(5))
    assert f == pytest.approx(_f(W, y, 5))
    assert adjusted_rand_score(yt, y) > 0.9
    y2, _ = _multilevel.multilevel_labels(W, d, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(y, y2)


def test_multilevel_beats_its_own_coarse_starts_on_a_speck_graph():
    W = _speck_graph()
    d = W.sum(1)
    y, f = _multilevel.multilevel_labels(W, d, 3, np.random.default_rng(0))
    assert y[40] == y[41] and np.sum(y == y[40]) == 2


def test_restarts_differ_and_never_lose():
    # restarts draw new matchings: n_init=10 is never worse than n_init=1
    # (its first restart is the n_init=1 fit) and finds a better cut here
    W, _ = planted(1500, 12, seed=4, degree=8, p_in=0.6)
    one = FalconNCut(12, affinity="precomputed", random_state=0).fit(W)
    ten = FalconNCut(12, affinity="precomputed", n_init=10, random_state=0).fit(W)
    assert ten.ncut_ < one.ncut_
    d = np.asarray(W.sum(1)).ravel()
    keep = np.flatnonzero(d > 0)
    W, d = W[keep][:, keep], d[keep]
    starts = [_multilevel.multilevel_labels(W, d, 12, np.random.default_rng(s))[0]
              for s in range(3)]
    assert not np.array_equal(starts[0], starts[1])


def test_spectral_start_is_bounded(monkeypatch):
    """ARPACK that does not converge within its bound hands over to LOBPCG,
    itself bounded: the start is still a valid labelling."""
    from scipy.sparse.linalg import ArpackNoConvergence

    def no_convergence(*args, **kwargs):
        raise ArpackNoConvergence("no", np.zeros(0), np.zeros((0, 0)))

    monkeypatch.setattr(_spectral, "eigsh", no_convergence)
    W, yt = planted(1200, 3, seed=6, degree=12, p_in=0.95)
    d = np.asarray(W.sum(1)).ravel()
    y = _spectral.spectral_embedding_labels(W, d, 3, np.random.default_rng(0))
    assert set(np.unique(y)) == {0, 1, 2} and adjusted_rand_score(yt, y) > 0.8


@pytest.mark.skipif(not _spectral._EIGSH_RNG, reason=(
    "SciPy < 1.17: the Fortran ARPACK draws its restart vectors from a seed of "
    "its own, kept across calls in the process (a known limitation)"))
def test_arpack_restarts_draw_from_the_fits_generator():
    """On a matrix of two eigenvalues ARPACK's Krylov space is invariant
    after two steps and it asks for random vectors; they come from the
    fit's generator, so the vectors and the labels repeat for a seed
    (SciPy >= 1.17 would otherwise draw them from a fresh OS-seeded
    generator)."""
    n = _spectral._DENSE_MAX + 100  # ARPACK, not the dense eigensolver
    W = np.ones((n, n))
    d = W.sum(1)

    def vectors(seed):
        return _spectral.leading_vectors(W, d, 5, np.random.default_rng(seed))

    np.testing.assert_array_equal(vectors(0), vectors(0))
    assert not np.allclose(np.abs(vectors(0)), np.abs(vectors(1)))

    X = np.full((n, 2), 1e-200)  # every RBF affinity is exactly 1
    fits = [FalconNCut(6, affinity="rbf", init="spectral",
                       random_state=0).fit(X).labels_ for _ in range(2)]
    np.testing.assert_array_equal(*fits)


def test_dense_eigenvectors_of_many_components():
    """22 nodes in 14 components (self-loops of 0.001 and 8 edges): the
    eigenvalue 1 has multiplicity 14, and LAPACK's syevr (SciPy's eigh with
    subset_by_index) returned no vector at all for the top two here, so the
    multilevel start's spectral candidate failed with "attempt to get argmax
    of an empty sequence" (found by a longer hypothesis run)."""
    W = np.eye(22) * 0.001
    for i, j, w in [(0, 15, 0.5), (2, 4, 0.021822432056069374), (3, 5, 0.5),
                    (4, 17, 0.42972537875175476), (7, 8, 0.25390625),
                    (7, 11, 0.3909660875797272), (8, 18, 0.5),
                    (11, 14, 0.38492584228515625)]:
        W[i, j] = W[j, i] = w
    d = W.sum(1)
    vec = _spectral.leading_vectors(W, d, 2, np.random.default_rng(0))
    assert vec.shape == (22, 2) and np.all(np.isfinite(vec))
    M = W / np.sqrt(np.outer(d, d))
    np.testing.assert_allclose(M @ (vec * np.sqrt(d)[:, None]),
                               vec * np.sqrt(d)[:, None], atol=1e-10)  # eigenvalue 1
    with pytest.warns(UserWarning, match="not fully connected|connected components"):
        y = FalconNCut(2, affinity="precomputed", random_state=0).fit_predict(
            sp.csr_matrix(W))
    assert set(np.unique(y)) == {0, 1}


def test_spectral_start_of_subnormal_weights_is_that_of_the_scaled_graph():
    """Every weight 5e-324 (the smallest subnormal; sums of them are exact):
    D^-1/2 is about 1e161, the squared norms of the embedding's rows
    overflowed (a RuntimeWarning), every normalized row was 0 and the
    spectral start was arbitrary (NCut 1.94 against 1.28 on the same graph
    of unit weights). The NCut does not depend on the scale of W."""
    A = sp.random(60, 60, density=0.08, random_state=1, format="csr")
    G = (A + A.T).tocsr()
    G.data[:] = 1.0
    tiny = G.multiply(5e-324).tocsr()
    assert np.all(tiny.data == 5e-324)

    def fit(W):
        return FalconNCut(3, affinity="precomputed", init="spectral", max_iter=0,
                          polish=False, random_state=0).fit(W)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        small = fit(tiny)
        # the estimator now solves such a graph scaled up (unit_scaled), so
        # the embedding's own scaling is checked where other callers (the
        # Dask start's coarsest graph) reach it unscaled
        d = np.asarray(tiny.sum(axis=1)).ravel()
        emb = _spectral.leading_vectors(tiny, d, 3, np.random.default_rng(0))
        norms = np.einsum("ij,ij->i", emb, emb)
    assert np.all(np.isfinite(norms)) and np.all(norms > 0)
    np.testing.assert_array_equal(small.labels_, fit(G).labels_)


@pytest.mark.parametrize("failure", ["as it comes", "raises", "returns none"])
def test_leading_vectors_survive_syevr_on_equal_eigenvalues(failure, monkeypatch):
    """The dense eigensolve of a nearly constant 9-node graph (found by a
    longer hypothesis run: M = 0.11109669826976108 off the diagonal,
    0.11122641384191143 on it, one eigenvalue apart and eight equal) makes
    syevr raise LinAlgError "Internal Error" with this machine's LAPACK
    ("as it comes"); on a graph of many components it returned no vector.
    Both failures are also forced, so that the test does not depend on the
    LAPACK at hand: the full decomposition takes over."""
    M = np.full((9, 9), 0.11109669826976108)
    np.fill_diagonal(M, 0.11122641384191143)
    real = _spectral.eigh

    def failing(A, **kw):
        if "subset_by_index" in kw:
            if failure == "raises":
                raise _spectral.LinAlgError("Internal Error.")
            return np.zeros(0), np.zeros((A.shape[0], 0))
        return real(A, **kw)

    if failure != "as it comes":
        monkeypatch.setattr(_spectral, "eigh", failing)
    # unit degrees: the normalized matrix is M itself
    vec = _spectral.leading_vectors(M, np.ones(9), 4, np.random.default_rng(0))
    assert vec.shape == (9, 4)
    vals = np.diag(vec.T @ M @ vec)
    np.testing.assert_allclose(M @ vec, vec * vals, atol=1e-12)
    assert vals[0] == pytest.approx(np.linalg.eigvalsh(M)[-1])


def test_region_growing_cells_are_connected():
    from scipy.sparse.csgraph import connected_components

    n = 20
    G = sp.diags([1.0, 1.0], [1, -1], shape=(n, n))
    W = (sp.kron(sp.eye(n), G) + sp.kron(G, sp.eye(n))).tocsr()
    y = _coarsest.region_growing(W, np.asarray(W.sum(1)).ravel(), 6,
                                 np.random.default_rng(0))
    assert set(np.unique(y)) == set(range(6))
    for k in range(6):
        idx = np.flatnonzero(y == k)
        assert connected_components(W[idx][:, idx], directed=False)[0] == 1


def test_fit_restores_blas_threads():
    def blas_threads():
        return [(i["internal_api"], i["num_threads"]) for i in threadpool_info()
                if i["user_api"] == "blas"]

    before = blas_threads()
    FalconNCut(3, affinity="precomputed", random_state=0).fit(
        _dense_token_graph(150, 3))
    assert blas_threads() == before


def test_fits_overlapping_in_threads_restore_blas_threads():
    # the BLAS limit is process-wide: fit A starts, fit B starts, A ends,
    # B ends; B restored the limit it had found (A's one thread) and left
    # the process on one BLAS thread
    import threading

    from sklearn_falcon._threads import fit_threads

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info()
                if i["user_api"] == "blas"]

    before = blas_threads()
    if max(before, default=1) == 1:
        pytest.skip("BLAS runs on one thread here: no limit to restore")
    a_in, b_in = threading.Event(), threading.Event()
    seen = {}

    def fit_a():
        with fit_threads():
            seen["A"] = blas_threads()
            a_in.set()
            b_in.wait(10)

    def fit_b():
        a_in.wait(10)
        with fit_threads():
            b_in.set()
            a.join(10)

    a, b = threading.Thread(target=fit_a), threading.Thread(target=fit_b)
    a.start()
    b.start()
    b.join(10)
    assert seen["A"] == [1] * len(before)
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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coarsen_dense_is_pt_w_p(dtype):
    W, S = _graph(n=40, seed=3, dtype=dtype)
    mapping = np.random.default_rng(0).integers(7, size=40).astype(np.int64)
    P = _onehot(mapping, 7)
    Wc = _contract.coarsen_dense(W, mapping, 7)
    assert Wc.dtype == dtype and Wc.shape == (7, 7)
    np.testing.assert_allclose(Wc, P.T @ W.astype(np.float64) @ P, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coarsen_csr_is_pt_w_p(dtype):
    W, S = _graph(n=50, seed=5, dtype=dtype)
    np.fill_diagonal(W, 0.3)  # self-loops become part of the coarse diagonal
    S = sp.csr_matrix(W)
    mapping = np.random.default_rng(1).integers(9, size=50).astype(np.int64)
    indptr, indices, data = _contract.coarsen_csr(S.indptr, S.indices, S.data,
                                                  mapping, 9)
    Wc = sp.csr_matrix((data, indices, indptr), shape=(9, 9))
    assert data.dtype == dtype
    # one stored entry per coarse pair that has fine weight
    assert Wc.nnz == len({(a, b) for a, b in zip(*(mapping[x] for x in S.nonzero()))})
    P = _onehot(mapping, 9)
    np.testing.assert_allclose(Wc.toarray(), P.T @ W.astype(np.float64) @ P, rtol=1e-5)
    np.testing.assert_allclose(Wc.toarray(), _contract.coarsen_dense(W, mapping, 9),
                               rtol=1e-5)


def test_dijkstra_matches_scipy():
    from scipy.sparse.csgraph import dijkstra

    _, S = _graph(n=80, seed=11, density=0.08)
    S = sp.csr_matrix(S)
    sources = np.array([3, 40, 77])
    dist, owner = _coarsest.dijkstra_csr(S.indptr, S.indices, S.data, sources,
                                          np.full(S.shape[0], np.inf))
    ref = dijkstra(S, directed=False, indices=sources)
    np.testing.assert_allclose(dist, ref.min(0))
    reach = np.isfinite(ref.min(0))
    np.testing.assert_array_equal(dist[reach], ref[owner[reach], np.flatnonzero(reach)])
    assert np.all(owner[~reach] == -1)


@pytest.mark.parametrize("seed", range(6))
def test_bounded_dijkstra_is_the_minimum_with_the_bound_bit_for_bit(seed):
    # region growing's k-means++ seeding updates its distances from each new
    # seed with a search bounded by them: it must equal the minimum with a
    # full search exactly, or the seeds (and the labels) would change
    rng = np.random.default_rng(seed)
    n = 300
    S = sp.random(n, n, density=0.03, random_state=seed, format="csr")
    S = sp.csr_matrix(S + S.T)
    S.data = rng.choice([1.0, 1.5, 0.1, 1 / 3], size=S.nnz) * rng.uniform(
        0.5, 2.0, S.nnz)  # many equal and rounded path sums
    S.data[rng.random(S.nnz) < 0.02] = np.inf  # unreachable through these
    ptr, ind, length = S.indptr, S.indices, S.data
    inf = np.full(n, np.inf)
    dist = _coarsest.dijkstra_csr(ptr, ind, length, np.array([0]), inf)[0]
    for s in rng.choice(n, size=12, replace=False):
        src = np.array([s])
        full = _coarsest.dijkstra_csr(ptr, ind, length, src, inf)[0]
        bounded, owner = _coarsest.dijkstra_csr(ptr, ind, length, src, dist)
        np.testing.assert_array_equal(bounded, np.minimum(dist, full))
        assert np.all((owner == 0) == (bounded < dist))  # what s brought closer
        dist = bounded


def _fit_labels(W, **kw):
    est = FalconNCut(4, affinity="precomputed", random_state=0, **kw).fit(W)
    return est.labels_, est.ncut_


@pytest.mark.parametrize("dense", [False, True])
def test_multilevel_fast_is_the_default_with_the_fast_effort(monkeypatch, dense):
    # what benchmarks/bench_large.py --study fast measures (the default fit
    # with SPARSE replaced by SPARSE_FAST) is what init="multilevel_fast" fits
    W = grid_graph((30, 30), weighted=True)
    W = W.toarray() if dense else W.tocsr()
    fast, _ = _fit_labels(W, init="multilevel_fast")
    name = "DENSE" if dense else "SPARSE"
    monkeypatch.setattr(_multilevel, name, getattr(_multilevel, name + "_FAST"))
    np.testing.assert_array_equal(fast, _fit_labels(W)[0])


def test_multilevel_fast_skips_the_extra_candidates_vcycles_and_flows(monkeypatch):
    W = grid_graph((30, 30), weighted=True).tocsr()
    calls = {name: spy_on(monkeypatch, _multilevel, name) for name in
             ("_vcycle", "flow_refine", "spectral_embedding_labels",
              "pair_rebisection", "coarse_starts")}
    _fit_labels(W)
    assert all(calls[name] for name in calls)  # the default runs each of them
    for found in calls.values():
        found.clear()
    labels, ncut = _fit_labels(W, init="multilevel_fast")
    assert not calls["_vcycle"] and not calls["flow_refine"]
    assert not calls["spectral_embedding_labels"]
    assert len(calls["pair_rebisection"]) == 1  # the coarsest graph's only
    assert len(calls["coarse_starts"]) == 1
    assert set(np.unique(labels)) == set(range(4))
    # fewer coarse starts: 16 // K = 4 random and 4 region-growing ones
    calls = spy_on(monkeypatch, _multilevel, "coarse_starts",
                   record=lambda a, k: k)
    _fit_labels(W, init="multilevel_fast")
    assert calls[0]["n_random"] == calls[0]["n_grow"] == 4


def test_multilevel_fast_restarts_and_seeds():
    W = grid_graph((30, 30), weighted=True).tocsr()
    one, ncut1 = _fit_labels(W, init="multilevel_fast")
    np.testing.assert_array_equal(one, _fit_labels(W, init="multilevel_fast")[0])
    _, ncut3 = _fit_labels(W, init="multilevel_fast", n_init=3)
    assert ncut3 <= ncut1  # the first restart is the n_init=1 fit


def test_multilevel_fast_skips_the_coarse_spectral_start_at_many_clusters(monkeypatch):
    # the coarsest graph's spectral start grows as K**3 (its n_c is about
    # 30 K): the fast init keeps it while n_c * K**2 <= 1e7, the default always
    from sklearn_falcon._inits import _coarsest, _multilevel as ML

    assert ML.SPARSE_FAST.spectral_start_budget == 10**7
    assert ML.SPARSE.spectral_start_budget >= 10**18
    calls = []
    real = _coarsest.spectral_embedding_labels

    def spy(W, degrees, n_clusters, rng, **kw):
        calls.append((W.shape[0], n_clusters))
        return real(W, degrees, n_clusters, rng, **kw)

    monkeypatch.setattr(_coarsest, "spectral_embedding_labels", spy)
    n = 60
    G = sp.diags([1.0, 1.0], [1, -1], shape=(n, n))
    W = (sp.kron(sp.eye(n), G) + sp.kron(G, sp.eye(n))).tocsr()  # 3,600 nodes
    for K, init, started in ((8, "multilevel_fast", True),
                             (80, "multilevel_fast", False)):
        calls.clear()
        est = FalconNCut(K, affinity="precomputed", init=init, random_state=0).fit(W)
        assert len(set(est.labels_)) == K
        assert bool(calls) is started, (K, init, calls)
        if started:
            assert all(m * k * k <= 10**7 for m, k in calls)


@pytest.mark.parametrize("init", ["multilevel", "multilevel_fast"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_n_clusters_as_a_narrow_numpy_integer(init, dtype):
    """``n_clusters=np.uint8(100)`` (e.g. ``labels.max() + 1`` of uint8
    segment labels) passes the parameter check, but its K-sized arithmetic
    overflowed in the initializations: an OverflowError, "negative
    dimensions are not allowed", or a corrupted heap that aborted Python.
    The fit now takes it as a Python int: the same labels as ``100``."""
    rng = np.random.default_rng(0)
    n, m = 1000, 3000
    W = sp.coo_matrix((rng.random(m), (rng.integers(n, size=m),
                                       rng.integers(n, size=m))), shape=(n, n))
    W = (W + W.T).tocsr()
    kw = dict(affinity="precomputed", init=init, random_state=0, max_iter=5)
    ref = FalconNCut(100, **kw).fit(W)
    est = FalconNCut(dtype(100), **kw).fit(W)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert est.score(W[:5]) == ref.score(W[:5])


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_falcon_batch_n_clusters_as_a_narrow_numpy_integer(backend, dtype):
    """As for the estimator: ``falcon_batch(graphs, np.int8(100))`` raised
    "OverflowError: Python integer 150 out of bounds for int8" in the
    multilevel start, and ``np.uint8(200)`` "negative dimensions are not
    allowed" in the final statistics.  It is taken as a Python int."""
    if backend == "torch":
        pytest.importorskip("torch")
    A = np.random.default_rng(0).random((300, 300))
    W = A + A.T
    kw = dict(affinity="precomputed", init="multilevel_fast", random_state=0,
              max_iter=5, backend=backend, device="cpu")
    for K in (100, 200):
        if K > np.iinfo(dtype).max:
            continue
        got = falcon_batch([W], dtype(K), **kw)
        want = falcon_batch([W], K, **kw)
        np.testing.assert_array_equal(got.labels[0], want.labels[0])
        assert got.ncut[0] == want.ncut[0]


def test_the_docstring_says_that_a_dense_graph_gets_the_lighter_multilevel_scheme(
        caplog):
    """FalconNCut's docstring listed FM searches, the spectral candidate,
    V-cycles and flows as steps of ``init="multilevel"``; a dense ``W`` (the
    rbf and cosine affinities, a dense precomputed array) gets none of them
    (``_multilevel.DENSE``), so the same kNN graph, passed dense, had a
    lighter start than passed sparse.  The docstring says so."""
    import logging

    ClassDoc = pytest.importorskip("numpydoc.docscrape").ClassDoc
    from sklearn.datasets import make_blobs
    from sklearn.neighbors import kneighbors_graph

    X = make_blobs(n_samples=200, centers=3, random_state=0)[0]
    C = kneighbors_graph(X, 10, include_self=True)
    W = ((C + C.T) / 2).tocsr()
    cycles = {}
    for name, graph in (("sparse", W), ("dense", W.toarray())):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="sklearn_falcon"):
            FalconNCut(3, affinity="precomputed", verbose=1,
                       random_state=0).fit(graph)
        cycles[name] = sum("V-cycle" in r.getMessage() for r in caplog.records)
    assert cycles["sparse"] > 0 and cycles["dense"] == 0
    doc = ClassDoc(FalconNCut, config={"show_class_members": False})
    (init,) = [p for p in doc["Parameters"] if p.name == "init"]
    text = " ".join(" ".join(init.desc).split())
    assert "A dense ``W``" in text and "gets a lighter scheme" in text
