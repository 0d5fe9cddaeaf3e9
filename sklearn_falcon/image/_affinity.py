"""Cosine + power affinity between patch tokens (DiffCut / Falcon style)."""

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array
from sklearn.utils._param_validation import Interval, validate_params

from .._affinity import (
    canonical_sparse,
    check_affinity,
    check_dtype_kind,
    check_sparse_structure,
    float_sparse,
    clean_csr,
    cosine_power,
    zero_norm,
)
from .._affinity import cosine_power_affinity as _cosine_power_affinity
from .._backends import host_array
from .._sharded import is_dask_array
from .._threads import fit_threads

__all__ = ["cosine_power_affinity", "knn_cosine_power_affinity"]

# rows per block of the kNN search (bounds its (rows, n) similarity block)
_KNN_BLOCK_ELEMS = 1 << 24


def real_float32(features, name="features"):
    """``features`` as a float32 array, or a ValueError naming ``name`` for
    complex values (NumPy casts them to their real part, with only a
    ComplexWarning)."""
    f = np.asarray(features)
    if f.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype={f.dtype}. "
                         "Pass real float32 or float64 values.")
    return f.astype(np.float32, copy=False)


def _token_matrix(features):
    """``features`` as a finite float32 ``(n_tokens, n_features)`` matrix (a
    ``(gh, gw, C)`` token grid is flattened).

    The cosine is blind to a row's scale: rows whose squared norm would
    overflow float32 (values beyond about 1e18, float64 ones beyond float32's
    range too) are scaled by a power of two first, on a copy (cast as they
    were, they made a flat ``W``, or were refused as infinite).
    """
    f = np.asarray(features)
    if f.dtype.kind == "c":
        real_float32(f)  # refused by name (NumPy would keep the real part)
    if f.dtype != np.float32:  # (integers of 1e19 as well)
        f = np.asarray(f, dtype=np.float64)
    if f.ndim == 3:  # (not -1: a grid of no feature has no size to infer)
        f = f.reshape(f.shape[0] * f.shape[1], f.shape[2])
    if f.ndim != 2 or 0 in f.shape:  # (a scikit-learn or NumPy error)
        raise ValueError(
            "features must be 2-D (n_tokens, n_features), or a (gh, gw, "
            "n_features) grid, with at least one token and one feature; got "
            f"shape {np.shape(features)}.")
    if not np.all(np.isfinite(f)):
        raise ValueError("features contain NaN or infinite values.")
    top = np.abs(f).max(axis=1)
    big = top * np.sqrt(f.shape[1]) > 2.0**60
    if big.any():
        f = np.array(f)  # (not the caller's array)
        f[big] = np.ldexp(f[big], -np.frexp(top[big])[1][:, None])
    return np.asarray(f, dtype=np.float32)


def check_token_affinity(W, n_segments, auto_range=(1, 1)):
    """``W`` of :meth:`ImageSegmenter.cluster_tokens`: a square matrix (a
    nested list as an array; a tensor on the host) with at least
    ``n_segments`` tokens (``auto_range[0]`` for ``"auto"``), finite and
    nonnegative, its symmetric part taken with a warning (as by
    :func:`~sklearn_falcon._affinity.check_affinity`), or an error in those
    terms, naming ``W`` (not "the image yields only ... patch tokens" nor
    "'list' object has no attribute 'shape'"): the fit's checks named it
    ``X``, and with ``"auto"`` warned once per K tried.  A Dask array is
    left to the fit on its blocks."""
    dask = is_dask_array(W)
    if not dask:
        W = host_array(W)
    if not hasattr(W, "shape"):
        W = np.asarray(W)
    shape = tuple(W.shape)
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] == 0:
        raise ValueError(
            f"W must be a square (n_tokens, n_tokens) affinity; got shape {shape}.")
    k, name = ((auto_range[0], "auto_range[0]") if n_segments == "auto"
               else (n_segments, "n_segments"))
    if int(k) > shape[0]:
        raise ValueError(f"W holds only {shape[0]} tokens, fewer than {name}={k}.")
    if dask:
        return W
    check_dtype_kind(W, name="W")
    W = check_array(float_sparse(W), accept_sparse=("csr", "csc", "coo"),
                    dtype=(np.float64, np.float32), input_name="W")
    check_sparse_structure(W, "W")
    return check_affinity(canonical_sparse(W), name="W", copy=False)


