"""Coarsening of a graph for the multilevel initialization (Numba kernels
and their driver).

One level is a **randomized matching**: the nodes are visited in a random
order, and each unmatched node is paired with its unmatched neighbour of
largest normalized weight ``W_ij / (d_i d_j)`` (Graclus' criterion: it
favours pairs that weigh much for both ends, not hubs).  An edge is
contracted only when it is within a factor ``alpha`` of the heaviest edge at
*both* of its ends: a small, weakly attached group of nodes (a speck of
colour in a pixel graph, the two rings of noisy circles) is never glued to
its surroundings, so it survives as one coarse node, where a move of the
solver can isolate it.  Nodes left unmatched are then paired two hops away,
when they share their heaviest neighbour (METIS' two-hop matching: leaves of
a hub).  A level halves the graph at best; the coarse graph is
``W_c = P' W P`` (self-loops keep the internal weight, so ``f`` of a
projected labelling is preserved exactly), contracted by :mod:`._contract`.

``part`` restricts the matching to pairs with the same label: the
coarsening of a V-cycle, whose every level represents the current
partition.

On a random graph a matching keeps most entries (every pair of matched
nodes has its own neighbours), so a level costs about what the level below
it did.  There a level can be a **label propagation clustering** instead
(:func:`cluster_csr`, the coarsening of KaMinPar): each node joins the
neighbouring cluster it is most heavily connected to, under a cap on the
cluster's volume, which shrinks a level several times at once.
"""

import numpy as np
import scipy.sparse as sp

from .._jit import jit as _jit
from ._contract import contract

__all__ = ["cluster_csr", "cluster_map", "coarsen", "match_csr", "match_dense"]

LP_ROUNDS = 2  # rounds of label propagation of a clustering level
LP_BLOCK = 4096  # its visiting order: blocks of this many consecutive nodes


@_jit(inline=True)
def _number_pairs(match):
    """Coarse node of each node from the pairs in ``match`` (-1: single),
    numbered in the order of their smallest node."""
    n = match.shape[0]
    mapping = np.full(n, -1, dtype=np.int64)
    n_coarse = 0
    for u in range(n):
        if mapping[u] < 0:
            mapping[u] = n_coarse
            if match[u] >= 0:
                mapping[match[u]] = n_coarse
            n_coarse += 1
    return n_coarse, mapping


@_jit(inline=True)
def _pair_two_hops(match, heavy, order):
    """Pair the unmatched nodes that share their heaviest neighbour
    (``heavy``, -1: none), in visiting order."""
    pending = np.full(match.shape[0], -1, dtype=np.int64)
    for u in order:
        h = heavy[u]
        if match[u] >= 0 or h < 0:
            continue
        v = pending[h]
        if v >= 0:
            match[u] = v
            match[v] = u
            pending[h] = -1
        else:
            pending[h] = u


@_jit(inline=True)
def _has_parts(part):
    """Whether ``part`` holds more than one value: otherwise every pair of
    nodes shares its part, and the kernels skip the check (a gather per
    entry)."""
    split = False
    for u in range(1, part.shape[0]):
        if part[u] != part[0]:
            split = True
            break
    return split


@_jit(inline=True)
def _top_of_row(u, cols, vals, q0, q1, inv, part, split):
    """Largest ``W_uj / d_j`` over the neighbours ``j != u`` of the same part
    (the row of ``u``: ``cols[q0:q1]``, ``vals[q0:q1]``; ``split``: whether
    the nodes have more than one part)."""
    t = 0.0
    for q in range(q0, q1):
        j = cols[q]
        if j != u and not (split and part[j] != part[u]):
            s = np.float64(vals[q]) * inv[j]
            if s > t:
                t = s
    return t


@_jit(inline=True)
def _match_row(u, cols, vals, q0, q1, inv, part, split, alpha, top, match, heavy):
    """Visit node ``u`` (its row: neighbours ``cols[q0:q1]``, weights
    ``vals[q0:q1]``): pair it with its best eligible unmatched neighbour, and
    note its heaviest eligible neighbour for the two-hop pairing."""
    best = 0.0
    best_j = -1
    for q in range(q0, q1):
        j = cols[q]
        w = np.float64(vals[q])
        if j == u or w <= 0.0 or (split and part[j] != part[u]):
            continue
        s = w * inv[j]
        if s < alpha * top[u] or w * inv[u] < alpha * top[j]:
            continue
        if s == top[u]:
            heavy[u] = j
        if match[j] < 0 and s > best:
            best = s
            best_j = j
    if best_j >= 0:
        match[u] = best_j
        match[best_j] = u


