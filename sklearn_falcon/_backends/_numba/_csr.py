"""Numba kernels of the proximal iteration on a CSR graph, row by row.

A CSR iteration never forms the ``(n, K)`` matrix ``WX = W @ onehot(X)``:
at a million nodes and K = 20 that matrix (160 MB) is larger than the graph
itself, and reading it for the step, then updating it at random positions
for every moved node, made an iteration 10-30x slower than a copy of the
graph.  Instead, one pass over the rows of ``W`` (:func:`row_choices`) sums
each row's weights to the clusters in a K-sized scratch, scores them, and
keeps per node only what every trial step of the iteration needs:

* ``best``: the best cluster other than the node's own (the first index of
  the maximal score, as in the dense step), or -1;
* ``s_best``, ``s_own``: the scores of ``best`` and of the own cluster, so
  that a trial step with inertia ``tau`` is ``s_best > s_own + tau``
  (:func:`threshold_step`), whatever ``tau``: backtracking does not read
  ``W`` again;
* ``w_own``, ``w_best``: ``WX`` at the own and the best cluster, the terms
  of the candidate's statistics (:func:`candidate_stats_rows`), which then
  read only the rows of the moved nodes.

The sums are those of the ``WX`` pass (row order, float64) and the scores
those of the dense step (the same formula, ties to the first index), so on
weights whose sums are exact (kNN connectivity, unweighted graphs) every
result equals the ``WX``-based iteration's bit for bit; on other weights
the scores may differ in the last bits, because ``WX`` is summed afresh each
iteration rather than updated.

The pass is bound by gathering the labels of each row's neighbours (random
reads): the labels are held in the narrowest integer type that fits ``K``
(:func:`label_dtype`), which made the pass 2-3x faster than with ``int64``
on a million nodes.  All K clusters of a row are scored, a loop that
vectorizes; scoring only the clusters present among a row's neighbours was
2x slower at K = 20 and faster from about K = 60 on (10 neighbours per
node; ``benchmarks/results/bandwidth.md``).

The passes run in parallel over fixed blocks of ``ROW_BLOCK`` rows when
the graph has ``CSR_PARALLEL_MIN`` stored entries or more; every row's result
comes from one thread, and the reduction of the candidate statistics adds
per-block partial sums in block order: the result does not depend on the
number of threads.  Below ``CSR_PARALLEL_MIN`` the serial kernels (those of the
compiled loop) run in both loops.  Conventions as in :mod:`._kernels`,
except that labels may have any signed integer type.
"""

import numpy as np

from ..._jit import PARALLEL_MIN, inlined, jit, pjit, prange
from ._kernels import (
    _guard_empty,
    _many_moved,
    _pair_delta,
    _score,
    _score_terms,
    _single_move_delta,
)

__all__ = ["candidate_stats_rows", "cluster_stats_csr", "label_dtype",
           "own_cluster_weights_csr", "row_choices", "threshold_step"]

ROW_BLOCK = 4096  # rows per task of the parallel passes (fixed)

# Stored entries from which the passes run in parallel.  At 1M entries
# (a 100k-node graph) two threads spent 1.5x the CPU time of one on a pass
# (OpenMP workers spin between the short parallel regions), at 10M 1.1x
# (benchmarks/results/bandwidth.md): parallel from 1M on, as the other kernels.
CSR_PARALLEL_MIN = PARALLEL_MIN


def label_dtype(n_clusters):
    """The narrowest signed integer type holding the labels ``0 .. K - 1``
    (and -1)."""
    for dt in (np.int8, np.int16, np.int32):
        if n_clusters <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


@jit(inline=True)
def _n_blocks(n):
    return (n + ROW_BLOCK - 1) // ROW_BLOCK


