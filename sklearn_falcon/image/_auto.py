"""Eigen-free choice of the number of segments (``n_segments="auto"``)."""

import operator
from contextlib import nullcontext
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array
from sklearn.utils._param_validation import Interval, validate_params

from .._affinity import check_affinity, check_dtype_kind, float_sparse
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
    W = check_array(_native_float(float_sparse(W)), accept_sparse=("csr", "csc", "coo"),
                    dtype=(np.float64, np.float32), input_name="W")
    labels = check_label_values(labels)
    # its index arrays within its shape (read unchecked by the kernels),
    # nonnegative, degrees in range, the symmetric part of an asymmetric W
    W = check_affinity(W, name="W", copy=False)
    uniq, lab = np.unique(labels, return_inverse=True)
    k = len(uniq)
    C = cluster_pair_weights(W, lab, k)
    vol = C.sum(axis=1).copy()
    cond = _cluster_conductances(C, vol)
    # fast: no gain is NaN or -inf, and each row's first largest gain
    # (best, at column arg) finds the first best pair in (a, b) order
    G, fast = _all_pair_gains(C, vol)
    arg = np.argmax(G, axis=1)
    best = G[np.arange(k), arg]
    alive = np.ones(k, dtype=bool)
    owner = np.arange(k)  # the cluster that each input segment is in

    def labels_now():
        rank = np.cumsum(alive) - 1  # ids 0..K-1 by the clusters' first ids
        return rank[owner][lab].astype(np.int64)

    history = {k: _max_in_order(cond[alive])}
    best_k = None
    if history[k] <= threshold:
        best_k, best_labels = k, labels_now()
    m = k
    while m > max(min_segments, 1):
        if fast:
            a = int(np.argmax(best))
            b = int(arg[a])
        else:
            a, b = _first_best_pair(G, np.flatnonzero(alive))
        C[a, :] += C[b, :]
        C[:, a] += C[:, b]
        vol[a] += vol[b]
        alive[b] = False
        owner[owner == b] = a
        m -= 1
        cond[a] = _cluster_conductances(C[a:a + 1, a:a + 1], vol[a:a + 1])[0]
        # the gains of the pairs with a change; those with b are gone
        G[b, :] = G[:, b] = -np.inf
        best[b] = -np.inf
        rest = np.flatnonzero(alive)
        lo, hi = rest[rest < a], rest[rest > a]
        G[lo, a] = _pair_gains(C, vol, lo, np.full(lo.size, a))
        G[a, hi] = _pair_gains(C, vol, np.full(hi.size, a), hi)
        changed = np.r_[G[lo, a], G[a, hi]]
        fast = fast and not np.any(np.isnan(changed) | np.isneginf(changed))
        if fast:
            redo = rest[(arg[rest] == a) | (arg[rest] == b) | (rest == a)]
            up = lo[(arg[lo] != a) & (arg[lo] != b)]
            new = G[up, a]
            take = (new > best[up]) | ((new == best[up]) & (a < arg[up]))
            best[up[take]], arg[up[take]] = new[take], a
            arg[redo] = np.argmax(G[redo], axis=1)
            best[redo] = G[redo, arg[redo]]
        history[m] = _max_in_order(cond[alive])
        if best_k is None and history[m] <= threshold:
            best_k, best_labels = m, labels_now()
    if best_k is None:
        best_k, best_labels = m, labels_now()
    return best_k, best_labels, history


def _cluster_conductances(C, vol):
    """``(vol_a - C_aa) / vol_a`` of each cluster (0 where ``vol_a`` is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(vol > 0, (vol - np.diagonal(C)) / vol, 0.0)


def _all_pair_gains(C, vol):
    """``(G, fast)``: the ``(K, K)`` gains of :func:`_pair_gains` above the
    diagonal, ``-inf`` on and below it, computed in row blocks (the whole
    matrix at once held about five ``(K, K)`` temporaries: 1 GB at
    ``K`` = 5,000); ``fast``: no gain above the diagonal is NaN or
    ``-inf``."""
    k = C.shape[0]
    G = np.empty((k, k))
    step = max(1, (1 << 16) // max(k, 1))
    fast = True
    for a in range(0, k, step):
        b = min(k, a + step)
        block = G[a:b]
        block[...] = _pair_gains(C, vol, rows=slice(a, b))
        block[np.arange(a, b)[:, None] >= np.arange(k)] = -np.inf
        fast = (fast and not np.isnan(block).any() and np.isneginf(block).sum()
                == (b - a) * (a + b + 1) // 2)
    return G, fast


def _pair_gains(C, vol, x=None, y=None, rows=None):
    """The NCut decrease of merging clusters ``x[i] < y[i]`` (all pairs, or
    those of the clusters ``rows`` (a slice) with all: a ``(K, K)`` or
    ``(rows, K)`` matrix, read above its diagonal), each rounded as one
    pair's scalar formula; ``inf`` where one has no volume (it merges at no
    cost, first: its 0 / 0 gain was NaN, never the best after another pair,
    so the result followed the ids)."""
    d = np.diagonal(C)
    if x is None:
        r = slice(None) if rows is None else rows
        va, vb, caa, cbb, cab = vol[r, None], vol[None, :], d[r, None], d[None, :], C[r]
    else:
        va, vb, caa, cbb, cab = vol[x], vol[y], d[x], d[y], C[x, y]
    with np.errstate(divide="ignore", invalid="ignore"):
        old = (va - caa) / va + (vb - cbb) / vb
        v = va + vb
        gain = old - (v - caa - cbb - 2 * cab) / v
    return np.where((va > 0) & (vb > 0), gain, np.inf)


def _first_best_pair(G, rest):
    """The pair ``(a, b)`` of ``rest`` that a scan of the pairs in order
    keeps, with ``>``, from the gains ``G[a, b]`` (``a < b``): the first
    largest, NaN skipped unless first."""
    g = G[np.ix_(rest, rest)][np.triu_indices(rest.size, 1)]
    if np.isnan(g[0]):
        i = 0
    else:
        ok = ~np.isnan(g)
        i = int(np.flatnonzero(ok & (g == g[ok].max()))[0])
    a, b = np.triu_indices(rest.size, 1)
    return int(rest[a[i]]), int(rest[b[i]])


def _max_in_order(values):
    """``max(values)`` as Python's ``max`` takes it (the first largest; NaN
    kept only where it comes first)."""
    top = values.max()
    return top if not np.isnan(top) else max(values)


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
