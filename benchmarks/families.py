"""Graph families of the peer benchmark (``python -m benchmarks.bench_peers``).

Every graph is a :class:`BenchGraph` ``(name, family, W, K, y_true)``: ``W``
is a scipy CSR matrix of float64, symmetric, nonnegative, with sorted indices
and **no zero-degree node** (a generator that leaves isolated nodes has them
removed by :func:`clean_graph`, and its ``n`` is the number kept); ``K`` is the
number of clusters asked for; ``y_true`` is the planted or known partition
(``None`` where there is none). Every graph is a deterministic function of its
parameters and seed. :func:`graph_specs` lists the graphs of a mode; a
:class:`GraphSpec` builds its graph only when asked (``spec.build()``).

Families
--------
``pixel``
    Pixel graphs of scikit-image's bundled photographs (coffee, astronaut,
    chelsea, rocket), resized to ``h x w`` (anti-aliased; astronaut, which is
    square, is stretched): 50x75 and 100x150 with K = 4, 8, 16, and 200x300
    with K = 8; RGB in [0, 1]. Each pixel is joined to its 8
    neighbours with the Shi & Malik (2000) weight
    ``exp(-||c_i - c_j||^2 / sigma_c^2) * exp(-||p_i - p_j||^2 / sigma_p^2)``.
    ``sigma_c^2`` is the mean of ``||c_i - c_j||^2`` over the image's
    neighbour pairs (so an average edge has colour factor ``e^-1`` whatever
    the image's contrast); ``sigma_p = 4`` pixels (Shi & Malik's ``sigma_X``),
    which with 8 neighbours only weighs diagonal pairs by ``e^-1/16`` against
    straight ones. Weights that underflow to 0 are dropped. No truth.
``grid``
    2D (4-neighbour) and 3D (6-neighbour) grid meshes, unweighted or with
    i.i.d. edge weights uniform in [0.1, 1]. No truth.
``rgg``
    Random geometric graphs: ``n`` uniform points in the unit square (cube),
    joined when closer than the radius giving an expected degree of 10;
    unweighted. Isolated points are removed. No truth.
``shapes``
    Noisy concentric circles (``factor=0.5``) and two moons of scikit-learn,
    kNN graph with k=15 (scikit-learn's ``0.5 (C + C^T)``, self included,
    as ``SpectralClustering(affinity="nearest_neighbors")``); K=2, truth =
    the ring or moon.
``datasets``
    scikit-learn's bundled iris, wine, breast_cancer and digits, raw and
    standardized (``StandardScaler``), kNN graph with k=10 (as above); K =
    number of classes, truth = the class.
``lfr``
    LFR benchmark graphs (networkx), ``tau1=3``, ``tau2=1.5``, mean degree
    15, community sizes 40 .. n/10, ``mu`` from 0.1 to 0.5. networkx fails
    for some seeds: seeds ``s, s+1, ...`` are tried in order and the first
    that converges is used (see :func:`benchmarks.graphs.lfr_graph`). K = the
    number of communities, truth = the communities.
``sbm``
    Planted partitions with a fixed expected degree (unweighted): *unbalanced*
    SBMs whose cluster sizes grow geometrically from 1 to 10 (largest / smallest
    = 10), each node's edges inside its cluster with probability 0.75; and
    *hierarchical* SBMs of 4 groups of 4 blocks (16 blocks), a node's edge
    inside its block with probability 0.6, in another block of its group with
    probability 0.3, outside the group with probability 0.1, clustered at
    K=16 (truth: blocks) and at K=4 (truth: groups).
``realnet``
    Small real networks bundled with networkx (no download): Zachary's karate
    club (weighted; K=2 with the club split as truth, and K=4), Les Miserables
    co-occurrences (weighted; K=4, 8), the Florentine families (K=2, 3) and
    Davis' southern women (bipartite women-events; K=2, 4).
``scale``
    The speed group: graphs of about 100,000 nodes (a planted SBM with K=20,
    a kNN graph (k=10) of a 20-component Gaussian mixture in 3D, a weighted 3D
    grid of 47^3 nodes, a 2D random geometric graph) and one SBM of 1,000,000
    nodes (K=20, mean degree 10, 80% of edges inside).

``quick`` mode keeps one to four small graphs of every family and only the
100,000-node SBM of the scale group; ``smoke`` keeps tiny graphs.

Examples
--------
>>> from benchmarks.families import graph_specs
>>> specs = graph_specs("smoke")
>>> g = specs[0].build()
>>> g.W.format, g.W.dtype.name, g.K > 1
('csr', 'float64', True)
"""

