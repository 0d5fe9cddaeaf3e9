"""Peer methods of the benchmarks, all run on the same precomputed affinity.

Every peer is a function ``peer(W, n_clusters, seed) -> (labels, info)``
where ``W`` is a symmetric nonnegative affinity (scipy CSR or dense ndarray)
and ``info`` is a dict of extra diagnostics (``n_iter``, ``n_backtracks``,
...). :func:`get_peers` returns the registry used by ``benchmarks.run``.

Peers, each in its strongest configuration:

* ``falcon``: :class:`sklearn_falcon.FalconNCut` with ``affinity="precomputed"``
  and its defaults.
* ``sc-<solver>-<assign>``: :class:`sklearn.cluster.SpectralClustering` with
  ``affinity="precomputed"``, ``eigen_solver`` in {arpack, lobpcg, amg}
  (arpack is scikit-learn's default, and often the best of the three) and
  ``assign_labels`` in {kmeans, discretize, cluster_qr}.
* ``rncut``: recursive two-way normalized cut in the style of TokenCut and
  DiffCut (Fiedler vector, best threshold by NCut, recursion on the most
  cuttable segment). It is written here only as a baseline.
* ``wkkm``: weighted kernel k-means with the Graclus/Dhillon objective (kernel
  ``D^-1 W D^-1``, weights ``d``), whose objective equals the normalized cut;
  written here only as a baseline.
* ``ncut-pytorch``: the K-way discretization (``kway_ncut``, Yu & Shi 2003) of
  the ``ncut-pytorch`` package, applied to the K leading eigenvectors of
  ``D^-1/2 W D^-1/2`` computed by scipy; only if the package imports.

scikit-image's ``cut_normalized`` (region adjacency graphs) is benchmarked in
``benchmarks/bench_segmentation.py``.

Examples
--------
>>> from benchmarks.graphs import sbm_graph
>>> from benchmarks.peers import recursive_ncut
>>> W, y = sbm_graph(600, 3, avg_degree=20, p_in_ratio=0.95, seed=0)
>>> labels, info = recursive_ncut(W, 3, seed=0)
>>> sorted(set(labels.tolist()))
[0, 1, 2]
"""

import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.csgraph as csgraph
from scipy.sparse.linalg import eigsh, lobpcg

__all__ = [
    "falcon",
    "spectral",
    "recursive_ncut",
    "weighted_kernel_kmeans",
    "ncut_pytorch_kway",
    "ncut_pytorch_available",
    "leading_eigenvectors",
    "spectral_lower_bound",
    "get_peers",
]


# --------------------------------------------------------------------- utils
def _degrees(W):
    return np.asarray(W.sum(axis=1), dtype=np.float64).ravel()


def _normalized_adjacency(W, d):
    """``D^-1/2 W D^-1/2`` (zero rows for zero degrees)."""
    inv = np.zeros_like(d)
    pos = d > 0
    inv[pos] = 1.0 / np.sqrt(d[pos])
    if sp.issparse(W):
        Dm = sp.diags(inv)
        return (Dm @ W @ Dm).tocsr()
    return inv[:, None] * W * inv[None, :]


