"""Fast in-process checks of the benchmark suite (graphs, peers, reporting).

The full smoke run (``python -m benchmarks.run --smoke``) is a CI step of its
own; these tests keep to tiny graphs and take a few seconds.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

# benchmarks/ is not an installed package: import it from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import graphs as G  # noqa: E402
from benchmarks import peers as P  # noqa: E402
from benchmarks import run as R  # noqa: E402

from sklearn_falcon import normalized_cut  # noqa: E402


def _is_sym_csr(W):
    return (sp.isspmatrix_csr(W) and W.dtype == np.float64
            and abs(W - W.T).max() == 0)


def test_knn_affinity_matches_spectral_clustering():
    from sklearn.cluster import SpectralClustering

    W, y, X = G.blobs_graph(n=200, n_clusters=3, seed=0)
    sc = SpectralClustering(3, affinity="nearest_neighbors", n_neighbors=10,
                            random_state=0).fit(X)
    assert _is_sym_csr(W)
    assert abs(W - sc.affinity_matrix_).max() == 0


def test_sbm_graph_properties():
    W, y = G.sbm_graph(3000, 6, avg_degree=12, p_in_ratio=0.9, seed=3)
    assert _is_sym_csr(W)
    assert W.diagonal().max() == 0
    assert np.all(W.data == 1.0)
    assert np.bincount(y).tolist() == [500] * 6
    mean_deg = W.nnz / 3000
    assert 11 < mean_deg <= 12
    # about 10% of each node's edges leave its cluster -> NCut ~ 6 * 0.1
    assert 0.45 < normalized_cut(W, y) < 0.75
    W2, y2 = G.sbm_graph(3000, 6, avg_degree=12, p_in_ratio=0.9, seed=3)
    assert (W != W2).nnz == 0 and np.array_equal(y, y2)


def test_sbm_graph_rejects_bad_parameters():
    with pytest.raises(ValueError, match="p_in_ratio"):
        G.sbm_graph(100, 2, p_in_ratio=1.5)
    with pytest.raises(ValueError, match="n_clusters"):
        G.sbm_graph(10, 20)


def test_token_graph_and_cosine_power():
    F, y = G.token_features(300, 4, dim=32, rank=8, seed=0)
    W = G.cosine_power_affinity(F, power=3.0)
    assert W.shape == (300, 300) and np.allclose(W, W.T)
    assert W.min() >= 0 and np.isclose(W.max(), 1.0)
    with pytest.raises(ValueError, match="power"):
        G.cosine_power_affinity(F, power=0)


def test_recursive_ncut_sweep_is_exact():
    # the vectorised sweep must equal the NCut of each prefix split
    W, _ = G.sbm_graph(120, 3, avg_degree=8, seed=1)
    d = np.asarray(W.sum(1)).ravel()
    order = np.random.default_rng(0).permutation(120)
    sweep = P._sweep_ncut(W, order, d)
    sweep_dense = P._sweep_ncut(W.toarray(), order, d)
    for t in (1, 17, 60, 119):
        lab = np.zeros(120, dtype=int)
        lab[order[:t]] = 1
        assert np.isclose(sweep[t - 1], normalized_cut(W, lab))
        assert np.isclose(sweep_dense[t - 1], normalized_cut(W, lab))


def test_peers_on_easy_graph():
    # Falcon itself runs in test_run_smoke_suites_in_process
    W, y = G.sbm_graph(240, 3, avg_degree=20, p_in_ratio=0.95, seed=0)
    peers = P.get_peers(include=["sc-amg-cluster_qr", "rncut", "wkkm"])
    truth = normalized_cut(W, y)
    for name, fn in peers.items():
        labels, _ = fn(W, 3, seed=0)
        assert labels.shape == (240,)
        assert len(np.unique(labels)) == 3, name
        assert normalized_cut(W, labels) <= 1.5 * truth, name
    bound = P.spectral_lower_bound(W, 3)
    assert 0 < bound <= truth


def test_spectral_peers_include_arpack():
    # scikit-learn's default eigen_solver (and the best SC peer on several
    # graphs of the peer benchmark) was missing from the quality, speed and
    # bound suites, which claim every peer "in its strongest configuration"
    peers = P.get_peers(include=["sc-*"])
    assert {f"sc-arpack-{a}" for a in ("kmeans", "discretize", "cluster_qr")} \
        <= set(peers)
    assert peers["sc-arpack-kmeans"].keywords["eigen_solver"] == "arpack"
    quick = set(P.get_peers(include=["sc-*"], exclude=R.QUICK_SC_EXCLUDE))
    # (amg only where pyamg is installed: not in the oldest-versions job)
    assert {f"sc-{s}-cluster_qr" for s in P.SC_SOLVERS} & set(peers) <= quick
    assert "sc-arpack-cluster_qr" in quick
    assert not any(name.endswith(("-kmeans", "-discretize")) for name in quick)


def test_run_suites_report_failing_peers(monkeypatch, tmp_path):
    # a peer that raises (scaling) or that never returns K clusters (quality,
    # speed) ended the whole suite ("Suite failed: ValueError: min() arg is
    # an empty sequence"), losing its table
    def crash(W, K, seed=0):
        raise RuntimeError("peer crashed")

    def one_cluster(W, K, seed=0):
        return np.zeros(W.shape[0], dtype=np.int64), {}

    def peers(include=None, exclude=()):
        return {"falcon": P.falcon, "sc-amg-cluster_qr": crash,
                "rncut": one_cluster}

    monkeypatch.setattr(R.P, "get_peers", peers)
    monkeypatch.setattr(R, "plot_ncut_vs_time", lambda *a, **k: None)
    monkeypatch.setattr(R, "plot_time_vs_n", lambda *a, **k: None)
    monkeypatch.setattr(R, "_quality_graphs", lambda mode: {
        "sbm-300": G.sbm_graph(300, 3, avg_degree=10, seed=0) + (3,)})
    res = R.suite_scaling("smoke", tmp_path)
    methods = [r["method"] for r in res.tables[0].rows]
    assert "sc-amg-cluster_qr (failed: RuntimeError: peer crashed)" in methods
    assert "rncut" in methods and methods.count("falcon") == 2
    res = R.suite_quality("smoke", tmp_path)
    assert res.tables[0].rows[0]["best peer"] == "none with K clusters"
    assert res.targets[0][2] is None
    res = R.suite_speed("smoke", tmp_path)
    assert res.tables[0].rows[0]["fastest SC"] == "none with K clusters"


def test_bound_suite_leaves_out_fewer_clusters(monkeypatch, tmp_path):
    # a SpectralClustering run that returned one cluster (NCut 0) was the
    # "best SC NCut", at ratio 0 to the K-way lower bound
    def one_cluster(W, K, seed=0):
        return np.zeros(W.shape[0], dtype=np.int64), {}

    sc = P.get_peers(["sc-lobpcg-cluster_qr"])["sc-lobpcg-cluster_qr"]

    def peers(include=None, exclude=()):
        return {"falcon": P.falcon, "sc-lobpcg-discretize": one_cluster,
                "sc-lobpcg-cluster_qr": sc, "rncut": one_cluster}

    monkeypatch.setattr(R.P, "get_peers", peers)
    res = R.suite_bound("smoke", tmp_path)
    row = res.tables[0].rows[0]
    assert row["best SC NCut"] > 0 and row["best SC ratio"] >= 1 - 1e-9
    assert np.isnan(row["rncut NCut"])
    assert any("rncut returned 1 clusters, not 4" in n for n in res.notes)


def test_speed_suite_ignores_a_peer_with_fewer_clusters(monkeypatch, tmp_path):
    # rncut returning fewer than K clusters (NCut lower for free) made
    # "Falcon NCut <= both" false
    def one_cluster(W, K, seed=0):
        return np.zeros(W.shape[0], dtype=np.int64), {}

    monkeypatch.setattr(R.P, "get_peers", lambda include=None, exclude=(): {
        "falcon": P.falcon, "sc-same-as-falcon": P.falcon, "rncut": one_cluster})
    monkeypatch.setattr(R, "plot_ncut_vs_time", lambda *a, **k: None)
    res = R.suite_speed("smoke", tmp_path)
    assert all(r["Falcon NCut <= both"] is True for r in res.tables[0].rows)


def test_run_smoke_suites_in_process(tmp_path):
    machine = R.machine_info()
    assert {"cpu", "cores", "ram", "numpy"} <= set(machine)
    for suite in ("bound", "bandwidth"):
        res = R.SUITE_FUNCS[suite]("smoke", tmp_path)
        res.elapsed = 0.0
        res.write(tmp_path, machine, "smoke")
        md = (tmp_path / f"{suite}.md").read_text()
        assert "| cpu |" in md
        data = json.loads((tmp_path / f"{suite}.json").read_text())
        assert data["tables"] and data["tables"][0]["rows"]
    R.plot_time_vs_n({"a": [(10, 0.1), (100, 1.0)]}, tmp_path / "t.png",
                     "t", fit=(10, 100, 1.0, np.log(0.01)))
    assert (tmp_path / "t.png").stat().st_size > 0


def test_table_formats():
    t = R.Table("T", ["a", "b"])
    t.add(a=1.23456, b="x|y")
    t.add(a=float("nan"))
    assert "| 1.235 |" in t.markdown()
    rst = t.rst()
    assert ".. list-table::" in rst and "n/a" in rst
    assert R._one_line("a\nb | c") == "a b / c"


def test_bandwidth_cli_help_and_bad_options_never_run(monkeypatch, capsys):
    # `--help` (or a typo) used to start the full run, which overwrites
    # benchmarks/results/bandwidth.md after ~10 minutes
    from benchmarks import bandwidth as BW

    def boom(*args, **kwargs):
        raise AssertionError("the suite ran")

    monkeypatch.setattr(BW, "suite", boom)
    monkeypatch.setattr(BW, "before_after", boom)
    with pytest.raises(SystemExit) as exc:
        BW.main(["--help"])
    assert exc.value.code == 0
    assert "--before-after" in capsys.readouterr().out
    for bad in (["--qiuck"], ["--before-after"], ["--before-after", "a", "1", "2"]):
        with pytest.raises(SystemExit) as exc:
            BW.main(bad)
        assert exc.value.code == 2


def test_gpu_check_reports_failures_and_goes_on(monkeypatch, tmp_path):
    # gpu_check.py runs once, unattended, on a lent GPU: a failing target or
    # section is a row of its table, never the end of the run
    from benchmarks import gpu_check as GC

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    bench = GC.Bench(budget=60.0, cuda=False)
    monkeypatch.setattr(GC, "_median_solve", boom)
    table = GC.targets_section(bench, False, 1, 0, quick=True)
    assert table.count("error: RuntimeError: boom") == 2
    assert "| 2,048-token matrix-free solve on CUDA <= 20 ms (H200) | no CUDA |" \
        in table
    monkeypatch.undo()
    monkeypatch.setattr(GC, "warm_up", lambda bench, cuda: None)
    monkeypatch.setattr(GC, "batch_section", boom)
    monkeypatch.setattr(GC, "memory_section",
                        lambda sizes, timeout, errors=None: "memory table")
    out = tmp_path / "new folder" / "gpu_check.md"  # made by the script
    argv = ["--quick", "--cpu-only", "--strict", "--knn-n", "0", "--repeats", "1",
            "--sections", "batch,targets", "--out", str(out)]
    assert GC.main(argv) == 1  # --strict: a failure is exit status 1
    text = out.read_text()
    assert "section failed: RuntimeError: boom" in text
    assert "| 1,024 tokens: torch-CUDA solve <= Numba solve | Numba" in text
    assert "memory table" in text and "Total wall time" in text


def test_gpu_check_without_torch(tmp_path):
    # the script documents that without torch its torch rows are skipped; it
    # failed at import ("backend='torch' requires PyTorch")
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no torch here')\n")
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "gpu_check.md"
    env = {**os.environ, "PYTHONPATH": f"{fake.parent}{os.pathsep}{root}"}
    p = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "gpu_check.py"), "--quick",
         "--cpu-only", "--strict", "--knn-n", "0", "--repeats", "1",
         "--sections", "targets,segment", "--out", str(out)],
        capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    text = out.read_text()
    assert "torch not installed" in text
    assert "| 1,024 tokens: torch-CUDA solve <= Numba solve | Numba" in text


def test_bench_quality_never_takes_fewer_clusters_as_best(monkeypatch):
    # a spectral seed that returned fewer than K clusters (NCut lower for
    # free) was "the best spectral NCut" that Falcon had to beat
    from benchmarks import bench_quality as BQ

    W, y = G.sbm_graph(300, 3, avg_degree=15, p_in_ratio=0.9, seed=0)
    monkeypatch.setattr(BQ, "quality_graphs", lambda quick: [("sbm", W, y, 3)])

    class Short:
        def __init__(self, n_clusters, random_state, assign_labels, **kw):
            self.k, self.seed, self.assign = n_clusters, random_state, assign_labels

        def fit_predict(self, W):
            if self.assign == "discretize" and self.seed == 0:
                return np.zeros(W.shape[0], dtype=np.int64)  # one cluster
            return y.copy()

    monkeypatch.setattr(BQ, "SpectralClustering", Short)
    rows = BQ.run(quick=True, seeds=2)
    truth = normalized_cut(W, y)
    for r in rows:
        assert r["best_spectral_ncut"] == pytest.approx(truth)
    md = BQ.to_markdown(rows)
    assert "(< K clusters)" not in md  # seed 1 of discretize has K clusters
    monkeypatch.setattr(BQ, "SpectralClustering", lambda **kw: Short(
        assign_labels="discretize", random_state=0, **{
            k: v for k, v in kw.items() if k not in ("assign_labels",
                                                     "random_state")}))
    rows = BQ.run(quick=True, seeds=1)
    assert all(np.isnan(r["best_spectral_ncut"]) for r in rows)
    assert "n/a (no spectral run with K clusters)" in BQ.to_markdown(rows)


def test_dinov2_install_cost_reports_a_failed_step(tmp_path):
    # under `set -e` a failing pip install ended the script in silence (its
    # output goes to /dev/null): the table stopped short, the venvs stayed
    if shutil.which("bash") is None or shutil.which("du") is None:
        pytest.skip("needs bash and du")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python = bin_dir / "python3"
    fake_python.write_text(
        "#!/usr/bin/env bash\n"  # python3 -m venv DIR: a venv whose pip
        'd="$3"; mkdir -p "$d/bin" "$d/lib/python3.11/site-packages"\n'
        'cat > "$d/bin/pip" <<\'PIP\'\n'
        "#!/usr/bin/env bash\n"
        'case "$*" in *onnxruntime*) exit 1;; list*) echo "PyYAML 6.0";; esac\n'
        "exit 0\n"
        "PIP\n"
        'chmod +x "$d/bin/pip"\n')
    fake_python.chmod(0o755)
    script = Path(__file__).resolve().parents[1] / "benchmarks" / \
        "dinov2_install_cost.sh"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "TMPDIR": str(tmp_path)}
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 1, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| pip")]
    assert len(rows) == 4
    assert rows[2].startswith("| pip install onnxruntime (FAILED) | ")
    assert "FAILED" not in rows[3] and "PyYAML" in p.stdout
    assert not list(tmp_path.glob("dinov2cost*"))  # the venvs are removed


@pytest.mark.parametrize("module", [
    "peers", "peer_jobs", "bench_peers", "peers_report", "families", "graphs",
    "sandbox", "_report", "run", "mosaics", "objects", "videos"])
def test_benchmark_doctests(module):
    # the package's doctests run in CI, the benchmarks' did not: two had gone
    # stale (integer_graph's example, a NumPy 2 boolean repr in mosaics)
    import doctest
    import importlib

    mod = importlib.import_module(f"benchmarks.{module}")
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE
                          | doctest.ELLIPSIS)
    assert res.failed == 0


def test_bench_segmentation_reports_failing_spectral_runs(monkeypatch, tmp_path):
    # a SpectralClustering configuration that raised (amg without pyamg, a
    # solver that fails) ended the whole benchmark, losing every row
    import importlib.util

    from benchmarks import bench_segmentation as BS

    spectral, find_spec = BS._spectral, importlib.util.find_spec

    def flaky(W, k, seed, solver, assign):
        if solver == "lobpcg":
            raise RuntimeError("lobpcg failed")
        return spectral(W, k, seed, solver, assign)

    monkeypatch.setattr(BS, "_spectral", flaky)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        None if name == "pyamg" else find_spec(name, *a)))
    rows = BS.run(quick=True, out_dir=tmp_path, n_images=1, size=64, repeat=1)
    by = {r["method"]: r for r in rows}
    assert not any("amg" in m for m in by)  # skipped without pyamg
    bad = by["SpectralClustering (lobpcg, cluster_qr)"]
    assert bad["failures"] == 1 and np.isnan(bad["time_s"]) and np.isnan(bad["ncut"])
    assert by["SpectralClustering (arpack, kmeans)"]["failures"] == 0
    text = (tmp_path / "segmentation_64px_quick.md").read_text()
    assert "configuration raised" in text


def test_bench_knn_records_max_n(monkeypatch, tmp_path):
    # a --max-n run was recorded as the full command; one below every size
    # ended in a StatisticsError after all its measurements
    from benchmarks import bench_knn as BK

    monkeypatch.setattr(BK, "SIZES", [(300, 2)])
    monkeypatch.setattr(BK, "_import_cost", lambda repeats: 0.01)
    BK.main(["--repeats", "1", "--max-n", "500", "--out", str(tmp_path)])
    text = (tmp_path / "knn.md").read_text()
    assert "`python -m benchmarks.bench_knn --repeats 1 --max-n 500`" in text
    assert "| 300 | 2 |" in text
    BK.main(["--repeats", "1", "--max-n", "100", "--out", str(tmp_path)])
    assert "| 300 | 2 |" not in (tmp_path / "knn.md").read_text()


def test_bench_matrix_free_warms_up_before_the_timed_fits(monkeypatch, tmp_path):
    # the first timed fit (polish=True) loaded the compiled kernels: on a
    # 1,500-sample fit, 10.2 s against 7.2 s for the same fit again
    pytest.importorskip("torch")
    from benchmarks import bench_matrix_free as MF

    calls = []
    monkeypatch.setattr(MF, "measure_pass", lambda n, device: (1.0, 1.0))
    monkeypatch.setattr(MF, "measure_fit", lambda n, device, polish=True: (
        calls.append((n, device, polish)) or (1.0, 2.0, 3, 0.1)))
    MF.main(["--sizes", "100", "--fit-size", "4000", "--out", str(tmp_path)])
    cpu = [c for c in calls if c[1] == "cpu"]
    assert cpu == [(500, "cpu", True), (4000, "cpu", True), (4000, "cpu", False)]
    assert "| cpu | 500 |" not in (tmp_path / "matrix_free.md").read_text()


def test_bench_peer_configs_on_a_small_graph(tmp_path):
    # METIS in both schemes and KaHIP's social modes against the recorded
    # peers, on one small graph
    pytest.importorskip("pymetis")
    pytest.importorskip("kahip")
    from benchmarks import bench_peer_configs as PC

    PC.main(["--graphs", "^davis-K2$", "--repeats", "1", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "peer_configs.json").read_text())["rows"]
    assert [r["graph"] for r in rows] == ["davis-K2"]
    r = rows[0]
    assert set(r["new"]) == {"metis-rb", "metis-kway", "kahip-fastsocial",
                             "kahip-ecosocial", "kahip-strongsocial"}
    assert r["new_config"]["metis-kway"]["scheme"] == "kway"
    assert r["new_config"]["kahip-ecosocial"]["mode"] == "ecosocial"
    assert r["new_best_ncut"] == min([r["old_best_ncut"]] + [
        v for v in r["new"].values() if v is not None])
    text = (tmp_path / "peer_configs.md").read_text()
    assert "| davis-K2 | 32 | 2 |" in text and "| **all** | 1 |" in text
    PC.main(["--rewrite", "--out", str(tmp_path)])  # the tables from the JSON
    assert (tmp_path / "peer_configs.md").read_text() == text


def test_a_selection_that_matches_nothing_writes_no_table(monkeypatch, tmp_path,
                                                          capsys):
    # `--only mosiacs` (bench_auto, bench_position) or a `--graphs` pattern
    # that matches no graph (bench_large, bench_peer_configs) wrote a table
    # with no row over the recorded one; bench_fm measured, then failed
    from benchmarks import bench_auto as BA
    from benchmarks import bench_fm as BF
    from benchmarks import bench_large as BL
    from benchmarks import bench_peer_configs as PC
    from benchmarks import bench_position as BP

    monkeypatch.setattr(BA, "run", lambda quick=False, only=None: [])
    monkeypatch.setattr(BP, "image_sets", lambda *a, **k: {})
    out = tmp_path / "table.md"
    for main, argv in [
            (BA.main, ["--only", "mosiacs", "--out", str(out)]),
            (BP.main, ["--quick", "--only", "mosiacs", "--out", str(out)]),
            (BL.main, ["--study", "metis", "--graphs", "^nomatch$",
                       "--out", str(tmp_path)]),
            (PC.main, ["--graphs", "^nomatch$", "--out", str(tmp_path)]),
            (BF.main, ["--families", "scale", "--out", str(tmp_path)])]:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert "match" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_bench_dinov2_refuses_an_unknown_part(monkeypatch, capsys):
    # `--only speeed` ran no part and wrote a table of none ("Total wall
    # time: 0 s.") over benchmarks/results/dinov2.md
    from benchmarks import bench_dinov2 as BD

    def boom(*args, **kwargs):
        raise AssertionError("the benchmark started")

    monkeypatch.setattr(BD.D, "ensure_checkpoint", boom)
    for only in ("speeed", "speed,fersh", ","):
        with pytest.raises(SystemExit) as exc:
            BD.main(["--only", only])
        assert exc.value.code == 2
        assert "unknown parts" in capsys.readouterr().err


def test_bench_dinov2_one_part_writes_to_out(monkeypatch, tmp_path):
    # `--only speed --out FILE` ignored --out and wrote
    # benchmarks/results/dinov2_speed.md, the recorded table
    from benchmarks import bench_dinov2 as BD

    monkeypatch.setattr(BD.D, "ensure_checkpoint", lambda *a, **k: "ck.safetensors")
    monkeypatch.setattr(BD, "speed", lambda ck, repeats: (["| speed table |"], {}))
    monkeypatch.setattr(BD, "RESULTS", tmp_path / "results")  # must stay unwritten
    out = tmp_path / "speed.md"
    assert BD.main(["--only", "speed", "--repeats", "1", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| speed table |" in text
    assert "bench_dinov2 --only speed --repeats 1`" in text
    assert not (tmp_path / "results").exists()


def test_bench_segmentation_records_out_dir(monkeypatch, tmp_path):
    # a table written with --out-dir recorded its command without it (the
    # reruns of seeds/seed1 say `... --seed 1`, which writes over the seed-0
    # segmentation.md), and `--quick --out-dir benchmarks/results` (relative)
    # wrote segmentation.md, not segmentation_quick.md
    from benchmarks import bench_segmentation as BS

    results = tmp_path / "benchmarks" / "results"
    monkeypatch.setattr(BS, "RESULTS", results / "segmentation.md")
    monkeypatch.chdir(tmp_path)
    rows = [dict(method=m, miou=0.5, miou_pamr=0.5, ncut=0.1, n_segments=3.0,
                 time_s=0.01, failures=0)
            for m in ("Falcon (FalconNCut)", "SpectralClustering (arpack, kmeans)",
                      "skimage cut_normalized (SLIC RAG, thresh=0.05)")]
    kw = dict(n_images=2, size=64, n_tokens=64, feat_time=0.0, true_k=3.0,
              repeat=3, extractor="X", power=3.0)

    def command(path):
        return path.read_text().split("Command: `")[1].split("`")[0]

    path = BS._write(rows, quick=False, out_dir=results / "seeds" / "seed1",
                     seed=1, **kw)
    assert command(path) == ("python -m benchmarks.bench_segmentation --seed 1 "
                             "--out-dir benchmarks/results/seeds/seed1")
    path = BS._write(rows, quick=True, out_dir="benchmarks/results", seed=0, **kw)
    assert path.name == "segmentation_quick.md"
    assert command(path) == "python -m benchmarks.bench_segmentation --quick"
    path = BS._write(rows, quick=False, out_dir=None, seed=0, **kw)
    assert path == results / "segmentation.md"
    assert command(path) == "python -m benchmarks.bench_segmentation"


def test_bench_image_scale_records_its_options(monkeypatch, tmp_path):
    # the table said `python -m benchmarks.bench_image_scale` whatever
    # --sizes, --repeat and --no-cli were
    from benchmarks import bench_image_scale as IS

    monkeypatch.setattr(IS, "measure", lambda h, w, repeat: dict(
        h=h, w=w, image_bytes=3 * h * w, label_bytes=8 * h * w, working=1 << 20,
        seconds=0.5))
    out = tmp_path / "image_scale.md"
    IS.main(["--sizes", "64,128", "--repeat", "1", "--no-cli", "--out", str(out)])
    text = out.read_text()
    assert ("Command: `python -m benchmarks.bench_image_scale --sizes 64,128 "
            f"--repeat 1 --no-cli --out {out}`") in text
    assert "| 64x64 |" in text and "| 128x128 |" in text and "12 MP" not in text


def test_bench_compile_records_its_options(monkeypatch, tmp_path):
    # the table said `python -m benchmarks.bench_compile --repeats R`
    # whatever --no-prebuild and --out were
    from benchmarks import bench_compile as BC

    run = dict(first_fit_s=[1.0, 0.9], second_fit_s=0.1, import_s=[0.2, 0.2],
               sklearn=0.3, falcon=0.1, spectral_after=0.1, modules={"torch": False},
               stderr="", compiles=[], parts={"lower": 0.5}, fit=1.0,
               numba_import=0.2)
    monkeypatch.setattr(BC, "_child", lambda *args, **kwargs: dict(run))
    out = tmp_path / "compile.md"
    BC.main(["--repeats", "1", "--no-prebuild", "--out", str(out)])
    assert (f"with `python -m benchmarks.bench_compile --repeats 1 --no-prebuild "
            f"--out {out}` on a shared") in out.read_text()
    args = BC.argparse.Namespace(repeats=3, no_prebuild=False, baseline=[],
                                 out=str(BC.RESULTS / "compile.md"))
    assert BC._command(args) == "python -m benchmarks.bench_compile --repeats 3"


def test_bench_dask_writes_and_records_its_out(monkeypatch, tmp_path):
    # it had no --out: --quick always wrote over the tracked
    # benchmarks/results/quick/dask.*, and its table named no folder
    from benchmarks import bench_dask as BD

    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "times.json").write_text("{}")
    monkeypatch.setattr(BD, "run_part", lambda name, d, mode, reuse=False: {})
    got = {}
    monkeypatch.setattr(BD, "report", lambda *args, out=None: got.update(out=out))
    BD.main(["--quick", "--keep", str(keep), "--out", str(tmp_path / "o")])
    assert got["out"] == str(tmp_path / "o")
    assert (BD.command("quick", tmp_path / "o")
            == f"python -m benchmarks.bench_dask --quick --out {tmp_path / 'o'}")
    assert BD.command("quick", BD.RESULTS / "quick") == (
        "python -m benchmarks.bench_dask --quick")
    assert BD.command("full", BD.RESULTS) == "python -m benchmarks.bench_dask"
    assert BD.command("full", BD.RESULTS / "quick") == (
        "python -m benchmarks.bench_dask --out benchmarks/results/quick")


def test_bench_fm_warm_up_reaches_the_kernels_of_its_graphs():
    # its warm-up (an SBM) never moved a node by flows nor counted the
    # weights to own clusters: with an empty Numba cache the first pixel
    # graph's timed fits compiled move_nodes_csr and _own_weights_ser
    # (old: 1.2 s, new/old 0.04 on davis)
    code = """
