"""The Dask backend on a sharded graph: the same answer as one machine, a
client that holds little, time per iteration, and a graph larger than a
worker's memory.

Usage::

    python -m benchmarks.bench_dask            # 600k-node SBM, 6 shards (~10 min)
    python -m benchmarks.bench_dask --quick    # 60k nodes -> benchmarks/results/quick/
    python -m benchmarks.bench_dask --keep DIR # keep the parts' results in DIR
                                               # and reuse those found there
    python -m benchmarks.bench_dask --quick --out DIR  # the tables in DIR

Writes ``dask.md`` (and ``.rst``, ``.json``) to ``benchmarks/results/``
(``--quick``: ``benchmarks/results/quick/``) or ``--out``.
Every part runs in a fresh subprocess, so that the memory of one does not
weigh on the next; the shards are ``.npz`` files read by the workers
(``scipy.sparse.load_npz`` inside ``dask.delayed``), never by the client.
The cluster is a ``LocalCluster`` of worker processes with one thread each;
the Numba backend runs in the same machine, so the timings are ratios taken
side by side (interleaved repeats, medians).  The machine may be shared.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from . import graphs as G
from ._report import RESULTS, PeakMemory, SuiteResult, Table, csr_bytes, machine_info

SIZES = {
    "full": dict(n=600_000, K=10, degree=10, p_in=0.8, shards=6, repeats=3,
                 ooc_n=2_000_000, ooc_K=4, ooc_degree=40, ooc_shards=24,
                 ooc_limit=800e6),
    "quick": dict(n=60_000, K=10, degree=10, p_in=0.8, shards=6, repeats=2,
                  ooc_n=100_000, ooc_K=4, ooc_degree=20, ooc_shards=8,
                  ooc_limit=None),
}


# ================================================================== helpers
def shard_bounds(n, shards):
    return np.linspace(0, n, shards + 1).astype(np.int64)


def write_shards(W, shards, folder):
    """``W`` as ``shards`` uncompressed ``.npz`` row blocks."""
    b = shard_bounds(W.shape[0], shards)
    for s, (lo, hi) in enumerate(zip(b[:-1], b[1:])):
        sp.save_npz(folder / f"shard{s}.npz", W[lo:hi], compressed=False)


def read_shards(folder, n, shards, dtype=np.float64):
    """The shards as a Dask array; each block is read by the worker that
    needs it."""
    import dask
    import dask.array as da

    b = shard_bounds(n, shards)
    return da.concatenate([
        da.from_delayed(dask.delayed(sp.load_npz)(str(folder / f"shard{s}.npz")),
                        shape=(int(hi - lo), n), dtype=dtype,
                        meta=sp.csr_matrix((0, 0), dtype=dtype))
        for s, (lo, hi) in enumerate(zip(b[:-1], b[1:]))])


def load_all(folder, shards):
    return sp.vstack([sp.load_npz(folder / f"shard{s}.npz") for s in range(shards)],
                     format="csr")


def cluster(n_workers, memory_limit=None):
    from distributed import LocalCluster

    return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                        dashboard_address=":0", memory_limit=memory_limit or "auto")


def warm_workers():
    """Load the kernels in the workers (and here) before timing."""
    import dask.array as da

    from sklearn_falcon import FalconNCut

    W, _ = G.sbm_graph(3000, 3, avg_degree=10, seed=1)
    X = da.from_array(W, chunks=(1000, 3000), asarray=False)
    FalconNCut(3, affinity="precomputed", random_state=0).fit(X)
    FalconNCut(3, affinity="precomputed", init="random", random_state=0).fit(X)


def fit_row(est, seconds, peak_mb=None):
    info = getattr(est, "_dask_info", {})
    return {"ncut": float(est.ncut_), "seconds": seconds, "n_iter": int(est.n_iter_),
            "f_steps": len(est.objective_path_), "peak_mb": peak_mb,
            "levels": info.get("levels"), "persisted": info.get("persisted"),
            "init_s": info.get("init_s"), "solve_s": info.get("solve_s"),
            "setup_s": info.get("setup_s")}


class WorkerMemory:
    """The largest resident set of each worker, polled every 0.2 s."""

    def __init__(self, client):
        self.client = client
        self.peak = {}
        self._stop = threading.Event()

    @staticmethod
    def _rss():
        import psutil

        return psutil.Process().memory_info().rss

    def _poll(self):
        while not self._stop.is_set():
            try:
                for addr, v in self.client.run(self._rss).items():
                    self.peak[addr] = max(self.peak.get(addr, 0), v)
            except Exception:  # a worker restarting
                pass
            self._stop.wait(0.2)

    def __enter__(self):
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# ==================================================================== parts
def part_write(d, cfg):
    W, y = G.sbm_graph(cfg["n"], cfg["K"], avg_degree=cfg["degree"],
                       p_in_ratio=cfg["p_in"], seed=0)
    write_shards(W, cfg["shards"], d)
    rng = np.random.default_rng(1)
    y0 = np.where(rng.random(y.size) < 0.5, rng.integers(cfg["K"], size=y.size), y)
    np.save(d / "y.npy", y)
    np.save(d / "y0.npy", y0)
    return {"n": W.shape[0], "nnz": int(W.nnz), "csr_mb": csr_bytes(W) / 2**20}


def part_single(d, cfg):
    from sklearn_falcon import FalconNCut

    W = load_all(d, cfg["shards"])
    y0 = np.load(d / "y0.npy")
    FalconNCut(cfg["K"], affinity="precomputed", backend="numba",
               random_state=0).fit(W[:3000][:, :3000])  # compile
    out = {}
    for name, kw in [("default", {}), ("start", dict(init=y0, polish=False)),
                     ("start_polish", dict(init=y0))]:
        t = time.perf_counter()
        est = FalconNCut(cfg["K"], affinity="precomputed", backend="numba",
                         random_state=0, **kw).fit(W)
        out[name] = fit_row(est, time.perf_counter() - t)
        np.save(d / f"single_{name}.npy", est.labels_)
    return out


def part_dask(d, cfg, meta):
    import dask
    from distributed import Client

    from sklearn_falcon import FalconNCut

    y0 = np.load(d / "y0.npy")
    out = {}
    with cluster(2) as cl, Client(cl):
        warm_workers()
        X = read_shards(d, meta["n"], cfg["shards"])
        # default: the start is made on one worker when the graph has at most
        # 8M entries; "coarsened": forced to coarsen on the cluster first
        runs = [("coarsened", {}, int(0.9 * meta["nnz"])), ("default", {}, None),
                ("start", dict(init=y0, polish=False), None),
                ("start_polish", dict(init=y0), None)]
        for name, kw, max_entries in runs:
            conf = ({"sklearn_falcon.dask.coarse_max_entries": max_entries}
                    if max_entries else {})
            with dask.config.set(conf), PeakMemory() as pm:
                t = time.perf_counter()
                est = FalconNCut(cfg["K"], affinity="precomputed", random_state=0,
                                 **kw).fit(X)
                seconds = time.perf_counter() - t
            out[name] = fit_row(est, seconds, pm.peak_mb)
            np.save(d / f"dask_{name}.npy", est.labels_)
    return out


def _transferred(client):
    def sent(dask_worker):
        return dask_worker.transfer_outgoing_bytes_total

    return sum(client.run(sent).values())


def part_scaling(d, cfg, meta):
    """Time per iteration of the same solve (same start, no polish): Numba on
    1 and 2 threads, Dask on 1 and 2 workers (1 thread each), interleaved."""
    from distributed import Client

    from sklearn_falcon._backends import make_problem
    from sklearn_falcon._backends._dask import DaskProblem, ShardedGraph
    from sklearn_falcon._solver import SolverOptions, solve
    from sklearn_falcon._threads import fit_threads

    W = load_all(d, cfg["shards"])
    y0 = np.load(d / "y0.npy")
    K = cfg["K"]
    opt = SolverOptions(polish=False)
    with fit_threads(1):
        solve(make_problem(W[:3000][:, :3000], K), y0[:3000], opt)
    rows = {k: [] for k in ("numba_1", "numba_2", "dask_1", "dask_2")}
    moved = {}
    with cluster(1) as c1, cluster(2) as c2, Client(c1) as a, Client(c2) as b:
        graphs = {}
        for name, client in (("dask_1", a), ("dask_2", b)):
            with client.as_current():
                warm_workers()
                graphs[name] = ShardedGraph.from_dask(
                    read_shards(d, meta["n"], cfg["shards"]), persist=True)
        for _ in range(cfg["repeats"]):
            for threads in (1, 2):
                with fit_threads(threads):
                    t = time.perf_counter()
                    res = solve(make_problem(W, K), y0, opt)
                    rows[f"numba_{threads}"].append(
                        ((time.perf_counter() - t), int(res.n_iter[0])))
            for name, client in (("dask_1", a), ("dask_2", b)):
                with client.as_current():
                    P = DaskProblem(graphs[name], K)
                    sent = _transferred(client)
                    t = time.perf_counter()
                    res = solve(P, y0, opt)
                    rows[name].append(((time.perf_counter() - t), int(res.n_iter[0])))
                    moved[name] = (_transferred(client) - sent) / int(res.n_iter[0])
    out = {}
    for name, runs in rows.items():
        per_iter = [s / it for s, it in runs]
        out[name] = {"seconds": float(np.median([s for s, _ in runs])),
                     "n_iter": runs[0][1], "per_iter": float(np.median(per_iter)),
                     "best": float(np.min(per_iter)),
                     "runs": [round(s, 3) for s, _ in runs],
                     "bytes_per_iter": moved.get(name)}
    return out


def part_ooc(d, cfg):
    """A graph larger than one worker's memory_limit, streamed from its
    shards; the single-machine NCut for reference."""
    import dask
    from distributed import Client

    from sklearn_falcon import FalconNCut

    W, y = G.sbm_graph(cfg["ooc_n"], cfg["ooc_K"], avg_degree=cfg["ooc_degree"],
                       p_in_ratio=cfg["p_in"], seed=2)
    n, nnz, mb = W.shape[0], int(W.nnz), csr_bytes(W) / 2**20
    write_shards(W, cfg["ooc_shards"], d)
    t = time.perf_counter()
    ref = FalconNCut(cfg["ooc_K"], affinity="precomputed", backend="numba",
                     random_state=0).fit(W)
    ref_s = time.perf_counter() - t
    del W
    limit = cfg["ooc_limit"]
    conf = {} if limit else {"sklearn_falcon.dask.persist": False}
    with cluster(2, limit) as cl, Client(cl) as client, dask.config.set(conf):
        warm_workers()
        limit = min(w["memory_limit"] for w in
                    client.scheduler_info()["workers"].values())
        X = read_shards(d, n, cfg["ooc_shards"])
        with WorkerMemory(client) as wm:
            t = time.perf_counter()
            est = FalconNCut(cfg["ooc_K"], affinity="precomputed",
                             random_state=0).fit(X)
            seconds = time.perf_counter() - t
    row = fit_row(est, seconds)
    row.update(n=n, nnz=nnz, csr_mb=mb, limit_mb=limit / 2**20,
               worker_peak_mb=[v / 2**20 for v in wm.peak.values()],
               single_ncut=float(ref.ncut_), single_s=ref_s)
    return row


PARTS = {"write": part_write, "single": part_single, "dask": part_dask,
         "scaling": part_scaling, "ooc": part_ooc}


def run_part(name, d, mode, reuse=False):
    """Run a part in a fresh interpreter; its result comes back as JSON."""
    out = d / f"{name}.json"
    if reuse and out.exists():
        return json.loads(out.read_text())
    cmd = [sys.executable, "-m", "benchmarks.bench_dask", "--part", name,
           "--dir", str(d), "--mode", mode]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[1])
    seconds = time.perf_counter() - t
    print(f"[bench_dask] {name}: {seconds:.0f} s", flush=True)
    times = d / "times.json"
    spent = json.loads(times.read_text()) if times.exists() else {}
    spent[name] = seconds
    times.write_text(json.dumps(spent))
    return json.loads(out.read_text())


# ================================================================== report
def _diff(d, a, b, renamed=False):
    """Labels that differ between two saved fits; ``renamed``: after the best
    renaming of the clusters of ``b`` (two fits from different starts may
    number the same clusters differently)."""
    x, y = np.load(d / f"{a}.npy"), np.load(d / f"{b}.npy")
    if not renamed:
        return int(np.count_nonzero(x != y))
    from scipy.optimize import linear_sum_assignment

    C = sp.coo_matrix((np.ones(x.size), (x, y))).toarray()
    r, c = linear_sum_assignment(-C)
    return int(x.size - C[r, c].sum())


def command(mode, out):
    """The command that writes the tables again: ``--quick``, and ``--out``
    for a folder other than the mode's own (relative to the repository when
    inside it)."""
    words = ["python -m benchmarks.bench_dask"] + (["--quick"] if mode == "quick"
                                                   else [])
    out = Path(out).resolve()
    if out != default_out(mode):
        root = RESULTS.parent.parent
        words += ["--out", shlex.quote(str(out.relative_to(root)
                                           if out.is_relative_to(root) else out))]
    return " ".join(words)


def default_out(mode):
    return RESULTS / "quick" if mode == "quick" else RESULTS


def report(d, cfg, mode, meta, single, dsk, scal, ooc, elapsed, out=None):
    out = default_out(mode) if out is None else Path(out)
    K, n = cfg["K"], meta["n"]
    res = SuiteResult(
        "dask", f"Dask backend: a {n:,}-node SBM in {cfg['shards']} shards, "
        "2-worker LocalCluster",
        intro=(f"SBM with K={K}, mean degree {cfg['degree']}, p_in={cfg['p_in']} "
               f"(nodes in random order), {meta['nnz']:,} stored entries, CSR "
               f"{meta['csr_mb']:.0f} MB, written as {cfg['shards']} `.npz` row "
               "shards read by the workers. Cluster: `LocalCluster(n_workers=2, "
               "threads_per_worker=1, processes=True)` on the same 2-core machine "
               "as the Numba runs (shared with other jobs: read the ratios). "
               f"Command: `{command(mode, out)}`."))
    s, q = single["default"], dsk["coarsened"]
    rel = q["ncut"] / s["ncut"] - 1
    res.target("NCut within 1% of the single-machine fit (default init; Dask "
               "start coarsened on the cluster)",
               f"{q['ncut']:.5f} vs {s['ncut']:.5f} ({100 * rel:+.3f}%)",
               abs(rel) <= 0.01)
    d_start = _diff(d, "single_start", "dask_start")
    res.target("same start, no polish: the same labels",
               f"{d_start} of {n:,} labels differ", d_start == 0)
    d_pol = _diff(d, "single_start_polish", "dask_start_polish")
    res.target("same start with polish: differences explained",
               f"{d_pol} labels differ; NCut {dsk['start_polish']['ncut']:.10f} "
               f"(Dask) vs {single['start_polish']['ncut']:.10f} (blockwise vs "
               "sequential sweeps, see notes)", None)
    peak = max(r["peak_mb"] for r in dsk.values())
    res.target("client peak memory growth during fit < half the CSR size",
               f"{peak:.0f} MB vs CSR/2 = {meta['csr_mb'] / 2:.0f} MB",
               peak < meta["csr_mb"] / 2)
    r1 = scal["dask_1"]["best"] / scal["numba_1"]["best"]
    r2 = scal["dask_2"]["best"] / scal["numba_2"]["best"]
    res.target("time per iteration at 1 and 2 workers vs Numba (ratio of the "
               "fastest runs, one run)",
               f"Dask 1 worker / Numba 1 thread = {r1:.2f}; Dask 2 workers / Numba "
               f"2 threads = {r2:.2f}; Dask 2 workers / 1 worker = "
               f"{scal['dask_2']['best'] / scal['dask_1']['best']:.2f}", None)
    if ooc["limit_mb"] < ooc["csr_mb"]:
        res.target("a graph larger than a worker's memory_limit fits",
                   f"CSR {ooc['csr_mb']:.0f} MB > memory_limit "
                   f"{ooc['limit_mb']:.0f} MB; streamed={not ooc['persisted']}; "
                   f"NCut {ooc['ncut']:.4f} vs one machine {ooc['single_ncut']:.4f}",
                   (not ooc["persisted"]) and ooc["ncut"] <= ooc["single_ncut"] * 1.01)

    fits = Table("Fits (labels compared with the single-machine fit of the same row)",
                 ["fit", "backend", "NCut", "time [s]", "n_iter", "client peak MB",
                  "levels (n, nnz)", "labels differing"])
    for name, title in [("default", "default init"), ("coarsened", "default init"),
                        ("start", "same start, polish=False"),
                        ("start_polish", "same start, polish=True")]:
        if name in single:
            r = single[name]
            fits.add(**{"fit": title, "backend": "numba", "NCut": r["ncut"],
                        "time [s]": r["seconds"], "n_iter": r["n_iter"]})
        r = dsk[name]
        other = "single_default" if name == "coarsened" else f"single_{name}"
        fits.add(**{"fit": title + (" (coarsened on the cluster)"
                                    if name == "coarsened" else ""),
                    "backend": "dask", "NCut": r["ncut"], "time [s]": r["seconds"],
                    "n_iter": r["n_iter"], "client peak MB": r["peak_mb"],
                    "levels (n, nnz)": str(r["levels"]),
                    "labels differing": _diff(d, other, f"dask_{name}",
                                              renamed=not name.startswith("start"))})
    res.tables.append(fits)
    sc = Table(f"Time per iteration, same start, polish=False ({cfg['repeats']} "
               "interleaved runs; the fastest, and the median)",
               ["run", "runs [s]", "n_iter", "s / iteration (fastest)",
                "s / iteration (median)", "vs Numba, same cores (fastest)",
                "MB between workers / iteration"])
    for name, label in [("numba_1", "Numba, 1 thread"), ("numba_2", "Numba, 2 threads"),
                        ("dask_1", "Dask, 1 worker x 1 thread"),
                        ("dask_2", "Dask, 2 workers x 1 thread")]:
        r = scal[name]
        base = scal["numba_" + name[-1]]["best"]
        b = r["bytes_per_iter"]
        sc.add(**{"run": label, "runs [s]": ", ".join(map(str, r["runs"])),
                  "n_iter": r["n_iter"], "s / iteration (fastest)": r["best"],
                  "s / iteration (median)": r["per_iter"],
                  "vs Numba, same cores (fastest)": r["best"] / base,
                  "MB between workers / iteration": None if b is None else b / 2**20})
    res.tables.append(sc)
    oc = Table("Out of core: a graph larger than a worker's memory_limit",
               ["n", "nnz", "CSR MB", "memory_limit MB (per worker)", "streamed",
                "worker peak RSS MB", "NCut", "one machine NCut", "time [s]",
                "one machine [s]", "levels (n, nnz)"])
    oc.add(**{"n": ooc["n"], "nnz": ooc["nnz"], "CSR MB": ooc["csr_mb"],
              "memory_limit MB (per worker)": ooc["limit_mb"],
              "streamed": not ooc["persisted"],
              "worker peak RSS MB": ", ".join(f"{v:.0f}" for v in
                                              ooc["worker_peak_mb"]),
              "NCut": ooc["ncut"], "one machine NCut": ooc["single_ncut"],
              "time [s]": ooc["seconds"], "one machine [s]": ooc["single_s"],
              "levels (n, nnz)": str(ooc["levels"])})
    res.tables.append(oc)
    res.notes += NOTES
    res.elapsed = elapsed
    res.write(out, machine_info(), mode)
    print(f"[bench_dask] wrote {out / 'dask.md'}")


NOTES = [
    "**Same start.** Without polish the Dask solve takes the steps of the Numba "
    "solve: each pass over W is exact (a fresh pass, not incremental updates), and "
    "on this unweighted graph every degree, volume and association is an integer, "
    "so the scores are bit-identical whatever the order of the sums. With polish the "
    "final sweeps differ by design: one machine sweeps the nodes one after another, "
    "Dask sweeps every block at once with the other blocks fixed and keeps the "
    "combined moves only if f rises (else the best block's moves alone), so other "
    "single-node moves are found; the labels that differ are those moves.",
    "**Client memory** is the growth of the client process's resident set during "
    "`fit` (its high-water mark, reset before each fit); the scheduler runs in the "
    "same process. The client builds task graphs and holds O(K) numbers per step; "
    "the labels (n int64) come back at the end.",
    "**Time per iteration.** After its first pass the Numba backend updates WX from "
    "the rows of the nodes that moved; the Dask backend makes a fresh pass over "
    "every block at each trial step and sends the labels of all nodes to every task "
    "(int16: 2 bytes a node), which is the traffic between workers reported. On this "
    "shared 2-core machine the two worker processes and the client compete with "
    "other jobs for the cores, and Dask's work stealing then moves blocks between "
    "workers: the 2-worker times are an upper bound.",
    "**Start at scale.** The nodes are in random order, so a shard holds 1/6 of each "
    "node's edges: the blockwise matching (each shard pairs its own nodes) sheds few "
    "entries per level; the coarsened fit's start is made on one worker at the first "
    "level under its limit. The out-of-core graph (24 shards, 1/24 of the edges each) "
    "stops coarsening at once, since its first coarse level would not fit the workers' "
    "memory: its start is random labels, with a warning, from which Falcon reaches the "
    "planted partition, as one machine does.",
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--part", choices=sorted(PARTS))
    ap.add_argument("--dir")
    ap.add_argument("--mode", default="full")
    ap.add_argument("--out", metavar="DIR", help="write the tables in DIR "
                    "(default: benchmarks/results/, --quick: its quick/)")
    ap.add_argument("--keep", metavar="DIR",
                    help="work in DIR and keep it; parts whose result is there "
                    "already are not run again")
    args = ap.parse_args(argv)
    if args.part:
        d = Path(args.dir)
        cfg = SIZES[args.mode]
        extra = ()
        if args.part in ("dask", "scaling"):
            extra = (json.loads((d / "write.json").read_text()),)
        if args.part == "ooc":
            d = d / "ooc"
            d.mkdir(exist_ok=True)
        result = PARTS[args.part](d, cfg, *extra)
        (Path(args.dir) / f"{args.part}.json").write_text(json.dumps(result))
        return
    mode = "quick" if args.quick else "full"
    cfg = SIZES[mode]
    with tempfile.TemporaryDirectory(prefix="bench_dask_") as tmp:
        d = Path(args.keep or tmp)
        d.mkdir(parents=True, exist_ok=True)
        got = {name: run_part(name, d, mode, reuse=bool(args.keep))
               for name in ("write", "single", "dask", "scaling", "ooc")}
        elapsed = sum(json.loads((d / "times.json").read_text()).values())
        report(d, cfg, mode, *got.values(), elapsed, out=args.out)


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
