"""FalconNCut behaviour: API, quality invariants, sklearn integration."""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.cluster import SpectralClustering
from sklearn.datasets import make_blobs, make_moons
from sklearn.metrics import adjusted_rand_score, make_scorer
from sklearn.metrics.pairwise import laplacian_kernel
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from benchmarks.graphs import sbm_graph
from shared import parallel_edges
from sklearn_falcon import FalconNCut, normalized_cut


@pytest.fixture(scope="module")
def blobs():
    return make_blobs(n_samples=400, centers=4, cluster_std=0.5, random_state=0)


def sbm(n=600, K=4, degree=19.5, p_in=0.77, seed=0):
    """An unweighted planted partition (``benchmarks.graphs.sbm_graph``)."""
    return sbm_graph(n, K, avg_degree=degree, p_in_ratio=p_in, seed=seed)


def test_fit_predict_basic(blobs):
    X, y = blobs
    est = FalconNCut(n_clusters=4, random_state=0)
    labels = est.fit_predict(X)
    assert labels.shape == (400,) and labels.dtype.kind == "i"
    assert set(labels) == set(range(4))
    assert adjusted_rand_score(y, labels) > 0.95
    assert est.ncut_ == pytest.approx(normalized_cut(est.affinity_matrix_, labels))
    assert est.n_iter_ >= 1
    assert sp.issparse(est.affinity_matrix_)
    assert abs(est.affinity_matrix_ - est.affinity_matrix_.T).max() == 0


def test_readme_quickstart_five_clusters():
    X, _ = make_blobs(n_samples=500, centers=5, random_state=1)
    labels = FalconNCut(n_clusters=5).fit_predict(X)
    assert len(np.unique(labels)) == 5


@pytest.mark.parametrize("init", ["multilevel", "multilevel_fast", "kmeans", "spectral",
                                  "random"])
@pytest.mark.parametrize("affinity", ["nearest_neighbors", "rbf", "cosine"])
def test_objective_path_is_monotone(blobs, init, affinity):
    X, _ = blobs
    est = FalconNCut(n_clusters=4, affinity=affinity, init=init, gamma=0.1,
                     random_state=0).fit(X)
    path = est.objective_path_
    assert path.ndim == 1 and path.size >= 1
    assert np.all(np.diff(path) >= -1e-12)
    assert path[-1] == pytest.approx(4 - est.ncut_, rel=1e-9)


def test_random_init_plain_steps_monotone_with_backtracking():
    W, _ = sbm()
    est = FalconNCut(n_clusters=4, affinity="precomputed", init="random",
                     polish=False, tau=1e-3, random_state=0).fit(W)
    assert np.all(np.diff(est.objective_path_) >= 0)
    assert est.n_iter_ > 1


def test_beats_or_matches_spectral_on_sbm():
    W, y = sbm(n=800, K=4, degree=16, p_in=0.625, seed=3)
    est = FalconNCut(n_clusters=4, affinity="precomputed", random_state=0).fit(W)
    sc = SpectralClustering(n_clusters=4, affinity="precomputed", random_state=0,
                            assign_labels="cluster_qr").fit(W)
    assert est.ncut_ <= normalized_cut(W, sc.labels_) + 1e-9


def test_same_random_state_same_labels(blobs):
    X, _ = blobs
    for init in ("multilevel", "random", "kmeans"):
        a = FalconNCut(4, init=init, random_state=42).fit_predict(X)
        b = FalconNCut(4, init=init, random_state=42).fit_predict(X)
        np.testing.assert_array_equal(a, b)
    rs = np.random.RandomState(0)
    FalconNCut(4, random_state=rs).fit(X)  # a RandomState instance is accepted


def test_n_init_keeps_best(blobs):
    X, _ = blobs
    one = FalconNCut(4, init="random", n_init=1, random_state=0).fit(X)
    many = FalconNCut(4, init="random", n_init=5, random_state=0).fit(X)
    assert many.ncut_ <= one.ncut_ + 1e-12


def test_array_init_is_used_and_not_modified(blobs):
    X, y = blobs
    y0 = y.copy()
    est = FalconNCut(4, init=y0, max_iter=0, polish=False).fit(X)
    np.testing.assert_array_equal(est.labels_, y)
    np.testing.assert_array_equal(y0, y)


def test_pickle_and_clone(blobs):
    X, _ = blobs
    est = FalconNCut(4, random_state=0).fit(X)
    est2 = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(est2.predict(X[:20]), est.predict(X[:20]))
    c = clone(est)
    assert c.get_params() == est.get_params() and not hasattr(c, "labels_")


def test_predict_training_points_and_new_points(blobs):
    X, y = blobs
    est = FalconNCut(4, random_state=0).fit(X)
    assert adjusted_rand_score(est.labels_, est.predict(X)) > 0.98
    Xn, yn = make_blobs(n_samples=100, centers=4, cluster_std=0.5, random_state=0)
    assert adjusted_rand_score(yn, est.predict(Xn)) > 0.9