import sys
from benchmarks import bench_fm as BF
from sklearn_falcon._backends._numba import _csr, _flow
BF._warm_up(*BF._variants("fm"))
print(len(_flow.move_nodes_csr.signatures), len(_csr._own_weights_ser.signatures))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1],
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    called = [int(x) for x in out.stdout.split()]
    assert len(called) == 2 and min(called) > 0, out.stdout


def test_bench_quality_times_no_first_fit_of_falcon(monkeypatch):
    # Falcon's first fit on each graph was timed: with an empty Numba cache
    # it compiled its kernels inside the first seed's time (all of the time
    # of a --seeds 1 run)
    from benchmarks import bench_quality as BQ

    W, y = G.sbm_graph(300, 3, avg_degree=15, p_in_ratio=0.9, seed=0)
    monkeypatch.setattr(BQ, "quality_graphs", lambda quick: [
        ("a", W, y, 3), ("b", W, y, 2)])
    timing, fits = [False], []

    def timed(fn):
        timing[0] = True
        try:
            return fn(), 0.1
        finally:
            timing[0] = False

    class Falcon:
        def __init__(self, n_clusters, **kw):
            self.k = n_clusters

        def fit(self, W):
            fits.append((self.k, timing[0]))
            self.ncut_ = 0.5
            return self

        def fit_predict(self, W):
            return self.fit(W) and y % self.k

    monkeypatch.setattr(BQ, "_timed", timed)
    monkeypatch.setattr(BQ, "FalconNCut", Falcon)
    monkeypatch.setattr(BQ, "SpectralClustering", lambda n_clusters, **kw: (
        type("S", (), {"fit_predict": lambda self, W: y % n_clusters})()))
    BQ.run(seeds=1)
    assert fits == [(3, False), (3, True), (2, False), (2, True)]