import re
from collections import namedtuple
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import scipy.sparse as sp

from . import graphs as G

__all__ = [
    "BenchGraph",
    "GraphSpec",
    "FAMILIES",
    "graph_specs",
    "clean_graph",
    "pixel_graph",
    "grid_graph",
    "random_geometric_graph",
    "planted_graph",
    "networkx_graph",
]

BenchGraph = namedtuple("BenchGraph", "name family W K y_true")
FAMILIES = ("pixel", "grid", "rgg", "shapes", "datasets", "lfr", "sbm",
            "realnet", "scale")


# ------------------------------------------------------------------ helpers
def clean_graph(W, y=None):
    """CSR float64, symmetric, nonnegative, without zero-degree nodes.

    Parameters
    ----------
    W : sparse matrix of shape (n, n)
        Symmetric nonnegative affinity.
    y : ndarray of shape (n,), default=None
        Labels, restricted to the kept nodes.

    Returns
    -------
    W : scipy.sparse.csr_matrix
    y : ndarray or None

    Examples
    --------
    >>> import scipy.sparse as sp
    >>> W = sp.csr_matrix(([1.0, 1.0], ([0, 1], [1, 0])), shape=(3, 3))
    >>> Wc, _ = clean_graph(W)
    >>> Wc.shape
    (2, 2)
    """
    W = sp.csr_matrix(W, dtype=np.float64)
    W.eliminate_zeros()
    if W.nnz and W.data.min() < 0:
        raise ValueError("W has negative entries.")
    if abs(W - W.T).max() > 1e-12 * max(1.0, abs(W).max()):
        raise ValueError("W is not symmetric.")
    d = np.asarray(W.sum(axis=1)).ravel()
    keep = np.flatnonzero(d > 0)
    if keep.shape[0] < W.shape[0]:
        W = W[keep][:, keep].tocsr()
        if y is not None:
            y = np.asarray(y)[keep]
    W.sort_indices()
    if y is not None:
        _, y = np.unique(np.asarray(y), return_inverse=True)
        y = y.astype(np.int64)
    return W, y


def _symmetric(rows, cols, weights, n):
    """Symmetric CSR from one direction of each undirected edge."""
    r = np.concatenate([rows, cols])
    c = np.concatenate([cols, rows])
    w = np.concatenate([weights, weights])
    W = sp.csr_matrix((w, (r, c)), shape=(n, n), dtype=np.float64)
    W.sum_duplicates()
    return W


# ---------------------------------------------------------------- pixels
PHOTOS = ("coffee", "astronaut", "chelsea", "rocket")
SIGMA_P = 4.0


def pixel_graph(image, shape, sigma_p=SIGMA_P):
    """8-neighbour Shi-Malik pixel graph of a resized RGB image.

    Parameters
    ----------
    image : str or ndarray of shape (H, W, 3)
        Name of a scikit-image photo (``skimage.data.<name>()``) or an array.
    shape : tuple of int
        ``(h, w)`` after resizing (anti-aliased).
    sigma_p : float, default=4.0
        Position scale in pixels of the resized image.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (h * w, h * w)
    sigma_c2 : float
        The colour scale ``sigma_c^2`` used (mean squared colour difference
        of neighbouring pixels).

    Examples
    --------
    >>> W, s = pixel_graph("coffee", (10, 15))
    >>> W.shape, W.nnz <= 150 * 8
    ((150, 150), True)
    """
    from skimage import data
    from skimage.transform import resize

    img = getattr(data, image)() if isinstance(image, str) else np.asarray(image)
    img = img.astype(np.float64)
    if img.max() > 1.0:
        img = img / 255.0
    if img.ndim == 2:
        img = img[:, :, None]
    h, w = shape
    img = resize(img, (h, w), anti_aliasing=True, mode="reflect")
    idx = np.arange(h * w).reshape(h, w)
    rows, cols, dc2, dp2 = [], [], [], []
    for dy, dx in ((0, 1), (1, 0), (1, 1), (1, -1)):
        y0, y1 = 0, h - dy
        x0, x1 = max(0, -dx), w - max(0, dx)
        a = idx[y0:y1, x0:x1]
        b = idx[y0 + dy:y1 + dy, x0 + dx:x1 + dx]
        diff = img[y0:y1, x0:x1] - img[y0 + dy:y1 + dy, x0 + dx:x1 + dx]
        rows.append(a.ravel())
        cols.append(b.ravel())
        dc2.append(np.sum(diff ** 2, axis=-1).ravel())
        dp2.append(np.full(a.size, float(dy * dy + dx * dx)))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    dc2, dp2 = np.concatenate(dc2), np.concatenate(dp2)
    sigma_c2 = float(dc2.mean())
    weights = np.exp(-dc2 / sigma_c2) * np.exp(-dp2 / sigma_p ** 2)
    return _symmetric(rows, cols, weights, h * w), sigma_c2


