"""Entry point of the benchmark suite.

Usage::

    python -m benchmarks.run                 # full run -> benchmarks/results/
    python -m benchmarks.run --quick         # < 10 min -> benchmarks/results/quick/
    python -m benchmarks.run --smoke         # < 3 min, tiny sizes (CI) -> a temp dir
    python -m benchmarks.run --suite scaling --suite speed
    python -m benchmarks.run --write-docs    # docs/benchmarks.rst from results/

Every suite writes ``<suite>.md`` (markdown tables), ``<suite>.rst`` (the same
tables for the docs), ``<suite>.json`` (raw rows) and PNG plots into the
output directory, each with a header that records the machine. All methods
of a table run in the same process on the same affinity matrix. Wall times
are medians of several runs; the machine may be shared and noisy, so read the
ratios rather than the absolute times. Peak memory is the growth of the
process's resident set (``VmHWM`` after resetting it through
``/proc/self/clear_refs``), which sees numpy, scipy, Numba and torch
allocations alike; the 1M-node and token-memory measurements run in fresh
subprocesses.
"""

import argparse
import gc
import inspect
import json
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from . import graphs as G
from . import peers as P
from ._report import (
    RESULTS,
    ROOT,
    PeakMemory,
    SuiteResult,
    Table,
    _json_default,
    _one_line,
    _status_kb,
    csr_bytes,
    machine_info,
)
SUITES = ("quality", "scaling", "speed", "million", "tokens", "segmentation",
          "bound", "bandwidth")


# ============================================================== measurement

def measure(fn, W, K, seed=0, repeats=3, y_true=None, repeat_budget=10.0):
    """Run ``fn(W, K, seed)`` up to ``repeats`` times; return a result row.

    The first run also measures peak memory. Further runs are skipped once
    the runs so far took more than ``repeat_budget`` seconds in total (slow
    peers on large graphs run once; the row's ``runs`` says how many ran).
    """
    times, labels, info = [], None, {}
    peak = None
    for r in range(repeats):
        if r == 0:
            with PeakMemory() as pm:
                t0 = time.perf_counter()
                labels, info = fn(W, K, seed=seed)
                times.append(time.perf_counter() - t0)
            peak = pm.peak_mb
        else:
            if sum(times) > repeat_budget:
                break
            t0 = time.perf_counter()
            labels, info = fn(W, K, seed=seed)
            times.append(time.perf_counter() - t0)
    from sklearn_falcon import normalized_cut

    row = {
        "ncut": normalized_cut(W, labels),
        "n_found": int(len(np.unique(labels))),
        "time": float(np.median(times)),
        "times": [float(t) for t in times],
        "runs": len(times),
        "peak_mb": peak,
        "n_iter": info.get("n_iter", ""),
        "n_backtracks": info.get("n_backtracks", ""),
    }
    if y_true is not None:
        row["ari"] = float(adjusted_rand_score(y_true, labels))
        row["nmi"] = float(normalized_mutual_info_score(y_true, labels))
    return row


