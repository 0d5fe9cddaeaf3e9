"""Starting partitions of the coarsest graph of the multilevel scheme.

The coarsest graph has a few dozen nodes per cluster, so anything is cheap
there, and no single kind of start wins on every family of graphs
(measured on the benchmark suite of ``benchmarks/bench_peers.py``):

* **random** labels: a spread of local optima;
* **region growing**: graph Voronoi cells of ``K`` seeds spread out by
  k-means++ on shortest-path distances (edge length ``1 / (W_ij /
  sqrt(d_i d_j))``): compact regions, what meshes and pixel graphs want;
* **spectral**: the relaxed K-way solution (an eigensolve of the small
  coarsest graph);
* **recursive bisection**: the cluster whose best bisection raises ``f``
  most is split, ``K - 1`` times (Shi and Malik's recursive 2-way cut, on
  the coarsest graph): it isolates small, weakly attached regions that no
  K-way start finds.

Each start is refined by the solver and the caller keeps the best by ``f``.
"""

import numpy as np
import scipy.sparse as sp

from .._jit import jit as _jit
from .._stats import cluster_statistics, objective_of
from ._moves import best_bisection, subgraph
from ._simple import fill_empty, random_labels
from ._spectral import spectral_embedding_labels

__all__ = ["coarse_starts", "dijkstra_csr", "recursive_bisection", "region_growing"]


@_jit
def dijkstra_csr(indptr, indices, lengths, sources, bound):
    """Shortest-path distances from the nearest of ``sources`` (a binary heap
    with lazy deletion), and the index in ``sources`` of that nearest source
    (-1 where none reaches).

    ``bound`` (not modified) holds distances already known, e.g. from other
    sources (``inf``: none): only the nodes the new ``sources`` bring closer
    are visited, and ``dist`` is ``minimum(bound, distances from sources)``
    exactly (where a source brings a node no closer, no shorter path goes
    through that node: ``bound`` obeys the triangle inequality of a
    finished Dijkstra, in floating point too); ``owner`` is -1 where
    ``bound`` holds."""
    n = indptr.shape[0] - 1
    dist = bound.copy()
    owner = np.full(n, -1, dtype=np.int64)
    cap = indices.shape[0] + sources.shape[0] + 1
    hk = np.empty(cap, dtype=np.float64)
    hv = np.empty(cap, dtype=np.int64)
    size = 0
    for s_i in range(sources.shape[0]):
        s = sources[s_i]
        if dist[s] > 0.0:
            dist[s] = 0.0
            owner[s] = s_i
            hk[size] = 0.0
            hv[size] = s
            size += 1
    # the sources, all of key 0, already form a heap
    while size > 0:
        key = hk[0]
        u = hv[0]
        size -= 1
        hk[0] = hk[size]
        hv[0] = hv[size]
        p = 0
        while True:  # sift down
            c = 2 * p + 1
            if c >= size:
                break
            if c + 1 < size and hk[c + 1] < hk[c]:
                c += 1
            if hk[c] >= hk[p]:
                break
            hk[p], hk[c] = hk[c], hk[p]
            hv[p], hv[c] = hv[c], hv[p]
            p = c
        if key > dist[u]:
            continue
        for q in range(indptr[u], indptr[u + 1]):
            v = indices[q]
            nd = key + lengths[q]
            if nd < dist[v]:
                dist[v] = nd
                owner[v] = owner[u]
                c = size  # sift up
                hk[c] = nd
                hv[c] = v
                size += 1
                while c > 0:
                    p = (c - 1) // 2
                    if hk[p] <= hk[c]:
                        break
                    hk[p], hk[c] = hk[c], hk[p]
                    hv[p], hv[c] = hv[c], hv[p]
                    c = p
    return dist, owner


def _lengths(W, degrees):
    """The graph with edge lengths ``sqrt(d_i d_j) / W_ij`` (self-loops
    dropped), as CSR."""
    C = sp.csr_matrix(W, dtype=np.float64).tocoo()
    # (not setdiag(0): SciPy < 1.11 warns that it changes a CSR's structure
    # where the diagonal is not stored)
    keep = (C.row != C.col) & (C.data != 0)
    row, col, data = C.row[keep], C.col[keep], C.data[keep]
    s = np.sqrt(degrees)
    with np.errstate(over="ignore"):  # an affinity of 1e-320: infinitely far
        length = s[row] * s[col] / data
    return sp.csr_matrix((length, (row, col)), shape=C.shape)


