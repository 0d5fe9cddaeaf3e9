"""Numba kernels of the Falcon solver.

Every function here is a function on arrays: no validation, no estimator
state, no torch.  ``_kernels_torch.py`` implements the same names with the
same semantics on ``torch.Tensor``.  Four groups exist only here, because
they are sequential or in-place CPU work: ``apply_moves_*`` and
``candidate_stats_*`` (the copy-free backtracking test), the
``local_move_sweep_*`` polish (torch problems call it on the host), and
``falcon_loop_*``, the proximal loop of :func:`sklearn_falcon._solver.solve`
compiled for one graph (it calls the kernels above, so it takes the same
steps; a batched torch problem keeps the Python loop, whose overhead is
small next to its batched kernels).  The host-side helpers of the multilevel
initialization and of the affinity check (``heaviest_neighbor_*``,
``forest_components``, ``coarsen_dense``, ``max_asymmetry_dense``) are here
too.

Conventions
-----------
* ``labels`` is an ``int64`` array of shape ``(n,)`` with values in
  ``[0, n_clusters)``.
* A graph is either dense (``W`` of shape ``(n, n)``) or CSR
  (``indptr``, ``indices``, ``data``), symmetric and nonnegative; its
  dtype (float32 or float64) is kept, every accumulation is float64.
* ``WX`` is the ``(n, K)`` float64 matrix ``W @ onehot(labels)``: the
  weight from every node to every cluster.
* ``vol[k] = sum_{i in k} d_i`` and ``assoc[k] = x_k' W x_k``.

JIT caching is on by default and is switched off with the environment
variable ``SKLEARN_FALCON_NUMBA_CACHE=0``.
"""

import os

import numpy as np
from numba import njit, prange

_CACHE = os.environ.get("SKLEARN_FALCON_NUMBA_CACHE", "1").lower() not in (
    "0",
    "false",
    "no",
    "off",
)

_jit = njit(cache=_CACHE, nogil=True)
_pjit = njit(cache=_CACHE, nogil=True, parallel=True)

# Below this much work (array entries or nonzeros) a kernel runs serially:
# waking the thread pool costs more than it saves on tiny (coarse) graphs.
_PARALLEL_MIN = 1_000_000


@_jit
def _row_weights_csr(i, indptr, indices, data, labels, WX):
    for p in range(indptr[i], indptr[i + 1]):
        WX[i, labels[indices[p]]] += data[p]


@_pjit
def _cluster_weights_csr_par(indptr, indices, data, labels, n_clusters):
    WX = np.zeros((indptr.shape[0] - 1, n_clusters), dtype=np.float64)
    for i in prange(WX.shape[0]):
        _row_weights_csr(i, indptr, indices, data, labels, WX)
    return WX


@_jit
def _cluster_weights_csr_ser(indptr, indices, data, labels, n_clusters):
    WX = np.zeros((indptr.shape[0] - 1, n_clusters), dtype=np.float64)
    for i in range(WX.shape[0]):
        _row_weights_csr(i, indptr, indices, data, labels, WX)
    return WX


# Dense W @ onehot(labels) by rows of W (W is symmetric, so row j is column
# j): row j is added to the accumulator row of its cluster, a contiguous,
# vectorizable add.  The row-by-row form ``WX[i, labels[j]] += W[i, j]`` is a
# chain of dependent adds wherever neighbouring nodes share a label (image
# tokens do), and measured 4-10x slower at 400-1,024 nodes.
_DENSE_BLOCK = 256  # rows of WX per task of the parallel incremental update


@_jit
def _add_rows_by_label(W, labels, acc, i0, i1):
    for j in range(W.shape[0]):
        a = labels[j]
        for i in range(i0, i1):
            acc[a, i] += W[j, i]


@_jit
def _add_row_range_by_label(W, labels, acc, j0, j1):
    for j in range(j0, j1):
        a = labels[j]
        for i in range(W.shape[1]):
            acc[a, i] += W[j, i]


# The parallel pass splits the rows of W into a fixed number of contiguous
# chunks, each streamed into its own (K, n) partial sum, then adds the
# partials in chunk order.  The chunking depends on (n, K) only, never on the
# thread count, and the serial twin (for the compiled loop) does the same
# arithmetic in one thread: the result is the same on any number of threads
# and in both loops.  (Column blocks, which read each row in 2 KB pieces
# 128 KB apart at 16,384 nodes, ran 2.4x slower than the serial pass on 2
# cores.)  The partial sums are capped at _DENSE_PARTIAL_BYTES.
# Below _DENSE_PAR_MIN entries (the compiled loop's limit, _backend.
# COMPILED_LOOP_MAX_ENTRIES) the pass is one plain serial pass: the chunk
# partials cost the single-threaded compiled loop up to 2x at 1,024 nodes.
_DENSE_CHUNKS = 16
_DENSE_PARTIAL_BYTES = 64 << 20
_DENSE_PAR_MIN = 20_000_000