# ------------------------------------------------------------------ grids
def grid_graph(shape, weighted=False, seed=0):
    """2D or 3D grid mesh (4 or 6 neighbours).

    Parameters
    ----------
    shape : tuple of int
        Grid shape, 2 or 3 dimensions.
    weighted : bool, default=False
        Edge weights i.i.d. uniform in [0.1, 1] instead of 1.
    seed : int, default=0

    Returns
    -------
    W : scipy.sparse.csr_matrix

    Examples
    --------
    >>> grid_graph((3, 4)).nnz
    34
    """
    idx = np.arange(int(np.prod(shape))).reshape(shape)
    rows, cols = [], []
    for axis in range(len(shape)):
        a = np.take(idx, np.arange(shape[axis] - 1), axis=axis)
        b = np.take(idx, np.arange(1, shape[axis]), axis=axis)
        rows.append(a.ravel())
        cols.append(b.ravel())
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    if weighted:
        weights = np.random.default_rng(seed).uniform(0.1, 1.0, rows.shape[0])
    else:
        weights = np.ones(rows.shape[0])
    return _symmetric(rows, cols, weights, idx.size)


def random_geometric_graph(n, dim=2, degree=10.0, seed=0):
    """Unweighted random geometric graph in the unit square or cube.

    The radius gives an expected degree of ``degree`` away from the border
    (``pi r^2 n = degree`` in 2D, ``4/3 pi r^3 n = degree`` in 3D).

    Examples
    --------
    >>> W = random_geometric_graph(500, seed=0)
    >>> W.shape
    (500, 500)
    """
    from sklearn.neighbors import radius_neighbors_graph

    X = np.random.default_rng(seed).random((n, dim))
    if dim == 2:
        r = np.sqrt(degree / (np.pi * n))
    else:
        r = (3.0 * degree / (4.0 * np.pi * n)) ** (1.0 / 3.0)
    C = radius_neighbors_graph(X, r, mode="connectivity", include_self=False)
    return sp.csr_matrix(C.maximum(C.T), dtype=np.float64)


