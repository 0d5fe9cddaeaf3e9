"""The affinities of FalconNCut: one class each, and the registry.

An affinity turns the estimator's input into the symmetric ``W`` that is
clustered (:meth:`Affinity.fit`), and new samples into their affinity to the
training samples for ``predict`` (:meth:`Affinity.cross`).  The formula of
each affinity is written once, here; the torch backend's row blocks of the
matrix-free path are tested against it.  :data:`AFFINITIES` maps the
``affinity`` parameter to its class; the estimator's constraints and
``falcon_batch``'s options derive from it.

To add an affinity: a subclass of :class:`Affinity` here, with its entry in
:data:`AFFINITIES` (and tests); to form it matrix-free, its row formula in
``_backends/_torch/_affinity.py`` too.
"""

import copy
import inspect

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from sklearn.utils.extmath import row_norms, safe_sparse_dot

# sklearn.neighbors and sklearn.metrics (0.2 s of import time) are imported
# by the functions that use them (a small kNN fit uses neither)

from .._log import warn_user
from .._memory import check_allocation, dense_nbytes
from .._structure import sparse_astype
from ._check import (
    check_affinity,
    check_cross_affinity,
    check_distances,
    check_dtype_kind,
    clean_csr,
    warn_if_flat,
    warn_if_flat_cosine,
)
from ._neighbors import (
    _BruteNeighbors,
    _check_distance_range,
    _far_shift,
    _knn_connectivity,
    _TreeNeighbors,
)

__all__ = ["AFFINITIES", "Affinity", "cosine_power", "cosine_power_affinity",
           "cosine_range", "cosine_similarity", "make_affinity", "start_graph",
           "warn_if_flat_rbf", "zero_norm"]

# What to do instead of a dense affinity that does not fit in memory.
DENSE_ADVICE = (
    "Use affinity='nearest_neighbors' (a sparse kNN graph, O(n * n_neighbors) "
    "memory), or backend='torch', which forms the 'rbf' and 'cosine' affinities "
    "matrix-free, in row blocks (O(n * (n_features + n_clusters)) memory; every "
    "iteration then recomputes W, at O(n**2 * (n_features + n_clusters)) time)."
)


def check_dense_fits(n_rows, n_cols, dtype, what, advice=DENSE_ADVICE):
    """Refuse (MemoryError with ``advice``) a dense ``(n_rows, n_cols)``
    affinity of ``dtype`` that cannot fit in the available memory, before
    it is allocated."""
    check_allocation(dense_nbytes((n_rows, n_cols), dtype),
                     f"The dense ({n_rows}, {n_cols}) {np.dtype(dtype).name} {what}",
                     advice)


def zero_norm(dtype):
    """Row norms below this count as zero in the cosine affinity: ``10 eps``
    of the features' dtype, as in :func:`sklearn.preprocessing.normalize`."""
    return 10 * float(np.finfo(dtype).eps)


def _unit_rows(X, zero=None):
    """Rows of ``X`` scaled to unit norm (:func:`sklearn.preprocessing.normalize`,
    a copy); rows of zero norm (below ``zero``, by default :func:`zero_norm`
    of ``X``'s dtype) become exactly zero."""
    U = normalize(X, copy=True)
    tiny = row_norms(X) < (zero_norm(X.dtype) if zero is None else zero)
    if tiny.any():
        if sp.issparse(U):
            U = sp.csr_matrix(U)
            U.data[np.repeat(tiny, np.diff(U.indptr))] = 0
        else:
            U[tiny] = 0
    return U


def cosine_similarity(X, Y=None, zero=None):
    """Cosine similarity of the rows of ``X`` (and ``Y``): a dense array.

    As :func:`sklearn.metrics.pairwise.cosine_similarity`, except that a row
    of zero norm (below ``zero``, by default :func:`zero_norm` of the
    features' dtype) has similarity exactly 0 to every row, itself included:
    scikit-learn leaves such a row unscaled, so that a row of norm 1e-28 gets
    similarities of about 1e-28, whose sign and size are rounding noise.  The
    matrix-free torch rows follow the same rule.
    """
    from sklearn.metrics.pairwise import check_pairwise_arrays

    X, Y = check_pairwise_arrays(X, Y)
    U = _unit_rows(X, zero)
    if Y is X and not sp.issparse(U) and U.shape[0] > SELF_PRODUCT_BLOCK:
        return _self_product(U)
    V = U if Y is X else _unit_rows(Y, zero)
    return np.asarray(safe_sparse_dot(U, V.T, dense_output=True))


