"""Moves that K-way local steps cannot make: bisections, split-and-merge and
the re-bisection of pairs of clusters.

The proximal step and the exact single-node moves of the solver change one
node's label at a time.  Two kinds of better partitions are out of their
reach:

* a small, weakly attached region that should be a cluster of its own (its
  nodes gain nothing alone, and a cluster must be freed for it);
* a boundary between two clusters that is wrong as a whole (rings cut in
  half, a mesh cut along the wrong axis).

**Split and merge** keeps ``K``: the cluster whose best split raises ``f``
most is split while the pair whose merge lowers ``f`` least is merged, when
the sum is a gain.  Split candidates are the Fiedler-sweep bisection of the
cluster (or its connected components) and the extraction of its single
most self-contained node (on a coarse level, a whole region).  **Pair
re-bisection** replaces the boundary of two adjacent clusters by the best
bisection of their union.  Every gain is exact (computed from cluster
statistics with the graph's own degrees), a move is made only when it
raises ``f``, and the solver refines after it: ``f`` never decreases.

A *bisection* of a node set ``S`` maximizes ``a_1 / v_1 + a_2 / v_2``, its
two parts' associations over their volumes, where the volumes are the
degrees in the whole graph: the 2-way problem of the subgraph with external
edges counted in the volumes.  It is found by sweeping the two leading
eigenvectors of ``D^-1/2 W_S D^-1/2`` (an eigensolve bounded in size and
iterations) for the best threshold, and by the connected components of
``W_S`` when it falls apart.
"""

import numpy as np
import scipy.sparse as sp

from .._affinity._check import component_labels_csr
from .._backends import make_problem
from .._backends._numba import boundary_nodes_csr, fm_round_csr, own_cluster_weights_csr
from .._jit import jit as _jit
from .._solver import SolverOptions, solve
from .._stats import (cluster_pair_weights, cluster_statistics, cluster_weight_summary,
                      objective_of)
from ._coarsen import coarsen
from ._simple import fill_empty
from ._spectral import leading_vectors

__all__ = ["best_bisection", "fm_refine", "pair_rebisection", "refine",
           "split_merge", "subgraph", "sweep_csr", "sweep_dense"]

# Largest set bisected by a dense eigendecomposition; larger sets are
# coarsened to this size first (no ARPACK: on a nearly disconnected graph it
# once took 16,259 iterations).
_DENSE_EIGH_MAX = 256
# At most this many connected components of a set are tried as one part.
_MAX_COMPONENTS = 64


def refine(W, degrees, labels, n_clusters, options):
    """Falcon's solve (proximal steps, then exact single moves) from
    ``labels``; returns ``(labels, f)``."""
    res = solve(make_problem(W, n_clusters, degrees=degrees), labels, options)
    return res.labels[0], float(res.objective[0])


