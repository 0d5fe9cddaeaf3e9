"""End-to-end checks of the peer benchmark (``python -m benchmarks.bench_peers``).

Tiny graphs only, and only the peers whose packages are installed; the run
itself is measured by the benchmark, not here.
"""

import json
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

# benchmarks/ is not an installed package: import it from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_peers as B  # noqa: E402
from benchmarks import families as F  # noqa: E402
from benchmarks import peer_jobs as J  # noqa: E402
from benchmarks.sandbox import Sandbox, save_graph  # noqa: E402


def _check_graph(g):
    W = g.W
    assert sp.isspmatrix_csr(W) and W.dtype == np.float64
    assert abs(W - W.T).max() == 0 and W.data.min() > 0
    assert np.asarray(W.sum(axis=1)).min() > 0
    assert g.y_true is None or g.y_true.shape == (W.shape[0],)
    assert 2 <= g.K <= W.shape[0]


def test_smoke_graphs_are_valid_and_deterministic():
    for spec in F.graph_specs("smoke"):
        if spec.family == "pixel" and find_spec("skimage") is None:
            continue
        if spec.family == "realnet" and find_spec("networkx") is None:
            continue
        g1, g2 = spec.build(), spec.build()
        _check_graph(g1)
        assert (g1.W != g2.W).nnz == 0 and g1.K == g2.K


def test_planted_graph_sizes_and_groups():
    W, blocks, groups = F.planted_graph([30, 60, 90, 120], [0, 0, 1, 1],
                                        (0.6, 0.3), 10, seed=0)
    assert np.bincount(blocks).tolist() == [30, 60, 90, 120]
    assert np.bincount(groups).tolist() == [90, 210]
    C = W.tocoo()
    same_block = blocks[C.row] == blocks[C.col]
    same_group = groups[C.row] == groups[C.col]
    # about 60% of the edges inside blocks, 90% inside groups
    assert 0.5 < same_block.mean() < 0.7 and 0.85 < same_group.mean() < 0.95


def test_graph_specs_rejects_unknown_names():
    with pytest.raises(ValueError, match="mode"):
        F.graph_specs("huge")
    with pytest.raises(ValueError, match="families"):
        F.graph_specs("quick", families=["nope"])


def test_integer_graph_is_symmetric_positive_and_loop_free():
    W = (F.grid_graph((6, 7), weighted=True, seed=0) + sp.identity(42)).tolil()
    W[0, 1] = W[1, 0] = 1e-12  # far below the resolution: dropped
    W = sp.csr_matrix(W)
    xadj, adj, ew, scale = J.integer_graph(W)
    assert xadj.dtype == adj.dtype == ew.dtype == np.int32
    assert ew.min() >= 1 and ew.astype(np.int64).sum() <= J.INT_BUDGET
    A = sp.csr_matrix((ew, adj, xadj), shape=W.shape)
    assert A.diagonal().max() == 0 and abs(A - A.T).max() == 0
    assert A.nnz == W.nnz - 42 - 2  # the diagonal and the tiny pairs dropped
    ref = W.toarray()
    np.fill_diagonal(ref, 0.0)
    ref[ref < 1e-9] = 0.0
    err = np.abs(A.toarray() / scale - ref / ref.max()).max()
    assert err <= 0.5 / scale + 1e-15
    x1, a1, e1, s1 = J.integer_graph(F.grid_graph((3, 3)))
    assert s1 == 1.0 and set(e1.tolist()) == {1}
    with pytest.raises(ValueError, match="vertex weights"):
        J.integer_vertex_weights(W, "mass")


def test_spectral_job_matches_spectral_clustering():
    from sklearn.cluster import SpectralClustering

    g = F.graph_specs("smoke", pattern="grid2d")[0].build()
    outs = {o["peer"]: o for o in J.run_job("spectral", g.W, g.K, seed=3,
                                            eigen_solver="arpack")}
    for assign in ("kmeans", "discretize", "cluster_qr"):
        sc = SpectralClustering(g.K, affinity="precomputed", eigen_solver="arpack",
                                assign_labels=assign, random_state=3).fit(g.W)
        assert np.array_equal(outs[f"sc-arpack-{assign}"]["labels"], sc.labels_)


@pytest.mark.skipif(find_spec("pyamg") is None, reason="needs pyamg")
def test_spectral_job_does_not_time_the_pyamg_import():
    # the docs promise "imports excluded": scikit-learn imports pyamg inside
    # the timed embedding, so the first amg job of a worker paid for it
    import subprocess

    code = """
import sys, time
from importlib.abc import MetaPathFinder
events = []
class Spy(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyamg":
            events.append("import pyamg")
sys.meta_path.insert(0, Spy())
from benchmarks import peer_jobs as J
from benchmarks.graphs import sbm_graph
assert "pyamg" not in sys.modules
W, _ = sbm_graph(200, 2, avg_degree=10, seed=0)
perf_counter = time.perf_counter
def clock():
    events.append("clock")
    return perf_counter()
time.perf_counter = clock
J.run_job("spectral", W, 2, seed=0, eigen_solver="amg")
print(events.index("import pyamg") < events.index("clock"))
"""
    root = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                       text=True, timeout=300)
    assert p.stdout.strip().splitlines()[-1:] == ["True"], p.stderr[-2000:]


