"""Exact local moves: the polishing sweep of the Falcon solver (Numba).

One sweep visits the nodes in order and applies, for each, the best strictly
improving single move by the exact change of ``f`` (the weighted kernel
k-means gain), updating ``labels``, ``vol`` and ``assoc`` (and, on a dense
graph, ``WX``) in place; on a CSR graph a node's weights to the clusters are
summed from its row when it is visited.  ``f`` never decreases and no
cluster is emptied.  A cluster that a node of huge degree leaves (weights
spanning many orders of magnitude) has its statistics summed again: the
running difference would keep only rounding noise.  Sequential by nature,
it has no torch twin: :class:`sklearn_falcon._backends._torch.TorchProblem`
runs these sweeps on the host.  Conventions as in :mod:`._kernels`.
"""

import numpy as np

from ..._jit import jit as _jit

# A cluster whose volume falls below this fraction of its largest since its
# statistics were last exact has lost that many bits to cancellation (a
# node of huge degree left it): its vol and assoc are summed again.
_CANCEL = 2.0 ** -20


@_jit(inline=True)
def _assoc_without(assoc_a, w_a, wii):
    """``assoc`` of a cluster once a node with weight ``w_a`` to it (its
    self-loop ``wii`` included) has left it."""
    return assoc_a - 2.0 * w_a + wii


@_jit(inline=True)
def _assoc_with(assoc_b, w_b, wii):
    """``assoc`` of a cluster once a node with weight ``w_b`` to it (and
    self-loop ``wii``) has joined it."""
    return assoc_b + 2.0 * w_b + wii


@_jit(inline=True)
def _best_move(a, di, wii, wx, vol, assoc):
    """Cluster of the best strictly improving move of a node in ``a`` (degree
    ``di``, self-loop ``wii``, weights ``wx`` to the clusters), or -1: the
    exact change of ``f`` (weighted kernel k-means gain)."""
    va = vol[a] - di
    aa = _assoc_without(assoc[a], wx[a], wii)
    base_a = assoc[a] / vol[a] if vol[a] > 0.0 else 0.0
    new_a = aa / va if va > 0.0 else 0.0
    best_gain = 1e-12 * (base_a + 1e-300)  # ignore gains at rounding level
    best_b = -1
    for b in range(wx.shape[0]):
        if b == a:
            continue
        ab = _assoc_with(assoc[b], wx[b], wii)
        old_b = assoc[b] / vol[b] if vol[b] > 0.0 else 0.0
        vb = vol[b] + di
        gain = new_a - base_a + (ab / vb if vb > 0.0 else 0.0) - old_b
        if gain > best_gain:
            best_gain = gain
            best_b = b
    return best_b


@_jit(inline=True)
def _move_stats(i, a, b, di, wii, w_a, w_b, vol, assoc, labels, counts):
    """Move node ``i`` (weights ``w_a`` and ``w_b`` to the clusters) from
    ``a`` to ``b`` in every state but ``WX`` (whose columns ``a`` and ``b``
    the caller updates from the row of ``i``)."""
    assoc[a] = _assoc_without(assoc[a], w_a, wii)
    vol[a] -= di
    assoc[b] = _assoc_with(assoc[b], w_b, wii)
    vol[b] += di
    labels[i] = b
    counts[a] -= 1
    counts[b] += 1


@_jit(inline=True)
def _move_node(i, b, indptr, indices, data, degrees, labels, vol, assoc, counts):
    """Move node ``i`` to cluster ``b``, updating ``vol``, ``assoc`` and
    ``counts`` exactly from its row."""
    a = labels[i]
    wa = 0.0
    wb = 0.0
    wii = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        j = indices[p]
        c = labels[j]
        w = np.float64(data[p])
        if j == i:
            wii += w
        if c == a:
            wa += w
        elif c == b:
            wb += w
    _move_stats(i, a, b, degrees[i], wii, wa, wb, vol, assoc, labels, counts)


@_jit(inline=True)
def _cancelled(a, vol, peak):
    """Whether cluster ``a``'s running volume has lost its precision to
    cancellation (below ``_CANCEL`` times its ``peak``); ``peak`` holds each
    cluster's largest volume since its statistics were exact."""
    return vol[a] < _CANCEL * peak[a]


@_jit(inline=True)
def _resync_csr(a, indptr, indices, data, degrees, labels, vol, assoc, peak):
    """``vol[a]`` and ``assoc[a]`` summed again from the rows of the members
    of ``a`` (a CSR graph)."""
    v = 0.0
    s = 0.0
    for i in range(labels.shape[0]):
        if labels[i] == a:
            v += degrees[i]
            for p in range(indptr[i], indptr[i + 1]):
                if labels[indices[p]] == a:
                    s += np.float64(data[p])
    vol[a] = v
    assoc[a] = s
    peak[a] = v