def test_predict_precomputed_cross_affinity():
    X, y = make_blobs(n_samples=300, centers=3, random_state=2)
    from sklearn.metrics.pairwise import rbf_kernel

    W = rbf_kernel(X, gamma=0.5)
    est = FalconNCut(3, affinity="precomputed", random_state=0).fit(W)
    pred = est.predict(W[:50])  # rows of the training affinity
    assert adjusted_rand_score(est.labels_[:50], pred) > 0.95
    with pytest.raises(ValueError, match="expecting 300 features"):
        est.predict(W[:50, :10])
    # score: -NCut of the bipartite graph between new and training samples
    # (defect 7 of issue 18: it raised); rows cut from their own cluster score
    # lower than rows that fall inside it
    good = est.score(W[:50])
    assert -3 <= good <= 0
    A = W[:50]
    B = np.zeros((100, 300))
    B[:50] = A
    B[50:] = A  # the same rows again: the same bipartite cut
    assert est.score(B) == pytest.approx(good)
    # the same value from the explicit bipartite graph
    G = np.block([[np.zeros((50, 50)), A], [A.T, np.zeros((300, 300))]])
    both = np.r_[est.predict(A), est.labels_]
    assert good == pytest.approx(-normalized_cut(G, both), rel=1e-12)


def test_precomputed_nearest_neighbors_matches_features():
    X, _ = make_moons(n_samples=300, noise=0.05, random_state=0)
    from sklearn.neighbors import NearestNeighbors

    D = NearestNeighbors(n_neighbors=15).fit(X).kneighbors_graph(mode="distance")
    est = FalconNCut(2, affinity="precomputed_nearest_neighbors", n_neighbors=10,
                     random_state=0).fit(D)
    assert adjusted_rand_score(
        FalconNCut(2, random_state=0).fit_predict(X), est.labels_) > 0.95
    assert est.predict(D[:5]).shape == (5,)


def test_callable_affinity():
    X, y = make_blobs(n_samples=200, centers=3, cluster_std=0.5, random_state=0)

    def kernel(A, B=None):
        return laplacian_kernel(A, B, gamma=0.5)

    est = FalconNCut(3, affinity=kernel, random_state=0).fit(X)
    ref = FalconNCut(3, affinity="precomputed", random_state=0).fit(kernel(X))
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(X[:7]), ref.predict(kernel(X[:7], X)))


def test_callable_affinity_of_one_argument_fits_and_predict_says_why_not():
    """``affinity(X)`` alone clusters; predict, which needs affinity(X_new,
    X_fit), says what the callable lacks (Python's own "takes 1 positional
    argument" named neither)."""
    X, _ = make_blobs(n_samples=120, centers=3, random_state=0)

    def own_kernel(A):
        return laplacian_kernel(A, gamma=0.5)

    est = FalconNCut(3, affinity=own_kernel, random_state=0).fit(X)
    assert est.labels_.shape == (120,)
    with pytest.raises(TypeError, match=r"callable affinity own_kernel takes no "
                       r"second argument; define it as affinity\(X, Y=None\)"):
        est.predict(X[:5])


def test_callable_affinity_of_the_wrong_shape_in_predict_says_so():
    # a callable whose cross-affinity has the wrong number of rows (here it
    # ignores X_new) made predict fail with numpy's "could not broadcast
    # input array from shape (120,) into shape (5,)", and one with the
    # wrong number of columns was called "a precomputed affinity"
    X, _ = make_blobs(n_samples=120, centers=3, random_state=0)

    def ignores_x(A, B=None):
        return laplacian_kernel(A if B is None else B, gamma=0.5)

    est = FalconNCut(3, affinity=ignores_x, random_state=0).fit(X)
    msg = (r"callable affinity must return an \(n_X, n_Y\) matrix; "
           r"affinity\(X_new, X_fit\) returned shape=\(120, 120\) for n_X=5 ")
    with pytest.raises(ValueError, match=msg):
        est.predict(X[:5])
    with pytest.raises(ValueError, match=msg):
        est.score(X[:5])

    def few_columns(A, B=None):
        return laplacian_kernel(A, B if B is None else B[:10], gamma=0.5)

    est = FalconNCut(3, affinity=few_columns, random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"returned shape=\(5, 10\) for n_X=5 new "
                       r"samples and n_Y=120 training samples"):
        est.predict(X[:5])

    def boolean_cross(A, B=None):
        W = laplacian_kernel(A, B, gamma=0.5)
        return W if B is None else W > 0.5

    est = FalconNCut(3, affinity=boolean_cross, random_state=0).fit(X)
    with pytest.raises(TypeError, match=r"affinity\(X, X_fit\) has dtype=bool"):
        est.predict(X[:5])


@pytest.mark.parametrize("affinity_of", [
    lambda W: sp.csr_matrix(W * (1 + 1j)), lambda W: W * (1 + 1j)])
def test_callable_affinity_of_complex_values_is_refused(affinity_of):
    # a sparse complex affinity from a callable lost its imaginary part
    # with only NumPy's ComplexWarning (a dense one was refused)
    X, _ = make_blobs(n_samples=60, centers=3, random_state=0)

    def kernel(A, B=None):
        return affinity_of(laplacian_kernel(A, B, gamma=0.5))

    with pytest.raises(ValueError, match=r"Complex data not supported: "
                       r"affinity\(X\) has dtype=complex128"):
        FalconNCut(3, affinity=kernel, random_state=0).fit(X)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "dense"])
