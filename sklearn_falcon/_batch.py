"""Batched Falcon: many graphs (e.g. one token graph per image) in one solve.

:func:`falcon_batch` pads ``B`` graphs to a common size and runs the
backend-independent loop :func:`sklearn_falcon._solver.solve` once on a
batched :class:`sklearn_falcon._backend.TorchProblem`: every iteration is a
handful of batched tensor operations for all graphs, with a per-graph
``tau``, acceptance test and stopping rule.  Feature graphs
(``affinity="cosine"`` or ``"rbf"``) are matrix-free: their ``n x n``
affinities are never stored.
"""

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.utils import check_array, check_random_state

from ._affinity import AffinityBuilder, check_affinity, check_dtype_kind
from ._backend import NumbaProblem, TorchProblem, resolve_backend
from ._init import fill_empty, kmeans_labels, random_labels
from ._solver import solve

__all__ = ["BatchResult", "falcon_batch"]

_AFFINITIES = ("cosine", "rbf", "precomputed")


@dataclass
class BatchResult:
    """Outcome of :func:`falcon_batch` for ``B`` graphs.

    Attributes
    ----------
    labels : list of ndarray
        ``B`` label vectors, one per graph (of its own size).
    ncut : ndarray of shape (B,)
        Normalized cut of each labelling (clusters of zero volume count 0).
    objective : ndarray of shape (B,)
        Final normalized association ``f``.
    objective_path : list of ndarray
        ``f`` at the initial labels, after each accepted iteration and each
        polishing sweep, per graph; non-decreasing.
    n_iter : ndarray of shape (B,)
        Accepted proximal iterations.
    n_backtracks : ndarray of shape (B,)
        Rejected trial steps.
    converged : ndarray of shape (B,)
        Whether the graph stopped before ``max_iter``.
    tau : ndarray of shape (B,)
        Final proximal parameter (in score units).
    backend : str
    device : str
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
    if isinstance(graphs, np.ndarray) and graphs.ndim == 3:
        graphs = list(graphs)
    if not isinstance(graphs, (list, tuple)) or len(graphs) == 0:
        raise ValueError(
            "graphs must be a non-empty list of feature matrices (or of affinity "
            "matrices for affinity='precomputed'), or a 3-D array; got "
            f"{type(graphs).__name__}."
        )
    out = []
    for b, G in enumerate(graphs):
        name = f"graphs[{b}]"
        check_dtype_kind(G, name=name)
        if affinity == "precomputed":
            G = check_array(G, accept_sparse=("csr", "csc", "coo"),
                            dtype=(np.float64, np.float32), input_name=name)
            G = check_affinity(G, name=name)
        else:
            G = check_array(G, dtype=(np.float64, np.float32), input_name=name,
                            ensure_min_samples=1)
        out.append(G)
    if affinity != "precomputed" and len({G.shape[1] for G in out}) != 1:
        raise ValueError(
            "All feature matrices must have the same number of features; got "
            f"{sorted({G.shape[1] for G in out})}."
        )
    return out


def _init_labels(init, graphs, sizes, n_clusters, affinity, rng):
    B = len(graphs)
    if isinstance(init, str):
        if init == "random":
            return [random_labels(n, n_clusters, rng) for n in sizes]
        if init == "kmeans":
            if affinity == "precomputed":
                raise ValueError(
                    "init='kmeans' needs features, but affinity='precomputed'; use "
                    "init='random' or pass initial labels."
                )
            return [kmeans_labels(G, n_clusters, rng) for G in graphs]
        raise ValueError(
            f"init must be 'random', 'kmeans' or a list of label arrays; got "
            f"init={init!r}."
        )
    init = list(init)
    if len(init) != B:
        raise ValueError(
            f"init must hold one label array per graph ({B}); got {len(init)}."
        )
    out = []
    for b, (y, n) in enumerate(zip(init, sizes)):
        y = np.asarray(y)
        if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer) or (
            n and (y.min() < 0 or y.max() >= n_clusters)
        ):
            raise ValueError(
                f"init[{b}] must be integer labels in [0, n_clusters={n_clusters}) of "
                f"shape ({n},); got shape={y.shape}, dtype={y.dtype}."
            )
        out.append(fill_empty(y.astype(np.int64), n_clusters, rng))
    return out


def falcon_batch(
    graphs,
    n_clusters,
    *,
    affinity="cosine",
    power=1.0,
    gamma=1.0,
    init="random",
    random_state=None,
    max_iter=100,
    tol=1e-6,
    tau=0.01,
    gamma_backtrack=2.0,
    delta=1e-4,
    polish=True,
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
        affinity ``(n_b, n_b)`` (dense or sparse) per graph when
        ``affinity="precomputed"``.
    n_clusters : int
        Number of clusters ``K`` of every graph.
    affinity : {"cosine", "rbf", "precomputed"}, default="cosine"
        ``"cosine"``: ``clip((S - min S) / (max S - min S), 0, 1) ** power``
        of the cosine similarities ``S`` of each graph; ``"rbf"``:
        ``exp(-gamma ||x - y||^2)``.  Both are the dense affinities of
        :class:`~sklearn_falcon.FalconNCut`, computed matrix-free on torch.
    power : float, default=1.0
        Sharpening exponent of the cosine affinity.
    gamma : float, default=1.0
        Coefficient of the rbf affinity.
    init : {"random", "kmeans"} or list of array-like, default="random"
        Initial labels: uniformly random, k-means++ on each feature matrix,
        or one label array per graph.
    random_state : int, RandomState instance or None, default=None
        Seed of the initialization.
    max_iter, tol, tau, gamma_backtrack, delta, polish, verbose
        Solver parameters, as in :class:`~sklearn_falcon.FalconNCut`;
        ``tau`` may also be an array of shape ``(B,)`` (one per graph).
        ``polish`` runs the exact sequential sweep of the Numba backend on
        the host (for matrix-free graphs, on rows of ``W`` streamed block by
        block from the device).
    backend : {"auto", "torch", "numba"}, default="auto"
        ``"auto"``: torch when it is installed, else Numba.  The Numba
        backend solves the graphs one after another (building dense ``W``
        for feature graphs).
    device : str, default="auto"
        Torch device: ``"auto"`` (CUDA when available), ``"cpu"``,
        ``"cuda"`` or ``"cuda:N"``.
    dtype : {None, "float32", "float64"}, default=None
        Torch compute dtype of the affinities (``None``: float32 on CUDA,
        float64 on the CPU); scores and objectives are float64.
    block_elems : int, default=None
        Affinity entries formed at once by the matrix-free path.

    Returns
    -------
    BatchResult

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
    if affinity not in _AFFINITIES:
        raise ValueError(
            f"affinity must be one of {_AFFINITIES}; got affinity={affinity!r}."
        )
    if not isinstance(n_clusters, Integral) or n_clusters < 1:
        raise ValueError(f"n_clusters must be an integer >= 1; got {n_clusters!r}.")
    for name, value, low in (("power", power, 0.0), ("gamma", gamma, 0.0)):
        if not isinstance(value, Real) or not value > low:
            raise ValueError(f"{name} must be a float > {low}; got {name}={value!r}.")
    tau_arr = np.asarray(tau, dtype=np.float64)
    if not np.all(tau_arr > 0):
        raise ValueError(f"tau must be > 0; got tau={tau!r}.")
    if backend not in ("auto", "torch", "numba"):
        raise ValueError(
            f"backend must be 'auto', 'torch' or 'numba'; got backend={backend!r}."
        )
    graphs = _check_graphs(graphs, affinity)
    B = len(graphs)
    if tau_arr.ndim and tau_arr.shape != (B,):
        raise ValueError(
            f"tau must be a float or an array of shape (B,)=({B},); got shape "
            f"{tau_arr.shape}."
        )
    sizes = [G.shape[0] for G in graphs]
    if min(sizes) < n_clusters:
        raise ValueError(
            f"n_clusters={n_clusters} must be <= the size of every graph; the "
            f"smallest has {min(sizes)} nodes."
        )
    if backend == "auto":
        from ._backend import torch_available

        backend = "torch" if torch_available() else "numba"
    backend, device = resolve_backend(backend, device)
    rng = np.random.default_rng(
        check_random_state(random_state).randint(np.iinfo(np.int32).max))
    y0 = _init_labels(init, graphs, sizes, n_clusters, affinity, rng)
    params = dict(max_iter=max_iter, tol=tol, gamma_backtrack=gamma_backtrack,
                  delta=delta, polish=polish, verbose=verbose)

    if backend == "numba":
        results, degrees = [], []
        for b, G in enumerate(graphs):
            W = G if affinity == "precomputed" else AffinityBuilder(
                affinity, gamma=gamma, power=power).fit_transform(G)
            P = NumbaProblem(W, n_clusters)
            degrees.append(P.degrees)
            t = float(tau_arr) if tau_arr.ndim == 0 else float(tau_arr[b])
            results.append(solve(P, y0[b], tau=t, **params))
        labels = [r.labels[0] for r in results]
        f = np.array([r.objective[0] for r in results])
        paths = [r.objective_path[0] for r in results]
        n_iter = np.array([r.n_iter[0] for r in results])
        n_back = np.array([r.n_backtracks[0] for r in results])
        conv = np.array([r.converged[0] for r in results])
        tau_out = np.array([r.tau[0] for r in results])
    else:
        if affinity == "precomputed":
            P = TorchProblem.from_affinity(graphs, n_clusters, device=device,
                                           dtype=dtype)
        else:
            P = TorchProblem.from_features(
                graphs, n_clusters, affinity=affinity, power=power, gamma=gamma,
                device=device, dtype=dtype, block_elems=block_elems)
        res = solve(P, y0, tau=tau_arr, **params)
        labels = P.labels_list(res.labels)
        degrees = P.degrees_numpy()
        f, paths = res.objective, res.objective_path
        n_iter, n_back = res.n_iter, res.n_backtracks
        conv, tau_out = res.converged, res.tau
    n_live = np.array([
        np.count_nonzero(np.bincount(y, weights=d, minlength=n_clusters) > 0)
        for y, d in zip(labels, degrees)
    ])
    return BatchResult(
        labels=labels, ncut=n_live - np.asarray(f, dtype=np.float64),
        objective=np.asarray(f, dtype=np.float64), objective_path=paths,
        n_iter=np.asarray(n_iter), n_backtracks=np.asarray(n_back),
        converged=np.asarray(conv), tau=np.asarray(tau_out), backend=backend,
        device=str(device),
    )
