"""Validation of affinity matrices (and of the dtype of any input).

``W`` comes out as a scipy CSR matrix (int32 indices where they fit, no
explicit zeros, sorted indices) or a C-contiguous dense ndarray, in float32
or float64.  The caller's arrays are never modified.
"""

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from .._jit import jit
from .._log import warn_user
from .._memory import check_allocation
from .._structure import check_sparse_structure, float_sparse

__all__ = ["canonical_sparse", "check_affinity", "check_cross_affinity",
           "check_distances", "check_dtype_kind", "check_finite_degrees",
           "check_finite_top",
           "check_nonnegative", "check_sparse_structure", "clean_csr",
           "count_components", "float_sparse",
           "symmetric_part", "warn_if_disconnected", "warn_if_flat",
           "warn_of_components",
           "warn_if_flat_cosine", "active_subgraph", "restrict_to_active",
           "unit_exponent", "unit_scaled"]

# From this many stored entries the connectivity check of a CSR graph runs
# as a Numba kernel, without a transpose (at 10M entries 0.08 s against
# 0.26 s); below, scipy's, which needs no compiling.  The symmetry check
# runs as a kernel at every size (at 10M entries 0.09 s against 0.2 s).
CHECK_KERNEL_MIN = 1_000_000


def check_dtype_kind(X, name="X"):
    """Reject bool (TypeError) and complex (ValueError) input, naming ``name``.

    Object arrays are left to :func:`sklearn.utils.check_array`, which
    converts numbers and rejects everything else.
    """
    dtype = getattr(X, "dtype", None)
    if dtype is None:
        return
    try:
        dtype = np.dtype(dtype)
    except TypeError:  # another array library's own dtype: check_array decides
        return
    if dtype == np.bool_:
        raise TypeError(
            f"{name} has dtype=bool, which is not supported; pass a float32 or "
            f"float64 array (e.g. {name}.astype(np.float32))."
        )
    if np.issubdtype(dtype, np.complexfloating):
        raise ValueError(
            f"Complex data not supported: {name} has dtype={dtype}. Pass real "
            "float32 or float64 values."
        )


def _is_clean_csr(W):
    return (
        W.format == "csr"
        and W.indices.dtype == np.int32
        and W.indptr.dtype == np.int32
        and W.has_canonical_format
        and not np.any(W.data == 0)
    )


def clean_csr(W):
    """CSR with sorted int32 indices and no explicit zeros.

    A matrix already in that form is returned as is (it is only ever read,
    so no copy is needed); anything else is converted on a copy.
    """
    if sp.issparse(W) and _is_clean_csr(W):
        return W
    W = sp.csr_matrix(W, copy=True)
    W.sum_duplicates()
    W.eliminate_zeros()
    if W.nnz < np.iinfo(np.int32).max and W.shape[0] < np.iinfo(np.int32).max:
        W.indptr = W.indptr.astype(np.int32, copy=False)
        W.indices = W.indices.astype(np.int32, copy=False)
    W.sort_indices()
    return W


def canonical_sparse(X):
    """``X`` itself, or, for a CSR or CSC ``X`` with duplicate entries or
    unsorted indices, a canonical copy: duplicates summed, as SciPy reads
    them (scikit-learn's row norms, of the kNN, RBF and cosine affinities,
    would add their squares instead)."""
    if (not sp.issparse(X) or X.format not in ("csr", "csc")
            or X.has_canonical_format):
        return X
    X = X.copy()
    X.sum_duplicates()
    return X


@jit
def max_asymmetry_dense(W):
    """``max |W - W'|`` of a square dense matrix, in cache-sized tiles (no
    ``n x n`` temporary; 1.2 ms against NumPy's 8.7 ms at 1024^2)."""
    n = W.shape[0]
    tile = 64
    worst = 0.0
    for bi in range(0, n, tile):
        for bj in range(bi, n, tile):
            for i in range(bi, min(bi + tile, n)):
                for j in range(max(bj, i + 1), min(bj + tile, n)):
                    d = abs(np.float64(W[i, j]) - np.float64(W[j, i]))
                    if d > worst:
                        worst = d
    return worst