def test_precomputed_formats_agree(fmt):
    W, y = sbm(seed=1)
    Win = W.toarray() if fmt == "dense" else W.asformat(fmt)
    est = FalconNCut(4, affinity="precomputed", random_state=0).fit(Win)
    ref = FalconNCut(4, affinity="precomputed", random_state=0).fit(W)
    assert est.ncut_ == pytest.approx(ref.ncut_, abs=1e-9)
    assert adjusted_rand_score(y, est.labels_) > 0.9


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept(dtype):
    W, _ = sbm(seed=2)
    W = W.astype(dtype)
    est = FalconNCut(4, affinity="precomputed", random_state=0).fit(W)
    assert est.affinity_matrix_.dtype == dtype
    X, _ = make_blobs(n_samples=100, random_state=0)
    est = FalconNCut(3, affinity="rbf", random_state=0).fit(X.astype(dtype))
    assert est.affinity_matrix_.dtype == dtype


def test_pipeline(blobs):
    X, y = blobs
    pipe = make_pipeline(StandardScaler(), FalconNCut(n_clusters=3, random_state=0))
    labels = pipe.fit_predict(X)
    assert labels.shape == (400,)
    assert pipe.predict(X[:10]).shape == (10,)


@pytest.mark.parametrize("scoring", [None, "ari"])
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search(blobs, scoring, n_jobs):
    X, y = blobs
    X, y = X[:240], y[:240]
    scorer = None if scoring is None else make_scorer(adjusted_rand_score)
    gs = GridSearchCV(
        FalconNCut(n_clusters=3, random_state=0),
        {"tau": [0.01, 1.0], "n_init": [1, 3]},
        scoring=scorer, cv=3, n_jobs=n_jobs,
    )
    gs.fit(X, y)
    assert set(gs.best_params_) == {"tau", "n_init"}
    assert np.all(np.isfinite(gs.cv_results_["mean_test_score"]))
    if scoring is None:
        assert np.all(gs.cv_results_["mean_test_score"] <= 0)


def test_score_is_negative_ncut(blobs):
    X, _ = blobs
    est = FalconNCut(4, random_state=0).fit(X)
    s = est.score(X)
    assert s == pytest.approx(-normalized_cut(est.affinity_matrix_, est.predict(X)))
    assert s <= 0


@pytest.mark.parametrize("change", [dict(gamma=50.0), dict(n_clusters=2),
                                    dict(affinity="nearest_neighbors")])
def test_score_uses_the_parameters_of_fit(blobs, change):
    """``score`` formed the graph of ``X`` with the parameters as they are
    now: after ``set_params(gamma=50.0)`` it gave another score than the
    fitted model's, and after ``set_params(n_clusters=2)`` the kernels
    wrote past their arrays (glibc aborted the process).  It uses the
    parameters of ``fit``, as its docstring says."""
    X, _ = blobs
    est = FalconNCut(3, affinity="rbf", gamma=0.5, random_state=0).fit(X)
    want = est.score(X[:100])
    assert est.set_params(**change).score(X[:100]) == want