# NumPy sends a whole ``U @ U.T`` to BLAS's symmetric rank-k update (syrk),
# which crashes the process (SIGSEGV) in the OpenBLAS 0.3.31 of NumPy's
# wheels for float64 at 16,384 rows x 384 columns on this project's machine
# (8,192 rows pass; scikit-learn's rbf_kernel crashes the same way).  Above
# this many rows the self-product is made of row blocks (general products).
SELF_PRODUCT_BLOCK = 4096


def _self_product(U):
    """``U @ U.T`` of a dense ``U``, by blocks of ``SELF_PRODUCT_BLOCK`` rows."""
    n = U.shape[0]
    out = np.empty((n, n), dtype=U.dtype)
    for i in range(0, n, SELF_PRODUCT_BLOCK):
        np.matmul(U[i:i + SELF_PRODUCT_BLOCK], U.T, out=out[i:i + SELF_PRODUCT_BLOCK])
    return out


def cosine_range(S):
    """``(lo, hi)``: the similarity range of the training samples, with
    ``hi = lo`` (every similarity equal) when the span is within rounding of
    the compute dtype, ``hi - lo <= sqrt(eps)``: identical rows give
    cosines that differ by a few ``eps`` only, and stretching those to
    ``[0, 1]`` would make ``W`` rounding noise."""
    lo, hi = float(S.min()), float(S.max())
    if hi - lo <= float(np.finfo(S.dtype).eps) ** 0.5:
        hi = lo
    return lo, hi


def cosine_power(S, lo, hi, power):
    """The cosine-power affinity of cosine similarities, in place.

    ``W = clip((S - lo) / (hi - lo), 0, 1) ** power``, all ones when
    ``hi <= lo`` (every similarity equal, see :func:`cosine_range`);
    ``lo`` and ``hi`` are the minimum and maximum similarity of the
    training samples.  This is the sharpened
    cosine affinity of DiffCut and Falcon.  ``S`` is overwritten (it is
    only ever a fresh similarity matrix) and returned.
    """
    lo, hi, power = S.dtype.type(lo), S.dtype.type(hi), float(power)
    span = hi - lo  # in the dtype of S: a span that rounds to 0 there is flat
    if not span > 0:
        S[...] = 1
    else:
        S -= lo
        S /= span
        np.clip(S, 0.0, 1.0, out=S)
    if power != 1:
        S **= power
    return S


def cosine_power_affinity(X, power=1.0):
    """Dense cosine-power affinity ``W`` of the rows of ``X`` (see
    :func:`cosine_power`), with ``lo``/``hi`` taken over ``X`` itself.

    Rows of zero norm (below :func:`zero_norm`) have similarity 0 to every
    row (:func:`cosine_similarity`).

    Returns
    -------
    W : ndarray of shape (n, n), in the dtype of ``X`` (float32 or float64)
    lo, hi : float
        The similarity range.
    """
    n = X.shape[0]
    check_dense_fits(n, n, X.dtype, "cosine affinity")
    S = cosine_similarity(X)
    lo, hi = cosine_range(S)
    return np.ascontiguousarray(cosine_power(S, lo, hi, power)), lo, hi


