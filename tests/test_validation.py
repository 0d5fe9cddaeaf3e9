"""Bad input: clear errors that name the parameter, and inputs never mutated."""

import re
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from shared import random_graph

from sklearn_falcon import FalconNCut


def _W(n=30, seed=0):
    return random_graph(n, seed=seed, density=1.0)[0]


def _fit_pre(W, **kw):
    return FalconNCut(n_clusters=kw.pop("n_clusters", 3), affinity="precomputed",
                      random_state=0, **kw).fit(W)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_inf_in_features_and_affinity(bad):
    X = np.random.default_rng(0).random((30, 3))
    X[3, 1] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        FalconNCut(3).fit(X)
    W = _W()
    W[2, 5] = W[5, 2] = bad
    with pytest.raises(ValueError, match="NaN|infinity"):
        _fit_pre(W)
    with pytest.raises(ValueError, match="NaN|infinity"):
        _fit_pre(sp.csr_matrix(W))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("affinity", ["nearest_neighbors", "rbf", "cosine",
                                      "precomputed"])
def test_nan_inf_under_assume_finite_are_named_not_called_overflow(bad, affinity):
    # scikit-learn skips its check under assume_finite=True; the range checks
    # after it said "can overflow ... its values reach nan. Scale X"
    import sklearn

    X = _W() if affinity == "precomputed" else np.random.default_rng(0).random((30, 3))
    good = X.copy()
    X[2, 1] = X[1, 2] = bad
    est = FalconNCut(3, affinity=affinity, random_state=0)
    with sklearn.config_context(assume_finite=True):
        with pytest.raises(ValueError, match="Input X contains NaN or infinity"):
            est.fit(X)
        est.fit(good)
        Y = good[:4].copy()
        Y[0, 0] = bad
        with pytest.raises(ValueError, match="NaN or infinity"):
            est.predict(Y)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("sparse", [False, True])
def test_nan_inf_distances_under_assume_finite_are_named(bad, sparse):
    # precomputed_nearest_neighbors had no check of its own: under
    # assume_finite=True a NaN distance failed with "could not broadcast input
    # array" (dense) or was taken silently (sparse, and infinity), in fit and
    # predict alike
    import sklearn

    rng = np.random.default_rng(0)
    P = rng.random((30, 3))
    good = np.sqrt(((P[:, None] - P[None]) ** 2).sum(-1))
    D = good.copy()
    D[2, 1] = D[1, 2] = bad
    as_input = sp.csr_matrix if sparse else np.asarray
    est = FalconNCut(3, affinity="precomputed_nearest_neighbors", random_state=0)
    with sklearn.config_context(assume_finite=True):
        with pytest.raises(ValueError, match="Input X contains NaN or infinity"):
            est.fit(as_input(D))
        est.fit(as_input(good))
        Y = good[:4].copy()
        Y[0, 5] = bad
        with pytest.raises(ValueError, match="Input X contains NaN or infinity"):
            est.predict(as_input(Y))


def test_negative_affinity():
    W = _W()
    W[0, 1] = W[1, 0] = -0.5
    with pytest.raises(ValueError, match="nonnegative.*-0.5"):
        _fit_pre(W)
    with pytest.raises(ValueError, match="nonnegative"):
        _fit_pre(sp.csr_matrix(W))


@pytest.mark.parametrize("dtype, top", [(np.float64, 1e307), (np.float32, 1e37)])
def test_affinity_whose_degrees_overflow_is_refused(dtype, top):
    """Degrees beyond the dtype's range would make the objective NaN (the
    labels garbage): refused by name, with the remedy; the fit and the
    metric alike.  Scaled down by 30, the same graph fits, with the labels
    of the unscaled one."""
    from sklearn_falcon import normalized_cut

    W = _W().astype(dtype)
    W *= dtype(top) / W.max()
    for fmt in (np.asarray, sp.csr_matrix):
        with pytest.raises(ValueError, match=r"degrees \(row sums\) of the "
                           r"affinity X overflow .*Divide X by its maximum"):
            _fit_pre(fmt(W))
        with pytest.raises(ValueError, match="affinity W overflow"):
            normalized_cut(fmt(W), np.arange(30) % 3)
    # the cross-affinity of predict and score too (their scores were NaN)
    est = _fit_pre(_W().astype(dtype))
    for fmt in (np.asarray, sp.csr_matrix):
        for method in (est.predict, est.score):
            with pytest.raises(ValueError, match="affinity X overflow"):
                method(fmt(W[:5]))
    small = _fit_pre(W / dtype(30))
    np.testing.assert_array_equal(small.labels_, _fit_pre(_W().astype(dtype)).labels_)


@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix])
def test_affinity_whose_total_degree_overflows_says_so(fmt):
    """Every degree of 5e307 is finite; only their total (the volume) passes
    float64's range.  The error said the degrees (row sums) overflowed and
    quoted the largest entry, 1e307, which sums to no overflow in a row: it
    now says that their total overflows and quotes the largest degree."""
    W = np.ones((10, 10)) - np.eye(10)
    W[:5, 5:] = W[5:, :5] = 0.0
    W[4, 5] = W[5, 4] = 1.0
    W *= 1e307
    assert np.all(np.isfinite(W.sum(axis=1)))
    with pytest.raises(ValueError, match=r"degrees \(row sums\) of the affinity "
                       r"X overflow float64 in their total .*largest degree is "
                       r"5e\+307.*Divide X by its maximum"):
        _fit_pre(fmt(W))
    # rows that overflow: the error alone, without NumPy's RuntimeWarning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"overflow float64: its largest "
                           r"entry is 1\.7e\+308"):
            _fit_pre(fmt(W * 17))


