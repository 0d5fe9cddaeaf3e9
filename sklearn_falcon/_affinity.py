"""Affinities: features or precomputed input -> a validated symmetric W.

``W`` is returned as a scipy CSR matrix (int32 indices where they fit, no
explicit zeros, sorted indices) or a C-contiguous dense ndarray, in float32
or float64.  The caller's arrays are never modified.
"""

import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.metrics.pairwise import cosine_similarity, rbf_kernel
from sklearn.neighbors import NearestNeighbors

from . import _kernels_numba as nk

PRECOMPUTED = ("precomputed", "precomputed_nearest_neighbors")


def check_dtype_kind(X, name="X"):
    """Reject bool (TypeError) and complex (ValueError) input, naming ``name``.

    Object arrays are left to :func:`sklearn.utils.check_array`, which
    converts numbers and rejects everything else.
    """
    dtype = getattr(X, "dtype", None)
    if dtype is None:
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


def _clean_csr(W):
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


def _max_asymmetry(W):
    """``max |W - W.T|``; for dense W in tiles, with no n x n temporary."""
    if sp.issparse(W):
        diff = W - W.T
        return float(abs(diff).max()) if diff.nnz else 0.0
    return float(nk.max_asymmetry_dense(W))


def check_affinity(W, *, name="X", symmetric="warn", tol=None):
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

    Returns
    -------
    W : CSR matrix or C-contiguous ndarray
        A new object; the input is never modified.
    """
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(
            f"A precomputed affinity {name} must be a square (n_samples, n_samples) "
            f"matrix; got {name} with shape={W.shape}."
        )
    if sp.issparse(W):
        W = _clean_csr(W)
        data = W.data
    else:
        W = np.array(W, order="C", copy=True)
        data = W
    if data.size and data.min() < 0:
        raise ValueError(
            f"The affinity {name} must be nonnegative; found a minimum value of "
            f"{float(data.min()):.6g}."
        )
    scale = float(data.max()) if data.size else 0.0  # data >= 0 here
    if tol is None:
        tol = (1e-5 if W.dtype == np.float32 else 1e-10) * max(scale, 1.0)
    asym = _max_asymmetry(W)
    if asym > tol:
        if symmetric == "raise":
            raise ValueError(
                f"The affinity {name} must be symmetric; max |{name} - {name}.T| = "
                f"{asym:.3g}."
            )
        warnings.warn(
            f"The affinity {name} is not symmetric (max |{name} - {name}.T| = "
            f"{asym:.3g}); using its symmetric part ({name} + {name}.T) / 2.",
            UserWarning,
            stacklevel=3,
        )
        W = (W + W.T) * W.dtype.type(0.5)
        W = _clean_csr(W) if sp.issparse(W) else np.ascontiguousarray(W)
    return W


def check_cross_affinity(A, n_train, *, name="X"):
    """Validate an (n_new, n_train) cross-affinity for ``predict``."""
    if A.ndim != 2 or A.shape[1] != n_train:
        raise ValueError(
            f"For a precomputed affinity, predict expects the cross-affinity {name} "
            f"of shape (n_new, n_train={n_train}); got shape={A.shape}."
        )
    data = A.data if sp.issparse(A) else A
    if data.size and data.min() < 0:
        raise ValueError(
            f"The affinity {name} must be nonnegative; found a minimum value of "
            f"{float(data.min()):.6g}."
        )
    return sp.csr_matrix(A) if sp.issparse(A) else A


class AffinityBuilder:
    """Builds W from features (or checks a precomputed W) and its
    cross-affinities for out-of-sample prediction.

    Parameters
    ----------
    affinity : str or callable
    n_neighbors : int
    gamma : float or None
    power : float
    n_jobs : int or None
    """

    def __init__(self, affinity, *, n_neighbors=10, gamma=1.0, power=1.0,
                 n_jobs=None):
        self.affinity = affinity
        self.n_neighbors = n_neighbors
        self.gamma = gamma
        self.power = power
        self.n_jobs = n_jobs

    def fit_transform(self, X):
        """Return the training affinity W of X (n, n)."""
        a = self.affinity
        n = X.shape[0]
        self.n_train_ = n
        if a == "precomputed":
            return check_affinity(X, name="X")
        if a in ("nearest_neighbors", "precomputed_nearest_neighbors"):
            k = min(self.n_neighbors, n)
            metric = "precomputed" if a == "precomputed_nearest_neighbors" else "minkowski"
            if metric == "precomputed":
                self._check_distances(X)
            self.nn_ = NearestNeighbors(n_neighbors=k, metric=metric,
                                        n_jobs=self.n_jobs).fit(X)
            C = self.nn_.kneighbors_graph(X, mode="connectivity")
            W = 0.5 * (C + C.T)
            dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
            return _clean_csr(W.astype(dtype))
        if a == "rbf":
            self.X_fit_ = X
            return self.recompute()
        if a == "cosine":
            self.X_fit_ = X
            S = cosine_similarity(X)
            self.cos_min_ = float(S.min())
            self.cos_max_ = float(S.max())
            return self._cosine_power(S)
        if callable(a):
            self.X_fit_ = X
            W = self._call(X)
            if W.shape != (n, n):
                raise ValueError(
                    f"The callable affinity must return an (n_samples, n_samples) "
                    f"matrix; it returned shape={W.shape} for n_samples={n}."
                )
            return check_affinity(W, name="affinity(X)")
        raise ValueError(f"Unknown affinity={a!r}.")  # pragma: no cover

    def adopt_fit(self, X, problem):
        """Record the fit of a matrix-free torch ``problem`` built on ``X``
        (the same state :meth:`fit_transform` would leave, without W)."""
        self.n_train_ = X.shape[0]
        self.X_fit_ = X
        if self.affinity == "cosine":
            lo, hi = problem.cosine_range
            self.cos_min_, self.cos_max_ = float(lo[0]), float(hi[0])

    def recompute(self):
        """The dense training affinity, rebuilt from the stored features."""
        if self.affinity == "cosine":
            return self._cosine_power(cosine_similarity(self.X_fit_))
        return np.ascontiguousarray(
            rbf_kernel(self.X_fit_, gamma=self.gamma).astype(self.X_fit_.dtype,
                                                             copy=False))

    def _check_distances(self, X):
        data = X.data if sp.issparse(X) else X
        if data.size and data.min() < 0:
            raise ValueError(
                "affinity='precomputed_nearest_neighbors' expects nonnegative "
                f"distances in X; found a minimum of {float(data.min()):.6g}."
            )

    def _cosine_power(self, S):
        span = self.cos_max_ - self.cos_min_
        if span <= 0:
            W = np.ones_like(S)
        else:
            W = np.clip((S - self.cos_min_) / span, 0.0, 1.0)
        if self.power != 1:
            W = W ** self.power
        return np.ascontiguousarray(W)

    def cross(self, X_new):
        """Affinity (n_new, n_train) between new samples and the training set."""
        a = self.affinity
        if a == "precomputed":
            return check_cross_affinity(X_new, self.n_train_)
        if a in ("nearest_neighbors", "precomputed_nearest_neighbors"):
            if a == "precomputed_nearest_neighbors":
                if X_new.shape[1] != self.n_train_:
                    raise ValueError(
                        "For affinity='precomputed_nearest_neighbors', predict expects "
                        f"distances of shape (n_new, n_train={self.n_train_}); got "
                        f"shape={X_new.shape}."
                    )
                self._check_distances(X_new)
            return self.nn_.kneighbors_graph(X_new, mode="connectivity")
        if a == "rbf":
            return rbf_kernel(X_new, self.X_fit_, gamma=self.gamma)
        if a == "cosine":
            return self._cosine_power(cosine_similarity(X_new, self.X_fit_))
        A = self._call(X_new, self.X_fit_)
        return check_cross_affinity(A, self.n_train_, name="affinity(X, X_fit)")

    def _call(self, X, Y=None):
        """Call a user affinity and check its output is finite and real."""
        A = self.affinity(X) if Y is None else self.affinity(X, Y)
        if sp.issparse(A):
            A = sp.csr_matrix(A, dtype=np.float64)
            values = A.data
        else:
            A = np.asarray(A)
            check_dtype_kind(A, name="affinity(X)")
            A = A.astype(np.float64, copy=False)
            values = A
        if A.ndim != 2:
            raise ValueError(
                f"The callable affinity must return a 2-D matrix; got ndim={A.ndim}."
            )
        if not np.all(np.isfinite(values)):
            raise ValueError("The callable affinity returned NaN or inf values.")
        return A