# ------------------------------------------------------------- planted
def planted_graph(sizes, groups, probs, avg_degree, seed=0):
    """Planted partition with a fixed expected degree and optional groups.

    ``round(n * avg_degree / 2)`` edges are drawn; each picks a uniform
    endpoint ``i`` and a partner: with probability ``probs[0]`` uniform in
    ``i``'s block, with probability ``probs[1]`` uniform in the other blocks
    of ``i``'s group, otherwise uniform outside ``i``'s group. Duplicates and
    loops are dropped (0/1 weights).

    Parameters
    ----------
    sizes : sequence of int
        Block sizes.
    groups : sequence of int
        Group of each block (blocks of one group are contiguous), or None
        (each block its own group).
    probs : tuple of float
        ``(p_block, p_group)``; ``p_group`` is ignored without groups.
    avg_degree : float
    seed : int, default=0

    Returns
    -------
    W : scipy.sparse.csr_matrix
    blocks : ndarray of shape (n,)
    group_of_node : ndarray of shape (n,)

    Examples
    --------
    >>> W, b, g = planted_graph([50, 100], None, (0.9, 0.0), 8, seed=0)
    >>> W.shape, int(b.max())
    ((150, 150), 1)
    """
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes, dtype=np.int64)
    K = sizes.shape[0]
    groups = np.arange(K) if groups is None else np.asarray(groups)
    p_block, p_group = probs[0], (probs[1] if len(probs) > 1 else 0.0)
    n = int(sizes.sum())
    bstart = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    gsize = np.bincount(groups, weights=sizes).astype(np.int64)
    gstart = np.concatenate([[0], np.cumsum(gsize)[:-1]])
    block_sorted = np.repeat(np.arange(K), sizes)
    perm = rng.permutation(n)
    m = int(round(n * avg_degree / 2.0))
    src = rng.integers(0, n, size=m)
    b = block_sorted[src]
    g = groups[b]
    u = rng.random(m)
    dst = np.empty(m, dtype=np.int64)
    inb = u < p_block
    ing = (~inb) & (u < p_block + p_group) & (gsize[g] > sizes[b])
    out = ~(inb | ing)
    bb = b[inb]
    dst[inb] = bstart[bb] + (rng.random(bb.shape[0]) * sizes[bb]).astype(np.int64)
    bg, gg = b[ing], g[ing]
    r = (rng.random(bg.shape[0]) * (gsize[gg] - sizes[bg])).astype(np.int64)
    r += gstart[gg]
    dst[ing] = r + np.where(r >= bstart[bg], sizes[bg], 0)
    go = g[out]
    r = (rng.random(go.shape[0]) * (n - gsize[go])).astype(np.int64)
    dst[out] = r + np.where(r >= gstart[go], gsize[go], 0)
    W = G._edges_to_csr(perm[src], perm[dst], n)
    blocks = np.empty(n, dtype=np.int64)
    blocks[perm] = block_sorted
    return W, blocks, groups[blocks]


def _unbalanced_sbm(n, K, ratio=10.0, p_in=0.75, avg_degree=15, seed=0):
    rel = ratio ** (np.arange(K) / (K - 1))
    sizes = np.floor(n * rel / rel.sum()).astype(np.int64)
    sizes[-1] += n - sizes.sum()
    W, blocks, _ = planted_graph(sizes, None, (p_in,), avg_degree, seed=seed)
    return W, K, blocks