@jit
def _choose_block(blk, indptr, indices, data, labels, degrees, vol, inv_vol, pen,
                  best, s_best, s_own, w_own, w_best):
    """:func:`row_choices` of the rows of block ``blk``."""
    K = vol.shape[0]
    acc = np.zeros(K)
    s = np.empty(K)
    r0 = blk * ROW_BLOCK
    for i in range(r0, min(r0 + ROW_BLOCK, labels.shape[0])):
        for p in range(indptr[i], indptr[i + 1]):
            acc[labels[indices[p]]] += data[p]
        d = degrees[i]
        c = labels[i]
        for k in range(K):  # vectorizes
            s[k] = _score(acc[k], d, inv_vol[k], pen[k]) if vol[k] > 0.0 else -np.inf
        s_own[i] = _score(acc[c], d, inv_vol[c], pen[c])
        w_own[i] = acc[c]
        s[c] = -np.inf
        b = -1
        sb = -np.inf
        for k in range(K):  # the first maximum, as in the dense step
            if s[k] > sb:
                sb = s[k]
                b = k
        best[i] = b
        s_best[i] = sb
        w_best[i] = acc[b] if b >= 0 else 0.0
        for k in range(K):
            acc[k] = 0.0


# the serial pass inlines the block (the parallel one calls it per task)
_choose_block_inline = inlined(_choose_block)


@jit
def _row_choices_ser(indptr, indices, data, labels, degrees, vol, assoc, best,
                     s_best, s_own, w_own, w_best):
    inv_vol, pen = _score_terms(vol, assoc)
    for blk in range(_n_blocks(labels.shape[0])):
        _choose_block_inline(blk, indptr, indices, data, labels, degrees, vol,
                             inv_vol, pen, best, s_best, s_own, w_own, w_best)


@pjit
def _row_choices_par(indptr, indices, data, labels, degrees, vol, assoc, best,
                     s_best, s_own, w_own, w_best):
    inv_vol, pen = _score_terms(vol, assoc)
    for blk in prange(_n_blocks(labels.shape[0])):
        _choose_block(blk, indptr, indices, data, labels, degrees, vol, inv_vol, pen,
                      best, s_best, s_own, w_own, w_best)


def row_choices(indptr, indices, data, labels, degrees, vol, assoc, best, s_best,
                s_own, w_own, w_best):
    """One pass over ``W``: fill the per-node arrays ``best`` (the type of
    ``labels``), ``s_best``, ``s_own``, ``w_own``, ``w_best`` (float64; see
    the module docstring) for ``labels`` with cluster statistics ``(vol,
    assoc)``."""
    kernel = _row_choices_par if data.shape[0] >= CSR_PARALLEL_MIN else _row_choices_ser
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
@jit(inline=True)
def _row_weight_to(j, b, indptr, indices, data, labels):
    """``WX[j, b]`` from the row of ``j`` (in the order of the pass)."""
    acc = 0.0
    for p in range(indptr[j], indptr[j + 1]):
        if labels[indices[p]] == b:
            acc += data[p]
    return acc


@pjit
def _own_weights_par(indptr, indices, data, labels):
    n = labels.shape[0]
    own = np.empty(n)
    for blk in prange(_n_blocks(n)):
        for i in range(blk * ROW_BLOCK, min((blk + 1) * ROW_BLOCK, n)):
            own[i] = _row_weight_to(i, labels[i], indptr, indices, data, labels)
    return own


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
    """:func:`cluster_stats_csr` in one loop (the same sums)."""
    vol = np.zeros(n_clusters)
    assoc = np.zeros(n_clusters)
    for i in range(labels.shape[0]):
        k = labels[i]
        vol[k] += degrees[i]
        assoc[k] += _row_weight_to(i, k, indptr, indices, data, labels)
    return vol, assoc


@jit
def _own_weights_ser(indptr, indices, data, labels):
    own = np.empty(labels.shape[0])
    for i in range(labels.shape[0]):
        own[i] = _row_weight_to(i, labels[i], indptr, indices, data, labels)
    return own