@_jit(inline=True)
def _resync_dense(a, W, degrees, labels, WX, vol, assoc, peak):
    """``WX[:, a]``, ``vol[a]`` and ``assoc[a]`` summed again from the rows
    of the members of ``a`` (a dense graph)."""
    n = labels.shape[0]
    for j in range(n):
        WX[j, a] = 0.0
    v = 0.0
    for i in range(n):
        if labels[i] == a:
            v += degrees[i]
            for j in range(n):
                WX[j, a] += W[i, j]
    s = 0.0
    for i in range(n):
        if labels[i] == a:
            s += WX[i, a]
    vol[a] = v
    assoc[a] = s
    peak[a] = v


@_jit(inline=True)
def _cluster_counts(labels, n_clusters):
    counts = np.zeros(n_clusters, dtype=np.int64)
    for i in range(labels.shape[0]):
        counts[labels[i]] += 1
    return counts


@_jit
def local_move_sweep_csr(indptr, indices, data, degrees, labels, vol, assoc):
    """One sequential sweep of exact best single moves (weighted kernel k-means
    style polishing) on a CSR graph.

    For each node in turn, its weights to the clusters are summed from its
    row (with the labels as updated so far), the exact change of ``f`` of
    moving it to each other cluster is computed from them and from ``vol``
    and ``assoc``, and the best strictly positive move is applied.  ``f``
    never decreases.  A move that would empty a cluster is not considered.
    Updates ``labels``, ``vol`` and ``assoc`` in place (the solver's own work
    arrays) and returns the number of moves; no ``(n, K)`` state is needed.
    """
    K = vol.shape[0]
    counts = _cluster_counts(labels, K)
    wx = np.zeros(K)
    peak = vol.copy()
    n_moves = 0
    for i in range(labels.shape[0]):
        di = degrees[i]
        a = labels[i]
        if di <= 0.0 or counts[a] <= 1:
            continue
        wii = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            wx[labels[j]] += data[p]
            if j == i:
                wii += data[p]
        b = _best_move(a, di, wii, wx, vol, assoc)
        if b >= 0:
            _move_stats(i, a, b, di, wii, wx[a], wx[b], vol, assoc, labels, counts)
            peak[b] = max(peak[b], vol[b])
            if _cancelled(a, vol, peak):
                _resync_csr(a, indptr, indices, data, degrees, labels, vol, assoc,
                            peak)
            n_moves += 1
        for p in range(indptr[i], indptr[i + 1]):
            wx[labels[indices[p]]] = 0.0
        wx[a] = 0.0  # labels[i] itself may have changed (a self-loop)
    return n_moves


@_jit
def local_move_sweep_csr_wx(indptr, indices, data, degrees, labels, WX, vol, assoc,
                            counts):
    """The sweep of :func:`local_move_sweep_csr` with the nodes' weights to
    the clusters given in ``WX`` instead of summed from their rows.

    For a graph held in row blocks (the Dask backend): ``WX`` holds a
    block's full rows (all columns, other blocks' nodes included) while the
    CSR arrays are the block's own columns, the only ones its moves change.
    A move updates ``WX`` from the node's CSR row; ``labels``, ``WX``,
    ``vol``, ``assoc`` and ``counts`` are updated in place.  ``counts``: the
    nodes (of nonzero degree) of each cluster in the whole graph, so that
    the block's last node of a cluster that other blocks hold may move; no
    move leaves a cluster without one.  Returns the number of moves.
    """
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
        b = _best_move(a, di, wii, WX[i], vol, assoc)
        if b >= 0:
            _move_stats(i, a, b, di, wii, WX[i, a], WX[i, b], vol, assoc, labels,
                        counts)
            for p in range(indptr[i], indptr[i + 1]):
                WX[indices[p], a] -= data[p]
                WX[indices[p], b] += data[p]
            n_moves += 1
    return n_moves


@_jit(inline=True)
def _sweep_rows(rows, start, degrees, labels, WX, vol, assoc, counts, full):
    """The sweep of :func:`local_move_sweep_rows`; ``full``: ``rows`` is the
    whole ``W`` (``start`` 0), so that a cluster whose volume cancels can
    be summed again (:func:`_resync_dense`)."""
    peak = vol.copy()
    n_moves = 0
    for t in range(rows.shape[0]):
        i = start + t
        di = degrees[i]
        a = labels[i]
        if di <= 0.0 or counts[a] <= 1:
            continue
        wii = rows[t, i]
        b = _best_move(a, di, wii, WX[i], vol, assoc)
        if b >= 0:
            _move_stats(i, a, b, di, wii, WX[i, a], WX[i, b], vol, assoc, labels,
                        counts)
            for j in range(rows.shape[1]):
                WX[j, a] -= rows[t, j]
                WX[j, b] += rows[t, j]
            peak[b] = max(peak[b], vol[b])
            if full and _cancelled(a, vol, peak):
                _resync_dense(a, rows, degrees, labels, WX, vol, assoc, peak)
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
    >>> from sklearn_falcon._backends._numba import local_move_sweep_rows
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
    return _sweep_rows(rows, start, degrees, labels, WX, vol, assoc, counts,
                       False)


@_jit
def local_move_sweep_dense(W, degrees, labels, WX, vol, assoc):
    """Dense twin of :func:`local_move_sweep_csr`."""
    counts = _cluster_counts(labels, WX.shape[1])
    return _sweep_rows(W, 0, degrees, labels, WX, vol, assoc, counts, True)

