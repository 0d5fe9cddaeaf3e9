"""Initialization strategies for the Falcon solver.

Falcon is a local method: the labels it starts from decide the NCut it
reaches.  The strategies here return label vectors in which every one of the
``n_clusters`` clusters is non-empty.

``"multilevel"`` (the default) is Graclus-like:

1. **Coarsen**: every node points at its heaviest neighbour by
   ``W_ij / (d_i d_j)``; the connected components of that forest become the
   nodes of the next level, ``W_c = P' W P`` (self-loops keep the internal
   weight, so ``f`` of a projected labelling is preserved exactly).  Repeat
   until about ``4 K`` nodes remain or coarsening stalls.
2. **Solve a coarse graph** with Falcon plus exact local moves from many
   random starts.  A spectral labelling of the finest level on which an
   eigensolve is cheap (at most ``spectral_max_nnz`` stored entries: the
   input graph itself for small sparse graphs, a coarse level for dense
   token graphs) is one more start: a safety net, not the method.
3. **Project and refine** level by level with the same solver.

Several coarsening depths are tried because no depth wins everywhere; the
candidates are refined on the finest level by the caller and the best ``f``
is kept.
"""

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh, qr, svd

from . import _kernels_numba as nk
from ._backend import NumbaProblem
from ._solver import solve


def random_labels(n, n_clusters, rng):
    """Uniform random labels in which every cluster has at least one node."""
    labels = rng.integers(n_clusters, size=n)
    labels[rng.permutation(n)[:n_clusters]] = np.arange(n_clusters)
    return labels.astype(np.int64)


def fill_empty(labels, n_clusters, rng):
    """Give every empty cluster one node taken from the largest clusters."""
    labels = np.array(labels, dtype=np.int64, copy=True)
    counts = np.bincount(labels, minlength=n_clusters)
    for k in np.flatnonzero(counts == 0):
        big = int(np.argmax(counts))
        members = np.flatnonzero(labels == big)
        i = members[rng.integers(members.size)]
        labels[i] = k
        counts[big] -= 1
        counts[k] += 1
    return labels


def _n_entries(W):
    """Stored entries of a graph: ``nnz`` (sparse) or ``n**2`` (dense)."""
    return W.nnz if sp.issparse(W) else W.size


def _heaviest_neighbor(W, degrees):
    if sp.issparse(W):
        return nk.heaviest_neighbor_csr(W.indptr, W.indices, W.data, degrees)
    return nk.heaviest_neighbor_dense(W, degrees)


def coarsen(W, degrees):
    """One coarsening level.

    Returns
    -------
    W_c : CSR matrix or ndarray
        ``P' W P`` (dense stays dense).
    d_c : ndarray
        Coarse degrees ``P' d``.
    mapping : ndarray of shape (n,)
        Coarse node of each fine node.
    """
    n_comp, mapping = nk.forest_components(_heaviest_neighbor(W, degrees))
    if sp.issparse(W):
        indptr, indices, data = nk.coarsen_csr(W.indptr, W.indices, W.data, mapping,
                                               n_comp)
        if indices.shape[0] < np.iinfo(np.int32).max:
            indptr, indices = indptr.astype(np.int32), indices.astype(np.int32)
        Wc = sp.csr_matrix((data, indices, indptr), shape=(n_comp, n_comp))
    else:
        Wc = nk.coarsen_dense(W, mapping, n_comp)
    dc = np.bincount(mapping, weights=degrees, minlength=n_comp)
    return Wc, dc, mapping


class Hierarchy:
    """Coarsening hierarchy of one graph.

    ``graphs[0]`` is the input graph; ``maps[l]`` maps the nodes of level
    ``l`` to those of level ``l + 1``.
    """

    def __init__(self, W, degrees, n_clusters, *, min_size=None, max_levels=40):
        self.n_clusters = n_clusters
        min_size = max(4 * n_clusters, n_clusters + 1) if min_size is None else min_size
        self.graphs = [(W, degrees)]
        self.maps = []
        while len(self.maps) < max_levels:
            Wl, dl = self.graphs[-1]
            n = Wl.shape[0]
            if n <= min_size:
                break
            Wc, dc, mapping = coarsen(Wl, dl)
            nc = Wc.shape[0]
            if nc < n_clusters or nc > 0.95 * n:
                break
            self.graphs.append((Wc, dc))
            self.maps.append(mapping)

    @property
    def sizes(self):
        return [g[0].shape[0] for g in self.graphs]

    def project(self, labels, level, to_level=0):
        """Labels of ``level`` expressed on ``to_level``."""
        for lv in range(level - 1, to_level - 1, -1):
            labels = labels[self.maps[lv]]
        return labels