@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix])
@pytest.mark.parametrize("tiny", [1e-300, 5e-324])
def test_vanishing_affinities_fit_without_overflow(fmt, tiny):
    """Off-diagonal affinities of 1e-300 or subnormal (an RBF kernel of
    distant samples underflows): the start's graph distances and flow
    capacities stay finite; no RuntimeWarning, valid labels, NCut ~ 0."""
    import warnings

    n = 60
    W = np.eye(n) + tiny * (1 - np.eye(n))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        est = _fit_pre(fmt(W), n_clusters=4)
    assert np.bincount(est.labels_, minlength=4).min() > 0
    assert est.ncut_ < 1e-12


@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix])
@pytest.mark.parametrize("init", ["multilevel", "multilevel_fast", "random"])
def test_subnormal_affinity_gives_the_labels_of_the_same_graph_scaled(fmt, init):
    """Integer weights times 5e-324 (exact: the degrees are subnormal too):
    1 / d overflowed in the multilevel start's matching (ties everywhere)
    and 1 / vol in the solver's scores, so the labels differed from those of
    the same graph of integer weights (NCut 2.96 against 2.75 at K = 8).
    The NCut does not depend on the scale of W; the reported volumes stay
    those of the input."""
    A = sp.random(300, 300, density=0.02, random_state=0, format="csr")
    A.data = np.ceil(A.data * 8)
    G = sp.triu(A)
    G = (G + G.T).toarray()
    assert np.array_equal(G * 5e-324 / 5e-324, G)  # exact
    G, tiny = fmt(G), fmt(G * 5e-324)

    def fit(W):
        return FalconNCut(8, affinity="precomputed", init=init,
                          random_state=0).fit(W)

    ref, got = fit(G), fit(tiny)
    np.testing.assert_array_equal(got.labels_, ref.labels_)
    np.testing.assert_array_equal(got.objective_path_, ref.objective_path_)
    np.testing.assert_array_equal(got.cluster_volumes_ / 5e-324,
                                  ref.cluster_volumes_)


@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix])
def test_predict_on_a_subnormal_affinity_gives_the_labels_of_the_scaled(fmt):
    """The fit scales a graph of subnormal degrees up, but predict scored
    with its volumes (``1 / vol`` overflowed): on the training rows 70 % of
    its labels differed from ``labels_`` (and from those of the same graph
    of integer weights), after a fit in memory or on Dask."""
    A = sp.random(300, 300, density=0.02, random_state=0, format="csr")
    A.data = np.ceil(A.data * 8)
    G = sp.triu(A)
    G = (G + G.T).toarray()
    G, tiny = fmt(G), fmt(G * 5e-324)
    ref = FalconNCut(8, affinity="precomputed", random_state=0).fit(G)
    got = FalconNCut(8, affinity="precomputed", random_state=0).fit(tiny)
    np.testing.assert_array_equal(got.predict(tiny), ref.predict(G))
    assert got.score(tiny) == pytest.approx(ref.score(G), rel=1e-12)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_falcon_batch_of_subnormal_graphs_gives_the_labels_of_the_scaled(backend):
    """As the estimator: ``falcon_batch`` solved a graph of subnormal
    degrees as it was (1 / d and 1 / vol overflowed), with other labels
    than the same graph of integer weights."""
    from sklearn_falcon import falcon_batch

    if backend == "torch":
        pytest.importorskip("torch")
    A = sp.random(300, 300, density=0.02, random_state=0, format="csr")
    A.data = np.ceil(A.data * 8)
    G = sp.triu(A)
    G = (G + G.T).tocsr()
    kw = dict(affinity="precomputed", random_state=0, backend=backend,
              device="cpu", dtype="float64")
    ref = falcon_batch([G, G], 8, **kw)
    got = falcon_batch([G, G * 5e-324], 8, **kw)
    np.testing.assert_array_equal(got.labels[1], ref.labels[1])
    assert got.ncut[1] == pytest.approx(ref.ncut[1], rel=1e-12)


def test_affinity_of_huge_and_tiny_weights_is_not_scaled_down():
    """Weights from 1e-267 to 1e294 (degrees up to 7.5e293): scaled down by
    a power of two, the smallest would be flushed to zero, and a node with
    a degree of its own would have none (an infinite spectral embedding).
    Only graphs of tiny degrees are scaled (up)."""
    from sklearn_falcon._affinity._check import unit_scaled

    rng = np.random.default_rng(60)
    A = sp.random(60, 60, density=0.05, random_state=60, format="csr")
    A.data = 10.0 ** rng.uniform(-267, 294, A.nnz)
    W = sp.triu(A)
    W = (W + W.T).toarray()
    d = W.sum(1)
    assert unit_scaled(W, d)[0] is W
    y = _fit_pre(W, n_clusters=8, init="spectral").labels_
    assert np.unique(y).size == 8


def test_rbf_affinity_that_underflows_still_fits():
    """Digits with the default RBF gamma: off-diagonal affinities of at most
    7e-13, most of them 0 or subnormal.  It raised "Probabilities contain
    NaN" in the multilevel start (squared graph distances overflowed)."""
    import warnings

    from sklearn.datasets import load_digits

    X = load_digits().data[:400]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        y = FalconNCut(10, affinity="rbf", random_state=0).fit_predict(X)
    assert np.bincount(y, minlength=10).min() > 0


