"""Batched Falcon: many graphs (e.g. one token graph per image) in one solve.

:func:`falcon_batch` pads ``B`` graphs to a common size and runs the
backend-independent loop :func:`sklearn_falcon._solver.solve` once on a
batched problem (the torch backend): every iteration is a handful of
batched tensor operations for all graphs, with a per-graph ``tau``,
acceptance test and stopping rule.  Feature graphs with an affinity the
backend forms in row blocks (cosine, rbf) are matrix-free: their ``n x n``
affinities are never stored.
"""

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array, check_random_state
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from ._affinity import (
    AFFINITIES,
    PRECOMPUTED,
    canonical_sparse,
    check_affinity,
    check_dtype_kind,
    check_sparse_structure,
    count_components,
    flat_weight,
    float_sparse,
    make_affinity,
    restrict_to_active,
    start_graph,
    unit_scaled,
    warn_if_flat_cosine,
    warn_if_flat_rbf,
)
from ._affinity._flat import CHECK_FLAT
from ._backends import BACKENDS, DEVICE_CONSTRAINT, host_array, resolve_backend
from ._backends._boundary import is_tensor
from ._inits import INITS, InitContext, check_init_labels, fill_empty, make_starts
from ._log import log_stage, logs_progress, unwarned, warn_user, warns_once
from ._memory import available_memory_once
from ._solver import SOLVER_CONSTRAINTS, SolverOptions, solve
from ._stats import cluster_statistics, degrees_of, ncut_of, objective_of, with_isolated
from ._sharded import is_dask_array
from ._threads import fit_threads, one_openmp_thread_after_fork

# the solver settings have their defaults in one place
_DEFAULTS = SolverOptions()

__all__ = ["BatchResult", "falcon_batch"]


@dataclass
class BatchResult:
    """Outcome of :func:`falcon_batch` for ``B`` graphs.

    The dataclass that :func:`falcon_batch` returns, importable as
    ``sklearn_falcon.BatchResult`` (to annotate types); each parameter is
    an attribute of the same name.

    Parameters
    ----------
    labels : list of ndarray
        ``B`` label vectors, one per graph (of its own size).
    ncut : ndarray of shape (B,)
        Normalized cut of each labelling (clusters of zero volume count 0),
        from a fresh pass over its graph, as the estimator's ``ncut_``.
    objective : ndarray of shape (B,)
        Normalized association ``f`` of each labelling, from the same pass.
    objective_path : list of ndarray
        ``f`` at the initial labels, after each accepted iteration and each
        polishing sweep, per graph; non-decreasing (the solver's running
        values: on weights spanning many orders of magnitude the last may
        differ slightly from ``objective``).
    n_iter : ndarray of shape (B,)
        Proximal iterations run (the last may find that no row moves,
        which is how convergence is detected).
    n_backtracks : ndarray of shape (B,)
        Rejected trial steps.
    converged : ndarray of shape (B,)
        Whether the graph stopped before ``max_iter``.
    tau : ndarray of shape (B,)
        Final proximal parameter (in score units).
    backend : str
        The backend that ran: ``"torch"``, ``"numba"`` or ``"dask"``.
    device : str
        The device it ran on (``"cpu"``, ``"cuda:0"``...).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon import BatchResult, falcon_batch
    >>> X = np.random.default_rng(0).random((30, 2))
    >>> res = falcon_batch([X, X[:20]], 2, affinity="rbf", backend="numba",
    ...                    random_state=0)
    >>> isinstance(res, BatchResult), res.backend, [len(y) for y in res.labels]
    (True, 'numba', [30, 20])
    """

    labels: list
    ncut: np.ndarray
    objective: np.ndarray
    objective_path: list
    n_iter: np.ndarray
    n_backtracks: np.ndarray
    converged: np.ndarray
    tau: np.ndarray
    backend: str
    device: str