def fm_refine(W, degrees, labels, n_clusters, rng, *, max_stall=50, max_rounds=2,
              alpha=3.0, max_passes=2.0):
    """Rounds of localized FM searches (moves of strips of nodes that single
    moves cannot make; :mod:`.._backends._numba._fm`) from every boundary
    node, in random order, until a round raises ``f`` by less than a
    relative 1e-6, or ``max_rounds``.

    Parameters
    ----------
    W : CSR matrix or ndarray
    degrees : ndarray
    labels : ndarray of shape (n,)
        All ``n_clusters`` clusters non-empty; not modified.
    n_clusters : int
    rng : numpy.random.Generator
        Draws the order of the seeds.
    max_stall : int, default=50
        A search stops after this many moves without a new best ``f``.
    max_rounds : int, default=2
    alpha : float, default=3.0
        Of the adaptive rule that stops a search whose moves lose steadily.
    max_passes : float, default=2.0
        A round stops after reading this many times the entries of ``W``
        (where moves seldom pay, as in random graphs of high degree, every
        search makes many and rolls them back).

    Returns
    -------
    labels : ndarray
    f : float
        Never below that of ``labels``; no cluster is emptied.

    Examples
    --------
    >>> import numpy as np, scipy.sparse as sp
    >>> from sklearn_falcon._inits._moves import fm_refine
    >>> W = sp.csr_matrix(np.kron(np.eye(2), np.ones((4, 4))) + 0.01)
    >>> y, f = fm_refine(W, np.asarray(W.sum(1)).ravel(),
    ...                  [0, 0, 1, 1, 1, 1, 0, 0], 2, np.random.default_rng(0))
    >>> y.tolist(), round(f, 3)
    ([0, 0, 0, 0, 1, 1, 1, 1], 1.98)
    """
    G = W if sp.issparse(W) else sp.csr_matrix(W)
    y = np.array(labels, dtype=np.int64, copy=True)
    vol, assoc = cluster_statistics(G, y, n_clusters, degrees)
    vol = np.array(vol, dtype=np.float64)
    assoc = np.array(assoc, dtype=np.float64)
    ptr, ind = G.indptr, G.indices  # as they are (int32): no copy of the graph
    d = np.asarray(degrees, dtype=np.float64)
    f = objective_of(vol, assoc)
    for _ in range(max_rounds):
        seeds = rng.permutation(boundary_nodes_csr(ptr, ind, y))
        n_kept, gain = fm_round_csr(ptr, ind, G.data, d, y, vol, assoc, seeds,
                                    int(max_stall), float(alpha),
                                    int(max_passes * max(G.nnz, 1)))
        f = objective_of(vol, assoc)  # kept exact by the moves
        if n_kept == 0 or gain <= 1e-6 * abs(f):
            break  # another round would find as little
    return y, f


@_jit
def subgraph_csr(indptr, indices, data, idx, n):
    """CSR arrays of ``W[idx][:, idx]`` (``idx`` sorted, ``n`` nodes in W):
    one pass over the rows of ``idx`` (scipy's two fancy indexings cost
    about 1 ms each on small graphs, where this takes microseconds).  The
    index arrays have the type of ``indices`` (a subgraph has no more
    entries than ``W``): scipy keeps int32 arrays as they are, where int64
    ones are checked and copied down to int32."""
    pos = np.full(n, -1, dtype=np.int64)
    for t in range(idx.shape[0]):
        pos[idx[t]] = t
    m = idx.shape[0]
    out_ptr = np.zeros(m + 1, dtype=indices.dtype)
    for t in range(m):
        i = idx[t]
        c = 0
        for p in range(indptr[i], indptr[i + 1]):
            if pos[indices[p]] >= 0:
                c += 1
        out_ptr[t + 1] = out_ptr[t] + c
    out_idx = np.empty(out_ptr[m], dtype=indices.dtype)
    out_data = np.empty(out_ptr[m], dtype=data.dtype)
    q = 0
    for t in range(m):
        i = idx[t]
        for p in range(indptr[i], indptr[i + 1]):
            j = pos[indices[p]]
            if j >= 0:
                out_idx[q] = j
                out_data[q] = data[p]
                q += 1
    return out_ptr, out_idx, out_data


def subgraph(W, idx):
    """``W[idx][:, idx]`` for sorted ``idx`` (CSR stays CSR)."""
    if sp.issparse(W):
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        ptr, ind, data = subgraph_csr(W.indptr, W.indices, W.data, idx, W.shape[0])
        return sp.csr_matrix((data, ind, ptr), shape=(idx.size, idx.size))
    return W[np.ix_(idx, idx)]


@_jit(inline=True)
def _sweep_rows(indptr, cols, vals, degrees, order):
    """The sweep of :func:`sweep_csr` on rows ``cols[indptr[u]:indptr[u + 1]]``
    (a dense ``S`` passes full rows)."""
    n = order.shape[0]
    rank = np.empty(n, dtype=np.int64)
    for t in range(n):
        rank[order[t]] = t
    total = 0.0
    for p in range(vals.shape[0]):
        total += vals[p]
    vol_total = 0.0
    for i in range(n):
        vol_total += degrees[i]
    assoc1 = 0.0
    cut = 0.0
    vol1 = 0.0
    best = -np.inf
    best_t = -1
    for t in range(n - 1):
        u = order[t]
        w_in = 0.0
        w_out = 0.0
        w_self = 0.0
        for p in range(indptr[u], indptr[u + 1]):
            j = cols[p]
            if j == u:
                w_self += vals[p]
            elif rank[j] < t:
                w_in += vals[p]
            else:
                w_out += vals[p]
        assoc1 += 2.0 * w_in + w_self
        cut += w_out - w_in
        vol1 += degrees[u]
        vol2 = vol_total - vol1
        if vol1 <= 0.0 or vol2 <= 0.0:
            continue
        g = assoc1 / vol1 + (total - assoc1 - 2.0 * cut) / vol2
        if g > best:
            best = g
            best_t = t
    return best, best_t


