"""Cost of the matrix-free torch path: one pass over ``W``, and a whole fit.

``FalconNCut(affinity="rbf" | "cosine", backend="torch")`` never stores the
``n x n`` affinity: every pass over ``W`` (its degrees, the ``W X`` product
of an iteration, a polishing sweep) recomputes it from the features, in row
blocks.  A pass costs about ``2 n^2 (p + K)`` flops, so its time grows as
``n^2``.  This script measures, on the torch device(s) available:

* **one pass**: the seconds of the degrees pass (``Affinity.degrees``) and
  of a ``W X`` pass (``cluster_weights_features``) for several ``n``, and
  the nanoseconds per entry of ``W`` they imply;
* **a fit**: seconds and passes of a whole ``FalconNCut`` fit at one ``n``
  (the number of passes does not depend on the device), after an untimed
  fit on the same device;
* the extrapolation to 200,000 samples (4e10 entries per pass).

Run::

    python -m benchmarks.bench_matrix_free [--sizes 2000 4000 8000] [--out DIR]

It writes ``matrix_free.md`` to ``--out`` (default ``benchmarks/results``).
"""

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

P, K = 16, 8  # features and clusters of the measurement


def _time(fn, sync, repeats):
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def measure_pass(n, device, repeats=5):
    import torch

    from sklearn_falcon._backends._torch._affinity import (
        Affinity,
        cluster_weights_features,
        default_block_elems,
    )

    dtype = torch.float64 if device == "cpu" else torch.float32
    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.normal(size=(1, n, P)), dtype=dtype, device=device)
    valid = torch.ones(1, n, dtype=torch.bool, device=device)
    A = Affinity(X, valid, "rbf", gamma=1.0 / P,
                 block_elems=default_block_elems(device))
    labels = torch.as_tensor(rng.integers(0, K, (1, n)), device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    t_deg = _time(A.degrees, sync, repeats)
    t_wx = _time(lambda: cluster_weights_features(A, labels, K), sync, repeats)
    return t_deg, t_wx


def measure_fit(n, device, polish=True):
    """Seconds and passes over W of one fit (passes counted on the problem)."""
    from sklearn.datasets import make_blobs

    from sklearn_falcon import FalconNCut
    from sklearn_falcon._backends._torch import _affinity as ta

    X, _ = make_blobs(n_samples=n, n_features=P, centers=K, cluster_std=4.0,
                      random_state=0)
    count = {"rows": 0}
    rows = ta.Affinity.rows

    def counting_rows(self, idx):
        count["rows"] += idx.shape[0] * idx.shape[1]
        return rows(self, idx)

    ta.Affinity.rows = counting_rows
    try:
        t0 = time.perf_counter()
        est = FalconNCut(K, affinity="rbf", gamma=1.0 / P, backend="torch",
                         device=device, polish=polish, random_state=0).fit(X)
        t_fit = time.perf_counter() - t0
    finally:
        ta.Affinity.rows = rows
    return t_fit, count["rows"] / n, est.n_iter_, est.ncut_


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 4000, 8000,
                                                                  12000])
    parser.add_argument("--fit-size", type=int, default=4000)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    lines = [
        "# Matrix-free torch path: the cost of a pass over W",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other "
        f"jobs: read the ratios and the orders of magnitude), torch "
        f"{torch.__version__}, torch threads {torch.get_num_threads()}"
        + (f", GPU {torch.cuda.get_device_name(0)}" if len(devices) > 1 else "")
        + f". rbf affinity, p={P} features, K={K} clusters; float64 on the CPU, "
        "float32 on CUDA; fastest of 5 repeats; the cost per entry extrapolated "
        "is that of the largest n (the least overhead).",
        "",
        "Command: `python -m benchmarks.bench_matrix_free "
        + " ".join(["--sizes", *map(str, args.sizes), "--fit-size",
                    str(args.fit_size)]) + "`",
        "",
        "## One pass over W",
        "",
        "| device | n | entries of W | degrees pass (s) | W X pass (s) | "
        "ns per entry (W X) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    per_entry = {}
    for device in devices:
        costs = []
        for n in args.sizes:
            t_deg, t_wx = measure_pass(n, device)
            ns = 1e9 * t_wx / n**2
            costs.append(ns)
            lines.append(f"| {device} | {n:,} | {n * n:.3g} | {t_deg:.3f} | "
                         f"{t_wx:.3f} | {ns:.2f} |")
        per_entry[device] = costs[-1]
    lines += ["", "## A whole fit", "",
              "| device | n | polish | fit (s) | passes over W (rows formed / n) | "
              "iterations | NCut |", "|---|---:|---|---:|---:|---:|---:|"]
    fits = {}
    for device in devices:
        # untimed: load the compiled kernels of the fit (the multilevel start
        # runs Numba kernels), which the first timed fit would otherwise pay
        measure_fit(min(500, args.fit_size), device, True)
        for polish in (True, False):
            t_fit, passes, n_iter, ncut = measure_fit(args.fit_size, device, polish)
            if polish:
                fits[device] = passes
            lines.append(f"| {device} | {args.fit_size:,} | {polish} | {t_fit:.2f} | "
                         f"{passes:.1f} | {n_iter} | {ncut:.4g} |")
    n_big = 200_000
    lines += ["", "## Extrapolation to 200,000 samples", "",
              "| device | ns per entry | one pass (s) | a fit of as many passes as "
              "above, with polish (min) |", "|---|---:|---:|---:|"]
    for device in devices:
        one = per_entry[device] * 1e-9 * n_big**2
        lines.append(f"| {device} | {per_entry[device]:.2f} | {one:.0f} | "
                     f"{one * fits[device] / 60:.0f} |")
    lines += ["", "A pass costs O(n^2 (p + K)): doubling n multiplies it by 4. "
              "A fit makes one pass for the degrees, then, for each starting "
              "labelling, one for W X, the rows of the nodes that move in each "
              "iteration (a full pass when more than a third move), and one per "
              "polishing sweep (up to 20): the number of passes depends on the "
              "data, not on n alone, and polish=False removes the sweeps."]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix_free.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
