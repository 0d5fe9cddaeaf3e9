"""FalconNCut: discrete K-way normalized-cut clustering."""

import contextlib
import functools
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import ThreadpoolController

from ._affinity import PRECOMPUTED, AffinityBuilder, check_dtype_kind
from ._backend import make_problem, make_problem_from_features, resolve_backend
from ._init import (
    fill_empty,
    kmeans_labels,
    multilevel_candidates,
    random_labels,
    spectral_embedding_labels,
)
from ._solver import out_of_sample_labels, solve
from .metrics import _volumes_associations, normalized_cut


@functools.cache
def _threadpool_controller():
    """One ThreadpoolController per process (finding the libraries takes ms)."""
    return ThreadpoolController()


_AFFINITIES = {"nearest_neighbors", "rbf", "cosine", "precomputed",
               "precomputed_nearest_neighbors"}


class FalconNCut(ClusterMixin, BaseEstimator):
    """Discrete K-way normalized-cut clustering with the Falcon solver.

    Falcon maximizes the normalized association
    ``f(X) = sum_k x_k' W x_k / x_k' D x_k`` (so that ``NCut = K - f``)
    directly over one-hot label matrices, with no spectral relaxation: each
    iteration computes the closed-form gradient score
    ``mu = 2 (W X) / vol - d assoc / vol**2``, takes the row-wise proximal
    step ``x_i <- e_argmax(mu_i + tau x_i)`` and accepts it only if ``f``
    rises by at least ``delta * tau / 2 * ||X+ - X||**2``, otherwise
    ``tau <- gamma_backtrack * tau``.  ``f`` therefore never decreases.

    Read more in the :ref:`User Guide <user_guide>`.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters ``K``.

    affinity : {"nearest_neighbors", "rbf", "cosine", "precomputed", \
            "precomputed_nearest_neighbors"} or callable, default="nearest_neighbors"
        How to build the affinity matrix ``W``:

        - ``"nearest_neighbors"``: symmetrized kNN connectivity
          ``(C + C') / 2`` with ``n_neighbors`` neighbours (self included),
          sparse; as in :class:`sklearn.cluster.SpectralClustering`.
        - ``"rbf"``: dense ``exp(-gamma ||x - y||^2)``.
        - ``"cosine"``: dense cosine similarity, min-max normalized to
          ``[0, 1]`` and raised to ``power`` (as in DiffCut and Falcon).
        - ``"precomputed"``: ``X`` is the affinity matrix (dense or sparse).
        - ``"precomputed_nearest_neighbors"``: ``X`` is a (sparse) distance
          matrix; its ``n_neighbors`` nearest neighbours give ``W``.
        - callable ``affinity(X, Y=None)`` returning the ``(n_X, n_Y)``
          affinity (``Y=None`` means ``Y = X``), e.g.
          :func:`sklearn.metrics.pairwise.laplacian_kernel`.

        An asymmetric precomputed or callable affinity is replaced by its
        symmetric part ``(W + W') / 2`` with a ``UserWarning``.

    n_neighbors : int, default=10
        Neighbours of the kNN affinities (clipped to ``n_samples``).

    gamma : float, default=1.0
        Kernel coefficient of the ``"rbf"`` affinity.

    power : float, default=1.0
        Sharpening exponent of the ``"cosine"`` affinity (about 10 for ViT
        tokens).

    init : {"multilevel", "kmeans", "spectral", "random"} or array-like of \
            shape (n_samples,), default="multilevel"
        Initial labels:

        - ``"multilevel"``: coarsening (heaviest neighbour by
          ``W_ij / (d_i d_j)``), multi-start solve of the coarsest graph,
          then projection and refinement level by level; candidates from
          two coarsening depths, and a spectral start on the finest level
          with at most 100,000 stored entries (where an eigensolve is
          cheap), are refined and the best ``f`` kept.
        - ``"kmeans"``: k-means++ on the features (not for precomputed
          affinities).
        - ``"spectral"``: leading eigenvectors of ``D^-1/2 W D^-1/2``
          (ARPACK), discretized by k-means on the row-normalized embedding
          from cluster-QR and k-means++ seeds (best ``f`` kept).
        - ``"random"``: uniformly random labels (a weak start on real
          graphs; useful for studying the solver).
        - an array of labels in ``[0, n_clusters)``.

    n_init : int, default=1
        Number of independent initializations; the one reaching the highest
        ``f`` is kept.

    max_iter : int, default=100
        Maximum number of accepted proximal iterations per initialization.

    tol : float, default=1e-6
        Stop when the relative gain of ``f`` in one iteration falls below
        ``tol`` (or when no row moves).

    tau : float, default=0.01
        Initial proximal (inertia) parameter, in units of the typical score
        magnitude ``K * mean(d) / sum(d)``, so that one value suits graphs
        of every size.  Larger values move fewer rows per step.

    gamma_backtrack : float, default=2.0
        Factor ``> 1`` by which ``tau`` grows when a step is rejected; the
        grown value is kept for the next iterations.

    delta : float, default=1e-4
        Sufficient-increase constant of the backtracking test.

    polish : bool, default=True
        Finish with sequential sweeps of exact best single moves (the
        weighted kernel k-means gain); they never decrease ``f``.

    backend : {"auto", "numba", "torch"}, default="auto"
        ``"auto"`` uses torch on CUDA when torch and a GPU are available and
        Numba otherwise.  With torch, the ``"cosine"`` and ``"rbf"``
        affinities are matrix-free: ``W`` is computed in row blocks and never
        stored, so memory is ``O(n (p + K))``; the graph initializations
        (``"multilevel"``, ``"spectral"``) then run on the kNN graph of ``X``.

    device : str, default="auto"
        ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (torch backend).

    n_jobs : int, default=None
        Parallel jobs of the nearest-neighbour search.

    random_state : int, RandomState instance or None, default=None
        Seed of the initialization.

    verbose : int, default=0
        Verbosity of the solver.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
        Cluster label of each sample, in ``[0, n_clusters)``; every cluster
        is non-empty.
    ncut_ : float
        Normalized cut of ``labels_`` on ``affinity_matrix_``.
    n_iter_ : int
        Proximal iterations run for the kept initialization (the last one may
        find that no row moves, which is how convergence is detected).
    n_backtracks_ : int
        Rejected trial steps (tau increases) of the kept initialization.
    objective_path_ : ndarray of shape (n_steps,)
        ``f`` at the initial labels, after each accepted iteration and after
        each polishing sweep; non-decreasing.
    affinity_matrix_ : {ndarray, sparse matrix} of shape (n_samples, n_samples)
        The symmetric affinity ``W`` that was clustered.  On the matrix-free
        torch path (``backend="torch"`` with ``"cosine"``/``"rbf"``) it is
        not kept during the fit and is recomputed when read.
    cluster_volumes_ : ndarray of shape (n_clusters,)
        ``vol_k`` of the final clusters (used by :meth:`predict`).
    cluster_associations_ : ndarray of shape (n_clusters,)
        ``assoc_k`` of the final clusters.
    isolated_ : ndarray of shape (n_isolated,)
        Indices of zero-degree samples.  They take no part in the solve
        (they change no cut) and are given the cluster of largest volume.
    backend_ : str
        The backend that was used.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    sklearn.cluster.SpectralClustering : Relaxed (spectral) normalized cut.
    normalized_cut : The objective, as a metric.

    Notes
    -----
    Each iteration costs one pass over the nonzeros of ``W`` (``O(nnz)``,
    not ``O(nnz K)``) plus ``O(n K)``; after the first iteration only the
    rows of the nodes that moved are read.  Moves that would empty a cluster
    are cancelled, so no cluster is ever emptied.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from sklearn_falcon import FalconNCut
    >>> X, y = make_blobs(n_samples=300, centers=3, cluster_std=0.5, random_state=0)
    >>> est = FalconNCut(n_clusters=3, random_state=0).fit(X)
    >>> est.labels_.shape
    (300,)
    >>> bool(est.ncut_ < 0.05)
    True
    >>> bool(np.all(np.diff(est.objective_path_) >= 0))
    True
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "affinity": [StrOptions(_AFFINITIES), callable],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "gamma": [Interval(Real, 0, None, closed="left")],
        "power": [Interval(Real, 0, None, closed="neither")],
        "init": [StrOptions({"multilevel", "kmeans", "spectral", "random"}),
                 "array-like"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "tau": [Interval(Real, 0, None, closed="neither")],
        "gamma_backtrack": [Interval(Real, 1, None, closed="neither")],
        "delta": [Interval(Real, 0, None, closed="left")],
        "polish": ["boolean"],
        "backend": [StrOptions({"auto", "numba", "torch"})],
        "device": [str],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        affinity="nearest_neighbors",
        n_neighbors=10,
        gamma=1.0,
        power=1.0,
        init="multilevel",
        n_init=1,
        max_iter=100,
        tol=1e-6,
        tau=0.01,
        gamma_backtrack=2.0,
        delta=1e-4,
        polish=True,
        backend="auto",
        device="auto",
        n_jobs=None,
        random_state=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.affinity = affinity
        self.n_neighbors = n_neighbors
        self.gamma = gamma
        self.power = power
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.tau = tau
        self.gamma_backtrack = gamma_backtrack
        self.delta = delta
        self.polish = polish
        self.backend = backend
        self.device = device
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ fit
    def _builder(self):
        return AffinityBuilder(
            self.affinity, n_neighbors=self.n_neighbors, gamma=self.gamma,
            power=self.power, n_jobs=self.n_jobs,
        )

    def _validate_X(self, X, reset):
        check_dtype_kind(X, name="X")
        return validate_data(
            self, X, accept_sparse=("csr", "csc", "coo"),
            dtype=(np.float64, np.float32), ensure_min_samples=2 if reset else 1,
            reset=reset,
        )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Compute the clustering.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features) or \
                (n_samples, n_samples)
            Features, or an affinity / distance matrix when ``affinity`` is
            ``"precomputed"`` / ``"precomputed_nearest_neighbors"``.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        X = self._validate_X(X, reset=True)
        n_samples = X.shape[0]
        K = self.n_clusters
        if K > n_samples:
            raise ValueError(
                f"n_clusters={K} must be <= n_samples={n_samples}."
            )
        backend, device = resolve_backend(self.backend, self.device)
        init = self.init
        if not isinstance(init, str):
            init = self._check_init_labels(init, n_samples)
        elif init == "kmeans" and self.affinity in PRECOMPUTED:
            raise ValueError(
                f"init='kmeans' needs features, but affinity={self.affinity!r}; use "
                "init='multilevel' or 'spectral'."
            )

        W, degrees, problem = self._affinity_graph(X, K, backend, device)
        active = degrees > 0
        self.isolated_ = np.flatnonzero(~active)
        W_act, d_act = self._active_subgraph(W, degrees, active, K)
        rs = check_random_state(self.random_state)
        rng = np.random.default_rng(rs.randint(np.iinfo(np.int32).max))
        solver_params = dict(
            max_iter=self.max_iter, tol=self.tol, tau=self.tau,
            gamma_backtrack=self.gamma_backtrack, delta=self.delta,
            polish=self.polish, verbose=self.verbose,
        )
        # The Numba kernels run on their own (OpenMP) threads; BLAS threads
        # (eigsh, k-means, dense products in the inits) competing with them
        # for the same cores slowed a 1,024-token fit 2.3x on 2 cores.  As
        # sklearn's KMeans does around its OpenMP loops, BLAS runs on one
        # thread while Falcon solves (torch keeps its own threads).
        limits = (_threadpool_controller().limit(limits=1, user_api="blas")
                  if backend == "numba" else contextlib.nullcontext())
        with limits:
            best, problem = self._solve(problem, init, X, W_act, d_act, active, K,
                                        backend, device, rng, solver_params)

        labels = np.empty(n_samples, dtype=np.int64)
        labels[active] = best.labels[0]
        vol = np.bincount(best.labels[0], weights=d_act, minlength=K)
        if self.isolated_.size:
            labels[~active] = int(np.argmax(vol))
        path = best.objective_path[0]
        self.labels_ = labels
        self._affinity_matrix = W
        self.cluster_volumes_ = vol
        if W is None:  # matrix-free: the statistics come from the device
            self.cluster_associations_ = problem.cluster_statistics(best.labels)[1][0]
            self.ncut_ = float(np.count_nonzero(vol > 0) - best.objective[0])
        else:
            assoc = _volumes_associations(W, labels, K)[1]
            self.cluster_associations_ = assoc
            pos = vol > 0
            # exact, from one pass over W (not the solver's running sums)
            self.ncut_ = float(np.sum((vol[pos] - assoc[pos]) / vol[pos]))
        self.objective_path_ = path
        self.n_iter_ = int(best.n_iter[0])
        self.n_backtracks_ = int(best.n_backtracks[0])
        self.backend_ = backend
        return self

    def _solve(self, problem, init, X, W_act, d_act, active, K, backend, device, rng,
               solver_params):
        """Initial labels, then the Falcon solve from each.

        Returns the best result by ``f`` and the problem it was solved on.
        """
        if problem is None:
            problem = make_problem(W_act, K, backend=backend, device=device,
                                   degrees=d_act)
            starts = self._starts(init, X, W_act, d_act, active, rng, solver_params)
        elif isinstance(init, str) and init in ("multilevel", "spectral"):
            # matrix-free: the graph inits need an explicit W, so they run on
            # the kNN graph of X
            W_knn = AffinityBuilder("nearest_neighbors", n_neighbors=self.n_neighbors,
                                    n_jobs=self.n_jobs).fit_transform(X)
            d_knn = np.asarray(W_knn.sum(axis=1), dtype=np.float64).ravel()
            starts = self._starts(init, X, W_knn, d_knn, active, rng, solver_params)
            del W_knn
        else:
            starts = self._starts(init, X, None, None, active, rng, solver_params)
        best = None
        for y0 in starts:
            res = solve(problem, fill_empty(y0, K, rng), **solver_params)
            if best is None or res.objective[0] > best.objective[0]:
                best = res
        return best, problem

    def _affinity_graph(self, X, K, backend, device):
        """``(W, degrees, problem)``: the affinity of X and its degrees.

        On the matrix-free torch path ``W`` is None and ``problem`` is the
        torch problem that forms W in row blocks; otherwise ``problem`` is
        None (it is built on the graph of the connected samples).
        """
        self._affinity_builder = self._builder()
        W, problem = None, None
        if backend == "torch" and self.affinity in ("cosine", "rbf"):
            problem = make_problem_from_features(
                X, K, affinity=self.affinity, power=self.power, gamma=self.gamma,
                device=device,
            )
            degrees = problem.degrees_numpy()[0]
            if np.all(degrees > 0):
                self._affinity_builder.adopt_fit(X, problem)
            else:  # isolated samples need the explicit sub-graph: dense path
                problem = None
        if problem is None:
            W = self._affinity_builder.fit_transform(X)
            degrees = np.asarray(W.sum(axis=1), dtype=np.float64).ravel()
        return W, degrees, problem

    def _active_subgraph(self, W, degrees, active, K):
        """Check the degrees and drop zero-degree samples from the solve."""
        n_samples = degrees.shape[0]
        n_active = int(active.sum())
        if n_active == 0:
            raise ValueError(
                "The affinity matrix is all zeros: no sample has a nonzero degree, so "
                "the normalized cut is undefined."
            )
        if n_active < K:
            raise ValueError(
                f"Only {n_active} of {n_samples} samples have a nonzero degree, fewer "
                f"than n_clusters={K}."
            )
        if n_active == n_samples:
            return W, degrees
        warnings.warn(
            f"{n_samples - n_active} sample(s) have zero degree (no affinity to any "
            "sample); they are left out of the solve and given the cluster of "
            "largest volume.",
            UserWarning,
            stacklevel=3,
        )
        idx = np.flatnonzero(active)
        if sp.issparse(W):
            return W[idx][:, idx].tocsr(), degrees[idx]
        return W[np.ix_(idx, idx)], degrees[idx]

    def _starts(self, init, X, W, degrees, active, rng, solver_params):
        """Initial label vectors of the connected samples, one per restart
        (the multilevel scheme may give several per restart)."""
        K = self.n_clusters
        if not isinstance(init, str):
            return [init[active]]
        n_active = int(active.sum())
        starts = []
        hierarchy = None
        for _ in range(self.n_init):
            if init == "multilevel":
                candidates, hierarchy = multilevel_candidates(
                    W, degrees, K, rng, solver_params=solver_params,
                    hierarchy=hierarchy,
                )
                starts.extend(candidates)
            elif init == "kmeans":
                Xa = X if n_active == X.shape[0] else X[np.flatnonzero(active)]
                starts.append(kmeans_labels(Xa, K, rng))
            elif init == "spectral":
                starts.append(spectral_embedding_labels(W, degrees, K, rng))
            else:
                starts.append(random_labels(n_active, K, rng))
        return starts

    @property
    def affinity_matrix_(self):
        """The symmetric affinity ``W`` that was clustered.

        Stored at fit time, except on the matrix-free torch path
        (``backend="torch"`` with ``"cosine"`` / ``"rbf"``), where ``W`` is
        never held in memory during the fit: it is then recomputed, dense,
        when this attribute is read.
        """
        if "_affinity_matrix" not in self.__dict__:
            raise AttributeError(
                "This FalconNCut instance is not fitted yet: 'affinity_matrix_' "
                "does not exist."
            )
        W = self._affinity_matrix
        if W is None:
            W = self._affinity_builder.recompute()
        return W

    def _check_init_labels(self, init, n_samples):
        y0 = np.asarray(init)
        if y0.shape != (n_samples,):
            raise ValueError(
                f"init must be 'multilevel', 'kmeans', 'spectral', 'random' or an array "
                f"of shape (n_samples,)=({n_samples},); got an array of shape "
                f"{y0.shape}."
            )
        if not np.issubdtype(y0.dtype, np.integer) or (
            y0.size and (y0.min() < 0 or y0.max() >= self.n_clusters)
        ):
            raise ValueError(
                f"init labels must be integers in [0, n_clusters={self.n_clusters}); "
                f"got values in [{y0.min()}, {y0.max()}] of dtype {y0.dtype}."
            )
        return y0.astype(np.int64)

    # -------------------------------------------------------------- predict
    def predict(self, X):
        """Assign new samples to the learned clusters.

        A new sample with affinity row ``w`` to the training samples and
        degree ``d = sum(w)`` gets ``argmax_k 2 w.x_k / vol_k - d assoc_k /
        vol_k**2``: Falcon's score for one row.  A sample with no affinity to
        the training set gets the cluster of largest volume.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_new, n_features) or \
                (n_new, n_train)
            New features, or the cross-affinity (distances for
            ``"precomputed_nearest_neighbors"``) to the training samples.

        Returns
        -------
        labels : ndarray of shape (n_new,)
        """
        check_is_fitted(self)
        X = self._validate_X(X, reset=False)
        A = self._affinity_builder.cross(X)
        return out_of_sample_labels(
            A, self.labels_, self.cluster_volumes_, self.cluster_associations_
        )

    def score(self, X, y=None):
        """Negative NCut of ``predict(X)`` on the affinity graph of ``X``.

        Higher is better, so that :class:`~sklearn.model_selection.GridSearchCV`
        can use it without labels.  The graph of ``X`` is built with the same
        affinity parameters as in :meth:`fit`.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Features (a precomputed affinity has no graph of its own on the
            test samples: use a labelled scorer instead).
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        score : float
            ``-normalized_cut(W_X, predict(X))``.
        """
        check_is_fitted(self)
        if self.affinity in PRECOMPUTED:
            raise ValueError(
                f"score needs features, but affinity={self.affinity!r}: the test "
                "samples have no affinity graph of their own. Use a labelled scorer "
                "(e.g. scoring='adjusted_rand_score')."
            )
        labels = self.predict(X)
        Xv = self._validate_X(X, reset=False)
        if Xv.shape[0] < 2:
            return 0.0
        W = self._builder().fit_transform(Xv)
        return -normalized_cut(W, labels)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = self.affinity in PRECOMPUTED
        return tags