def region_growing(W, degrees, n_clusters, rng, lengths=None):
    """Graph Voronoi cells of ``n_clusters`` seeds chosen by k-means++ on
    shortest-path distances.

    Nodes no seed reaches (another connected component) are labelled
    randomly.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._inits._coarsest import region_growing
    >>> W = np.kron(np.eye(2), np.ones((3, 3))) + 0.01
    >>> y = region_growing(W, W.sum(1), 2, np.random.default_rng(0))
    >>> len(set(y[:3].tolist())), len(set(y[3:].tolist())), len(set(y.tolist()))
    (1, 1, 2)
    """
    n = W.shape[0]
    L = _lengths(W, degrees) if lengths is None else lengths
    ptr, ind, length = L.indptr, L.indices, L.data

    def dist_from(seeds, bound):
        return dijkstra_csr(ptr, ind, length, np.asarray(seeds, dtype=np.int64),
                            bound)

    unknown = np.full(n, np.inf)
    seeds = [int(rng.integers(n))]
    dist = dist_from(seeds, unknown)[0]
    for _ in range(n_clusters - 1):
        finite = np.isfinite(dist)
        far = dist[finite].max() if finite.any() else 1.0
        with np.errstate(over="ignore"):
            p = np.where(finite, dist, 2.0 * far + 1.0) ** 2
        p[seeds] = 0.0
        total = p.sum()
        if not np.isfinite(total):
            # lengths near the float range (affinities of 1e-300): the
            # squares overflow; the same draw, in units of the farthest
            p = np.where(finite, dist / far, 2.0) ** 2
            p[seeds] = 0.0
            total = p.sum()
        s = int(rng.choice(n, p=p / total)) if total > 0 else int(rng.integers(n))
        seeds.append(s)
        # minimum(dist, distances from s), visiting only the nodes s is
        # closer to: the K searches cost about one, not K
        dist = dist_from([s], dist)[0]
    labels = dist_from(seeds, unknown)[1]
    lost = labels < 0
    labels[lost] = rng.integers(n_clusters, size=int(lost.sum()))
    return labels


def recursive_bisection(W, degrees, n_clusters, rng, options=None):
    """``n_clusters - 1`` splits, each of the cluster whose best bisection
    (:func:`~._moves.best_bisection`) raises ``f`` most.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._inits._coarsest import recursive_bisection
    >>> W = np.kron(np.eye(3), np.ones((4, 4)))
    >>> y = recursive_bisection(W, W.sum(1), 3, np.random.default_rng(0))
    >>> [sorted(set(y[i:i + 4].tolist())) for i in (0, 4, 8)], len(set(y.tolist()))
    ([[1], [2], [0]], 3)
    """
    n = W.shape[0]
    labels = np.zeros(n, dtype=np.int64)
    gains = {}
    for k in range(1, n_clusters):
        for c in range(k):
            if c not in gains:
                idx = np.flatnonzero(labels == c)
                S = subgraph(W, idx)
                val, mask = best_bisection(S, degrees[idx], rng, options)
                f_c = objective_of(*cluster_statistics(S, np.zeros(idx.size, np.int64),
                                                       1, degrees[idx]))
                gains[c] = (val - f_c, idx, mask)
        c = max((c for c in gains if gains[c][2] is not None),
                key=lambda c: gains[c][0], default=None)
        if c is None:
            break
        _, idx, mask = gains.pop(c)
        labels[idx[mask]] = k
    return fill_empty(labels, n_clusters, rng)


def coarse_starts(W, degrees, n_clusters, rng, *, n_random=8, n_grow=8,
                  spectral=True, bisection=True, options=None):
    """The starting labellings of the coarsest graph, in a fixed order:
    random, region growing, spectral, recursive bisection."""
    starts = [random_labels(W.shape[0], n_clusters, rng) for _ in range(n_random)]
    if n_grow:
        L = _lengths(W, degrees)
        starts += [fill_empty(region_growing(W, degrees, n_clusters, rng, L),
                              n_clusters, rng) for _ in range(n_grow)]
    if spectral:
        starts.append(spectral_embedding_labels(W, degrees, n_clusters, rng))
    if bisection:
        starts.append(recursive_bisection(W, degrees, n_clusters, rng, options))
    return starts