def warmup(mode="full"):
    """Compile Falcon's Numba kernels before timing.

    Small and large graphs, sparse and dense, float64 and float32: the
    kernels have serial twins for small inputs, and each twin compiles on
    first use.
    """
    Ws, _ = G.sbm_graph(300, 3, avg_degree=10, seed=0)
    graphs = [Ws, Ws.toarray()]
    if mode != "smoke":  # smoke sizes never reach the parallel kernels
        Wl, _ = G.sbm_graph(30_000, 10, avg_degree=10, seed=0)
        Wd, _ = G.sbm_graph(700, 3, avg_degree=50, seed=0)
        Wd = Wd.toarray()
        graphs += [Wl, Wd, Wd.astype(np.float32)]
    for M in graphs:
        try:
            P.falcon(M, 3, seed=0)
        except Exception as exc:  # reported again by the suite that needs it
            print(f"[benchmarks] warm-up failed on {type(M).__name__} "
                  f"{M.shape}: {_one_line(type(exc).__name__ + ': ' + str(exc))}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_ncut_vs_time(groups, path, title):
    """One panel per graph: NCut (y) against median time (x, log)."""
    plt = _plt()
    n = len(groups)
    cols = min(n, 4)
    rows_ = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows_, cols, figsize=(4.2 * cols, 3.4 * rows_),
                             squeeze=False)
    for ax, (gname, rows) in zip(axes.ravel(), groups.items()):
        rows = [r for r in rows if np.isfinite(r.get("time", np.nan))
                and r["time"] > 0 and np.isfinite(r.get("ncut", np.nan))]
        for r in rows:
            is_f = r["method"] == "falcon"
            ax.scatter(r["time"], r["ncut"], s=60 if is_f else 25,
                       marker="*" if is_f else "o",
                       color="C3" if is_f else "C0", zorder=3 if is_f else 2)
            ax.annotate(r["method"], (r["time"], r["ncut"]), fontsize=6,
                        xytext=(3, 2), textcoords="offset points")
        if rows:
            ax.set_xscale("log")
        ax.set_title(gname, fontsize=9)
        ax.set_xlabel("median wall time [s]")
        ax.set_ylabel("NCut (lower is better)")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_time_vs_n(series, path, title, fit=None):
    """Log-log time against n, one line per method."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts)
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], "o-",
                  label=name, color=f"C{i}")
    if fit is not None:
        (n0, n1, a, b) = fit
        xs = np.array([n0, n1], dtype=float)
        ax.loglog(xs, np.exp(b) * xs**a, "k--", lw=1,
                  label=f"fit Falcon: n^{a:.2f}")
    ax.set_xlabel("number of nodes n")
    ax.set_ylabel("median wall time [s]")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ================================================================ suites
# --quick and --smoke run only the cluster_qr SpectralClustering configurations
# (arpack, lobpcg and amg): the fastest assignment; the full run has all nine.
QUICK_SC_EXCLUDE = tuple(f"sc-{s}-{a}" for s in P.SC_SOLVERS
                         for a in ("kmeans", "discretize"))

METHOD_COLS = ["graph", "n", "nnz", "K", "method", "clusters", "NCut",
               "NCut/best", "ARI",
               "NMI", "time [s]", "runs", "time/falcon", "peak MB", "n_iter",
               "backtracks"]


def _ratio(a, b, eps=1e-12):
    """a / b, with 0 / 0 = 1 (both optimal) and x / 0 = inf."""
    if not (np.isfinite(a) and np.isfinite(b)):
        return np.nan
    if abs(b) <= eps:
        return 1.0 if abs(a) <= eps else np.inf
    return a / b


def _mb(v):
    return "" if v is None or v == "" else round(float(v), 1)


def _get_peers(res, include=None, exclude=()):
    """:func:`benchmarks.peers.get_peers`; a note of ``res`` names the peers
    it selects but leaves out, their package not installed."""
    missing = P.missing_peers(include=include, exclude=exclude)
    if missing:
        res.notes.append("Peers not run, their package missing (`pip install "
                         "-e '.[bench]'`): " + ", ".join(missing) + ".")
    return P.get_peers(include=include, exclude=exclude)


def _method_rows(table, gname, W, K, y, peers, repeats, seed=0, extra=None):
    """Run every peer on one graph; add rows (with ratios) to ``table``."""
    rows = []
    for name, fn in peers.items():
        try:
            r = measure(fn, W, K, seed=seed, repeats=repeats, y_true=y)
        except Exception as exc:  # a peer failing is a result, not a crash
            r = {"ncut": float("nan"), "time": float("nan"),
                 "error": _one_line(f"{type(exc).__name__}: {exc}", 120)}
        r["method"] = name
        rows.append(r)
    # fewer than K non-empty clusters lowers NCut for free: such rows are
    # flagged and never count as the best
    best = min((r["ncut"] for r in rows if np.isfinite(r["ncut"])
                and r.get("n_found") == K), default=np.nan)
    t_f = next((r["time"] for r in rows if r["method"] == "falcon"), np.nan)
    nnz = W.nnz if sp.issparse(W) else int(np.count_nonzero(W))
    for r in rows:
        table.add(graph=gname, n=W.shape[0], nnz=nnz, K=K, method=r["method"],
                  clusters=r.get("n_found", ""), NCut=r["ncut"],
                  **{"NCut/best": _ratio(r["ncut"], best)},
                  ARI=r.get("ari", ""), NMI=r.get("nmi", ""),
                  **{"time [s]": r["time"], "runs": r.get("runs", ""),
                     "time/falcon": r["time"] / t_f,
                     "peak MB": _mb(r.get("peak_mb", "")),
                     "n_iter": r.get("n_iter", ""),
                     "backtracks": r.get("n_backtracks", "")},
                  **(extra or {}))
        if "error" in r:
            table.rows[-1]["method"] += f" (failed: {r['error']})"
    return rows


def _quality_graphs(mode):
    if mode == "smoke":
        W, y, _ = G.blobs_graph(n=300, n_clusters=3, seed=0)
        Ws, ys = G.sbm_graph(600, 4, avg_degree=10, seed=0)
        return {"blobs-300": (W, y, 3), "sbm-600": (Ws, ys, 4)}
    out = {}
    W, y, _ = G.digits_graph()
    out["digits"] = (W, y, 10)
    W, y, _ = G.blobs_graph(n=3000, n_clusters=8, seed=0)
    out["blobs-3000"] = (W, y, 8)
    W, y, _ = G.moons_graph(n=1000)
    out["moons-1000"] = (W, y, 2)
    W, y, _ = G.circles_graph(n=1000)
    out["circles-1000"] = (W, y, 2)
    W, y = G.sbm_graph(5000, 10, avg_degree=10, p_in_ratio=0.8, seed=0)
    out["sbm-5000 (p_in 0.8)"] = (W, y, 10)
    W, y = G.sbm_graph(5000, 10, avg_degree=20, p_in_ratio=0.5, seed=1)
    out["sbm-5000 (p_in 0.5)"] = (W, y, 10)
    W, y = G.lfr_graph(2000, mu=0.1, average_degree=10, seed=0)
    out["lfr-2000 (mu 0.1)"] = (W, y, int(len(np.unique(y))))
    if mode == "full":
        W, y = G.lfr_graph(2000, mu=0.3, average_degree=10, seed=0)
        out["lfr-2000 (mu 0.3)"] = (W, y, int(len(np.unique(y))))
    return out


def suite_quality(mode, out_dir):
    res = SuiteResult(
        "quality", "Quality: NCut, ARI and NMI on kNN, SBM and LFR graphs",
        "Every method runs on the same affinity W (kNN graphs: scikit-learn's "
        "`0.5 (C + C^T)` with k=10). `clusters` is the number of non-empty "
        "clusters returned; a method returning fewer than K gets a lower NCut "
        "for free, so it never counts as the best. `NCut/best` is the ratio to "
        "the lowest NCut of the graph's rows with K clusters; `truth` is the "
        "NCut of the planted labels.")
    repeats = {"smoke": 1, "quick": 1, "full": 3}[mode]
    peers = _get_peers(res, exclude=QUICK_SC_EXCLUDE if mode != "full" else ())
    tbl = Table("Quality", METHOD_COLS)
    groups = {}
    wins = []
    for gname, (W, y, K) in _quality_graphs(mode).items():
        from sklearn_falcon import normalized_cut

        rows = _method_rows(tbl, gname, W, K, y, peers, repeats)
        tbl.add(graph=gname, n=W.shape[0], K=K, method="truth (planted)",
                NCut=normalized_cut(W, y), ARI=1.0, NMI=1.0)
        groups[gname] = rows
        f = next(r for r in rows if r["method"] == "falcon")
        others = [r for r in rows if r["method"] != "falcon"
                  and np.isfinite(r["ncut"]) and r.get("n_found") == K]
        best_o = min(others, key=lambda r: r["ncut"], default=None)
        if best_o is None:  # every peer failed or returned fewer clusters
            wins.append((gname, f["ncut"], "none with K clusters", np.nan))
        else:
            wins.append((gname, f["ncut"], best_o["method"], best_o["ncut"]))
    res.tables.append(tbl)
    summary = Table("Falcon against the best peer (NCut)",
                    ["graph", "Falcon NCut", "best peer", "peer NCut",
                     "Falcon/peer"])
    for g, fn, pm, pn in wins:
        summary.add(graph=g, **{"Falcon NCut": fn, "best peer": pm,
                                "peer NCut": pn, "Falcon/peer": _ratio(fn, pn)})
    res.tables.insert(0, summary)
    comparable = [(fn, pn) for _, fn, _, pn in wins if np.isfinite(pn)]
    n_ok = sum(fn <= pn * (1 + 1e-9) + 1e-12 for fn, pn in comparable)
    res.target("Falcon NCut <= best peer NCut (all quality graphs)",
               f"{n_ok}/{len(comparable)} graphs"
               + ("" if len(comparable) == len(wins) else
                  f" ({len(wins) - len(comparable)} without a peer of K clusters)"),
               n_ok == len(comparable) if comparable else None)
    plot = "quality_ncut_vs_time.png"
    plot_ncut_vs_time(groups, Path(out_dir) / plot,
                      "Quality suite: NCut against time")
    res.plots.append(plot)
    return res


def _fit_exponent(points, n_min, n_max):
    pts = [(n, t) for n, t in points if n_min <= n <= n_max and t > 0]
    if len(pts) < 2:
        return None
    x = np.log([p[0] for p in pts])
    yv = np.log([p[1] for p in pts])
    a, b = np.polyfit(x, yv, 1)
    return float(a), float(b)


def suite_scaling(mode, out_dir):
    res = SuiteResult(
        "scaling", "Scaling: fit time against n on planted-partition graphs",
        "SBM graphs with K=10 planted clusters, mean degree 10, 80% of edges "
        "inside clusters. Falcon's exponent is the least-squares slope of "
        "log(time) against log(n) between 10^4 and 10^6 nodes.")
    if mode == "smoke":
        sizes, peer_max, repeats_small = [500, 2000], 2000, 1
    elif mode == "quick":
        sizes = [1000, 10_000, 30_000, 100_000, 300_000]
        peer_max, repeats_small = 10_000, 1
    else:
        sizes = [1000, 3000, 10_000, 30_000, 100_000, 300_000, 1_000_000]
        peer_max, repeats_small = 100_000, 3
    all_peers = _get_peers(res, include=["falcon", "sc-amg-cluster_qr",
                                          "sc-amg-discretize", "rncut"])
    tbl = Table("Time against n", ["n", "nnz", "method", "time [s]", "runs",
                                   "time/falcon", "NCut", "NCut/truth", "ARI",
                                   "peak MB", "n_iter", "backtracks"])
    series = {}
    from sklearn_falcon import normalized_cut

    for n in sizes:
        W, y = G.sbm_graph(n, 10, avg_degree=10, p_in_ratio=0.8, seed=0)
        truth = normalized_cut(W, y)
        reps = repeats_small
        t_f = np.nan
        for name, fn in all_peers.items():
            if name != "falcon" and n > peer_max:
                continue
            try:
                r = measure(fn, W, 10, seed=0, repeats=reps, y_true=y,
                            repeat_budget=60.0 if name == "falcon" else 10.0)
            except Exception as exc:  # a peer failing is a result, not a crash
                msg = _one_line(f"{type(exc).__name__}: {exc}", 120)
                tbl.add(n=n, nnz=W.nnz, method=f"{name} (failed: {msg})")
                continue
            if name == "falcon":
                t_f = r["time"]
            series.setdefault(name, []).append((n, r["time"]))
            tbl.add(n=n, nnz=W.nnz, method=name, **{
                "time [s]": r["time"], "runs": r["runs"],
                "time/falcon": r["time"] / t_f,
                "NCut": r["ncut"], "NCut/truth": r["ncut"] / truth,
                "ARI": r["ari"], "peak MB": _mb(r["peak_mb"]),
                "n_iter": r["n_iter"], "backtracks": r["n_backtracks"]})
        del W, y
        gc.collect()
    res.tables.append(tbl)
    lo, hi = 10_000, 1_000_000
    fit = _fit_exponent(series.get("falcon", []), lo, hi)
    fit_range = (min(n for n, _ in series["falcon"] if n >= lo) if fit else lo,
                 max((n for n, _ in series.get("falcon", [])), default=lo))
    if fit is not None:
        a, b = fit
        msg = (f"Falcon time ~ n^{a:.3f} fitted on n = {fit_range[0]:,} .. "
               f"{fit_range[1]:,}")
        print("  " + msg)
        res.notes.append(msg + ".")
        full_range = fit_range[1] >= 1_000_000
        res.target("time grows at most like n^1.15 from 10^4 to 10^6",
                   f"n^{a:.3f} (n = {fit_range[0]:,} .. {fit_range[1]:,})"
                   + ("" if full_range else "; range short of 10^6 in this mode"),
                   a <= 1.15)
        plot_fit = (fit_range[0], fit_range[1], a, b)
    else:
        res.target("time grows at most like n^1.15 from 10^4 to 10^6",
                   "not measured (sizes below 10^4 in this mode)", None)
        plot_fit = None
    plot = "scaling_time_vs_n.png"
    plot_time_vs_n(series, Path(out_dir) / plot,
                   "SBM (K=10, mean degree 10): time against n", plot_fit)
    res.plots.append(plot)
    return res


def suite_speed(mode, out_dir):
    res = SuiteResult(
        "speed", "Speed at n >= 20,000: Falcon against SpectralClustering and "
        "recursive NCut",
        "The fastest SpectralClustering configuration is chosen per graph "
        "after the fact (the most favourable choice for the peer); `--quick` "
        "runs only the three cluster_qr configurations, the full run all nine. "
        "`knn-mix` is the kNN graph (k=10) of a 3-D mixture of 10 Gaussians. "
        "`Falcon NCut <= both` compares with the peers that returned K clusters.")
    if mode == "smoke":
        specs = {"sbm-2000": ("sbm", 2000), "knn-mix-2000": ("knn", 2000)}
        repeats = 1
    elif mode == "quick":
        specs = {"sbm-20000": ("sbm", 20_000), "knn-mix-20000": ("knn", 20_000)}
        repeats = 1
    else:
        specs = {"sbm-20000": ("sbm", 20_000), "knn-mix-20000": ("knn", 20_000)}
        repeats = 3
    peers = _get_peers(res, exclude=QUICK_SC_EXCLUDE if mode != "full" else ())
    tbl = Table("All methods", METHOD_COLS)
    summ = Table("Falcon against the fastest SpectralClustering and recursive "
                 "NCut", ["graph", "fastest SC", "SC time/Falcon time",
                          "rncut time/Falcon time", "Falcon NCut", "SC NCut",
                          "rncut NCut", "Falcon NCut <= both"])
    groups = {}
    ok5, ok10, okq = [], [], []
    for gname, (kind, n) in specs.items():
        if kind == "sbm":
            W, y = G.sbm_graph(n, 10, avg_degree=10, p_in_ratio=0.8, seed=0)
        else:
            W, y = G.knn_graph_million(n=n, k=10, n_clusters=10, seed=0)
        rows = _method_rows(tbl, gname, W, 10, y, peers, repeats)
        groups[gname] = rows
        byname = {r["method"]: r for r in rows}
        f = byname["falcon"]
        sc = min((r for r in rows if r["method"].startswith("sc-")
                  and np.isfinite(r["time"]) and r.get("n_found") == 10),
                 key=lambda r: r["time"], default=None)
        if sc is None:  # every configuration failed or gave fewer clusters
            sc = {"method": "none with K clusters", "time": np.nan,
                  "ncut": np.nan}
        rn = byname["rncut"]
        # a peer with fewer than K clusters has a lower NCut for free
        rivals = [r["ncut"] for r in (sc, rn)
                  if r.get("n_found") == 10 and np.isfinite(r["ncut"])]
        q = (f["ncut"] <= min(rivals) * (1 + 1e-9)) if rivals else None
        summ.add(graph=gname, **{
            "fastest SC": sc["method"],
            "SC time/Falcon time": sc["time"] / f["time"],
            "rncut time/Falcon time": rn["time"] / f["time"],
            "Falcon NCut": f["ncut"], "SC NCut": sc["ncut"],
            "rncut NCut": rn["ncut"],
            "Falcon NCut <= both": None if q is None else bool(q)})
        if n >= 20_000:
            ok5.append(sc["time"] / f["time"])
            ok10.append(rn["time"] / f["time"])
            if q is not None:
                okq.append(q)
        del W, y
        gc.collect()
    res.tables += [summ, tbl]
    if ok5:
        res.target(">= 5x faster than the fastest SpectralClustering (n >= 20k)",
                   "speed-ups " + ", ".join(f"{v:.1f}x" for v in ok5),
                   all(v >= 5 for v in ok5))
        res.target(">= 10x faster than recursive NCut (n >= 20k)",
                   "speed-ups " + ", ".join(f"{v:.1f}x" for v in ok10),
                   all(v >= 10 for v in ok10))
        res.target("NCut not worse than both (n >= 20k)",
                   f"{sum(okq)}/{len(okq)} graphs", all(okq))
    else:
        res.target("speed targets at n >= 20,000", "not measured in smoke mode",
                   None)
    plot = "speed_ncut_vs_time.png"
    plot_ncut_vs_time(groups, Path(out_dir) / plot,
                      "Speed suite: NCut against time")
    res.plots.append(plot)
    return res


# ------------------------------------------------------------- subprocesses
def _child(argv):
    """Entry of the measurement subprocesses; prints one JSON line."""
    kind = argv[0]
    args = json.loads(argv[1])
    warnings.simplefilter("ignore")
    if kind == "million":
        out = _child_million(**args)
    elif kind == "tokens":
        out = _child_tokens(**args)
    else:  # pragma: no cover
        raise SystemExit(f"unknown child {kind!r}")
    print("JSON:" + json.dumps(out, default=_json_default), flush=True)


def _run_child(kind, timeout, **args):
    cmd = [sys.executable, "-m", "benchmarks.run", "--child", kind,
           json.dumps(args)]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith("JSON:"):
            return json.loads(line[5:])
    return {"error": (p.stderr or p.stdout)[-400:]}


def _child_million(n, k, n_clusters, repeats, seed=0):
    from sklearn_falcon import FalconNCut, normalized_cut

    # compile the kernels first, so that JIT memory and time are excluded
    Ws, _ = G.sbm_graph(2000, 5, seed=0)
    FalconNCut(5, affinity="precomputed", backend="numba",
               random_state=0).fit(Ws)
    del Ws
    W, y, t_build = G.knn_graph_million(n=n, k=k, n_clusters=n_clusters,
                                        seed=seed, return_time=True)
    out = {"n": n, "nnz": int(W.nnz), "csr_mb": csr_bytes(W) / 2**20,
           "build_s": t_build, "truth_ncut": normalized_cut(W, y),
           "times": [], "peak_mb": []}
    for r in range(repeats):
        est = FalconNCut(n_clusters, affinity="precomputed", backend="numba",
                         random_state=seed + r)
        with PeakMemory() as pm:
            t0 = time.perf_counter()
            est.fit(W)
            out["times"].append(time.perf_counter() - t0)
        out["peak_mb"].append(pm.peak_mb)
        labels = est.labels_
        out.setdefault("ncut", []).append(float(est.ncut_))
        out.setdefault("n_iter", []).append(int(est.n_iter_))
        out.setdefault("n_backtracks", []).append(
            int(getattr(est, "n_backtracks_", -1)))
        out.setdefault("ari", []).append(float(adjusted_rand_score(y, labels)))
        del est, labels
        gc.collect()
    out["maxrss_mb"] = (_status_kb("VmHWM") or 0) / 1024.0
    return out


def suite_million(mode, out_dir):
    n = {"smoke": 20_000, "quick": 1_000_000, "full": 1_000_000}[mode]
    repeats = {"smoke": 1, "quick": 1, "full": 3}[mode]
    res = SuiteResult(
        "million", f"{n:,}-node sparse kNN graph, K=20, Numba backend",
        "A 3-D Gaussian mixture of 20 components, kNN graph with k=10 (self "
        "included, KD-tree) symmetrised as in scikit-learn. Fit time excludes "
        "the graph construction, reported separately. Peak extra memory is the "
        "growth of the resident set during `fit` in a fresh subprocess whose "
        "Numba kernels were compiled beforehand.")
    out = _run_child("million", timeout=1800, n=n, k=10, n_clusters=20,
                     repeats=repeats)
    if "error" in out:
        res.notes.append(f"The million-node run failed: {_one_line(out['error'], 400)}")
        res.target("1M nodes fit < 60 s", "failed", False)
        return res
    t = float(np.median(out["times"]))
    peak = max(out["peak_mb"])
    tbl = Table("Fit", ["n", "nnz", "CSR MB", "build kNN graph [s]",
                        "fit median [s]", "fit runs [s]", "peak extra MB",
                        "peak/CSR", "NCut", "NCut truth", "ARI", "n_iter",
                        "backtracks"])
    tbl.add(n=out["n"], nnz=out["nnz"], **{
        "CSR MB": out["csr_mb"], "build kNN graph [s]": out["build_s"],
        "fit median [s]": t,
        "fit runs [s]": ", ".join(f"{v:.1f}" for v in out["times"]),
        "peak extra MB": peak, "peak/CSR": peak / out["csr_mb"],
        "NCut": float(np.median(out["ncut"])), "NCut truth": out["truth_ncut"],
        "ARI": float(np.median(out["ari"])),
        "n_iter": ", ".join(map(str, out["n_iter"])),
        "backtracks": ", ".join(map(str, out["n_backtracks"]))})
    res.tables.append(tbl)
    full = n >= 1_000_000
    res.target("1M-node kNN graph (K=20) fits in < 60 s, Numba backend",
               f"{t:.1f} s at n={n:,}" + ("" if full else " (smoke size)"),
               (t < 60) if full else None)
    res.target("peak extra memory <= 3x the CSR size",
               f"{peak:.0f} MB = {peak / out['csr_mb']:.2f}x of "
               f"{out['csr_mb']:.0f} MB", (peak <= 3 * out["csr_mb"])
               if full else None)
    return res


def _matrix_free_fit(F, K, power, seed=0):
    """Falcon on the matrix-free torch cosine affinity of F (CPU).

    Uses ``sklearn_falcon.falcon_batch`` (one graph) with a k-means
    start on the features; the n x n affinity is never stored.
    """
    from sklearn_falcon import falcon_batch

    r = falcon_batch([F], K, affinity="cosine", power=power, init="kmeans",
                     backend="torch", device="cpu", random_state=seed)
    return np.asarray(r.labels[0]), int(r.n_iter[0]), int(r.n_backtracks[0])


def _child_tokens(n_tokens, n_groups, power, what, seed=0):
    from sklearn_falcon import FalconNCut, normalized_cut

    F, y = G.token_features(n_tokens, n_groups, seed=seed)
    Fs, _ = G.token_features(256, n_groups, seed=seed)
    # warm up (imports, JIT) on a small problem of the same kind
    if what == "matrix-free-torch":
        _matrix_free_fit(Fs, n_groups, power)
    else:
        FalconNCut(n_groups, affinity="cosine", power=power, backend="numba",
                   random_state=0).fit(Fs)
    out = {"what": what, "n": n_tokens, "dense_f64_mb": n_tokens**2 * 8 / 2**20}
    with PeakMemory() as pm:
        t0 = time.perf_counter()
        if what == "dense-W":
            W = G.cosine_power_affinity(F, power)
            est = FalconNCut(n_groups, affinity="precomputed", random_state=0)
            est.fit(W)
            labels, n_iter = est.labels_, est.n_iter_
            n_bt = getattr(est, "n_backtracks_", "n/a")
        elif what == "falcon-cosine-numba":
            est = FalconNCut(n_groups, affinity="cosine", power=power,
                             backend="numba", random_state=0)
            est.fit(F)
            labels, n_iter = est.labels_, est.n_iter_
            n_bt = getattr(est, "n_backtracks_", "n/a")
        else:
            labels, n_iter, n_bt = _matrix_free_fit(F, n_groups, power)
        out["time"] = time.perf_counter() - t0
    out["peak_mb"] = pm.peak_mb
    out["ari"] = float(adjusted_rand_score(y, labels))
    out["n_iter"], out["n_backtracks"] = int(n_iter), n_bt
    # NCut on the exact dense W, computed after the measurement
    W = G.cosine_power_affinity(F, power)
    out["ncut"] = float(normalized_cut(W, labels))
    return out


def _torch_matrix_free():
    """Whether a matrix-free torch cosine affinity is available."""
    try:
        import torch  # noqa: F401
    except Exception:
        return False, "torch is not installed"
    try:
        from sklearn_falcon._affinity import AFFINITIES
        from sklearn_falcon._backends import BACKENDS
    except Exception as exc:  # pragma: no cover
        return False, f"sklearn_falcon has no matrix-free path ({exc})"
    if BACKENDS["torch"].make_problem_from_features is None or not (
            AFFINITIES["cosine"].matrix_free):
        return False, "the torch backend has no matrix-free cosine affinity"
    return True, ("sklearn_falcon._batch.falcon_batch(affinity='cosine', "
                  "backend='torch', device='cpu'), k-means start")


def suite_tokens(mode, out_dir):
    sizes = {"smoke": [512], "quick": [4096], "full": [4096, 16384]}[mode]
    mem_size = {"smoke": 512, "quick": 4096, "full": 16384}[mode]
    K, power = 8, 4.0
    res = SuiteResult(
        "tokens", "DINO-like token graphs (dense cosine-power affinity)",
        f"Random low-rank 384-d token features with {K} planted groups and a "
        f"shared mean direction; W = (min-max normalised cosine)^{power:g}, "
        "dense. All methods run on the same dense W.")
    repeats = {"smoke": 1, "quick": 1, "full": 2}[mode]
    include = ["falcon", "sc-lobpcg-*", "sc-amg-cluster_qr", "ncut-pytorch",
               "rncut", "wkkm"]
    peers = _get_peers(res, include=include)
    tbl = Table("Methods on the dense token graph", METHOD_COLS)
    groups = {}
    for n in sizes:
        F, y = G.token_features(n, K, seed=0)
        W = G.cosine_power_affinity(F, power)
        pe = dict(peers)
        if _torch_matrix_free()[0]:
            def mf_peer(W_, K_, seed=0, F_=F):
                labels, n_it, n_bt = _matrix_free_fit(F_, K_, power, seed)
                return labels, {"n_iter": n_it, "n_backtracks": n_bt}
            pe["falcon-matrix-free (torch)"] = mf_peer
        if n > 8192:
            # O(n^2) per split / per iteration on a dense W: minutes each here
            for slow in ("rncut", "wkkm", "sc-lobpcg-kmeans",
                         "sc-lobpcg-discretize", "sc-amg-cluster_qr"):
                if pe.pop(slow, None) is not None:
                    res.notes.append(f"tokens-{n}: {slow} skipped (dense W, "
                                     "too slow for this machine).")
        groups[f"tokens-{n}"] = _method_rows(tbl, f"tokens-{n}", W, K, y, pe,
                                             repeats)
        del W, F
        gc.collect()
    res.tables.append(tbl)
    plot = "tokens_ncut_vs_time.png"
    plot_ncut_vs_time(groups, Path(out_dir) / plot,
                      "Token graphs: NCut against time")
    res.plots.append(plot)

    mf, why = _torch_matrix_free()
    mem = Table(f"Peak memory at {mem_size:,} tokens (fresh subprocess each)",
                ["variant", "time [s]", "peak extra MB", "dense W f64 MB",
                 "peak/dense W", "NCut", "ARI", "n_iter", "backtracks"],
                note="`dense-W`: build the float64 W, then FalconNCut("
                "affinity='precomputed'); `falcon-cosine-numba`: FalconNCut("
                "affinity='cosine') on the float32 features (it builds W); "
                "`matrix-free-torch`: W computed block by block, never stored.")
    # --smoke: one subprocess per path (dense, matrix-free) keeps CI short
    variants = ["dense-W"] if mode == "smoke" else ["dense-W",
                                                    "falcon-cosine-numba"]
    if mf:
        variants.append("matrix-free-torch")
    for what in variants:
        out = _run_child("tokens", timeout=900, n_tokens=mem_size, n_groups=K,
                         power=power, what=what)
        if "error" in out:
            mem.add(variant=f"{what} (failed: {_one_line(out['error'][-160:])})")
            continue
        mem.add(variant=what, **{
            "time [s]": out["time"], "peak extra MB": out["peak_mb"],
            "dense W f64 MB": out["dense_f64_mb"],
            "peak/dense W": out["peak_mb"] / out["dense_f64_mb"],
            "NCut": out["ncut"], "ARI": out["ari"], "n_iter": out["n_iter"],
            "backtracks": out["n_backtracks"]})
    res.tables.append(mem)
    res.notes.append(f"Matrix-free torch affinity: {'yes' if mf else 'no'} "
                     f"({why}).")
    tr = [r for r in mem.rows if r.get("variant") == "matrix-free-torch"]
    if tr and mem_size >= 16384:
        ratio = tr[0]["peak/dense W"]
        res.target("16,384 tokens, matrix-free: peak < 1/4 of the dense W",
                   f"{ratio:.2f}x of the dense float64 W", ratio < 0.25)
    else:
        res.target("16,384 tokens, matrix-free: peak < 1/4 of the dense W",
                   "not measured: " + (why if not mf else
                                       f"{mem_size:,} tokens in this mode"), None)
    return res


def suite_segmentation(mode, out_dir):
    # bench_segmentation writes its own segmentation.md: keep our index apart
    res = SuiteResult("segmentation_run", "Image segmentation",
                      "Delegated to `benchmarks/bench_segmentation.py` "
                      "(scikit-image `cut_normalized` on RAGs is its peer).")
    try:
        from . import bench_segmentation as bs
    except ImportError as exc:
        res.notes.append(f"benchmarks.bench_segmentation is not available: {exc}")
        return res
    if not hasattr(bs, "run"):
        res.notes.append("benchmarks.bench_segmentation has no run().")
        return res
    sig = inspect.signature(bs.run)
    kw = {}
    tiny = {"n_images": 2, "repeat": 1} if mode == "smoke" else {}  # its quick: 8
    for key, val in (("quick", mode != "full"), ("smoke", mode == "smoke"),
                     ("mode", mode), ("out_dir", out_dir),
                     ("output_dir", out_dir), ("results_dir", out_dir),
                     *tiny.items()):
        if key in sig.parameters:
            kw[key] = val
    out = bs.run(**kw)
    if isinstance(out, str):
        res.notes.append(out)
    elif out is not None:
        res.notes.append(f"bench_segmentation.run returned: {str(out)[:2000]}")
    res.notes.append("See `segmentation*` files written by bench_segmentation.")
    return res


def suite_bound(mode, out_dir):
    res = SuiteResult(
        "bound", "Distance to the spectral lower bound",
        "The bound is the sum of the K smallest eigenvalues of the normalized "
        "Laplacian I - D^-1/2 W D^-1/2 (Ky Fan): no K-partition has a lower "
        "NCut. `ratio` = NCut / bound (1 is optimal; n/a when the bound is 0, "
        "i.e. the graph has >= K components). A labelling with fewer than K "
        "non-empty clusters is left out (its NCut is not bounded by the K-way "
        "bound).")
    if mode == "smoke":
        W, y = G.sbm_graph(500, 4, seed=0)
        graphs = {"sbm-500": (W, y, 4)}
    else:
        graphs = {k: v for k, v in _quality_graphs("quick").items()}
        F, y = G.token_features(2048, 8, seed=0)
        graphs["tokens-2048"] = (G.cosine_power_affinity(F, 4.0), y, 8)
    peers = _get_peers(res, include=["falcon", "sc-*", "rncut"],
                       exclude=QUICK_SC_EXCLUDE if mode != "full" else ())
    tbl = Table("NCut / spectral bound",
                ["graph", "n", "K", "bound", "truth NCut", "truth ratio",
                 "Falcon NCut", "Falcon ratio", "best SC NCut", "best SC ratio",
                 "rncut NCut", "rncut ratio"])
    from sklearn_falcon import normalized_cut

    for gname, (W, y, K) in graphs.items():
        bound = P.spectral_lower_bound(W, K)
        nc = {}
        for name, fn in peers.items():
            try:
                labels, _ = fn(W, K, seed=0)
            except Exception as exc:
                nc[name] = np.nan
                res.notes.append(f"{gname}: {name} failed: "
                                 f"{_one_line(type(exc).__name__ + ': ' + str(exc))}")
                continue
            found = int(len(np.unique(labels)))
            if found != K:  # fewer clusters: a lower NCut (and bound) for free
                nc[name] = np.nan
                res.notes.append(f"{gname}: {name} returned {found} clusters, "
                                 f"not {K}: left out.")
            else:
                nc[name] = normalized_cut(W, labels)
        scs = [v for k, v in nc.items() if k.startswith("sc-") and np.isfinite(v)]
        sc = min(scs) if scs else np.nan
        tr = normalized_cut(W, y)

        def ratio(v):
            return v / bound if bound > 1e-9 else np.nan
        tbl.add(graph=gname, n=W.shape[0], K=K, bound=bound, **{
            "truth NCut": tr, "truth ratio": ratio(tr),
            "Falcon NCut": nc["falcon"], "Falcon ratio": ratio(nc["falcon"]),
            "best SC NCut": sc, "best SC ratio": ratio(sc),
            "rncut NCut": nc["rncut"], "rncut ratio": ratio(nc["rncut"])})
    res.tables.append(tbl)
    return res


def suite_bandwidth(mode, out_dir):
    from .bandwidth import suite

    return suite(mode, out_dir)


SUITE_FUNCS = {
    "quality": suite_quality, "scaling": suite_scaling, "speed": suite_speed,
    "million": suite_million, "tokens": suite_tokens,
    "segmentation": suite_segmentation, "bound": suite_bound,
    "bandwidth": suite_bandwidth,
}


# ===================================================================== docs
DOCS_HEADER = """\
.. _benchmarks:

