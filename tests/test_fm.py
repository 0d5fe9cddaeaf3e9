"""The localized FM searches (``_backends/_numba/_fm.py``) and their use in
the multilevel start."""

import dataclasses
import json

import numpy as np
import pytest
import scipy.sparse as sp
from shared import planted, spy_on
from shared import random_graph as _graph

from sklearn_falcon._backends._numba import (boundary_nodes_csr, fm_round_csr,
                                             local_move_sweep_csr)
from sklearn_falcon._inits import _moves, _multilevel
from sklearn_falcon._solver import SolverOptions
from sklearn_falcon._stats import cluster_statistics, objective_of


def _f(W, y, K):
    return objective_of(*cluster_statistics(W, y, K))


def _grid(side, seed=0):
    """A 4-neighbour grid with weights uniform in [0.1, 1]."""
    rng = np.random.default_rng(seed)
    idx = np.arange(side * side).reshape(side, side)
    rows = np.r_[idx[:, :-1].ravel(), idx[:-1, :].ravel()]
    cols = np.r_[idx[:, 1:].ravel(), idx[1:, :].ravel()]
    w = rng.uniform(0.1, 1.0, size=rows.size)
    U = sp.coo_matrix((w, (rows, cols)), shape=(side * side,) * 2)
    W = (U + U.T).tocsr()
    W.sort_indices()
    return W


def _arrays(W):
    return W.indptr.astype(np.int64), W.indices.astype(np.int64), W.data


@pytest.mark.parametrize("seed", range(6))
def test_fm_round_never_lowers_f_and_keeps_its_statistics(seed):
    rng = np.random.default_rng(seed)
    K = int(rng.integers(2, 7))
    _, W = _graph(80, seed=seed, density=0.08, diagonal=rng.random(80) * 0.5
                  if seed % 2 else None)
    W = W.astype(np.float32 if seed % 3 == 0 else np.float64)
    d = np.asarray(W.sum(1), dtype=np.float64).ravel() + (0.3 if seed == 5 else 0.0)
    y = rng.integers(K, size=80).astype(np.int64)
    y[:K] = np.arange(K)
    vol, assoc = cluster_statistics(W, y, K, d)
    vol, assoc = np.array(vol), np.array(assoc)
    f0 = objective_of(vol, assoc)
    ptr, ind, data = _arrays(W)
    seeds = rng.permutation(80).astype(np.int64)
    n_kept, gain = fm_round_csr(ptr, ind, data, d, y, vol, assoc, seeds,
                                int(rng.integers(1, 30)), 3.0 * (seed % 2),
                                10 ** 9 if seed < 4 else int(rng.integers(50, 500)))
    vol2, assoc2 = cluster_statistics(W, y, K, d)
    np.testing.assert_allclose(vol, vol2, rtol=1e-10)
    np.testing.assert_allclose(assoc, assoc2, rtol=1e-9, atol=1e-9)
    f1 = objective_of(vol2, assoc2)
    assert f1 >= f0 - 1e-12
    assert gain == pytest.approx(f1 - f0, abs=1e-9)
    if seed < 4:  # random labels, no budget: there is always a gain
        assert n_kept > 0 and f1 > f0
    assert np.bincount(y, minlength=K).min() >= 1


def test_fm_round_stops_when_its_budget_is_spent():
    _, W = _graph(60, seed=3, density=0.1)
    d = np.asarray(W.sum(1)).ravel()
    y = np.arange(60) % 3
    vol, assoc = cluster_statistics(W, y, 3, d)
    out = fm_round_csr(*_arrays(W), d, y.copy(), np.array(vol), np.array(assoc),
                       np.arange(60), 50, 3.0, 0)
    assert out == (0, 0.0)
    assert fm_round_csr(*_arrays(W), d, y.copy(), np.array(vol), np.array(assoc),
                        np.arange(60), 50, 3.0, 10 ** 9)[0] > 0


def test_fm_refine_moves_strips_that_single_moves_cannot():
    # a solver's local optimum on a weighted grid: no single move raises f,
    # a sequence of moves (a strip of the boundary) does
    W = _grid(24, seed=3)
    d = np.asarray(W.sum(1)).ravel()
    y0 = (np.arange(24 * 24) % 24 >= 12).astype(np.int64)  # left / right
    y0, f0 = _moves.refine(W, d, y0, 2, SolverOptions())
    vol, assoc = cluster_statistics(W, y0, 2, d)
    probe = y0.copy()
    assert local_move_sweep_csr(*_arrays(W), d, probe, np.array(vol),
                                np.array(assoc)) == 0
    y, f = _moves.fm_refine(W, d, y0, 2, np.random.default_rng(0))
    assert f > f0 * (1 + 1e-6)
    assert f == pytest.approx(_f(W, y, 2))
    assert y0.tolist() != y.tolist() and np.bincount(y).min() > 0


