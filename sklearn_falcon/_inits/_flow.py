"""Pairwise max-flow refinement of a partition (KaHIP-style flows, with the
exact change of ``f``).

On meshes the solver's single moves and the FM searches
(:func:`._moves.fm_refine`) stop at boundaries that a better partition
would draw elsewhere: straight cuts a few rows over, or along lighter
edges, reachable only by moving a whole region at once.  For each pair of
adjacent clusters ``a`` and ``b``, in decreasing order of the weight
between them, this builds the flow network of a corridor of their boundary
(:mod:`.._backends._numba._flow`: breadth-first within each cluster, up to
a fraction of its volume; the rest of ``a`` is the source, the rest of
``b`` the sink) and solves a minimum s-t cut
(:func:`.._backends._numba._flow.min_cut_sides`: Boykov-Kolmogorov, on
integer capacities: the weights scaled to at most ``2**24``).  Both
minimum cuts are tried (the source side as small and as large as it can
be), for corridors of several sizes, and the labels that raise ``f`` most
are kept.  A cut minimizes the weight between ``a`` and ``b``, not ``f``,
which also depends on the volumes: every candidate is scored by its exact
``f``, and kept only when ``f`` rises.  So ``f`` never decreases and no
cluster is emptied.
"""

import hashlib

import numpy as np
import scipy.sparse as sp

from .._backends._numba import (flow_corridor, flow_network, min_cut_sides,
                                move_nodes_csr)
from .._stats import cluster_pair_weights, cluster_statistics, objective_of

__all__ = ["flow_refine"]

# integer capacities of the network: weights scaled to at most this, and
# the flow out of the source to at most _FLOW_MAX (as when scipy's int32
# maximum_flow solved it: the same cuts)
_CAP_MAX = float(1 << 24)
_FLOW_MAX = float(1 << 30)


def _min_cuts(rows, cols, weights, m, memo=None):
    """Source sides (boolean over the ``m`` corridor nodes) of the two
    extreme minimum s-t cuts of the network: the smallest (the nodes the
    source reaches in the residual graph) and the largest (all but those
    that reach the sink); :func:`min_cut_sides` on integer capacities.

    ``memo`` (a dict, or None) keeps the sides of every network by a digest
    of its arrays: a network met again, the same edges in the same order
    (a pair whose clusters have not changed since the last call of
    :func:`flow_refine` on the graph), reuses them."""
    if memo is not None:
        h = hashlib.sha256()  # 2x blake2b here (SHA extensions)
        for x in (rows, cols, weights):
            h.update(np.ascontiguousarray(x))
        key = (m, rows.shape[0], h.digest())
        hit = memo.get(key)
        if hit is not None:
            return tuple(np.unpackbits(x, count=m).astype(bool) for x in hit)
    s, t = m, m + 1
    out_s = weights[rows == s].sum()
    in_t = weights[cols == t].sum()
    total = max(out_s, in_t, 1e-300)
    top = weights.max()
    with np.errstate(over="ignore", divide="ignore"):
        scale = min(_CAP_MAX / top, _FLOW_MAX / total)
    if np.isfinite(scale):
        cap = np.maximum(np.rint(weights * scale), 1).astype(np.int64)
    else:  # subnormal weights (affinities of 1e-320): in units of the largest
        unit = weights / top if top > 0 else np.ones_like(weights)
        cap = np.maximum(np.rint(unit * min(_CAP_MAX, _FLOW_MAX / max(
            out_s / top, in_t / top, 1.0))), 1).astype(np.int64)
    small, large = min_cut_sides(rows, cols, cap, m + 2, s, t)
    small, large = small[:m], large[:m]
    if memo is not None:
        memo[key] = (np.packbits(small), np.packbits(large))
    return small, large


