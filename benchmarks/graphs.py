"""Seeded graph generators for the benchmarks.

Every generator returns a symmetric, nonnegative ``scipy.sparse`` CSR matrix
of dtype float64 (or a dense ndarray for :func:`cosine_power_affinity`)
together with the planted labels. All generators are vectorised: none loops
over edges in Python, so the SBM and kNN generators reach 10^6 nodes within
a few hundred megabytes.

Examples
--------
>>> from benchmarks.graphs import sbm_graph
>>> W, y = sbm_graph(1000, 5, avg_degree=10, seed=0)
>>> W.shape, W.format, float(abs(W - W.T).max())
((1000, 1000), 'csr', 0.0)
"""

import time

import numpy as np
import scipy.sparse as sp
from sklearn.neighbors import NearestNeighbors, kneighbors_graph

__all__ = [
    "knn_affinity",
    "digits_graph",
    "blobs_graph",
    "moons_graph",
    "circles_graph",
    "sbm_graph",
    "lfr_graph",
    "token_features",
    "cosine_power_affinity",
    "knn_graph_million",
]


def _check_positive_int(value, name, minimum=1):
    if not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(
            f"{name} must be an integer >= {minimum}, got {value!r}."
        )
    return int(value)


def knn_affinity(X, n_neighbors=10, n_jobs=None):
    """Symmetric kNN connectivity exactly as scikit-learn's SpectralClustering.

    This is the matrix ``SpectralClustering(affinity="nearest_neighbors")``
    stores in ``affinity_matrix_``: ``C = kneighbors_graph(X, n_neighbors,
    include_self=True)`` and ``W = 0.5 * (C + C.T)``.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Feature matrix.
    n_neighbors : int, default=10
        Number of neighbours (the point itself counts as one).
    n_jobs : int, default=None
        Parallelism of the neighbour search.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n_samples, n_samples), float64
        Symmetric affinity with entries in {0, 0.5, 1}.

    Examples
    --------
    >>> import numpy as np
    >>> W = knn_affinity(np.arange(20.0).reshape(10, 2), n_neighbors=3)
    >>> W.shape, float(W.diagonal().min())
    ((10, 10), 1.0)
    """
    n_neighbors = _check_positive_int(n_neighbors, "n_neighbors")
    C = kneighbors_graph(
        X, n_neighbors=n_neighbors, include_self=True, n_jobs=n_jobs
    )
    W = 0.5 * (C + C.T)
    W = sp.csr_matrix(W, dtype=np.float64)
    W.sort_indices()
    return W


def digits_graph(n_neighbors=10):
    """kNN graph of the scikit-learn digits (1,797 images, 10 classes).

    Parameters
    ----------
    n_neighbors : int, default=10
        Number of neighbours of :func:`knn_affinity`.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (1797, 1797)
    y : ndarray of shape (1797,)
        Digit classes.
    X : ndarray of shape (1797, 64)
        Raw pixel features (0..16), as used for the graph.

    Examples
    --------
    >>> W, y, X = digits_graph()
    >>> W.shape, len(set(y))
    ((1797, 1797), 10)
    """
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X.astype(np.float64)
    return knn_affinity(X, n_neighbors), y, X


def blobs_graph(n=2000, n_clusters=5, n_features=2, cluster_std=1.0, seed=0,
                n_neighbors=10):
    """kNN graph of isotropic Gaussian blobs.

    Parameters
    ----------
    n : int, default=2000
        Number of points.
    n_clusters : int, default=5
        Number of blobs.
    n_features : int, default=2
        Dimension.
    cluster_std : float, default=1.0
        Standard deviation of each blob.
    seed : int, default=0
        Random seed.
    n_neighbors : int, default=10
        Number of neighbours of :func:`knn_affinity`.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n, n)
    y : ndarray of shape (n,)
    X : ndarray of shape (n, n_features)

    Examples
    --------
    >>> W, y, X = blobs_graph(n=300, n_clusters=3, seed=0)
    >>> W.shape, X.shape
    ((300, 300), (300, 2))
    """
    from sklearn.datasets import make_blobs

    X, y = make_blobs(
        n_samples=n, centers=n_clusters, n_features=n_features,
        cluster_std=cluster_std, random_state=seed,
    )
    return knn_affinity(X, n_neighbors), y, X