class Affinity:
    """How one affinity builds ``W`` and cross-affinities.

    Subclasses set ``name``, ``precomputed`` (the input is an affinity or a
    distance matrix, not features) and implement :meth:`fit` and
    :meth:`cross`.  A ``matrix_free`` one is formed in row blocks by every
    backend that offers matrix-free problems (the torch backend's
    :class:`~sklearn_falcon._backends._torch._affinity.Affinity` holds its
    row formula), and implements :meth:`adopt` and :meth:`recompute` too.

    Parameters
    ----------
    n_neighbors, gamma, power, n_jobs
        The estimator's parameters of the same names.
    """

    name = None
    precomputed = False
    matrix_free = False
    connects = None  # ("Increase", "n_neighbors"): how a parameter connects W

    def __init__(self, *, n_neighbors=10, gamma=1.0, power=1.0, n_jobs=None):
        # a Python int: np.uint8(200) overflowed the searches' arithmetic
        self.n_neighbors = int(n_neighbors)
        self.gamma = gamma
        self.power = power
        self.n_jobs = n_jobs

    def fit(self, X):
        """The training affinity ``W`` of ``X`` (n, n), and remember what
        :meth:`cross` needs."""
        raise NotImplementedError

    def connect_hint(self):
        """The sentence that ends the warning of a disconnected graph: which
        parameter connects it (None for an affinity the user gave)."""
        if self.connects is None:
            return None
        how, name = self.connects
        return f"{how} {name} (now {getattr(self, name)}) to connect it."

    def cross(self, X_new):
        """Affinity ``(n_new, n_train)`` of new samples to the training set."""
        raise NotImplementedError

    def check_features(self, X, name="X"):
        """Raise ValueError, naming ``name``, for features this affinity
        cannot use (called by :meth:`fit` and :meth:`cross`, and before a
        matrix-free fit)."""

    def cross_row_bytes(self, n_train):
        """Memory that :meth:`cross` needs per new sample (``predict`` takes
        the new samples in chunks that fit ``working_memory``): a dense row
        of float64 and one temporary of the same size."""
        return 2 * 8 * n_train


class PrecomputedAffinity(Affinity):
    """``X`` is the affinity matrix (dense or sparse)."""

    name = "precomputed"
    precomputed = True

    def fit(self, X):
        self.n_train_ = X.shape[0]
        return check_affinity(X, name="X")

    def cross(self, X_new):
        return check_cross_affinity(X_new, self.n_train_)


class NearestNeighborsAffinity(Affinity):
    """Symmetrized kNN connectivity ``(C + C') / 2`` (self included), as in
    :class:`sklearn.cluster.SpectralClustering`; sparse.

    The neighbours are searched where scikit-learn's ``NearestNeighbors``
    (``algorithm="auto"``) would search them with a k-d tree (dense samples
    of at most 15 features, ``n_neighbors < n // 2``) by SciPy's
    :class:`~scipy.spatial.cKDTree` (:class:`._neighbors._TreeNeighbors`),
    and otherwise by ``NearestNeighbors``'s brute force, samples at equal
    distances taken by index whatever its threads
    (:class:`._neighbors._BruteNeighbors`).
    """

    name = "nearest_neighbors"
    connects = ("Increase", "n_neighbors")
    metric = "minkowski"
    warns_complete = True  # not for a start's graph (:func:`start_graph`)

    def fit(self, X):
        n = X.shape[0]
        self.n_train_ = n
        k = min(self.n_neighbors, n)
        # underflowing distances refused, but for a start's graph (any kNN
        # graph will do there)
        self.check_features(X, underflow=self.warns_complete)
        self._warn_if_complete(n)
        if not sp.issparse(X) and X.shape[1] <= _KD_TREE_MAX_FEATURES and k < n // 2:
            self.nn_ = _TreeNeighbors(X, k, n_jobs=self.n_jobs)
        else:
            self.nn_ = _BruteNeighbors(X, k, n_jobs=self.n_jobs)
        C = self.nn_.kneighbors_graph(X, mode="connectivity")
        W = 0.5 * (C + C.T)
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
        return clean_csr(W.astype(dtype))

    def cross(self, X_new):
        self.check_features(X_new)
        nn = self.nn_
        if nn.n_jobs != self.n_jobs:  # the estimator's n_jobs, set since the fit
            nn = copy.copy(nn)
            nn.n_jobs = self.n_jobs
        return nn.kneighbors_graph(X_new, mode="connectivity")

    def _warn_if_complete(self, n):
        if 1 < n <= self.n_neighbors and self.warns_complete:
            warn_user(
                f"n_neighbors={self.n_neighbors} >= n_samples={n}: every sample "
                "is a neighbour of every other, so the kNN graph is complete "
                "with equal weights and every partition has the same NCut "
                "(n_clusters - 1); the labels are arbitrary. Use fewer "
                "neighbours than samples."
            )

    def check_features(self, X, name="X", underflow=False):
        if self.metric == "minkowski":
            _check_distance_range(X, name=name, underflow=underflow)

    def cross_row_bytes(self, n_train):
        # a sparse row of n_neighbors entries (kneighbors chunks its own
        # distance computations by working_memory)
        return 16 * min(self.n_neighbors, n_train) + 8