def _check_graphs(graphs, affinity):
    if is_tensor(graphs) and graphs.dim() == 3:  # dense or sparse: by graph
        graphs = list(graphs.unbind(0))
    if is_dask_array(graphs) and graphs.ndim == 3:  # gathered, as each graph is
        graphs = graphs.compute()
    if isinstance(graphs, np.ndarray) and (graphs.ndim == 3 or (
            graphs.ndim == 1 and graphs.dtype == object)):
        graphs = list(graphs)  # (an object array: graphs of several sizes)
    if not isinstance(graphs, (list, tuple)) or len(graphs) == 0:
        # (it said "got list" of an empty list, "got ndarray" of one graph)
        if isinstance(graphs, (list, tuple)):
            got = f"an empty {type(graphs).__name__}"
        elif getattr(graphs, "ndim", None) == 2:
            got = f"an array of shape {tuple(graphs.shape)} (one graph? pass [graph])"
        elif hasattr(graphs, "shape"):
            got = f"an array of shape {tuple(graphs.shape)}"
        else:
            got = type(graphs).__name__
        raise ValueError(
            "graphs must be a non-empty list of feature matrices (or of affinity "
            f"matrices for a precomputed affinity), or a 3-D array; got {got}."
        )
    out = []
    for b, G in enumerate(graphs):
        name = f"graphs[{b}]"
        if is_dask_array(G):  # gathered (sparse blocks too), as by predict
            G = G.compute()
        G = host_array(G)
        check_dtype_kind(G, name=name)
        G = float_sparse(G)  # COO duplicates of uint8: summed without wrapping
        try:
            G = check_array(  # COO: as CSR
                G, accept_sparse=("csr", "csc"), dtype=(np.float64, np.float32),
                input_name=name, ensure_min_samples=2)  # as FalconNCut
        except ValueError as exc:  # scikit-learn names no input in most
            if name in str(exc):
                raise
            raise ValueError(f"{name}: {exc}") from None
        check_sparse_structure(G, name)  # indices past its shape: read unchecked
        G = canonical_sparse(G)  # duplicates summed
        if affinity == "precomputed":
            G = check_affinity(G, name=name)
        else:
            make_affinity(affinity).check_features(G, name=name)
        out.append(G)
    if affinity not in PRECOMPUTED and len({G.shape[1] for G in out}) != 1:
        raise ValueError(
            "All feature matrices must have the same number of features; got "
            f"{sorted({G.shape[1] for G in out})}."
        )
    return out


def _check_dtype(dtype):
    """Refuse a ``dtype`` other than None or float32 / float64 by any name
    (a string, a NumPy or a torch dtype), whichever the backend."""
    if dtype is None:
        return
    try:
        name = np.dtype(dtype).name
    except TypeError:  # a torch dtype: by its name
        try:
            name = np.dtype(str(dtype).removeprefix("torch.")).name
        except TypeError:
            name = None
    if name not in ("float32", "float64"):
        raise ValueError(
            f"dtype must be None, 'float32' or 'float64'; got dtype={dtype!r}.")


def _check_init_arrays(init, sizes, n_clusters):
    init = list(init)
    if len(init) != len(sizes):
        raise ValueError(
            f"init must hold one label array per graph ({len(sizes)}); got "
            f"{len(init)}."
        )
    return [check_init_labels(host_array(y), n, n_clusters, name=f"init[{b}]")
            for b, (y, n) in enumerate(zip(init, sizes))]


def _start(init, G, W, degrees, n_clusters, n_neighbors, rng, options):
    """The start of one graph: the candidate of highest ``f`` among those of
    one restart of ``init`` (computed on ``W``, or on the kNN graph of the
    features ``G`` when ``W`` is not held).  ``W`` has no zero-degree node
    (:func:`_active_parts`)."""
    ctx = InitContext(n_clusters, rng, options, X=G, degrees=degrees)
    if INITS[init].needs_graph:
        if W is None:
            W = start_graph(G, n_neighbors)
            degrees = degrees_of(W)
        ctx.W, ctx.degrees = W, degrees
    candidates = [fill_empty(y, n_clusters, rng) for y in make_starts(init, ctx)]
    if len(candidates) == 1:
        return candidates[0]
    return max(candidates, key=lambda y: objective_of(
        *cluster_statistics(ctx.W, y, n_clusters, ctx.degrees)))


