"""Affinity matrices of equal weights: a complete graph of one off-diagonal
weight (and a constant diagonal) gives every partition the same NCut."""

import numpy as np
import scipy.sparse as sp

from ._check import warn_if_flat

__all__ = ["flat_weight", "warn_if_flat_graph", "warn_of_flat_weight"]

CHECK_FLAT = ("Check how the affinit{} built (a threshold or a bandwidth too large "
              "for the distances?).")


def flat_weight(W, degrees):
    """The off-diagonal weight of the affinity ``W`` when every one is the
    same positive weight and its diagonal is constant (a complete graph of
    equal weights, where every partition has the same NCut, as a flat rbf
    or cosine affinity), else None.  A pass over ``W`` in row chunks, only
    where the ``degrees`` are all equal."""
    n = W.shape[0]
    if n < 3 or not np.ptp(degrees) <= 1e-9 * degrees.max():
        return None
    if sp.issparse(W):  # complete: every entry stored
        if W.nnz < n * (n - 1):
            return None
        W = W.toarray()
    w, diag = W[0, 1], np.diagonal(W)
    if not (w > 0 and np.all(diag == diag[0])):
        return None
    for a in range(0, n, 1024):
        rows = np.arange(a, min(a + 1024, n))
        same = W[rows] == w
        same[rows - a, rows] = True
        if not same.all():
            return None
    return float(w)


def warn_if_flat_graph(W, degrees, name="X"):
    """Warn when the affinity ``W`` (``name``: a precomputed or callable
    one) is complete with equal weights (:func:`flat_weight`)."""
    warn_of_flat_weight(flat_weight(W, degrees), W.shape[0], name,
                        float(W[0, 0]))


def warn_of_flat_weight(w, n_samples, name="X", diagonal=None):
    """:func:`warn_if_flat_graph`'s warning, of the weight ``w`` (or None)
    and the constant ``diagonal`` (``w`` if None) found here or elsewhere (a
    sharded graph's blocks)."""
    if w is not None:  # every NCut: (K - 1) n w / d, K - 1 if the diagonal is w
        n = n_samples
        diag = w if diagonal is None else diagonal
        warn_if_flat(True, n,
                     f"Every off-diagonal affinity of {name} is equal ({w:.6g})",
                     CHECK_FLAT.format("y was"),
                     factor=1.0 if diag == w else n * w / ((n - 1) * w + diag))
