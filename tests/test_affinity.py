"""The affinities: the registry, the one definition of each formula, and the
checks of precomputed matrices."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from shared import random_graph as _graph
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.pairwise import cosine_similarity, rbf_kernel

from sklearn_falcon import FalconNCut
from sklearn_falcon._affinity import AFFINITIES, PRECOMPUTED, cosine_power_affinity
from sklearn_falcon._affinity import _check as nk
from sklearn_falcon._backends import BACKENDS


def test_constraints_and_precomputed_names_derive_from_the_registry():
    opts = FalconNCut._parameter_constraints["affinity"][0].options
    assert set(opts) == set(AFFINITIES)
    assert set(PRECOMPUTED) == {"precomputed", "precomputed_nearest_neighbors"}
    # a backend with matrix-free problems forms every matrix-free affinity
    matrix_free = {n for n, cls in AFFINITIES.items() if cls.matrix_free}
    assert matrix_free == {"cosine", "rbf"}
    assert any(spec.make_problem_from_features for spec in BACKENDS.values())
    torch = pytest.importorskip("torch")  # noqa: F841
    from sklearn_falcon._backends._torch._affinity import Affinity

    assert set(Affinity.KINDS) == matrix_free


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cosine_power_is_the_estimator_definition(dtype):
    X = np.random.default_rng(0).normal(size=(60, 5)).astype(dtype)
    W, lo, hi = cosine_power_affinity(X, 3.0)
    S = cosine_similarity(X)
    np.testing.assert_allclose(W, np.clip((S - lo) / (hi - lo), 0, 1) ** 3,
                               rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert W.dtype == dtype
    est = FalconNCut(3, affinity="cosine", power=3.0, random_state=0).fit(X)
    np.testing.assert_array_equal(est.affinity_matrix_, W)
    # new samples use the training range
    A = est._affinity.cross(X[:5])
    np.testing.assert_allclose(A, W[:5], rtol=1e-5)


def test_constant_similarities_give_all_ones():
    X = np.ones((6, 3))
    W, lo, hi = cosine_power_affinity(X, 2.0)
    np.testing.assert_array_equal(W, np.ones((6, 6)))


def test_rbf_is_sklearn_rbf_kernel():
    X = np.random.default_rng(1).normal(size=(40, 3))
    est = FalconNCut(3, affinity="rbf", gamma=0.3, random_state=0).fit(X)
    np.testing.assert_array_equal(est.affinity_matrix_, rbf_kernel(X, gamma=0.3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_self_products_by_row_blocks_agree(dtype, monkeypatch):
    # above SELF_PRODUCT_BLOCK rows the cosine and rbf self-products are made
    # of row blocks (NumPy's whole U @ U.T goes to an OpenBLAS syrk that
    # crashed at 16,384 float64 rows): the same matrices, to rounding
    from sklearn_falcon._affinity import _kinds

    X = np.random.default_rng(2).normal(size=(230, 7)).astype(dtype)
    S_lib, W_lib = _kinds.cosine_similarity(X), rbf_kernel(X, gamma=0.3)
    monkeypatch.setattr(_kinds, "SELF_PRODUCT_BLOCK", 64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(_kinds.cosine_similarity(X), S_lib, rtol=tol, atol=tol)
    est = FalconNCut(3, affinity="rbf", gamma=0.3, random_state=0).fit(X)
    np.testing.assert_allclose(est.affinity_matrix_, W_lib, rtol=tol, atol=tol)
    assert np.all(np.diag(est.affinity_matrix_) == 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_asymmetry_dense(dtype):
    W, _ = _graph(n=150, seed=4, dtype=dtype)  # more than two 64-wide tiles
    assert nk.max_asymmetry_dense(W) == 0.0
    A = W.copy()
    A[3, 140] += 0.25
    A[100, 7] -= 0.5
    assert nk.max_asymmetry_dense(A) == pytest.approx(np.abs(A - A.T).max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(6))
def test_max_asymmetry_csr_is_scipys(dtype, seed):
    # entries mirrored with equal and with other values, entries without a
    # mirror above and below the diagonal, a diagonal, empty rows: the
    # kernel's max |W - W'| (no transpose) is scipy's, exactly
    rng = np.random.default_rng(seed)
    n = 60
    A = sp.random(n, n, density=0.08, random_state=seed, dtype=np.float64)
    S = A + A.T
    S.data[rng.random(S.nnz) < 0.2] += rng.random()  # some mirrors differ
    S = S + sp.random(n, n, density=0.02, random_state=seed + 10)  # one-way
    S = S + sp.diags(rng.random(n))
    keep = np.ones(n)
    keep[rng.choice(n, 5, replace=False)] = 0.0  # empty rows and columns
    W = nk.clean_csr((sp.diags(keep) @ S @ sp.diags(keep)).astype(dtype))
    expected = float(abs(W - W.T).max())
    assert expected > 0
    assert nk.max_asymmetry_csr(W.indptr, W.indices, W.data) == expected
    Sym = nk.clean_csr(((W + W.T) / 2).astype(dtype))
    assert nk.max_asymmetry_csr(Sym.indptr, Sym.indices, Sym.data) == 0.0


@pytest.mark.parametrize("partner", [True, False])
def test_max_asymmetry_csr_sees_a_lone_entry_below_the_diagonal(partner):
    # (50, 10) has no mirror: a cursor passes over it when row 50 is
    # reached from a row after 10 (partner), or never reaches it
    pairs = [(20, 50), (60, 70)] if partner else [(60, 70)]
    rows = [i for i, j in pairs] + [j for i, j in pairs] + [50]
    cols = [j for i, j in pairs] + [i for i, j in pairs] + [10]
    vals = [1.0] * (2 * len(pairs)) + [5.0]
    W = nk.clean_csr(sp.csr_matrix((vals, (rows, cols)), shape=(80, 80)))
    assert nk.max_asymmetry_csr(W.indptr, W.indices, W.data) == 5.0


@pytest.mark.parametrize("seed", range(4))
def test_components_csr_are_scipys(seed):
    # an undirected count over the entries, whichever way they are stored
    from scipy.sparse.csgraph import connected_components

    rng = np.random.default_rng(seed)
    n = 300
    A = sp.random(n, n, density=0.004, random_state=seed, format="csr")
    A = A + sp.diags((rng.random(n) < 0.1).astype(float))  # self-loops
    Z = A.tocsr()
    Z.data[::3] = 0.0  # explicit zeros: edges to scipy too
    counts = []
    for W in (A.tocsr(), (A + A.T).tocsr(), sp.csr_matrix((n, n)), Z):
        expected, labels = connected_components(W, directed=False)
        assert nk.n_components_csr(W.indptr, W.indices) == expected
        for index in (np.int32, np.int64):  # the labels too, numbered alike
            count, got = nk.component_labels_csr(W.indptr.astype(index),
                                                 W.indices.astype(index))
            assert count == expected
            np.testing.assert_array_equal(got, labels)
        counts.append(expected)
    assert 1 < counts[0] < n and counts[2] == n and Z.nnz == A.nnz


def test_large_graph_checks_run_as_kernels(monkeypatch):
    # from CHECK_KERNEL_MIN stored entries (here every graph): the same
    # symmetrization, warning and component count as scipy's checks
    _, W = _graph(n=120, seed=2)
    A = W.tolil()
    A[3, 50] = 0.7  # asymmetric
    A = A.tocsr()
    out = []
    for kernel_min in (np.inf, 0):
        monkeypatch.setattr(nk, "CHECK_KERNEL_MIN", kernel_min)
        with pytest.warns(UserWarning, match="not symmetric.*0.7") as rec:
            S = nk.check_affinity(A)
        with pytest.warns(UserWarning, match="not fully connected") as rec2:
            nk.warn_if_disconnected(sp.block_diag([S, S]).tocsr(), 3)
        out.append((S, [str(r.message) for r in list(rec) + list(rec2)]))
    assert out[0][1] == out[1][1]
    np.testing.assert_array_equal(out[0][0].toarray(), out[1][0].toarray())


@pytest.mark.parametrize("n_features", [1, 2, 7, 15])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tree_neighbors_are_sklearns(n_features, dtype):
    # the kNN graph where scikit-learn would search its own k-d tree comes
    # from SciPy's: the same neighbours on samples without exact ties, in
    # fit and in predict, on one thread or several
    from sklearn.neighbors import NearestNeighbors

    from sklearn_falcon._affinity._kinds import _TreeNeighbors

    rng = np.random.default_rng(n_features)
    X = rng.normal(size=(400, n_features)).astype(dtype)
    X_new = rng.normal(size=(50, n_features)).astype(dtype)
    ref = NearestNeighbors(n_neighbors=10).fit(X)
    for n_jobs in (None, 2, -1):
        tree = _TreeNeighbors(X, 10, n_jobs=n_jobs)
        for Q in (X, X_new):
            got, want = tree.kneighbors_graph(Q), ref.kneighbors_graph(Q)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert (got != want).nnz == 0
    with pytest.raises(ValueError, match="mode='distance' is not supported"):
        tree.kneighbors_graph(X, mode="distance")


@pytest.mark.parametrize("case, tree", [
    ("dense, 15 features", True),
    ("dense, 16 features", False),  # scikit-learn's brute force
    ("sparse", False),
    ("n_neighbors >= n // 2", False),
])
def test_nearest_neighbors_affinity_searches_where_sklearn_would(case, tree):
    from sklearn.neighbors import NearestNeighbors

    from sklearn_falcon._affinity._kinds import (
        NearestNeighborsAffinity,
        _BruteNeighbors,
        _TreeNeighbors,
    )

    rng = np.random.default_rng(0)
    n, k = (40, 20) if case.startswith("n_neighbors") else (300, 10)
    X = rng.normal(size=(n, 16 if "16" in case else 15))
    if case == "sparse":
        X = sp.csr_matrix(np.where(X > 0.5, X, 0.0))
    aff = NearestNeighborsAffinity(n_neighbors=k)
    W = aff.fit(X)
    assert isinstance(aff.nn_, _TreeNeighbors) is tree
    assert isinstance(aff.nn_, _BruteNeighbors) is not tree
    C = NearestNeighbors(n_neighbors=k).fit(X).kneighbors_graph(X)
    assert abs(W - 0.5 * (C + C.T)).max() == 0
    assert (aff.cross(X[:7]) != C[:7]).nnz == 0


def test_a_small_knn_fit_does_not_import_sklearn_neighbors():
    # sklearn.neighbors costs about 50 ms to import, as much as the solve of
    # a small first fit
    import subprocess
    import sys

    code = ("import sys; from sklearn.datasets import make_blobs; "
            "from sklearn_falcon import FalconNCut; "
            "FalconNCut(3, random_state=0).fit(make_blobs(300, random_state=0)[0]); "
            "print('sklearn.neighbors' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.parametrize("affinity, what", [
    ("nearest_neighbors", "distances between the samples"),
    ("rbf", "distances between the samples"),
    ("cosine", "norms of the samples"),
])
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_samples_whose_distances_overflow_are_refused(affinity, what, backend):
    """Samples of 1e300: every squared distance is infinite.  SciPy's tree
    then reports the index n_train for its "missing" neighbours, which made
    an out-of-range CSR and aborted the process (glibc: "malloc(): invalid
    size"); scikit-learn's search returns arbitrary neighbours, the RBF
    kernel NaN or 0, the cosine zero rows (an NCut of K - 1, silently).
    Refused by name, in fit, predict and falcon_batch; 1e150 fits."""
    from sklearn_falcon import falcon_batch

    if backend == "torch":
        pytest.importorskip("torch")
    X = np.random.default_rng(0).normal(size=(200, 3))
    kw = dict(affinity=affinity, backend=backend, device="cpu")
    with pytest.raises(ValueError, match=rf"squared {what} of X can overflow "
                       r"float64: its values reach .*e\+300"):
        FalconNCut(3, **kw).fit(X * 1e300)
    est = FalconNCut(3, random_state=0, **kw).fit(X * 1e150)
    with pytest.raises(ValueError, match=f"squared {what}"):
        est.predict(X[:5] * 1e300)
    with pytest.raises(ValueError, match=rf"squared {what} of graphs\[1\]"):
        falcon_batch([X[:50], X[:50] * 1e300], 3, **kw)


def test_tree_never_returns_its_missing_neighbour_index():
    from sklearn_falcon._affinity._kinds import _TreeNeighbors

    X = np.random.default_rng(0).normal(size=(50, 2)) * 1e300
    with pytest.raises(ValueError, match="infinite distance"):
        _TreeNeighbors(X, 5).kneighbors_graph(X)


@pytest.mark.parametrize("affinity", ["nearest_neighbors",
                                      "precomputed_nearest_neighbors"])
def test_as_many_neighbours_as_samples_warns_of_a_complete_graph(affinity):
    # n_neighbors is clipped to n_samples, and then (self included) the kNN
    # graph is complete with equal weights: every partition has NCut K - 1
    X = np.random.default_rng(0).normal(size=(40, 3))
    if affinity == "precomputed_nearest_neighbors":
        X = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1))
    est = FalconNCut(3, affinity=affinity, n_neighbors=40, random_state=0)
    with pytest.warns(UserWarning, match=r"n_neighbors=40 >= n_samples=40.*"
                      r"complete") as record:
        est.fit(X)
    assert record[0].filename == __file__
    assert est.ncut_ == pytest.approx(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.set_params(n_neighbors=39).fit(X)
    assert est.ncut_ < 2.0


@pytest.mark.parametrize("fmt", [sp.csr_matrix, sp.csr_array, sp.coo_array])
def test_predict_takes_sparse_samples_after_a_dense_knn_fit(fmt):
    """A dense fit of a few features searches SciPy's k-d tree, which takes
    no sparse queries: predict and score of sparse samples raised "setting
    an array element with a sequence"; they are those of the dense ones."""
    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(40, 3)), rng.normal(size=(40, 3)) + 2]
    est = FalconNCut(2, random_state=0).fit(X)
    Q = np.where(np.abs(X[::3]) > 0.3, X[::3], 0.0)
    np.testing.assert_array_equal(est.predict(fmt(Q)), est.predict(Q))
    assert est.score(fmt(Q)) == est.score(Q)