def leading_eigenvectors(W, n_vectors, seed=0, tol=1e-6):
    """Leading eigenpairs of ``A = D^-1/2 W D^-1/2``.

    These are the eigenvectors of the ``n_vectors`` smallest eigenvalues of
    the normalized Laplacian ``L = I - A``.

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
        Symmetric nonnegative affinity.
    n_vectors : int
        Number of eigenpairs.
    seed : int, default=0
        Seed of the starting vector.
    tol : float, default=1e-6
        ARPACK tolerance.

    Returns
    -------
    values : ndarray of shape (n_vectors,)
        Eigenvalues of ``A`` in decreasing order.
    vectors : ndarray of shape (n, n_vectors)

    Examples
    --------
    >>> import numpy as np
    >>> W = np.kron(np.eye(2), np.ones((3, 3)))
    >>> vals, vecs = leading_eigenvectors(W, 2)
    >>> np.round(vals, 6).tolist()
    [1.0, 1.0]
    """
    d = _degrees(W)
    A = _normalized_adjacency(W, d)
    n = A.shape[0]
    if n_vectors >= n - 1 or n <= 200:
        Ad = A.toarray() if sp.issparse(A) else np.asarray(A)
        vals, vecs = np.linalg.eigh(Ad)
        vals, vecs = vals[::-1][:n_vectors], vecs[:, ::-1][:, :n_vectors]
        return vals, vecs
    rng = np.random.default_rng(seed)
    v0 = rng.uniform(-1, 1, n)
    # Shift so that the wanted end of the spectrum (near 1) is the largest
    # in magnitude: A + I has spectrum in [0, 2].
    if sp.issparse(A):
        M = (A + sp.identity(n, format="csr")).tocsr()
    else:
        M = A + np.eye(n)
    vals, vecs = eigsh(M, k=n_vectors, which="LM", v0=v0, tol=tol)
    order = np.argsort(vals)[::-1]
    return vals[order] - 1.0, vecs[:, order]


def spectral_lower_bound(W, n_clusters, seed=0):
    """Spectral lower bound on the K-way normalized cut.

    With ``Y = D^1/2 X (X^T D X)^-1/2`` orthonormal, ``NCut(X) = tr(Y^T L Y)``
    for the normalized Laplacian ``L``, so by Ky Fan's theorem the sum of
    the K smallest eigenvalues of ``L`` bounds the NCut of every
    K-partition from below.

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
        Symmetric nonnegative affinity.
    n_clusters : int
        Number of clusters K.
    seed : int, default=0
        Seed of the eigensolver.

    Returns
    -------
    bound : float

    Examples
    --------
    >>> import numpy as np
    >>> W = np.kron(np.eye(2), np.ones((3, 3)))  # two components
    >>> round(spectral_lower_bound(W, 2), 6)
    0.0
    """
    vals, _ = leading_eigenvectors(W, n_clusters, seed=seed, tol=1e-8)
    return float(max(0.0, np.sum(1.0 - vals)))


def _relabel(labels):
    _, y = np.unique(labels, return_inverse=True)
    return y.astype(np.int64)