def test_non_square_affinity():
    with pytest.raises(ValueError, match=r"square.*shape=\(30, 20\)"):
        _fit_pre(_W()[:, :20])


@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix])
def test_non_square_distance_matrix(fmt):
    # affinity="precomputed_nearest_neighbors" with a non-square matrix
    # raised SciPy's "inconsistent shapes" (sparse) or scikit-learn's
    # "Precomputed matrix must be square" (dense), naming neither the
    # affinity nor X
    D = np.random.default_rng(0).random((30, 20))
    est = FalconNCut(3, affinity="precomputed_nearest_neighbors", random_state=0)
    with pytest.raises(ValueError, match=r"affinity='precomputed_nearest_neighbors' "
                       r"expects a square .* distance matrix X; got "
                       r"shape=\(30, 20\)"):
        est.fit(fmt(D))


def test_asymmetric_affinity_is_symmetrized_with_warning():
    W = _W()
    W[0, 1] += 1.0
    W_before = W.copy()
    with pytest.warns(UserWarning, match="not symmetric"):
        est = _fit_pre(W)
    np.testing.assert_array_equal(W, W_before)  # the input is not mutated
    np.testing.assert_allclose(est.affinity_matrix_, (W + W.T) / 2)
    with pytest.warns(UserWarning, match="not symmetric"):
        est = _fit_pre(sp.csr_matrix(W))
    assert abs(est.affinity_matrix_ - est.affinity_matrix_.T).max() == 0


@pytest.mark.parametrize("scale", [1e-6, 1e-12, 1e-300])
@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix])
def test_asymmetric_affinity_of_small_scale_is_symmetrized(scale, fmt):
    # the symmetry tolerance was 1e-10 absolute for an affinity below 1: an
    # asymmetric W of entries below 1e-10 (W / 1e12, a tiny kernel) was
    # clustered as it was, without the warning and the symmetric part that
    # the same W at scale 1 gets (NCut 0.61 instead of 0.25 on a kNN graph
    # of 300 blobs), and normalized_cut scored the asymmetric W
    from sklearn.datasets import make_blobs
    from sklearn.neighbors import kneighbors_graph

    from sklearn_falcon import normalized_cut

    X, _ = make_blobs(150, centers=4, cluster_std=2.0, random_state=0)
    C = kneighbors_graph(X, 6, include_self=True).toarray() * scale
    with pytest.warns(UserWarning, match="not symmetric"):
        est = _fit_pre(fmt(C), n_clusters=4)
    W = est.affinity_matrix_
    W = W.toarray() if sp.issparse(W) else W
    np.testing.assert_array_equal(W, (C + C.T) * 0.5)
    with pytest.warns(UserWarning, match="W is not symmetric"):
        got = normalized_cut(fmt(C), est.labels_)
    assert got == pytest.approx(est.ncut_, rel=1e-9)


@pytest.mark.parametrize("K", [0, -1, 31])
def test_bad_n_clusters(K):
    match = "n_clusters" + (".*n_samples=30" if K > 0 else "")
    with pytest.raises(ValueError, match=match):
        _fit_pre(_W(), n_clusters=K)
    with pytest.raises(ValueError, match="n_clusters"):
        FalconNCut(n_clusters=K).fit(np.random.default_rng(0).random((30, 2)))


@pytest.mark.parametrize(
    "param, value",
    [("tau", 0), ("tau", -1.0), ("gamma_backtrack", 1.0), ("delta", -1),
     ("n_init", 0), ("max_iter", -1), ("affinity", "euclid"), ("backend", "jax"),
     ("init", "bogus"), ("power", 0), ("n_neighbors", 0), ("tol", -1e-3),
     ("n_jobs", 0)],
)
def test_bad_parameters_name_the_parameter(param, value):
    X = np.random.default_rng(0).random((30, 2))
    with pytest.raises(ValueError, match=f"'{param}' parameter"):
        FalconNCut(n_clusters=2, **{param: value}).fit(X)


def test_bad_device():
    X = np.random.default_rng(0).random((30, 2))
    with pytest.raises(ValueError, match="device="):
        FalconNCut(2, device="tpu").fit(X)
    with pytest.raises(ValueError, match="backend='numba' runs on the CPU"):
        FalconNCut(2, backend="numba", device="cuda").fit(X)


@pytest.mark.parametrize("device", ["cpu:0", "torch:cpu", "torch:cpu:0"])
def test_device_with_an_index_or_a_torch_device(device):
    """``device="cpu:0"`` and ``torch.device("cpu")`` (a torch user's
    habits) were refused by FalconNCut, falcon_batch and ImageSegmenter:
    "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'" and "The 'device'
    parameter of FalconNCut must be an instance of 'str'".  They run as
    ``"cpu"``; clone and get_params keep the value given."""
    from sklearn.base import clone
    from sklearn.datasets import make_blobs

    from sklearn_falcon import ImageSegmenter, falcon_batch

    if device.startswith("torch:"):
        torch = pytest.importorskip("torch")
        device = torch.device(device[6:])
    X = make_blobs(300, centers=3, random_state=0)[0]
    ref = FalconNCut(3, device="cpu", random_state=0).fit(X)
    est = FalconNCut(3, device=device, random_state=0).fit(X)
    np.testing.assert_array_equal(est.labels_, ref.labels_)
    assert est.score(X) == ref.score(X)
    assert clone(est).get_params()["device"] == device
    G = random_graph(60, seed=0)[1]
    np.testing.assert_array_equal(
        falcon_batch([G], 3, random_state=0, device=device).labels[0],
        falcon_batch([G], 3, random_state=0, device="cpu").labels[0])
    img = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    np.testing.assert_array_equal(
        ImageSegmenter(n_segments=2, device=device, random_state=0).segment(img),
        ImageSegmenter(n_segments=2, device="cpu", random_state=0).segment(img))