def _listing(counts, unit=""):
    """``"graphs[1]: 2, graphs[3]: 1"`` of ``{b: count}`` (the first 10)."""
    items = [f"graphs[{b}]: {c}{unit}" for b, c in list(counts.items())[:10]]
    return ", ".join(items + ["..."] * (len(counts) > 10))


def _warn_of_parts(zero, split, B, hint):
    """One warning of the zero-degree nodes (``{b: count}``) and one of the
    disconnected graphs (``{b: components}``) of a batch of ``B``, as
    FalconNCut warns of each graph (one a graph would flood a batch)."""
    if zero:
        warn_user(
            f"{sum(zero.values())} node(s) of zero degree in {len(zero)} of the {B} "
            f"graphs ({_listing(zero)}): they are left out of the solve and given "
            "the cluster of largest volume of their graph."
        )
    if split:
        warn_user(
            f"{len(split)} of the {B} affinity graphs are not fully connected "
            f"({_listing(split, ' components')}): the normalized cut separates "
            f"components at no cost.{' ' + hint if hint else ''}"
        )


def _warn_of_flat(Ws, degrees):
    """One warning of the precomputed graphs of ``Ws`` (of ``degrees``) that
    are complete with equal weights, as FalconNCut warns of each (silent
    before)."""
    flat = {b: f"{w:.6g}" for b, w in enumerate(
        flat_weight(W, d) for W, d in zip(Ws, degrees)) if w is not None}
    if flat:
        warn_user(
            f"Every off-diagonal affinity of {len(flat)} of the {len(Ws)} graphs "
            f"is equal within its graph ({_listing(flat)}), so each is complete "
            "with equal weights and every partition has the same NCut; their "
            "labels are arbitrary. " + CHECK_FLAT.format("ies were"))


def _warn_of_complete(graphs, affinity, n_neighbors):
    """One warning of the kNN graphs of no more samples than ``n_neighbors``
    (complete, of equal weights), as FalconNCut warns of each: a warning
    per graph ("n_samples=5", "n_samples=6", ...) flooded a batch."""
    small = {b: G.shape[0] for b, G in enumerate(graphs)
             if 1 < G.shape[0] <= n_neighbors  # (sparse distances: unwarned,
             and (affinity == "nearest_neighbors" or not sp.issparse(G))}  # as fit)
    if affinity in ("nearest_neighbors", "precomputed_nearest_neighbors") and small:
        warn_user(
            f"n_neighbors={n_neighbors} >= n_samples in {len(small)} of the "
            f"{len(graphs)} graphs ({_listing(small, ' samples')}): every sample "
            "is a neighbour of every other, so each is complete with equal "
            "weights and every partition has the same NCut; their labels are "
            "arbitrary. Use fewer neighbours than samples.")