# -------------------------------------------------------------------- Falcon
def falcon(W, n_clusters, seed=0, **params):
    """FalconNCut on a precomputed affinity (its defaults unless overridden).

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
    n_clusters : int
    seed : int, default=0
    **params : dict
        Extra FalconNCut parameters (e.g. ``backend="numba"``).

    Returns
    -------
    labels : ndarray of shape (n,)
    info : dict
        ``n_iter``, ``n_backtracks`` (``"n/a"`` if the estimator does not
        expose ``n_backtracks_``) and ``ncut`` (the estimator's ``ncut_``).

    Examples
    --------
    >>> from benchmarks.graphs import sbm_graph
    >>> W, y = sbm_graph(500, 2, avg_degree=20, p_in_ratio=0.95, seed=0)
    >>> labels, info = falcon(W, 2, seed=0)
    >>> labels.shape, "n_iter" in info
    ((500,), True)
    """
    from sklearn_falcon import FalconNCut

    est = FalconNCut(n_clusters=n_clusters, affinity="precomputed",
                     random_state=seed, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        est.fit(W)
    info = {
        "n_iter": int(est.n_iter_),
        "n_backtracks": (int(est.n_backtracks_)
                         if hasattr(est, "n_backtracks_") else "n/a"),
        "ncut": float(est.ncut_),
    }
    return est.labels_, info


# -------------------------------------------------------- SpectralClustering
def spectral(W, n_clusters, seed=0, eigen_solver="lobpcg",
             assign_labels="cluster_qr"):
    """scikit-learn SpectralClustering on a precomputed affinity.

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
    n_clusters : int
    seed : int, default=0
    eigen_solver : {"arpack", "lobpcg", "amg"}, default="lobpcg"
        ``"amg"`` needs pyamg; on a dense W scikit-learn falls back to ARPACK.
    assign_labels : {"kmeans", "discretize", "cluster_qr"}, default="cluster_qr"

    Returns
    -------
    labels : ndarray of shape (n,)
    info : dict
        Empty.

    Examples
    --------
    >>> from benchmarks.graphs import sbm_graph
    >>> W, y = sbm_graph(500, 2, avg_degree=20, p_in_ratio=0.95, seed=0)
    >>> labels, _ = spectral(W, 2, eigen_solver="lobpcg", assign_labels="kmeans")
    >>> labels.shape
    (500,)
    """
    from sklearn.cluster import SpectralClustering

    est = SpectralClustering(
        n_clusters=n_clusters, affinity="precomputed",
        eigen_solver=eigen_solver, assign_labels=assign_labels,
        random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(W)
    return est.labels_, {}


# ---------------------------------------------------------- recursive NCut
def _sweep_ncut(W, order, d):
    """Two-way NCut of every prefix split of ``order`` (vectorised).

    Returns ``ncut[t]`` for the split {order[:t]} | {order[t:]}, t = 1..n-1.
    """
    n = order.shape[0]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    vol_total = d.sum()
    vol_prefix = np.cumsum(d[order])[:-1]
    if sp.issparse(W):
        C = W.tocoo()
        # an edge (i, j) is inside the prefix of length t iff max rank < t
        mx = np.maximum(rank[C.row], rank[C.col])
        inside = np.bincount(mx, weights=C.data, minlength=n)
    else:
        W = np.asarray(W)
        inside = np.zeros(n)
        step = max(1, int(2**24 // max(n, 1)))
        cols = np.arange(n)
        for a in range(0, n, step):
            rows = order[a:a + step]
            B = W[rows][:, order]                    # rows in sorted order
            r = np.arange(a, a + rows.shape[0])
            # j <= r: edge binned at r ; j > r: edge binned at j
            low = np.where(cols[None, :] <= r[:, None], B, 0.0)
            inside[r] += low.sum(axis=1)
            high = np.where(cols[None, :] > r[:, None], B, 0.0)
            inside += high.sum(axis=0)
    assoc_prefix = np.cumsum(inside)[:-1]
    cut = vol_prefix - assoc_prefix
    vol_rest = vol_total - vol_prefix
    with np.errstate(divide="ignore", invalid="ignore"):
        ncut = cut / vol_prefix + cut / vol_rest
    ncut[~np.isfinite(ncut)] = np.inf
    return ncut


def _fiedler(W, d, seed, solver):
    """Second eigenvector of the normalized Laplacian, as ``D^-1/2 v``."""
    n = W.shape[0]
    A = _normalized_adjacency(W, d)
    sqrt_d = np.sqrt(d)
    u0 = sqrt_d / np.linalg.norm(sqrt_d)          # known top eigenvector
    rng = np.random.default_rng(seed)
    if n <= 300:
        Ad = A.toarray() if sp.issparse(A) else np.asarray(A)
        vals, vecs = np.linalg.eigh(Ad)
        v = vecs[:, -2]
    elif solver == "lobpcg":
        X0 = rng.standard_normal((n, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, vecs = lobpcg(A, X0, Y=u0[:, None], largest=True, tol=1e-5,
                             maxiter=200)
        v = vecs[:, 0]
    else:
        M = A + (sp.identity(n, format="csr") if sp.issparse(A) else np.eye(n))
        _, vecs = eigsh(M, k=2, which="LM", v0=rng.uniform(-1, 1, n), tol=1e-6)
        v = vecs[:, 0]  # eigsh returns ascending order: index 0 is the 2nd
    return v / sqrt_d


def _best_split(W, seed, solver):
    """Best two-way split of a segment: (ncut, mask) or (inf, None).

    Zero-degree nodes (no edge inside the segment) are never split off on
    their own: a part of zero volume would have an NCut term of 0 for free.
    They join the larger side of the split of the other nodes.
    """
    n = W.shape[0]
    if n < 2:
        return np.inf, None
    d = _degrees(W)
    pos = np.flatnonzero(d > 0)
    if pos.shape[0] < 2:
        return np.inf, None
    if pos.shape[0] < n:
        Wp = W[pos][:, pos].tocsr() if sp.issparse(W) else W[np.ix_(pos, pos)]
        val, mask_p = _best_split(Wp, seed, solver)
        if mask_p is None:
            return np.inf, None
        mask = np.zeros(n, dtype=bool)
        mask[pos[mask_p]] = True
        if mask_p.sum() > mask_p.shape[0] / 2:   # zero-degree nodes join
            mask[d <= 0] = True                  # the larger side
        return val, mask
    if sp.issparse(W):
        n_comp, comp = csgraph.connected_components(W, directed=False)
    else:
        n_comp, comp = csgraph.connected_components(
            sp.csr_matrix(W > 0), directed=False)
    if n_comp > 1:
        # a disconnected segment (every part of positive volume): cutting its
        # component of largest volume off is free
        vols = np.bincount(comp, weights=d)
        mask = comp == np.argmax(vols)
        return 0.0, mask
    v = _fiedler(W, d, seed, solver)
    order = np.argsort(v, kind="stable")
    ncut = _sweep_ncut(W, order, d)
    t = int(np.argmin(ncut)) + 1
    mask = np.zeros(n, dtype=bool)
    mask[order[:t]] = True
    return float(ncut[t - 1]), mask


def recursive_ncut(W, n_clusters, seed=0, solver="arpack", threshold=None):
    """Recursive two-way normalized cut (TokenCut / DiffCut style baseline).

    Starting from one segment, the segment whose best two-way split has the
    lowest NCut is split, until ``n_clusters`` segments exist or no split has
    an NCut below ``threshold``. A split is found as in Shi & Malik: the
    Fiedler vector ``D^-1/2 v_2`` of the segment's normalized Laplacian
    (computed on the segment's induced subgraph), thresholded at the value
    that minimises the two-way NCut (an exact O(nnz) sweep over all
    thresholds). A disconnected segment is split along its components;
    zero-degree nodes are never split off alone (a part of zero volume would
    lower the NCut for free).

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
        Symmetric nonnegative affinity.
    n_clusters : int
        Maximum number of segments.
    seed : int, default=0
        Seed of the eigensolver starting vectors.
    solver : {"arpack", "lobpcg"}, default="arpack"
        Eigensolver for the Fiedler vector.
    threshold : float, default=None
        Stop when the best split's two-way NCut is above it (None: always
        split until ``n_clusters``).

    Returns
    -------
    labels : ndarray of shape (n,)
    info : dict
        ``n_splits`` and ``n_eigensolves``.

    Examples
    --------
    >>> from benchmarks.graphs import sbm_graph
    >>> W, y = sbm_graph(800, 4, avg_degree=20, p_in_ratio=0.95, seed=0)
    >>> labels, info = recursive_ncut(W, 4)
    >>> info["n_splits"]
    3
    """
    if solver not in ("arpack", "lobpcg"):
        raise ValueError(f"solver must be 'arpack' or 'lobpcg', got {solver!r}.")
    W = W.tocsr() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    n = W.shape[0]
    labels = np.zeros(n, dtype=np.int64)
    members = {0: np.arange(n)}
    n_solves = 0

    def sub(idx):
        if sp.issparse(W):
            return W[idx][:, idx].tocsr()
        return W[np.ix_(idx, idx)]

    cache = {}

    def split_of(seg):
        nonlocal n_solves
        if seg not in cache:
            n_solves += 1
            cache[seg] = _best_split(sub(members[seg]), seed + seg, solver)
        return cache[seg]

    n_splits = 0
    while len(members) < n_clusters:
        best_seg, best_val = None, np.inf
        for seg in members:
            val, mask = split_of(seg)
            if mask is not None and val < best_val:
                best_seg, best_val = seg, val
        if best_seg is None or (threshold is not None and best_val > threshold):
            break
        _, mask = cache.pop(best_seg)
        idx = members[best_seg]
        new = len(members)
        members[best_seg] = idx[~mask]
        members[new] = idx[mask]
        labels[idx[mask]] = new
        n_splits += 1
    return _relabel(labels), {"n_splits": n_splits, "n_eigensolves": n_solves}


# -------------------------------------------------- weighted kernel k-means
def _cluster_weights(W, labels, K):
    """(W X)_ik, the weight from node i to cluster k."""
    n = labels.shape[0]
    if sp.issparse(W):
        X = sp.csr_matrix((np.ones(n), (np.arange(n), labels)), shape=(n, K))
        return (W @ X).toarray()
    X = np.zeros((n, K), dtype=W.dtype)
    X[np.arange(n), labels] = 1.0
    return np.asarray(W @ X, dtype=np.float64)


def weighted_kernel_kmeans(W, n_clusters, seed=0, n_init=10, max_iter=100):
    """Weighted kernel k-means with the normalized-cut kernel (Dhillon et al.).

    With weights ``w_i = d_i`` and kernel ``K = D^-1 W D^-1``, the weighted
    kernel k-means objective equals ``sum_i d_i K_ii - K + NCut`` (Dhillon,
    Guan & Kulis, 2007, the objective of Graclus). The batch algorithm
    assigns every node to ``argmin_c  -2 (W X)_ic / vol_c + d_i assoc_c /
    vol_c^2`` (the distance times ``d_i``, constant terms dropped) and
    repeats until no label changes; the labelling of lowest NCut seen is
    kept. ``n_init`` random initial labellings are tried. A cluster that
    empties is reseeded with the node farthest from its own centre.

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
    n_clusters : int
    seed : int, default=0
    n_init : int, default=10
    max_iter : int, default=100

    Returns
    -------
    labels : ndarray of shape (n,)
    info : dict
        ``n_iter`` (summed over restarts).

    Examples
    --------
    >>> from benchmarks.graphs import sbm_graph
    >>> W, y = sbm_graph(500, 2, avg_degree=30, p_in_ratio=0.95, seed=0)
    >>> labels, info = weighted_kernel_kmeans(W, 2, n_init=3)
    >>> labels.shape
    (500,)
    """
    W = W.tocsr() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    n = W.shape[0]
    K = n_clusters
    d = _degrees(W)
    rng = np.random.default_rng(seed)
    best_labels, best_ncut, total_iter = None, np.inf, 0
    rows = np.arange(n)
    for _ in range(n_init):
        labels = rng.integers(0, K, size=n)
        labels[rng.choice(n, K, replace=False)] = np.arange(K)
        run_best, run_ncut = labels.copy(), np.inf
        for _ in range(max_iter):
            total_iter += 1
            WX = _cluster_weights(W, labels, K)
            vol = np.bincount(labels, weights=d, minlength=K)
            assoc = np.bincount(labels, weights=WX[rows, labels], minlength=K)
            pos = vol > 0
            ncut = float(np.sum((vol[pos] - assoc[pos]) / vol[pos]))
            if ncut < run_ncut - 1e-12:
                run_best, run_ncut = labels.copy(), ncut
            elif ncut >= run_ncut:
                break
            safe = np.where(vol > 0, vol, 1.0)
            dist = -2.0 * WX / safe + d[:, None] * (assoc / safe**2)[None, :]
            dist[:, ~pos] = np.inf
            new = np.argmin(dist, axis=1)
            counts = np.bincount(new, minlength=K)
            for c in np.flatnonzero(counts == 0):
                own = dist[rows, new]
                far = int(np.argmax(own))
                new[far] = c
                dist[far, :] = -np.inf
            if np.array_equal(new, labels):
                break
            labels = new
        if run_ncut < best_ncut:
            best_labels, best_ncut = run_best, run_ncut
    return _relabel(best_labels), {"n_iter": total_iter}


# ------------------------------------------------------------ ncut-pytorch
def ncut_pytorch_available():
    """Whether ``ncut_pytorch`` and torch are installed (not imported here:
    importing them takes seconds).

    Examples
    --------
    >>> isinstance(ncut_pytorch_available(), bool)
    True
    """
    from importlib.util import find_spec

    return find_spec("ncut_pytorch") is not None and find_spec("torch") is not None


def ncut_pytorch_kway(W, n_clusters, seed=0):
    """ncut-pytorch's K-way discretization on the spectral embedding of W.

    ``ncut_pytorch`` computes eigenvectors from features with its own
    (Nystrom) affinity; to compare on the same graph, the K leading
    eigenvectors of ``D^-1/2 W D^-1/2`` are computed with scipy (ARPACK) and
    passed to ``ncut_pytorch.kway_ncut`` (Yu & Shi multiclass
    discretization); labels are the argmax of the rotated vectors.

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
    n_clusters : int
    seed : int, default=0

    Returns
    -------
    labels : ndarray of shape (n,)
    info : dict
        Empty.

    Examples
    --------
    >>> from benchmarks.graphs import sbm_graph
    >>> W, y = sbm_graph(500, 2, avg_degree=20, p_in_ratio=0.95, seed=0)
    >>> labels, _ = ncut_pytorch_kway(W, 2)  # doctest: +SKIP
    """
    import torch
    from ncut_pytorch import kway_ncut

    torch.manual_seed(seed)
    _, vecs = leading_eigenvectors(W, n_clusters, seed=seed)
    ev = torch.from_numpy(np.ascontiguousarray(vecs, dtype=np.float32))
    with torch.no_grad():
        rotated = kway_ncut(ev, n_clusters=n_clusters, device="cpu")
    labels = rotated.argmax(dim=1).cpu().numpy()
    return _relabel(labels), {}


# ---------------------------------------------------------------- registry
SC_SOLVERS = ("arpack", "lobpcg", "amg")
SC_ASSIGN = ("kmeans", "discretize", "cluster_qr")


def _amg_available():
    try:
        import pyamg  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return True


def _registry():
    """``(peers, missing)``: every peer that runs here, ``name -> callable``,
    and ``name -> why`` of those whose package is not installed."""
    from functools import partial

    peers = {"falcon": falcon}
    missing = {}
    for solver in SC_SOLVERS:
        for assign in SC_ASSIGN:
            name = f"sc-{solver}-{assign}"
            if solver == "amg" and not _amg_available():
                missing[name] = "pyamg is not installed"
                continue
            peers[name] = partial(spectral, eigen_solver=solver,
                                  assign_labels=assign)
    peers["rncut"] = recursive_ncut
    peers["wkkm"] = weighted_kernel_kmeans
    if ncut_pytorch_available():
        peers["ncut-pytorch"] = ncut_pytorch_kway
    else:
        missing["ncut-pytorch"] = "ncut-pytorch or torch is not installed"
    return peers, missing


def _select(registry, include, exclude):
    if include is not None:
        registry = {name: v for pat in include for name, v in registry.items()
                    if name == pat or (pat.endswith("*")
                                       and name.startswith(pat[:-1]))}
    return {k: v for k, v in registry.items() if k not in set(exclude)}


def get_peers(include=None, exclude=()):
    """Registry ``name -> callable(W, n_clusters, seed)`` of the peers.

    Parameters
    ----------
    include : iterable of str, default=None
        Keep only these names (and those starting with a given prefix ending
        with ``*``, e.g. ``"sc-*"``). None keeps all.
    exclude : iterable of str, default=()
        Names to drop.

    Returns
    -------
    peers : dict

    Examples
    --------
    >>> peers = get_peers(include=["falcon", "sc-*"])
    >>> "falcon" in peers and "sc-lobpcg-kmeans" in peers
    True
    """
    return _select(_registry()[0], include, exclude)


def missing_peers(include=None, exclude=()):
    """``["name (why)", ...]``: the peers that :func:`get_peers` would select
    with the same arguments but leaves out, their package not installed
    (``sc-amg-*`` without pyamg, ``ncut-pytorch`` without it or torch).

    Examples
    --------
    >>> missing_peers(include=["falcon", "rncut"])
    []
    """
    return [f"{name} ({why})"
            for name, why in _select(_registry()[1], include, exclude).items()]