def cluster_qr(vectors):
    """Discretize a spectral embedding by column-pivoted QR (Damle et al.)."""
    k = vectors.shape[1]
    _, _, piv = qr(vectors.T, pivoting=True)
    ut, _, v = svd(vectors[piv[:k], :].T)
    return np.abs(vectors @ (ut @ v.conj())).argmax(axis=1)


def spectral_labels(W, degrees, n_clusters, rng):
    """Spectral labelling of a small graph by dense eigendecomposition."""
    Wd = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    inv = np.zeros_like(degrees)
    inv[degrees > 0] = 1.0 / np.sqrt(degrees[degrees > 0])
    M = inv[:, None] * Wd * inv[None, :]
    n = M.shape[0]
    _, vec = eigh(M, subset_by_index=[n - n_clusters, n - 1])
    vec = vec * inv[:, None]
    labels = cluster_qr(vec)
    return fill_empty(labels, n_clusters, rng)


def _solver_kwargs(solver_params):
    params = dict(solver_params or {})
    params.setdefault("max_iter", 100)
    params.setdefault("verbose", 0)
    params["verbose"] = max(0, int(params["verbose"]) - 1)
    return params


def _refine(W, degrees, labels, n_clusters, solver_params):
    res = solve(NumbaProblem(W, n_clusters, degrees), labels, **solver_params)
    return res.labels[0], float(res.objective[0])