==========
Benchmarks
==========

These tables and plots come from ``python -m benchmarks.run`` (the full run),
on the machine described in each section. All methods of a table run in one
process on the *same* affinity matrix; NCut is
:func:`sklearn_falcon.normalized_cut` (lower is better), ARI and NMI compare
with planted labels where they exist, wall times are medians of several runs
(the machine is shared by other jobs, so read the ratios rather than the
absolute times), and peak memory is the growth of the resident set during the
run.

Peers, each in its strongest configuration:

* ``sc-<solver>-<assign>``: scikit-learn ``SpectralClustering(affinity=
  "precomputed")`` with ``eigen_solver`` arpack, lobpcg or amg (pyamg) and
  ``assign_labels`` kmeans, discretize or cluster_qr (the recorded tables
  of ``python -m benchmarks.run`` below predate arpack, scikit-learn's
  default solver: they have lobpcg and amg only; the peer benchmark has
  all three);
* ``rncut``: recursive two-way normalized cut in the style of TokenCut and
  DiffCut (Fiedler vector, best threshold by NCut, recursion on the most
  cuttable segment), written in ``benchmarks/peers.py`` as a baseline;
* ``wkkm``: weighted kernel k-means with the Graclus/Dhillon normalized-cut
  kernel, 10 random restarts, written as a baseline;
