"""Numba kernels of the proximal iteration on a CSR graph, row by row.

A CSR iteration never forms the ``(n, K)`` matrix ``WX = W @ onehot(X)``:
at a million nodes and K = 20 that matrix (160 MB) is larger than the graph
itself, and reading it for the step, then updating it at random positions
for every moved node, made an iteration 10-30x slower than a copy of the
graph.  Instead, one pass over the rows of ``W`` (:func:`row_choices`)
gathers each row's weights to the clusters present among its neighbours in
a K-sized scratch, scores them, and keeps per node only what every trial
step of the iteration needs:

* ``best``: the best cluster other than the node's own (the first index of
  the maximal score, as in the dense step), or -1;
* ``s_best``, ``s_own``: the scores of ``best`` and of the own cluster, so
  that a trial step with inertia ``tau`` is ``s_best > s_own + tau``
  (:func:`threshold_step`), whatever ``tau``: backtracking does not read
  ``W`` again;
* ``w_own``, ``w_best``: ``WX`` at the own and the best cluster, the terms
  of the candidate's statistics (:func:`candidate_stats_rows`), which then
  read only the rows of the moved nodes.

Clusters absent from a row have ``WX = 0`` and the score ``-d_i pen_k``; the
best of them is found by walking the clusters in order of ``pen`` (ties by
index), so the chosen cluster is the dense step's, tie for tie.  The sums
are those of the ``WX`` pass (row order, float64), so on weights whose sums
are exact (kNN connectivity, unweighted graphs) every result equals the
``WX``-based iteration's bit for bit; on other weights the scores differ in
the last bits, because ``WX`` is summed afresh each iteration rather than
updated.

The passes run in parallel over fixed blocks of ``ROW_BLOCK`` rows when
the graph has ``PARALLEL_MIN`` stored entries or more.  Every row's result
comes from one thread, and the reductions add their per-block partial sums
in block order, in the serial twins (``*_ser``, for the compiled loop) as
in the parallel kernels: the result does not depend on the number of
threads or on the loop.  Conventions as in :mod:`._kernels`.
"""

import numpy as np

from ..._jit import PARALLEL_MIN, jit, pjit, prange
from ._kernels import _guard_empty, _pair_delta, _score, _score_terms, _single_move_delta

__all__ = ["candidate_stats_rows", "cluster_stats_csr", "own_cluster_weights_csr",
           "row_choices", "threshold_step"]

ROW_BLOCK = 1 << 14  # rows per task of the parallel passes (fixed)


# ------------------------------------------------------------ one row
@jit(inline=True)
def _scan_row(i, indptr, indices, data, labels, acc, mark, touched):
    """Weights of row ``i`` to the clusters of its neighbours: ``acc[k]`` for
    the ``touched[:n]`` clusters (``mark[k] == i``); returns ``n``."""
    n_t = 0
    for p in range(indptr[i], indptr[i + 1]):
        k = labels[indices[p]]
        if mark[k] != i:
            mark[k] = i
            acc[k] = 0.0
            touched[n_t] = k
            n_t += 1
        acc[k] += data[p]
    return n_t


@jit(inline=True)
def _better(s, k, s_b, b):
    """Whether score ``s`` of cluster ``k`` beats ``s_b`` of ``b``: higher, or
    equal with a smaller index (the dense step's first maximum)."""
    return s > s_b or (s == s_b and k < b)


@jit(inline=True)
def _best_absent(i, c, d, mark, pen, order):
    """The best cluster absent from row ``i`` (not ``c``; -1 if none).

    Absent clusters score ``-d pen_k``, highest for the smallest
    ``d pen_k``; ``order`` lists the clusters of nonzero volume by ``pen``
    then index, and among equal products the smallest index wins.
    """
    m = order.shape[0]
    q = 0
    while q < m and (order[q] == c or mark[order[q]] == i):
        q += 1
    if q == m:
        return -1
    k_best = order[q]
    prod = d * pen[k_best]
    q += 1
    while q < m and d * pen[order[q]] == prod:
        k = order[q]
        if k < k_best and k != c and mark[k] != i:
            k_best = k
        q += 1
    return k_best


@jit
def _choose_block(r0, r1, indptr, indices, data, labels, degrees, vol, inv_vol, pen,
                  order, best, s_best, s_own, w_own, w_best):
    K = vol.shape[0]
    acc = np.zeros(K)
    mark = np.full(K, -1, dtype=np.int64)
    touched = np.empty(K, dtype=np.int64)
    for i in range(r0, r1):
        n_t = _scan_row(i, indptr, indices, data, labels, acc, mark, touched)
        c = labels[i]
        d = degrees[i]
        wo = acc[c] if mark[c] == i else 0.0
        b = -1
        sb = -np.inf
        wb = 0.0
        for t in range(n_t):
            k = touched[t]
            if k != c and vol[k] > 0.0:
                s = _score(acc[k], d, inv_vol[k], pen[k])
                if _better(s, k, sb, b):
                    b, sb, wb = k, s, acc[k]
        ka = _best_absent(i, c, d, mark, pen, order)
        if ka >= 0:
            s = _score(0.0, d, inv_vol[ka], pen[ka])
            if _better(s, ka, sb, b):
                b, sb, wb = ka, s, 0.0
        best[i] = b
        s_best[i] = sb
        s_own[i] = _score(wo, d, inv_vol[c], pen[c])
        w_own[i] = wo
        w_best[i] = wb


