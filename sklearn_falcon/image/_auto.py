"""Eigen-free choice of the number of segments (``n_segments="auto"``)."""

import operator
from contextlib import nullcontext
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array
from sklearn.utils._param_validation import Interval, validate_params

from .._affinity import check_affinity, check_dtype_kind
from .._backends import host_array
from .._log import unwarned
from .._stats import cluster_pair_weights
from ..metrics import check_label_values

__all__ = ["conductance_sweep", "grid_conductance", "select_n_segments"]


@validate_params(
    {
        "W": ["array-like", "sparse matrix"],
        "labels": ["array-like"],
        "min_segments": [Interval(Integral, 1, None, closed="left")],
        "threshold": [Interval(Real, 0, 1, closed="neither")],
    },
    prefer_skip_nested_validation=True,
)
def select_n_segments(W, labels, *, min_segments=2, threshold=0.3):
    """Eigen-free choice of the number of segments by greedy merging.

    Starting from an over-segmentation ``labels`` (e.g. Falcon with the
    largest allowed K), the two clusters whose merge lowers the normalized
    cut the most are merged, repeatedly, down to ``min_segments``. Each level
    ``K`` of this hierarchy has a *K-way expansion*
    :math:`\\rho(K) = \\max_k \\mathrm{cut}_k / \\mathrm{vol}_k` (its worst
    cluster conductance), the
    combinatorial counterpart, by the higher-order Cheeger inequality, of the
    K-th eigenvalue of the normalized Laplacian. Like counting eigenvalues
    below a threshold, the chosen K is the largest one with
    :math:`\\rho(K) \\le` ``threshold`` (``min_segments`` if none qualifies), but no
    eigenvector is computed.

    Parameters
    ----------
    W : {array-like, sparse matrix, torch.Tensor} of shape (n, n)
        Symmetric, nonnegative affinity (an asymmetric one is replaced by
        its symmetric part, with a warning, as in
        :func:`~sklearn_falcon.metrics.normalized_cut`); a tensor, dense or
        sparse, on any device, is read on the host.
    labels : array-like or torch.Tensor of shape (n,)
        Over-segmentation: integer (or string) ids.
    min_segments : int, default=2
        Smallest K considered (at least 1).
    threshold : float, default=0.3
        Conductance threshold in (0, 1).

    Returns
    -------
    n_segments : int
        The chosen K.
    merged : ndarray of shape (n,)
        The hierarchy's partition with that many clusters (ids ``0..K-1``).
    rho : dict
        ``{K: rho(K)}`` along the hierarchy.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import select_n_segments
    >>> W = np.kron(np.eye(3), np.ones((4, 4))) + 0.01
    >>> labels = np.repeat(np.arange(6), 2)      # every block split in two
    >>> k, merged, rho = select_n_segments(W, labels)
    >>> k, merged.tolist()
    (3, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2])
    """
    W, labels = host_array(W), host_array(labels)  # tensors: on the host
    labels = np.asarray(labels)
    shape = tuple(np.shape(W))
    # the kernel reads labels[i] for every row i of W: a shorter or a 2-D
    # label array read past its end (a segmentation fault)
    if len(shape) != 2 or shape[0] != shape[1] or labels.shape != shape[:1]:
        raise ValueError(
            f"W of shape {shape} and labels of shape {labels.shape} do not match; "
            "expected (n, n) and (n,).")
    check_dtype_kind(W, name="W")  # bool, complex
    W = check_array(_native_float(W), accept_sparse=("csr", "csc", "coo"),
                    dtype=(np.float64, np.float32), input_name="W")
    labels = check_label_values(labels)
    # its index arrays within its shape (read unchecked by the kernels),
    # nonnegative, degrees in range, the symmetric part of an asymmetric W
    W = check_affinity(W, name="W", copy=False)
    uniq, lab = np.unique(labels, return_inverse=True)
    k = len(uniq)
    C = cluster_pair_weights(W, lab, k)
    vol = C.sum(axis=1)
    groups = [[i] for i in range(k)]
    alive = list(range(k))
    vol = vol.copy()
    history = {}

    def rho_now():
        return max((vol[a] - C[a, a]) / vol[a] if vol[a] > 0 else 0.0 for a in alive)

    def labels_now():
        out = np.empty(len(lab), dtype=np.int64)
        for new, a in enumerate(alive):
            out[np.isin(lab, groups[a])] = new
        return out

    history[len(alive)] = rho_now()
    best_k = None
    if history[len(alive)] <= threshold:
        best_k = len(alive)
        best_labels = labels_now()
    while len(alive) > max(min_segments, 1):
        best = None
        for i, a in enumerate(alive):
            for b in alive[i + 1:]:
                va, vb = vol[a], vol[b]
                if not (va > 0 and vb > 0):
                    # a cluster of no volume (isolated tokens) merges at no
                    # cost, first: its 0 / 0 gain was NaN, never the best
                    # after another pair, so the result followed the ids
                    gain = np.inf
                else:
                    old = (va - C[a, a]) / va + (vb - C[b, b]) / vb
                    v = va + vb
                    new = (v - C[a, a] - C[b, b] - 2 * C[a, b]) / v
                    gain = old - new
                if best is None or gain > best[0]:
                    best = (gain, a, b)
        _, a, b = best
        C[a, :] += C[b, :]
        C[:, a] += C[:, b]
        vol[a] += vol[b]
        groups[a] += groups[b]
        alive.remove(b)
        history[len(alive)] = rho_now()
        if best_k is None and history[len(alive)] <= threshold:
            best_k = len(alive)
            best_labels = labels_now()
    if best_k is None:
        best_k, best_labels = len(alive), labels_now()
    return best_k, best_labels, history