def test_bad_device_objects_name_the_parameter():
    X = np.random.default_rng(0).random((30, 2))
    with pytest.raises(ValueError, match="'device' parameter of FalconNCut must "
                       "be an instance of 'str' or a torch.device. Got 3"):
        FalconNCut(2, device=3).fit(X)
    with pytest.raises(ValueError, match="got device='cpu:x'"):
        FalconNCut(2, device="cpu:x").fit(X)
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"got device=device\(type='meta'\)"):
        FalconNCut(2, device=torch.device("meta")).fit(X)


def test_empty_and_single_sample():
    with pytest.raises(ValueError, match="0 sample"):
        FalconNCut(2).fit(np.empty((0, 3)))
    with pytest.raises(ValueError, match="1 sample"):
        FalconNCut(1).fit(np.ones((1, 3)))
    with pytest.raises(ValueError, match="0 feature"):
        FalconNCut(2).fit(np.empty((5, 0)))


def test_wrong_dimensions():
    with pytest.raises(ValueError, match="2D array"):
        FalconNCut(2).fit(np.ones(10))
    est = FalconNCut(2, random_state=0).fit(np.random.default_rng(0).random((30, 2)))
    with pytest.raises(ValueError, match="3 features"):
        est.predict(np.ones((4, 3)))


def test_all_zero_affinity():
    with pytest.raises(ValueError, match="all zeros"):
        _fit_pre(np.zeros((10, 10)))
    with pytest.raises(ValueError, match="all zeros"):
        _fit_pre(sp.csr_matrix((10, 10)))


def test_too_few_connected_nodes():
    W = np.zeros((10, 10))
    W[0, 1] = W[1, 0] = 1.0
    with pytest.raises(ValueError, match="Only 2 of 10 samples have a nonzero degree"):
        _fit_pre(W, n_clusters=3)


def test_object_complex_bool_dtypes():
    X = np.random.default_rng(0).random((30, 2))
    with pytest.raises(ValueError, match="could not convert|argument must be"):
        FalconNCut(2).fit(np.array([["a", "b"]] * 30, dtype=object))
    with pytest.raises(ValueError, match="Complex data not supported"):
        FalconNCut(2).fit(X + 1j)
    with pytest.raises(TypeError, match="dtype=bool"):
        FalconNCut(2).fit(X > 0.5)
    with pytest.raises(TypeError, match="dtype=bool"):
        _fit_pre(_W() > 1.0)
    with pytest.raises(TypeError, match="dtype=bool"):
        _fit_pre(sp.csr_matrix(_W() > 1.0))
    # object arrays that hold numbers are converted, as in scikit-learn
    FalconNCut(2, random_state=0).fit(X.astype(object))


def test_sparse_explicit_zeros_and_int64_indices_not_mutated():
    W = sp.csr_matrix(_W(40))
    W.data[W.data < 0.3] = 0.0  # explicit zeros, symmetric since W is
    W.indices = W.indices.astype(np.int64)
    W.indptr = W.indptr.astype(np.int64)
    data, indices, indptr = W.data.copy(), W.indices.copy(), W.indptr.copy()
    est = _fit_pre(W)
    A = est.affinity_matrix_
    assert A.indices.dtype == np.int32 and not np.any(A.data == 0)
    np.testing.assert_array_equal(W.data, data)
    np.testing.assert_array_equal(W.indices, indices)
    assert W.indices.dtype == np.int64 and W.nnz == data.size
    np.testing.assert_array_equal(W.indptr, indptr)
    ref = _fit_pre(sp.csr_matrix(W.toarray()))
    assert est.ncut_ == pytest.approx(ref.ncut_)


def test_inputs_never_mutated():
    X = np.random.default_rng(0).random((50, 3))
    X0 = X.copy()
    for aff in ("nearest_neighbors", "rbf", "cosine"):
        FalconNCut(3, affinity=aff, random_state=0).fit(X).predict(X)
        np.testing.assert_array_equal(X, X0)
    W = _W(50)
    W0 = W.copy()
    est = _fit_pre(W)
    est.predict(W[:5])
    np.testing.assert_array_equal(W, W0)
    assert est.affinity_matrix_ is not W


def test_init_array_errors():
    X = np.random.default_rng(0).random((30, 2))
    with pytest.raises(ValueError, match=r"shape \(n_samples,\)=\(30,\)"):
        FalconNCut(2, init=np.zeros(5, dtype=int)).fit(X)
    with pytest.raises(ValueError, match=r"\[0, n_clusters=2\)"):
        FalconNCut(2, init=np.full(30, 4)).fit(X)
    with pytest.raises(ValueError, match="init='kmeans' needs features"):
        _fit_pre(_W(), init="kmeans")


def test_falcon_batch_advises_the_inits_a_precomputed_batch_takes():
    """falcon_batch refused init='kmeans' on affinities with "use
    init='random' or pass initial labels": the graph starts ('multilevel',
    the estimator's default, and 'spectral') run on a precomputed batch
    too, and start closer to the optimum than random labels."""
    from sklearn_falcon import falcon_batch

    W = _W()
    with pytest.raises(ValueError, match="init='kmeans' needs features") as exc:
        falcon_batch([W], 2, affinity="precomputed", init="kmeans",
                     backend="numba")
    advised = re.findall(r"init='(\w+)'", str(exc.value).split(";")[1])
    assert {"multilevel", "spectral", "random"} <= set(advised), str(exc.value)
    for init in advised:
        falcon_batch([W], 2, affinity="precomputed", init=init, backend="numba")