@_jit
def match_csr(indptr, indices, data, degrees, order, part, alpha):
    """Randomized normalized heavy-edge matching of a CSR graph.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the symmetric ``W``.
    degrees : float64 array of shape (n,)
        Positive degrees.
    order : int64 array of shape (n,)
        The visiting order (a permutation).
    part : int64 array of shape (n,)
        Only nodes with the same ``part`` are paired.
    alpha : float
        An edge is contracted only when its ``W_ij / d_j`` is at least
        ``alpha`` times the largest of node ``i`` and its ``W_ij / d_i`` at
        least ``alpha`` times the largest of node ``j``.

    Returns
    -------
    n_coarse : int
    mapping : int64 array of shape (n,)
        Coarse node of each node.
    """
    n = indptr.shape[0] - 1
    split = _has_parts(part)
    inv = np.empty(n, dtype=np.float64)
    for u in range(n):
        inv[u] = 1.0 / degrees[u]
    top = np.empty(n, dtype=np.float64)
    for u in range(n):
        top[u] = _top_of_row(u, indices, data, indptr[u], indptr[u + 1], inv, part,
                             split)
    match = np.full(n, -1, dtype=np.int64)
    heavy = np.full(n, -1, dtype=np.int64)
    for u in order:
        if match[u] < 0:
            _match_row(u, indices, data, indptr[u], indptr[u + 1], inv, part, split,
                       alpha, top, match, heavy)
    _pair_two_hops(match, heavy, order)
    return _number_pairs(match)


@_jit
def cluster_csr(indptr, indices, data, degrees, order, part, max_vol, rounds):
    """Size-constrained label propagation of a CSR graph (the clustering
    coarsening of KaMinPar and Mt-KaHyPar).

    Every node starts alone.  In each round the nodes are visited in
    ``order``, and a node joins the neighbouring cluster it is most heavily
    connected to (by the sum of its edge weights there), when that is more
    than its weight to its own cluster and the cluster's volume stays at
    most ``max_vol``.  Rounds stop when no node moves.

    Parameters
    ----------
    indptr, indices, data : CSR arrays of the symmetric ``W``.
    degrees : float64 array of shape (n,)
    order : int64 array of shape (n,)
        The visiting order (a permutation).
    part : int64 array of shape (n,)
        Only nodes with the same ``part`` share a cluster.
    max_vol : float
        Largest volume of a cluster (a node heavier than it stays alone).
    rounds : int
        At most this many rounds.

    Returns
    -------
    n_coarse : int
    mapping : int64 array of shape (n,)
        Cluster of each node, numbered in order of first appearance.
    """
    n = indptr.shape[0] - 1
    split = _has_parts(part)
    cl = np.empty(n, dtype=indices.dtype)  # node numbers fit the indices' type
    for u in range(n):
        cl[u] = u
    cvol = degrees.copy()
    rating = np.zeros(n, dtype=np.float64)
    stamp = np.full(n, -1, dtype=np.int64)
    touched = np.empty(n, dtype=indices.dtype)
    visit = 0
    for _ in range(rounds):
        moved = 0
        for u in order:
            cu = cl[u]
            pu = part[u]
            nt = 0
            for q in range(indptr[u], indptr[u + 1]):
                v = indices[q]
                if v == u or (split and part[v] != pu):
                    continue
                c = cl[v]
                if stamp[c] != visit:
                    stamp[c] = visit
                    rating[c] = 0.0
                    touched[nt] = c
                    nt += 1
                rating[c] += data[q]
            best = cu
            best_w = rating[cu] if stamp[cu] == visit else 0.0
            du = degrees[u]
            for t in range(nt):
                c = touched[t]
                if c != cu and rating[c] > best_w and cvol[c] + du <= max_vol:
                    best = c
                    best_w = rating[c]
            visit += 1
            if best != cu:
                cvol[cu] -= du
                cvol[best] += du
                cl[u] = best
                moved += 1
        if moved == 0:
            break
    ids = np.full(n, -1, dtype=np.int64)
    mapping = np.empty(n, dtype=np.int64)
    n_coarse = 0
    for u in range(n):
        c = cl[u]
        if ids[c] < 0:
            ids[c] = n_coarse
            n_coarse += 1
        mapping[u] = ids[c]
    return n_coarse, mapping