def multilevel_candidates(
    W,
    degrees,
    n_clusters,
    rng,
    *,
    n_starts=10,
    depths=(None, 16),
    spectral=True,
    spectral_max_nnz=100_000,
    solver_params=None,
    hierarchy=None,
):
    """Candidate labelings of the finest graph from a multilevel scheme.

    Parameters
    ----------
    W : CSR matrix or ndarray
        Affinity of the finest graph (no isolated nodes).
    degrees : ndarray
    n_clusters : int
    rng : numpy Generator
    n_starts : int
        Random starts on the coarsest graph of each depth.
    depths : tuple
        Coarsest sizes to start from, as multiples of ``n_clusters``
        (``None``: the coarsest level of the hierarchy).
    spectral : bool
        Also start from a spectral labelling of the finest level whose graph
        has at most ``spectral_max_nnz`` stored entries (a cheap eigensolve
        there).
    spectral_max_nnz : int
        Largest graph (in stored entries: ``nnz`` for sparse, ``n**2`` for
        dense) on which the spectral start is computed.  An eigensolve costs
        about ``nnz`` per iteration, so this bounds its cost; a dense token
        graph gets its spectral start on a coarse level.
    solver_params : dict
        Parameters of :func:`sklearn_falcon._solver.solve` used for the
        refinement on the coarse levels.
    hierarchy : Hierarchy, default=None
        Reuse a hierarchy built earlier (it is deterministic).

    Returns
    -------
    candidates : list of ndarray
        Label vectors projected to the finest level (the caller refines them
        there): the best by ``f`` on level 1 of the starts made on coarse
        levels, then one per start made on the finest level.
    hierarchy : Hierarchy
    """
    params = _solver_kwargs(solver_params)
    H = hierarchy if hierarchy is not None else Hierarchy(W, degrees, n_clusters)
    sizes = H.sizes
    starts = []
    for depth in depths:
        if depth is None:
            level = len(sizes) - 1
        else:
            # the coarsest level still holding at least depth * K nodes
            ok = [lv for lv, s in enumerate(sizes) if s >= depth * n_clusters]
            level = ok[-1] if ok else 0
        if (level, "random") not in starts and sizes[level] <= 50_000:
            starts.append((level, "random"))
    if spectral:
        # the finest level on which an eigensolve is cheap; from a coarse
        # level the start is refined down the hierarchy like the random ones
        nnz = [_n_entries(g[0]) for g in H.graphs]
        level = next((lv for lv, z in enumerate(nnz) if z <= spectral_max_nnz), None)
        if level is not None:
            starts.append((level, "spectral"))
    candidates = []
    for level, kind in starts:
        Wl, dl = H.graphs[level]
        n_l = Wl.shape[0]
        if kind == "spectral":
            tries = [spectral_embedding_labels(Wl, dl, n_clusters, rng)]
        else:
            # restarts cost O(nnz) each: fewer of them on the larger levels
            n_try = max(4, min(n_starts, (n_starts * 200) // max(n_l, 1)))
            tries = [random_labels(n_l, n_clusters, rng) for _ in range(n_try)]
        best, best_f = None, -np.inf
        for y in tries:
            y, f = _refine(Wl, dl, y, n_clusters, params)
            if f > best_f:
                best, best_f = y, f
        labels, f = best, best_f
        for lv in range(level - 1, 0, -1):
            labels = labels[H.maps[lv]]
            Wf, df = H.graphs[lv]
            labels, f = _refine(Wf, df, labels, n_clusters, params)
        candidates.append((level, f, labels))
    if not candidates:  # the graph did not coarsen and is too large to restart
        return [random_labels(W.shape[0], n_clusters, rng)], H
    # f is preserved exactly by projection, so the candidates refined down to
    # level 1 compare fairly there: only the best of them goes on to the
    # finest level, with those that started there
    coarse = [c for c in candidates if c[0] > 0]
    candidates = [c for c in candidates if c[0] == 0]
    if coarse:
        candidates.insert(0, max(coarse, key=lambda c: c[1]))
    return [c[2][H.maps[0]] if c[0] > 0 else c[2] for c in candidates], H


def kmeans_labels(X, n_clusters, rng):
    """k-means++ labels of feature vectors (one k-means run)."""
    from sklearn.cluster import KMeans

    seed = int(rng.integers(np.iinfo(np.int32).max))
    km = KMeans(n_clusters=n_clusters, n_init=1, random_state=seed).fit(X)
    return fill_empty(km.labels_, n_clusters, rng)


def _lloyd(emb, labels, n_clusters, n_iter=30):
    """Plain k-means (Lloyd) iterations from ``labels``."""
    for _ in range(n_iter):
        centers = np.zeros((n_clusters, emb.shape[1]))
        np.add.at(centers, labels, emb)
        counts = np.bincount(labels, minlength=n_clusters)
        centers /= np.maximum(counts, 1)[:, None]
        dist = (centers**2).sum(1)[None, :] - 2.0 * emb @ centers.T
        new = dist.argmin(axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def _kmeans_pp(emb, n_clusters, rng):
    """k-means++ seeding; returns the labels of the nearest seed."""
    n = emb.shape[0]
    seeds = [int(rng.integers(n))]
    d2 = ((emb - emb[seeds[0]]) ** 2).sum(1)
    for _ in range(n_clusters - 1):
        total = d2.sum()
        i = int(rng.choice(n, p=d2 / total)) if total > 0 else int(rng.integers(n))
        seeds.append(i)
        d2 = np.minimum(d2, ((emb - emb[i]) ** 2).sum(1))
    C = emb[seeds]
    return ((C**2).sum(1)[None, :] - 2.0 * emb @ C.T).argmin(axis=1)


def _association(W, degrees, labels, n_clusters):
    P = NumbaProblem(W, n_clusters, degrees)
    X = P.from_labels(labels)
    return float(P.objective(*P.stats(P.weights(X), X))[0])


def spectral_embedding_labels(W, degrees, n_clusters, rng, n_restarts=3):
    """Spectral labels: the K leading eigenvectors of ``D^-1/2 W D^-1/2``
    (dense ``eigh`` for tiny graphs, ARPACK ``eigsh`` otherwise), discretized
    on the row-normalized embedding by k-means started from cluster-QR and
    from ``n_restarts`` k-means++ seedings; the labelling of highest ``f`` on
    ``W`` is kept (cluster-QR alone can be far off on overlapping clusters).
    """
    n = W.shape[0]
    if n <= 100 or n_clusters >= n // 2:
        return spectral_labels(W, degrees, n_clusters, rng)
    from scipy.sparse.linalg import eigsh

    inv = 1.0 / np.sqrt(degrees)
    if sp.issparse(W):
        M = sp.diags(inv) @ W.astype(np.float64) @ sp.diags(inv)
    else:
        M = inv[:, None] * np.asarray(W, dtype=np.float64) * inv[None, :]
    v0 = rng.uniform(-1, 1, n)
    # a loose tolerance (1e-3) gave a different partition for each v0 on
    # nearly degenerate spectra (kNN mixtures); 1e-6 is stable
    _, vec = eigsh(M, k=n_clusters, which="LA", v0=v0, tol=1e-6)
    emb = vec * inv[:, None]
    tries = [cluster_qr(emb)]
    emb /= np.linalg.norm(emb, axis=1, keepdims=True) + 1e-300
    tries += [_kmeans_pp(emb, n_clusters, rng) for _ in range(n_restarts)]
    tries = [fill_empty(_lloyd(emb, y, n_clusters), n_clusters, rng) for y in tries]
    return max(tries, key=lambda y: _association(W, degrees, y, n_clusters))
