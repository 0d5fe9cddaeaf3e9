"""Numba kernels of the Falcon solver: the pass over ``W``, its incremental
updates, the cluster statistics and the proximal step.

Every function here is a function on arrays: no validation, no estimator
state, no torch.  :mod:`sklearn_falcon._backends._torch._kernels` implements
the public names with the same semantics on ``torch.Tensor`` (batched).  The
copy-free backtracking helpers (``apply_moves_dense``,
``candidate_stats_dense``) exist only here: they are sequential, in-place
CPU work.  The iteration on a CSR graph, which never forms ``WX``, is in
:mod:`._csr`; the exact local moves are in :mod:`._polish`; the compiled
proximal loop, built from these kernels, is
:mod:`sklearn_falcon._solver._compiled`.

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
* Functions whose name ends in ``_ser`` are serial twins of ``_par`` ones:
  the same sums in the same order, for the compiled loop, which never calls
  a parallel kernel (a cached serial function that calls a parallel one can
  crash when loaded from Numba's cache, numba issue #8578).
"""

import numpy as np

from ..._jit import PARALLEL_MIN, prange
from ..._jit import jit as _jit
from ..._jit import pjit as _pjit


@_jit(inline=True)
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
# Below _DENSE_PAR_MIN entries (the compiled loop's limit,
# NumbaProblem.COMPILED_LOOP_MAX_ENTRIES) the pass is one plain serial pass: the chunk
# partials cost the single-threaded compiled loop up to 2x at 1,024 nodes.
_DENSE_CHUNKS = 16
_DENSE_PARTIAL_BYTES = 64 << 20
_DENSE_PAR_MIN = 20_000_000


@_jit(inline=True)
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
    if data.shape[0] >= PARALLEL_MIN:
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


@_jit(inline=True)
def _n_moved(old_labels, new_labels):
    m = 0
    for i in range(old_labels.shape[0]):
        if old_labels[i] != new_labels[i]:
            m += 1
    return m


@_jit
def _moved_nodes(old_labels, new_labels):
    """Indices of the nodes whose label changes, in order (``np.flatnonzero``
    costs 0.7 s of compile time)."""
    moved = np.empty(_n_moved(old_labels, new_labels), dtype=np.int64)
    m = 0
    for i in range(old_labels.shape[0]):
        if old_labels[i] != new_labels[i]:
            moved[m] = i
            m += 1
    return moved


@_jit(inline=True)
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
        fresh = _cluster_weights_dense_ser(W, new_labels, WX.shape[1])
        for i in range(WX.shape[0]):  # (a slice assignment compiles 3 s of
            for k in range(WX.shape[1]):  # error formatting)
                WX[i, k] = fresh[i, k]
        return
    moved = _moved_nodes(old_labels, new_labels)
    _apply_moves_dense_block(W, old_labels, new_labels, moved, WX, 0, W.shape[0])


def apply_moves_dense(W, old_labels, new_labels, WX):
    """In place: turn ``WX = W @ onehot(old_labels)`` into ``W @
    onehot(new_labels)``, from the rows of the moved nodes (``W`` is
    symmetric); recomputes ``WX`` in one pass over W when more than a quarter
    of the nodes move.

    Large updates run in parallel (over blocks of rows of ``WX``, or over
    the chunks of the fresh pass); every entry of ``WX`` is summed in the
    same order as by the serial kernel of the compiled loop, so the result
    does not depend on the number of threads.
    """
    if _many_moved(old_labels, new_labels):
        WX[:, :] = cluster_weights_dense(W, new_labels, WX.shape[1])
        return
    moved = np.flatnonzero(old_labels != new_labels)
    if moved.shape[0] * W.shape[0] >= PARALLEL_MIN:
        _apply_moves_dense_par(W, old_labels, new_labels, moved, WX)
    else:
        _apply_moves_dense_block(W, old_labels, new_labels, moved, WX, 0, W.shape[0])


@_jit(inline=True)
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