@_jit
def match_dense(W, degrees, order, part, alpha):
    """Dense twin of :func:`match_csr` (zero entries are not edges): the same
    visits, on rows that hold every node."""
    n = W.shape[0]
    split = _has_parts(part)
    inv = 1.0 / degrees
    cols = np.arange(n)
    top = np.empty(n, dtype=np.float64)
    for u in range(n):
        top[u] = _top_of_row(u, cols, W[u], 0, n, inv, part, split)
    match = np.full(n, -1, dtype=np.int64)
    heavy = np.full(n, -1, dtype=np.int64)
    for u in order:
        if match[u] < 0:
            _match_row(u, cols, W[u], 0, n, inv, part, split, alpha, top, match, heavy)
    _pair_two_hops(match, heavy, order)
    return _number_pairs(match)


def coarsen(W, degrees, rng, *, part=None, alpha=0.1, shrink=None, min_nodes=1):
    """One coarsening level: a randomized matching (or, with ``shrink``, a
    label propagation clustering), then ``P' W P``.

    Parameters
    ----------
    W : CSR matrix or ndarray of shape (n, n)
        Symmetric nonnegative affinity with positive degrees.
    degrees : ndarray of shape (n,)
    rng : numpy.random.Generator
        Draws the visiting order of the matching.
    part : ndarray of shape (n,), default=None
        Labels that the matching must respect (None: any pair).
    alpha : float, default=0.1
        Contraction guard of :func:`match_csr`.
    shrink : float, default=None
        A sparse ``W`` is clustered by :func:`cluster_csr` instead, each
        cluster's volume at most ``shrink`` times the mean degree (at least
        ``n / shrink`` clusters), in ``LP_ROUNDS`` rounds.
    min_nodes : int, default=1
        With ``shrink``: at most ``n / min_nodes`` times the mean degree per
        cluster, so that about ``min_nodes`` clusters are left at least.

    Returns
    -------
    W_c : CSR matrix or ndarray
        ``P' W P`` (dense stays dense).
    d_c : ndarray
        Coarse degrees ``P' d``.
    mapping : ndarray of shape (n,)
        Coarse node of each fine node.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._inits._coarsen import coarsen
    >>> W = np.kron(np.eye(2), np.ones((2, 2)))  # two pairs
    >>> Wc, dc, mapping = coarsen(W, W.sum(1), np.random.default_rng(0))
    >>> Wc.tolist(), mapping.tolist()
    ([[4.0, 0.0], [0.0, 4.0]], [0, 0, 1, 1])
    """
    n_comp, mapping = cluster_map(W, degrees, rng, part=part, alpha=alpha,
                                  shrink=shrink, min_nodes=min_nodes)
    Wc, dc = contract(W, degrees, mapping, n_comp)
    return Wc, dc, mapping


def cluster_map(W, degrees, rng, *, part=None, alpha=0.1, shrink=None, min_nodes=1):
    """The coarse node of every node of one :func:`coarsen` level, without
    the contraction (the same parameters and draws).

    Returns
    -------
    n_coarse : int
    mapping : ndarray of shape (n,)
    """
    n = W.shape[0]
    if shrink is not None and sp.issparse(W):
        # blocks of consecutive nodes in a random order: label propagation
        # reads its rows (and, on graphs numbered with some locality, their
        # neighbours) in cache order, 2x faster than a random permutation
        blocks = rng.permutation(-(-n // LP_BLOCK)) * LP_BLOCK
        order = (blocks[:, None] + np.arange(LP_BLOCK)).ravel()
        order = order[order < n].astype(np.int64)
    else:
        order = rng.permutation(n).astype(np.int64)
    part = (np.zeros(n, dtype=np.int64) if part is None
            else np.ascontiguousarray(part, dtype=np.int64))
    d = np.ascontiguousarray(degrees, dtype=np.float64)
    if sp.issparse(W) and shrink is not None:
        max_vol = min(float(shrink), n / max(min_nodes, 1)) * float(d.sum()) / max(n, 1)
        n_comp, mapping = cluster_csr(W.indptr, W.indices, W.data, d, order, part,
                                      max_vol, LP_ROUNDS)
    elif sp.issparse(W):
        n_comp, mapping = match_csr(W.indptr, W.indices, W.data, d, order, part,
                                    float(alpha))
    else:
        n_comp, mapping = match_dense(W, d, order, part, float(alpha))
    return n_comp, mapping