@jit
def max_asymmetry_csr(indptr, indices, data):
    """``max |W - W'|`` of a square CSR matrix in canonical form (sorted
    column indices, no duplicates), without its transpose.

    The rows are read in order.  The mirror ``(j, i)`` of an entry
    ``(i, j)`` above the diagonal is the first entry of row ``j`` not yet
    matched (a cursor per row): row ``j``'s entries left of the diagonal
    come in the order of ``i``.  Entries a cursor passes over, and those it
    never reaches, have no mirror and count with their own value."""
    n = indptr.shape[0] - 1
    cursor = indptr[:-1].astype(np.int64)
    worst = 0.0
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            if j <= i:
                continue
            q = cursor[j]
            end = indptr[j + 1]
            while q < end and indices[q] < i:  # (j, c < i): no (c, j)
                worst = max(worst, abs(np.float64(data[q])))
                q += 1
            if q < end and indices[q] == i:
                d = abs(np.float64(data[p] - data[q]))
                q += 1
            else:
                d = abs(np.float64(data[p]))
            cursor[j] = q
            worst = max(worst, d)
    for j in range(n):
        for q in range(cursor[j], indptr[j + 1]):
            if indices[q] >= j:
                break
            worst = max(worst, abs(np.float64(data[q])))
    return worst


@jit(inline=True)
def _root(parent, a):
    """The root of ``a``'s set, halving the path on the way."""
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


@jit(inline=True)
def _join_entries(indptr, indices, parent):
    """Union-find over the stored entries of a square CSR matrix, each an
    undirected edge (explicit zeros included, as scipy's
    ``connected_components`` counts them); a set's root is its smallest
    node.  Returns the number of sets."""
    count = parent.shape[0]
    for i in range(parent.shape[0]):
        for p in range(indptr[i], indptr[i + 1]):
            a = _root(parent, i)
            b = _root(parent, indices[p])
            if a != b:
                if a < b:
                    parent[b] = a
                else:
                    parent[a] = b
                count -= 1
    return count


@jit
def n_components_csr(indptr, indices):
    """The number of connected components of the undirected graph of a
    square CSR matrix's entries (union-find with path halving)."""
    parent = np.arange(indptr.shape[0] - 1)
    return _join_entries(indptr, indices, parent)


@jit
def component_labels_csr(indptr, indices):
    """``(n_components, labels)`` of the undirected graph of a square CSR
    matrix's entries, as ``scipy.sparse.csgraph.connected_components(W,
    directed=False)`` gives them (components numbered in the order of
    their smallest node; int64 labels), without its validation and
    transpose (scipy's call takes 40-80 us on the small subgraphs of the
    multilevel start, this one about 8 us on a 200-node graph)."""
    n = indptr.shape[0] - 1
    parent = np.arange(n)
    count = _join_entries(indptr, indices, parent)
    labels = np.empty(n, dtype=np.int64)
    k = 0
    for i in range(n):
        r = _root(parent, i)
        if r == i:  # the smallest node of a component: a new label
            labels[i] = k
            k += 1
        else:  # r < i: labelled already
            labels[i] = labels[r]
    return count, labels


def _max_asymmetry(W):
    # at every size (scipy's max |W - W'| was 3-4x the time below 200,000
    # entries, with two copies of W; about as fast at 1M random entries)
    if sp.issparse(W):  # canonical: clean_csr has run
        return float(max_asymmetry_csr(W.indptr, W.indices, W.data))
    return float(max_asymmetry_dense(W))