# scikit-learn's NearestNeighbors(algorithm="auto") searches a tree up to
# this many features, and by brute force (one matrix product) above
_KD_TREE_MAX_FEATURES = 15


class PrecomputedNearestNeighborsAffinity(NearestNeighborsAffinity):
    """``X`` is a (sparse) distance matrix; its ``n_neighbors`` nearest
    neighbours give ``W``, equal distances taken in column order (dense or
    sparse, in ``fit`` and ``predict``).  For a sparse ``X`` only the stored
    distances count, and a row with fewer than ``n_neighbors`` keeps the
    ones it has (:func:`_knn_connectivity`)."""

    name = "precomputed_nearest_neighbors"
    precomputed = True
    metric = "precomputed"

    def check_features(self, X, name="X", underflow=False, square=True):
        if square and X.shape[0] != X.shape[1]:  # (not a predict's, cross)
            raise ValueError(
                "affinity='precomputed_nearest_neighbors' expects a square "
                f"(n_samples, n_samples) distance matrix {name}; got shape={X.shape}.")
        check_distances(X, name)  # (falcon_batch's graphs too)

    def fit(self, X, checked=False):  # checked: falcon_batch's, by check_features
        if not checked:
            self.check_features(X)
        self.n_train_ = X.shape[0]
        if not sp.issparse(X):
            self._warn_if_complete(X.shape[0])
        C = _knn_connectivity(X, min(self.n_neighbors, X.shape[0]))
        return clean_csr((0.5 * (C + C.T)).astype(X.dtype))

    def cross(self, X_new):
        if X_new.shape[1] != self.n_train_:
            raise ValueError(
                "For affinity='precomputed_nearest_neighbors', predict expects "
                f"distances of shape (n_new, n_train={self.n_train_}); got "
                f"shape={X_new.shape}."
            )
        self.check_features(X_new, square=False)
        return _knn_connectivity(X_new, min(self.n_neighbors, self.n_train_))


def _rbf_kernel(X, Y=None, gamma=1.0):
    """:func:`sklearn.metrics.pairwise.rbf_kernel`, also for a ``gamma``
    beyond the range of float32 samples: scikit-learn multiplies their
    float32 squared distances by ``-gamma`` rounded to float32, ``-inf``,
    and a zero distance (the diagonal, duplicate samples) gave
    ``0 * -inf = NaN``; that product is taken in float64."""
    from sklearn.metrics.pairwise import euclidean_distances, rbf_kernel

    shift = _far_shift(X if Y is None else Y)
    if shift is not None:  # (translation invariant) centred, as the torch rows
        X, Y = [None if Z is None else (Z.toarray() if sp.issparse(Z) else Z) - shift
                for Z in (X, Y)]
    if gamma <= float(np.finfo(np.float32).max):
        return rbf_kernel(X, Y, gamma=gamma)
    K = euclidean_distances(X, Y, squared=True)
    with np.errstate(over="ignore"):  # beyond K's dtype: -inf, exp(-inf) = 0
        np.multiply(K, -gamma, out=K, dtype=np.float64, casting="same_kind")
    return np.exp(K, out=K)


def warn_if_flat_rbf(gamma, n_samples, flat=False):
    """Warn that ``gamma=0`` makes every rbf affinity 1, or that every one
    rounds to 1 (``flat``: identical samples, or a gamma too small for their
    distances), as a kNN graph of ``n_neighbors >= n_samples`` warns that
    it is complete."""
    warn_if_flat(
        gamma == 0 or flat, n_samples,
        "gamma=0: every rbf affinity is exp(0) = 1" if gamma == 0 else
        f"Every rbf affinity rounds to 1 (gamma={gamma:.3g}: the samples are "
        "identical, or gamma is too small for their distances)",
        "Use gamma > 0." if gamma == 0 else "Use a larger gamma.")