@_jit
def sweep_csr(indptr, indices, data, degrees, order):
    """Best prefix split of ``order`` by ``a_1 / v_1 + a_2 / v_2``.

    The prefix ``order[:t + 1]`` is part 1; associations count both
    directions of an edge and self-loops, volumes are ``degrees`` (which may
    exceed the row sums).  One pass over the nonzeros.  Returns
    ``(best value, t)``, ``t = -1`` when ``n < 2``.
    """
    return _sweep_rows(indptr, indices, data.astype(np.float64), degrees, order)


@_jit
def sweep_dense(S, degrees, order):
    """Dense twin of :func:`sweep_csr` (the same sweep over full rows)."""
    n = S.shape[0]
    indptr = np.arange(n + 1) * n
    cols = np.empty(n * n, dtype=np.int64)
    for i in range(n):
        cols[i * n:(i + 1) * n] = np.arange(n)
    return _sweep_rows(indptr, cols, S.astype(np.float64).ravel(), degrees, order)


def _sweep(S, degrees, order):
    order = np.ascontiguousarray(order, dtype=np.int64)
    if sp.issparse(S):
        return sweep_csr(S.indptr, S.indices, S.data, degrees, order)
    return sweep_dense(S, degrees, order)


def _spectral_split(S, degrees, rng):
    """Best sweep split of the two leading eigenvectors of a small ``S``."""
    best, mask = -np.inf, None
    vec = leading_vectors(S, degrees, 2, rng)
    for k in range(vec.shape[1]):
        order = np.argsort(vec[:, k], kind="stable")
        val, t = _sweep(S, degrees, order)
        if t >= 0 and val > best:
            best = val
            mask = np.zeros(S.shape[0], dtype=bool)
            mask[order[: t + 1]] = True
    return best, mask


def _multilevel_split(S, degrees, rng, options):
    """Bisection of a large ``S``: coarsen it to at most ``_DENSE_EIGH_MAX``
    nodes, split the coarsest graph by its eigenvectors, and refine the split
    with a 2-way solve on every level back up (an eigensolve of the whole
    set, on a nearly disconnected one, ran thousands of ARPACK
    iterations)."""
    graphs, maps = [(S, degrees)], []
    while graphs[-1][0].shape[0] > _DENSE_EIGH_MAX:
        Sl, dl = graphs[-1]
        Sc, dc, mapping = coarsen(Sl, dl, rng)
        if Sc.shape[0] > 0.95 * Sl.shape[0]:
            break
        graphs.append((Sc, dc))
        maps.append(mapping)
    Sc, dc = graphs[-1]
    if Sc.shape[0] > _DENSE_EIGH_MAX:
        return -np.inf, None  # does not coarsen: no bisection offered
    best, mask = _spectral_split(Sc, dc, rng)
    if mask is None:
        return best, mask
    y = mask.astype(np.int64)
    for lv in range(len(maps) - 1, -1, -1):
        y = fill_empty(y[maps[lv]], 2, rng)
        y, best = refine(*graphs[lv], y, 2, options)
    return best, y.astype(bool)


