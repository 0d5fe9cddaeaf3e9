"""Out-of-sample labels: Falcon's score for rows of new samples."""

import numpy as np
import scipy.sparse as sp

from .._affinity import unit_exponent
from .._backends._numba import score_matrix

__all__ = ["out_of_sample_labels"]


def out_of_sample_labels(A, labels, vol, assoc):
    """``argmax_k 2 (A X)_k / vol_k - d assoc_k / vol_k**2`` for each new row.

    The score of the proximal step (the Numba ``score_matrix`` kernel), for
    rows outside the graph: a new sample with affinity row ``w`` to the
    training samples has degree ``d = sum(w)``.

    Parameters
    ----------
    A : {ndarray, sparse matrix} of shape (n_new, n_train)
        Affinity of the new samples to the training samples.
    labels : ndarray of shape (n_train,)
        Training labels.
    vol, assoc : ndarray of shape (K,)
        Volumes and associations of the training clusters.

    Returns
    -------
    ndarray of shape (n_new,)
        Rows with no affinity to the training set get the cluster of largest
        volume.
    """
    K = vol.shape[0]
    n_train = labels.shape[0]
    onehot = sp.csr_matrix(
        (np.ones(n_train), (np.arange(n_train), labels)), shape=(n_train, K)
    )
    AX = A @ onehot
    AX = AX.toarray() if sp.issparse(AX) else np.asarray(AX, dtype=np.float64)
    d = np.asarray(A.sum(axis=1), dtype=np.float64).ravel()
    # subnormal volumes (1 / vol overflows): all four scaled up alike, as the
    # fit scales the graph (the score's argmax is that of the scaled terms)
    e = unit_exponent(float(vol.max()) if vol.size else 1.0)
    if e:
        AX, d = np.ldexp(np.asarray(AX, dtype=np.float64), e), np.ldexp(d, e)
        vol, assoc = np.ldexp(vol, e), np.ldexp(assoc, e)
    mu = score_matrix(np.ascontiguousarray(AX, dtype=np.float64), d,
                      np.ascontiguousarray(vol, dtype=np.float64),
                      np.ascontiguousarray(assoc, dtype=np.float64))
    out = np.argmax(mu, axis=1).astype(np.int64)
    out[d <= 0] = int(np.argmax(vol))
    return out
