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
projected labelling is preserved exactly).

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

from .._backends._numba._kernels import _add_rows_by_label
from .._jit import PARALLEL_MIN, pjit, prange
from .._jit import jit as _jit

__all__ = ["cluster_csr", "cluster_map", "coarsen", "coarsen_csr", "coarsen_dense",
           "contract", "match_csr", "match_dense"]

LP_ROUNDS = 2  # rounds of label propagation of a clustering level
LP_BLOCK = 4096  # its visiting order: blocks of this many consecutive nodes
# A bucket contraction of PARALLEL_MIN stored entries or more runs on Numba's
# threads, at most this many (each holds a position array of the coarse size)
BUCKET_THREADS_MAX = 4


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
def _top_of_row(u, cols, vals, q0, q1, inv, part):
    """Largest ``W_uj / d_j`` over the neighbours ``j != u`` of the same part
    (the row of ``u``: ``cols[q0:q1]``, ``vals[q0:q1]``)."""
    t = 0.0
    for q in range(q0, q1):
        j = cols[q]
        if j != u and part[j] == part[u]:
            s = np.float64(vals[q]) * inv[j]
            if s > t:
                t = s
    return t


@_jit(inline=True)
def _match_row(u, cols, vals, q0, q1, inv, part, alpha, top, match, heavy):
    """Visit node ``u`` (its row: neighbours ``cols[q0:q1]``, weights
    ``vals[q0:q1]``): pair it with its best eligible unmatched neighbour, and
    note its heaviest eligible neighbour for the two-hop pairing."""
    best = 0.0
    best_j = -1
    for q in range(q0, q1):
        j = cols[q]
        w = np.float64(vals[q])
        if j == u or w <= 0.0 or part[j] != part[u]:
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
    inv = np.empty(n, dtype=np.float64)
    for u in range(n):
        inv[u] = 1.0 / degrees[u]
    top = np.empty(n, dtype=np.float64)
    for u in range(n):
        top[u] = _top_of_row(u, indices, data, indptr[u], indptr[u + 1], inv, part)
    match = np.full(n, -1, dtype=np.int64)
    heavy = np.full(n, -1, dtype=np.int64)
    for u in order:
        if match[u] < 0:
            _match_row(u, indices, data, indptr[u], indptr[u + 1], inv, part, alpha,
                       top, match, heavy)
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
    cl = np.arange(n)
    cvol = degrees.copy()
    rating = np.zeros(n, dtype=np.float64)
    stamp = np.full(n, -1, dtype=np.int64)
    touched = np.empty(n, dtype=np.int64)
    visit = 0
    for _ in range(rounds):
        moved = 0
        for u in order:
            cu = cl[u]
            pu = part[u]
            nt = 0
            for q in range(indptr[u], indptr[u + 1]):
                v = indices[q]
                if v == u or part[v] != pu:
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
    inv = 1.0 / degrees
    cols = np.arange(n)
    top = np.empty(n, dtype=np.float64)
    for u in range(n):
        top[u] = _top_of_row(u, cols, W[u], 0, n, inv, part)
    match = np.full(n, -1, dtype=np.int64)
    heavy = np.full(n, -1, dtype=np.int64)
    for u in order:
        if match[u] < 0:
            _match_row(u, cols, W[u], 0, n, inv, part, alpha, top, match, heavy)
    _pair_two_hops(match, heavy, order)
    return _number_pairs(match)


@_jit
def _coarsen_csr_into(indptr, indices, data, mapping, n_coarse, out_idx, acc):
    """The kernel of :func:`coarsen_csr`: writes the coarse rows' column
    indices and sums into the first ``nnz`` slots of ``out_idx`` and ``acc``
    (each as long as ``indices``) and returns the coarse ``indptr``, whose
    last entry is ``nnz``."""
    n = indptr.shape[0] - 1
    # fine nodes grouped by coarse node (counting sort)
    start = np.zeros(n_coarse + 1, dtype=np.int64)
    for i in range(n):
        start[mapping[i] + 1] += 1
    for a in range(n_coarse):
        start[a + 1] += start[a]
    fill = start[:-1].copy()
    members = np.empty(n, dtype=np.int64)
    for i in range(n):
        members[fill[mapping[i]]] = i
        fill[mapping[i]] += 1
    out_ptr = np.zeros(n_coarse + 1, dtype=np.int64)
    slot = np.full(n_coarse, -1, dtype=np.int64)  # position of b in this row
    nnz = 0
    for a in range(n_coarse):
        row0 = nnz
        for t in range(start[a], start[a + 1]):
            i = members[t]
            for p in range(indptr[i], indptr[i + 1]):
                b = mapping[indices[p]]
                if slot[b] < row0:
                    slot[b] = nnz
                    out_idx[nnz] = b
                    acc[nnz] = data[p]
                    nnz += 1
                else:
                    acc[slot[b]] += data[p]
        out_ptr[a + 1] = nnz
    return out_ptr