def moons_graph(n=1000, noise=0.05, seed=0, n_neighbors=10):
    """kNN graph of two interleaving half circles.

    Parameters
    ----------
    n : int, default=1000
        Number of points.
    noise : float, default=0.05
        Gaussian noise of :func:`sklearn.datasets.make_moons`.
    seed : int, default=0
        Random seed.
    n_neighbors : int, default=10
        Number of neighbours of :func:`knn_affinity`.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n, n)
    y : ndarray of shape (n,)
    X : ndarray of shape (n, 2)

    Examples
    --------
    >>> W, y, X = moons_graph(n=200)
    >>> W.shape
    (200, 200)
    """
    from sklearn.datasets import make_moons

    X, y = make_moons(n_samples=n, noise=noise, random_state=seed)
    return knn_affinity(X, n_neighbors), y, X


def circles_graph(n=1000, noise=0.05, factor=0.5, seed=0, n_neighbors=10):
    """kNN graph of two concentric circles.

    Parameters
    ----------
    n : int, default=1000
        Number of points.
    noise : float, default=0.05
        Gaussian noise of :func:`sklearn.datasets.make_circles`.
    factor : float, default=0.5
        Ratio of the inner to the outer radius.
    seed : int, default=0
        Random seed.
    n_neighbors : int, default=10
        Number of neighbours of :func:`knn_affinity`.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n, n)
    y : ndarray of shape (n,)
    X : ndarray of shape (n, 2)

    Examples
    --------
    >>> W, y, X = circles_graph(n=200)
    >>> W.shape
    (200, 200)
    """
    from sklearn.datasets import make_circles

    X, y = make_circles(n_samples=n, noise=noise, factor=factor,
                        random_state=seed)
    return knn_affinity(X, n_neighbors), y, X


def _edges_to_csr(rows, cols, n):
    """Unweighted symmetric CSR from an edge list (duplicates and loops dropped)."""
    keep = rows != cols
    rows, cols = rows[keep], cols[keep]
    idx_dtype = np.int32 if n < 2**31 - 1 else np.int64
    r = np.concatenate([rows, cols]).astype(idx_dtype, copy=False)
    c = np.concatenate([cols, rows]).astype(idx_dtype, copy=False)
    del rows, cols
    data = np.ones(r.shape[0], dtype=np.float64)
    W = sp.csr_matrix((data, (r, c)), shape=(n, n))
    del r, c, data
    W.sum_duplicates()
    W.data[:] = 1.0
    W.sort_indices()
    return W