@validate_params(
    {"features": ["array-like"], "power": [Interval(Real, 0, None, closed="neither")]},
    prefer_skip_nested_validation=True,
)
def cosine_power_affinity(features, power=10.0):
    """Dense affinity :math:`W = ((S - \\min S) / (\\max S - \\min S))^p`.

    :math:`p` is ``power`` and :math:`S` the cosine-similarity matrix of the
    rows of ``features``. This is
    the definition of ``FalconNCut(affinity="cosine", power=power)``, which
    this function calls (in float32).

    Parameters
    ----------
    features : array-like of shape (n_tokens, n_features) or (gh, gw, n_features)
        Token features; a grid is flattened in row-major order.
    power : float, default=10.0
        Sharpening exponent (DiffCut and Falcon use about 10 for ViT tokens).

    Returns
    -------
    W : ndarray of shape (n_tokens, n_tokens), float32
        Symmetric, entries in [0, 1]. If all similarities are equal, ``W`` is
        all ones.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import cosine_power_affinity
    >>> F = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]])
    >>> np.round(cosine_power_affinity(F, power=1.0), 3)
    array([[1.   , 0.995, 0.   ],
           [0.995, 1.   , 0.1  ],
           [0.   , 0.1  , 1.   ]], dtype=float32)
    """
    f = _token_matrix(features)
    with fit_threads(None):  # BLAS on one thread: W rounded as within a fit
        return _cosine_power_affinity(f, power)[0]


@validate_params(
    {"features": ["array-like"], "power": [Interval(Real, 0, None, closed="neither")],
     "n_neighbors": [Interval(Integral, 1, None, closed="left")],
     "n_range_rows": [Interval(Integral, 1, None, closed="left")],
     "random_state": ["random_state"]},
    prefer_skip_nested_validation=True,
)
def knn_cosine_power_affinity(features, power=10.0, *, n_neighbors=30,
                              n_range_rows=2048, random_state=0):
    """Sparse cosine-power affinity on the ``n_neighbors`` nearest tokens.

    The token graph of :func:`cosine_power_affinity` kept on each token's
    ``n_neighbors`` most similar tokens (by cosine) and symmetrized by the
    maximum, so that it holds ``O(n n_neighbors)`` entries instead of
    ``n**2``.  The minimum similarity of the min-max normalization is taken
    over ``n_range_rows`` random rows against all tokens (the dense
    version's is over all pairs); the search runs in row blocks of bounded
    size.  A range within rounding (identical tokens) gives a flat ``W``,
    as the dense version does.

    Parameters
    ----------
    features : array-like of shape (n_tokens, n_features) or (gh, gw, n_features)
        Token features.
    power : float, default=10.0
        Sharpening exponent.
    n_neighbors : int, default=30
        Neighbours kept per token (itself included).
    n_range_rows : int, default=2048
        Rows sampled for the similarity range.
    random_state : int, RandomState instance or None, default=0
        Seed of that sample.

    Returns
    -------
    W : scipy.sparse.csr_matrix of shape (n_tokens, n_tokens), float32
        Symmetric, entries in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import knn_cosine_power_affinity
    >>> F = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    >>> W = knn_cosine_power_affinity(F, power=1.0, n_neighbors=2)
    >>> W.nnz, bool(W[0, 1] > 0.9), float(W[0, 2])
    (8, True, 0.0)
    """
    from sklearn.utils import check_random_state

    f = _token_matrix(features)
    n = f.shape[0]
    k = min(int(n_neighbors), n)
    # unit rows; rows of zero norm (below 10 eps) exactly zero, as the dense
    # cosine_similarity has them (scaled by 1 / (10 eps), they were not)
    norm = np.linalg.norm(f, axis=1, keepdims=True)
    tiny = norm < zero_norm(np.float32)
    fn = f / np.where(tiny, np.float32(1), norm)
    fn[tiny[:, 0]] = 0
    with fit_threads(None):  # BLAS on one thread: ties decided as in a fit
        rng = check_random_state(random_state)
        sample = rng.choice(n, size=min(int(n_range_rows), n), replace=False)
        rows = max(1, _KNN_BLOCK_ELEMS // n)
        lo = np.inf
        for s in range(0, len(sample), rows):
            lo = min(lo, float((fn[sample[s:s + rows]] @ fn.T).min()))
        # a token's similarity to itself, 0 where every token is zero (W was all
        # zeros there; the dense W is flat)
        hi = 1.0 if np.any(fn) else 0.0
        if hi - lo <= float(np.finfo(np.float32).eps) ** 0.5:
            lo = hi  # identical tokens: a flat W, as the dense one (not rounding noise)
        indptr = np.arange(0, (n + 1) * k, k)
        indices = np.empty(n * k, dtype=np.int64)
        data = np.empty(n * k, dtype=np.float32)
        for s in range(0, n, rows):
            S = fn[s:s + rows] @ fn.T
            # each token among its own neighbours: a duplicate (of similarity
            # 1 as well, or 1 + rounding) took its place, leaving W_ii = 0
            r = np.arange(S.shape[0])
            own = S[r, s + r]
            S[r, s + r] = np.inf
            idx = np.argpartition(-S, k - 1, axis=1)[:, :k]
            S[r, s + r] = own
            sims = np.take_along_axis(S, idx, axis=1)
            indices[s * k:(s + S.shape[0]) * k] = idx.ravel()
            data[s * k:(s + S.shape[0]) * k] = cosine_power(sims, lo, hi, power).ravel()
        W = sp.csr_matrix((data, indices, indptr), shape=(n, n))
        return clean_csr(W.maximum(W.T).tocsr())