class RBFAffinity(Affinity):
    """Dense ``exp(-gamma ||x - y||^2)``
    (:func:`sklearn.metrics.pairwise.rbf_kernel`)."""

    name = "rbf"
    connects = ("Decrease", "gamma")
    matrix_free = True

    def adopt(self, X, problem):
        """Record a matrix-free fit on ``X`` (the state :meth:`fit` leaves,
        without ``W``)."""
        self.n_train_ = X.shape[0]
        self.X_fit_ = X
        flat = problem is not None and bool(np.all(  # every entry 1: degree n
            problem.degrees_numpy()[0] == X.shape[0]))
        warn_if_flat_rbf(self.gamma, X.shape[0], flat)

    def check_features(self, X, name="X"):
        _check_distance_range(X, name=name)

    def fit(self, X):
        self.check_features(X)
        check_dense_fits(X.shape[0], X.shape[0], X.dtype, "rbf affinity")
        self.adopt(X, None)
        W = self.recompute()
        if self.gamma > 0:
            warn_if_flat_rbf(self.gamma, X.shape[0], flat=bool(W.min() == 1))
        return W

    def recompute(self):
        """The dense training affinity, from the stored features."""
        X = self.X_fit_
        check_dense_fits(X.shape[0], X.shape[0], X.dtype, "rbf affinity", _RECOMPUTE)
        if sp.issparse(X) or X.shape[0] <= SELF_PRODUCT_BLOCK:
            W = _rbf_kernel(X, gamma=self.gamma)
        else:  # a copy as Y: general products, not the crashing syrk (above)
            W = _rbf_kernel(X, np.array(X), gamma=self.gamma)
            np.fill_diagonal(W, 1.0)  # as rbf_kernel(X) (distance 0 to itself)
        return np.ascontiguousarray(W.astype(X.dtype, copy=False))

    def cross(self, X_new):
        self.check_features(X_new)
        return _rbf_kernel(X_new, self.X_fit_, gamma=self.gamma)


class CosineAffinity(Affinity):
    """Dense cosine similarity, min-max normalized over the training samples
    and raised to ``power`` (:func:`cosine_power`)."""

    name = "cosine"
    matrix_free = True

    def adopt(self, X, problem):
        """Record a matrix-free fit on ``X``, with the similarity range and
        the compute dtype of the device (:meth:`recompute` uses it too)."""
        self.n_train_ = X.shape[0]
        self.X_fit_ = X
        lo, hi = problem.cosine_range
        self.cos_min_, self.cos_max_ = float(lo[0]), float(hi[0])
        self.compute_dtype_ = problem.compute_dtype
        warn_if_flat_cosine(self.cos_min_, self.cos_max_, X.shape[0])

    def check_features(self, X, name="X"):
        _check_distance_range(X, of="norms", name=name)

    def fit(self, X):
        self.check_features(X)
        self.n_train_ = X.shape[0]
        self.X_fit_ = X
        W, self.cos_min_, self.cos_max_ = cosine_power_affinity(X, self.power)
        warn_if_flat_cosine(self.cos_min_, self.cos_max_, X.shape[0])
        return W

    def recompute(self):
        """The dense training affinity of a matrix-free fit, computed in the
        device's dtype (so that it is the ``W`` the device solved), in the
        dtype of the features."""
        X = self.X_fit_
        n = X.shape[0]
        dtype = getattr(self, "compute_dtype_", X.dtype)
        check_dense_fits(n, n, dtype, "cosine affinity", _RECOMPUTE)
        # zero norms by the features' dtype, as the device's rows had them;
        # rows whose squares overflow the compute dtype were unit rows there
        top = float(abs(X).max()) if X.size else 0.0
        U, zero = X, zero_norm(X.dtype)
        if top * top * X.shape[1] >= float(np.finfo(dtype).max) / 16:
            U, zero = _unit_rows(X), 0.5
        S = cosine_similarity(U.astype(dtype, copy=False), zero=zero)
        W = cosine_power(S, self.cos_min_, self.cos_max_, self.power)
        return np.ascontiguousarray(W.astype(X.dtype, copy=False))

    def cross(self, X_new):
        self.check_features(X_new)
        S = cosine_similarity(X_new, self.X_fit_, zero=zero_norm(self.X_fit_.dtype))
        return cosine_power(S, self.cos_min_, self.cos_max_, self.power)


