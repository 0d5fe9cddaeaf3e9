"""``FalconNCut.fit`` for an affinity held by Dask in row blocks."""

import time

import numpy as np
from sklearn.utils import check_random_state

from .._affinity import (
    check_active_count,
    check_dtype_kind,
    make_affinity,
    unit_exponent,
    warn_of_flat_weight,
)
from .._backends import BACKENDS, host_array, normalize_device
from .._inits import INITS, check_init_labels, warm_labels, warn_one_start
from .._log import log_stage
from .._solver import SolverOptions, solve
from .._stats import ncut_of
from .._threads import imported_module

__all__ = ["fit_sharded", "is_dask_array"]


def is_dask_array(X):
    """Whether ``X`` is a ``dask.array.Array`` (without importing Dask)."""
    module = imported_module("dask.array")  # (None while being imported)
    return module is not None and isinstance(X, module.Array)


def _check_call(est, X):
    if est.backend not in ("auto", "dask"):
        raise ValueError(
            f"backend={est.backend!r} needs X in memory, but X is a dask.array.Array; "
            "use backend='dask' (or 'auto'), or pass X.compute()."
        )
    if est.affinity != "precomputed":
        raise ValueError(
            "A Dask array X is clustered as a precomputed affinity (its row blocks "
            f"are W); got affinity={est.affinity!r}. Build the graph as shards and "
            "use affinity='precomputed'."
        )
    check_dtype_kind(X, name="X")
    # read as in memory: a torch.device, "cpu:0"; a malformed one is refused
    BACKENDS["dask"].resolve_device(normalize_device(est.device))


def _labels_setting():
    import dask

    value = dask.config.get("sklearn_falcon.dask.labels", "numpy")
    if value not in ("numpy", "dask"):
        raise ValueError(
            "The Dask config key sklearn_falcon.dask.labels must be 'numpy' or "
            f"'dask'; got {value!r}."
        )
    return value


def _check_init(est, init, n):
    """``init`` checked without gathering a Dask array of labels."""
    if isinstance(init, str):
        if INITS[init].needs_features:
            raise ValueError(
                f"init={init!r} needs features, but affinity='precomputed'; use "
                "init='multilevel' or 'spectral'."
            )
        return init
    if not is_dask_array(init):
        return check_init_labels(host_array(init), n, est.n_clusters)
    names = ", ".join(repr(name) for name in INITS)
    if any(np.isnan(c) for c in init.shape):  # (as for X) a filtered array
        raise ValueError(
            "The Dask array init has unknown chunk sizes; call "
            "init.compute_chunk_sizes() first."
        )
    if init.shape != (n,):
        raise ValueError(
            f"init must be one of {names} or an array of shape (n_samples,)=({n},); "
            f"got an array of shape {init.shape}."
        )
    if not np.issubdtype(init.dtype, np.integer):  # strings have no range
        raise ValueError(
            f"init labels must be integers in [0, n_clusters={est.n_clusters}); got "
            f"dtype {init.dtype}."
        )
    import dask

    lo, hi = (int(v) for v in dask.compute(init.min(), init.max()))
    if lo < 0 or hi >= est.n_clusters:
        raise ValueError(
            f"init labels must be integers in [0, n_clusters={est.n_clusters}); got "
            f"values in [{lo}, {hi}] of dtype {init.dtype}."
        )
    return init


def fit_sharded(est, X):
    """Fit ``est`` (a :class:`~sklearn_falcon.FalconNCut`) on the Dask array
    ``X`` of row blocks of ``W``, on the current Dask scheduler.

    The graph is validated blockwise (shape, finiteness, sign, a randomized
    symmetry check), started by :func:`._multilevel.multilevel_start` (or
    random labels drawn blockwise, or the given labels), and solved by
    :func:`~sklearn_falcon._solver.solve` on a
    :class:`~sklearn_falcon._backends._dask.DaskProblem`.  The client holds
    ``O(K)`` numbers per step; ``labels_`` is gathered at the end unless the
    Dask config key ``sklearn_falcon.dask.labels`` is ``"dask"``.  On Dask's
    ``"processes"`` scheduler its computes share one process pool; a
    restart of the cluster during the fit raises a RuntimeError that says so.
    """
    with BACKENDS["dask"].scope():
        return _fit_sharded(est, X)