@_jit
def _coarsen_csr_buckets_into(indptr, indices, data, mapping, n_coarse, out_idx, acc):
    """:func:`_coarsen_csr_into` in two sequential passes: every entry of
    ``W`` is written into the bucket of its row's coarse node (rows in
    order), then each bucket is merged in place (a bucket's merged entries
    never pass its start).  The same first-appearance order and the same
    sums in the same order: the same arrays, bit for bit."""
    n = indptr.shape[0] - 1
    start = np.zeros(n_coarse + 1, dtype=np.int64)
    for i in range(n):
        start[mapping[i] + 1] += indptr[i + 1] - indptr[i]
    for a in range(n_coarse):
        start[a + 1] += start[a]
    fill = start[:-1].copy()
    for i in range(n):
        a = mapping[i]
        q = fill[a]
        for p in range(indptr[i], indptr[i + 1]):
            out_idx[q] = mapping[indices[p]]
            acc[q] = data[p]
            q += 1
        fill[a] = q
    out_ptr = np.zeros(n_coarse + 1, dtype=np.int64)
    slot = fill  # reused: position of b in this row
    slot[:] = -1
    nnz = 0
    for a in range(n_coarse):
        row0 = nnz
        for q in range(start[a], start[a + 1]):
            b = out_idx[q]
            w = acc[q]
            if slot[b] < row0:
                slot[b] = nnz
                out_idx[nnz] = b
                acc[nnz] = w
                nnz += 1
            else:
                acc[slot[b]] += w
        out_ptr[a + 1] = nnz
    return out_ptr