* ``ncut-pytorch``: the K-way discretization of the ``ncut-pytorch`` package on
  the K leading eigenvectors of the same W;
* scikit-image ``cut_normalized`` on region adjacency graphs, in the
  segmentation benchmark.
* METIS (``pymetis``) and KaHIP (``kahip``) in the peer benchmark
  (``python -m benchmarks.bench_peers``), each on a grid of vertex weights
  and imbalances: METIS in both its schemes (multilevel k-way and
  recursive bisection), KaHIP in its FAST, ECO and STRONG modes and their
  SOCIAL variants.  The recorded peer run gave METIS pymetis's default
  scheme alone (recursive bisection for K <= 8) and KaHIP no social mode;
  ``python -m benchmarks.bench_peer_configs`` runs the configurations it
  missed on its 85 graphs (``results/peer_configs.md``).  They cut below
  the recorded best peer on 14 graphs (KaHIP's social modes on 13), and
  the default FalconNCut stays at or below the best peer on 80/85 graphs
  instead of 81/85: KaHIP ECOSOCIAL cuts a weighted 60x60 grid at K = 4
  0.6 % lower.

Reproduce with::

    pip install -e ".[bench]"
    python -m benchmarks.run            # full run, results in benchmarks/results/
    python -m benchmarks.run --quick    # under 10 minutes
    python -m benchmarks.run --smoke    # seconds; what CI runs

"""


def markdown_to_rst(md, title):
    """Convert the headings, pipe tables and paragraphs of a markdown file.

    Enough for the result files of this suite (headings, pipe tables, text,
    images); anything else is kept as plain text.
    """
    out = [title, "-" * len(title), ""]
    lines = md.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|") and i + 1 < len(lines) and set(
                lines[i + 1].replace("|", "").strip()) <= set("-: "):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                if not set(lines[i].replace("|", "").strip()) <= set("-: "):
                    rows.append([c.strip() for c in lines[i].strip("|").split("|")])
                i += 1
            out += [".. list-table::", "   :header-rows: 1", ""]
            width = len(rows[0])
            for r in rows:
                r = (r + [""] * width)[:width]
                r = [c if c else " " for c in r]
                out.append("   * - " + r[0])
                out += ["     - " + c for c in r[1:]]
            out.append("")
            continue
        if line.startswith("#"):
            text = line.lstrip("#").strip()
            if text and text != title:
                out += [text, "~" * len(text), ""]
        elif line.startswith("![") and "](" in line:
            path = line.split("](", 1)[1].rstrip(")")
            out += [f".. image:: _static/bench/{Path(path).name}",
                    "   :width: 90%", ""]
        else:
            out.append(line.replace("`", "``").replace("````", "``"))
        i += 1
    return "\n".join(out) + "\n"


# tables of the image benchmarks run by their own scripts (issue 17)
IMAGE_PAGES = (("mosaics", "Mosaics of real photographs and textures"),
               ("position", "The position term of the offline features"),
               ("auto_k", "Choosing the number of segments (n_segments='auto')"),
               ("auto_k_objects", "n_segments='auto' on objects on a background"),
               ("image_scale", "Image segmentation at photo scale"),
               ("warm_video", "Warm starts and video"))


def write_docs(results_dir=RESULTS, docs_dir=ROOT / "docs"):
    """Assemble ``docs/benchmarks.rst`` from the ``*.rst`` fragments."""
    results_dir, docs_dir = Path(results_dir), Path(docs_dir)
    static = docs_dir / "_static" / "bench"
    static.mkdir(parents=True, exist_ok=True)
    parts = [DOCS_HEADER]
    summary = Table("Summary of the targets of the full run",
                    ["suite", "target", "measured", "holds"])
    # peers: benchmarks/bench_peers.py; scale/peers: its scale group, when it
    # was run on its own (--families scale --out results/scale)
    for s in SUITES + ("peers", "scale/peers"):
        js = results_dir / f"{s}.json"
        if js.exists():
            data = json.loads(js.read_text())
            for text, measured, holds in data.get("targets", []):
                summary.add(suite=s, target=text, measured=measured,
                            holds="n/a" if holds is None else
                            ("yes" if holds else "NO"))
    notes = results_dir / "notes.rst"
    if notes.exists():  # hand-written remarks on the recorded run
        parts.append(notes.read_text())
    if summary.rows:
        parts.append("Targets\n-------\n\nEach target of the benchmark issue, "
                     "as measured (nothing was tuned to pass).\n\n"
                     + summary.rst().split("\n", 3)[3])
    found = []
    for s in SUITES + ("peers", "scale/peers"):
        frag = results_dir / f"{s}.rst"
        if frag.exists():
            text = frag.read_text()
            if s == "scale/peers":  # the same report's title, for another run
                title = "Falcon against METIS and KaHIP at scale (the scale group)"
                text = title + "\n" + "-" * len(title) + "\n" + text.split("\n", 2)[2]
            parts.append(text)
            found.append(s)
        elif s == "segmentation" and (results_dir / "segmentation.md").exists():
            parts.append(markdown_to_rst(
                (results_dir / "segmentation.md").read_text(),
                "Image segmentation"))
            found.append(s)
        if s == "segmentation":  # the same benchmark at other image sizes
            for md in sorted(results_dir.glob("segmentation_*px.md")):
                size = md.stem.split("_")[1]
                parts.append(markdown_to_rst(
                    md.read_text(), f"Image segmentation, {size} images"))
            for stem, title in IMAGE_PAGES:  # benchmarks/bench_{mosaics,...}.py
                md = results_dir / f"{stem}.md"
                if md.exists():
                    parts.append(markdown_to_rst(md.read_text(), title))
    gpu = results_dir / "gpu_check.md"
    if gpu.exists():  # benchmarks/gpu_check.py, run by hand on a CUDA machine
        parts.append(markdown_to_rst(gpu.read_text(), "GPU check of the torch backend"))
    for png in results_dir.glob("*.png"):
        shutil.copy2(png, static / png.name)
    if not found:
        parts.append("No results yet: run ``python -m benchmarks.run``.\n")
    (docs_dir / "benchmarks.rst").write_text("\n".join(parts))
    return found


# ===================================================================== main
def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="smaller sizes and fewer repeats (< 10 minutes)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, checks that the scripts run (< 3 minutes)")
    ap.add_argument("--suite", action="append", choices=SUITES,
                    help="run only this suite (repeatable)")
    ap.add_argument("--out", default=None, help="output directory")
    ap.add_argument("--write-docs", action="store_true",
                    help="assemble docs/benchmarks.rst from benchmarks/results")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    if args.write_docs and not args.suite and not (args.quick or args.smoke):
        found = write_docs()
        print(f"docs/benchmarks.rst written from: {', '.join(found) or 'none'}")
        return 0
    mode = "smoke" if args.smoke else ("quick" if args.quick else "full")
    if args.out:
        out_dir = Path(args.out)
    elif mode == "full":
        out_dir = RESULTS
    elif mode == "quick":
        out_dir = RESULTS / "quick"
    else:
        out_dir = Path(tempfile.mkdtemp(prefix="falcon-bench-smoke-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    suites = args.suite or list(SUITES)
    machine = machine_info()
    print(f"[benchmarks] mode={mode} out={out_dir} suites={','.join(suites)}")
    warnings.simplefilter("ignore")
    t_all = time.perf_counter()
    warmup(mode)
    failed = []
    for s in suites:
        t0 = time.perf_counter()
        print(f"[benchmarks] suite {s} ...", flush=True)
        try:
            res = SUITE_FUNCS[s](mode, out_dir)
        except Exception as exc:
            import traceback

            traceback.print_exc()
            failed.append(s)
            res = SuiteResult(s, s)
            res.notes.append(f"Suite failed: {_one_line(type(exc).__name__ + ': ' + str(exc), 400)}")
        res.elapsed = time.perf_counter() - t0
        res.write(out_dir, machine, mode)
        for text, measured, holds in res.targets:
            verdict = "n/a" if holds is None else ("HOLDS" if holds else "FAILS")
            print(f"    target: {text}: {measured} -> {verdict}")
        print(f"[benchmarks] suite {s} done in {res.elapsed:.1f} s", flush=True)
    print(f"[benchmarks] total {time.perf_counter() - t_all:.1f} s; "
          f"results in {out_dir}")
    if args.write_docs:
        write_docs(out_dir)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