def check_affinity(W, *, name="X", symmetric="warn", tol=None, copy=True):
    """Validate a square, symmetric, nonnegative, finite affinity matrix.

    Parameters
    ----------
    W : ndarray or sparse matrix of shape (n, n)
        Already passed through ``check_array`` (finite, float32/float64).
    name : str
        The parameter name quoted in error messages.
    symmetric : {"warn", "raise"}
        What to do with an asymmetric matrix: ``"warn"`` symmetrizes it as
        ``(W + W.T) / 2`` with a warning, ``"raise"`` raises ValueError.
    tol : float, default=None
        Absolute symmetry tolerance; defaults to ``1e-5`` relative to
        ``max|W|`` for float32 and ``1e-10`` for float64.
    copy : bool, default=True
        Copy a dense ``W`` (C order) for the caller to keep; ``False`` for a
        caller that only reads it (the metrics).

    Returns
    -------
    W : CSR matrix or ndarray
        A new object (a dense one C-contiguous), except a clean CSR or, with
        ``copy=False``, a dense ``W`` that is symmetric, returned as is; the
        input is never modified.
    """
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(
            f"A precomputed affinity {name} must be a square (n_samples, n_samples) "
            f"matrix; got {name} with shape={W.shape}."
        )
    if sp.issparse(W):
        check_sparse_structure(W, name)
        W = clean_csr(W)
        data = W.data
    elif copy:
        check_allocation(
            W.size * W.dtype.itemsize, f"A copy of the dense {W.shape} affinity {name}",
            "Pass a sparse matrix (e.g. a kNN graph, or "
            "affinity='precomputed_nearest_neighbors' with distances) instead.")
        W = np.array(W, order="C", copy=True)
        data = W
    else:
        W = data = np.asarray(W)
    check_nonnegative(data, name)
    check_finite_degrees(W, name)
    return symmetric_part(W, name=name, symmetric=symmetric, tol=tol)


def symmetric_part(W, *, name="X", symmetric="warn", tol=None):
    """``W`` itself if it is symmetric within ``tol``; otherwise ``(W + W.T)
    / 2`` with a warning (``symmetric="warn"``) or a ValueError
    (``"raise"``), naming ``name``.

    ``W``: a nonnegative CSR matrix as :func:`clean_csr` returns it, or a
    dense ndarray.  ``tol`` defaults to ``1e-5`` relative to ``max|W|`` for
    float32 and ``1e-10`` for float64.  The warning points at the user's
    call (:func:`~sklearn_falcon._log.warn_user`).
    """
    data = W.data if sp.issparse(W) else W
    scale = float(data.max()) if data.size else 0.0  # data >= 0 here
    if tol is None:
        tol = (1e-5 if W.dtype == np.float32 else 1e-10) * scale
    asym = _max_asymmetry(W)
    if asym <= tol:
        return W
    if symmetric == "raise":
        raise ValueError(
            f"The affinity {name} must be symmetric; max |{name} - {name}.T| = "
            f"{asym:.3g}."
        )
    warn_user(
        f"The affinity {name} is not symmetric (max |{name} - {name}.T| = "
        f"{asym:.3g}); using its symmetric part ({name} + {name}.T) / 2."
    )
    W = (W + W.T) * W.dtype.type(0.5)
    return clean_csr(W) if sp.issparse(W) else np.ascontiguousarray(W)


def check_finite_top(top, name):
    """Raise ValueError if ``top``, the largest (absolute) value of the
    input ``name``, is NaN or infinite: scikit-learn's own check, which
    says so, is skipped under ``sklearn.set_config(assume_finite=True)``,
    and the range checks after it would call the value an overflow."""
    if not np.isfinite(top):
        raise ValueError(
            f"Input {name} contains NaN or infinity (scikit-learn's check for them "
            "is skipped under sklearn.set_config(assume_finite=True))."
        )