def _native_float(W):
    """``W`` (dense or sparse) with float32 or float64 values in the
    machine's byte order, as the kernels type them (a float16, big-endian or
    object array raised Numba's ``NotImplementedError`` or ``TypingError``);
    a copy only where needed (a DOK matrix has no ``data``: its dtype)."""
    issparse = sp.issparse(W)
    values = W if issparse else np.asarray(W)
    if values.dtype in (np.float32, np.float64):  # == is False if big-endian
        return W
    try:
        return values.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"W must hold real numbers; got dtype={values.dtype}.") from None


def _grid_shape(grid_shape, n):
    """``grid_shape`` as ``(gh, gw)`` ints with ``gh * gw == n``, or a
    ValueError naming it (one or three entries were read as a grid, the
    spatial test of three silently wrong; a float or a negative entry gave
    NumPy's own errors)."""
    try:
        shape = tuple(operator.index(v) for v in grid_shape
                      if not isinstance(v, (bool, np.bool_)))
        size = len(grid_shape)
    except TypeError:
        shape, size = (), 0
    if size != 2 or len(shape) != 2 or min(shape) < 1:
        raise ValueError("grid_shape must be a pair of positive integers (gh, gw); "
                         f"got grid_shape={grid_shape!r}.")
    if shape[0] * shape[1] != n:
        raise ValueError(f"grid_shape={shape!r} does not hold the {n} tokens.")
    return shape


def _conductance(cut, vol):
    """``cut_k / vol_k`` (0 for a cluster of zero volume)."""
    return cut / np.maximum(vol, 1e-300)


def grid_conductance(labels, grid_shape, n_clusters):
    """Conductance of each cluster in the 4-neighbour grid graph of the tokens.

    The share of a cluster's 4-neighbour token pairs (counted from each of
    its tokens) that cross to another cluster: the conductance
    ``cut_k / vol_k`` of the unweighted grid graph.  A compact region of
    ``m`` tokens has about ``1 / sqrt(m)``; a cluster made of thin stripes
    or scattered fragments has much more.

    Parameters
    ----------
    labels : ndarray of shape (gh * gw,)
        Token labels in ``[0, n_clusters)``, row-major over the grid.
    grid_shape : (int, int)
        ``(gh, gw)``.
    n_clusters : int

    Returns
    -------
    conductance : ndarray of shape (n_clusters,)

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image._auto import grid_conductance
    >>> halves = np.repeat([[0, 0, 1, 1]], 4, axis=0).ravel()    # 4 x 4 grid
    >>> grid_conductance(halves, (4, 4), 2).tolist()              # 4 of 24 pairs
    [0.16666666666666666, 0.16666666666666666]
    >>> stripes = np.tile([0, 1, 0, 1], 4)
    >>> grid_conductance(stripes, (4, 4), 2).tolist()             # 12 of 24
    [0.5, 0.5]
    """
    grid = np.asarray(labels).reshape(grid_shape)
    cut = np.zeros(n_clusters)
    vol = np.zeros(n_clusters)
    for a, b in ((grid[1:], grid[:-1]), (grid[:, 1:], grid[:, :-1])):
        a, b = a.ravel(), b.ravel()
        cross = a != b
        vol += (np.bincount(a, minlength=n_clusters)
                + np.bincount(b, minlength=n_clusters))
        cut += (np.bincount(a[cross], minlength=n_clusters)
                + np.bincount(b[cross], minlength=n_clusters))
    return _conductance(cut, vol)


def conductance_sweep(fit, n, auto_range, threshold, *, grid_shape=None,
                      grid_threshold=None):
    """Token labels of ``n_segments="auto"``: Falcon for K = high, high - 1,
    ... down to low; the first K whose clusters all have a conductance
    ``cut_k / vol_k <= threshold`` on the affinity and, when ``grid_shape``
    and ``grid_threshold`` are given, a :func:`grid_conductance` of at most
    ``grid_threshold`` (each segment a spatially coherent region) is kept
    (``low`` if none).  The warnings of the fits after the first (of the
    same graph) are not repeated.

    Parameters
    ----------
    fit : callable
        ``fit(k)`` returns a fitted :class:`~sklearn_falcon.FalconNCut`.
    n : int
        Number of tokens.
    auto_range : (int, int)
        ``(low, high)``.
    threshold : float
        Conductance threshold in (0, 1).
    grid_shape : (int, int), default=None
        The token grid ``(gh, gw)`` (``gh * gw == n``); None skips the
        spatial test.
    grid_threshold : float, default=None
        Grid-conductance threshold in (0, 1]; None skips the spatial test.

    Returns
    -------
    labels : ndarray of shape (n,)
    """
    if grid_shape is not None:
        grid_shape = _grid_shape(grid_shape, n)
    spatial = grid_shape is not None and grid_threshold is not None
    lo, hi = auto_range
    hi = min(hi, n)
    lo = min(lo, hi)
    for k in range(hi, lo - 1, -1):
        if k <= 1:
            return np.zeros(n, dtype=np.int64)
        # one graph for every K: what its first fit warns of is not repeated
        with unwarned("") if k < hi else nullcontext():
            est = fit(k)
        vol = est.cluster_volumes_
        cond = _conductance(vol - est.cluster_associations_, vol)
        if cond.max() > threshold:
            continue
        if not spatial:
            break
        if grid_conductance(est.labels_, grid_shape, k).max() <= grid_threshold:
            break
    return est.labels_