def test_brute_force_knn_is_the_same_on_any_number_of_threads():
    # scikit-learn's brute force splits its work by its OpenMP threads and
    # keeps a different sample among equal distances for each split: the
    # digits' kNN graph had 24,053, 24,061, 24,059 and 24,055 entries on 1,
    # 2, 3 and 4 threads, so a fit's labels depended on the machine
    from sklearn.datasets import load_digits
    from threadpoolctl import threadpool_limits

    X = load_digits().data[:900]
    graphs, labels = [], []
    for n_threads in (1, 2, 3, 4):
        with threadpool_limits(limits=n_threads, user_api="openmp"):
            est = FalconNCut(10, random_state=0).fit(X)
        graphs.append(est.affinity_matrix_)
        labels.append(est.labels_)
    for W, y in zip(graphs[1:], labels[1:]):
        assert (W != graphs[0]).nnz == 0
        np.testing.assert_array_equal(y, labels[0])


@pytest.mark.parametrize("sparse", [False, True])
def test_brute_force_knn_takes_equal_distances_by_index(sparse):
    # duplicate samples, a lattice and one-hot codes of 20 features: many
    # equal distances, each row keeps the k nearest by (distance, index)
    from sklearn_falcon._affinity._kinds import _BruteNeighbors

    rng = np.random.default_rng(0)
    X = rng.integers(0, 2, size=(120, 16)).astype(np.float64)
    X = np.vstack([X, X[:30]])  # duplicates
    # one-hot codes of 4 variables of 5 values: hundreds of samples at each
    # distance, so the candidates are widened (4x, 16x, ...) more than once
    codes = rng.integers(0, 5, size=(400, 4)) + 5 * np.arange(4)
    X = np.vstack([np.hstack([X, np.zeros((150, 4))]),
                   np.eye(20)[codes].sum(axis=1)])
    Q = np.vstack([X[:10], X[-10:], rng.integers(0, 2, size=(5, 20))])
    k = 7
    nn = _BruteNeighbors(sp.csr_matrix(X) if sparse else X, k)
    got = nn.kneighbors_graph(sp.csr_matrix(Q) if sparse else Q)
    d2 = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    for i in range(Q.shape[0]):
        want = np.lexsort((np.arange(X.shape[0]), d2[i]))[:k]
        assert sorted(got[i].indices) == sorted(want)