def test_fm_refine_leaves_its_input_alone_and_takes_dense_graphs():
    Wd, W = _graph(50, seed=1, density=0.2)
    d = Wd.sum(1)
    y0 = np.arange(50) % 3
    keep = y0.copy()
    y_s, f_s = _moves.fm_refine(W, d, y0, 3, np.random.default_rng(0))
    y_d, f_d = _moves.fm_refine(Wd, d, y0, 3, np.random.default_rng(0))
    np.testing.assert_array_equal(y0, keep)
    np.testing.assert_array_equal(y_s, y_d)
    assert f_s == pytest.approx(f_d) and f_s >= _f(W, y0, 3)


def test_boundary_nodes_are_those_with_a_neighbour_elsewhere():
    W = _grid(6)
    y = (np.arange(36) % 6 >= 3).astype(np.int64)
    b = boundary_nodes_csr(*_arrays(W)[:2], y)
    np.testing.assert_array_equal(b, np.flatnonzero(np.isin(np.arange(36) % 6, (2, 3))))


def test_multilevel_fm_finds_a_better_mesh_partition():
    # the multilevel start with FM searches against the same without (the
    # gain of the benchmark's weighted grids, on a small one)
    W = _grid(40, seed=1)
    d = np.asarray(W.sum(1)).ravel()
    on = dataclasses.replace(_multilevel.SPARSE, flow_rounds=0)  # FM alone
    off = dataclasses.replace(on, fm_stall=0)
    _, f0 = _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0),
                                          effort=off)
    y1, f1 = _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0),
                                           effort=on)
    assert f1 > f0 * (1 + 1e-4)
    assert f1 == pytest.approx(_f(W, y1, 4))
    assert _multilevel.DENSE.fm_stall == 0  # dense (token) graphs: no FM


@pytest.mark.parametrize("min_gain, gated", [(0.0, False), (1.0, True)])
def test_fm_gate_on_large_levels(monkeypatch, min_gain, gated):
    # levels of over large_entries entries: once FM gains less than
    # fm_min_gain on one of them in the first pass down, no later large
    # level (V-cycles included) gets FM; small levels always do
    W = _grid(40, seed=2)
    d = np.asarray(W.sum(1)).ravel()
    calls = spy_on(monkeypatch, _multilevel, "fm_refine", lambda a, kw: a[0].nnz)
    large = 2000
    # one large level (the spectral candidate's) decides here: fm_gate_levels=1
    eff = dataclasses.replace(_multilevel.SPARSE, large_entries=large,
                              fm_min_gain=min_gain, fm_gate_levels=1)
    y, f = _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0),
                                         effort=eff)
    assert f == pytest.approx(_f(W, y, 4))
    n_large = sum(nnz > large for nnz in calls)
    assert any(nnz <= large for nnz in calls)
    if gated:  # the first large level's FM gains less than 100 %: the last
        assert n_large == 1
    else:
        assert n_large > 1


def test_fm_gate_closes_after_levels_in_a_row():
    # fm_gate_levels large levels of low gain in a row close the gate; a
    # level that gains resets the count; once frozen it records nothing
    eff = dataclasses.replace(_multilevel.SPARSE, fm_min_gain=1e-5, fm_gate_levels=2)
    assert _multilevel.SPARSE.fm_gate_levels == 2
    gate = _multilevel._FMGate()
    gate.record(1e-6, 1.0, eff)
    assert gate.large
    gate.record(1e-3, 1.0, eff)  # a level that gains: the count restarts
    gate.record(1e-6, 1.0, eff)
    assert gate.large
    gate.record(-1e-9, 1.0, eff)  # second low level in a row
    assert not gate.large
    frozen = _multilevel._FMGate()
    frozen.frozen = True
    for _ in range(3):
        frozen.record(0.0, 1.0, eff)
    assert frozen.large


@pytest.mark.parametrize("min_gain, skip, n_cycles", [
    (1.0, True, 0),    # the gate closes and the flag is on: no V-cycle
    (1.0, False, 1),   # the default keeps the V-cycle
    (0.0, True, 1),    # the gate stays open: the V-cycle runs
])
def test_vcycle_fm_gate(monkeypatch, min_gain, skip, n_cycles):
    # Effort.vcycle_fm_gate (off by default): no V-cycle on a large graph
    # where the FM gate has closed
    W = _grid(40, seed=2)
    d = np.asarray(W.sum(1)).ravel()
    calls = spy_on(monkeypatch, _multilevel, "_vcycle")
    eff = dataclasses.replace(_multilevel.SPARSE, large_entries=2000,
                              fm_min_gain=min_gain, fm_gate_levels=1,
                              vcycle_fm_gate=skip)
    y, f = _multilevel.multilevel_labels(W, d, 4, np.random.default_rng(0),
                                         effort=eff)
    assert len(calls) == n_cycles
    assert f == pytest.approx(_f(W, y, 4))
    assert not _multilevel.SPARSE.vcycle_fm_gate