def test_write_docs_reproduces_the_committed_page(tmp_path):
    # `python -m benchmarks.run --write-docs` assembles docs/benchmarks.rst
    # from benchmarks/results/; its header (run.DOCS_HEADER) had fallen
    # behind hand edits of the page, so the documented command dropped two
    # paragraphs of it (arpack, METIS and KaHIP in the peer benchmark)
    R.write_docs(docs_dir=tmp_path)
    root = Path(__file__).resolve().parents[1]
    assert (tmp_path / "benchmarks.rst").read_text() == \
        (root / "docs" / "benchmarks.rst").read_text()


def test_bench_select_n_segments_warms_up_before_the_clock(monkeypatch, capsys):
    # the first K timed (100 by default) included the loading of the
    # compiled kernels: K=10 then K=30 took 1.575 s and 0.020 s
    import time

    import sklearn_falcon.image as image
    from benchmarks import bench_select_n_segments as SN

    calls = []

    def select(W, labels):
        if not calls:
            time.sleep(0.5)  # the first call of a process: kernels loaded
        calls.append(W.shape[0])
        return 3, None

    monkeypatch.setattr(image, "select_n_segments", select)
    SN.main(["10"])
    assert len(calls) == 2
    seconds = float(capsys.readouterr().out.split()[-2])
    assert seconds < 0.25