def check_finite_degrees(W, name):
    """Raise ValueError, naming ``name``, if the degrees (row sums) of a
    nonnegative ``W`` (or of a cross-affinity), or their total, overflow its
    dtype (entries near 1e308): the objective would be NaN.  A pass over
    ``W`` only when its largest entry times its number of entries reaches
    the dtype's range."""
    data = W.data if sp.issparse(W) else W
    if not data.size:
        return
    top = float(data.max())
    check_finite_top(top, name)
    limit = float(np.finfo(W.dtype).max)
    if top * data.size < limit:  # no partial sum can overflow
        return
    with np.errstate(over="ignore"):  # an overflow is the error below
        degrees = np.asarray(W.sum(axis=1)).ravel()
        total = degrees.sum(dtype=np.float64)
    if np.all(np.isfinite(degrees)) and np.isfinite(total) and total < limit:
        return
    what = f": its largest entry is {top:.3g}"
    if np.all(np.isfinite(degrees)) and float(degrees.max()) < limit:
        what = (" in their total (the volume): its largest degree is "
                f"{degrees.max():.3g}")
    raise ValueError(
        f"The degrees (row sums) of the affinity {name} overflow {W.dtype}{what}. "
        f"Divide {name} by its maximum; the normalized cut does not change when "
        "the affinity is scaled."
    )


def check_nonnegative(data, name):
    """Raise ValueError, naming ``name`` and the minimum, if ``data`` (the
    values of an affinity) has a negative entry."""
    if data.size and data.min() < 0:
        raise ValueError(
            f"Negative values in data passed as the affinity {name}: it must be "
            f"nonnegative; found a minimum value of {float(data.min()):.6g}."
        )


def check_distances(X, name="X"):
    """Raise ValueError, naming ``name``, for a NaN, infinite (scikit-learn's
    check is skipped under ``assume_finite=True``) or negative entry of the
    distance matrix ``X`` of ``affinity="precomputed_nearest_neighbors"``."""
    data = X.data if sp.issparse(X) else X
    if not data.size:
        return
    check_finite_top(float(data.max()), name)
    if data.min() < 0:
        raise ValueError(
            f"Negative values in data passed as {name}: "
            "affinity='precomputed_nearest_neighbors' expects nonnegative "
            f"distances in {name}; found a minimum of {float(data.min()):.6g}."
        )


def check_cross_affinity(A, n_train, *, name="X"):
    """Validate an (n_new, n_train) cross-affinity for ``predict``."""
    if A.ndim != 2 or A.shape[1] != n_train:
        raise ValueError(
            f"For a precomputed affinity, predict expects the cross-affinity {name} "
            f"of shape (n_new, n_train={n_train}); got shape={A.shape}."
        )
    check_sparse_structure(A, name)
    check_nonnegative(A.data if sp.issparse(A) else A, name)
    check_finite_degrees(A, name)
    return sp.csr_matrix(A) if sp.issparse(A) else A