def test_fm_step_never_lowers_f():
    W = _grid(20, seed=2)
    d = np.asarray(W.sum(1)).ravel()
    for seed in range(3):
        rng = np.random.default_rng(seed)
        y0 = rng.integers(3, size=400)
        f0 = _f(W, y0, 3)
        y, f = _multilevel._fm(W, d, y0, f0, 3, rng, _multilevel.SPARSE)
        assert f >= f0 and f == pytest.approx(_f(W, y, 3))
        y2, f2 = _multilevel._fm(W, d, y0, f0, 3, rng, None)
        assert y2 is y0 and f2 == f0


@pytest.mark.parametrize("study", [None, "flow", "spectral"])
def test_bench_fm_writes_its_tables(tmp_path, study):
    from benchmarks import bench_fm

    name = study or "fm"
    pick = [] if study is None else ["--study", study]
    bench_fm.main(["--graphs", "^karate-K2$", "--repeats", "1", "--out",
                   str(tmp_path), *pick])
    md = (tmp_path / f"{name}.md").read_text()
    assert "| karate-K2 | 34 | 2 |" in md and "| all | 1 |" in md
    assert ("flows" in md) == (study == "flow")
    assert ("## The spectral candidate" in md) == (study == "spectral")
    assert "| karate-K2 | kahip-fast | 0.8823 |" in md  # its ARI section (truth)
    (tmp_path / f"{name}.md").unlink()
    bench_fm.main(["--rewrite", "--out", str(tmp_path), *pick])
    assert (tmp_path / f"{name}.md").read_text() == md


@pytest.mark.parametrize("study, name", [("vcycle", "vcycle"), ("fm-gate", "fm_gate"),
                                         ("flow", "flow_large"),
                                         ("lp", "lp_coarsening"),
                                         ("beam", "beam_entries"),
                                         ("hierarchy", "hierarchy"),
                                         ("metis", "metis_time")])
def test_bench_large_writes_its_tables(tmp_path, study, name):
    pytest.importorskip("pymetis")
    from benchmarks import bench_large

    bench_large.main(["--study", study, "--graphs", "^karate-K2$", "--out",
                      str(tmp_path)])
    md = (tmp_path / f"{name}.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| karate-K2 |"))
    # a small graph: the variants are one code path, the same labels
    assert row.split(" | ")[4] == "1.0000000"
    if len(bench_large.STUDIES[study]["variants"]) > 1:
        assert row.split(" | ")[6] == "1.0000000"
    assert "Rows: 1." in md and (tmp_path / f"{name}.json").exists()
    assert "time/METIS, median [min, max]: default " in md


def test_bench_large_fast_study_fits_the_fast_init(tmp_path):
    pytest.importorskip("pymetis")
    from benchmarks import bench_large

    ML, variants = bench_large._variants("fast")
    assert variants["multilevel_fast"] is ML.SPARSE_FAST  # the init's own effort
    bench_large.main(["--study", "fast", "--graphs", "^karate-K2$", "--out",
                      str(tmp_path)])
    md = (tmp_path / "fast_init.md").read_text()
    assert "multilevel_fast: NCut ratio" in md and "Rows: 1." in md
    assert "time/METIS, median [min, max]: default " in md
    assert (tmp_path / "fast_init.json").exists()


def test_bench_large_many_study_partitions_into_the_k_asked(tmp_path):
    pytest.importorskip("pymetis")
    from benchmarks import bench_large
    from benchmarks.families import graph_specs

    # its default graphs: one of 10,000-20,000 nodes per family
    names = [s.name for s in graph_specs("full",
                                         pattern=bench_large.STUDIES["many"]["graphs"])]
    assert len(names) == 6
    bench_large.main(["--study", "many", "--graphs", "^lesmis-K4$", "--k", "5,8,40",
                      "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "many_clusters.json").read_text())["rows"]
    # K = 40 is over a quarter of the 77 nodes: skipped
    assert [(r["graph"], r["K"]) for r in rows] == [("lesmis-K5", 5), ("lesmis-K8", 8)]
    md = (tmp_path / "many_clusters.md").read_text()
    assert "| lesmis-K8 |" in md and "Rows: 2." in md