def test_peers_left_out_for_a_missing_package_are_named(monkeypatch, tmp_path):
    # without pyamg (or ncut-pytorch) the run suites and bench_segmentation
    # dropped those peers from their tables without a word: the scaling
    # suite then compared Falcon with the recursive NCut alone
    from benchmarks import bench_segmentation as BS

    monkeypatch.setattr(P, "_amg_available", lambda: False)
    monkeypatch.setattr(P, "ncut_pytorch_available", lambda: False)
    assert not any("amg" in name for name in P.get_peers())
    assert P.missing_peers(include=["falcon", "sc-amg-cluster_qr", "rncut"]) == [
        "sc-amg-cluster_qr (pyamg is not installed)"]
    assert P.missing_peers(include=["ncut-pytorch"]) == [
        "ncut-pytorch (ncut-pytorch or torch is not installed)"]
    assert P.missing_peers(include=["sc-amg-*"], exclude=["sc-amg-kmeans"]) == [
        "sc-amg-discretize (pyamg is not installed)",
        "sc-amg-cluster_qr (pyamg is not installed)"]
    res = R.suite_bound("smoke", tmp_path)
    note = [n for n in res.notes if n.startswith("Peers not run")]
    assert len(note) == 1 and "sc-amg-cluster_qr (pyamg is not installed)" in note[0]
    assert "ncut-pytorch" not in note[0]  # the bound suite never runs it
    monkeypatch.setattr(P, "_amg_available", lambda: True)
    res = R.suite_bound("smoke", tmp_path)
    assert not any(n.startswith("Peers not run") for n in res.notes)

    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: (
        None if name == "pyamg" else find_spec(name, *a)))
    rows = [dict(method=m, miou=0.5, miou_pamr=0.5, ncut=0.1, n_segments=3.0,
                 time_s=0.01, failures=0)
            for m in ("Falcon (FalconNCut)", "SpectralClustering (arpack, kmeans)",
                      "skimage cut_normalized (SLIC RAG, thresh=0.05)")]
    path = BS._write(rows, quick=False, out_dir=tmp_path, seed=0, n_images=2,
                     size=64, n_tokens=64, feat_time=0.0, true_k=3.0, repeat=3,
                     extractor="X", power=3.0)
    assert "`eigen_solver='amg'` not run: pyamg is not installed" in path.read_text()