@pytest.mark.parametrize("init", [
    np.array(["0", "1"] * 15),  # labels read from a text file
    np.array([0, 1] * 14 + [None, 1], dtype=object),
])
def test_init_array_of_strings_or_objects_is_named(init):
    """An init of string (or mixed object) labels raised numpy's
    UFuncTypeError from the message's ``min()``; it is refused by name."""
    from sklearn_falcon import falcon_batch

    X = np.random.default_rng(0).random((30, 2))
    with pytest.raises(ValueError, match=r"init labels must be integers in "
                       rf"\[0, n_clusters=2\); got dtype {init.dtype}"):
        FalconNCut(2, init=init).fit(X)
    with pytest.raises(ValueError, match=r"init\[0\] labels must be integers"):
        falcon_batch([X], 2, init=[init], backend="numba")


def test_predict_negative_cross_affinity():
    est = _fit_pre(_W())
    with pytest.raises(ValueError, match="nonnegative"):
        est.predict(-_W()[:3])


def test_warnings_point_at_the_users_call():
    """Each warning of the fit names the user's line, for fit and for
    fit_predict (scikit-learn's wrapper) alike; with a fixed stacklevel
    they pointed inside the package or at sklearn/base.py."""
    import warnings

    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(40, 2)), rng.normal(size=(40, 2)) + 100]
    W = _W()
    W[0, 1] += 1.0  # asymmetric
    Z = _W()
    Z[3, :] = Z[:, 3] = 0  # a zero-degree sample
    calls = [
        lambda: FalconNCut(2, random_state=0).fit(X),  # not connected
        lambda: FalconNCut(2, random_state=0).fit_predict(X),
        lambda: _fit_pre(W),
        lambda: _fit_pre(sp.csr_matrix(Z)),
    ]
    for call in calls:
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            call()
        user = [w for w in rec if issubclass(w.category, UserWarning)]
        assert user and all(w.filename == __file__ for w in user), [
            (w.filename, str(w.message)[:40]) for w in rec]


def test_warnings_of_a_grid_search_point_at_the_users_call():
    """The fits of a grid search run through joblib: their warnings were
    attributed to joblib/parallel.py, not to the user's ``search.fit``."""
    import warnings

    from sklearn.model_selection import GridSearchCV, KFold

    rng = np.random.default_rng(0)
    X = np.r_[rng.normal(size=(40, 2)), rng.normal(size=(40, 2)) + 100]
    search = GridSearchCV(FalconNCut(2, random_state=0), {"tau": [0.1]},
                          cv=KFold(2, shuffle=True, random_state=0))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        search.fit(X)
    user = [w for w in rec if issubclass(w.category, UserWarning)]
    assert len(user) >= 3 and all(w.filename == __file__ for w in user), [
        (w.filename, str(w.message)[:40]) for w in rec]


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("affinity, graph, kw", [
    ("rbf", np.arange(60.0).reshape(30, 2), {"gamma": 0}),  # every entry 1
    ("cosine", np.ones((30, 2)), {}),  # parallel rows: W all ones
    ("nearest_neighbors", np.arange(16.0).reshape(8, 2), {"n_neighbors": 10}),
])
def test_falcon_batch_warns_once_of_what_every_graph_shares(backend, affinity,
                                                           graph, kw):
    """A warning shared by the graphs of a batch is given once per call: the
    Numba backend gave one identical line per graph (scikit-learn's
    check_array resets the registry of the "default" filter between them),
    1000 lines for 1000 graphs, where the torch backend gave one."""
    from sklearn_falcon import falcon_batch

    if backend == "torch":
        pytest.importorskip("torch")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        falcon_batch([graph] * 4, 2, affinity=affinity, backend=backend,
                     device="cpu", max_iter=2, random_state=0, **kw)
    user = [str(w.message) for w in rec if issubclass(w.category, UserWarning)]
    assert len(user) == 1, user
    assert all(w.filename == __file__ for w in rec)


@pytest.mark.parametrize("bad", [np.zeros((0, 2)), np.zeros(2), np.zeros((5, 0)),
                                 [["a", "b"]] * 5])
def test_falcon_batch_names_the_graph_it_refuses(bad):
    """scikit-learn's messages for an empty, a 1-D, a featureless or a string
    graph name no input: in a batch of many, which one was refused was left
    to guess."""
    from sklearn_falcon import falcon_batch

    X = np.random.default_rng(0).random((20, 2))
    with pytest.raises(ValueError, match=r"graphs\[1\]"):
        falcon_batch([X, bad], 2, backend="numba")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0, "not square"])
def test_falcon_batch_names_the_distance_matrix_it_refuses(bad):
    # precomputed_nearest_neighbors checked its distances only in the
    # affinity's fit, which named "X" in a batch of graphs (a distance matrix
    # that is not square: until it was checked in the batch too)
    import sklearn

    from sklearn_falcon import falcon_batch

    P = np.random.default_rng(0).random((20, 2))
    D = np.sqrt(((P[:, None] - P[None]) ** 2).sum(-1))
    B = D.copy()
    if bad == "not square":
        B = B[:, :15]
    else:
        B[2, 1] = B[1, 2] = bad
    with sklearn.config_context(assume_finite=True):
        with pytest.raises(ValueError, match=r"graphs\[1\]"):
            falcon_batch([D, B], 2, affinity="precomputed_nearest_neighbors",
                         backend="numba")