def best_bisection(S, degrees, rng, options=None):
    """The best bisection found of a node set, given its subgraph.

    Parameters
    ----------
    S : CSR matrix or ndarray of shape (m, m)
        The subgraph ``W[idx][:, idx]``.
    degrees : ndarray of shape (m,)
        The nodes' degrees in the whole graph (at least the row sums of S).
    rng : numpy.random.Generator
    options : SolverOptions, default=None
        Of the 2-way refinement of large sets.

    Returns
    -------
    value : float
        ``a_1 / v_1 + a_2 / v_2`` of the split (``-inf`` if none).
    mask : ndarray of bool of shape (m,) or None
        Part 1.
    """
    m = S.shape[0]
    if m < 2:
        return -np.inf, None
    G = S if sp.issparse(S) else sp.csr_matrix(S)
    n_comp, comp = component_labels_csr(G.indptr, G.indices)  # scipy's labels
    if n_comp > 1:
        # a set that falls apart: one component (the best) against the rest
        own = own_cluster_weights_csr(G.indptr, G.indices, G.data, comp)
        a = np.bincount(comp, weights=own, minlength=n_comp)
        v = np.bincount(comp, weights=degrees, minlength=n_comp)
        total_a, total_v = a.sum(), v.sum()
        cand = np.argsort(-v)[:_MAX_COMPONENTS]
        rest_v = total_v - v[cand]
        ok = rest_v > 0
        vals = np.where(ok, a[cand] / v[cand] + (total_a - a[cand])
                        / np.where(ok, rest_v, 1.0), -np.inf)
        c = cand[int(np.argmax(vals))]
        return float(vals.max()), comp == c
    if m <= _DENSE_EIGH_MAX:
        best, mask = _spectral_split(S, degrees, rng)
    else:
        best, mask = _multilevel_split(S, degrees, rng, options or SolverOptions())
    return float(best), mask


@_jit
def _best_extractions(own, self_w, labels, degrees, vol, assoc):
    """Per cluster, the node whose extraction (alone in a cluster of its own,
    ``f = w_ii / d_i``) raises ``f`` most, and that gain (``-inf`` where none
    is allowed: clusters of one node)."""
    K = vol.shape[0]
    counts = np.zeros(K, dtype=np.int64)
    for i in range(labels.shape[0]):
        counts[labels[i]] += 1
    best_gain = np.full(K, -np.inf)
    best_node = np.full(K, -1, dtype=np.int64)
    for i in range(labels.shape[0]):
        a = labels[i]
        rest = vol[a] - degrees[i]
        if counts[a] < 2 or rest <= 0.0 or degrees[i] <= 0.0:
            continue
        g = (self_w[i] / degrees[i] + (assoc[a] - 2.0 * own[i] + self_w[i]) / rest
             - assoc[a] / vol[a])
        if g > best_gain[a]:
            best_gain[a] = g
            best_node[a] = i
    return best_gain, best_node


def _merge_losses(C, vol, assoc):
    """``L[a, b]``: the loss of ``f`` when clusters a and b merge."""
    f_k = assoc / vol
    merged = (assoc[:, None] + assoc[None, :] + 2.0 * C) / (vol[:, None]
                                                           + vol[None, :])
    L = f_k[:, None] + f_k[None, :] - merged
    np.fill_diagonal(L, np.inf)
    return L


def _tol(f):
    return 1e-10 * max(1.0, abs(f))