def test_bench_dinov2_tables_record_its_command(monkeypatch, tmp_path):
    # the mosaic tables of bench_dinov2 (dinov2_mosaics*.md) named a
    # bench_mosaics command of features that only bench_dinov2 registers
    # (`--features dinov2 key L7`, unquoted), and `--only heldout` (or
    # mosaics) recorded dinov2.md as made by the whole run
    from benchmarks import bench_dinov2 as BD
    from benchmarks import bench_mosaics as BM

    fname = BD._name(BD.DEFAULT_FEATURE, BD.DEFAULT_LAYER)
    got = {}

    def fake_run(**kw):
        got.update(kw)
        rows = [dict(method=m, miou=0.5) for m in (
            BM.DEFAULT, f"Falcon on '{fname}' tokens", f"{BD.SPECTRAL} on '{fname}' "
            "tokens")]
        return rows, tmp_path / "dinov2_mosaics_seed1.md"

    monkeypatch.setattr(BD.D, "ensure_checkpoint", lambda *a, **k: "ck.safetensors")
    monkeypatch.setattr(BD, "register", lambda ck, layers: ((fname,), None))
    monkeypatch.setattr(BD.B, "run", fake_run)
    out = tmp_path / "dinov2.md"
    assert BD.main(["--only", "heldout", "--n-images", "2", "--out", str(out)]) == 0
    command = "python -m benchmarks.bench_dinov2 --only heldout --n-images 2"
    assert got["command"] == command
    assert f"Command: `{command}`." in out.read_text()
    rows = [dict(method=m, miou=0.5, time_s=0.1, n_segments=3.0, failures=0,
                 per_image=[0.5]) for m in (BM.DEFAULT, "Falcon on 'a b' tokens")]
    kw = dict(n_images=2, size=256, seed=0, features=("a b",), thresholds=(0.01,),
              true_k=3.0, quick=False)
    text = BM._write(rows, out=tmp_path / "m.md", **kw).read_text()
    assert "--features 'a b' --thresholds 0.01`" in text
    text = BM._write(rows, out=tmp_path / "m.md", command="python -m x", **kw
                     ).read_text()
    assert "Command: `python -m x`" in text


