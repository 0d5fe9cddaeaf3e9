"""Numba kernel of the exact local-move sweep over *streamed* rows of W.

The sequential polishing sweep of :mod:`sklearn_falcon._kernels_numba`
(``local_move_sweep_dense``) visits the nodes in order and, for each, needs
only its own row of ``W``.  A matrix-free affinity never stores ``W``, so
:class:`sklearn_falcon._backend.TorchProblem` computes the rows block by
block on its device and hands each block to :func:`local_move_sweep_rows`,
which continues the very same sweep: the result is identical to
``local_move_sweep_dense`` on the full matrix, with one block of memory.
"""

from numba import njit

from ._kernels_numba import _CACHE


@njit(cache=_CACHE, nogil=True)
def local_move_sweep_rows(rows, start, degrees, labels, WX, vol, assoc, counts):
    """Continue an exact local-move sweep over the nodes ``start .. start + m - 1``.

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

    ``labels``, ``WX``, ``vol``, ``assoc`` and ``counts`` are updated in
    place, exactly as ``local_move_sweep_dense`` does for these nodes.

    Returns
    -------
    n_moves : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._kernels_numba_stream import local_move_sweep_rows
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
    n, K = WX.shape
    n_moves = 0
    for t in range(rows.shape[0]):
        i = start + t
        di = degrees[i]
        if di <= 0.0:
            continue
        a = labels[i]
        if counts[a] <= 1:
            continue
        wii = rows[t, i]
        va = vol[a] - di
        aa = assoc[a] - 2.0 * WX[i, a] + wii
        base_a = assoc[a] / vol[a]
        new_a = aa / va if va > 0.0 else 0.0
        best_gain = 1e-12 * (base_a + 1e-300)
        best_b = -1
        for b in range(K):
            if b == a:
                continue
            vb = vol[b] + di
            ab = assoc[b] + 2.0 * WX[i, b] + wii
            old_b = assoc[b] / vol[b] if vol[b] > 0.0 else 0.0
            gain = new_a - base_a + ab / vb - old_b
            if gain > best_gain:
                best_gain = gain
                best_b = b
        if best_b >= 0:
            b = best_b
            assoc[a] = aa
            vol[a] = va
            assoc[b] = assoc[b] + 2.0 * WX[i, b] + wii
            vol[b] = vol[b] + di
            for j in range(n):
                w = rows[t, j]
                WX[j, a] -= w
                WX[j, b] += w
            labels[i] = b
            counts[a] -= 1
            counts[b] += 1
            n_moves += 1
    return n_moves
