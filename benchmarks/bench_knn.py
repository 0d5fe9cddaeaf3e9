"""The kNN search of ``affinity="nearest_neighbors"``: SciPy's k-d tree
against scikit-learn's ``NearestNeighbors``, where scikit-learn would search
its own k-d tree (dense samples of at most 15 features).

For each size and number of features, one run times the two side by side,
interleaved: the tree built on ``n`` Gaussian samples and the kNN
connectivity graph of the same samples (``n_neighbors=10``, self included),
which is what a fit does.  It reports the median seconds of each, their
ratio, and the entries where the two graphs differ (none is expected: both
searches are exact).  It also counts the rows whose neighbours differ on a
lattice, where many distances tie exactly and each tree keeps its own
choice, and measures what importing ``sklearn.neighbors`` adds to
``import sklearn`` (fresh processes), the import a small fit no longer pays.

Run::

    python -m benchmarks.bench_knn [--repeats 3] [--out DIR]

It writes ``knn.md`` to ``--out`` (default ``benchmarks/results``).
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._report import machine_info

# (n, features); 100,000 x 15 takes minutes per repeat with either search
SIZES = [(n, d) for n in (500, 2_000, 20_000) for d in (2, 3, 8, 15)] + [
    (100_000, 2), (100_000, 3), (100_000, 8)]
K = 10


def _sklearn(X):
    from sklearn.neighbors import NearestNeighbors

    return NearestNeighbors(n_neighbors=K).fit(X).kneighbors_graph(X)


def _scipy(X):
    from sklearn_falcon._affinity._kinds import _TreeNeighbors

    return _TreeNeighbors(X, K).kneighbors_graph(X)


def _timed(fn, X):
    t0 = time.perf_counter()
    out = fn(X)
    return time.perf_counter() - t0, out


def _import_cost(repeats):
    """Median seconds that ``import sklearn.neighbors`` adds after
    ``import sklearn.base`` (fresh processes)."""
    code = ("import time, sklearn.base, sklearn.utils.validation; "
            "t = time.perf_counter(); import sklearn.neighbors; "
            "print(time.perf_counter() - t)")
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                 text=True, check=True).stdout)
            for _ in range(repeats)]
    return statistics.median(runs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-n", type=int, default=None,
                        help="skip sizes above this (a quick run)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args(argv)
    warm = np.random.default_rng(0).normal(size=(100, 2))
    _sklearn(warm), _scipy(warm)  # imports outside the timings
    rows = []
    for n, d in SIZES:
        if args.max_n is not None and n > args.max_n:
            continue
        X = np.random.default_rng(n + d).normal(size=(n, d))
        t_sk, t_sp = [], []
        for _ in range(args.repeats):
            t, A = _timed(_sklearn, X)
            t_sk.append(t)
            t, B = _timed(_scipy, X)
            t_sp.append(t)
        diff = int((A != B).nnz)
        sk, sc = statistics.median(t_sk), statistics.median(t_sp)
        rows.append((n, d, sk, sc, sc / sk, diff))
        print(f"n={n} d={d}: sklearn {sk:.4f} s, scipy {sc:.4f} s, "
              f"ratio {sc / sk:.2f}, differing entries {diff}", flush=True)
    side = 30
    lattice = np.indices((side, side)).reshape(2, -1).T.astype(float)
    A, B = _sklearn(lattice), _scipy(lattice)
    lattice_rows = int(((A != B).sum(axis=1) > 0).sum())
    imp = _import_cost(max(3, args.repeats))

    ratios = [r[4] for r in rows] or [float("nan")]  # --max-n below every n
    info = machine_info()
    lines = [
        "## kNN search: SciPy's k-d tree against scikit-learn's NearestNeighbors",
        "",
        f"Measured {info['date (UTC)']} UTC at {info['git commit']} with "
        f"`python -m benchmarks.bench_knn --repeats {args.repeats}"
        + (f" --max-n {args.max_n}" if args.max_n is not None else "")
        + "` on a shared "
        f"machine ({info['cores']} cores, load average {info['load average']}; "
        f"scipy {info['scipy']}, scikit-learn {info['sklearn']}).",
        "",
        f"The tree and the kNN connectivity graph of the same `n` Gaussian samples "
        f"(`n_neighbors={K}`, self included), as `FalconNCut(affinity="
        f"\"nearest_neighbors\")` builds it; median of {args.repeats} interleaved "
        "runs, wall seconds on a shared machine (read the ratios).",
        "",
        "| n | features | NearestNeighbors [s] | cKDTree [s] "
        "| cKDTree / NearestNeighbors | differing entries |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {n:,} | {d} | {sk:.4f} | {sc:.4f} | {r:.2f} | {diff} |"
              for n, d, sk, sc, r, diff in rows]
    lines += [
        "",
        f"Ratio: median {statistics.median(ratios):.2f}, min {min(ratios):.2f}, "
        f"max {max(ratios):.2f}.",
        "",
        f"A {side} x {side} integer lattice (exact ties): the neighbours of "
        f"{lattice_rows} of {side * side} rows differ between the two trees "
        "(each keeps its own choice among samples at equal distances).",
        "",
        f"`import sklearn.neighbors` after `import sklearn.base`: {imp:.3f} s "
        "(median of fresh processes); a fit that searches with SciPy's tree does "
        "not import it.",
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "knn.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
