"""Cluster statistics of a labelling on a graph: the one definition.

``vol_k = sum_{i in k} d_i``, ``assoc_k = sum_{i, j in k} W_ij`` and the
objectives built from them, ``NCut = sum_k (vol_k - assoc_k) / vol_k`` and
``f = K - NCut`` (clusters of zero volume count 0).  The estimator's
``ncut_``, :func:`sklearn_falcon.normalized_cut`, the initializations and
the segmenter's merging all use these; none validates its input.
"""

import numpy as np
import scipy.sparse as sp

from ._backends import _numba as nb

__all__ = ["cluster_pair_weights", "cluster_statistics", "degrees_of", "n_entries",
           "ncut_from_objective", "ncut_of", "objective_of"]


def degrees_of(W):
    """Row sums ``W 1`` as a float64 vector."""
    return np.asarray(W.sum(axis=1), dtype=np.float64).ravel()


def n_entries(W):
    """Stored entries of a graph: ``nnz`` (sparse) or ``n**2`` (dense)."""
    return W.nnz if sp.issparse(W) else W.size


def cluster_statistics(W, labels, n_clusters, degrees=None):
    """``(vol, assoc)`` of ``labels`` in ``[0, n_clusters)`` on ``W``.

    One pass over ``W``; no nnz-sized or (for CSR) ``(n, K)`` temporary.

    Parameters
    ----------
    W : CSR matrix or ndarray of shape (n, n)
    labels : int array of shape (n,)
    n_clusters : int
    degrees : ndarray of shape (n,), default=None
        ``W 1``, computed when omitted.

    Returns
    -------
    vol, assoc : ndarray of shape (n_clusters,)
    """
    y = np.ascontiguousarray(labels, dtype=np.int64)
    d = degrees_of(W) if degrees is None else degrees
    if sp.issparse(W):
        W = W.tocsr()  # labels in the solver's type: the same compiled kernel
        return nb.cluster_stats_csr(W.indptr, W.indices, W.data,
                                    y.astype(nb.label_dtype(n_clusters)),
                                    np.ascontiguousarray(d, dtype=np.float64),
                                    n_clusters)
    vol = np.bincount(y, weights=d, minlength=n_clusters)
    WX = nb.cluster_weights_dense(np.ascontiguousarray(W), y, n_clusters)
    own = WX[np.arange(y.size), y]
    return vol, np.bincount(y, weights=own, minlength=n_clusters)


def ncut_of(vol, assoc):
    """``NCut = sum_k (vol_k - assoc_k) / vol_k`` over clusters of nonzero
    volume."""
    pos = vol > 0
    return float(np.sum((vol[pos] - assoc[pos]) / vol[pos]))


def ncut_from_objective(vol, f):
    """NCut from the objective: ``K' - f`` for ``K'`` clusters of nonzero
    volume (where only ``f`` is known, e.g. on a matrix-free graph)."""
    return float(np.count_nonzero(np.asarray(vol) > 0) - f)


def objective_of(vol, assoc):
    """``f = sum_k assoc_k / vol_k`` over clusters of nonzero volume (the
    solver's own objective kernel, summed in cluster order)."""
    return float(nb.objective(np.ascontiguousarray(vol, dtype=np.float64),
                              np.ascontiguousarray(assoc, dtype=np.float64)))


def cluster_pair_weights(W, labels, n_clusters):
    """``C[a, b] = sum of W_ij`` over ``i`` in ``a`` and ``j`` in ``b``: the
    ``(K, K)`` weights between clusters (``C.sum(1)`` are the volumes and
    ``diag(C)`` the associations)."""
    y = np.ascontiguousarray(labels, dtype=np.int64)
    if sp.issparse(W):
        W = W.tocsr()
        WX = nb.cluster_weights_csr(W.indptr, W.indices, W.data, y, n_clusters)
    else:
        WX = nb.cluster_weights_dense(np.ascontiguousarray(W), y, n_clusters)
    C = np.zeros((n_clusters, n_clusters))
    np.add.at(C, y, WX)
    return C