def _hierarchical_sbm(n, K, avg_degree=20, seed=0):
    sizes = np.full(16, n // 16, dtype=np.int64)
    sizes[: n % 16] += 1
    W, blocks, grp = planted_graph(sizes, np.repeat(np.arange(4), 4),
                                   (0.6, 0.3), avg_degree, seed=seed)
    return W, K, (blocks if K == 16 else grp)


# ------------------------------------------------------------- networkx
def networkx_graph(name):
    """A small real network bundled with networkx, with its weights.

    Returns
    -------
    W : scipy.sparse.csr_matrix
    y : ndarray or None
        Karate: the club each member joined (Mr. Hi / Officer).

    Examples
    --------
    >>> W, y = networkx_graph("karate")
    >>> W.shape, int(y.sum())
    ((34, 34), 17)
    """
    import networkx as nx

    make = {"karate": nx.karate_club_graph, "lesmis": nx.les_miserables_graph,
            "florentine": nx.florentine_families_graph,
            "davis": nx.davis_southern_women_graph}[name]
    Gx = make()
    nodes = sorted(Gx.nodes(), key=str)
    W = nx.to_scipy_sparse_array(Gx, nodelist=nodes, weight="weight",
                                 dtype=np.float64)
    y = None
    if name == "karate":
        y = np.array([Gx.nodes[v]["club"] != "Mr. Hi" for v in nodes], dtype=np.int64)
    return sp.csr_matrix(W), y


# ------------------------------------------------------------ the specs
@dataclass(frozen=True)
class GraphSpec:
    """A benchmark graph, built on demand.

    ``maker()`` returns ``(W, K, y)``; :meth:`build` cleans it into a
    :class:`BenchGraph`. ``modes`` are the modes whose suite includes it.
    """

    name: str
    family: str
    maker: object = field(compare=False, repr=False)
    modes: tuple = ("full",)
    size: int = 0  # approximate number of nodes, before building

    def build(self):
        W, K, y = self.maker()
        W, y = clean_graph(W, y)
        return BenchGraph(self.name, self.family, W, int(K), y)


def _pixel(photo, shape, K):
    return pixel_graph(photo, shape)[0], K, None


def _grid(shape, weighted, K, seed=0):
    return grid_graph(shape, weighted, seed), K, None


def _rgg(n, dim, K, seed=0):
    return random_geometric_graph(n, dim, seed=seed), K, None


def _shape(kind, n, noise, seed=0):
    from sklearn.datasets import make_circles, make_moons

    if kind == "circles":
        X, y = make_circles(n_samples=n, noise=noise, factor=0.5, random_state=seed)
    else:
        X, y = make_moons(n_samples=n, noise=noise, random_state=seed)
    return G.knn_affinity(X, 15), 2, y


def _dataset(name, standardized):
    from sklearn import datasets
    from sklearn.preprocessing import StandardScaler

    X, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    X = X.astype(np.float64)
    if standardized:
        X = StandardScaler().fit_transform(X)
    return G.knn_affinity(X, 10), int(np.unique(y).shape[0]), y


def _lfr(n, mu, seed=0):
    W, y = G.lfr_graph(n, tau1=3.0, tau2=1.5, mu=mu, average_degree=15,
                       min_community=40, max_community=n // 10, seed=seed,
                       max_tries=20)
    return W, int(y.max()) + 1, y


def _realnet(name, K):
    W, y = networkx_graph(name)
    return W, K, (y if y is not None and K == int(y.max()) + 1 else None)


def _sbm(n, K, avg_degree, p_in, seed=0):
    W, y = G.sbm_graph(n, K, avg_degree=avg_degree, p_in_ratio=p_in, seed=seed)
    return W, K, y


def _knn_mix(n, K, seed=0):
    W, y = G.knn_graph_million(n=n, k=10, n_clusters=K, dim=3, seed=seed)
    return W, K, y


def _all_specs():
    S = []
    Q, F, SM = ("full", "quick"), ("full",), ("full", "quick", "smoke")

    def add(name, family, maker, modes=F, size=0):
        S.append(GraphSpec(name, family, maker, modes, size))

    # pixel graphs: 4 photos x 2 sizes x K in {4, 8, 16}, and K=8 at 200x300
    for shape in ((50, 75), (100, 150), (200, 300)):
        for photo in PHOTOS:
            for K in ((4, 8, 16) if shape[0] < 200 else (8,)):
                quick = shape == (50, 75) and K == 8
                add(f"pixel-{photo}-{shape[0]}x{shape[1]}-K{K}", "pixel",
                    partial(_pixel, photo, shape, K), Q if quick else F,
                    shape[0] * shape[1])
    add("pixel-coffee-12x18-K4", "pixel", partial(_pixel, "coffee", (12, 18), 4),
        ("smoke",), 216)
    # grids
    for side in (60, 120):
        for weighted in (False, True):
            for K in (4, 16):
                quick = side == 60 and weighted and K == 4
                add(f"grid2d-{side}x{side}{'-w' if weighted else ''}-K{K}", "grid",
                    partial(_grid, (side, side), weighted, K), Q if quick else F,
                    side * side)
    for side in (16, 25):
        for weighted in (False, True):
            quick = side == 16 and not weighted
            add(f"grid3d-{side}^3{'-w' if weighted else ''}-K8", "grid",
                partial(_grid, (side,) * 3, weighted, 8), Q if quick else F,
                side ** 3)
    add("grid2d-10x10-w-K3", "grid", partial(_grid, (10, 10), True, 3), ("smoke",), 100)
    # random geometric graphs
    for n in (2000, 10000):
        for K in (8, 16):
            add(f"rgg2d-{n}-K{K}", "rgg", partial(_rgg, n, 2, K),
                Q if (n == 2000 and K == 8) else F, n)
    add("rgg3d-10000-K8", "rgg", partial(_rgg, 10000, 3, 8), F, 10000)
    # circles and moons, kNN k=15
    for kind, noises in (("circles", (0.05, 0.1)), ("moons", (0.1, 0.2))):
        for n in (1000, 5000):
            for noise in noises:
                quick = n == 1000 and noise == noises[-1 if kind == "circles" else 0]
                add(f"{kind}-{n}-noise{noise}", "shapes",
                    partial(_shape, kind, n, noise), Q if quick else F, n)
    # scikit-learn datasets, raw and standardized, kNN k=10
    for name in ("iris", "wine", "breast_cancer", "digits"):
        for std in (False, True):
            quick = name in ("digits", "wine") and (std or name == "digits")
            add(f"{name}-{'std' if std else 'raw'}", "datasets",
                partial(_dataset, name, std), Q if quick else F,
                {"iris": 150, "wine": 178, "breast_cancer": 569}.get(name, 1797))
    add("iris-std", "datasets", partial(_dataset, "iris", True), ("smoke",), 150)
    # LFR
    for n, mus in ((2000, (0.1, 0.2, 0.3, 0.4, 0.5)), (10000, (0.1, 0.3, 0.5))):
        for mu in mus:
            add(f"lfr-{n}-mu{mu}", "lfr", partial(_lfr, n, mu),
                Q if (n == 2000 and mu in (0.3, 0.5)) else F, n)
    # unbalanced and hierarchical SBMs
    for n in (5000, 20000):
        add(f"sbm-unbalanced-{n}-K5", "sbm", partial(_unbalanced_sbm, n, 5),
            Q if n == 5000 else F, n)
        add(f"sbm-unbalanced-{n}-K10", "sbm", partial(_unbalanced_sbm, n, 10), F, n)
        for K in (16, 4):
            add(f"sbm-hier-{n}-K{K}", "sbm", partial(_hierarchical_sbm, n, K),
                Q if (n == 5000 and K == 4) else F, n)
    # small real networks
    for name, Ks in (("karate", (2, 4)), ("lesmis", (4, 8)),
                     ("florentine", (2, 3)), ("davis", (2, 4))):
        for K in Ks:
            modes = SM if (name == "karate" and K == 2) else (
                Q if (name == "lesmis" and K == 4) else F)
            add(f"{name}-K{K}", "realnet", partial(_realnet, name, K), modes,
                {"karate": 34, "lesmis": 77, "florentine": 15, "davis": 32}[name])
    # scale
    add("scale-sbm-100000-K20", "scale", partial(_sbm, 100_000, 20, 10.0, 0.8), Q,
        100_000)
    add("scale-knn-mix-100000-K20", "scale", partial(_knn_mix, 100_000, 20), F, 100_000)
    add("scale-grid3d-47^3-w-K16", "scale", partial(_grid, (47,) * 3, True, 16), F,
        47 ** 3)
    add("scale-rgg2d-100000-K20", "scale", partial(_rgg, 100_000, 2, 20), F, 100_000)
    add("scale-sbm-1000000-K20", "scale", partial(_sbm, 1_000_000, 20, 10.0, 0.8), F,
        1_000_000)
    return S


def graph_specs(mode="full", families=None, pattern=None):
    """The graphs of a mode, optionally filtered.

    Parameters
    ----------
    mode : {"full", "quick", "smoke"}, default="full"
    families : iterable of str, default=None
        Keep these families (None: all).
    pattern : str, default=None
        Keep names matching this regular expression (``re.search``).

    Returns
    -------
    specs : list of GraphSpec

    Examples
    --------
    >>> [s.name for s in graph_specs("smoke", families=["realnet"])]
    ['karate-K2']
    """
    if mode not in ("full", "quick", "smoke"):
        raise ValueError(f"mode must be 'full', 'quick' or 'smoke', got {mode!r}.")
    if families is not None:
        unknown = set(families) - set(FAMILIES)
        if unknown:
            raise ValueError(f"unknown families {sorted(unknown)}; known: {FAMILIES}.")
    specs = [s for s in _all_specs() if mode in s.modes]
    if families is not None:
        specs = [s for s in specs if s.family in set(families)]
    if pattern:
        rx = re.compile(pattern)
        specs = [s for s in specs if rx.search(s.name)]
    return specs
