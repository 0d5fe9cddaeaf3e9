"""Compile sklearn-falcon's Numba kernels ahead of time, into Numba's cache.

The first fit in a fresh environment compiles the kernels its path needs
(several seconds); every later process loads them from Numba's cache.  Run
this once per environment to do all of it up front, for example in a
Dockerfile after ``pip install``, or on a cluster's shared install::

    python -m sklearn_falcon.prebuild

It runs small fits that cover the common paths (sparse kNN graphs and dense
rbf / cosine affinities, float32 and float64, every initialization,
``predict``, batches, PAMR and upsampling, the Dask backend's block tasks)
and calls the parallel kernels that large graphs use; with
``--fork-twins`` it also compiles their serial twins, which forked workers
run.  The cache is written for the CPU of the
machine that runs it: to ``NUMBA_CACHE_DIR`` when it is set (Numba's first
choice), else to the package's ``__pycache__`` directories when they are
writable (a read-only install built this way is then read from), else to
Numba's user-wide cache directory.  The command exits with status 1 where
nothing would be kept: the cache switched off (``SKLEARN_FALCON_NUMBA_CACHE=0``),
or no writable location for it.
"""

import argparse
import sys
import time

__all__ = ["prebuild"]


def _sparse_fits():
    import numpy as np

    from ._falcon import FalconNCut

    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(0, 1, (80, 4)), rng.normal(6, 1, (80, 4))]
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        for init in ("multilevel", "spectral", "kmeans", "random"):
            est = FalconNCut(2, init=init, random_state=0).fit(Xd)
        est.predict(Xd[:5])
    # more clusters and samples: the multilevel start's other stages
    centres = rng.uniform(-10, 10, (6, 2))
    X = (centres[:, None, :] + rng.normal(size=(6, 150, 2))).reshape(-1, 2)
    for K in (3, 6):
        FalconNCut(K, random_state=0).fit(X)


def _dense_fits():
    import numpy as np

    from ._falcon import FalconNCut

    rng = np.random.default_rng(1)
    X = np.r_[rng.normal(0, 1, (60, 4)), rng.normal(6, 1, (60, 4))]
    for dtype in (np.float64, np.float32):
        for affinity in ("rbf", "cosine"):
            Xd = X.astype(dtype)
            est = FalconNCut(2, affinity=affinity, gamma=0.1, random_state=0).fit(Xd)
            est.predict(Xd[:5])
        # a precomputed dense affinity (its own input checks)
        FalconNCut(2, affinity="precomputed", random_state=0).fit(est.affinity_matrix_)


def _batches():
    import numpy as np

    from ._batch import falcon_batch

    rng = np.random.default_rng(2)
    feats = [rng.normal(size=(50, 6)).astype(np.float32) for _ in range(2)]
    falcon_batch(feats, 3, affinity="cosine", power=3.0, backend="numba",
                 random_state=0)


def _parallel_kernels():
    """The parallel kernels of large graphs, the label propagation and
    contractions from the input that coarsen large random graphs, and the
    checks of large graphs, on small inputs (their types do not depend on
    the size)."""
    import numpy as np
    import scipy.sparse as sp

    from ._affinity import clean_csr
    from ._affinity._check import max_asymmetry_csr, n_components_csr
    from ._backends._numba import _csr as ncsr
    from ._backends._numba import _kernels as nk
    from ._inits._coarsen import cluster_csr
    from ._inits._contract import _coarsen_csr_buckets_par, _coarsen_csr_par, contract

    rng = np.random.default_rng(3)
    n, K = 40, 3
    A = sp.random(n, n, density=0.2, random_state=4)
    labels = (np.arange(n) % K).astype(np.int64)
    new = np.roll(labels, 1)
    d = np.ones(n)
    vol, assoc = np.ones(K), np.full(K, 0.5)
    for dtype in (np.float64, np.float32):
        S = clean_csr((A + A.T).astype(dtype))
        args = (S.indptr, S.indices, S.data)
        ch = (np.empty(n, dtype=np.int64),) + tuple(np.empty(n) for _ in range(4))
        ncsr._row_choices_par(*args, labels, d, vol, assoc, *ch)
        ncsr._candidate_stats_par(*args, d, labels, new, ch[0], ch[3], ch[4], vol,
                                  assoc)
        ncsr._own_weights_par(*args, labels)
        nk._cluster_weights_csr_par(*args, labels, K)
        W = np.ascontiguousarray(rng.random((n, n)), dtype=dtype)
        WX = nk._cluster_weights_dense_par(W, labels, K, 2)
        nk._apply_moves_dense_par(W, labels, new, np.flatnonzero(labels != new), WX)
        nk._argmax_with_inertia_par(WX, d, vol, assoc, labels, 0.0)
        cluster_csr(*args, d, np.arange(n, dtype=np.int64), labels, 4.0, 2)
        contract(S, d, labels, K, buckets=True)
        for kernel in (_coarsen_csr_par, _coarsen_csr_buckets_par):
            kernel(*args, labels, K, np.empty_like(S.indices), np.empty(S.nnz), 2)
        max_asymmetry_csr(*args)
    n_components_csr(S.indptr, S.indices)


