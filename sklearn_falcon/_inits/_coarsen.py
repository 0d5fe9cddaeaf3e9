"""Coarsening of a graph for the multilevel initialization (Numba kernels
and their driver).

One level: every node points at its heaviest neighbour by
``W_ij / (d_i d_j)``; the connected components of that forest become the
nodes of the next level, ``W_c = P' W P`` (self-loops keep the internal
weight, so ``f`` of a projected labelling is preserved exactly).
"""

import numpy as np
import scipy.sparse as sp

from .._backends._numba._kernels import _add_rows_by_label
from .._jit import jit as _jit

__all__ = ["coarsen", "coarsen_csr", "coarsen_dense", "forest_components",
           "heaviest_neighbor_csr", "heaviest_neighbor_dense"]

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


def heaviest_neighbor(W, degrees):
    """For each node, its heaviest neighbour by ``W_ij / (d_i d_j)``."""
    if sp.issparse(W):
        return heaviest_neighbor_csr(W.indptr, W.indices, W.data, degrees)
    return heaviest_neighbor_dense(W, degrees)


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
    n_comp, mapping = forest_components(heaviest_neighbor(W, degrees))
    if sp.issparse(W):
        indptr, indices, data = coarsen_csr(W.indptr, W.indices, W.data, mapping,
                                            n_comp)
        if indices.shape[0] < np.iinfo(np.int32).max:
            indptr, indices = indptr.astype(np.int32), indices.astype(np.int32)
        Wc = sp.csr_matrix((data, indices, indptr), shape=(n_comp, n_comp))
    else:
        Wc = coarsen_dense(W, mapping, n_comp)
    dc = np.bincount(mapping, weights=degrees, minlength=n_comp)
    return Wc, dc, mapping