def test_bench_large_writes_no_table_without_a_row(tmp_path, capsys):
    # `--k` above a quarter of every selected graph's nodes measured no row
    # and wrote a table without one over the recorded many_clusters.md
    from benchmarks import bench_large as BL

    with pytest.raises(SystemExit) as exc:
        BL.main(["--study", "metis", "--graphs", "^davis-K2$", "--k", "100",
                 "--out", str(tmp_path)])
    assert exc.value.code == 2 and "--k 100" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_smoke_segmentation_suite_is_tiny(monkeypatch, tmp_path):
    # `--smoke` ("tiny sizes, < 3 minutes") ran bench_segmentation at its
    # --quick size (8 images, 3 repeats): 134 s of a 334 s smoke run
    from benchmarks import bench_segmentation as BS

    got = []
    monkeypatch.setattr(BS, "run", lambda quick=False, out_dir=None, seed=0,
                        size=None, n_images=None, repeat=3: got.append(
                            dict(quick=quick, n_images=n_images, repeat=repeat)))
    R.suite_segmentation("smoke", tmp_path)
    R.suite_segmentation("quick", tmp_path)
    assert got == [dict(quick=True, n_images=2, repeat=1),
                   dict(quick=True, n_images=None, repeat=3)]


def test_out_in_a_new_folder_is_written(monkeypatch, tmp_path):
    # `--out new/table.md` measured everything, then failed to write
    # (FileNotFoundError), as gpu_check.py did
    from benchmarks import bench_dinov2 as BD
    from benchmarks import bench_image_scale as IS
    from benchmarks import bench_position as BP
    from benchmarks import bench_quality as BQ
    from benchmarks import bench_warm_video as WV

    monkeypatch.setattr(IS, "measure", lambda h, w, repeat: dict(
        h=h, w=w, image_bytes=1, label_bytes=1, working=1, seconds=0.5))
    monkeypatch.setattr(BQ, "run", lambda quick=False, seeds=3: [])
    monkeypatch.setattr(WV, "run_warm", lambda quick, repeat: [])
    monkeypatch.setattr(WV, "run_video", lambda quick, seed: ([], (2, 64)))
    monkeypatch.setattr(BP, "run", lambda weights, **kw: {("set", w): 0.5
                                                          for w in weights})
    monkeypatch.setattr(BD.D, "ensure_checkpoint", lambda *a, **k: "ck")
    monkeypatch.setattr(BD, "speed", lambda ck, repeats: (["| speed |"], {}))
    for i, (main, argv) in enumerate([
            (IS.main, ["--sizes", "64", "--no-cli"]), (BQ.main, ["--quick"]),
            (WV.main, ["--quick"]), (BP.main, ["--quick"]),
            (BD.main, ["--only", "speed"])]):
        out = tmp_path / f"new{i}" / "table.md"
        main(argv + ["--out", str(out)])
        assert out.stat().st_size > 0