def flow_refine(W, degrees, labels, n_clusters, *, fractions=(0.5, 0.25, 0.125),
                max_rounds=3, max_work=4.0, memo=None):
    """Rounds of pairwise max-flow refinement, until a round raises ``f`` by
    less than a relative 1e-9 or ``max_rounds``.  After the first round a
    pair is tried again only when one of its clusters has changed since its
    last try (by its own cut or another pair's).

    Parameters
    ----------
    W : CSR matrix
        Symmetric nonnegative affinity.
    degrees : ndarray of shape (n,)
    labels : array-like of shape (n,)
        All ``n_clusters`` clusters non-empty; not modified.
    n_clusters : int
    fractions : tuple of float, default=(0.5, 0.25, 0.125)
        Corridor sizes: each cluster of the pair gives at most this
        fraction of its volume.
    max_rounds : int, default=3
    max_work : float, default=4.0
        The refinement stops once its flow networks hold this many times the
        entries of ``W`` in all (the pairs of heaviest boundaries come first).
    memo : dict or None, default=None
        Minimum cuts of the networks solved so far, shared by the calls on
        one graph: a network solved again (the corridor of a pair whose
        clusters did not change between two calls) takes its cuts from it.
        The same labels as without it; only the time differs.

    Returns
    -------
    labels : ndarray of shape (n,)
    f : float
        Never below that of ``labels``.

    Examples
    --------
    A 2 x 8 ladder cut mostly along its length (six rungs and one rail);
    the best cut crosses both rails in the middle:

    >>> import numpy as np, scipy.sparse as sp
    >>> from sklearn_falcon._inits._flow import flow_refine
    >>> n = 8
    >>> A = sp.diags([np.ones(n - 1)], [1], shape=(n, n))
    >>> W = sp.kron(sp.eye(2), A + A.T) + sp.kron(sp.diags([1.0], [1], (2, 2)),
    ...                                            sp.eye(n))
    >>> W = sp.csr_matrix(W + W.T)
    >>> d = np.asarray(W.sum(1)).ravel()
    >>> y, f = flow_refine(W, d, np.r_[np.zeros(10, int), np.ones(6, int)], 2)
    >>> y.tolist()
    [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    """
    G = sp.csr_matrix(W)
    K = n_clusters
    d = np.asarray(degrees, dtype=np.float64)
    y = np.array(labels, dtype=np.int64, copy=True)
    vol, assoc = cluster_statistics(G, y, K, d)
    vol = np.array(vol, dtype=np.float64)
    assoc = np.array(assoc, dtype=np.float64)
    f = f0 = objective_of(vol, assoc)
    y0 = y.copy()
    counts = np.bincount(y, minlength=K)
    loc = np.full(y.shape[0], -1, dtype=np.int64)
    budget = max_work * max(G.nnz, 1)
    # a pair is tried again only once one of its clusters has changed since
    # its last try (its own accepted cut included: the boundary has moved):
    # `changed[k]` counts the cuts accepted up to cluster k's last change,
    # `tried[a, b]` those accepted before the pair's last try
    n_accepted = 0
    work = 0
    changed = np.zeros(K, dtype=np.int64)
    tried = np.full((K, K), -1, dtype=np.int64)
    for _ in range(max_rounds):
        f_round = f
        P = np.asarray(cluster_pair_weights(G, y, K))
        P = np.triu(P + P.T, 1)
        pairs = np.argwhere(P > 0)
        pairs = pairs[np.argsort(-P[pairs[:, 0], pairs[:, 1]], kind="stable")]
        for a, b in pairs:
            if work > budget:
                break
            if tried[a, b] >= max(changed[a], changed[b]):
                continue
            tried[a, b] = n_accepted
            best = None
            for frac in fractions:
                nodes, n_a = flow_corridor(G.indptr, G.indices, d, y, a, b,
                                           frac * vol[a], frac * vol[b], loc)
                rows, cols, wts = flow_network(G.indptr, G.indices, G.data, y, nodes,
                                               loc, a, b)
                loc[nodes] = -1
                work += rows.shape[0]
                if (n_a == 0 or n_a == nodes.shape[0] or rows.shape[0] == 0
                        or not wts.max() > 0.0):
                    continue  # one side empty, or nothing to cut
                for side_a in _min_cuts(rows, cols, wts, nodes.shape[0], memo):
                    new = np.where(side_a, a, b)
                    if np.array_equal(new, y[nodes]):
                        continue
                    n_to_a = int(side_a.sum())
                    if (counts[a] - n_a + n_to_a == 0
                            or counts[b] - (nodes.shape[0] - n_a) + nodes.shape[0]
                            - n_to_a == 0):
                        continue  # a cluster would be emptied
                    y2, v2, a2 = y.copy(), vol.copy(), assoc.copy()
                    move_nodes_csr(G.indptr, G.indices, G.data, d, y2, nodes, new,
                                   v2, a2)
                    f2 = objective_of(v2, a2)
                    if f2 > f and (best is None or f2 > best[0]):
                        best = (f2, y2, v2, a2, n_to_a - n_a)
            if best is not None:
                f, y, vol, assoc, shift = best
                counts[a] += shift
                counts[b] -= shift
                n_accepted += 1
                changed[a] = changed[b] = n_accepted  # this pair too: a new boundary
        if f - f_round <= 1e-9 * abs(f):
            break
    # exact statistics of the final labels (the moves' sums drift by rounding)
    f = objective_of(*cluster_statistics(G, y, K, d))
    return (y, f) if f > f0 else (y0, f0)
