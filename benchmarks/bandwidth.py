"""The CSR iteration against the memory roofline, threads, and fit memory.

Run through the suite runner (``python -m benchmarks.run --suite
bandwidth``, which writes ``results/bandwidth.md``) or alone::

    python -m benchmarks.bandwidth [--quick]

For each graph (K = 20 clusters, random labels):

* **roofline**: the bytes one pass over ``W`` must read (the three CSR
  arrays, the labels it gathers, the degrees) and write (the per-node
  choices of the step), and the time ``np.copyto`` takes to copy the CSR
  arrays (it reads and writes that many bytes), in the same process;
* **W.X pass**: one pass of :func:`row_choices` (each row's weights to the
  clusters and the step's choices; it replaces the explicit ``(n, K)``
  ``W @ X``), and for reference the explicit ``W @ X``;
* **iteration**: a proximal iteration, trial steps included, as the
  difference of a 20- and a 2-iteration solve from the same random labels
  divided by the difference of their iteration counts (``tol=0``, no
  polish);
* the same at 1 and 2 Numba threads (the speed-up of ``n_jobs=2``), and the
  speed-up of a whole fit;
* the growth of peak resident memory of ``FalconNCut(20,
  affinity="precomputed").fit(W)`` in a fresh process, against the CSR size.

Copies, passes and iterations are interleaved and repeated; the tables show
medians of wall-clock time and, since the machine is shared, also of the
CPU time of the measuring thread for the single-threaded runs (what an idle
machine would show as wall time).
"""

import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from . import graphs as G

ROOT = Path(__file__).resolve().parent.parent
K = 20

INTRO = (
    "`python -m benchmarks.run --suite bandwidth` (or `python -m "
    "benchmarks.bandwidth`). Graphs with K = 20 clusters, random labels. The "
    "*W.X pass* is one pass of the CSR kernel `row_choices` (each row's "
    "weights to the clusters and the step's choices; it replaces the explicit "
    "(n, K) product W @ X, listed for reference); an *iteration* is a proximal "
    "iteration with its trial steps, measured as the difference of a 20- and "
    "a 2-iteration solve from the same labels (tol=0, no polish) divided by "
    "the difference of their iteration counts. Copies, passes and iterations "
    "are interleaved; medians. The machine is shared (see its load average "
    "below): wall time includes the time the process waited for a core, so "
    "single-threaded rows also give the CPU time of the measuring thread, "
    "which is what an idle machine would show as wall time.")


def _graph(kind, n):
    if kind == "sbm":
        W, _ = G.sbm_graph(n, K, avg_degree=10, seed=0)
    else:
        W, _ = G.knn_graph_million(n=n, k=10, n_clusters=K, seed=0)
    from sklearn_falcon._affinity import clean_csr

    return clean_csr(W)  # int32 indices, as FalconNCut holds it


def _csr_bytes(W):
    return W.data.nbytes + W.indices.nbytes + W.indptr.nbytes


class _Clock:
    """Wall, thread-CPU and process-CPU (all threads) seconds of a call."""

    def __init__(self):
        self.wall, self.cpu, self.proc = [], [], []

    def __call__(self, fn, *args):
        w, c, p = time.perf_counter(), time.thread_time(), time.process_time()
        out = fn(*args)
        self.proc.append(time.process_time() - p)
        self.cpu.append(time.thread_time() - c)
        self.wall.append(time.perf_counter() - w)
        return out

    def med(self):
        return (float(np.median(self.wall)), float(np.median(self.cpu)),
                float(np.median(self.proc)))


