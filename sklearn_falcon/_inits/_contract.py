"""Contraction of a graph onto a coarser one: ``W_c = P' W P`` for the
one-hot matrix ``P`` of a mapping of nodes to coarse nodes (Numba kernels
and their driver; the mappings come from :mod:`._coarsen`).

A sparse ``W`` is contracted in one pass over its nonzeros, grouped by
coarse row, with a marker array; no sparse-sparse product and no transpose.
Two serial kernels give the same arrays: one gathers each coarse row from
its members' rows, the other (``buckets``) reads ``W``'s rows in order
into one bucket per coarse row and then merges each bucket, which is faster
where a coarse node's members are scattered over ``W``.  From
:data:`PARALLEL_MIN` stored entries each runs on Numba's threads (the
fit's ``n_jobs``, at most :data:`CONTRACT_THREADS_MAX`): runs of coarse rows
are written from where they would start if no entry merged, each thread
with its own marker array, and then moved down in order; again the same
arrays, bit for bit, whatever the number of threads.
"""

import numpy as np
import scipy.sparse as sp

from .._backends._numba._kernels import _add_rows_by_label
from .._jit import PARALLEL_MIN, pjit, prange
from .._jit import jit as _jit
from .._threads import num_threads

__all__ = ["coarsen_csr", "coarsen_dense", "contract"]

# Threads of a contraction of PARALLEL_MIN stored entries or more: at most
# this many (each holds a marker array of the coarse size)
CONTRACT_THREADS_MAX = 4


@_jit(inline=True)
def _gather_row(a, row0, start, members, indptr, indices, data, mapping, slot,
                out_idx, acc):
    """Coarse row ``a`` from its members' rows, written from ``row0``: each
    coarse column at its first appearance, later entries added to it
    (``slot[b]``: where column ``b`` was last written; below ``row0``, in an
    earlier row).  Returns the end of the row."""
    m = row0
    for u in range(start[a], start[a + 1]):
        i = members[u]
        for p in range(indptr[i], indptr[i + 1]):
            b = mapping[indices[p]]
            if slot[b] < row0:
                slot[b] = m
                out_idx[m] = b
                acc[m] = data[p]
                m += 1
            else:
                acc[slot[b]] += data[p]
    return m


@_jit(inline=True)
def _merge_bucket(q0, q1, row0, slot, out_idx, acc):
    """The bucket ``q0 .. q1`` of a coarse row merged in place from ``row0``
    (``row0 <= q0``: a merged entry never passes the one it is read from),
    as :func:`_gather_row` writes.  Returns the end of the row."""
    m = row0
    for q in range(q0, q1):
        b = out_idx[q]
        w = acc[q]
        if slot[b] < row0:
            slot[b] = m
            out_idx[m] = b
            acc[m] = w
            m += 1
        else:
            acc[slot[b]] += w
    return m


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
        nnz = _gather_row(a, nnz, start, members, indptr, indices, data, mapping,
                          slot, out_idx, acc)
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
        nnz = _merge_bucket(start[a], start[a + 1], nnz, slot, out_idx, acc)
        out_ptr[a + 1] = nnz
    return out_ptr