@pytest.mark.parametrize("affinity, rows", [
    ("nearest_neighbors", slice(0, 5)),  # n_neighbors=10 >= 5 samples
    ("rbf", [0] * 5), ("cosine", [0] * 5),  # identical samples: W all ones
])
def test_score_on_a_complete_graph_says_the_score_is_meaningless(blobs, affinity,
                                                                 rows):
    """On samples whose graph is complete with equal weights (fewer than
    ``n_neighbors``: a grid search's small test folds), every labelling into
    m clusters scores -(m - 1).  ``score`` warned with fit's text, "every
    partition has the same NCut (n_clusters - 1); the labels are
    arbitrary. Use fewer neighbours than samples": predict's labels are not
    arbitrary, m may be below n_clusters, and the advice was to refit.  It
    says that the score does not measure the clustering, once."""
    X, _ = blobs
    est = FalconNCut(3, affinity=affinity, random_state=0).fit(X)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        s = est.score(X[rows])
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 1, msgs
    assert "does not measure the clustering" in msgs[0], msgs
    assert "arbitrary" not in msgs[0] and rec[0].filename == __file__
    assert s == -(np.unique(est.predict(X[rows])).size - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.score(X[:50])  # a graph that is not complete: no warning


def test_score_reads_its_input_once(blobs, monkeypatch):
    """``score`` validated ``X`` twice (in ``predict``, then for the graph):
    a Dask array of new samples was computed twice, and a warning of the
    input check (``X`` without the feature names of the fit) was raised
    twice.  It is read once."""
    X, _ = blobs
    est = FalconNCut(4, random_state=0).fit(X)
    want = est.score(X[:100])
    seen = []
    validate = FalconNCut._validate_X
    monkeypatch.setattr(FalconNCut, "_validate_X",
                        lambda self, X, reset: seen.append(X) or validate(self, X,
                                                                           reset))
    assert est.score(X[:100]) == want
    assert len(seen) == 1
    da = pytest.importorskip("dask.array")
    computed = []
    Xd = da.from_array(X[:100], chunks=50).map_blocks(
        lambda b: computed.append(len(b)) or b, meta=np.empty((0, 2)))
    assert est.score(Xd) == want
    assert len(computed) == 2  # each block once


def test_isolated_nodes_deterministic():
    W, _ = sbm(seed=4)
    W = sp.lil_matrix(W)
    for i in (5, 17):
        W[i, :] = 0
        W[:, i] = 0
    W = W.tocsr()
    with pytest.warns(UserWarning, match="zero degree"):
        est = FalconNCut(4, affinity="precomputed", random_state=0).fit(W)
    np.testing.assert_array_equal(est.isolated_, [5, 17])
    big = np.argmax(est.cluster_volumes_)
    assert est.labels_[5] == est.labels_[17] == big
    assert np.isfinite(est.ncut_)


@pytest.mark.parametrize("explicit_zeros", [False, True])
def test_isolated_nodes_subgraph_without_copy(explicit_zeros):
    from sklearn_falcon._affinity import active_subgraph
    from sklearn_falcon._stats import degrees_of

    W, _ = sbm(seed=4)
    W = sp.lil_matrix(W)
    for i in (0, 5, 17, W.shape[0] - 1):
        W[i, :] = 0
        W[:, i] = 0
    W = sp.csr_matrix(W)
    W.indices = W.indices.astype(np.int32)
    W.indptr = W.indptr.astype(np.int32)
    if explicit_zeros:  # row and column 5 store zeros: the slicing path
        C = W.tocoo()
        W = sp.csr_matrix((np.r_[C.data, 0.0, 0.0], (np.r_[C.row, 5, 6],
                                                      np.r_[C.col, 6, 5])),
                          shape=W.shape)
        assert np.diff(W.indptr)[5] == 1
    before = (W.data.copy(), W.indices.copy(), W.indptr.copy())
    d = degrees_of(W)
    active = d > 0
    idx = np.flatnonzero(active)
    with pytest.warns(UserWarning, match="zero degree"):
        W_act, d_act = active_subgraph(W, d, active, 4)
    expected = W[idx][:, idx].toarray()
    np.testing.assert_array_equal(W_act.toarray(), expected)
    np.testing.assert_array_equal(d_act, d[idx])
    assert W_act.shape == (idx.size, idx.size) and W_act.has_sorted_indices
    assert np.shares_memory(W_act.data, W.data) is not explicit_zeros
    for a, b in zip(before, (W.data, W.indices, W.indptr)):
        np.testing.assert_array_equal(a, b)  # the caller's W is untouched


@pytest.mark.parametrize("n_jobs, expected", [(1, 1), (-1, "max"), (99, "max"),
                                              (None, "unchanged")])
def test_n_jobs_sets_numba_threads_during_fit(monkeypatch, blobs, n_jobs, expected):
    import numba

    import sklearn_falcon._falcon as falcon_module
    from sklearn_falcon._threads import num_threads

    seen = []
    real_solve = falcon_module.solve

    def spy(*args, **kwargs):
        seen.append(num_threads())
        return real_solve(*args, **kwargs)

    monkeypatch.setattr(falcon_module, "solve", spy)
    before = numba.get_num_threads()
    FalconNCut(4, n_jobs=n_jobs, random_state=0).fit(blobs[0])
    assert numba.get_num_threads() == before  # restored
    want = {"max": numba.config.NUMBA_NUM_THREADS, "unchanged": before}.get(
        expected, expected)
    assert seen and set(seen) == {want}


def test_n_jobs_holds_for_the_final_statistics_of_a_fit(monkeypatch, blobs):
    """The pass over ``W`` that gives ``cluster_associations_`` and ``ncut_``
    ran after the ``n_jobs`` block: on a graph of 1M stored entries, where
    it is a parallel kernel, ``n_jobs=1`` launched it on every Numba
    thread.  The whole fit after the affinity runs on ``n_jobs`` threads."""
    import numba

    import sklearn_falcon._falcon as falcon_module
    from sklearn_falcon._threads import num_threads

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one Numba thread: nothing to limit")
    seen, real = [], falcon_module.cluster_statistics
    monkeypatch.setattr(falcon_module, "cluster_statistics",
                        lambda *a, **k: seen.append(num_threads())
                        or real(*a, **k))
    before = numba.get_num_threads()
    est = FalconNCut(4, n_jobs=1, random_state=0).fit(blobs[0])
    assert seen == [1] and numba.get_num_threads() == before
    assert est.ncut_ == pytest.approx(normalized_cut(est.affinity_matrix_,
                                                     est.labels_))


def test_n_jobs_holds_for_the_graph_of_score(monkeypatch, blobs):
    """``score`` forms the graph of ``X`` and makes one pass over it (a
    parallel kernel from 1M stored entries) outside the ``n_jobs`` block of
    ``predict``: inside ``GridSearchCV(n_jobs=...)`` with ``n_jobs=1`` per
    estimator, as the user guide advises, every held-out fold's pass ran on
    every Numba thread."""
    import numba

    import sklearn_falcon._stats as stats_module
    from sklearn_falcon._threads import num_threads

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one Numba thread: nothing to limit")
    X = blobs[0]
    est = FalconNCut(4, n_jobs=1, random_state=0).fit(X)
    want = est.score(X[:200])
    seen, real = [], stats_module.cluster_statistics
    monkeypatch.setattr(stats_module, "cluster_statistics",
                        lambda *a, **k: seen.append(num_threads())
                        or real(*a, **k))
    before = numba.get_num_threads()
    assert est.score(X[:200]) == want
    assert seen == [1] and numba.get_num_threads() == before


def test_n_jobs_zero_is_an_error(blobs):
    with pytest.raises(ValueError, match="'n_jobs' parameter of FalconNCut"):
        FalconNCut(4, n_jobs=0).fit(blobs[0])
    est = FalconNCut(4, random_state=0).fit(blobs[0]).set_params(n_jobs=0)
    with pytest.raises(ValueError, match="n_jobs == 0"):  # not validated there
        est.predict(blobs[0])


def test_precomputed_nearest_neighbors_sparse_rows_with_few_distances():
    # found by check_estimator over more configurations (issue 18): a sparse
    # distance matrix with a row of fewer than n_neighbors stored distances
    # was refused by scikit-learn's NearestNeighbors; the row keeps the
    # neighbours it has, and the other rows get the same graph as before
    from sklearn.neighbors import NearestNeighbors

    X, _ = make_blobs(n_samples=120, centers=3, random_state=0)
    D = NearestNeighbors(n_neighbors=12).fit(X).kneighbors_graph(mode="distance")
    D = D.tolil()
    D[0, :] = 0  # sample 0: only its 3 nearest distances stored
    D[0, [1, 2, 3]] = [1.0, 2.0, 3.0]
    D = D.tocsr()
    D.eliminate_zeros()
    est = FalconNCut(3, affinity="precomputed_nearest_neighbors", n_neighbors=10,
                     random_state=0).fit(D)
    W = est.affinity_matrix_
    assert set(W[0].indices) >= {1, 2, 3}
    ref = NearestNeighbors(n_neighbors=10, metric="precomputed").fit(D[1:, 1:])
    C = ref.kneighbors_graph(D[1:, 1:], mode="connectivity")
    # rows 1.. only differ from the reference through their edges to row 0
    diff = abs((W[1:, 1:] - 0.5 * (C + C.T)))
    assert diff.max() <= 0.5 + 1e-12
    assert est.predict(D[:5]).shape == (5,)


def test_precomputed_nearest_neighbors_ties_by_column_dense_or_sparse():
    # equal distances (Hamming distances of binary codes) were taken by
    # scikit-learn's partition for a dense matrix, by column order for a
    # sparse one: the same distances gave two kNN graphs (960 entries
    # apart here), and the dense one broke the "equal distances by sample
    # index" of the kNN affinities
    rng = np.random.default_rng(0)
    B = rng.integers(0, 2, size=(120, 10))
    D = (B[:, None, :] != B[None, :, :]).sum(-1).astype(float)
    r, c = np.nonzero(np.ones_like(D))
    D_all = sp.csr_matrix((D[r, c], (r, c)), shape=D.shape)  # every entry stored
    k = 8
    want = np.zeros_like(D)  # the k nearest of each row, ties by column
    for i in range(D.shape[0]):
        want[i, np.lexsort((np.arange(D.shape[1]), D[i]))[:k]] = 1
    params = dict(affinity="precomputed_nearest_neighbors", n_neighbors=k,
                  random_state=0)
    dense = FalconNCut(3, **params).fit(D)
    sparse = FalconNCut(3, **params).fit(D_all)
    np.testing.assert_array_equal(dense.affinity_matrix_.toarray(),
                                  (want + want.T) / 2)
    np.testing.assert_array_equal(sparse.affinity_matrix_.toarray(),
                                  (want + want.T) / 2)
    np.testing.assert_array_equal(dense.labels_, sparse.labels_)
    np.testing.assert_array_equal(dense.predict(D[:30]), sparse.predict(D_all[:30]))


def test_precomputed_nearest_neighbors_non_canonical_sparse_distances():
    # a CSR distance matrix with duplicate entries (one distance split in
    # two, read by SciPy as their sum) and unsorted column indices gave
    # another kNN graph than the same matrix in canonical form: each part
    # of a duplicate counted as a neighbour of its own, and ties went by
    # storage order instead of column order
    from sklearn.neighbors import NearestNeighbors

    X, _ = make_blobs(n_samples=80, centers=3, random_state=0)
    D = NearestNeighbors(n_neighbors=12).fit(X).kneighbors_graph(mode="distance")
    D.data[:] = np.round(D.data, 1)  # ties
    # every distance split into two halves, the columns of a row reversed
    indices = np.empty(2 * D.nnz, dtype=D.indices.dtype)
    data = np.empty(2 * D.nnz)
    for i in range(D.shape[0]):
        lo, hi = D.indptr[i], D.indptr[i + 1]
        indices[2 * lo:2 * hi] = np.repeat(D.indices[lo:hi][::-1], 2)
        data[2 * lo:2 * hi] = np.repeat(D.data[lo:hi][::-1] / 2, 2)
    D2 = sp.csr_matrix((data, indices, 2 * D.indptr), shape=D.shape)
    assert not D2.has_canonical_format
    kept = D2.copy()
    params = dict(affinity="precomputed_nearest_neighbors", n_neighbors=5,
                  random_state=0)
    ref = FalconNCut(3, **params).fit(D)
    est = FalconNCut(3, **params).fit(D2)
    assert abs(est.affinity_matrix_ - ref.affinity_matrix_).max() == 0
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(D2[:20]), ref.predict(D[:20]))
    # the caller's matrix is left as it was
    np.testing.assert_array_equal(D2.indices, kept.indices)
    np.testing.assert_array_equal(D2.data, kept.data)