def measure_graph(W, repeats=5, seed=0):
    """Roofline bytes and median times (wall, thread CPU) of a copy, a pass
    and an iteration at 1 and 2 threads."""
    import numba

    from sklearn_falcon._backends._numba import NumbaProblem
    from sklearn_falcon._backends._numba import _csr as ncsr
    from sklearn_falcon._backends._numba import _kernels as nk
    from sklearn_falcon._solver import SolverOptions, solve

    n, nnz = W.shape[0], W.nnz
    nb = _csr_bytes(W)
    src = np.ones(nb, dtype=np.uint8)
    dst = np.empty_like(src)
    rng = np.random.default_rng(seed)
    y = rng.integers(K, size=n)
    y[:K] = np.arange(K)
    d = np.asarray(W.sum(axis=1)).ravel()
    P = NumbaProblem(W, K, degrees=d)
    X = P.from_labels(y)
    vol, assoc = P.stats(P.weights(X), X)
    out = (np.empty(n, dtype=X.dtype),) + tuple(np.empty(n) for _ in range(4))

    def copy():
        np.copyto(dst, src)

    def one_pass():
        ncsr.row_choices(W.indptr, W.indices, W.data, X, d, vol, assoc, *out)

    def explicit_wx():
        nk.cluster_weights_csr(W.indptr, W.indices, W.data, X, K)

    def solve_iters(m):
        return solve(P, y, SolverOptions(max_iter=m, polish=False, tol=0.0))

    copy(), one_pass(), explicit_wx(), solve_iters(2)  # compile, fault pages in
    before = numba.get_num_threads()
    res = {"n": n, "nnz": nnz, "csr_bytes": nb,
           "label_bytes": X.dtype.itemsize, "threads": {}}
    try:
        for threads in (1, 2):
            numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
            c_copy, c_pass, c_wx, c_it = _Clock(), _Clock(), _Clock(), _Clock()
            counts = []
            for _ in range(repeats):
                c_copy(copy)
                c_pass(one_pass)
                c_wx(explicit_wx)
            for _ in range(max(2, repeats // 2)):
                w0 = time.perf_counter()
                c0 = time.process_time()
                r2 = solve_iters(2)
                w2, cp2 = time.perf_counter() - w0, time.process_time() - c0
                w0 = time.perf_counter()
                c0 = time.process_time()
                r20 = solve_iters(20)
                w20, cp20 = time.perf_counter() - w0, time.process_time() - c0
                k = int(r20.n_iter[0] - r2.n_iter[0])
                c_it.wall.append((w20 - w2) / k)
                c_it.cpu.append((cp20 - cp2) / k)  # all threads
                c_it.proc.append((cp20 - cp2) / k)
                counts.append((k, int(r20.n_backtracks[0] - r2.n_backtracks[0])))
            res["threads"][threads] = {
                "copy": c_copy.med(), "pass": c_pass.med(), "wx": c_wx.med(),
                "iteration": c_it.med(), "iterations": counts[0][0],
                "backtracks": counts[0][1]}
    finally:
        numba.set_num_threads(before)
    return res


def fit_speedup(W, repeats=3):
    """Wall seconds of ``FalconNCut(K, affinity="precomputed",
    n_jobs=t).fit(W)`` for t = 1, 2, interleaved."""
    from sklearn_falcon import FalconNCut

    times = {1: [], 2: []}
    FalconNCut(K, affinity="precomputed", n_jobs=1, random_state=0).fit(W)
    for _ in range(repeats):
        for t in (1, 2):
            w0 = time.perf_counter()
            FalconNCut(K, affinity="precomputed", n_jobs=t, random_state=0).fit(W)
            times[t].append(time.perf_counter() - w0)
    return {t: float(np.median(v)) for t, v in times.items()}


# --------------------------------------------------------- design record
def label_width_and_scoring(W, y_planted, repeats=3):
    """Thread-CPU seconds of a pass with random labels of 8, 4 and 1 bytes,
    and with 1-byte planted labels (5% redrawn: few clusters per row, as late
    in a solve), scoring all K clusters of a row (the package's kernel) or
    only those present among its neighbours (a variant written here), on
    one thread."""
    import numba

    from sklearn_falcon._backends._numba import _csr as ncsr
    from sklearn_falcon._backends._numba import _kernels as nk

    n = W.shape[0]
    rng = np.random.default_rng(1)
    y = rng.integers(K, size=n)
    planted = np.array(y_planted, copy=True)
    flip = rng.random(n) < 0.05
    planted[flip] = rng.integers(K, size=int(flip.sum()))
    d = np.asarray(W.sum(axis=1)).ravel()
    outs = (np.empty(n, dtype=np.int64),) + tuple(np.empty(n) for _ in range(4))
    present = _present_only_kernel()
    rows = {}
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        for key, labels, dt in (("random int64", y, np.int64),
                                ("random int32", y, np.int32),
                                ("random int8", y, np.int8),
                                ("planted (5% redrawn) int8", planted, np.int8)):
            lab = labels.astype(dt)
            vol = np.bincount(lab, weights=d, minlength=K)
            assoc = 0.3 * vol
            inv_vol, pen = nk._score_terms(vol, assoc)
            best = np.empty(n, dtype=dt)
            calls = {
                "all K clusters": lambda: ncsr._row_choices_ser(
                    W.indptr, W.indices, W.data, lab, d, vol, assoc, best, *outs[1:]),
                "present clusters only": lambda: present(
                    W.indptr, W.indices, W.data, lab, d, vol, inv_vol, pen, best,
                    outs[1]),
            }
            for name, fn in calls.items():
                fn()
                c = _Clock()
                for _ in range(repeats):
                    c(fn)
                rows[(key, name)] = c.med()[1]
    finally:
        numba.set_num_threads(before)
    return rows


def _present_only_kernel():
    """The other scoring design: a row's clusters are tracked in a list, and
    only those (plus the best absent one, found by a scan of the clusters
    ordered by ``pen``) are scored.  Kept here as the measured alternative."""
    from numba import njit

    @njit(nogil=True)
    def present(indptr, indices, data, labels, degrees, vol, inv_vol, pen, best,
                s_best):
        K_ = vol.shape[0]
        order = np.argsort(pen)
        acc = np.zeros(K_)
        mark = np.full(K_, -1, dtype=np.int64)
        touched = np.empty(K_, dtype=np.int64)
        for i in range(labels.shape[0]):
            m = 0
            for p in range(indptr[i], indptr[i + 1]):
                k = labels[indices[p]]
                if mark[k] != i:
                    mark[k] = i
                    acc[k] = 0.0
                    touched[m] = k
                    m += 1
                acc[k] += data[p]
            c = labels[i]
            dd = degrees[i]
            b = -1
            sb = -np.inf
            for t in range(m):
                k = touched[t]
                s = 2.0 * acc[k] * inv_vol[k] - dd * pen[k]
                if k != c and vol[k] > 0.0 and (s > sb or (s == sb and k < b)):
                    b, sb = k, s
            for q in range(K_):  # the best absent cluster
                k = order[q]
                if k != c and mark[k] != i and vol[k] > 0.0:
                    s = -dd * pen[k]
                    if s > sb or (s == sb and k < b):
                        b, sb = k, s
                    break
            best[i] = b
            s_best[i] = sb

    return present


# ------------------------------------------------------------ before/after
# Run with ``python -c`` in the directory of a checkout, so that this
# checkout's package (any version) and graphs are the ones measured.
ITERATION_CHILD = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np, numba
from benchmarks import graphs as G
from sklearn_falcon._affinity import clean_csr
from sklearn_falcon._backends._numba import NumbaProblem
from sklearn_falcon._backends._numba import _kernels as nk
from sklearn_falcon._solver import SolverOptions, solve
numba.set_num_threads(1)
n, K = int(sys.argv[1]), 20
W = clean_csr(G.sbm_graph(n, K, avg_degree=10, seed=0)[0])
nb = W.data.nbytes + W.indices.nbytes + W.indptr.nbytes
src = np.ones(nb, dtype=np.uint8); dst = np.empty_like(src)
y = np.random.default_rng(0).integers(K, size=n); y[:K] = np.arange(K)
y64 = y.astype(np.int64)
P = NumbaProblem(W, K)
def it(m):
    return solve(P, y, SolverOptions(max_iter=m, polish=False, tol=0.0))
def cpu(f, *a):
    c = time.thread_time(); f(*a); return time.thread_time() - c
it(2); nk.cluster_weights_csr(W.indptr, W.indices, W.data, y64, K)
copy, wx, per_it = [], [], []
for _ in range(3):
    copy.append(cpu(np.copyto, dst, src))
    wx.append(cpu(nk.cluster_weights_csr, W.indptr, W.indices, W.data, y64, K))
    c0 = time.process_time(); r2 = it(2); c2 = time.process_time() - c0
    c0 = time.process_time(); r20 = it(20); c20 = time.process_time() - c0
    per_it.append((c20 - c2) / int(r20.n_iter[0] - r2.n_iter[0]))
# from a good start (planted labels, 40% redrawn): few nodes move per iteration
noisy = {}
for name in ("sbm", "knn"):
    if name == "sbm":
        Wn, yn = G.sbm_graph(n, K, avg_degree=10, seed=0)
    else:
        Wn, yn = G.knn_graph_million(n=n, k=10, n_clusters=K, seed=0)
    Wn = clean_csr(Wn)
    rng = np.random.default_rng(0)
    y0 = yn.copy(); flip = rng.random(n) < 0.4
    y0[flip] = rng.integers(K, size=int(flip.sum())); y0[:K] = np.arange(K)
    Pn = NumbaProblem(Wn, K)
    opt = SolverOptions(polish=False, max_iter=100)
    solve(Pn, y0, opt)
    cs = []
    for _ in range(3):
        c0 = time.process_time(); rn = solve(Pn, y0, opt); cs.append(time.process_time() - c0)
    noisy[name] = [float(np.median(cs)) / int(rn.n_iter[0]), int(rn.n_iter[0]),
                   float(rn.objective[0])]
print("JSON:" + json.dumps({"copy": float(np.median(copy)), "wx": float(np.median(wx)),
      "iteration": float(np.median(per_it)), "iterations": int(r20.n_iter[0]),
      "objective": float(r20.objective[0]), "noisy": noisy}))
"""


def before_after(baseline, n=1_000_000, rounds=2):
    """This tree against another checkout, interleaved in fresh processes
    (one thread: thread-CPU and process-CPU seconds)."""
    import os

    out = {"this": [], "baseline": []}
    for _ in range(rounds):
        for name, tree in (("baseline", baseline), ("this", str(ROOT))):
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            p = subprocess.run([sys.executable, "-c", ITERATION_CHILD, str(n)],
                               cwd=tree, env=env, capture_output=True, text=True,
                               timeout=3600)
            line = [x for x in p.stdout.splitlines() if x.startswith("JSON:")]
            if not line:
                raise RuntimeError(p.stderr[-2000:])
            out[name].append(json.loads(line[-1][5:]))
    return out


# ------------------------------------------------------------------ memory
def _child_memory(kind, n):
    from benchmarks._report import PeakMemory
    from sklearn_falcon import FalconNCut

    Ws, _ = G.sbm_graph(5000, K, seed=1)  # compile first: JIT memory excluded
    FalconNCut(K, affinity="precomputed", random_state=0).fit(Ws)
    del Ws
    W = _graph(kind, n)
    gc.collect()
    with PeakMemory() as pm:
        t0 = time.perf_counter()
        est = FalconNCut(K, affinity="precomputed", random_state=0).fit(W)
        t = time.perf_counter() - t0
    out = {"n": n, "nnz": int(W.nnz), "csr_mb": _csr_bytes(W) / 2**20,
           "peak_mb": pm.peak_mb, "fit_s": t, "ncut": float(est.ncut_)}
    del est
    gc.collect()
    # the same fit again, with the peak of each stage (above the memory in
    # use when the stage starts): the initialization and the solves
    from sklearn_falcon import _falcon

    stages = {"init": 0.0, "solve": 0.0}

    def measured(name, fn):
        def wrapper(*args, **kwargs):
            with PeakMemory() as st:
                res = fn(*args, **kwargs)
            stages[name] = max(stages[name], st.peak_mb)
            return res
        return wrapper

    try:
        _falcon.make_starts = measured("init", _falcon.make_starts)
        _falcon.solve = measured("solve", _falcon.solve)
        FalconNCut(K, affinity="precomputed", random_state=0).fit(W)
        out.update(init_mb=stages["init"], solve_mb=stages["solve"])
    except Exception:  # the estimator's internals moved: whole-fit figure only
        pass
    return out


def fit_memory(kind, n, timeout=1800):
    cmd = [sys.executable, "-m", "benchmarks.bandwidth", "--child-memory", kind,
           str(n)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("JSON:"):
            return json.loads(line[5:])
    return {"error": (p.stderr or p.stdout)[-400:]}


# ------------------------------------------------------------------- suite
def suite(mode, out_dir=None):
    """The ``bandwidth`` suite of :mod:`benchmarks.run`."""
    from . import _report as R

    res = R.SuiteResult(
        "bandwidth", "Memory-bandwidth roofline of the CSR iteration", INTRO)
    if mode == "smoke":
        specs = {"sbm-5000": ("sbm", 5000)}
        repeats = 2
    elif mode == "quick":
        specs = {"sbm-100000": ("sbm", 100_000), "sbm-1000000": ("sbm", 1_000_000)}
        repeats = 3
    else:
        specs = {"sbm-100000": ("sbm", 100_000), "sbm-1000000": ("sbm", 1_000_000),
                 "knn-mix-1000000": ("knn", 1_000_000)}
        repeats = 5
    roof = R.Table(
        "Roofline: bytes of one pass and the time of a copy",
        ["graph", "n", "nnz", "CSR MB", "pass reads MB", "pass writes MB",
         "copy of CSR [ms] wall", "copy [ms] CPU", "copy GB/s (r+w, CPU)"],
        note="A pass reads the CSR arrays, gathers the labels of every "
        "neighbour (at least the label array once; labels are "
        "int8 for K = 20) and reads the degrees; it writes five per-node "
        "arrays (best cluster, two scores, two weights: 33 bytes per node). "
        "`copy` is `np.copyto` of a byte array as large as the three CSR "
        "arrays.")
    tbl = R.Table(
        "Time per pass and per iteration against a copy of the CSR arrays",
        ["graph", "threads", "W.X pass [ms]", "pass/copy", "iteration [ms]",
         "iteration/copy", "explicit W@X [ms]", "W@X/copy", "iterations",
         "backtracks"],
        note="Ratios divide by the copy measured in the same run with the same "
        "clock: wall time for 2 threads, thread-CPU time for 1 thread (the "
        "iteration's CPU time on 1 thread is the process's). Targets: pass "
        "<= 1.5x, iteration <= 3x.")
    thr = R.Table(
        "Threads: 1 against 2 Numba threads",
        ["graph", "parallel", "pass 1t/2t wall", "pass CPU 2t/1t",
         "pass 1t/2t idle estimate",
         "iteration 1t/2t wall", "iteration CPU 2t/1t", "fit 1t [s]", "fit 2t [s]",
         "fit 1t/2t wall"],
        note="`wall`: measured speed-up (on this shared machine the second "
        "core is rarely free). `CPU 2t/1t`: CPU time of all threads with two "
        "threads over one (1 = no parallel overhead). `idle estimate`: the "
        "speed-up an idle 2-core machine would give if the two threads split "
        "the CPU time of the 2-thread run: CPU 1t / (CPU 2t / 2). The CSR "
        "kernels run in parallel from 1M stored entries on (`parallel`); "
        "below, the 2-thread rows run the same serial kernels (their ratios "
        "are noise).")
    worst_pass = worst_it = 0.0
    for gname, (kind, n) in specs.items():
        W = _graph(kind, n)
        m = measure_graph(W, repeats=repeats)
        nb = m["csr_bytes"]
        reads = nb + n * (m["label_bytes"] + 8)
        writes = n * (m["label_bytes"] + 32)
        c1w, c1c = m["threads"][1]["copy"][:2]
        roof.add(graph=gname, n=n, nnz=W.nnz, **{
            "CSR MB": nb / 2**20, "pass reads MB": reads / 2**20,
            "pass writes MB": writes / 2**20, "copy of CSR [ms] wall": 1e3 * c1w,
            "copy [ms] CPU": 1e3 * c1c, "copy GB/s (r+w, CPU)": 2 * nb / c1c / 1e9})
        for t in (1, 2):
            r = m["threads"][t]
            i = 1 if t == 1 else 0  # thread CPU on 1 thread, wall on 2
            copy = r["copy"][i]
            tbl.add(graph=gname, threads=f"{t} ({'CPU' if i else 'wall'})", **{
                "W.X pass [ms]": 1e3 * r["pass"][i],
                "pass/copy": r["pass"][i] / copy,
                "iteration [ms]": 1e3 * r["iteration"][i],
                "iteration/copy": r["iteration"][i] / copy,
                "explicit W@X [ms]": 1e3 * r["wx"][i], "W@X/copy": r["wx"][i] / copy,
                "iterations": r["iterations"], "backtracks": r["backtracks"]})
            if n >= 100_000:
                worst_pass = max(worst_pass, r["pass"][i] / copy)
                worst_it = max(worst_it, r["iteration"][i] / copy)
        fits = fit_speedup(W, repeats=1 if mode == "smoke" else 2)
        r1, r2 = m["threads"][1], m["threads"][2]
        from sklearn_falcon._backends._numba._csr import CSR_PARALLEL_MIN

        thr.add(graph=gname, **{
            "parallel": "yes" if W.nnz >= CSR_PARALLEL_MIN else "no",
            "pass 1t/2t wall": r1["pass"][0] / r2["pass"][0],
            "pass CPU 2t/1t": r2["pass"][2] / r1["pass"][2],
            "pass 1t/2t idle estimate": r1["pass"][2] / (r2["pass"][2] / 2),
            "iteration 1t/2t wall": r1["iteration"][0] / r2["iteration"][0],
            "iteration CPU 2t/1t": r2["iteration"][2] / r1["iteration"][2],
            "fit 1t [s]": fits[1], "fit 2t [s]": fits[2],
            "fit 1t/2t wall": fits[1] / fits[2]})
        del W
        gc.collect()
    res.tables += [roof, tbl, thr]
    if mode != "smoke":
        res.target("W.X pass <= 1.5x a copy of the CSR arrays (100k, 1M nodes)",
                   f"worst {worst_pass:.2f}x", worst_pass <= 1.5)
        res.target("iteration <= 3x a copy (100k, 1M nodes)",
                   f"worst {worst_it:.2f}x", worst_it <= 3.0)
        mem = R.Table("Peak memory of a fit (fresh process)",
                      ["graph", "n", "nnz", "CSR MB", "peak growth MB",
                       "peak/CSR", "init peak/CSR", "solve peak/CSR", "fit [s]",
                       "NCut"],
                      note="`FalconNCut(20, affinity='precomputed').fit(W)`; "
                      "the stages' peaks are measured in a second fit, each "
                      "above the memory in use when it starts: the "
                      "initialization (`make_starts`) and the largest solve.")
        worst = 0.0
        for gname, (kind, n) in specs.items():
            if n < 1_000_000 and mode == "full":
                continue
            out = fit_memory(kind, n)
            if "error" in out:
                res.notes.append(f"{gname}: memory run failed: "
                                 f"{R._one_line(out['error'], 300)}")
                continue
            ratio = out["peak_mb"] / out["csr_mb"]
            worst = max(worst, ratio)
            mem.add(graph=gname, n=out["n"], nnz=out["nnz"], **{
                "CSR MB": out["csr_mb"], "peak growth MB": out["peak_mb"],
                "peak/CSR": ratio,
                "init peak/CSR": out.get("init_mb", float("nan")) / out["csr_mb"],
                "solve peak/CSR": out.get("solve_mb", float("nan")) / out["csr_mb"],
                "fit [s]": out["fit_s"], "NCut": out["ncut"]})
        res.tables.append(mem)
        res.target("fit's peak memory growth <= 2x the CSR size (1M nodes)",
                   f"worst {worst:.2f}x", worst <= 2.0)
        n_d = 1_000_000 if mode == "full" else 100_000
        W, y_planted = G.sbm_graph(n_d, K, avg_degree=10, seed=0)
        from sklearn_falcon._affinity import clean_csr

        rows = label_width_and_scoring(clean_csr(W), y_planted)
        des = R.Table(
            "Design record: label width and scoring (one thread, CPU ms)",
            ["labels", "all K clusters (the kernel)", "present clusters only"],
            note=f"A pass on the {n_d:,}-node SBM, K = {K}, thread-CPU time on "
            "one thread. The pass gathers the label of every neighbour at "
            "random; narrower labels keep more of them in cache. Scoring only "
            "the clusters present in a row (and the best absent one) branches "
            "on every neighbour: it loses with random labels (many clusters "
            "per row, early in a solve from random labels) and gains with "
            "planted ones (few per row, late in a solve).")
        for key in ("random int64", "random int32", "random int8",
                    "planted (5% redrawn) int8"):
            des.add(labels=key, **{
                "all K clusters (the kernel)": 1e3 * rows[(key, "all K clusters")],
                "present clusters only": 1e3 * rows[(key, "present clusters only")]})
        res.tables.append(des)
    return res


def build_parser():
    """The command line (``--help`` lists it; an unknown option is an error,
    never a full run that writes into ``benchmarks/results/``)."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.bandwidth",
        description="The CSR iteration against the memory roofline, threads and "
                    "fit memory; writes bandwidth.md into benchmarks/results/ "
                    "(results/quick/ with --quick).")
    ap.add_argument("--quick", action="store_true",
                    help="smaller graphs (100k and 1M-node SBMs)")
    ap.add_argument("--before-after", nargs="+", metavar=("BASELINE", "N"),
                    help="this tree against the checkout BASELINE on an N-node "
                         "SBM (default 1,000,000), printed, nothing written")
    ap.add_argument("--child-memory", nargs=2, help=argparse.SUPPRESS)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.before_after:
        if len(args.before_after) > 2:
            build_parser().error("--before-after takes BASELINE and an optional N")
        baseline = args.before_after[0]
        n = int(args.before_after[1]) if len(args.before_after) > 1 else 1_000_000
        rev = subprocess.run(["git", "-C", baseline, "log", "-1", "--format=%h"],
                             capture_output=True, text=True).stdout.strip()
        out = before_after(baseline, n)
        lines = [f"### Before and after: {n:,}-node SBM, K = {K}, one thread "
                 f"(baseline {rev}; fresh processes, interleaved)", "",
                 "Thread-CPU (copy, W@X) and process-CPU (iteration) seconds, "
                 "medians; ratios to the copy of the same process.", "",
                 "| tree | copy [ms] | explicit W@X / copy | iteration [ms] | "
                 "iteration / copy | iterations | f after 20 |",
                 "|---|---|---|---|---|---|---|"]
        for name in ("baseline", "this"):
            rs = out[name]
            med = {k: float(np.median([r[k] for r in rs]))
                   for k in ("copy", "wx", "iteration")}
            lines.append(
                f"| {name} | {1e3 * med['copy']:.1f} | "
                f"{med['wx'] / med['copy']:.1f}x | {1e3 * med['iteration']:.0f} | "
                f"{med['iteration'] / med['copy']:.1f}x | {rs[0]['iterations']} | "
                f"{rs[0]['objective']:.10f} |")
        lines += ["", "From a good start (planted labels with 40% redrawn; few nodes "
                  "move per iteration), the same processes: process-CPU per "
                  "iteration of a solve to convergence (no polish), one thread.", "",
                  "| tree | SBM [ms/iter] | iterations | f | kNN [ms/iter] | "
                  "iterations | f |", "|---|---|---|---|---|---|---|"]
        for name in ("baseline", "this"):
            rs = out[name]
            cells = []
            for g in ("sbm", "knn"):
                per = float(np.median([r["noisy"][g][0] for r in rs]))
                cells += [f"{1e3 * per:.0f}", str(rs[0]["noisy"][g][1]),
                          f"{rs[0]['noisy'][g][2]:.10f}"]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        print("\n".join(lines))
        return
    if args.child_memory:
        import warnings

        warnings.simplefilter("ignore")
        out = _child_memory(args.child_memory[0], int(args.child_memory[1]))
        print("JSON:" + json.dumps(out), flush=True)
        return
    from . import _report as R

    mode = "quick" if args.quick else "full"
    t0 = time.perf_counter()
    res = suite(mode)
    res.elapsed = time.perf_counter() - t0
    out = R.RESULTS if mode == "full" else R.RESULTS / "quick"
    res.write(out, R.machine_info(), mode)
    print((out / "bandwidth.md").read_text())


if __name__ == "__main__":
    main()