def sbm_graph(n, n_clusters, avg_degree=10.0, p_in_ratio=0.8, seed=0):
    """Planted-partition stochastic block model, unweighted.

    Clusters have equal sizes (up to one node) and nodes are randomly
    permuted. ``round(n * avg_degree / 2)`` edge draws are made; each draw
    picks a uniform random endpoint ``i`` and, with probability
    ``p_in_ratio``, a uniform partner in ``i``'s cluster, otherwise a
    uniform partner outside it. Duplicate draws and self-loops are removed,
    so the realised mean degree is slightly below ``avg_degree``. Memory is
    O(n * avg_degree); nothing dense is built.

    Parameters
    ----------
    n : int
        Number of nodes.
    n_clusters : int
        Number of planted clusters (``>= 2``).
    avg_degree : float, default=10.0
        Expected mean degree.
    p_in_ratio : float, default=0.8
        Expected fraction of a node's edges inside its own cluster, in
        ``(0, 1]``. The planted partition has NCut about
        ``n_clusters * (1 - p_in_ratio)``.
    seed : int, default=0
        Random seed.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n, n), float64
        Symmetric 0/1 adjacency.
    y : ndarray of shape (n,), int64
        Planted clusters.

    Examples
    --------
    >>> W, y = sbm_graph(2000, 4, avg_degree=20, p_in_ratio=0.9, seed=1)
    >>> W.nnz > 30000, W.shape
    (True, (2000, 2000))
    """
    n = _check_positive_int(n, "n", 2)
    n_clusters = _check_positive_int(n_clusters, "n_clusters", 2)
    if n_clusters > n:
        raise ValueError(f"n_clusters={n_clusters} must be <= n={n}.")
    if not avg_degree > 0:
        raise ValueError(f"avg_degree must be > 0, got {avg_degree!r}.")
    if not 0.0 < p_in_ratio <= 1.0:
        raise ValueError(f"p_in_ratio must be in (0, 1], got {p_in_ratio!r}.")
    rng = np.random.default_rng(seed)
    sizes = np.full(n_clusters, n // n_clusters, dtype=np.int64)
    sizes[: n % n_clusters] += 1
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    # position p (sorted by cluster) -> node id perm[p]
    perm = rng.permutation(n)
    y_sorted = np.repeat(np.arange(n_clusters), sizes)
    y = np.empty(n, dtype=np.int64)
    y[perm] = y_sorted

    m = int(round(n * avg_degree / 2.0))
    src = rng.integers(0, n, size=m)                 # sorted positions
    cl = y_sorted[src]
    inside = rng.random(m) < p_in_ratio
    dst = np.empty(m, dtype=np.int64)
    # partner inside the cluster
    ci = cl[inside]
    dst[inside] = starts[ci] + (rng.random(ci.shape[0]) * sizes[ci]).astype(
        np.int64)
    # partner outside: uniform over the n - size_c other positions
    co = cl[~inside]
    r = (rng.random(co.shape[0]) * (n - sizes[co])).astype(np.int64)
    r += np.where(r >= starts[co], sizes[co], 0)
    dst[~inside] = r
    del cl, inside, ci, co, r
    W = _edges_to_csr(perm[src], perm[dst], n)
    return W, y


def lfr_graph(n=1000, tau1=3.0, tau2=1.5, mu=0.1, average_degree=10,
              min_community=20, max_community=None, seed=0, max_tries=8):
    """LFR benchmark graph (networkx), with seeded fall-backs.

    ``networkx.LFR_benchmark_graph`` fails for some seeds (its power-law
    sampling does not converge). This wrapper tries ``seed, seed + 1, ...``
    up to ``max_tries`` times and returns the first graph that converges.

    Parameters
    ----------
    n : int, default=1000
        Number of nodes.
    tau1, tau2 : float, default=3.0, 1.5
        Power-law exponents of the degree and community-size distributions.
    mu : float, default=0.1
        Mixing parameter: fraction of each node's edges leaving its community.
    average_degree : float, default=10
        Target mean degree.
    min_community : int, default=20
        Minimum community size.
    max_community : int, default=None
        Maximum community size (networkx default when None).
    seed : int, default=0
        First seed tried.
    max_tries : int, default=8
        Number of seeds tried before giving up.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n, n), float64
        Symmetric 0/1 adjacency.
    y : ndarray of shape (n,), int64
        Community of each node (LFR communities here are disjoint).

    Raises
    ------
    RuntimeError
        If no seed converged.

    Examples
    --------
    >>> W, y = lfr_graph(250, average_degree=5, min_community=20, seed=10)
    >>> W.shape
    (250, 250)
    """
    import networkx as nx

    last_error = None
    for s in range(seed, seed + max_tries):
        try:
            G = nx.LFR_benchmark_graph(
                n, tau1, tau2, mu, average_degree=average_degree,
                min_community=min_community, max_community=max_community,
                seed=s,
            )
        except nx.ExceededMaxIterations as exc:  # pragma: no cover - seed dependent
            last_error = exc
            continue
        y = np.full(n, -1, dtype=np.int64)
        communities = {frozenset(G.nodes[v]["community"]) for v in G}
        for k, com in enumerate(sorted(communities, key=min)):
            y[list(com)] = k
        edges = np.array(G.edges(), dtype=np.int64).reshape(-1, 2)
        W = _edges_to_csr(edges[:, 0], edges[:, 1], n)
        return W, y
    raise RuntimeError(
        f"LFR_benchmark_graph did not converge for seeds {seed}.."
        f"{seed + max_tries - 1} (n={n}, mu={mu}): {last_error}"
    )


def token_features(n_tokens=4096, n_groups=8, dim=384, rank=32,
                   noise=1.2, seed=0):
    """DINO-like token features with planted groups.

    ViT patch tokens share a large common component (so their cosine
    similarities are mostly positive), vary in a low-dimensional subspace,
    and carry some isotropic noise. This generator mimics that: a shared
    mean direction, ``n_groups`` group centres in a random ``rank``-dim
    subspace of ``R^dim``, per-token low-rank noise and small full-rank noise.

    Parameters
    ----------
    n_tokens : int, default=4096
        Number of tokens (e.g. 64x64 patches -> 4,096).
    n_groups : int, default=8
        Number of planted groups (segments).
    dim : int, default=384
        Feature dimension (ViT-S/16 uses 384).
    rank : int, default=32
        Dimension of the subspace holding the group structure.
    noise : float, default=1.2
        Scale of the within-group low-rank noise relative to the centres
        (1.2 makes groups overlap: spectral clustering reaches ARI ~0.95).
    seed : int, default=0
        Random seed.

    Returns
    -------
    F : ndarray of shape (n_tokens, dim), float32
        Token features.
    y : ndarray of shape (n_tokens,), int64
        Planted group of each token.

    Examples
    --------
    >>> F, y = token_features(256, 4, dim=64, rank=8, seed=0)
    >>> F.shape, F.dtype.name, len(set(y))
    ((256, 64), 'float32', 4)
    """
    n_tokens = _check_positive_int(n_tokens, "n_tokens", 2)
    n_groups = _check_positive_int(n_groups, "n_groups", 1)
    dim = _check_positive_int(dim, "dim", 2)
    rank = _check_positive_int(rank, "rank", 1)
    rank = min(rank, dim - 1)
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((dim, rank + 1)))
    mean_dir, sub = basis[:, 0], basis[:, 1:]
    centres = rng.standard_normal((n_groups, rank))
    y = rng.integers(0, n_groups, size=n_tokens)
    y[:n_groups] = np.arange(min(n_groups, n_tokens))  # every group present
    coords = centres[y] + noise * rng.standard_normal((n_tokens, rank))
    F = 2.0 * np.sqrt(rank) * mean_dir[None, :] * (
        1.0 + 0.1 * rng.standard_normal((n_tokens, 1)))
    F = F + coords @ sub.T
    F += 0.15 * rng.standard_normal((n_tokens, dim))
    return F.astype(np.float32), y.astype(np.int64)