@pjit
def _coarsen_csr_buckets_par(indptr, indices, data, mapping, n_coarse, out_idx, acc,
                             n_chunks):
    """:func:`_coarsen_csr_buckets_into` on ``n_chunks`` threads: the same
    arrays, bit for bit, whatever ``n_chunks``.

    The rows are cut into ``n_chunks`` runs of about equal entries, and each
    run writes its entries into the part of every bucket that follows the
    parts of the runs before it: each bucket holds its entries in row order,
    as in the serial kernel.  The buckets are then merged in place in runs
    of coarse rows, each thread with its own position array, and the merged
    rows moved down to their final places, in order (a row never moves up).
    Costs ``n_chunks - 1`` more arrays of ``n_coarse`` positions than the
    serial kernel."""
    n = indptr.shape[0] - 1
    total = np.int64(indptr[n])
    rows = np.empty(n_chunks + 1, dtype=np.int64)
    for t in range(n_chunks):
        rows[t] = min(np.searchsorted(indptr, total * t // n_chunks), n)
    rows[n_chunks] = n
    pos = np.zeros((n_chunks, n_coarse), dtype=np.int64)
    for t in prange(n_chunks):
        for i in range(rows[t], rows[t + 1]):
            pos[t, mapping[i]] += indptr[i + 1] - indptr[i]
    start = np.empty(n_coarse + 1, dtype=np.int64)
    s = 0
    for a in range(n_coarse):
        start[a] = s
        for t in range(n_chunks):  # run t's part of bucket a
            c = pos[t, a]
            pos[t, a] = s
            s += c
    start[n_coarse] = s
    for t in prange(n_chunks):
        for i in range(rows[t], rows[t + 1]):
            a = mapping[i]
            q = pos[t, a]
            for p in range(indptr[i], indptr[i + 1]):
                out_idx[q] = mapping[indices[p]]
                acc[q] = data[p]
                q += 1
            pos[t, a] = q
    first = np.empty(n_chunks + 1, dtype=np.int64)  # runs of coarse rows
    for t in range(n_chunks):
        first[t] = min(np.searchsorted(start, total * t // n_chunks), n_coarse)
    first[n_chunks] = n_coarse
    out_ptr = np.zeros(n_coarse + 1, dtype=np.int64)
    for t in prange(n_chunks):
        slot = pos[t]  # position of b in the bucket being merged
        slot[:] = -1
        for a in range(first[t], first[t + 1]):
            row0 = start[a]
            m = row0
            for q in range(row0, start[a + 1]):
                b = out_idx[q]
                w = acc[q]
                if slot[b] < row0:
                    slot[b] = m
                    out_idx[m] = b
                    acc[m] = w
                    m += 1
                else:
                    acc[slot[b]] += w
            out_ptr[a + 1] = m - row0  # the merged row's length, for now
    for a in range(n_coarse):
        src = start[a]
        dst = out_ptr[a]
        length = out_ptr[a + 1]
        out_ptr[a + 1] = dst + length
        if src != dst:  # dst < src: a forward copy reads before it writes
            for k in range(length):
                out_idx[dst + k] = out_idx[src + k]
                acc[dst + k] = acc[src + k]
    return out_ptr


def _bucket_threads(n_entries):
    """Threads of a bucket contraction: Numba's (the fit's ``n_jobs``), up to
    :data:`BUCKET_THREADS_MAX`, from :data:`PARALLEL_MIN` stored entries."""
    if n_entries < PARALLEL_MIN:
        return 1
    import numba

    return min(numba.get_num_threads(), BUCKET_THREADS_MAX)


def coarsen_csr(indptr, indices, data, mapping, n_coarse, buckets=False):
    """``P' W P`` for CSR W, with ``P`` the one-hot matrix of ``mapping``.

    One pass over the nonzeros, grouped by coarse row, with a marker array
    (no sparse-sparse products and no transposes; scipy's ``P.T @ W @ P``
    took 40% of a 20,000-node fit).  Returns ``(indptr, indices, data)`` of
    the coarse CSR matrix, its column indices in order of first appearance
    (not sorted) and in the type of ``indices`` (a coarse node number is
    below a fine one); sums are accumulated in float64 and returned in W's
    dtype.

    The output is written once, into arrays as long as the input's, which
    are then shrunk in place (``ndarray.resize``: the allocator gives the
    tail back) rather than copied: on a random graph, where a level keeps
    most entries, a copy would hold both at once.

    With ``buckets``, the rows of ``W`` are read in order
    (:func:`_coarsen_csr_buckets_into`), not by coarse node: the same
    arrays, about 1.6x faster where a coarse node's members are scattered
    over ``W`` (a contraction of a random graph from the input through
    several levels' maps), but every entry of ``W`` is written before the
    merge, where the plain kernel writes only the coarse graph's: for
    levels that keep most of the entries.  From :data:`PARALLEL_MIN` stored
    entries it runs on Numba's threads (:func:`_coarsen_csr_buckets_par`,
    the same arrays).
    """
    out_idx = np.empty(indices.shape[0], dtype=indices.dtype)
    acc = np.empty(indices.shape[0], dtype=np.float64)
    threads = _bucket_threads(indices.shape[0]) if buckets else 1
    if threads > 1:
        out_ptr = _coarsen_csr_buckets_par(indptr, indices, data, mapping, n_coarse,
                                           out_idx, acc, threads)
    else:
        kernel = _coarsen_csr_buckets_into if buckets else _coarsen_csr_into
        out_ptr = kernel(indptr, indices, data, mapping, n_coarse, out_idx, acc)
    nnz = int(out_ptr[-1])
    out_idx.resize(nnz, refcheck=False)
    acc.resize(nnz, refcheck=False)
    return out_ptr, out_idx, acc.astype(data.dtype, copy=False)


@_jit
def coarsen_dense(W, mapping, n_coarse):
    """``P' W P`` for dense W, with ``P`` the one-hot matrix of ``mapping``.

    ``Wc[a, b] = sum of W[i, j]`` over ``mapping[i] = a``, ``mapping[j] = b``,
    in float64, returned in W's dtype.  Both reductions add whole rows
    (``P' W``, then the rows of its transpose), which vectorizes; adding
    entry by entry chains dependent adds where neighbours share a coarse
    node.
    """
    n = W.shape[0]
    PtW = np.zeros((n_coarse, n), dtype=np.float64)
    _add_rows_by_label(W, mapping, PtW, 0, n)
    WtP = np.ascontiguousarray(PtW.T)  # (n, n_coarse): (P' W)'
    WcT = np.zeros((n_coarse, n_coarse), dtype=np.float64)
    for i in range(n):
        b = mapping[i]
        for a in range(n_coarse):
            WcT[b, a] += WtP[i, a]
    return np.ascontiguousarray(WcT.T).astype(W.dtype)


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


def contract(W, degrees, mapping, n_coarse, buckets=False):
    """The coarse graph of a given ``mapping``: ``P' W P`` and ``P' d``.

    Deterministic: the same inputs give the same arrays, bit for bit (a
    hierarchy may drop a level and contract it again when it is needed),
    with or without ``buckets`` (see :func:`coarsen_csr`).

    Returns
    -------
    W_c : CSR matrix (int32 indices when they fit) or ndarray
    d_c : ndarray of shape (n_coarse,)
    """
    if sp.issparse(W):
        indptr, indices, data = coarsen_csr(W.indptr, W.indices, W.data, mapping,
                                            n_coarse, buckets)
        if indices.shape[0] < np.iinfo(np.int32).max:
            indptr = indptr.astype(np.int32)
            indices = indices.astype(np.int32, copy=False)
        Wc = sp.csr_matrix((data, indices, indptr), shape=(n_coarse, n_coarse))
    else:
        Wc = coarsen_dense(W, mapping, n_coarse)
    return Wc, np.bincount(mapping, weights=degrees, minlength=n_coarse)