def _active_parts(Ws, graphs, init, n_clusters, degrees=None, hint=None):
    """``(Ws, graphs, init, keep)`` restricted, graph by graph, to the nodes
    of nonzero degree (``keep[b]``: their indices, None where all are;
    ``degrees``: of the graphs, computed here if None; ``Ws`` are None on
    the matrix-free path):
    as in :class:`~sklearn_falcon.FalconNCut`, zero-degree nodes stay out of
    the start and the solve (a graph initialization divides by degrees, and
    in the solve they counted in the empty-cluster guard, so that a cluster
    could hold only them) and join the cluster of largest volume after it
    (:func:`~sklearn_falcon._stats.with_isolated`).  A graph with fewer such
    nodes than ``n_clusters`` is refused; one of subnormal degrees is
    scaled up (:func:`~sklearn_falcon._affinity._check.unit_scaled`).  One
    warning names the graphs with zero-degree nodes, one those whose other
    nodes are not connected (explicit ``Ws``; ``hint`` ends it)."""
    Ws, graphs = list(Ws), list(graphs)
    init = init if isinstance(init, str) else list(init)
    keep = [None] * len(Ws)
    zero = {}
    for b, W in enumerate(Ws):
        d = np.asarray(degrees_of(W) if degrees is None else degrees[b])
        active = d > 0
        S = None if W is None else unit_scaled(W, d)[0]
        if S is not W:  # subnormal degrees (1 / d and 1 / vol overflow):
            # solved scaled up, as by FalconNCut
            graphs[b] = S if graphs[b] is W else graphs[b]
            Ws[b] = W = S
        if active.all():
            continue
        idx = np.flatnonzero(active)
        if idx.size == 0:  # as FalconNCut says (not "fewer than n_clusters=1")
            raise ValueError(
                f"graphs[{b}] is all zeros: no node has a nonzero degree, so the "
                "normalized cut is undefined.")
        if idx.size < n_clusters:
            raise ValueError(
                f"graphs[{b}] has {idx.size} nodes of nonzero degree, fewer than "
                f"n_clusters={n_clusters}; zero-degree nodes cannot form a cluster."
            )
        keep[b] = idx
        zero[b] = active.size - idx.size
        sub = None if W is None else restrict_to_active(W, active)
        G = graphs[b]
        graphs[b] = sub if G is W else G[idx]
        Ws[b] = sub
        if not isinstance(init, str):
            init[b] = init[b][idx]
    split = {b: c for b, c in enumerate(  # (none of a matrix-free batch)
        1 if W is None else count_components(W) for W in Ws) if c > 1}
    _warn_of_parts(zero, split, len(Ws), hint)
    return Ws, graphs, init, keep


# (a module constant: Sphinx's source highlighter cannot parse a ``**``
# inside a decorator's dict, and the source page of this module went missing)
_BATCH_CONSTRAINTS = {
    "graphs": ["array-like", list, tuple],
    "n_clusters": [Interval(Integral, 1, None, closed="left")],
    "affinity": [StrOptions(set(AFFINITIES))],
    "power": [Interval(Real, 0, None, closed="neither")],
    "gamma": [Interval(Real, 0, None, closed="left")],
    "n_neighbors": [Interval(Integral, 1, None, closed="left")],
    "init": [StrOptions(set(INITS)), list, tuple],
    "random_state": ["random_state"],
    **SOLVER_CONSTRAINTS,
    "tau": [Interval(Real, 0, None, closed="neither"), "array-like"],
    "backend": [StrOptions({"auto"} | set(BACKENDS))],
    "device": DEVICE_CONSTRAINT,
    "dtype": "no_validation",
    "block_elems": [Interval(Integral, 1, None, closed="left"), None],
    "verbose": ["verbose"],
}