def own_cluster_weights_csr(indptr, indices, data, labels):
    """``WX[i, labels[i]]`` for every node of a CSR graph, without the
    ``(n, K)`` matrix: the sums of the ``WX`` pass, in the same order (in
    parallel from ``CSR_PARALLEL_MIN`` stored entries; the same result)."""
    if data.shape[0] >= CSR_PARALLEL_MIN:
        return _own_weights_par(indptr, indices, data, labels)
    return _own_weights_ser(indptr, indices, data, labels)


def cluster_stats_csr(indptr, indices, data, labels, degrees, n_clusters):
    """``(vol, assoc)`` of ``labels`` in one pass over a CSR graph (the sums
    of ``cluster_stats`` on the ``WX`` of the pass, in the same order)."""
    if data.shape[0] >= CSR_PARALLEL_MIN:
        own = _own_weights_par(indptr, indices, data, labels)
        return _stats_from_own(own, labels, degrees, n_clusters)
    return _cluster_stats_csr_ser(indptr, indices, data, labels, degrees, n_clusters)


# ------------------------------------------------ candidate statistics
@jit(inline=True)
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
def _candidate_stats_ser(indptr, indices, data, degrees, old, new, best, w_own,
                         w_best, vol, assoc):
    if _many_moved(old, new):
        return _cluster_stats_csr_ser(indptr, indices, data, new, degrees,
                                      vol.shape[0])
    vol2 = vol.copy()
    assoc2 = assoc.copy()
    _candidate_block(0, old.shape[0], indptr, indices, data, degrees, old, new, best,
                     w_own, w_best, vol2, assoc2)
    return vol2, assoc2


@pjit
def _candidate_stats_par(indptr, indices, data, degrees, old, new, best, w_own,
                         w_best, vol, assoc):
    # block 0 into the copies, the others into partial sums added in order
    n = old.shape[0]
    nb = _n_blocks(n)
    part = np.zeros((nb, 2, vol.shape[0]))
    for k in range(vol.shape[0]):
        part[0, 0, k] = vol[k]
        part[0, 1, k] = assoc[k]
    for blk in prange(nb):
        _candidate_block(blk * ROW_BLOCK, min((blk + 1) * ROW_BLOCK, n), indptr,
                         indices, data, degrees, old, new, best, w_own, w_best,
                         part[blk, 0], part[blk, 1])
    for blk in range(1, nb):
        for k in range(vol.shape[0]):
            part[0, 0, k] += part[blk, 0, k]
            part[0, 1, k] += part[blk, 1, k]
    return part[0, 0].copy(), part[0, 1].copy()


def candidate_stats_rows(indptr, indices, data, degrees, old, new, best, w_own,
                         w_best, vol, assoc):
    """``(vol, assoc)`` of ``new`` from those of ``old``, reading only the rows
    of the moved nodes.

    With ``D = onehot(new) - onehot(old)``:
    ``assoc' = assoc + 2 diag(D' WX) + diag(D' W D)``; the moved nodes' own
    terms come from ``w_own`` and ``w_best`` (:func:`row_choices` of
    ``old``: the step moves a node to its ``best`` cluster; another move
    reads its row), the last term from the pairs of moved nodes.  When more
    than a quarter of the nodes move, the pairs cost more than a fresh pass
    over ``W`` (:func:`cluster_stats_csr` of ``new``), which is taken
    instead.  ``vol`` and ``assoc`` are not modified.  In parallel (large
    graphs), blocks of rows are summed separately and added in block order.
    """
    if data.shape[0] < CSR_PARALLEL_MIN:
        return _candidate_stats_ser(indptr, indices, data, degrees, old, new, best,
                                    w_own, w_best, vol, assoc)
    if _many_moved(old, new):
        return cluster_stats_csr(indptr, indices, data, new, degrees, vol.shape[0])
    return _candidate_stats_par(indptr, indices, data, degrees, old, new, best, w_own,
                                w_best, vol, assoc)
