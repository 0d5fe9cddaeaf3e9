"""FalconNCut: discrete K-way normalized-cut clustering."""

import copy
import time
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ._affinity import (
    AFFINITIES,
    PRECOMPUTED,
    active_subgraph,
    canonical_sparse,
    check_dtype_kind,
    check_sparse_structure,
    float_sparse,
    start_graph,
)
from ._backends import BACKENDS, DEVICE_CONSTRAINT, host_array, resolve_backend
from ._graph import affinity_graph
from ._inits import (
    INITS,
    InitContext,
    check_init_labels,
    fill_empty,
    make_starts,
    warm_labels,
)
from ._log import log_stage, logs_progress
from ._memory import row_chunks
from ._sharded import fit_sharded, is_dask_array
from ._solver import SOLVER_CONSTRAINTS, SolverOptions, out_of_sample_labels, solve
from ._stats import (
    affinity_statistics,
    best_result,
    bipartite_ncut,
    cluster_statistics,
    degrees_of,
    ncut_of,
    with_isolated,
)
from ._threads import N_JOBS_CONSTRAINT, fit_threads, one_openmp_thread_after_fork

# the solver settings have their defaults in one place
_DEFAULTS = SolverOptions()


class FalconNCut(ClusterMixin, BaseEstimator):
    """Discrete K-way normalized-cut clustering with the Falcon solver.

    Falcon maximizes the normalized association

    .. math::

        f(X) = \\sum_{k=1}^{K} \\frac{x_k^\\top W x_k}{x_k^\\top D x_k},
        \\qquad \\mathrm{NCut} = K - f,

    directly over one-hot label matrices :math:`X = [x_1, \\dots, x_K]`, with
    no spectral relaxation.  Each iteration computes the closed-form gradient
    score

    .. math::

        \\mu_{ik} = \\frac{2 (W X)_{ik}}{\\mathrm{vol}_k}
                   - \\frac{d_i \\, \\mathrm{assoc}_k}{\\mathrm{vol}_k^2},

    takes the row-wise proximal step :math:`x_i \\leftarrow e_{k^*}` with
    :math:`k^* = \\arg\\max_k (\\mu_{ik} + \\tau X_{ik})`, and accepts it only if
    :math:`f(X^+) \\ge f(X) + \\delta \\frac{\\tau}{2} \\|X^+ - X\\|_F^2`;
    otherwise :math:`\\tau \\leftarrow \\gamma_{\\mathrm{backtrack}} \\tau`.  So
    ``f`` never decreases.

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
          sparse; as in :class:`sklearn.cluster.SpectralClustering`.  The
          neighbours are searched by SciPy's k-d tree where scikit-learn
          would search its own (dense samples of at most 15 features), and
          by :class:`sklearn.neighbors.NearestNeighbors` otherwise, equal
          distances taken by sample index on any number of threads.
        - ``"rbf"``: dense :math:`\\exp(-\\gamma \\|x - y\\|^2)`.
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
        Neighbours of the kNN affinities (clipped to ``n_samples``).  As
        many as the samples make the graph complete with equal weights,
        where every partition has the same NCut: a ``UserWarning`` says so.

    gamma : float, default=1.0
        Kernel coefficient of the ``"rbf"`` affinity.

    power : float, default=1.0
        Sharpening exponent of the ``"cosine"`` affinity (about 10 for ViT
        tokens).

    init : {"multilevel", "multilevel_fast", "kmeans", "spectral", "random"} \
            or array-like of shape (n_samples,), default="multilevel"
        Initial labels:

        - ``"multilevel"``: a V-cycle scheme: randomized matching
          coarsening (label propagation on the large levels of random
          graphs), many coarsest-graph starts (random, region growing,
          spectral, recursive bisection) improved by split-and-merge and pair
          re-bisections, refinement and FM searches on every level, a
          spectral candidate of a sparse input when ``nnz * K <= 2e6``,
          V-cycles, then max-flow refinement.  A dense ``W`` (``"rbf"``
          and ``"cosine"`` but on the torch backend, a dense array of
          ``"precomputed"`` or of a callable) gets a lighter scheme: one
          candidate refined up the levels, with no FM searches, spectral
          candidate, V-cycles or flows.  Each ``n_init`` restart draws its
          own matchings.
        - ``"multilevel_fast"``: one pass of it down and up, fewer coarse
          starts (no spectral one above K of about 70), no spectral
          candidate, V-cycles or flows: several times faster, for a few
          percent more NCut (:ref:`init_strategies`).
        - ``"kmeans"``: k-means++ on the features (not for precomputed
          affinities).
        - ``"spectral"``: leading eigenvectors of ``D^-1/2 W D^-1/2``
          (dense, or ARPACK then LOBPCG with iteration caps), discretized by
          k-means on the row-normalized embedding from cluster-QR and
          k-means++ seeds (best ``f`` kept).
        - ``"random"``: uniformly random labels (a weak start on real
          graphs; useful for studying the solver).
        - an array of labels in ``[0, n_clusters)``.

    n_init : int, default=1
        Number of independent initializations; the one reaching the highest
        ``f`` is kept.  An array ``init`` is one start (``n_init > 1`` warns).

    warm_start : bool, default=False
        When True and the estimator is fitted on the same number of samples
        and clusters, :meth:`fit` starts from the previous ``labels_`` (one
        start, no ``init``, no ``n_init``), as scikit-learn's ``warm_start``
        does: refitting a slightly changed graph (the next frame of a video,
        a re-weighted graph) then costs a few iterations.  Otherwise ``init``
        is used, and with ``verbose`` the reason is logged.

    max_iter : int, default=100
        Maximum number of proximal iterations of each solve (from each
        start, and in the multilevel start's refinements).  ``max_iter=0``
        runs none: the labels are the initial ones (then polished if
        ``polish``) and ``n_iter_`` is 0; useful to study an initialization.

    tol : float, default=1e-6
        Stop when the relative gain of ``f`` in one iteration falls below
        ``tol`` (or when no row moves).

    tau : float, default=0.01
        Initial proximal (inertia) parameter, in units of the typical score
        magnitude :math:`K \\bar{d} / \\sum_i d_i`, so that one value suits graphs
        of every size.  Larger values move fewer rows per step.

    gamma_backtrack : float, default=2.0
        Factor ``> 1`` by which ``tau`` grows when a step is rejected; the
        grown value is kept for the next iterations.

    delta : float, default=1e-4
        Sufficient-increase constant of the backtracking test.

    polish : bool, default=True
        Finish with sequential sweeps of exact best single moves (the
        weighted kernel k-means gain); they never decrease ``f``.

    backend : {"auto", "numba", "torch", "dask"}, default="auto"
        ``"auto"`` uses Dask for a ``dask.array.Array``, torch on CUDA when
        torch and a GPU are available, and Numba otherwise.  With torch, the
        ``"cosine"`` and ``"rbf"`` affinities are matrix-free: ``W`` is
        computed in row blocks and never stored, so memory is
        ``O(n (p + K))``; the graph initializations (``"multilevel"``,
        ``"multilevel_fast"``, ``"spectral"``) then run on the kNN graph of
        ``X``.  With Dask,
        ``X`` is a ``dask.array.Array`` of row blocks of a precomputed ``W``
        (CSR or dense chunks), clustered on the current
        ``distributed.Client`` without gathering it (see
        :ref:`the Dask guide <dask>`).

    device : str or torch.device, default="auto"
        ``"auto"``, ``"cpu"`` (or ``"cpu:N"``), ``"cuda"`` or ``"cuda:N"``.

    n_jobs : int, default=None
        Parallelism of ``fit``, ``predict`` and ``score``: the jobs of the
        nearest-neighbour search, and the threads of the Numba kernels for
        the duration of the call (restored afterwards), at most the CPUs
        the process may use (a container's CPU quota counts, unless
        ``NUMBA_NUM_THREADS`` is set): ``None`` keeps Numba's setting,
        ``-1`` uses them all, ``-2`` all but one.  BLAS runs on one thread
        while the Numba backend solves (it would compete for the cores).

    random_state : int, RandomState instance or None, default=None
        Seed of the initialization: the same labels on one machine (BLAS's
        products and eigensolves can round differently on another CPU).

    verbose : int, default=0
        ``0`` is silent; ``1`` logs the stages (``init``; ``level``, of the
        multilevel start; ``solve`` and ``polish``: every iteration and
        sweep, with the elapsed time; ``affinity``, of a matrix-free torch
        fit only) to the :mod:`logging` logger ``"sklearn_falcon"``,
        printed to stderr when logging is not configured; ``2`` adds the
        inner solves of the initialization.  See :ref:`progress`.

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
    >>> import numpy as np
    >>> from sklearn.datasets import make_blobs
    >>> from sklearn_falcon import FalconNCut
    >>> X, y = make_blobs(n_samples=300, centers=3, cluster_std=0.8, random_state=0)
    >>> est = FalconNCut(n_clusters=3, random_state=0).fit(X)
    >>> est.labels_.shape
    (300,)
    >>> bool(est.ncut_ < 0.1)
    True
    >>> bool(np.all(np.diff(est.objective_path_) >= 0))
    True
    """

    _parameter_constraints: dict = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "affinity": [StrOptions(set(AFFINITIES)), callable],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "gamma": [Interval(Real, 0, None, closed="left")],
        "power": [Interval(Real, 0, None, closed="neither")],
        "init": [StrOptions(set(INITS)), "array-like"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "warm_start": ["boolean"],
        **SOLVER_CONSTRAINTS,
        "backend": [StrOptions({"auto"} | set(BACKENDS))],
        "device": DEVICE_CONSTRAINT,
        "n_jobs": N_JOBS_CONSTRAINT,
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
        warm_start=False,
        max_iter=_DEFAULTS.max_iter,
        tol=_DEFAULTS.tol,
        tau=_DEFAULTS.tau,
        gamma_backtrack=_DEFAULTS.gamma_backtrack,
        delta=_DEFAULTS.delta,
        polish=_DEFAULTS.polish,
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
        self.warm_start = warm_start
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
    def _validate_X(self, X, reset):
        if is_dask_array(X):  # predict's rows: gathered (sparse blocks too)
            X = X.compute()
        X = host_array(X)  # a torch tensor, on any device: on the host
        check_dtype_kind(X, name="X")
        X = float_sparse(X)  # COO duplicates of uint8: summed without wrapping
        X = validate_data(self, X, accept_sparse="csr", dtype=(np.float64, np.float32),
                          ensure_min_samples=2 if reset else 1, reset=reset)
        check_sparse_structure(X, "X")  # indices past its shape: read unchecked
        return canonical_sparse(X)  # duplicates: one summed entry

    @logs_progress
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Compute the clustering.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor, dask.array.Array} of shape \
                (n_samples, n_features) or (n_samples, n_samples)
            Features, or an affinity / distance matrix when ``affinity`` is
            ``"precomputed"`` / ``"precomputed_nearest_neighbors"``; a Dask
            array of row blocks of ``W`` with ``affinity="precomputed"``.  A
            torch tensor (dense or sparse, on any device) is read on the host.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        state = dict(vars(self))  # a fit that fails keeps the last one whole
        try:  # (predict read the failed fit's affinity with the last labels_)
            return fit_sharded(self, X) if is_dask_array(X) else self._fit(X)
        except BaseException:  # KeyboardInterrupt too
            self.__dict__ = state
            raise

    def _fit(self, X):  # fit, on the host (a Dask array: fit_sharded)
        X = self._validate_X(X, reset=True)
        n_samples = X.shape[0]
        K = int(self.n_clusters)  # np.int8(100): no overflow in K-sized arithmetic
        if K > n_samples:
            raise ValueError(f"n_clusters={K} must be <= n_samples={n_samples}.")
        backend, device = resolve_backend(self.backend, self.device)
        warm = (warm_labels(self.__dict__.get("labels_"), n_samples, K, self.init,
                            self.verbose) if self.warm_start else None)
        init = self.init if warm is None else warm
        if not isinstance(init, str):
            init = check_init_labels(host_array(init), n_samples, K,
                                     n_init=self.n_init if warm is None else 1)
        elif INITS[init].needs_features and self.affinity in PRECOMPUTED:
            raise ValueError(
                f"init={init!r} needs features, but affinity={self.affinity!r}; use "
                "init='multilevel' or 'spectral'."
            )
        options = SolverOptions.from_params(self.get_params(deep=False))

        with one_openmp_thread_after_fork():  # (the kNN search's OpenMP)
            self._affinity, W, degrees, problem = affinity_graph(self, X, K, backend,
                                                                 device)
        active = degrees > 0
        self.isolated_ = np.flatnonzero(~active)
        W_act, d_act = active_subgraph(W, degrees, active, K,
                                       hint=self._affinity.connect_hint())
        rs = check_random_state(self.random_state)
        rng = np.random.default_rng(rs.randint(np.iinfo(np.int32).max))
        spec = BACKENDS[backend]  # (Dask's computes: one process pool)
        with fit_threads(self.n_jobs, limit_blas=spec.limit_blas), spec.scope():
            best, problem = self._solve(problem, init, X, W_act, d_act, active, K,
                                        backend, device, rng, options)
            labels = with_isolated(best.labels[0].astype(np.int64), active,
                                   n_samples, d_act, K)
            # exact: one pass over W (not the solver's running sums), n_jobs threads
            assoc = (problem.cluster_statistics(best.labels)[1][0] if W is None
                     else cluster_statistics(W, labels, K, degrees)[1])
        vol = np.bincount(best.labels[0], weights=degrees[active], minlength=K)
        self.labels_ = labels
        self._affinity_matrix = W
        self.cluster_volumes_ = vol
        self.cluster_associations_ = assoc
        self.ncut_ = ncut_of(vol, assoc)
        self.objective_path_ = best.objective_path[0]
        self.n_iter_ = int(best.n_iter[0])
        self.n_backtracks_ = int(best.n_backtracks[0])
        self.backend_ = backend
        self.__dict__.pop("_dask_info", None)  # an earlier Dask fit's diagnostics
        return self

    def _solve(self, problem, init, X, W_act, d_act, active, K, backend, device, rng,
               options):
        """Initial labels, then the Falcon solve from each: the best result by
        ``f``, and the problem it was solved on."""
        matrix_free = problem is not None
        if not matrix_free:
            problem = BACKENDS[backend].make_problem(W_act, K, device=device,
                                                     degrees=d_act)
        if not isinstance(init, str):
            starts = [init[active]]
        else:
            ctx = InitContext(K, rng, options, W=W_act, degrees=d_act)
            X_act = X if active.all() else X[np.flatnonzero(active)]
            if INITS[init].needs_features:
                ctx.X = X_act
            if matrix_free and INITS[init].needs_graph:
                # the graph inits need an explicit W: the kNN graph of X
                ctx.W = start_graph(X_act, self.n_neighbors, self.n_jobs)
                ctx.degrees = degrees_of(ctx.W)
            t0 = time.perf_counter()
            starts = make_starts(init, ctx, self.n_init)
            del ctx
            if self.verbose:
                log_stage("init", "%s, n_init=%d: %d starting labelling%s in %.2f s",
                          init, self.n_init, len(starts), "s"[:len(starts) != 1],
                          time.perf_counter() - t0)
        def runs():  # one solve at a time: only the best is held
            for i, y0 in enumerate(starts):
                if self.verbose:
                    log_stage("solve", "start %d of %d", i + 1, len(starts))
                yield solve(problem, fill_empty(y0, K, rng), options)
        return best_result(runs(), W_act, K, d_act, problem), problem

    @property
    def affinity_matrix_(self):
        """The symmetric affinity ``W`` that was clustered (recomputed, dense,
        when read after a matrix-free fit: ``W`` was never held)."""
        if "_affinity_matrix" not in self.__dict__:
            raise AttributeError("This FalconNCut instance is not fitted yet: "
                                 "'affinity_matrix_' does not exist.")
        W = self._affinity_matrix
        if W is None:
            W = self._affinity.recompute()
        return W

    # -------------------------------------------------------------- predict
    def predict(self, X):
        """Assign new samples to the learned clusters.

        A new sample with affinity row :math:`w` to the training samples and
        degree :math:`d = \\sum_j w_j` gets the cluster
        :math:`\\arg\\max_k 2 w^\\top x_k / \\mathrm{vol}_k - d\\,
        \\mathrm{assoc}_k / \\mathrm{vol}_k^2`: Falcon's score for one row.  A
        sample with no affinity to the training set gets the cluster of
        largest volume.

        The new samples are processed in row chunks whose cross-affinity
        fits in scikit-learn's ``working_memory`` (see
        :func:`sklearn.config_context`), so any number of them can be
        predicted in bounded memory.

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape \
                (n_new, n_features) or (n_new, n_train)
            New features, or the cross-affinity (distances for
            ``"precomputed_nearest_neighbors"``) to the training samples.

        Returns
        -------
        labels : ndarray of shape (n_new,)
        """
        check_is_fitted(self)
        return self._predict(self._validate_X(X, reset=False))

    def _predict(self, X):  # predict's labels of a validated X (score's too)
        labels = np.empty(X.shape[0], dtype=np.int64)
        aff = copy.copy(self._affinity)  # on the n_jobs of now (set_params, or
        aff.n_jobs = self.n_jobs  # another machine: the fit's was kept)
        row_bytes = aff.cross_row_bytes(self.labels_.shape[0])
        with fit_threads(self.n_jobs, limit_blas=False):
            for rows in row_chunks(X.shape[0], row_bytes):
                A = aff.cross(X[rows])
                labels[rows] = out_of_sample_labels(
                    A, self.labels_, self.cluster_volumes_, self.cluster_associations_)
        return labels

    def score(self, X, y=None):
        """Negative NCut of :meth:`predict`'s labels on a graph of ``X``:
        higher is better, with no labels needed (e.g. in a grid search).

        - **Features** (every affinity but the precomputed ones):
          ``-normalized_cut(W_X, predict(X))``, where ``W_X`` is the affinity
          graph of the samples of ``X`` among themselves, built with the
          parameters of :meth:`fit`.
        - **Precomputed affinities** (``"precomputed"``,
          ``"precomputed_nearest_neighbors"``): ``X`` holds the new samples'
          affinities (or distances) to the training samples only, so the
          graph is the bipartite one between the two sets: the new samples
          labelled by :meth:`predict`, the training samples by ``labels_``,
          and an edge of weight ``A[i, j]`` between new sample ``i`` and
          training sample ``j``: its NCut is low when each new sample's
          affinity falls inside its own cluster.

        The graph and the clusters are the fit's (its affinity, ``K`` and
        ``labels_``); where it is computed is the estimator's now, as for
        :meth:`predict`: the current ``n_jobs``, and, after a matrix-free
        fit (``backend="torch"`` with ``"rbf"``/``"cosine"``), the current
        ``device`` for ``W_X``'s row blocks (``set_params(device="cpu")``
        scores a CUDA fit on a machine without a GPU; float32 on CUDA can
        round the score differently from float64 on the CPU).

        Parameters
        ----------
        X : {array-like, sparse matrix, torch.Tensor} of shape \
                (n_samples, n_features) or (n_samples, n_train)
            Features, or the cross-affinity (distances for
            ``"precomputed_nearest_neighbors"``) to the training samples.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        score : float
            In ``[-K, 0]``, for the ``K`` of the fit (not of a later ``set_params``).
        """
        check_is_fitted(self)
        Xv = self._validate_X(X, reset=False)  # once: a Dask array is computed
        labels = self._predict(Xv)
        # the fit's K and affinity (a copy: its fitted state stays predict's), whatever
        # set_params did since (a smaller n_clusters wrote past kernels' arrays)
        K, A = self.cluster_volumes_.shape[0], copy.copy(self._affinity)
        if A.precomputed:
            return -bipartite_ncut(A.cross(Xv), labels, self.labels_, K)
        if Xv.shape[0] < 2:
            return 0.0
        A.n_jobs = self.n_jobs
        with fit_threads(self.n_jobs, limit_blas=False):  # as in predict
            return -ncut_of(*affinity_statistics(A, Xv, labels, K, self.backend_,
                                                 self.device))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.pairwise = self.affinity in PRECOMPUTED
        # an affinity or a distance matrix is nonnegative
        tags.input_tags.positive_only = self.affinity in PRECOMPUTED
        return tags