def test_falcon_batch_checks_precomputed_distances_once(monkeypatch):
    # _check_graphs checked each graph's distances, and the affinity's fit
    # checked them again (2 ms of a 0.35 s batch of 200 graphs of 60 nodes)
    from sklearn_falcon import falcon_batch
    from sklearn_falcon._affinity import _kinds

    rng = np.random.default_rng(0)
    graphs = []
    for _ in range(3):
        P = rng.random((20, 2))
        graphs.append(np.sqrt(((P[:, None] - P[None]) ** 2).sum(-1)))
    calls = []
    check = _kinds.check_distances
    monkeypatch.setattr(_kinds, "check_distances",
                        lambda X, name="X": calls.append(name) or check(X, name))
    res = falcon_batch(graphs, 2, affinity="precomputed_nearest_neighbors",
                       n_neighbors=5, backend="numba", random_state=0)
    assert calls == ["graphs[0]", "graphs[1]", "graphs[2]"]
    assert [len(labels) for labels in res.labels] == [20, 20, 20]


def test_falcon_batch_says_why_it_refuses_graphs():
    """An empty list was refused as "must be a non-empty list ...; got
    list", and one graph (a 2-D array) as "...; got ndarray": neither said
    what was wrong."""
    from sklearn_falcon import falcon_batch

    X = np.random.default_rng(0).random((20, 2))
    with pytest.raises(ValueError, match=r"non-empty list .*; got an empty list\."):
        falcon_batch([], 2, backend="numba")
    with pytest.raises(ValueError, match=r"; got an empty tuple\."):
        falcon_batch((), 2, backend="numba")
    with pytest.raises(ValueError, match=r"got an array of shape \(20, 2\) "
                       r"\(one graph\? pass \[graph\]\)"):
        falcon_batch(X, 2, backend="numba")
    with pytest.raises(ValueError, match=r"got an array of shape \(2, 20, 2, 1\)\.$"):
        falcon_batch(np.stack([X, X])[..., None], 2, backend="numba")
    # an object array of graphs of several sizes (np.array(graphs, dtype=object))
    # is a sequence of graphs, as a list is
    ragged = np.empty(2, dtype=object)
    ragged[0], ragged[1] = X, X[:10]
    got = falcon_batch(ragged, 2, backend="numba", random_state=0)
    want = falcon_batch([X, X[:10]], 2, backend="numba", random_state=0)
    assert all(np.array_equal(a, b) for a, b in zip(got.labels, want.labels))


def test_falcon_batch_names_the_graph_smaller_than_n_clusters():
    """A graph of fewer nodes than ``n_clusters`` was refused with "the
    smallest has 1 nodes": which one, in a batch of many, was left to
    guess."""
    from sklearn_falcon import falcon_batch

    X = np.random.default_rng(0).random((20, 2))
    with pytest.raises(ValueError, match=r"n_clusters=3 must be <= the size of "
                       r"every graph; graphs\[2\] has n_samples=2\."):
        falcon_batch([X, X[:5], X[:2], X[:4]], 3, backend="numba")


def test_falcon_batch_refuses_what_falconncut_refuses():
    """A graph of one node was clustered (FalconNCut refuses one sample, as
    scikit-learn's clusterers do), and an all-zero graph was refused as
    "graphs[0] has 0 nodes of nonzero degree, fewer than n_clusters=1":
    n_clusters was not the fault; FalconNCut says that it is all zeros."""
    from sklearn_falcon import falcon_batch

    X = np.random.default_rng(0).random((20, 2))
    with pytest.raises(ValueError, match=r"graphs\[1\]: .*1 sample"):
        falcon_batch([X, X[:1]], 1, backend="numba")
    with pytest.raises(ValueError, match=r"graphs\[0\]: .*1 sample"):
        falcon_batch([np.ones((1, 1))], 1, affinity="precomputed", backend="numba")
    with pytest.raises(ValueError, match="1 sample"):
        FalconNCut(1, affinity="precomputed").fit(np.ones((1, 1)))
    for k in (1, 2):
        with pytest.raises(ValueError, match=r"^graphs\[1\] is all zeros: no node "
                           "has a nonzero degree, so the normalized cut is "
                           r"undefined\.$"):
            falcon_batch([np.ones((4, 4)), np.zeros((4, 4))], k,
                         affinity="precomputed", backend="numba")
    with pytest.raises(ValueError, match="all zeros: no sample has a nonzero"):
        FalconNCut(2, affinity="precomputed").fit(np.zeros((4, 4)))