@pytest.mark.parametrize("sparse", [False, True])
def test_brute_force_knn_searches_its_queries_in_blocks(sparse, monkeypatch):
    # every query's candidates, their distances and order were held at
    # once (and scikit-learn's sparse search of 20,000 queries took 2.1 GB,
    # 1.1 GB in blocks); the same graph, unsure queries of any block
    # widened (duplicates and one-hot codes: many equal distances)
    from sklearn_falcon._affinity import _neighbors
    from sklearn_falcon._affinity._kinds import _BruteNeighbors

    rng = np.random.default_rng(1)
    codes = rng.integers(0, 5, size=(300, 4)) + 5 * np.arange(4)
    X = np.eye(20)[codes].sum(axis=1)
    X = np.vstack([X, X[:40], rng.normal(size=(60, 20))])
    X = sp.csr_matrix(X) if sparse else X
    k = 6
    want = _BruteNeighbors(X, k).kneighbors_graph(X)
    sizes = []
    nearest = _BruteNeighbors._nearest

    def spy(self, Q, m):
        if m == 2 * k:  # (not the widened searches of unsure queries)
            sizes.append(Q.shape[0])
        return nearest(self, Q, m)

    monkeypatch.setattr(_BruteNeighbors, "_nearest", spy)
    monkeypatch.setattr(_neighbors, "_QUERY_BLOCK", 12 * 37, raising=False)
    got = _BruteNeighbors(X, k).kneighbors_graph(X)
    assert max(sizes) == 37 and sum(sizes) == X.shape[0]
    assert (got != want).nnz == 0
    D = X.toarray() if sparse else X
    d2 = ((D[:, None, :] - D[None, :, :]) ** 2).sum(-1)
    for i in range(0, D.shape[0], 7):
        want_i = np.lexsort((np.arange(D.shape[0]), d2[i]))[:k]
        assert sorted(got[i].indices) == sorted(want_i)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_brute_force_knn_distances_are_measured_in_small_blocks(dtype):
    # the candidates' differences were formed in blocks of 32 MB and squared
    # into a second one (with the gathered samples, about 100 MB at 20,000
    # samples of 64 features); the values are the same, pair by pair
    import tracemalloc

    from sklearn_falcon._affinity._kinds import _BruteNeighbors

    rng = np.random.default_rng(0)
    X = (10 * rng.standard_normal((4000, 64))).astype(dtype)
    cand = rng.integers(0, X.shape[0], size=(X.shape[0], 20))
    nn = _BruteNeighbors(X, 10)
    tracemalloc.start()
    try:
        d2 = nn._sq_distances(X, cand, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * d2.nbytes + (8 << 20)
    want = ((X[:, None, :].astype(np.float64) - X[cand]) ** 2).sum(-1)
    np.testing.assert_array_equal(d2, want)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_rbf_of_float32_samples_with_a_gamma_beyond_float32(backend):
    # scikit-learn's rbf_kernel multiplied the float32 squared distances by
    # -gamma rounded to float32, -inf: 0 * -inf = NaN on the diagonal, and
    # the fit said "The affinity matrix is all zeros" (the torch backend's
    # float32 rows too); predict gave NaN rows to duplicates of the samples
    if backend == "torch":
        torch = pytest.importorskip("torch")
        from sklearn_falcon._backends._torch._affinity import Affinity

        Xt = torch.tensor(np.eye(4, 3)[[0, 1, 2, 2]], dtype=torch.float32)[None]
        A = Affinity(Xt, torch.ones(1, 4, dtype=torch.bool), "rbf", gamma=1e40)
        W = A.dense()[0].numpy()
        assert W.dtype == np.float32
        np.testing.assert_array_equal(W, [[1, 0, 0, 0], [0, 1, 0, 0],
                                          [0, 0, 1, 1], [0, 0, 1, 1]])
    X = np.random.default_rng(0).normal(size=(12, 3)).astype(np.float32)
    X[1] = X[0]
    for gamma in (1e40, 1e300):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # not connected
            est = FalconNCut(3, affinity="rbf", gamma=gamma, backend=backend,
                             random_state=0).fit(X)
        W = est.affinity_matrix_
        assert W.dtype == np.float32
        expected = np.eye(12, dtype=np.float32)
        expected[0, 1] = expected[1, 0] = 1
        np.testing.assert_array_equal(W, expected)
        A = est._affinity.cross(X[:3])
        np.testing.assert_array_equal(A, expected[:3])
        np.testing.assert_array_equal(est.predict(X[1:3]), est.labels_[1:3])


@pytest.mark.parametrize("affinity, what", [
    ("nearest_neighbors", "distances between the samples"),
    ("rbf", "distances between the samples"),
    ("cosine", "norms of the samples"),
])
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_float32_samples_whose_distances_overflow_float32_are_refused(
        affinity, what, fmt):
    """float32 samples of 1e20: scikit-learn's float32 norms and distances
    overflow (float32 ends at 3.4e38), though float64's would not: the
    cosine took every row for a zero one (a flat W, silently), the sparse
    kNN search measured NaN distances and the RBF kernel was NaN or 0.
    Refused by name, with the advice to pass float64 (which fits)."""
    X = np.random.default_rng(0).normal(size=(60, 3))
    big = (X * 1e20).astype(np.float32)
    if fmt == "csr":
        big = sp.csr_matrix(big)
    kw = dict(affinity=affinity, gamma=1e-40, random_state=0)
    with pytest.raises(ValueError, match=rf"squared {what} of X can overflow "
                       r"float32: its values reach .*e\+20.*pass X as float64"):
        FalconNCut(3, **kw).fit(big)
    est = FalconNCut(3, **kw).fit(big.astype(np.float64))
    ref = FalconNCut(3, **dict(kw, gamma=1.0)).fit(
        sp.csr_matrix(X) if fmt == "csr" else X)
    assert adjusted_rand_score(est.labels_, ref.labels_) == 1.0  # same partition
    with pytest.raises(ValueError, match=f"squared {what}.*float32"):
        FalconNCut(3, **kw).fit(X.astype(np.float32)).predict(big[:5])


@pytest.mark.parametrize("dtype, scale", [(np.float64, 1e-170), (np.float32, 1e-25)])
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_samples_whose_squared_distances_underflow_are_refused_by_knn(
        dtype, scale, fmt):
    """Samples of 1e-170: every squared distance rounds to 0 (float32
    sparse samples of 1e-25 too, squared in float32), and the kNN graph was
    that of equal distances taken by index, silently. Refused by name; the
    graph inits of a matrix-free fit (start_graph) still take them."""
    from sklearn_falcon._affinity import start_graph

    X = np.random.default_rng(0).normal(size=(40, 3))
    tiny = (X * scale).astype(dtype)
    if fmt == "csr":
        tiny = sp.csr_matrix(tiny)
    with pytest.raises(ValueError, match=r"squared distances between the samples "
                       rf"of X underflow {np.dtype(dtype).name}: its values are at "
                       r"most .*e-(170|25)"):
        FalconNCut(3, random_state=0).fit(tiny)
    assert start_graph(tiny, 5).shape == (40, 40)
    FalconNCut(3, random_state=0).fit(np.zeros((10, 3)))  # all equal: exact
    FalconNCut(3, random_state=0).fit((X * 1e-100).astype(np.float64))


@pytest.mark.parametrize("sparse", [False, True])
def test_brute_force_knn_of_samples_with_an_outlier_stays_linear(sparse, monkeypatch):
    # the rounding margin of every query was set by the largest norm of all
    # samples: one outlier (1e8 among samples of norm 4) made every query
    # unsure of its candidates and searched all n samples for each, O(n^2):
    # 39 s instead of 0.2 s for 8,000 samples.  The same graph, exact.
    from sklearn_falcon._affinity._kinds import _BruteNeighbors

    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(size=(399, 20)), np.full((1, 20), 1e8)])
    calls = []
    nearest = _BruteNeighbors._nearest

    def spy(self, Q, m):
        calls.append((Q.shape[0], m))
        return nearest(self, Q, m)

    monkeypatch.setattr(_BruteNeighbors, "_nearest", spy)
    k = 7
    nn = _BruteNeighbors(sp.csr_matrix(X) if sparse else X, k)
    got = nn.kneighbors_graph(sp.csr_matrix(X) if sparse else X)
    assert calls[0] == (400, 2 * k)
    assert sum(rows for rows, _ in calls[1:]) <= 4  # (every query: 400)
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    for i in range(0, 400, 7):
        want = np.lexsort((np.arange(400), d2[i]))[:k]
        assert sorted(got[i].indices) == sorted(want)