_RECOMPUTE = (
    "A matrix-free fit never forms W: affinity_matrix_ recomputes it when read, "
    "and it does not fit. labels_, ncut_, cluster_volumes_ and "
    "cluster_associations_ hold what was computed from it."
)


class CallableAffinity(Affinity):
    """A user function ``affinity(X, Y=None)`` returning the ``(n_X, n_Y)``
    affinity (``Y=None`` means ``Y = X``)."""

    name = "callable"
    to_host = staticmethod(lambda A: A)  # see make_affinity

    def __init__(self, function, **params):
        super().__init__(**params)
        self.function = function

    def fit(self, X):
        n = X.shape[0]
        self.n_train_ = n
        self.X_fit_ = X
        W = self._call(X)
        if W.shape != (n, n):
            raise ValueError(
                f"The callable affinity must return an (n_samples, n_samples) "
                f"matrix; it returned shape={W.shape} for n_samples={n}."
            )
        return check_affinity(W, name="affinity(X)")

    def cross(self, X_new):
        try:
            inspect.signature(self.function).bind(X_new, self.X_fit_)
        except TypeError:
            name = getattr(self.function, "__name__", type(self.function).__name__)
            raise TypeError(
                f"predict needs the cross-affinity affinity(X_new, X_fit), but the "
                f"callable affinity {name} takes no second argument; define it as "
                "affinity(X, Y=None)."
            ) from None
        except ValueError:  # no signature to read (a builtin): just call it
            pass
        A = self._call(X_new, self.X_fit_)
        if A.shape != (X_new.shape[0], self.n_train_):
            raise ValueError(
                "The callable affinity must return an (n_X, n_Y) matrix; "
                f"affinity(X_new, X_fit) returned shape={A.shape} for "
                f"n_X={X_new.shape[0]} new samples and n_Y={self.n_train_} "
                "training samples."
            )
        return check_cross_affinity(A, self.n_train_, name="affinity(X, X_fit)")

    def _call(self, X, Y=None):
        """Call the user function and check its output is finite and real."""
        A = self.function(X) if Y is None else self.function(X, Y)
        call = "affinity(X)" if Y is None else "affinity(X, X_fit)"
        A = self.to_host(A)
        if not sp.issparse(A):
            A = np.asarray(A)
        check_dtype_kind(A, name=call)  # sparse too: complex would lose its part
        # float32 kept, as a precomputed affinity: symmetric within its rounding
        dtype = A.dtype if A.dtype in (np.float32, np.float64) else np.float64
        if sp.issparse(A):
            A = sp.csr_matrix(sparse_astype(A, dtype))  # COO: summed in dtype
            values = A.data
        else:
            A = A.astype(dtype, copy=False)
            values = A
        if A.ndim != 2:
            raise ValueError(
                f"The callable affinity must return a 2-D matrix; {call} has "
                f"ndim={A.ndim}."
            )
        if not np.all(np.isfinite(values)):
            raise ValueError("The callable affinity returned NaN or inf values.")
        return A


AFFINITIES = {
    cls.name: cls
    for cls in (NearestNeighborsAffinity, RBFAffinity, CosineAffinity,
                PrecomputedAffinity, PrecomputedNearestNeighborsAffinity)
}


def start_graph(X, n_neighbors, n_jobs=None):
    """The kNN graph of ``X`` that a graph initialization starts from when
    the affinity is formed only in row blocks (matrix-free).  Without the
    warning that ``n_neighbors >= n_samples`` makes it complete: it is not
    the graph the labels are solved on."""
    knn = NearestNeighborsAffinity(n_neighbors=n_neighbors, n_jobs=n_jobs)
    knn.warns_complete = False
    return knn.fit(X)


def make_affinity(affinity, to_host=None, **params):
    """The :class:`Affinity` of an ``affinity`` parameter (a name of
    :data:`AFFINITIES`, or a callable).  ``to_host`` brings what a callable
    returns to the host (the estimator's ``_backends.host_array``: a torch
    tensor, sparse or with autograd, as a NumPy array or CSR matrix)."""
    if callable(affinity):
        A = CallableAffinity(affinity, **params)
        if to_host is not None:
            A.to_host = to_host
        return A
    return AFFINITIES[affinity](**params)