def _dense_n_components(W, chunk=1 << 22):
    """Connected components of a dense symmetric ``W`` by breadth-first
    search over its rows, ``chunk`` entries at a time (no sparse copy)."""
    n = W.shape[0]
    seen = np.zeros(n, dtype=bool)
    n_comp = 0
    while not seen.all():
        n_comp += 1
        frontier = np.array([int(np.argmin(seen))])
        seen[frontier] = True
        while frontier.size and not seen.all():  # (all seen: nothing to find)
            reach = np.zeros(n, dtype=bool)
            step = max(1, chunk // n)
            for i in range(0, frontier.size, step):
                reach |= (W[frontier[i:i + step]] != 0).any(axis=0)
            frontier = np.flatnonzero(reach & ~seen)
            seen[frontier] = True
    return n_comp


def warn_if_flat(flat, n_samples, cause, advice, factor=1.0):
    """Warn, when ``flat`` (every affinity of the ``n_samples > 1`` samples
    is equal), that the graph is complete with equal weights and the labels
    arbitrary; ``cause`` starts the warning and ``advice`` ends it.  Every
    partition's NCut is ``(n_clusters - 1) * factor``: ``n w / d`` of off-
    diagonal weight ``w`` and degree ``d``, 1 where the diagonal is ``w``."""
    if flat and n_samples > 1:
        ncut = "n_clusters - 1" if factor == 1 else f"(n_clusters - 1) x {factor:.6g}"
        warn_user(
            f"{cause}, so the graph is complete with equal weights and every "
            f"partition has the same NCut ({ncut}); the labels are "
            f"arbitrary. {advice}"
        )


def warn_if_flat_cosine(lo, hi, n_samples):
    """Warn that every cosine similarity ``lo`` to ``hi`` is equal (``hi <=
    lo``, see :func:`~._kinds.cosine_range`): ``W`` is all ones."""
    warn_if_flat(not hi > lo, n_samples, "Every cosine similarity of the samples "
                 "is equal (parallel rows, or rows of zero norm): W is all ones",
                 "(Rows of norm below 10 eps of the features' dtype count as zero.)")


def count_components(W):
    """Connected components of the symmetric affinity ``W`` (dense or
    sparse), in about the time of a pass over it."""
    if not sp.issparse(W):
        W = np.asarray(W)  # each row is read once
        return int(_dense_n_components(W)) if W.size else 1
    if W.nnz >= CHECK_KERNEL_MIN:
        W = W.tocsr()
        return int(n_components_csr(W.indptr, W.indices))
    return int(connected_components(W, directed=False, return_labels=False))


def warn_if_disconnected(W, n_clusters, hint=None):
    """Warn, with the number of components, when ``W`` is not connected, as
    scikit-learn's spectral embedding does (a dense ``W`` too: a kernel that
    underflows, or an adjacency matrix).  ``hint``: a sentence that ends the
    warning, naming the parameter that connects it (``Affinity.connect_hint``)."""
    if W is None:  # matrix-free: W is never formed
        return
    warn_of_components(count_components(W), n_clusters, hint)


def warn_of_components(n_comp, n_clusters, hint=None):
    """:func:`warn_if_disconnected`'s warning, of a graph of ``n_comp``
    components (counted elsewhere: the sharded fit's coarsest graph)."""
    if n_comp <= 1:
        return
    warn_user(
        f"The affinity graph is not fully connected: it has {n_comp} connected "
        f"components (n_clusters={n_clusters}). The normalized cut separates "
        f"components at no cost.{' ' + hint if hint else ''}"
    )


def check_active_count(n_active, n_samples, n_clusters):
    """Raise when fewer than ``n_clusters`` of the ``n_samples`` samples have
    a nonzero degree; warn when some have none.  Returns whether all have
    one (the in-memory and the sharded fit share these messages)."""
    if n_active == 0:
        raise ValueError(
            "The affinity matrix is all zeros: no sample has a nonzero degree, so "
            "the normalized cut is undefined."
        )
    if n_active < n_clusters:
        raise ValueError(
            f"Only {n_active} of {n_samples} samples have a nonzero degree, fewer "
            f"than n_clusters={n_clusters}."
        )
    if n_active < n_samples:
        warn_user(
            f"{n_samples - n_active} sample(s) have zero degree (no affinity to any "
            "sample); they are left out of the solve and given the cluster of "
            "largest volume."
        )
        return False
    return True


def _drop_empty_rows(W, active, keep):
    """The CSR ``W`` restricted to the rows and columns ``keep``
    (``np.flatnonzero(active)``).

    A zero-degree sample of a clean, symmetric ``W`` stores no entry, in
    its row or its column. Then no entry is dropped: the result shares
    ``W.data`` (read only, like ``W``) and writes only its remapped column
    indices, a third of a CSR copy instead of the two that slicing rows,
    then columns, makes. A ``W`` that stores entries (explicit zeros) for
    those samples is sliced.
    """
    if np.diff(W.indptr)[~active].any():
        return W[keep][:, keep].tocsr()
    new_id = np.full(W.shape[0], -1, dtype=W.indices.dtype)
    new_id[keep] = np.arange(keep.size, dtype=W.indices.dtype)
    indices = new_id[W.indices]
    if indices.size and indices.min() < 0:
        return W[keep][:, keep].tocsr()
    indptr = np.append(W.indptr[keep], W.indptr[-1]).astype(W.indptr.dtype)
    m = keep.size
    W_keep = sp.csr_matrix((W.data, indices, indptr), shape=(m, m), copy=False)
    # a monotone map keeps each row's order
    W_keep.has_sorted_indices = W.has_sorted_indices
    return W_keep


def active_subgraph(W, degrees, active, n_clusters, hint=None):
    """The graph of the solve: ``W`` without its zero-degree samples.

    Raises ValueError when fewer than ``n_clusters`` samples have a nonzero
    degree; warns when some have none (they are left out, and the caller
    gives them the cluster of largest volume) and when the remaining graph
    is not connected (:func:`warn_if_disconnected`).  ``W`` is None on the
    matrix-free path (and stays None).

    Returns
    -------
    W_active, degrees_active
        Scaled up by a power of two where the degrees are tiny
        (:func:`unit_scaled`): use ``degrees[active]`` for the volumes.
    """
    n_samples = degrees.shape[0]
    n_active = int(active.sum())
    if not check_active_count(n_active, n_samples, n_clusters):
        W = None if W is None else restrict_to_active(W, active)
        degrees = degrees[active]
    warn_if_disconnected(W, n_clusters, hint)
    return unit_scaled(W, degrees)


# A graph whose degrees are all below 2**-UNIT_SCALE_EXP is solved scaled
# up by a power of two (unit_scaled).
UNIT_SCALE_EXP = 200


def unit_exponent(top):
    """The power of two by which :func:`unit_scaled` multiplies a graph of
    largest degree ``top``: ``e`` such that ``top * 2**e`` is in ``[1, 2)``
    when ``top`` is below ``2**-UNIT_SCALE_EXP``, otherwise 0."""
    if not (np.isfinite(top) and top > 0.0):
        return 0
    e = int(np.frexp(top)[1]) - 1  # top / 2**e in [1, 2)
    return -e if e < -UNIT_SCALE_EXP else 0


def unit_scaled(W, degrees):
    """``(W, degrees)`` times the power of two that brings the largest degree
    into ``[1, 2)``, when it is below ``2**-UNIT_SCALE_EXP``; otherwise as
    they are (no copy).

    The normalized cut does not depend on the scale of ``W``, but the
    solver's and the initializations' arithmetic does at the low end of the
    float range: with subnormal degrees (every weight near 1e-320),
    ``1 / d`` and ``1 / vol`` overflow to infinity, the matching of the
    multilevel start saw ties everywhere and the scores were NaN.  Scaling
    up is exact (no entry can overflow: each is at most its degree; a
    float32 ``W`` never needs it).  A graph of huge degrees is left alone:
    scaling it down would flush its smallest entries to zero.  A new array
    is made (``W`` is the caller's, or shares its data); ``None`` stays
    None.
    """
    top = float(degrees.max()) if degrees.size else 1.0
    e = -unit_exponent(top)
    if W is None or e == 0:
        return W, degrees
    if sp.issparse(W):  # a new data array; the index arrays are only read
        sorted_ = W.has_sorted_indices
        W = sp.csr_matrix((np.ldexp(W.data, -e), W.indices, W.indptr),
                          shape=W.shape, copy=False)
        W.has_sorted_indices = sorted_
    else:
        W = np.ldexp(W, -e)
    return W, np.ldexp(degrees, -e)


def restrict_to_active(W, active):
    """``W`` (dense, or sparse: then CSR) restricted to the rows and columns
    of the samples ``active`` (a boolean mask), without copying a sparse
    ``W``'s data where it stores nothing for the others
    (:func:`_drop_empty_rows`)."""
    idx = np.flatnonzero(active)
    if sp.issparse(W):
        return _drop_empty_rows(W.tocsr(), active, idx)
    return W[np.ix_(idx, idx)]
