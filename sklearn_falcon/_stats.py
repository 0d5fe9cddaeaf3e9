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
from ._log import unwarned, warn_user

__all__ = ["affinity_statistics", "best_result", "bipartite_ncut",
           "cluster_pair_weights", "cluster_statistics", "cluster_weight_summary",
           "degrees_of", "n_entries", "ncut_of", "objective_of", "with_isolated"]


def degrees_of(W):
    """Row sums ``W 1`` as a float64 vector."""
    return np.asarray(W.sum(axis=1), dtype=np.float64).ravel()


def n_entries(W):
    """Stored entries of a graph: ``nnz`` (sparse) or ``n**2`` (dense)."""
    return W.nnz if sp.issparse(W) else W.size


def affinity_statistics(affinity, X, labels, n_clusters, backend="numba",
                        device="cpu"):
    """``(vol, assoc)`` of ``labels`` on the graph that ``affinity`` (an
    :class:`~sklearn_falcon._affinity.Affinity`) forms of the features
    ``X``: matrix-free, in row blocks on ``device``, where ``backend`` forms
    this affinity so (the ``n x n`` matrix is never held) and is installed
    (an estimator unpickled without torch), else from the explicit ``W``."""
    from ._backends import BACKENDS, normalize_device

    spec = BACKENDS[backend]
    if not (affinity.matrix_free and spec.make_problem_from_features is not None
            and spec.is_available()):
        # fit's warning of a complete graph said "the labels are arbitrary"
        with unwarned("every partition has the same NCut"):
            W = affinity.fit(X)
        _warn_if_complete(affinity, degrees_of(W))
        return cluster_statistics(W, labels, n_clusters)
    affinity.check_features(X)
    P = spec.make_problem_from_features(
        X, n_clusters, affinity=affinity.name, power=affinity.power,
        gamma=affinity.gamma, device=spec.resolve_device(normalize_device(device)))
    _warn_if_complete(affinity, P.degrees_numpy()[0])
    vol, assoc = P.cluster_statistics(labels)
    return vol[0], assoc[0]


def _warn_if_complete(affinity, degrees):
    """Warn that ``score``'s graph (of affinities at most 1) is complete
    with equal weights, where every labelling into m clusters has NCut
    m - 1."""
    n = degrees.size
    if affinity.name not in ("nearest_neighbors", "rbf", "cosine") or n < 2 or \
            not np.all(degrees == n):  # degree n: every affinity 1
        return
    k = getattr(affinity, "n_neighbors", None)
    why, advice = ((f"n_neighbors={k} >= n_samples={n}", "more samples than "
                    "n_neighbors") if affinity.name == "nearest_neighbors" else
                   (f"every {affinity.name} affinity is 1", "samples that differ"))
    warn_user(
        f"The graph of the {n} samples passed to score is complete with equal "
        f"weights ({why}): every labelling into m clusters has NCut m - 1, so "
        f"the score does not measure the clustering. Score {advice}.")


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
    WX = nb.cluster_weights_dense(_row_major(W), y, n_clusters)
    own = WX[np.arange(y.size), y]
    return vol, np.bincount(y, weights=own, minlength=n_clusters)


def _row_major(W):
    """A C-contiguous dense ``W`` for the kernel, which reads it as ``W'``:
    a Fortran-ordered one as its transpose, a view (the metrics keep the
    caller's ``W``, and copied all of it: 3.2 GB at 20,000 nodes), the same
    associations and, ``W`` being symmetric, the same weights between
    clusters; other layouts (strided views) as a C copy."""
    W = np.asarray(W)
    if W.flags.f_contiguous and not W.flags.c_contiguous:
        return W.T
    return np.ascontiguousarray(W)


def ncut_of(vol, assoc):
    """``NCut = sum_k (vol_k - assoc_k) / vol_k`` over clusters of nonzero
    volume, each term held in ``[0, 1]``: a float32 ``W``'s degrees are
    summed in its dtype and its associations in float64, so a cluster with
    no cut had a term of -2e-8 (an NCut, or a score, of the wrong sign)."""
    pos = vol > 0
    return float(np.sum(np.clip((vol[pos] - assoc[pos]) / vol[pos], 0.0, 1.0)))


def objective_of(vol, assoc):
    """``f = sum_k assoc_k / vol_k`` over clusters of nonzero volume (the
    solver's own objective kernel, summed in cluster order)."""
    return float(nb.objective(np.ascontiguousarray(vol, dtype=np.float64),
                              np.ascontiguousarray(assoc, dtype=np.float64)))


def best_result(results, W, n_clusters, degrees, problem=None):
    """The first of the solve results ``results`` (one graph each; an
    iterable, consumed one at a time, only the best held) of highest ``f``,
    ranked, where there are several, by ``f`` of their labels from a fresh
    pass over ``W`` (on ``problem`` where ``W`` is None, matrix-free): the
    solver's own ``f`` is a running sum, which drifts on weights spanning
    some 20 orders of magnitude (a restart of NCut 34.5 was kept over one of
    30.0)."""

    def f(res):
        if W is None:
            vol, assoc = problem.cluster_statistics(res.labels)
            return objective_of(vol[0], assoc[0])
        return objective_of(*cluster_statistics(W, res.labels[0], n_clusters,
                                                degrees))

    best = best_f = None
    for res in results:
        if best is None:  # a single result costs no pass
            best = res
            continue
        if best_f is None:
            best_f = f(best)
        f_res = f(res)
        if f_res > best_f:  # ties: the first
            best, best_f = res, f_res
    return best