def _fit_sharded(est, X):
    import dask
    import dask.array as da

    from .._backends._dask import DaskProblem, ShardedGraph
    from ._multilevel import multilevel_start
    from ._starts import fill_empty_blocks, isolated_to, random_start

    _check_call(est, X)
    K = int(est.n_clusters)  # a NumPy integer of a narrow type would overflow
    as_dask = _labels_setting() == "dask"
    t0 = time.perf_counter()
    G = ShardedGraph.from_dask(X, name="X")
    n = G.n
    if n < 2:
        raise ValueError(
            f"Found array with {n} sample(s) (shape={X.shape}) while a minimum of 2 "
            "is required by FalconNCut."
        )
    if K > n:
        raise ValueError(f"n_clusters={K} must be <= n_samples={n}.")
    if G.flat is not None:  # as the in-memory fit
        w, diagonal = G.flat
        warn_of_flat_weight(w, n, diagonal=diagonal)
    warm = (warm_labels(est.__dict__.get("labels_"), n, K, est.init, est.verbose)
            if est.warm_start else None)
    init = _check_init(est, est.init if warm is None else warm, n)
    if warm is None and not isinstance(init, str):
        warn_one_start(est.n_init)
    options = SolverOptions.from_params(est.get_params(deep=False))
    degrees = G.degrees_array()
    isolated, top = dask.compute(da.flatnonzero(degrees <= 0), degrees.max())
    isolated = np.asarray(isolated)
    check_active_count(n - isolated.size, n, K)
    # subnormal degrees (1 / vol overflows): solved scaled up by 2**scale, as
    # in memory (unit_scaled); the volumes are reported in X's units
    scale = unit_exponent(float(top))
    if scale:
        G = G.scaled(scale)

    rs = check_random_state(est.random_state)
    rng = np.random.default_rng(rs.randint(np.iinfo(np.int32).max))
    P = DaskProblem(G, K, gather_labels=False)
    info = {"n_blocks": G.n_blocks, "persisted": G.persisted, "nnz": G.nnz,
            "nbytes": G.nbytes, "levels": [(G.n, G.nnz)],
            "setup_s": time.perf_counter() - t0}
    t_init = time.perf_counter()
    if not isinstance(init, str):
        starts = [P.from_labels(init)]
    elif init == "random":
        starts = [random_start(P, rng) for _ in range(est.n_init)]
    else:
        starts = [multilevel_start(G, init, K, rng, options, est.n_init, info=info)]
    t_solve = time.perf_counter()
    if est.verbose and isinstance(init, str):  # as FalconNCut._solve logs
        log_stage("init", "%s, n_init=%d: %d starting labelling%s in %.2f s",
                  init, est.n_init, len(starts), "s"[:len(starts) != 1],
                  t_solve - t_init)
    best = None
    for i, y0 in enumerate(starts):
        if est.verbose:
            log_stage("solve", "start %d of %d", i + 1, len(starts))
        res = solve(P, fill_empty_blocks(P, y0, rng), options)
        if best is None or res.objective[0] > best.objective[0]:
            best = res

    info["solve_s"] = time.perf_counter() - t_solve
    final = P.evaluate(P.from_labels(best.labels[0]))
    _, vol, assoc, _ = final.state
    if isolated.size:
        final = isolated_to(P, final, int(np.argmax(vol)))
    labels = P.labels_array(final)
    est.labels_ = labels.persist() if as_dask else labels.compute()
    est.isolated_ = isolated
    est._affinity_matrix = X
    est._affinity = make_affinity("precomputed")
    est._affinity.n_train_ = n
    est.cluster_volumes_ = np.ldexp(vol, -scale)
    est.cluster_associations_ = np.ldexp(assoc, -scale)
    est.ncut_ = ncut_of(vol, assoc)
    est.objective_path_ = best.objective_path[0]
    est.n_iter_ = int(best.n_iter[0])
    est.n_backtracks_ = int(best.n_backtracks[0])
    est.backend_ = "dask"
    est.n_features_in_ = n
    if hasattr(est, "feature_names_in_"):  # an earlier fit's (a DataFrame)
        del est.feature_names_in_
    est._dask_info = info
    return est
