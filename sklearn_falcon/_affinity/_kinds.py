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

import numpy as np
import scipy.sparse as sp

from ._check import check_affinity, check_cross_affinity, check_dtype_kind, clean_csr

__all__ = ["AFFINITIES", "Affinity", "cosine_power", "cosine_power_affinity",
           "make_affinity"]


def cosine_power(S, lo, hi, power):
    """The cosine-power affinity of cosine similarities, in place.

    ``W = clip((S - lo) / (hi - lo), 0, 1) ** power``, all ones when
    ``hi <= lo`` (every similarity equal); ``lo`` and ``hi`` are the minimum
    and maximum similarity of the training samples.  This is the sharpened
    cosine affinity of DiffCut and Falcon.  ``S`` is overwritten (it is
    only ever a fresh similarity matrix) and returned.
    """
    lo, hi, power = float(lo), float(hi), float(power)
    span = hi - lo
    if span <= 0:
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

    Rows of zero norm (below ``10 eps``) have similarity 0 to every row, as
    in :func:`sklearn.metrics.pairwise.cosine_similarity`.

    Returns
    -------
    W : ndarray of shape (n, n), in the dtype of ``X`` (float32 or float64)
    lo, hi : float
        The similarity range.
    """
    from sklearn.metrics.pairwise import cosine_similarity  # lazy: import time

    S = cosine_similarity(X)
    lo, hi = float(S.min()), float(S.max())
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

    def __init__(self, *, n_neighbors=10, gamma=1.0, power=1.0, n_jobs=None):
        self.n_neighbors = n_neighbors
        self.gamma = gamma
        self.power = power
        self.n_jobs = n_jobs

    def fit(self, X):
        """The training affinity ``W`` of ``X`` (n, n), and remember what
        :meth:`cross` needs."""
        raise NotImplementedError

    def cross(self, X_new):
        """Affinity ``(n_new, n_train)`` of new samples to the training set."""
        raise NotImplementedError


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
    :class:`sklearn.cluster.SpectralClustering`; sparse."""

    name = "nearest_neighbors"
    metric = "minkowski"

    def fit(self, X):
        from sklearn.neighbors import NearestNeighbors  # lazy: import time

        n = X.shape[0]
        self.n_train_ = n
        self.nn_ = NearestNeighbors(n_neighbors=min(self.n_neighbors, n),
                                    metric=self.metric, n_jobs=self.n_jobs).fit(X)
        C = self.nn_.kneighbors_graph(X, mode="connectivity")
        W = 0.5 * (C + C.T)
        dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
        return clean_csr(W.astype(dtype))

    def cross(self, X_new):
        return self.nn_.kneighbors_graph(X_new, mode="connectivity")


class PrecomputedNearestNeighborsAffinity(NearestNeighborsAffinity):
    """``X`` is a (sparse) distance matrix; its ``n_neighbors`` nearest
    neighbours give ``W``."""

    name = "precomputed_nearest_neighbors"
    precomputed = True
    metric = "precomputed"

    @staticmethod
    def _check_distances(X):
        data = X.data if sp.issparse(X) else X
        if data.size and data.min() < 0:
            raise ValueError(
                "affinity='precomputed_nearest_neighbors' expects nonnegative "
                f"distances in X; found a minimum of {float(data.min()):.6g}."
            )

    def fit(self, X):
        self._check_distances(X)
        return super().fit(X)

    def cross(self, X_new):
        if X_new.shape[1] != self.n_train_:
            raise ValueError(
                "For affinity='precomputed_nearest_neighbors', predict expects "
                f"distances of shape (n_new, n_train={self.n_train_}); got "
                f"shape={X_new.shape}."
            )
        self._check_distances(X_new)
        return super().cross(X_new)


class RBFAffinity(Affinity):
    """Dense ``exp(-gamma ||x - y||^2)``
    (:func:`sklearn.metrics.pairwise.rbf_kernel`)."""

    name = "rbf"
    matrix_free = True

    def adopt(self, X, problem):
        """Record a matrix-free fit on ``X`` (the state :meth:`fit` leaves,
        without ``W``)."""
        self.n_train_ = X.shape[0]
        self.X_fit_ = X

    def fit(self, X):
        self.adopt(X, None)
        return self.recompute()

    def recompute(self):
        """The dense training affinity, from the stored features."""
        from sklearn.metrics.pairwise import rbf_kernel

        X = self.X_fit_
        return np.ascontiguousarray(
            rbf_kernel(X, gamma=self.gamma).astype(X.dtype, copy=False))

    def cross(self, X_new):
        from sklearn.metrics.pairwise import rbf_kernel

        return rbf_kernel(X_new, self.X_fit_, gamma=self.gamma)


class CosineAffinity(Affinity):
    """Dense cosine similarity, min-max normalized over the training samples
    and raised to ``power`` (:func:`cosine_power`)."""

    name = "cosine"
    matrix_free = True

    def adopt(self, X, problem):
        """Record a matrix-free fit on ``X``, with the similarity range the
        device computed."""
        self.n_train_ = X.shape[0]
        self.X_fit_ = X
        lo, hi = problem.cosine_range
        self.cos_min_, self.cos_max_ = float(lo[0]), float(hi[0])

    def fit(self, X):
        self.n_train_ = X.shape[0]
        self.X_fit_ = X
        W, self.cos_min_, self.cos_max_ = cosine_power_affinity(X, self.power)
        return W

    def recompute(self):
        from sklearn.metrics.pairwise import cosine_similarity

        return np.ascontiguousarray(cosine_power(
            cosine_similarity(self.X_fit_), self.cos_min_, self.cos_max_,
            self.power))

    def cross(self, X_new):
        from sklearn.metrics.pairwise import cosine_similarity

        return cosine_power(cosine_similarity(X_new, self.X_fit_), self.cos_min_,
                            self.cos_max_, self.power)


class CallableAffinity(Affinity):
    """A user function ``affinity(X, Y=None)`` returning the ``(n_X, n_Y)``
    affinity (``Y=None`` means ``Y = X``)."""

    name = "callable"

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
        A = self._call(X_new, self.X_fit_)
        return check_cross_affinity(A, self.n_train_, name="affinity(X, X_fit)")

    def _call(self, X, Y=None):
        """Call the user function and check its output is finite and real."""
        A = self.function(X) if Y is None else self.function(X, Y)
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


AFFINITIES = {
    cls.name: cls
    for cls in (NearestNeighborsAffinity, RBFAffinity, CosineAffinity,
                PrecomputedAffinity, PrecomputedNearestNeighborsAffinity)
}


def make_affinity(affinity, **params):
    """The :class:`Affinity` of an ``affinity`` parameter (a name of
    :data:`AFFINITIES`, or a callable)."""
    if callable(affinity):
        return CallableAffinity(affinity, **params)
    return AFFINITIES[affinity](**params)