@_jit(inline=True)
def _single_move_delta(vol, assoc, dj, a, b, wa, wb):
    """The terms of a node of degree ``dj`` moving from ``a`` to ``b`` that do
    not involve other moved nodes: its degree, and ``2 diag(D' WX)``
    (``wa``, ``wb``: its ``WX`` at ``a`` and ``b``)."""
    vol[a] -= dj
    vol[b] += dj
    assoc[b] += 2.0 * wb
    assoc[a] -= 2.0 * wa


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
    moved = _moved_nodes(old_labels, new_labels)
    for j in moved:
        a = old_labels[j]
        b = new_labels[j]
        _single_move_delta(vol2, assoc2, degrees[j], a, b, WX[j, a], WX[j, b])
        for i in moved:
            _pair_delta(assoc2, W[j, i], a, b, old_labels[i], new_labels[i])
    return vol2, assoc2


def candidate_stats_dense(W, degrees, old_labels, new_labels, WX, vol, assoc):
    """``(vol, assoc)`` of ``new_labels`` from the state of ``old_labels``,
    without forming the new ``WX``: with ``D = onehot(new) - onehot(old)``,
    ``assoc' = assoc + 2 diag(D' WX) + diag(D' W D)``, where the last term
    involves only pairs of moved nodes.  From a fresh pass over W
    (in parallel when W is large) when more than a quarter of the nodes move:
    the pair term is quadratic in the number of moved nodes."""
    if _many_moved(old_labels, new_labels):
        fresh = cluster_weights_dense(W, new_labels, WX.shape[1])
        return cluster_stats(fresh, new_labels, degrees, WX.shape[1])
    return _candidate_stats_dense_moves(W, degrees, old_labels, new_labels, WX, vol,
                                        assoc)


@_jit
def cluster_pair_weights_csr(indptr, indices, data, labels, n_clusters):
    """One pass over the nonzeros of a CSR W (no ``(n, K)`` matrix):
    ``C[a, b] = sum of W_ij`` over ``labels_i = a``, ``labels_j = b``, and per
    node its weight to its own cluster and its self-loop.  Returns
    ``(C, own, self_w)``."""
    n = indptr.shape[0] - 1
    C = np.zeros((n_clusters, n_clusters), dtype=np.float64)
    own = np.zeros(n, dtype=np.float64)
    self_w = np.zeros(n, dtype=np.float64)
    for i in range(n):
        a = labels[i]
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            b = labels[j]
            C[a, b] += data[p]
            if b == a:
                own[i] += data[p]
            if j == i:
                self_w[i] += data[p]
    return C, own, self_w


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


@_jit(inline=True)
def _score_terms(vol, assoc):
    """``(1 / vol_k, assoc_k / vol_k**2)``, zero for clusters of zero volume."""
    K = vol.shape[0]
    inv_vol = np.zeros(K)
    pen = np.zeros(K)
    for k in range(K):
        if vol[k] > 0.0:
            inv_vol[k] = 1.0 / vol[k]
            pen[k] = assoc[k] * inv_vol[k] * inv_vol[k]
    return inv_vol, pen


@_jit(inline=True)
def _score(wx, d, inv_vol, pen):
    """Falcon's gradient score of one (node, cluster) pair: the one formula
    of the step, the score matrix and out-of-sample prediction."""
    return 2.0 * wx * inv_vol - d * pen


@_jit
def score_matrix(WX, degrees, vol, assoc):
    """Gradient score ``mu_ik = 2 WX_ik / vol_k - d_i assoc_k / vol_k**2``.

    ``WX`` may hold rows of nodes outside the graph (their weights to its
    clusters, as in out-of-sample prediction).  Clusters of zero volume
    score ``-inf``.
    """
    n, K = WX.shape
    inv_vol, pen = _score_terms(vol, assoc)
    mu = np.empty((n, K), dtype=np.float64)
    for i in range(n):
        for k in range(K):
            if vol[k] > 0.0:
                mu[i, k] = _score(WX[i, k], degrees[i], inv_vol[k], pen[k])
            else:
                mu[i, k] = -np.inf
    return mu


@_jit
def _row_argmax(i, WX, degrees, vol, inv_vol, pen, labels, tau, new):
    c = labels[i]
    best_k = c
    best = _score(WX[i, c], degrees[i], inv_vol[c], pen[c]) + tau
    for k in range(WX.shape[1]):
        if k != c and vol[k] > 0.0:
            s = _score(WX[i, k], degrees[i], inv_vol[k], pen[k])
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
    if WX.size >= PARALLEL_MIN:
        return _argmax_with_inertia_par(WX, degrees, vol, assoc, labels, tau)
    return _argmax_with_inertia_ser(WX, degrees, vol, assoc, labels, tau)


@_jit(inline=True)
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