@validate_params(_BATCH_CONSTRAINTS, prefer_skip_nested_validation=True)
@logs_progress
@warns_once
def falcon_batch(
    graphs,
    n_clusters,
    *,
    affinity="cosine",
    power=1.0,
    gamma=1.0,
    n_neighbors=10,
    init="random",
    random_state=None,
    max_iter=_DEFAULTS.max_iter,
    tol=_DEFAULTS.tol,
    tau=_DEFAULTS.tau,
    gamma_backtrack=_DEFAULTS.gamma_backtrack,
    delta=_DEFAULTS.delta,
    polish=_DEFAULTS.polish,
    backend="auto",
    device="auto",
    dtype=None,
    block_elems=None,
    verbose=0,
):
    """Cluster a batch of graphs with Falcon in one solve.

    All graphs are solved together on one device: they are padded to the
    largest size (padding nodes never move and never count), and every
    iteration of :func:`sklearn_falcon._solver.solve` advances all of them
    with batched tensor operations.  Each graph keeps its own ``tau``,
    backtracking and stopping, so the result for a graph is the result of a
    single solve of that graph.

    Parameters
    ----------
    graphs : list of array-like, or array of shape (B, n, p)
        One feature matrix ``(n_b, p)`` per graph (the same ``p``), or one
        affinity ``(n_b, n_b)`` (dense or sparse) per graph for a
        precomputed affinity (a 1-D object array of them as a list), each
        of at least 2 nodes (as FalconNCut needs 2 samples).  Torch
        tensors (on any device) are read on the host, Dask arrays gathered.
        Nodes of zero degree (with the cosine affinity: rows of zero
        features) are left out of the start and the solve and given the
        cluster of largest volume, as by :class:`~sklearn_falcon.FalconNCut`
        (a matrix-free batch stays matrix-free); a graph with fewer other
        nodes than ``n_clusters`` is refused.  One ``UserWarning`` names the
        graphs that have such nodes, one those (of explicit affinities)
        that are not connected, with their counts, and one the precomputed
        graphs of equal weights (whose labels are arbitrary).
    n_clusters : int
        Number of clusters ``K`` of every graph.
    affinity : str, default="cosine"
        Any affinity of :class:`~sklearn_falcon.FalconNCut` but a callable,
        with the same definition: ``"cosine"`` is
        :math:`\\mathrm{clip}((S - \\min S) / (\\max S - \\min S), 0, 1)^{p}` of
        the cosine similarities :math:`S` of each graph (:math:`p` =
        ``power``), ``"rbf"`` is :math:`\\exp(-\\gamma \\|x - y\\|^2)`; on the
        torch backend both are computed
        matrix-free.  The other affinities are built on the host, one graph
        at a time.
    power : float, default=1.0
        Sharpening exponent of the cosine affinity.
    gamma : float, default=1.0
        Coefficient of the rbf affinity.
    n_neighbors : int, default=10
        Neighbours of the kNN affinities, and of the kNN graph on which the
        graph initializations start a matrix-free graph.
    init : {"multilevel", "multilevel_fast", "kmeans", "spectral", "random"} \
            or list of array-like, default="random"
        Initial labels of each graph, as in
        :class:`~sklearn_falcon.FalconNCut`, or one label array per graph.
    random_state : int, RandomState instance or None, default=None
        Seed of the initialization.  One generator serves the graphs in
        order, so a graph's start (and the filling of clusters that
        only isolated nodes would hold) depends on its place in the batch.
    max_iter, tol, tau, gamma_backtrack, delta, polish, verbose
        Solver parameters, as in :class:`~sklearn_falcon.FalconNCut`;
        ``tau`` may also be an array of shape ``(B,)`` (one per graph).
        ``polish`` runs the exact sequential sweep of the Numba backend on
        the host (for matrix-free graphs, on rows of ``W`` streamed block by
        block from the device).
    backend : {"auto", "torch", "numba", "dask"}, default="auto"
        ``"auto"``: the first batched backend available (torch), else
        Numba.  The Numba and Dask backends solve the graphs one after
        another (building dense ``W`` for feature graphs; Dask's solve runs
        on the current scheduler).
    device : str or torch.device, default="auto"
        Torch device: ``"auto"`` (CUDA when available), ``"cpu"``,
        ``"cuda"`` or ``"cuda:N"`` (or a ``torch.device`` of them).
    dtype : {None, "float32", "float64"}, default=None
        Torch compute dtype of the affinities (``None``: float32 on CUDA,
        float64 on the CPU); scores and objectives are float64.
    block_elems : int, default=None
        Affinity entries formed at once by the matrix-free path.

    Returns
    -------
    result : :class:`BatchResult`
        A dataclass of one entry per graph: ``labels`` (a list of label
        vectors, each of its graph's size), ``ncut`` and ``objective``
        (arrays of shape ``(B,)``, the NCut and ``f`` of each labelling
        from a fresh pass over its graph, as the estimator's ``ncut_``),
        ``objective_path`` (a list of the non-decreasing running ``f`` of
        each solve), ``n_iter``, ``n_backtracks``, ``converged`` (stopped
        before ``max_iter``) and ``tau`` (the final proximal parameter),
        and the ``backend`` and ``device`` that ran.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon import falcon_batch
    >>> rng = np.random.default_rng(0)
    >>> centres = np.array([[5.0, 0.0], [0.0, 5.0]])
    >>> graphs = [centres[rng.integers(2, size=40)] + rng.normal(size=(40, 2))
    ...           for _ in range(3)]
    >>> res = falcon_batch(graphs, 2, affinity="rbf", gamma=0.5,
    ...                    init="kmeans", random_state=0, device="cpu")
    >>> len(res.labels), res.labels[0].shape, res.ncut.shape
    (3, (40,), (3,))
    >>> all(bool(np.all(np.diff(p) >= 0)) for p in res.objective_path)
    True
    """
    _check_dtype(dtype)
    # a NumPy integer of a narrow type (np.int8(100)) overflowed the K-sized
    # arithmetic of the starts and statistics, as in FalconNCut.fit
    n_clusters = int(n_clusters)
    tau_arr = np.asarray(host_array(tau), dtype=np.float64)  # (a tensor too)
    if not np.all((tau_arr > 0) & np.isfinite(tau_arr)):  # as a float tau
        raise ValueError(f"tau must be > 0 and finite; got tau={tau!r}.")
    with available_memory_once():  # not once a graph (0.4 ms: a small one's copy)
        graphs = _check_graphs(graphs, affinity)
    B = len(graphs)
    if tau_arr.ndim and tau_arr.shape != (B,):
        raise ValueError(
            f"tau must be a float or an array of shape (B,)=({B},); got shape "
            f"{tau_arr.shape}."
        )
    sizes = [G.shape[0] for G in graphs]
    if min(sizes) < n_clusters:  # which graph: in a batch of many, left to guess
        b = int(np.argmin(sizes))
        raise ValueError(
            f"n_clusters={n_clusters} must be <= the size of every graph; "
            f"graphs[{b}] has n_samples={sizes[b]}."
        )
    if isinstance(init, str):
        if INITS[init].needs_features and affinity in PRECOMPUTED:
            raise ValueError(
                f"init={init!r} needs features, but affinity={affinity!r}; use "
                "init='multilevel', init='spectral' or init='random', or pass "
                "initial labels."
            )
    else:
        init = _check_init_arrays(init, sizes, n_clusters)
    backend, device = resolve_backend(backend, device, batched=True)
    spec = BACKENDS[backend]
    rng = np.random.default_rng(
        check_random_state(random_state).randint(np.iinfo(np.int32).max))
    options = SolverOptions(max_iter=max_iter, tol=tol, tau=tau_arr,
                            gamma_backtrack=gamma_backtrack, delta=delta,
                            polish=polish, verbose=verbose)
    matrix_free = (spec.batched and spec.make_problem_from_features is not None
                   and AFFINITIES[affinity].matrix_free)
    P = None
    if matrix_free:
        with fit_threads(None, limit_blas=spec.limit_blas):
            P = spec.make_problem_from_features(
                graphs, n_clusters, affinity=affinity, power=power, gamma=gamma,
                device=device, dtype=dtype, block_elems=block_elems)
    keep = [None] * B
    if matrix_free:
        Ws = [None] * B
        degrees = P.degrees_numpy()
        if affinity == "rbf":  # as the graphs formed on the host do
            warn_if_flat_rbf(gamma, max(G.shape[0] for G in graphs), any(
                d.size > 1 and np.all(d == d.size) for d in degrees))
        else:
            for lo, hi, d in zip(*P.cosine_range, degrees):
                warn_if_flat_cosine(lo, hi, d.size)
        if not all(np.all(d > 0) for d in degrees):
            # (zero rows of cosine features): the problem of the others, with
            # the same affinity entries, as FalconNCut's
            Ws, graphs, init, keep = _active_parts(Ws, graphs, init, n_clusters,
                                                   degrees)
            P = P.restricted([None if k is None else d > 0
                              for k, d in zip(keep, degrees)])
    elif affinity == "precomputed":
        Ws = graphs  # validated by _check_graphs
    else:
        checked = {"checked": True} if affinity in PRECOMPUTED else {}  # _check_graphs
        with unwarned(" is a neighbour of every other"), one_openmp_thread_after_fork():
            Ws = [make_affinity(affinity, n_neighbors=n_neighbors, gamma=gamma,
                                power=power).fit(G, **checked) for G in graphs]
        _warn_of_complete(graphs, affinity, n_neighbors)

    if not matrix_free:
        degrees = [degrees_of(W) for W in Ws]  # (one pass over each W)
        if affinity == "precomputed":
            _warn_of_flat(Ws, degrees)
        hint = make_affinity(affinity, n_neighbors=n_neighbors, gamma=gamma,
                             power=power).connect_hint()
        Ws, graphs, init, keep = _active_parts(Ws, graphs, init, n_clusters,
                                               degrees, hint=hint)

    with fit_threads(None, limit_blas=spec.limit_blas), spec.scope():
        if spec.batched:
            if P is None:
                P = spec.make_problem(Ws, n_clusters, device=device, dtype=dtype)
            degrees = P.degrees_numpy()
            y0 = _starts(init, graphs, Ws, degrees, n_clusters, n_neighbors, rng,
                         options)
            res = solve(P, y0, options)
            labels = P.labels_list(res.labels)
            f, paths = res.objective, res.objective_path
            n_iter, n_back = res.n_iter, res.n_backtracks
            conv, tau_out = res.converged, res.tau
        else:  # one graph at a time
            problems = [spec.make_problem(W, n_clusters) for W in Ws]
            degrees = [P.degrees for P in problems]
            y0 = _starts(init, graphs, Ws, degrees, n_clusters, n_neighbors, rng,
                         options)
            results = []
            for b, P in enumerate(problems):
                if verbose:  # as FalconNCut's "start 2 of 3"
                    log_stage("solve", "graph %d of %d", b + 1, B)
                results.append(solve(P, y0[b], options.replace(
                    tau=float(tau_arr) if tau_arr.ndim == 0 else float(tau_arr[b]))))
            labels = [r.labels[0] for r in results]
            f = np.array([r.objective[0] for r in results])
            paths = [r.objective_path[0] for r in results]
            n_iter = np.array([r.n_iter[0] for r in results])
            n_back = np.array([r.n_backtracks[0] for r in results])
            conv = np.array([r.converged[0] for r in results])
            tau_out = np.array([r.tau[0] for r in results])
    # exact, from a fresh pass over each graph (the solver's f is a running
    # sum, which drifts on weights spanning many orders of magnitude)
    if spec.batched:
        stats = list(zip(*P.cluster_statistics(labels)))
    else:
        stats = [cluster_statistics(W, y, n_clusters, d)
                 for W, y, d in zip(Ws, labels, degrees)]
    f = np.array([objective_of(vol, assoc) for vol, assoc in stats])
    ncut = np.array([ncut_of(vol, assoc) for vol, assoc in stats])
    labels = [with_isolated(y, idx, n, d, n_clusters)
              for y, idx, n, d in zip(labels, keep, sizes, degrees)]
    return BatchResult(
        labels=labels, ncut=ncut, objective=np.asarray(f, dtype=np.float64),
        objective_path=paths, n_iter=np.asarray(n_iter),
        n_backtracks=np.asarray(n_back), converged=np.asarray(conv),
        tau=np.asarray(tau_out), backend=backend, device=str(device),
    )


def _starts(init, graphs, Ws, degrees, n_clusters, n_neighbors, rng, options):
    """One start per graph: label arrays as given, or from ``init`` (its
    coarse refinements with the graph's own ``tau``)."""
    if not isinstance(init, str):
        return [fill_empty(y, n_clusters, rng) for y in init]
    taus = np.broadcast_to(np.asarray(options.tau, dtype=np.float64), (len(graphs),))
    return [_start(init, G, W, d, n_clusters, n_neighbors, rng,
                   options.replace(tau=float(t)))
            for G, W, d, t in zip(graphs, Ws, degrees, taus)]