@pytest.mark.skipif(find_spec("pymetis") is None, reason="needs pymetis")
def test_metis_tries_kway_and_recursive_bisection(monkeypatch):
    # pymetis bisects recursively for K <= 8 unless told otherwise: METIS's
    # k-way scheme (gpmetis's default, often a much lower NCut there) was
    # never tried, though METIS is run "at its strongest"
    import pymetis

    seen = []
    part_graph = pymetis.part_graph

    def spy(*args, **kwargs):
        seen.append(kwargs.get("recursive"))
        return part_graph(*args, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", spy)
    jobs = J.peer_groups()["metis"]
    assert {p["scheme"] for _, _, p in jobs} == {"kway", "rb"}
    assert len({job_id for job_id, _, _ in jobs}) == len(jobs) == 16
    g = F.graph_specs("smoke", pattern="grid2d")[0].build()
    assert g.K <= 8
    for scheme, recursive in (("kway", False), ("rb", True)):
        out = J.run_job("metis", g.W, g.K, seed=0, vw="degree", imbalance=0.03,
                        scheme=scheme)
        assert seen[-1] is recursive and out[0]["config"]["scheme"] == scheme
    # the scale group keeps both schemes of its shrunk balance grid
    scale = B._jobs_for("metis", scale=True)
    assert len(scale) == 2 * len(B.SCALE_GRID)


def test_sandbox_reports_timeouts_and_errors(tmp_path):
    g = F.graph_specs("smoke", pattern="grid2d")[0].build()
    path = tmp_path / "g.npz"
    save_graph(path, g.W, g.K, g.y_true)
    with Sandbox() as box:
        res = box.run(path, "rncut", seed=0, timeout=1e-3)
        assert res["status"] == "timeout" and res["outputs"] == []
        res = box.run(path, "rncut", seed=0, timeout=60)
        assert res["status"] == "ok" and res["outputs"][0]["labels"].shape == (100,)
        res = box.run(path, "nope", seed=0, timeout=60)
        assert res["status"] == "error" and "unknown job kind" in res["message"]
        res = box.run(path, "rncut", seed=0, timeout=60)  # the worker survives
        assert res["status"] == "ok"


def test_parse_variant():
    assert B.parse_variant('a={"n_init": 3, "init": "spectral"}') == (
        "a", {"n_init": 3, "init": "spectral"})
    # "default" and "n_init=10" are the variants the targets are about: an
    # override made "Falcon (defaults)" rows of another configuration
    for bad in ("noequals", "a=[1]", "a={bad", 'from-best={}', ' from-best ={}',
                'default={"n_init": 3}', 'n_init=10={"n_init": 2}', '={}'):
        with pytest.raises(SystemExit):
            B.parse_variant(bad)


def test_runner_end_to_end_with_cache(tmp_path, capsys):
    names = ["grid2d"] + (["karate"] if find_spec("networkx") else [])
    peers = [p for p in ("metis", "kahip-fast", "rncut", "sc-arpack")
             if p in J.available_peer_groups()[0]]
    argv = ["--smoke", "--graphs", "|".join(names), "--out", str(tmp_path / "out"),
            "--cache", str(tmp_path / "cache"), "--peers", ",".join(peers),
            "--falcon", 'two={"n_init": 2}']
    assert B.main(argv) == 0
    first = capsys.readouterr().out
    md = (tmp_path / "out" / "peers.md").read_text()
    assert "Targets of issue 15" in md and "grid2d-10x10-w-K3" in md
    assert (tmp_path / "out" / "peers.rst").exists()
    assert "grid2d-10x10-w-K3" in (tmp_path / "out" / "peers_detail.md").read_text()
    data = json.loads((tmp_path / "out" / "peers.json").read_text())
    assert len(data["rows"]) == len(names)
    for row in data["rows"]:
        assert set(row["falcon"]) >= {"default", "n_init=10", "two", "from-best"}
        for f in row["falcon"].values():
            assert f["status"] == "ok" and f["clusters"] == row["K"]
            assert f["monotone"]
        assert set(row["peers"]) >= set(peers) - {"sc-arpack"}
        assert row["best_ncut"] is not None and row["falcon_s"] > 0
        # from the best peer's labels, Falcon never ends above them
        assert row["falcon"]["from-best"]["ncut"] <= row["best_ncut"] + 1e-12
    assert "rncut: ok" in first
    # a second run with a new variant reads every peer from the cache
    assert B.main(argv[:-1] + ['three={"n_init": 3}']) == 0
    second = capsys.readouterr().out
    assert "rncut: ok" not in second and "metis[" not in second
    data = json.loads((tmp_path / "out" / "peers.json").read_text())
    assert "three" in data["rows"][0]["falcon"]
    # the tables can be written again from peers.json alone
    (tmp_path / "out" / "peers.md").unlink()
    assert B.main(["--smoke", "--out", str(tmp_path / "out"), "--rewrite"]) == 0
    assert "three/best" in (tmp_path / "out" / "peers.md").read_text()