@_jit
def _dense_chunks(n, n_clusters):
    """Row chunks of the dense pass for an ``n``-node W (1: one plain pass)."""
    if n * n <= _DENSE_PAR_MIN:
        return 1
    return max(1, min(_DENSE_CHUNKS, _DENSE_PARTIAL_BYTES // (8 * n_clusters * n)))


@_jit
def _chunk_partial(W, labels, part, c, n_chunks):
    n = W.shape[0]
    _add_row_range_by_label(W, labels, part[c], c * n // n_chunks,
                            (c + 1) * n // n_chunks)


@_jit
def _sum_partials(part, WX, i0, i1):
    for i in range(i0, i1):
        for k in range(part.shape[1]):
            acc = 0.0
            for c in range(part.shape[0]):
                acc += part[c, k, i]
            WX[i, k] = acc


@_pjit
def _cluster_weights_dense_par(W, labels, n_clusters, n_chunks):
    n = W.shape[0]
    part = np.zeros((n_chunks, n_clusters, n), dtype=np.float64)
    for c in prange(n_chunks):
        _chunk_partial(W, labels, part, c, n_chunks)
    WX = np.empty((n, n_clusters), dtype=np.float64)
    n_blocks = (n + _DENSE_BLOCK - 1) // _DENSE_BLOCK
    for blk in prange(n_blocks):
        i0 = blk * _DENSE_BLOCK
        _sum_partials(part, WX, i0, min(i0 + _DENSE_BLOCK, n))
    return WX


@_jit
def _cluster_weights_dense_chunked(W, labels, n_clusters, n_chunks):
    """Serial twin of :func:`_cluster_weights_dense_par` (same sums)."""
    n = W.shape[0]
    part = np.zeros((n_chunks, n_clusters, n), dtype=np.float64)
    for c in range(n_chunks):
        _chunk_partial(W, labels, part, c, n_chunks)
    WX = np.empty((n, n_clusters), dtype=np.float64)
    _sum_partials(part, WX, 0, n)
    return WX


@_jit
def _cluster_weights_dense_ser(W, labels, n_clusters):
    """The dense pass in one thread: the same result as the parallel one."""
    n = W.shape[0]
    n_chunks = _dense_chunks(n, n_clusters)
    if n_chunks > 1:
        return _cluster_weights_dense_chunked(W, labels, n_clusters, n_chunks)
    acc = np.zeros((n_clusters, n), dtype=np.float64)
    _add_rows_by_label(W, labels, acc, 0, n)
    return np.ascontiguousarray(acc.T)


def cluster_weights_csr(indptr, indices, data, labels, n_clusters):
    """Weight from each node to each cluster, ``W @ onehot(labels)``, for CSR W.

    One pass over the nonzeros: O(nnz + n K).  Runs in parallel over rows
    when the graph is large enough for it to pay.
    """
    if data.shape[0] >= _PARALLEL_MIN:
        return _cluster_weights_csr_par(indptr, indices, data, labels, n_clusters)
    return _cluster_weights_csr_ser(indptr, indices, data, labels, n_clusters)


def cluster_weights_dense(W, labels, n_clusters):
    """Weight from each node to each cluster, ``W @ onehot(labels)``, for dense W
    (symmetric, as everywhere here: it is computed as ``W' @ onehot``).

    Above ``_DENSE_PAR_MIN`` entries the rows of W are summed in parallel
    chunks; the serial kernel of the compiled loop sums the same chunks in
    the same order, so both give the same result on any number of threads.
    """
    n_chunks = _dense_chunks(W.shape[0], n_clusters)
    if n_chunks > 1:
        return _cluster_weights_dense_par(W, labels, n_clusters, n_chunks)
    return _cluster_weights_dense_ser(W, labels, n_clusters)


@_jit
def apply_moves_csr(indptr, indices, data, old_labels, new_labels, WX):
    """In place: turn ``WX = W @ onehot(old_labels)`` into ``W @
    onehot(new_labels)``.

    Only the rows of the nodes that moved are read (W is symmetric, so the
    row of a moved node is also its column): the cost is the sum of their
    degrees, not nnz.
    """
    for j in range(old_labels.shape[0]):
        a = old_labels[j]
        b = new_labels[j]
        if a != b:
            for p in range(indptr[j], indptr[j + 1]):
                i = indices[p]
                w = data[p]
                WX[i, a] -= w
                WX[i, b] += w


@_jit
def _n_moved(old_labels, new_labels):
    m = 0
    for i in range(old_labels.shape[0]):
        if old_labels[i] != new_labels[i]:
            m += 1
    return m


@_jit
def _many_moved(old_labels, new_labels):
    """Whether more than a quarter of the nodes move.  On a dense graph the
    incremental updates then cost more than a fresh contiguous pass over W
    (measured at 400, 1,024 and 4,096 nodes)."""
    return 4 * _n_moved(old_labels, new_labels) > old_labels.shape[0]


@_jit
def _apply_moves_dense_block(W, old_labels, new_labels, moved, WX, i0, i1):
    for j in moved:
        a = old_labels[j]
        b = new_labels[j]
        for i in range(i0, i1):
            w = W[j, i]
            WX[i, a] -= w
            WX[i, b] += w


@_pjit
def _apply_moves_dense_par(W, old_labels, new_labels, moved, WX):
    # blocks of rows of WX: each entry still takes the moves in node order
    n = W.shape[0]
    n_blocks = (n + _DENSE_BLOCK - 1) // _DENSE_BLOCK
    for blk in prange(n_blocks):
        i0 = blk * _DENSE_BLOCK
        _apply_moves_dense_block(W, old_labels, new_labels, moved, WX, i0,
                                 min(i0 + _DENSE_BLOCK, n))


@_jit
def _apply_moves_dense_ser(W, old_labels, new_labels, WX):
    if _many_moved(old_labels, new_labels):
        WX[:, :] = _cluster_weights_dense_ser(W, new_labels, WX.shape[1])
        return
    moved = np.flatnonzero(old_labels != new_labels)
    _apply_moves_dense_block(W, old_labels, new_labels, moved, WX, 0, W.shape[0])


def apply_moves_dense(W, old_labels, new_labels, WX):
    """Dense twin of :func:`apply_moves_csr`; recomputes ``WX`` in one pass
    over W when more than a quarter of the nodes move.

    Large updates run in parallel (over blocks of rows of ``WX``, or over
    the chunks of the fresh pass); every entry of ``WX`` is summed in the
    same order as by the serial kernel of the compiled loop, so the result
    does not depend on the number of threads.
    """
    if _many_moved(old_labels, new_labels):
        WX[:, :] = cluster_weights_dense(W, new_labels, WX.shape[1])
        return
    moved = np.flatnonzero(old_labels != new_labels)
    if moved.shape[0] * W.shape[0] >= _PARALLEL_MIN:
        _apply_moves_dense_par(W, old_labels, new_labels, moved, WX)
    else:
        _apply_moves_dense_block(W, old_labels, new_labels, moved, WX, 0, W.shape[0])


def update_cluster_weights_csr(indptr, indices, data, old_labels, new_labels, WX):
    """Return ``W @ onehot(new_labels)`` given ``WX = W @ onehot(old_labels)``
    (a new array; ``WX`` is not modified)."""
    out = WX.copy()
    apply_moves_csr(indptr, indices, data, old_labels, new_labels, out)
    return out


def update_cluster_weights_dense(W, old_labels, new_labels, WX):
    """Dense twin of :func:`update_cluster_weights_csr`."""
    out = WX.copy()
    apply_moves_dense(W, old_labels, new_labels, out)
    return out


@_jit
def _pair_delta(assoc, w, a_j, b_j, a_i, b_i):
    # (delta_j . delta_i) w per cluster, delta = e_new - e_old
    if b_j == b_i:
        assoc[b_j] += w
    if a_j == a_i:
        assoc[a_j] += w
    if b_j == a_i:
        assoc[b_j] -= w
    if a_j == b_i:
        assoc[a_j] -= w


@_jit
def candidate_stats_csr(indptr, indices, data, degrees, old_labels, new_labels, WX,
                        vol, assoc):
    """``(vol, assoc)`` of ``new_labels`` from the state of ``old_labels``,
    without forming the new ``WX``.

    With ``D = onehot(new) - onehot(old)``:
    ``assoc' = assoc + 2 diag(D' WX) + diag(D' W D)``, and the last term only
    involves pairs of moved nodes.  Cost: the degrees of the moved nodes.
    """
    vol2 = vol.copy()
    assoc2 = assoc.copy()
    n = old_labels.shape[0]
    for j in range(n):
        a = old_labels[j]
        b = new_labels[j]
        if a == b:
            continue
        vol2[a] -= degrees[j]
        vol2[b] += degrees[j]
        assoc2[b] += 2.0 * WX[j, b]
        assoc2[a] -= 2.0 * WX[j, a]
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            if old_labels[i] != new_labels[i]:
                _pair_delta(assoc2, data[p], a, b, old_labels[i], new_labels[i])
    return vol2, assoc2


@_jit
def _candidate_stats_dense_ser(W, degrees, old_labels, new_labels, WX, vol, assoc):
    if _many_moved(old_labels, new_labels):
        fresh = _cluster_weights_dense_ser(W, new_labels, WX.shape[1])
        return cluster_stats(fresh, new_labels, degrees, WX.shape[1])
    return _candidate_stats_dense_moves(W, degrees, old_labels, new_labels, WX, vol,
                                        assoc)


@_jit
def _candidate_stats_dense_moves(W, degrees, old_labels, new_labels, WX, vol, assoc):
    vol2 = vol.copy()
    assoc2 = assoc.copy()
    moved = np.flatnonzero(old_labels != new_labels)
    for j in moved:
        a = old_labels[j]
        b = new_labels[j]
        vol2[a] -= degrees[j]
        vol2[b] += degrees[j]
        assoc2[b] += 2.0 * WX[j, b]
        assoc2[a] -= 2.0 * WX[j, a]
        for i in moved:
            _pair_delta(assoc2, W[j, i], a, b, old_labels[i], new_labels[i])
    return vol2, assoc2


def candidate_stats_dense(W, degrees, old_labels, new_labels, WX, vol, assoc):
    """Dense twin of :func:`candidate_stats_csr`; from a fresh pass over W
    (in parallel when W is large) when more than a quarter of the nodes move:
    the pair term is quadratic in the number of moved nodes."""
    if _many_moved(old_labels, new_labels):
        fresh = cluster_weights_dense(W, new_labels, WX.shape[1])
        return cluster_stats(fresh, new_labels, degrees, WX.shape[1])
    return _candidate_stats_dense_moves(W, degrees, old_labels, new_labels, WX, vol,
                                        assoc)


@_jit
def cluster_stats(WX, labels, degrees, n_clusters):
    """Cluster volumes and associations ``(vol, assoc)``, each of shape (K,)."""
    vol = np.zeros(n_clusters, dtype=np.float64)
    assoc = np.zeros(n_clusters, dtype=np.float64)
    for i in range(labels.shape[0]):
        k = labels[i]
        vol[k] += degrees[i]
        assoc[k] += WX[i, k]
    return vol, assoc


@_jit
def objective(vol, assoc):
    """Normalized association ``f = sum_k assoc_k / vol_k`` (clusters of zero
    volume contribute 0)."""
    f = 0.0
    for k in range(vol.shape[0]):
        if vol[k] > 0.0:
            f += assoc[k] / vol[k]
    return f


@_jit
def score_matrix(WX, degrees, vol, assoc):
    """Gradient score ``mu_ik = 2 WX_ik / vol_k - d_i assoc_k / vol_k**2``.

    Clusters of zero volume score ``-inf``.
    """
    n, K = WX.shape
    mu = np.empty((n, K), dtype=np.float64)
    for i in range(n):
        for k in range(K):
            if vol[k] > 0.0:
                mu[i, k] = 2.0 * WX[i, k] / vol[k] - degrees[i] * assoc[k] / (
                    vol[k] * vol[k]
                )
            else:
                mu[i, k] = -np.inf
    return mu


@_jit
def _score_terms(vol, assoc):
    K = vol.shape[0]
    inv_vol = np.zeros(K)
    pen = np.zeros(K)
    for k in range(K):
        if vol[k] > 0.0:
            inv_vol[k] = 1.0 / vol[k]
            pen[k] = assoc[k] * inv_vol[k] * inv_vol[k]
    return inv_vol, pen


@_jit
def _row_argmax(i, WX, degrees, vol, inv_vol, pen, labels, tau, new):
    c = labels[i]
    best_k = c
    best = 2.0 * WX[i, c] * inv_vol[c] - degrees[i] * pen[c] + tau
    for k in range(WX.shape[1]):
        if k != c and vol[k] > 0.0:
            s = 2.0 * WX[i, k] * inv_vol[k] - degrees[i] * pen[k]
            if s > best:
                best = s
                best_k = k
    new[i] = best_k


@_pjit
def _argmax_with_inertia_par(WX, degrees, vol, assoc, labels, tau):
    inv_vol, pen = _score_terms(vol, assoc)
    new = np.empty_like(labels)
    for i in prange(WX.shape[0]):
        _row_argmax(i, WX, degrees, vol, inv_vol, pen, labels, tau, new)
    return new


@_jit
def _argmax_with_inertia_ser(WX, degrees, vol, assoc, labels, tau):
    inv_vol, pen = _score_terms(vol, assoc)
    new = np.empty_like(labels)
    for i in range(WX.shape[0]):
        _row_argmax(i, WX, degrees, vol, inv_vol, pen, labels, tau, new)
    return new


def _argmax_with_inertia(WX, degrees, vol, assoc, labels, tau):
    if WX.size >= _PARALLEL_MIN:
        return _argmax_with_inertia_par(WX, degrees, vol, assoc, labels, tau)
    return _argmax_with_inertia_ser(WX, degrees, vol, assoc, labels, tau)


@_jit
def _guard_empty(labels, new, n_clusters):
    """Cancel every move out of a cluster that the step would empty.

    Cancelling can in turn empty a destination cluster, so this repeats until
    every cluster that was non-empty stays non-empty.
    """
    counts = np.zeros(n_clusters, dtype=np.int64)
    while True:
        counts[:] = 0
        for i in range(new.shape[0]):
            counts[new[i]] += 1
        changed = False
        for i in range(new.shape[0]):
            if new[i] != labels[i] and counts[labels[i]] == 0:
                new[i] = labels[i]
                changed = True
        if not changed:
            break
    n_moved = 0
    for i in range(new.shape[0]):
        if new[i] != labels[i]:
            n_moved += 1
    return new, n_moved


def proximal_step(WX, degrees, vol, assoc, labels, tau):
    """Row-wise proximal one-hot update with inertia.

    ``new_i = argmax_k (mu_ik + tau [k == labels_i])``; ties keep the current
    label.  Moves that would empty a cluster are cancelled, so no cluster is
    ever emptied.  Returns ``(new_labels, n_moved)``.
    """
    new = _argmax_with_inertia(WX, degrees, vol, assoc, labels, tau)
    return _guard_empty(labels, new, vol.shape[0])


@_jit
def _best_move(i, a, di, wii, WX, vol, assoc):
    """Cluster of the best strictly improving move of node ``i`` (in ``a``),
    or -1: the exact change of ``f`` (weighted kernel k-means gain)."""
    va = vol[a] - di
    aa = assoc[a] - 2.0 * WX[i, a] + wii
    base_a = assoc[a] / vol[a]
    new_a = aa / va if va > 0.0 else 0.0
    best_gain = 1e-12 * (base_a + 1e-300)  # ignore gains at rounding level
    best_b = -1
    for b in range(WX.shape[1]):
        if b == a:
            continue
        ab = assoc[b] + 2.0 * WX[i, b] + wii
        old_b = assoc[b] / vol[b] if vol[b] > 0.0 else 0.0
        gain = new_a - base_a + ab / (vol[b] + di) - old_b
        if gain > best_gain:
            best_gain = gain
            best_b = b
    return best_b


@_jit
def _move_stats(i, a, b, di, wii, WX, vol, assoc, labels, counts):
    """Move node ``i`` from ``a`` to ``b`` in every state but ``WX`` (whose
    columns ``a`` and ``b`` the caller updates from the row of ``i``)."""
    assoc[a] = assoc[a] - 2.0 * WX[i, a] + wii
    vol[a] -= di
    assoc[b] = assoc[b] + 2.0 * WX[i, b] + wii
    vol[b] += di
    labels[i] = b
    counts[a] -= 1
    counts[b] += 1


@_jit
def _cluster_counts(labels, n_clusters):
    counts = np.zeros(n_clusters, dtype=np.int64)
    for i in range(labels.shape[0]):
        counts[labels[i]] += 1
    return counts


@_jit
def local_move_sweep_csr(indptr, indices, data, degrees, labels, WX, vol, assoc):
    """One sequential sweep of exact best single moves (weighted kernel k-means
    style polishing) on a CSR graph.

    For each node in turn, the exact change of ``f`` of moving it to each other
    cluster is computed from ``WX``, ``vol`` and ``assoc``; the best strictly
    positive move is applied and the state is updated in place.  ``f`` never
    decreases.  A move that would empty a cluster is not considered.
    Updates ``labels``, ``WX``, ``vol`` and ``assoc`` in place (they are the
    solver's own work arrays) and returns the number of moves.
    """
    counts = _cluster_counts(labels, WX.shape[1])
    n_moves = 0
    for i in range(WX.shape[0]):
        di = degrees[i]
        a = labels[i]
        if di <= 0.0 or counts[a] <= 1:
            continue
        wii = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            if indices[p] == i:
                wii += data[p]
        b = _best_move(i, a, di, wii, WX, vol, assoc)
        if b >= 0:
            _move_stats(i, a, b, di, wii, WX, vol, assoc, labels, counts)
            for p in range(indptr[i], indptr[i + 1]):
                WX[indices[p], a] -= data[p]
                WX[indices[p], b] += data[p]
            n_moves += 1
    return n_moves


@_jit
def local_move_sweep_rows(rows, start, degrees, labels, WX, vol, assoc, counts):
    """Continue an exact local-move sweep over the nodes ``start .. start + m - 1``
    given their dense rows of W.

    This is the sweep of :func:`local_move_sweep_csr` for a W that exists only
    in row blocks (the matrix-free torch path streams them from its device);
    ``local_move_sweep_dense`` is this sweep over all rows at once.

    Parameters
    ----------
    rows : ndarray of shape (m, n)
        Rows ``start .. start + m - 1`` of the symmetric ``W``.
    start : int
        Index of the node of ``rows[0]``.
    degrees : ndarray of shape (n,)
    labels : int64 ndarray of shape (n,)
    WX : float64 ndarray of shape (n, K)
    vol, assoc : float64 ndarray of shape (K,)
    counts : int64 ndarray of shape (K,)
        Cluster sizes; kept up to date across calls.

    Returns
    -------
    n_moves : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._kernels_numba import local_move_sweep_rows
    >>> W = np.array([[1., 1., 0.], [1., 1., 0.], [0., 0., 1.]])
    >>> labels = np.array([0, 1, 1])
    >>> WX = W @ np.eye(2)[labels]
    >>> d = W.sum(1)
    >>> vol = np.bincount(labels, weights=d, minlength=2)
    >>> assoc = np.bincount(labels, weights=WX[np.arange(3), labels], minlength=2)
    >>> counts = np.bincount(labels, minlength=2)
    >>> local_move_sweep_rows(W, 0, d, labels, WX, vol, assoc, counts), labels
    (1, array([0, 0, 1]))
    """
    n_moves = 0
    for t in range(rows.shape[0]):
        i = start + t
        di = degrees[i]
        a = labels[i]
        if di <= 0.0 or counts[a] <= 1:
            continue
        wii = rows[t, i]
        b = _best_move(i, a, di, wii, WX, vol, assoc)
        if b >= 0:
            _move_stats(i, a, b, di, wii, WX, vol, assoc, labels, counts)
            for j in range(rows.shape[1]):
                WX[j, a] -= rows[t, j]
                WX[j, b] += rows[t, j]
            n_moves += 1
    return n_moves


@_jit
def local_move_sweep_dense(W, degrees, labels, WX, vol, assoc):
    """Dense twin of :func:`local_move_sweep_csr`."""
    counts = _cluster_counts(labels, WX.shape[1])
    return local_move_sweep_rows(W, 0, degrees, labels, WX, vol, assoc, counts)


# ------------------------------------------------------- the fused loop
@_jit
def _falcon_loop(dense, W, indptr, indices, data, degrees, labels, n_clusters,
                 max_iter, tol, tau0, gamma_backtrack, delta, polish, max_polish,
                 max_backtrack, shrink_tau):
    """The proximal loop of :func:`sklearn_falcon._solver.solve` for one
    graph, compiled: same steps, same acceptance test, same stopping rules,
    same polish, so the same labels and objective path (tested).

    ``dense`` selects the graph held in ``W`` (dense) or in ``indptr``,
    ``indices``, ``data`` (CSR); the other one is an empty placeholder.
    Serial kernels only (they sum in the same order as the parallel ones,
    so both loops give the same result; and a cached serial function that
    calls a parallel one can crash when loaded from Numba's cache, numba
    issue #8578): :attr:`sklearn_falcon._backend.NumbaProblem.compiled_loop`
    says on which graphs it beats the Python loop on the parallel kernels.
    ``labels`` is copied; ``tau0`` is already in absolute score units.
    """
    X = labels.copy()
    if dense:
        WX = _cluster_weights_dense_ser(W, X, n_clusters)
    else:
        WX = _cluster_weights_csr_ser(indptr, indices, data, X, n_clusters)
    vol, assoc = cluster_stats(WX, X, degrees, n_clusters)
    f = objective(vol, assoc)
    path = np.empty(max_iter + max_polish + 1, dtype=np.float64)
    path[0] = f
    n_path = 1
    tau_cur = tau0
    n_iter = 0
    n_back = 0
    converged = False
    for _ in range(max_iter):
        trial_tau = tau_cur
        acc_X, acc_vol, acc_assoc, acc_f, acc_moved = X, vol, assoc, f, 0
        for _b in range(max_backtrack):
            new = _argmax_with_inertia_ser(WX, degrees, vol, assoc, X, trial_tau)
            cand, moved = _guard_empty(X, new, n_clusters)
            if moved > 0:
                if dense:
                    cvol, cassoc = _candidate_stats_dense_ser(W, degrees, X, cand,
                                                              WX, vol, assoc)
                else:
                    cvol, cassoc = candidate_stats_csr(indptr, indices, data, degrees,
                                                       X, cand, WX, vol, assoc)
                fc = objective(cvol, cassoc)
            else:
                cvol, cassoc, fc = vol, assoc, f
            # ||X+ - X||_F^2 = 2 * (number of moved rows)
            if moved == 0 or fc >= f + delta * trial_tau * moved:
                acc_X, acc_vol, acc_assoc, acc_f, acc_moved = (cand, cvol, cassoc,
                                                               fc, moved)
                break
            n_back += 1
            trial_tau *= gamma_backtrack
        # still rejected after max_backtrack: X is kept (no move)
        gain = acc_f - f
        n_iter += 1
        if acc_moved > 0:
            if dense:
                _apply_moves_dense_ser(W, X, acc_X, WX)
            else:
                apply_moves_csr(indptr, indices, data, X, acc_X, WX)
            path[n_path] = acc_f
            n_path += 1
        X, vol, assoc = acc_X, acc_vol, acc_assoc
        rel = gain / max(abs(f), 1e-300)
        f = acc_f
        if acc_moved == 0 or rel < tol:
            converged = True
            break
        if shrink_tau:
            tau_cur = max(trial_tau / gamma_backtrack, tau0)
        else:
            tau_cur = trial_tau
    n_polish = 0
    if polish:
        for _ in range(max_polish):
            if dense:
                m = local_move_sweep_dense(W, degrees, X, WX, vol, assoc)
            else:
                m = local_move_sweep_csr(indptr, indices, data, degrees, X, WX, vol,
                                         assoc)
            if m == 0:
                break
            f = objective(vol, assoc)
            path[n_path] = f
            n_path += 1
            n_polish += 1
        f = objective(vol, assoc)
    return X, f, path[:n_path].copy(), n_iter, n_back, n_polish, converged, tau_cur


def falcon_loop_dense(W, degrees, labels, n_clusters, max_iter, tol, tau0,
                      gamma_backtrack, delta, polish, max_polish, max_backtrack,
                      shrink_tau):
    """Falcon's whole proximal loop (and polish) on a dense graph, compiled.

    Returns ``(labels, f, objective_path, n_iter, n_backtracks, n_polish,
    converged, tau)``; see :func:`_falcon_loop`.
    """
    empty_i = np.zeros(1, dtype=np.int64)
    return _falcon_loop(True, W, empty_i, empty_i[:0], np.zeros(0, dtype=W.dtype),
                        degrees, labels, n_clusters, max_iter, tol, tau0,
                        gamma_backtrack, delta, polish, max_polish, max_backtrack,
                        shrink_tau)


def falcon_loop_csr(indptr, indices, data, degrees, labels, n_clusters, max_iter, tol,
                    tau0, gamma_backtrack, delta, polish, max_polish, max_backtrack,
                    shrink_tau):
    """CSR twin of :func:`falcon_loop_dense`."""
    return _falcon_loop(False, np.zeros((0, 0), dtype=data.dtype), indptr, indices,
                        data, degrees, labels, n_clusters, max_iter, tol, tau0,
                        gamma_backtrack, delta, polish, max_polish, max_backtrack,
                        shrink_tau)


@_jit
def heaviest_neighbor_csr(indptr, indices, data, degrees):
    """For each node, the neighbour ``j != i`` maximizing ``W_ij / (d_i d_j)``
    (ties: smallest index); ``i`` itself when it has no other neighbour."""
    n = indptr.shape[0] - 1
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        best = -1.0
        best_j = i
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j == i or degrees[j] <= 0.0:
                continue
            s = data[p] / degrees[j]
            if s > best or (s == best and j < best_j):
                best = s
                best_j = j
        out[i] = best_j
    return out


@_jit
def _argmax4(x):
    """Index of a maximum of ``x`` (-1 if all are ``-inf``; not necessarily
    the first of tied maxima), from four independent running maxima: one
    running maximum is a chain of dependent compares, 3-4x slower."""
    m = x.shape[0]
    t0 = t1 = t2 = t3 = -np.inf
    a0 = a1 = a2 = a3 = -1
    j = 0
    while j + 4 <= m:
        if x[j] > t0:
            t0, a0 = x[j], j
        if x[j + 1] > t1:
            t1, a1 = x[j + 1], j + 1
        if x[j + 2] > t2:
            t2, a2 = x[j + 2], j + 2
        if x[j + 3] > t3:
            t3, a3 = x[j + 3], j + 3
        j += 4
    while j < m:
        if x[j] > t0:
            t0, a0 = x[j], j
        j += 1
    if t1 > t0:
        t0, a0 = t1, a1
    if t3 > t2:
        t2, a2 = t3, a3
    return a2 if t2 > t0 else a0


@_jit
def heaviest_neighbor_dense(W, degrees):
    """Dense twin of :func:`heaviest_neighbor_csr` (ties: smallest index).

    Each row is first scored with the inverse degrees, in a branch-free pass
    that vectorizes, and its maximum located; only if other entries lie
    within rounding of it are the exact ratios ``W_ij / d_j`` compared, so
    the answer is the one of the exact division, at a third of its cost.
    """
    n = W.shape[0]
    out = np.empty(n, dtype=np.int64)
    inv = np.zeros(n, dtype=np.float64)
    for j in range(n):
        if degrees[j] > 0.0:
            inv[j] = 1.0 / degrees[j]
    score = np.empty(n, dtype=np.float64)
    for i in range(n):
        for j in range(n):
            w = np.float64(W[i, j])
            score[j] = w * inv[j] if w > 0.0 else -1.0
        score[i] = -1.0
        top_j = _argmax4(score)
        if score[top_j] <= 0.0:
            out[i] = i
            continue
        # |w * (1/d) - w / d| is a few ulps: 1e-12 relative is a safe margin
        cut = score[top_j] * (1.0 - 1e-12)
        n_near = 0
        for j in range(n):
            n_near += score[j] >= cut
        if n_near == 1:
            out[i] = top_j
            continue
        best = -1.0
        best_j = i
        for j in range(n):
            if score[j] >= cut:
                s = np.float64(W[i, j]) / degrees[j]
                if s > best:
                    best = s
                    best_j = j
        out[i] = best_j
    return out


@_jit
def forest_components(target):
    """Connected components of the graph with edges ``i -- target[i]``.

    Returns ``(n_components, mapping)``; components are numbered in the
    order of their smallest node, as :func:`scipy.sparse.csgraph.
    connected_components` numbers them.  Union-find with path halving.
    """
    n = target.shape[0]
    parent = np.arange(n)
    for i in range(n):
        a = i
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        b = target[i]
        while parent[b] != b:
            parent[b] = parent[parent[b]]
            b = parent[b]
        if a != b:
            if a < b:
                parent[b] = a
            else:
                parent[a] = b
    mapping = np.empty(n, dtype=np.int64)
    root_label = np.full(n, -1, dtype=np.int64)
    n_comp = 0
    for i in range(n):
        r = i
        while parent[r] != r:
            r = parent[r]
        if root_label[r] < 0:
            root_label[r] = n_comp
            n_comp += 1
        mapping[i] = root_label[r]
    return n_comp, mapping


@_jit
def coarsen_csr(indptr, indices, data, mapping, n_coarse):
    """``P' W P`` for CSR W, with ``P`` the one-hot matrix of ``mapping``.

    One pass over the nonzeros, grouped by coarse row, with a marker array
    (no sparse-sparse products and no transposes; scipy's ``P.T @ W @ P``
    took 40% of a 20,000-node fit).  Returns ``(indptr, indices, data)`` of
    the coarse CSR matrix, its column indices in order of first appearance
    (not sorted); sums are accumulated in float64 and returned in W's
    dtype.
    """
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
    out_idx = np.empty(indices.shape[0], dtype=np.int64)
    acc = np.empty(indices.shape[0], dtype=np.float64)
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
    return out_ptr, out_idx[:nnz].copy(), acc[:nnz].astype(data.dtype)


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


@_jit
def max_asymmetry_dense(W):
    """``max |W - W'|`` of a square dense matrix, in cache-sized tiles."""
    n = W.shape[0]
    tile = 64
    worst = 0.0
    for bi in range(0, n, tile):
        for bj in range(bi, n, tile):
            for i in range(bi, min(bi + tile, n)):
                for j in range(max(bj, i + 1), min(bj + tile, n)):
                    d = abs(np.float64(W[i, j]) - np.float64(W[j, i]))
                    if d > worst:
                        worst = d
    return worst