@pytest.mark.parametrize("offset", [1e7, 12345678.0])
def test_brute_force_knn_of_samples_far_from_the_origin_stays_linear(
        offset, monkeypatch):
    # scikit-learn's distances ||q||^2 + ||x||^2 - 2 q.x round to about
    # eps ||x||^2: samples of spread 1 at 1e7 from the origin (coordinates,
    # timestamps) made every query unsure of its candidates, which searched
    # all samples for each (37 s instead of 0.2 s for 8,000 samples).  The
    # search is centred; the graph is the same, exact, ties by index.
    from sklearn_falcon._affinity._kinds import _BruteNeighbors

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 20))
    if offset != 1e7:  # a lattice: many equal distances
        X = rng.integers(0, 3, size=(400, 20)).astype(np.float64)
    X = X + offset
    calls = []
    nearest = _BruteNeighbors._nearest

    def spy(self, Q, m):
        calls.append(Q.shape[0])
        return nearest(self, Q, m)

    monkeypatch.setattr(_BruteNeighbors, "_nearest", spy)
    k = 7
    got = _BruteNeighbors(X, k).kneighbors_graph(X)
    if offset == 1e7:
        assert calls == [400]  # (every query was searched again)
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    for i in range(0, 400, 7):
        want = np.lexsort((np.arange(400), d2[i]))[:k]
        assert sorted(got[i].indices) == sorted(want)


def test_rbf_of_samples_far_from_the_origin_is_that_of_centred_ones():
    # rbf_kernel's squared distances ||x||^2 + ||y||^2 - 2 x.y round to
    # eps ||x||^2: samples of spread 1 at 1e7 from the origin had entries
    # off by 0.07 (at 1e8 by 1.0, garbage), in fit and predict, and the
    # torch backend's affinity_matrix_ was not the (centred) W it solved
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    ref = rbf_kernel(X - X.mean(axis=0), gamma=0.5)
    for offset in (1e7, 1e8):
        est = FalconNCut(3, affinity="rbf", gamma=0.5, random_state=0).fit(
            X + offset)
        np.testing.assert_allclose(est.affinity_matrix_, ref, atol=1e-12)
        np.testing.assert_allclose(est._affinity.cross(X[:7] + offset), ref[:7],
                                   atol=1e-12)
        np.testing.assert_allclose(
            est._affinity.cross(sp.csr_matrix(X[:7] + offset)), ref[:7], atol=1e-12)