@jit
def _score_order(vol, assoc):
    """``(inv_vol, pen, order)``: the score terms, and the clusters of
    nonzero volume sorted by ``pen`` then index."""
    inv_vol, pen = _score_terms(vol, assoc)
    K = vol.shape[0]
    order = np.empty(K, dtype=np.int64)
    m = 0
    for k in range(K):  # insertion sort: K is small, and stable
        if vol[k] > 0.0:
            q = m
            while q > 0 and pen[order[q - 1]] > pen[k]:
                order[q] = order[q - 1]
                q -= 1
            order[q] = k
            m += 1
    return inv_vol, pen, order[:m]


@jit
def _row_choices_ser(indptr, indices, data, labels, degrees, vol, assoc, best,
                     s_best, s_own, w_own, w_best):
    inv_vol, pen, order = _score_order(vol, assoc)
    _choose_block(0, labels.shape[0], indptr, indices, data, labels, degrees, vol,
                  inv_vol, pen, order, best, s_best, s_own, w_own, w_best)


@pjit
def _row_choices_par(indptr, indices, data, labels, degrees, vol, assoc, best,
                     s_best, s_own, w_own, w_best):
    inv_vol, pen, order = _score_order(vol, assoc)
    n = labels.shape[0]
    for blk in prange((n + ROW_BLOCK - 1) // ROW_BLOCK):
        r0 = blk * ROW_BLOCK
        _choose_block(r0, min(r0 + ROW_BLOCK, n), indptr, indices, data, labels,
                      degrees, vol, inv_vol, pen, order, best, s_best, s_own, w_own,
                      w_best)


def row_choices(indptr, indices, data, labels, degrees, vol, assoc, best, s_best,
                s_own, w_own, w_best):
    """One pass over ``W``: fill the per-node arrays ``best``, ``s_best``,
    ``s_own``, ``w_own``, ``w_best`` (see the module docstring) for the
    labels ``labels`` with cluster statistics ``(vol, assoc)``."""
    kernel = _row_choices_par if data.shape[0] >= PARALLEL_MIN else _row_choices_ser
    kernel(indptr, indices, data, labels, degrees, vol, assoc, best, s_best, s_own,
           w_own, w_best)


@jit
def threshold_step(best, s_best, s_own, labels, tau, n_clusters):
    """The proximal step with inertia ``tau`` from the row choices: node ``i``
    moves to ``best[i]`` when ``s_best[i] > s_own[i] + tau`` (the dense
    step's test), then moves that would empty a cluster are cancelled.
    Returns ``(new_labels, n_moved)``."""
    new = labels.copy()
    for i in range(labels.shape[0]):
        if best[i] >= 0 and s_best[i] > s_own[i] + tau:
            new[i] = best[i]
    return _guard_empty(labels, new, n_clusters)


# ------------------------------------------------------ statistics
@jit
def _own_block(r0, r1, indptr, indices, data, labels, own):
    for i in range(r0, r1):
        own[i] = _row_weight_to(i, labels[i], indptr, indices, data, labels)


@pjit
def _own_weights_par(indptr, indices, data, labels):
    n = labels.shape[0]
    own = np.empty(n)
    for blk in prange((n + ROW_BLOCK - 1) // ROW_BLOCK):
        r0 = blk * ROW_BLOCK
        _own_block(r0, min(r0 + ROW_BLOCK, n), indptr, indices, data, labels, own)
    return own


@jit
def _own_weights_ser(indptr, indices, data, labels):
    own = np.empty(labels.shape[0])
    _own_block(0, labels.shape[0], indptr, indices, data, labels, own)
    return own


def own_cluster_weights_csr(indptr, indices, data, labels):
    """``WX[i, labels[i]]`` for every node of a CSR graph, without the
    ``(n, K)`` matrix: the sums of the ``WX`` pass, in the same order."""
    if data.shape[0] >= PARALLEL_MIN:
        return _own_weights_par(indptr, indices, data, labels)
    return _own_weights_ser(indptr, indices, data, labels)


@jit
def _stats_from_own(own, labels, degrees, n_clusters):
    vol = np.zeros(n_clusters)
    assoc = np.zeros(n_clusters)
    for i in range(labels.shape[0]):
        k = labels[i]
        vol[k] += degrees[i]
        assoc[k] += own[i]
    return vol, assoc


@jit
def _cluster_stats_csr_ser(indptr, indices, data, labels, degrees, n_clusters):
    own = _own_weights_ser(indptr, indices, data, labels)
    return _stats_from_own(own, labels, degrees, n_clusters)


def cluster_stats_csr(indptr, indices, data, labels, degrees, n_clusters):
    """``(vol, assoc)`` of ``labels`` in one pass over a CSR graph (the sums
    of ``cluster_stats`` on the ``WX`` of the pass, in the same order)."""
    own = own_cluster_weights_csr(indptr, indices, data, labels)
    return _stats_from_own(own, labels, degrees, n_clusters)


# ------------------------------------------------ candidate statistics
@jit(inline=True)
def _row_weight_to(j, b, indptr, indices, data, labels):
    """``WX[j, b]`` from the row of ``j`` (in the order of the pass)."""
    acc = 0.0
    for p in range(indptr[j], indptr[j + 1]):
        if labels[indices[p]] == b:
            acc += data[p]
    return acc


@jit
def _candidate_block(r0, r1, indptr, indices, data, degrees, old, new, best, w_own,
                     w_best, vol, assoc):
    for j in range(r0, r1):
        a = old[j]
        b = new[j]
        if a == b:
            continue
        # the step moves a node to its best cluster; any other move (a
        # caller's own candidate) sums its weight from the row
        wb = w_best[j] if b == best[j] else _row_weight_to(j, b, indptr, indices,
                                                            data, old)
        _single_move_delta(vol, assoc, degrees[j], a, b, w_own[j], wb)
        for p in range(indptr[j], indptr[j + 1]):
            i = indices[p]
            if old[i] != new[i]:
                _pair_delta(assoc, data[p], a, b, old[i], new[i])


@jit
def _add_partials(part, vol, assoc):
    """Add the per-block partial sums in block order."""
    for c in range(part.shape[0]):
        for k in range(vol.shape[0]):
            vol[k] += part[c, 0, k]
            assoc[k] += part[c, 1, k]


@jit
def _candidate_stats_ser(indptr, indices, data, degrees, old, new, best, w_own,
                         w_best, vol, assoc):
    vol2 = vol.copy()
    assoc2 = assoc.copy()
    n = old.shape[0]
    n_blocks = (n + ROW_BLOCK - 1) // ROW_BLOCK
    _candidate_block(0, min(ROW_BLOCK, n), indptr, indices, data, degrees, old, new,
                     best, w_own, w_best, vol2, assoc2)
    part = np.zeros((max(n_blocks - 1, 0), 2, vol.shape[0]))
    for c in range(n_blocks - 1):
        r0 = (c + 1) * ROW_BLOCK
        _candidate_block(r0, min(r0 + ROW_BLOCK, n), indptr, indices, data, degrees,
                         old, new, best, w_own, w_best, part[c, 0], part[c, 1])
    _add_partials(part, vol2, assoc2)
    return vol2, assoc2


@pjit
def _candidate_stats_par(indptr, indices, data, degrees, old, new, best, w_own,
                         w_best, vol, assoc):
    vol2 = vol.copy()
    assoc2 = assoc.copy()
    n = old.shape[0]
    n_blocks = (n + ROW_BLOCK - 1) // ROW_BLOCK
    part = np.zeros((max(n_blocks - 1, 0), 2, vol.shape[0]))
    for blk in prange(n_blocks):
        r0 = blk * ROW_BLOCK
        r1 = min(r0 + ROW_BLOCK, n)
        if blk == 0:
            _candidate_block(r0, r1, indptr, indices, data, degrees, old, new, best,
                             w_own, w_best, vol2, assoc2)
        else:
            _candidate_block(r0, r1, indptr, indices, data, degrees, old, new, best,
                             w_own, w_best, part[blk - 1, 0], part[blk - 1, 1])
    _add_partials(part, vol2, assoc2)
    return vol2, assoc2


def candidate_stats_rows(indptr, indices, data, degrees, old, new, best, w_own,
                         w_best, vol, assoc):
    """``(vol, assoc)`` of ``new`` from those of ``old``, reading only the rows
    of the moved nodes.

    With ``D = onehot(new) - onehot(old)``:
    ``assoc' = assoc + 2 diag(D' WX) + diag(D' W D)``; the moved nodes' own
    terms come from ``w_own`` and ``w_best`` (:func:`row_choices` of
    ``old``: the step moves a node to its ``best`` cluster; another move
    reads its row), the last term from the pairs of moved nodes.  ``vol``
    and ``assoc`` are not modified.
    """
    kernel = (_candidate_stats_par if data.shape[0] >= PARALLEL_MIN
              else _candidate_stats_ser)
    return kernel(indptr, indices, data, degrees, old, new, best, w_own, w_best, vol,
                  assoc)