def with_isolated(labels, keep, n, degrees, n_clusters):
    """The labels of all ``n`` nodes from ``labels``, those of the nodes
    ``keep`` (indices or a boolean mask; None: all, ``labels`` itself): the
    others, of zero degree, join the cluster of largest volume (``degrees``:
    of the nodes ``keep``).  The estimator, ``falcon_batch`` and the Dask
    fit leave zero-degree nodes out of the solve and place them so.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._stats import with_isolated
    >>> with_isolated(np.array([0, 1, 1]), np.array([0, 2, 3]), 5,
    ...               np.array([1.0, 2.0, 2.0]), 2).tolist()
    [0, 1, 1, 1, 1]
    """
    if keep is None:
        return labels
    vol = np.bincount(labels, weights=degrees, minlength=n_clusters)
    out = np.full(n, int(np.argmax(vol)), dtype=labels.dtype)
    out[keep] = labels
    return out


def cluster_weight_summary(W, labels, n_clusters):
    """One pass over ``W``: the ``(K, K)`` weights between clusters
    ``C[a, b] = sum of W_ij`` over ``i`` in ``a`` and ``j`` in ``b``
    (``C.sum(1)`` are the volumes when the degrees are ``W 1``, and
    ``diag(C)`` the associations), each node's weight to its own cluster, and
    its self-loop.  Returns ``(C, own, self_w)``."""
    if sp.issparse(W):
        # the neighbours' labels are gathered at random: in the narrowest
        # type, more of them stay in cache (1M SBM: 0.77x the time)
        W = W.tocsr()
        y = np.ascontiguousarray(labels, dtype=nb.label_dtype(n_clusters))
        return nb.cluster_pair_weights_csr(W.indptr, W.indices, W.data, y, n_clusters)
    y = np.ascontiguousarray(labels, dtype=np.int64)
    WX = nb.cluster_weights_dense(_row_major(W), y, n_clusters)
    flat = (y[:, None] * n_clusters + np.arange(n_clusters)).ravel()
    C = np.bincount(flat, weights=WX.ravel(), minlength=n_clusters * n_clusters)
    return (C.reshape(n_clusters, -1), WX[np.arange(y.size), y],
            np.diagonal(W).astype(np.float64))


def cluster_pair_weights(W, labels, n_clusters):
    """``C[a, b] = sum of W_ij`` over ``i`` in ``a`` and ``j`` in ``b``: the
    ``(K, K)`` weights between clusters (``C.sum(1)`` are the volumes and
    ``diag(C)`` the associations)."""
    return cluster_weight_summary(W, labels, n_clusters)[0]


def bipartite_ncut(A, row_labels, col_labels, n_clusters):
    """NCut of the bipartite graph ``[[0, A], [A', 0]]`` labelled by
    ``row_labels`` (its first part) and ``col_labels`` (its second).

    The statistics of that graph without forming it: ``vol_k`` sums the row
    sums of ``A`` over the rows in ``k`` and its column sums over the
    columns in ``k``; ``assoc_k`` is twice the weight of ``A`` between rows
    and columns both in ``k``.

    Parameters
    ----------
    A : {ndarray, sparse matrix} of shape (n_rows, n_cols), nonnegative
    row_labels : int array of shape (n_rows,)
    col_labels : int array of shape (n_cols,)
    n_clusters : int

    Returns
    -------
    float
        :func:`ncut_of` the statistics (0 when ``A`` is all zeros).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._stats import bipartite_ncut
    >>> A = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> bipartite_ncut(A, np.array([0, 1]), np.array([0, 1]), 2)
    0.0
    >>> bipartite_ncut(A, np.array([1, 0]), np.array([0, 1]), 2)
    2.0
    """
    rows = np.ascontiguousarray(row_labels, dtype=np.int64)
    cols = np.ascontiguousarray(col_labels, dtype=np.int64)
    n_cols = cols.shape[0]
    onehot = sp.csr_matrix((np.ones(n_cols), (np.arange(n_cols), cols)),
                           shape=(n_cols, n_clusters))
    AX = A @ onehot  # (n_rows, K): weight of each row to each column cluster
    AX = AX.toarray() if sp.issparse(AX) else np.asarray(AX, dtype=np.float64)
    d_rows = np.asarray(A.sum(axis=1), dtype=np.float64).ravel()
    d_cols = np.asarray(A.sum(axis=0), dtype=np.float64).ravel()
    vol = (np.bincount(rows, weights=d_rows, minlength=n_clusters)
           + np.bincount(cols, weights=d_cols, minlength=n_clusters))
    own = AX[np.arange(rows.shape[0]), rows]
    assoc = 2.0 * np.bincount(rows, weights=own, minlength=n_clusters)
    return ncut_of(vol, assoc)