@pytest.mark.parametrize("affinity", ["nearest_neighbors", "rbf", "cosine"])
def test_sparse_features_with_duplicate_entries(affinity):
    # a CSR matrix of features with duplicate entries (one value split in
    # two, as a bag of words built from token ids stores it; SciPy reads
    # their sum) gave another graph than the same matrix in canonical form:
    # scikit-learn's row norms added the squares of the parts
    X, _ = make_blobs(n_samples=90, n_features=20, centers=3, random_state=0)
    Xs = sp.csr_matrix(np.abs(X))
    D = sp.csr_matrix((np.repeat(Xs.data / 2, 2), np.repeat(Xs.indices, 2),
                       2 * Xs.indptr), shape=Xs.shape)
    assert not D.has_canonical_format and abs(D - Xs).max() == 0
    kept = D.copy()
    params = dict(affinity=affinity, gamma=0.01, random_state=0)
    ref = FalconNCut(3, **params).fit(Xs)
    est = FalconNCut(3, **params).fit(D)
    assert abs(est.affinity_matrix_ - ref.affinity_matrix_).max() <= 1e-12
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(ref.predict(D[:30]), ref.predict(Xs[:30]))
    assert ref.score(D) == pytest.approx(ref.score(Xs))
    np.testing.assert_array_equal(D.data, kept.data)  # not summed in place
    np.testing.assert_array_equal(D.indices, kept.indices)
    # falcon_batch reads them as the estimator does
    from sklearn_falcon import falcon_batch

    a, b = (falcon_batch([G], 3, backend="numba", **params) for G in (D, Xs))
    np.testing.assert_array_equal(a.labels[0], b.labels[0])
    np.testing.assert_array_equal(D.data, kept.data)
    # a CSC matrix with duplicates too (the batch takes CSC as it is)
    Dc = D.tocsc()  # (SciPy keeps the duplicates)
    assert not Dc.has_canonical_format
    c = falcon_batch([Dc], 3, backend="numba", **params)
    np.testing.assert_array_equal(c.labels[0], b.labels[0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_integer_coo_duplicates_are_summed_without_wrapping(dtype):
    # an edge list of repeated edges with small integer weights (a COO
    # matrix of uint8 ones): SciPy's conversion to CSR summed the duplicates
    # in uint8, so 300 parallel edges weighed 44 (int8: -16, refused as
    # negative), where normalized_cut sums them in float64; ncut_ was then
    # not the NCut of the matrix passed (0.044 against 0.0066)
    from sklearn_falcon import falcon_batch

    _, _, G, W = parallel_edges(dtype)
    kept = G.copy()
    est = FalconNCut(2, affinity="precomputed", random_state=0).fit(G)
    ref = FalconNCut(2, affinity="precomputed", random_state=0).fit(W)
    np.testing.assert_array_equal(est.affinity_matrix_.toarray(), W)
    assert est.ncut_ == pytest.approx(normalized_cut(G, est.labels_), rel=1e-12)
    assert est.ncut_ == pytest.approx(ref.ncut_, rel=1e-12)
    A = sp.coo_matrix((np.ones(600, dtype), ([0] * 300 + [1] * 300,
                                             [0] * 300 + [2] * 300)), shape=(2, 4))
    summed = np.array([[300.0, 0, 0, 0], [0, 0, 300, 0]])  # predict's rows too
    assert est.score(A) == pytest.approx(ref.score(summed), rel=1e-12)
    np.testing.assert_array_equal(G.data, kept.data)  # the caller's is left alone
    batch = falcon_batch([G], 2, affinity="precomputed", backend="numba")
    assert batch.ncut[0] == pytest.approx(normalized_cut(W, batch.labels[0]),
                                          rel=1e-12)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_coo_and_csc_features_are_accepted(backend):
    pytest.importorskip("torch") if backend == "torch" else None
    X = sp.random(60, 8, density=0.5, random_state=0) + sp.eye(60, 8)
    for fmt in ("coo", "csc"):
        Xf = X.asformat(fmt)
        est = FalconNCut(3, affinity="cosine", init="kmeans", backend=backend,
                         device="cpu", random_state=0).fit(Xf)
        assert est.predict(Xf).shape == (60,)
        ref = FalconNCut(3, affinity="cosine", init="kmeans", backend=backend,
                         device="cpu", random_state=0).fit(X.tocsr())
        np.testing.assert_array_equal(est.labels_, ref.labels_)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_falcon_batch_reports_the_exact_ncut_of_its_labels(backend):
    # on weights spanning 20 orders of magnitude the solver's running f
    # drifts: falcon_batch reported it (NCut 3.8344 for labels of NCut
    # 3.8374), where the estimator recomputes the statistics of its labels
    pytest.importorskip("torch") if backend == "torch" else None
    from sklearn_falcon import falcon_batch
    from sklearn_falcon.metrics import normalized_association

    rng = np.random.default_rng(21)
    n, K = 355, 61
    i = np.arange(n - 1)
    graphs = []
    for _ in range(2):
        A = sp.coo_matrix((10.0 ** rng.uniform(-10, 10, n - 1), (i, i + 1)),
                          shape=(n, n))
        graphs.append((A + A.T).tocsr())
    res = falcon_batch(graphs, K, affinity="precomputed", init="random",
                       random_state=0, backend=backend, device="cpu")
    for W, y, ncut, f in zip(graphs, res.labels, res.ncut, res.objective):
        assert ncut == pytest.approx(normalized_cut(W, y), rel=1e-12, abs=1e-12)
        assert f == pytest.approx(normalized_association(W, y), rel=1e-12)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_falcon_batch_warns_once_of_zero_degree_nodes_and_disconnected_graphs(
        backend):
    """falcon_batch left zero-degree nodes out of the solve and solved
    disconnected graphs without a word, where FalconNCut warns of both on
    each graph.  One warning of each kind names how many graphs and which
    (a batch of many graphs is not flooded with one per graph)."""
    pytest.importorskip("torch") if backend == "torch" else None
    from sklearn_falcon import falcon_batch

    rng = np.random.default_rng(0)
    graphs = []
    for b in range(5):
        A = rng.random((12, 12)) + 0.1
        A = A + A.T
        if b in (1, 3):  # zero-degree nodes (2, then 1)
            z = 2 if b == 1 else 1
            A[:z], A[:, :z] = 0.0, 0.0
        if b in (2, 4):  # two components
            A[:6, 6:], A[6:, :6] = 0.0, 0.0
        graphs.append(sp.csr_matrix(A) if b == 4 else A)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        res = falcon_batch(graphs, 2, affinity="precomputed", random_state=0,
                           backend=backend, device="cpu")
    messages = [str(w.message) for w in record if w.category is UserWarning]
    zero = [m for m in messages if "zero degree" in m]
    split = [m for m in messages if "not fully connected" in m]
    assert len(zero) == 1 and len(split) == 1, messages
    assert "3 node(s) of zero degree in 2 of the 5 graphs (graphs[1]: 2, " \
        "graphs[3]: 1)" in zero[0]
    assert "2 of the 5 affinity graphs are not fully connected (graphs[2]: 2 " \
        "components, graphs[4]: 2 components)" in split[0]
    assert all(len(y) == 12 for y in res.labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        falcon_batch(graphs[:1], 2, affinity="precomputed", random_state=0,
                     backend=backend, device="cpu")


@pytest.mark.filterwarnings("ignore:The affinity graph is not fully connected")
@pytest.mark.parametrize("error", [KeyboardInterrupt, MemoryError])
@pytest.mark.parametrize("n_new", [60, 80])
def test_a_refit_that_fails_keeps_the_previous_fit_whole(monkeypatch, error, n_new):
    # the affinity (and isolated_, n_features_in_) of the failed fit were kept
    # with the previous labels_: predict raised (other n) or mixed the two fits
    import sklearn_falcon._falcon as falcon

    X, _ = make_blobs(n_samples=60, centers=3, cluster_std=0.5, random_state=0)
    est = FalconNCut(n_clusters=3, random_state=0).fit(X)
    before = dict(vars(est))
    expected = est.predict(X)
    monkeypatch.setattr(falcon, "solve", lambda *a, **k: (_ for _ in ()).throw(error))
    X_new = make_blobs(n_samples=n_new, centers=3, n_features=4, random_state=1)[0]
    with pytest.raises(error):
        est.fit(X_new + 5.0)
    assert vars(est).keys() == before.keys()
    assert all(vars(est)[k] is v for k, v in before.items())
    np.testing.assert_array_equal(est.predict(X), expected)
    with pytest.raises(ValueError, match="n_clusters=3 must be <= n_samples=2"):
        est.fit(X_new[:2])  # validated, then refused: n_features_in_ was 4
    assert est.n_features_in_ == 2
    np.testing.assert_array_equal(est.predict(X), expected)


def test_a_first_fit_that_fails_leaves_the_estimator_unfitted():
    est = FalconNCut(n_clusters=3)
    with pytest.raises(ValueError, match="n_clusters=3 must be <= n_samples=2"):
        est.fit(np.eye(2))
    assert vars(est) == vars(FalconNCut(n_clusters=3))


@pytest.mark.filterwarnings("ignore:The affinity graph is not fully connected")
def test_labels_as_init_with_n_init_warn_that_one_start_runs(blobs):
    # as scikit-learn's KMeans with explicit centers: n_init was silently one
    X, _ = blobs
    y0 = FalconNCut(4, random_state=0).fit(X).labels_
    with pytest.warns(RuntimeWarning, match="one start.*n_init=3") as record:
        est = FalconNCut(4, init=y0, n_init=3).fit(X)
    assert [w.filename for w in record if w.category is RuntimeWarning] == [__file__]
    one = FalconNCut(4, init=y0).fit(X)
    np.testing.assert_array_equal(est.labels_, one.labels_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        FalconNCut(4, init=y0).fit(X)  # n_init=1: silent
        # a warm start is one start by its documentation: silent too
        FalconNCut(4, n_init=3, warm_start=True, random_state=0).fit(X).fit(X)


def test_callable_affinity_of_float32_is_the_precomputed_one():
    # a float32 affinity from a callable was made float64 and checked for
    # symmetry at float64's tolerance: one symmetric up to float32 rounding
    # (a GPU product) warned "is not symmetric" and was averaged, where the
    # same matrix, precomputed, was taken as it is, in float32
    X, _ = make_blobs(n_samples=120, centers=3, random_state=0)
    W = laplacian_kernel(X, gamma=0.5).astype(np.float32)
    upper = np.triu_indices(120, 1)
    W[upper] = np.nextafter(W[upper], np.float32(2))  # one ulp above W.T

    def kernel(A, B=None):
        return W if B is None else laplacian_kernel(A, B, gamma=0.5).astype(
            np.float32)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = FalconNCut(3, affinity=kernel, random_state=0).fit(X)
        ref = FalconNCut(3, affinity="precomputed", random_state=0).fit(W)
    assert est.affinity_matrix_.dtype == np.float32
    np.testing.assert_array_equal(est.affinity_matrix_, ref.affinity_matrix_)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    np.testing.assert_array_equal(est.predict(X[:7]),
                                  ref.predict(kernel(X[:7], X)))


def test_callable_affinity_of_integer_coo_duplicates_sums_them_without_wrapping():
    # a callable returning a COO matrix of uint8 weights with repeated entries
    # (300 parallel edges) had it converted with its duplicates summed in
    # uint8 (300 -> 44): ncut_ was not normalized_cut of what it returned
    rows, cols = [], []
    for a, b, m in [(0, 1, 300), (2, 3, 300), (1, 2, 1), (0, 3, 1)]:
        rows += [a, b] * m
        cols += [b, a] * m
    G = sp.coo_matrix((np.ones(len(rows), np.uint8), (rows, cols)), shape=(4, 4))
    W = np.zeros((4, 4))
    np.add.at(W, (rows, cols), 1.0)
    A = sp.coo_matrix((np.ones(600, np.uint8), ([0] * 300 + [1] * 300,
                                                [0] * 300 + [2] * 300)), shape=(2, 4))

    def graph(X, Y=None):
        return G if Y is None else A

    X = np.arange(4.0)[:, None]
    est = FalconNCut(2, affinity=graph, random_state=0).fit(X)
    np.testing.assert_array_equal(est.affinity_matrix_.toarray(), W)
    assert est.ncut_ == pytest.approx(normalized_cut(G, est.labels_), rel=1e-12)
    ref = FalconNCut(2, affinity="precomputed", random_state=0).fit(W)
    summed = np.array([[300.0, 0, 0, 0], [0, 0, 300, 0]])  # A, its duplicates summed
    np.testing.assert_array_equal(est.predict(X[:2]), ref.predict(summed))


def test_predict_searches_neighbours_on_its_own_n_jobs_and_cpus(monkeypatch, blobs):
    """The k-d tree's threads were fixed at fit, from the fitting machine's
    CPUs: a model fitted with ``n_jobs=-1`` on a large machine, loaded on a
    small one, queried on the large one's count, and ``set_params(n_jobs=)``
    after the fit was ignored by ``predict``'s and ``score``'s searches."""
    from sklearn_falcon import _jit

    if _jit.usable_cpus() < 2:
        pytest.skip("one usable CPU: nothing to limit")
    X = blobs[0]
    est = pickle.loads(pickle.dumps(FalconNCut(4, n_jobs=-1, random_state=0).fit(X)))
    seen, tree = [], est._affinity.nn_.tree

    class Spy:
        n = tree.n

        def query(self, *args, **kwargs):
            seen.append(kwargs["workers"])
            return tree.query(*args, **kwargs)

    est._affinity.nn_.tree = Spy()
    want = est.predict(X[:50])
    monkeypatch.setenv("LOKY_MAX_CPU_COUNT", "1")  # a machine of one CPU
    np.testing.assert_array_equal(est.predict(X[:50]), want)
    monkeypatch.delenv("LOKY_MAX_CPU_COUNT")
    est.set_params(n_jobs=None)
    np.testing.assert_array_equal(est.predict(X[:50]), want)
    est.score(X[:50])
    assert seen[0] == _jit.usable_cpus() and seen[1:3] == [1, 1]
    assert seen[3] == 1  # score's predict


def test_falcon_batch_warns_once_of_small_knn_graphs():
    """A batch of kNN graphs with no more samples than ``n_neighbors`` gave
    one warning per graph ("n_neighbors=10 >= n_samples=5", "...=6", ...:
    texts that differ are each given once); one warning names them, as of
    the batch's flat precomputed and disconnected graphs."""
    from sklearn_falcon import falcon_batch

    rng = np.random.default_rng(0)
    graphs = [rng.random((n, 3)) for n in (5, 6, 30, 9)]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        falcon_batch(graphs, 2, affinity="nearest_neighbors", n_neighbors=10,
                     random_state=0)
    msgs = [str(w.message) for w in rec if "neighbour of every" in str(w.message)]
    assert msgs == [
        "n_neighbors=10 >= n_samples in 3 of the 4 graphs (graphs[0]: 5 samples, "
        "graphs[1]: 6 samples, graphs[3]: 9 samples): every sample is a neighbour "
        "of every other, so each is complete with equal weights and every "
        "partition has the same NCut; their labels are arbitrary. Use fewer "
        "neighbours than samples."], msgs
    assert {w.filename for w in rec} == {__file__}


def test_falcon_batch_warns_of_small_precomputed_knn_graphs():
    """The batch's one warning of its kNN graphs of no more samples than
    ``n_neighbors`` dropped every per-graph warning, also those of
    ``affinity="precomputed_nearest_neighbors"`` (dense distances), whose
    graphs it then left unwarned; it names them as of "nearest_neighbors"."""
    from sklearn_falcon import falcon_batch

    rng = np.random.default_rng(0)
    X = [rng.random((n, 3)) for n in (5, 6, 30)]
    D = [np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1)) for x in X]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        falcon_batch(D, 2, affinity="precomputed_nearest_neighbors",
                     n_neighbors=10, random_state=0)
    msgs = [str(w.message) for w in rec if "neighbour of every" in str(w.message)]
    assert len(msgs) == 1 and msgs[0].startswith(
        "n_neighbors=10 >= n_samples in 2 of the 3 graphs (graphs[0]: 5 samples, "
        "graphs[1]: 6 samples)"), msgs
    # sparse distances: no warning, as FalconNCut gives none of them
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        falcon_batch([sp.csr_matrix(d) for d in D], 2,
                     affinity="precomputed_nearest_neighbors", n_neighbors=10,
                     random_state=0)
    assert not [w for w in rec if "neighbour of every" in str(w.message)]