def cosine_power_affinity(F, power=1.0):
    """Dense min-max normalised cosine affinity raised to ``power``.

    ``W = ((S - min S) / (max S - min S)) ** power`` with ``S`` the cosine
    similarity matrix of the rows of ``F`` (diagonal included): the
    definition of ``FalconNCut(affinity="cosine", power=...)``, which this
    calls in float64.

    Parameters
    ----------
    F : array-like of shape (n, p)
        Features.
    power : float, default=1.0
        Sharpening exponent (> 0).

    Returns
    -------
    W : ndarray of shape (n, n), float64
        Symmetric affinity in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> W = cosine_power_affinity(np.eye(3) + 0.1, power=2.0)
    >>> W.shape, float(W.max()), bool(np.allclose(W, W.T))
    ((3, 3), 1.0, True)
    """
    if not power > 0:
        raise ValueError(f"power must be > 0, got {power!r}.")
    from sklearn_falcon._affinity import cosine_power_affinity as definition

    return definition(np.asarray(F, dtype=np.float64), power)[0]


def knn_graph_million(n=1_000_000, k=10, n_clusters=20, dim=3, seed=0,
                      n_jobs=None, return_time=False):
    """Large sparse kNN graph of a low-dimensional Gaussian mixture.

    ``n_clusters`` Gaussian blobs with unit variance whose centres are drawn
    uniformly in a box of side ``6 * n_clusters ** (1 / dim)``, so that
    neighbouring blobs touch. The graph is :func:`knn_affinity` of the
    points (KD-tree search), i.e. SpectralClustering's kNN affinity.

    Parameters
    ----------
    n : int, default=1_000_000
        Number of nodes.
    k : int, default=10
        Number of neighbours (self included).
    n_clusters : int, default=20
        Number of mixture components.
    dim : int, default=3
        Dimension of the points.
    seed : int, default=0
        Random seed.
    n_jobs : int, default=None
        Parallelism of the neighbour search.
    return_time : bool, default=False
        Also return the construction time in seconds (point sampling
        excluded, neighbour search and symmetrisation included).

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n, n), float64
    y : ndarray of shape (n,), int64
        Mixture component of each node.
    seconds : float
        Only if ``return_time``.

    Examples
    --------
    >>> W, y, t = knn_graph_million(n=2000, k=10, n_clusters=4, return_time=True)
    >>> W.shape, t > 0
    ((2000, 2000), True)
    """
    n = _check_positive_int(n, "n", 2)
    k = _check_positive_int(k, "k", 1)
    rng = np.random.default_rng(seed)
    side = 6.0 * n_clusters ** (1.0 / dim)
    centres = rng.uniform(0.0, side, size=(n_clusters, dim))
    y = rng.integers(0, n_clusters, size=n).astype(np.int64)
    X = centres[y] + rng.standard_normal((n, dim))
    t0 = time.perf_counter()
    nn = NearestNeighbors(n_neighbors=k, algorithm="kd_tree", n_jobs=n_jobs)
    nn.fit(X)
    C = nn.kneighbors_graph(X, n_neighbors=k, mode="connectivity")
    del nn
    W = C + C.T
    del C
    W.data *= 0.5
    W = sp.csr_matrix(W, dtype=np.float64)
    W.sort_indices()
    seconds = time.perf_counter() - t0
    if return_time:
        return W, y, seconds
    return W, y