@_jit(inline=True)
def _runs(ptr, n_chunks):
    """Bounds of ``n_chunks`` runs of consecutive items of about equal
    entries, from the items' entry pointer ``ptr`` (of length ``n + 1``)."""
    n = ptr.shape[0] - 1
    total = np.int64(ptr[n])
    bounds = np.empty(n_chunks + 1, dtype=np.int64)
    for t in range(n_chunks):
        bounds[t] = min(np.searchsorted(ptr, total * t // n_chunks), n)
    bounds[n_chunks] = n
    return bounds


@_jit(inline=True)
def _move_rows_down(src_ptr, out_ptr, out_idx, acc):
    """Row ``a`` (``out_ptr[a + 1]`` entries from ``src_ptr[a]``) to its
    final place after the rows before it; ``out_ptr`` holds the lengths on
    entry and the row pointers on return.  A row never moves up, so a
    forward copy in row order reads every entry before it is overwritten."""
    for a in range(out_ptr.shape[0] - 1):
        src = src_ptr[a]
        dst = out_ptr[a]
        length = out_ptr[a + 1]
        out_ptr[a + 1] = dst + length
        if src != dst:
            for k in range(length):
                out_idx[dst + k] = out_idx[src + k]
                acc[dst + k] = acc[src + k]


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
    rows = _runs(indptr, n_chunks)
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
    first = _runs(start, n_chunks)  # runs of coarse rows
    out_ptr = np.zeros(n_coarse + 1, dtype=np.int64)
    for t in prange(n_chunks):
        slot = pos[t]  # position of b in the bucket being merged
        slot[:] = -1
        for a in range(first[t], first[t + 1]):
            m = _merge_bucket(start[a], start[a + 1], start[a], slot, out_idx, acc)
            out_ptr[a + 1] = m - start[a]  # the merged row's length, for now
    _move_rows_down(start, out_ptr, out_idx, acc)
    return out_ptr


@pjit
def _coarsen_csr_par(indptr, indices, data, mapping, n_coarse, out_idx, acc,
                     n_chunks):
    """:func:`_coarsen_csr_into` on ``n_chunks`` threads: the same arrays,
    bit for bit, whatever ``n_chunks``.

    Coarse row ``a`` is first written from the position where it would start
    if no entry merged (the entries of the coarse rows before it), in runs
    of coarse rows of about equal entries, each thread with its own position
    array; then the rows are moved down to their final places, in order."""
    n = indptr.shape[0] - 1
    start = np.zeros(n_coarse + 1, dtype=np.int64)  # members by coarse node
    room = np.zeros(n_coarse + 1, dtype=np.int64)  # entries of the members
    for i in range(n):
        start[mapping[i] + 1] += 1
        room[mapping[i] + 1] += indptr[i + 1] - indptr[i]
    for a in range(n_coarse):
        start[a + 1] += start[a]
        room[a + 1] += room[a]
    members = np.empty(n, dtype=np.int64)
    pos = np.empty((n_chunks, n_coarse), dtype=np.int64)
    fill = pos[0]
    fill[:] = start[:-1]
    for i in range(n):
        members[fill[mapping[i]]] = i
        fill[mapping[i]] += 1
    first = _runs(room, n_chunks)  # runs of coarse rows
    out_ptr = np.zeros(n_coarse + 1, dtype=np.int64)
    for t in prange(n_chunks):
        slot = pos[t]  # position of b in the row being written
        slot[:] = -1
        for a in range(first[t], first[t + 1]):
            m = _gather_row(a, room[a], start, members, indptr, indices, data,
                            mapping, slot, out_idx, acc)
            out_ptr[a + 1] = m - room[a]  # the row's length, for now
    _move_rows_down(room, out_ptr, out_idx, acc)
    return out_ptr


def _contract_threads(n_entries):
    """Threads of a contraction: Numba's (the fit's ``n_jobs``), up to
    :data:`CONTRACT_THREADS_MAX`, from :data:`PARALLEL_MIN` stored entries."""
    if n_entries < PARALLEL_MIN:
        return 1
    return min(num_threads(), CONTRACT_THREADS_MAX)


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
    levels that keep most of the entries.

    From :data:`PARALLEL_MIN` stored entries either runs on Numba's threads
    (:func:`_coarsen_csr_par`, :func:`_coarsen_csr_buckets_par`: the same
    arrays), at the cost of about one more array of ``n_coarse`` positions
    per thread.
    """
    out_idx = np.empty(indices.shape[0], dtype=indices.dtype)
    acc = np.empty(indices.shape[0], dtype=np.float64)
    threads = _contract_threads(indices.shape[0])
    if threads > 1:
        kernel = _coarsen_csr_buckets_par if buckets else _coarsen_csr_par
        out_ptr = kernel(indptr, indices, data, mapping, n_coarse, out_idx, acc,
                         threads)
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


def contract(W, degrees, mapping, n_coarse, buckets=False):
    """The coarse graph of a given ``mapping``: ``P' W P`` and ``P' d``.

    Deterministic: the same inputs give the same arrays, bit for bit (a
    hierarchy may drop a level and contract it again when it is needed),
    with or without ``buckets`` and on any number of threads (see
    :func:`coarsen_csr`).

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