def split_merge(W, degrees, labels, n_clusters, rng, options, *, bisect=True,
                max_rounds=8, n_try=4):
    """Split-and-merge moves until none raises ``f`` (or ``max_rounds``).

    Parameters
    ----------
    W : CSR matrix or ndarray
    degrees : ndarray
    labels : ndarray of shape (n,)
        All ``n_clusters`` clusters non-empty; not modified.
    n_clusters : int
    rng : numpy.random.Generator
    options : SolverOptions
        Of the refinement after each move.
    bisect : bool, default=True
        Try eigenvector bisections of the clusters (one eigensolve per
        changed cluster and round); otherwise only single-node extractions,
        which cost one pass over ``W``.
    max_rounds : int, default=8
    n_try : int, default=4
        Clusters of largest split gain each paired with the cheapest merge.

    Returns
    -------
    labels : ndarray
    f : float
    """
    K = n_clusters
    y = np.array(labels, dtype=np.int64, copy=True)
    f = None
    cache = {}
    for _ in range(max_rounds):
        C, own, self_w = cluster_weight_summary(W, y, K)
        vol = np.bincount(y, weights=degrees, minlength=K)
        assoc = np.diag(C).copy()
        if f is None:
            f = objective_of(vol, assoc)
        if K < 3:
            break
        f_k = assoc / vol
        gain, split = _best_extractions(own, self_w, y, degrees, vol, assoc)
        split = [np.array([i]) if i >= 0 else None for i in split]
        if bisect:
            for c in range(K):
                idx = np.flatnonzero(y == c)
                key = (c, idx.tobytes())
                if key not in cache:
                    cache[key] = best_bisection(subgraph(W, idx), degrees[idx], rng,
                                                options)
                val, mask = cache[key]
                if mask is not None and val - f_k[c] > gain[c]:
                    gain[c] = val - f_k[c]
                    split[c] = idx[mask]
        L = _merge_losses(C, vol, assoc)
        if gain.max() - L.min() <= _tol(f):
            break  # no split pays for the cheapest merge
        best_net, move = _tol(f), None
        for c in np.argsort(-gain)[:n_try]:
            if split[c] is None:
                continue
            Lc = L.copy()
            Lc[c, :] = np.inf
            Lc[:, c] = np.inf
            a, b = np.unravel_index(np.argmin(Lc), Lc.shape)
            net = gain[c] - Lc[a, b]
            if net > best_net:
                best_net, move = net, (c, a, b)
        if move is None:
            break
        c, a, b = move
        y[y == b] = a
        y[split[c]] = b
        y, f = refine(W, degrees, y, K, options)
    return y, f


def pair_rebisection(W, degrees, labels, n_clusters, rng, options, *,
                     n_partners=2, memo=None):
    """Re-draw the boundary of adjacent pairs of clusters by the best
    bisection of their union, refined by a 2-way solve on it.

    Each cluster proposes its ``n_partners`` most entangled neighbours (by
    the weight between them relative to the smaller volume); the pairs are
    tried in that order, each once, and an improvement is followed by a
    K-way refinement.  Returns ``(labels, f)``.

    ``memo``, a dict shared by calls on the same ``W``, ``degrees`` and
    ``options`` (several candidates of one graph), keeps the bisection and
    the 2-way solve of each union of at most ``_DENSE_EIGH_MAX`` nodes, which
    use no random numbers: a union met again takes them from there, with
    the same result.
    """
    K = n_clusters
    y = np.array(labels, dtype=np.int64, copy=True)
    vol, assoc = cluster_statistics(W, y, K, degrees)
    f = objective_of(vol, assoc)
    if K < 2:
        return y, f
    C = cluster_pair_weights(W, y, K)
    vol = C.sum(1)
    E = C / np.minimum(vol[:, None], vol[None, :])
    np.fill_diagonal(E, 0.0)
    pairs = set()
    for a in range(K):
        for b in np.argsort(-E[a], kind="stable")[:n_partners]:
            if E[a, b] > 0:
                pairs.add((float(E[a, b]), min(a, int(b)), max(a, int(b))))
    for _, a, b in sorted(pairs, reverse=True):
        idx = np.flatnonzero((y == a) | (y == b))
        S, d_s = subgraph(W, idx), degrees[idx]
        before = objective_of(*cluster_statistics(S, (y[idx] == b).astype(np.int64),
                                                  2, d_s))
        key = None
        if memo is not None and idx.size <= _DENSE_EIGH_MAX:
            key = idx.tobytes()
        if key is not None and key in memo:
            mask = memo[key]
        else:
            _, mask = best_bisection(S, d_s, rng, options)
            if key is not None:
                memo[key] = mask
        if mask is None:
            continue
        two = fill_empty(mask.astype(np.int64), 2, rng)
        solved = None if key is None else (key, two.tobytes())
        if solved is not None and solved in memo:
            two, after = memo[solved]
        else:
            two, after = refine(S, d_s, two, 2, options)
            if solved is not None:
                memo[solved] = two, after
        if after > before + _tol(before):
            y[idx] = np.where(two == 1, b, a)
            y, f_new = refine(W, degrees, y, K, options)
            f = max(f, f_new)
    return y, f