def _dask_blocks():
    """The per-block tasks of the Dask backend (their kernels run on the
    workers, which read the same cache on a shared install); Dask itself is
    not needed to call them."""
    import numpy as np
    import scipy.sparse as sp

    from ._affinity import clean_csr
    from ._backends._dask import _blocks as B

    n, K = 40, 3
    A = sp.random(n, n, density=0.2, random_state=5)
    for dtype in (np.float64, np.float32):
        S = clean_csr((A + A.T).astype(dtype))
        d, _ = B.summary_task(S, 0, n, n, 7)
        labels = (np.arange(n) % K).astype(B.label_dtype(K))
        WX, (vol, assoc, counts) = B.pass_task(S, 0, d, K, labels)
        B.step_task(WX, d, vol, assoc, labels, 0.5)
        B.polish_task(S, 0, d, labels, WX, vol, assoc, counts)


def _images():
    import numpy as np

    from .image._pamr import pamr
    from .image._upsample import upsample_labels

    img = np.zeros((16, 16, 3), np.uint8)
    img[:, 8:] = 255
    lab = np.zeros((16, 16), np.int64)
    lab[:, 7:] = 1
    pamr(img, lab, n_iter=2)
    upsample_labels(lab[::2, ::2], img, img[::2, ::2])
    img.setflags(write=False)  # an image read from a file often is
    upsample_labels(lab[::2, ::2], img, img[::2, ::2])


STEPS = {
    "sparse graphs (kNN; every init; float64, float32)": _sparse_fits,
    "dense graphs (rbf, cosine, precomputed; float64, float32)": _dense_fits,
    "batches of graphs": _batches,
    "kernels of large graphs": _parallel_kernels,
    "images (PAMR, upsampling)": _images,
    "Dask backend's block tasks": _dask_blocks,
}

# the steps that call parallel kernels, whose serial twins ``fork_twins``
# compiles too
PARALLEL_STEPS = ("kernels of large graphs", "images (PAMR, upsampling)")


def prebuild(verbose=True, fork_twins=False):
    """Compile (or load) every kernel of the common paths into Numba's cache.

    Parameters
    ----------
    verbose : bool, default=True
        Print each step, its time and where the cache is.
    fork_twins : bool, default=False
        Also compile the serial twins of the parallel kernels, which a
        forked process runs instead on Numba's OpenMP layer (see
        :mod:`sklearn_falcon._jit`): for servers and data loaders that fork
        workers.

    Returns
    -------
    times : dict
        Seconds per step.
    """
    import warnings

    from . import _jit
    from ._solver import _compiled

    _jit._state["notice"] = False  # this command says it compiles
    runs = [(name, step, False) for name, step in STEPS.items()]
    if fork_twins:
        runs += [(f"{name}, serial twins", STEPS[name], True)
                 for name in PARALLEL_STEPS]
    times = {}
    after_fork = _jit._state["serial_after_fork"]
    for name, step, twins in runs:
        t0 = time.perf_counter()
        _jit._state["serial_after_fork"] = twins or after_fork
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # tiny graphs
                step()
        finally:
            _jit._state["serial_after_fork"] = after_fork
        times[name] = time.perf_counter() - t0
        if verbose:
            print(f"  {name}: {times[name]:.1f} s", flush=True)
    if verbose:
        if _jit._state["cache_ok"]:
            where = _compiled._falcon_loop.stats.cache_path
            # under NUMBA_CACHE_DIR, the siblings are no __pycache__
            print(f"Numba cache of sklearn-falcon's kernels (and its sibling "
                  f"directories): {where}")
        else:
            print("Numba's cache is off (SKLEARN_FALCON_NUMBA_CACHE, or no writable "
                  "location): nothing was kept.")
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m sklearn_falcon.prebuild",
        description="Compile sklearn-falcon's Numba kernels into Numba's cache, "
                    "once per environment.")
    parser.add_argument("--quiet", action="store_true",
                        help="print no progress (errors still go to stderr)")
    parser.add_argument(
        "--fork-twins", action="store_true",
        help="also compile the serial twins of the parallel kernels, which "
             "forked processes run")
    args = parser.parse_args(argv)
    from . import _jit

    # nothing compiled here outlives this process without the cache: it
    # compiled for minutes, then said so (with --quiet, nothing) and exited 0
    if not _jit.CACHE:
        parser.exit(1, f"{parser.prog}: error: Numba's cache is off "
                       "(SKLEARN_FALCON_NUMBA_CACHE): nothing would be kept. "
                       "Unset it to compile the kernels ahead.\n")
    t0 = time.perf_counter()
    if not args.quiet:
        print("Compiling sklearn-falcon's kernels (once per environment)...",
              flush=True)
    prebuild(verbose=not args.quiet, fork_twins=args.fork_twins)
    if not _jit._state["cache_ok"]:  # no writable location: one RuntimeWarning
        parser.exit(1, f"{parser.prog}: error: no writable location for Numba's "
                       "cache: nothing was kept. Set NUMBA_CACHE_DIR to a writable "
                       "directory.\n")
    if not args.quiet:
        print(f"Done in {time.perf_counter() - t0:.1f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
