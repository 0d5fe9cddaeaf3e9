"""Clustering metrics: the normalized cut of a labelling, and mIoU for
segmentation."""

from numbers import Integral

import numpy as np
from sklearn.utils import check_array
from sklearn.utils._param_validation import validate_params

from ._affinity import check_affinity, check_dtype_kind, float_sparse
from ._backends import host_array
from ._miou import miou
from ._stats import cluster_statistics, ncut_of, objective_of

__all__ = ["normalized_cut", "normalized_association", "miou"]


def _cluster_terms(W, labels):
    W, labels = host_array(W), host_array(labels)  # torch tensors: on the host
    check_dtype_kind(W, name="W")
    W = check_array(  # (integer COO duplicates: summed in float64)
        float_sparse(W), accept_sparse=("csr", "csc", "coo"),
        dtype=(np.float64, np.float32), input_name="W",
    )
    if W.shape[0] != W.shape[1]:
        raise ValueError(f"W must be a square affinity matrix; got shape={W.shape}.")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] != W.shape[0]:
        raise ValueError(
            f"labels must have shape (n_samples,) = ({W.shape[0]},); got "
            f"shape={labels.shape}."
        )
    labels = check_label_values(labels)
    # the estimator's checks: nonnegative, degrees in range, and the
    # symmetric part of an asymmetric W (with a warning); no dense copy
    W = check_affinity(W, name="W", copy=False)
    _, y = np.unique(labels, return_inverse=True)
    K = int(y.max()) + 1 if y.size else 0
    return cluster_statistics(W, y, K)


def check_label_values(labels):
    """``labels`` (an array) as ids: integers, strings, or whole floats;
    an object array of only strings or only integers is converted.  NaN,
    fractions and other values are refused with a ValueError naming
    ``labels``."""
    labels = _homogeneous(labels)
    if labels.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            whole = np.mod(labels, 1) == 0  # False at NaN and inf
        if not np.all(whole):
            raise ValueError(
                "labels must be integers or strings; got the value "
                f"{float(labels[~whole][0])} of dtype={labels.dtype}.")
    elif labels.dtype.kind not in "biuUS":
        raise ValueError(
            f"labels must be integers or strings; got dtype={labels.dtype}.")
    return labels


def _homogeneous(labels):
    """An object array of only strings (a pandas column of text) or only
    integers as a string or an int64 array; anything else unchanged (an
    object array of other values is refused by the caller)."""
    if labels.dtype != object or not labels.size:
        return labels
    values = labels.ravel().tolist()
    if all(isinstance(v, str) for v in values):
        return labels.astype(str)
    if all(isinstance(v, Integral) for v in values):
        return labels.astype(np.int64)
    return labels


@validate_params(
    {"W": ["array-like", "sparse matrix"], "labels": ["array-like"]},
    prefer_skip_nested_validation=True,
)
def normalized_cut(W, labels):
    r"""Normalized cut of a labelling on an affinity graph.

    .. math::

        \mathrm{NCut} = \sum_{k} \frac{\mathrm{cut}_k}{\mathrm{vol}_k},
        \quad \mathrm{vol}_k = \sum_{i \in k} d_i,
        \quad \mathrm{assoc}_k = \sum_{i, j \in k} W_{ij},
        \quad \mathrm{cut}_k = \mathrm{vol}_k - \mathrm{assoc}_k,

    with :math:`d = W \mathbf{1}` the degrees.  Lower is better; it lies in
    :math:`[0, K]` for :math:`K` non-empty clusters.  A cluster
    of zero volume (only isolated nodes) has no cut and contributes 0.

    Parameters
    ----------
    W : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_samples)
        Symmetric nonnegative affinity matrix (of an asymmetric one, the
        symmetric part ``(W + W.T) / 2`` counts, with a warning, as in
        :class:`~sklearn_falcon.FalconNCut`).
    labels : array-like of shape (n_samples,)
        Cluster labels (any integer or string values; empty label values do
        not count).

    Returns
    -------
    ncut : float

    See Also
    --------
    normalized_association : ``K - NCut``, the quantity Falcon maximizes.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon import normalized_cut
    >>> W = np.array([[0, 1, 0.1, 0], [1, 0, 0, 0.1],
    ...               [0.1, 0, 0, 1], [0, 0.1, 1, 0]])
    >>> round(normalized_cut(W, [0, 0, 1, 1]), 4)
    0.1818
    >>> round(normalized_cut(W, [0, 1, 0, 1]), 4)
    1.8182
    """
    return ncut_of(*_cluster_terms(W, labels))


@validate_params(
    {"W": ["array-like", "sparse matrix"], "labels": ["array-like"]},
    prefer_skip_nested_validation=True,
)
def normalized_association(W, labels):
    r"""Normalized association, the objective Falcon maximizes.

    .. math::

        f = \sum_{k} \frac{\mathrm{assoc}_k}{\mathrm{vol}_k} = K - \mathrm{NCut}

    (see :func:`normalized_cut` for the terms), with :math:`K` the clusters
    of nonzero volume: a cluster of only isolated nodes counts in neither
    sum.

    Parameters
    ----------
    W : {array-like, sparse matrix, torch.Tensor} of shape (n_samples, n_samples)
        Symmetric nonnegative affinity matrix (see :func:`normalized_cut`).
    labels : array-like of shape (n_samples,)
        Cluster labels (any integer or string values).

    Returns
    -------
    f : float

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.metrics import normalized_association
    >>> W = np.array([[1.0, 1.0], [1.0, 1.0]])
    >>> normalized_association(W, [0, 0])
    1.0
    """
    return objective_of(*_cluster_terms(W, labels))