def test_rbf_gamma_zero_warns_that_the_graph_is_flat():
    """gamma=0 (accepted, as by scikit-learn) makes every affinity 1: the
    labels are arbitrary, as with a kNN graph of n_neighbors >= n_samples,
    which warned where this said nothing."""
    from sklearn_falcon import falcon_batch

    X = np.random.default_rng(0).random((20, 2))
    for backend in ("auto", "numba"):
        with pytest.warns(UserWarning, match="gamma=0: every rbf affinity"):
            FalconNCut(2, affinity="rbf", gamma=0, backend=backend).fit(X)
        with pytest.warns(UserWarning, match="gamma=0: every rbf affinity"):
            falcon_batch([X, X], 2, affinity="rbf", gamma=0, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FalconNCut(2, affinity="rbf", gamma=0.5).fit(X)


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("gamma, scale", [(1e-20, 1.0), (1.0, 1e-12), (1.0, 0.0)])
def test_rbf_that_rounds_to_all_ones_warns_that_the_graph_is_flat(
        backend, gamma, scale):
    """A gamma too small for the samples' distances (or identical samples)
    rounds every rbf affinity to 1: the same complete graph of equal weights
    as gamma=0, where every labelling has the same NCut, but silently."""
    from sklearn_falcon import falcon_batch

    if backend == "torch":
        pytest.importorskip("torch")
    X = np.random.default_rng(0).random((20, 2)) * scale
    match = r"Every rbf affinity rounds to 1 \(gamma=.*labels are arbitrary"
    with pytest.warns(UserWarning, match=match):
        FalconNCut(2, affinity="rbf", gamma=gamma, backend=backend).fit(X)
    with pytest.warns(UserWarning, match=match):
        falcon_batch([X, X], 2, affinity="rbf", gamma=gamma, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FalconNCut(2, affinity="rbf", gamma=1e-3,
                   backend=backend).fit(X + np.eye(20, 2))


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("case", ["parallel", "zero_norm"])
def test_cosine_of_equal_similarities_warns_that_the_graph_is_flat(backend, case):
    """Samples whose cosine similarities are all equal (rows along one
    direction, or rows below the zero norm) give a ``W`` of all ones, where
    every labelling has the same NCut, as rbf with gamma=0 (which warned),
    but silently."""
    from sklearn_falcon import falcon_batch

    if backend == "torch":
        pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    X = (rng.random((20, 1)) + 0.5) * rng.normal(size=(1, 4))
    if case == "zero_norm":
        X = rng.normal(size=(20, 4)) * 1e-17
    match = r"Every cosine similarity of the samples is equal.*labels are arbitrary"
    with pytest.warns(UserWarning, match=match):
        FalconNCut(2, affinity="cosine", backend=backend).fit(X)
    with pytest.warns(UserWarning, match=match):
        falcon_batch([X, X[:10]], 2, affinity="cosine", backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FalconNCut(2, affinity="cosine", backend=backend).fit(
            rng.normal(size=(20, 4)))


@pytest.mark.parametrize("diagonal", [0.0, 0.5, 2.0])
@pytest.mark.parametrize("sparse", [False, True])
def test_a_precomputed_complete_graph_of_equal_weights_warns_that_it_is_flat(
        diagonal, sparse):
    """A precomputed (or callable) W whose off-diagonal weights are all
    equal (a threshold or a bandwidth too large for the distances: all
    ones) gives every partition the same NCut, as a flat rbf or cosine
    affinity, which warn; it was clustered silently into arbitrary labels."""
    n = 30
    W = np.full((n, n), 0.7)
    np.fill_diagonal(W, diagonal)
    X = sp.csr_matrix(W) if sparse else W
    match = r"Every off-diagonal affinity of X is equal \(0\.7\).*labels are " \
        "arbitrary"
    with pytest.warns(UserWarning, match=match):
        FalconNCut(3, affinity="precomputed").fit(X)
    with pytest.warns(UserWarning, match=r"of affinity\(X\) is equal"):
        FalconNCut(3, affinity=lambda A, B=None: W[:len(A), :len(A)]).fit(
            np.zeros((n, 2)))
    # equal degrees alone (a ring) are not flat, nor a diagonal that varies
    ring = np.roll(np.eye(n), 1, axis=1) + np.roll(np.eye(n), -1, axis=1)
    for G in (ring, W + np.diag(np.arange(n) * 1e-3)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            FalconNCut(2, affinity="precomputed", random_state=0).fit(
                sp.csr_matrix(G) if sparse else G)


@pytest.mark.parametrize("diagonal", [0.0, 0.7, 2.0])
def test_the_flat_warning_of_a_precomputed_graph_states_its_ncut(diagonal):
    """The warning of a precomputed complete graph of equal weights said
    that every partition has the NCut n_clusters - 1, which holds only
    where the diagonal equals the other weights (a flat rbf or cosine
    affinity); of an adjacency matrix of zero diagonal it is
    (n_clusters - 1) n / (n - 1), 2.069 for n = 30 and 3 clusters."""
    n, w = 30, 0.7
    W = np.full((n, n), w)
    np.fill_diagonal(W, diagonal)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        est = FalconNCut(3, affinity="precomputed", random_state=0).fit(W)
    said = [str(r.message) for r in rec if "off-diagonal" in str(r.message)]
    assert len(said) == 1, said
    factor = n * w / ((n - 1) * w + diagonal)  # NCut = (K - 1) n w / d
    assert est.ncut_ == pytest.approx(2 * factor, rel=1e-12)
    if diagonal == w:
        assert "the same NCut (n_clusters - 1);" in said[0], said
    else:
        assert f"the same NCut ((n_clusters - 1) x {factor:.6g});" in said[0], said


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_falcon_batch_warns_once_of_precomputed_graphs_that_are_flat(backend):
    """FalconNCut(affinity="precomputed") warns of a complete graph of equal
    weights (its labels are arbitrary); falcon_batch clustered such graphs
    silently.  One warning names them, as of zero-degree nodes."""
    if backend == "torch":
        pytest.importorskip("torch")
    from sklearn_falcon import falcon_batch

    n = 20
    flat = np.full((n, n), 0.7)
    np.fill_diagonal(flat, 0.0)
    ring = np.roll(np.eye(n), 1, axis=1) + np.roll(np.eye(n), -1, axis=1)
    graphs = [flat, ring, sp.csr_matrix(flat * 2 / 7 + np.eye(n)), ring]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        falcon_batch(graphs, 2, affinity="precomputed", random_state=0,
                     backend=backend, device="cpu")
    said = [str(w.message) for w in record if "off-diagonal" in str(w.message)]
    assert said == [
        "Every off-diagonal affinity of 2 of the 4 graphs is equal within its "
        "graph (graphs[0]: 0.7, graphs[2]: 0.2), so each is complete with equal "
        "weights and every partition has the same NCut; their labels are "
        "arbitrary. Check how the affinities were built (a threshold or a "
        "bandwidth too large for the distances?)."], said
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        falcon_batch(graphs[1::2], 2, affinity="precomputed", random_state=0,
                     backend=backend, device="cpu")


@pytest.mark.parametrize("dtype", ["float16", "bogus", 3, np.int32])
@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_falcon_batch_refuses_a_dtype_it_does_not_offer(dtype, backend):
    """falcon_batch's ``dtype`` was never validated: the Numba backend
    ignored "bogus", and the torch one raised NumPy's "data type 'bogus'
    not understood"; float32 and float64 by any name are taken."""
    from sklearn_falcon import falcon_batch

    if backend == "torch":
        pytest.importorskip("torch")
    X = np.random.default_rng(0).random((20, 2))
    kw = dict(backend=backend, device="cpu", random_state=0)
    with pytest.raises(ValueError, match=r"dtype must be None, 'float32' or "
                       rf"'float64'; got dtype={re.escape(repr(dtype))}\."):
        falcon_batch([X], 2, dtype=dtype, **kw)
    for ok in (None, "float32", np.float64):
        assert falcon_batch([X], 2, dtype=ok, **kw).labels[0].shape == (20,)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("affinity, sparse", [
    ("nearest_neighbors", False), ("nearest_neighbors", True),
    ("precomputed_nearest_neighbors", False)])
def test_n_neighbors_as_a_narrow_numpy_integer(dtype, affinity, sparse):
    """``n_neighbors=np.uint8(100)`` passes the parameter check, but the
    neighbour searches' arithmetic on it overflowed: "OverflowError: Python
    integer 4194304 out of bounds for uint8" in ``fit``, and an overflowing
    ``predict`` chunk size.  It is taken as a Python int: the same graph,
    labels and predictions as ``100``."""
    from sklearn.metrics import pairwise_distances

    from sklearn_falcon import falcon_batch

    X = np.random.default_rng(0).random((400, 3))
    if affinity.startswith("precomputed"):
        X = pairwise_distances(X)
    elif sparse:
        X = sp.csr_matrix(X)
    kw = dict(affinity=affinity, random_state=0, max_iter=5)
    ref = FalconNCut(3, n_neighbors=100, **kw).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's overflow
        est = FalconNCut(3, n_neighbors=dtype(100), **kw).fit(X)
        np.testing.assert_array_equal(est.labels_, ref.labels_)
        np.testing.assert_array_equal(est.predict(X[:50]), ref.predict(X[:50]))
        if affinity == "nearest_neighbors":
            got = falcon_batch([X], 3, n_neighbors=dtype(100), random_state=0)
            want = falcon_batch([X], 3, n_neighbors=100, random_state=0)
            np.testing.assert_array_equal(got.labels[0], want.labels[0])


def test_malformed_sparse_affinity_is_refused_not_read_out_of_bounds():
    """SciPy checks a CSR matrix's indices only in ``check_format(full_check=
    True)``: a column index past ``n`` (or negative, or an ``indptr`` that
    decreases or runs past the entries) reached the symmetry check and the
    kernels, a segmentation fault.  Each entry point refuses it by name."""
    import subprocess
    import sys

    code = r"""
import numpy as np, scipy.sparse as sp
from sklearn_falcon import FalconNCut, falcon_batch, normalized_cut
from sklearn_falcon.image import select_n_segments

def bad(case):
    indptr = np.array([0, 2, 4, 6, 8, 10, 12])
    indices = np.array([1, 2, 0, 2, 0, 1, 4, 5, 3, 5, 3, 4])
    if case == 0:
        indices[-1] = 60
    elif case == 1:
        indices[0] = -3
    elif case == 2:
        indptr[3] = 1
    W = sp.csr_matrix((np.ones(12), indices, indptr), shape=(6, 6))
    if case == 3:
        W.indptr[-1] = 40
    return W

good = bad(None)
est = FalconNCut(2, affinity="precomputed", random_state=0).fit(good)
calls = [
    lambda W: FalconNCut(2, affinity="precomputed").fit(W),
    lambda W: FalconNCut(2, affinity="precomputed_nearest_neighbors",
                         n_neighbors=2).fit(W),
    lambda W: normalized_cut(W, [0, 0, 0, 1, 1, 1]),
    lambda W: FalconNCut(2, affinity="cosine").fit(W),
    lambda W: falcon_batch([good, W], 2, affinity="precomputed", backend="numba"),
    lambda W: falcon_batch([good, W], 2, backend="numba"),
    lambda W: est.predict(W),
    lambda W: select_n_segments(W, np.arange(6)),
]
for case in range(4):
    for call in calls:
        try:
            call(bad(case))
        except ValueError as exc:
            assert "is malformed" in str(exc), exc
            print("refused")
        else:
            print("accepted")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["refused"] * 32, out.stdout
