import numpy as np
import pytest
import scipy.sparse as sp
from shared import parallel_edges, random_graph

from sklearn_falcon import normalized_cut
from sklearn_falcon.metrics import normalized_association


def naive_ncut(W, labels):
    W = np.asarray(W.toarray() if sp.issparse(W) else W, dtype=float)
    d = W.sum(1)
    total = 0.0
    for k in np.unique(labels):
        m = labels == k
        vol = d[m].sum()
        if vol == 0:
            continue
        cut = W[np.ix_(m, ~m)].sum()
        total += cut / vol
    return total


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fmt", ["dense", "csr", "csc", "coo"])
def test_normalized_cut_matches_naive(seed, fmt):
    rng = np.random.default_rng(seed)
    n, K = 40, 4
    W, _ = random_graph(n, seed=seed, density=0.3)
    labels = rng.integers(K, size=n)
    ref = naive_ncut(W, labels)
    Win = W if fmt == "dense" else getattr(sp, f"{fmt}_matrix")(W)
    assert normalized_cut(Win, labels) == pytest.approx(ref, rel=1e-12, abs=1e-12)
    assert normalized_association(Win, labels) == pytest.approx(
        len(np.unique(labels)) - ref, rel=1e-12
    )


def test_normalized_cut_label_values_and_float32():
    rng = np.random.default_rng(0)
    A = rng.random((20, 20)).astype(np.float32)
    W = A + A.T
    labels = rng.integers(3, size=20)
    # arbitrary label values: only the partition matters
    assert normalized_cut(W, labels * 7 + 3) == pytest.approx(
        naive_ncut(W, labels), rel=1e-5
    )


@pytest.mark.parametrize("fmt", [np.asarray, sp.csr_matrix])
def test_normalized_cut_of_float32_affinity_keeps_its_sign(fmt):
    # a float32 W's degrees are summed in float32, its associations in
    # float64: the NCut of the two blocks of a disconnected graph was -1.8e-8
    # (so ncut_ < 0 and a score > 0, outside the documented ranges)
    from sklearn_falcon import FalconNCut

    rng = np.random.default_rng(0)
    A = rng.random((20, 20)).astype(np.float32)
    W = fmt(np.kron(np.eye(2, dtype=np.float32), A + A.T))
    labels = np.repeat([0, 1], 20)
    assert 0.0 <= normalized_cut(W, labels) < 1e-7
    with pytest.warns(UserWarning, match="not fully connected"):
        est = FalconNCut(2, affinity="precomputed", random_state=0).fit(W)
    assert 0.0 <= est.ncut_ < 1e-7 and -1e-7 < est.score(W) <= 0.0


def test_normalized_cut_bounds_and_isolated():
    W = np.zeros((4, 4))
    W[0, 1] = W[1, 0] = 1.0
    # node 2, 3 isolated: their cluster has zero volume and contributes 0
    assert normalized_cut(W, [0, 0, 1, 1]) == 0.0
    assert normalized_cut(W, [0, 1, 2, 2]) == pytest.approx(2.0)


def test_normalized_association_is_k_minus_ncut_over_clusters_of_volume():
    """``f = K - NCut`` holds with ``K`` the clusters of nonzero volume (a
    cluster of only isolated nodes counts in neither sum): the docstring
    said ``K - NCut`` of every cluster, 1 more than ``f`` here."""
    import inspect

    W = np.zeros((5, 5))
    W[:2, :2] = W[2:4, 2:4] = 1.0
    W[1, 2] = W[2, 1] = 0.1
    labels = [0, 0, 1, 1, 2]  # node 4 isolated, alone in cluster 2
    f, ncut = normalized_association(W, labels), normalized_cut(W, labels)
    assert f + ncut == pytest.approx(2.0)
    doc = " ".join(inspect.getdoc(normalized_association).split())
    assert "with :math:`K` the clusters of nonzero volume" in doc


def test_normalized_cut_errors():
    with pytest.raises(ValueError, match="square"):
        normalized_cut(np.ones((3, 4)), [0, 1, 0])
    with pytest.raises(ValueError, match="labels must have shape"):
        normalized_cut(np.ones((3, 3)), [0, 1])
    with pytest.raises(ValueError, match="nonnegative"):
        normalized_cut(-np.ones((3, 3)), [0, 1, 0])
    with pytest.raises(ValueError, match="NaN|infinity"):
        normalized_cut(np.full((3, 3), np.nan), [0, 1, 0])
    with pytest.raises(ValueError, match="integers or strings; got dtype=object"):
        normalized_cut(np.ones((3, 3)), np.array([0, "a", None], dtype=object))
    with pytest.raises(ValueError, match="integers or strings; got dtype=complex"):
        normalized_cut(np.ones((3, 3)), np.array([0, 1, 0], dtype=complex))
    # a float label that is not a whole number is named (it said "labels
    # must be integers.", without the value or the dtype)
    for bad, shown in [(0.5, "0.5"), (np.nan, "nan"), (np.inf, "inf")]:
        with pytest.raises(ValueError, match=f"integers or strings; got the value "
                           f"{shown} of dtype=float64"):
            normalized_cut(np.ones((3, 3)), [0.0, bad, 1.0])


def test_normalized_cut_of_string_labels_is_that_of_their_partition():
    W, _ = random_graph(30, seed=2, density=0.3)
    y = np.random.default_rng(0).integers(3, size=30)
    names = np.array(["cat", "dog", "owl"])[y]
    assert normalized_cut(W, names) == normalized_cut(W, y)
    assert normalized_cut(W, names.tolist()) == normalized_cut(W, y)


def test_normalized_cut_of_object_labels_of_one_kind():
    """Labels in an object array (a pandas column of text, ``.to_numpy()``)
    were refused as "got dtype=object"; only strings, or only integers, are
    the partition they name.  Mixed objects are still refused."""
    W, _ = random_graph(30, seed=2, density=0.3)
    y = np.random.default_rng(0).integers(3, size=30)
    names = np.array(["cat", "dog", "owl"], dtype=object)[y]
    assert normalized_cut(W, names) == normalized_cut(W, y)
    assert normalized_association(W, names) == normalized_association(W, y)
    assert normalized_cut(W, y.astype(object)) == normalized_cut(W, y)
    with pytest.raises(ValueError, match="got dtype=object"):
        normalized_cut(W, np.where(y == 0, None, names))


@pytest.mark.parametrize("fmt", ["dense", "csr", "coo"])
@pytest.mark.parametrize("metric", [normalized_cut, normalized_association])
def test_asymmetric_affinity_counts_its_symmetric_part_as_in_the_fit(fmt, metric):
    """An asymmetric W gets the estimator's treatment: a warning that points
    at the caller, and the value of (W + W.T) / 2; W is not modified."""
    A = np.random.default_rng(0).random((12, 12))
    y = np.arange(12) % 3
    Win = A if fmt == "dense" else getattr(sp, f"{fmt}_matrix")(A)
    before = A.copy()
    with pytest.warns(UserWarning, match=r"W is not symmetric.*symmetric part") as rec:
        value = metric(Win, y)
    assert rec[0].filename == __file__
    assert value == pytest.approx(metric((A + A.T) / 2, y), rel=1e-12)
    np.testing.assert_array_equal(A, before)
    if fmt != "dense":
        np.testing.assert_array_equal(Win.toarray(), before)


def test_metrics_of_a_fortran_ordered_w_make_no_copy_of_it():
    """A Fortran-ordered dense ``W`` (a transpose, MATLAB's or an HDF5
    file's layout) was copied whole into C order by ``normalized_cut``,
    ``normalized_association`` and ``select_n_segments`` (3.2 GB at 20,000
    nodes), which promise no dense copy: its transpose, a view, is read."""
    import tracemalloc

    from sklearn_falcon.image import select_n_segments

    rng = np.random.default_rng(0)
    A = rng.random((600, 600))
    A = (A + A.T) / 2
    y = rng.integers(0, 5, 600)
    F = np.asfortranarray(A)
    calls = (normalized_cut, normalized_association,
             lambda W, y: select_n_segments(W, y)[0])
    for call in calls:
        ref = call(A, y)
        call(F, y)  # (compiles)
        tracemalloc.start()
        try:
            got = call(F, y)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert got == pytest.approx(ref, rel=1e-12)
        assert peak < F.nbytes / 4


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_metrics_check_a_sparse_w_symmetric_without_a_transpose(dtype):
    """The symmetry check of a CSR ``W`` below 1M stored entries formed
    ``W - W.T`` with scipy (a transpose and a difference: about 30 MB at
    900,000 entries, 3-4x the time of the kernel that larger graphs use);
    the result, and the warning of an asymmetric ``W``, are unchanged."""
    import tracemalloc

    from sklearn_falcon.image import select_n_segments

    rng = np.random.default_rng(0)
    n = 20_000
    r, c = rng.integers(0, n, (2, 10 * n))
    A = sp.csr_matrix((rng.random(r.size), (r, c)), shape=(n, n)).astype(dtype)
    W = (A + A.T).tocsr()
    y = rng.integers(0, 6, n)
    calls = (normalized_cut, normalized_association,
             lambda W, y: select_n_segments(W, y)[0])
    for call in calls:
        call(W, y)  # (compiles)
        tracemalloc.start()
        try:
            call(W, y)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 * W.nnz  # (the labels; scipy: 24-36 bytes an entry)
    B = W.tolil()
    B[3, 50] = B[50, 3] + 0.5
    S = B.tocsr()
    with pytest.warns(UserWarning, match=r"not symmetric \(max \|W - W.T\| = 0.5"):
        got = normalized_cut(S, y)
    assert got == normalized_cut(((S + S.T) * dtype(0.5)).tocsr(), y)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_integer_coo_duplicates_are_summed_in_float64_everywhere(dtype):
    # SciPy before 1.11 (the oldest versions job) summed a COO matrix's
    # duplicates in its own dtype in astype: 300 parallel edges of weight 1
    # weighed 44 in the metrics, select_n_segments and cluster_tokens
    from sklearn_falcon import ImageSegmenter
    from sklearn_falcon.image import select_n_segments

    _, _, G, W = parallel_edges(dtype)
    y = np.array([0, 0, 1, 1])
    assert normalized_cut(G, y) == normalized_cut(W, y)
    assert normalized_association(G, y) == normalized_association(W, y)
    (k, lab, rho), (k_ref, lab_ref, rho_ref) = (
        select_n_segments(A, y, min_segments=1) for A in (G, W))
    assert (k, rho) == (k_ref, rho_ref)
    np.testing.assert_array_equal(lab, lab_ref)
    seg = ImageSegmenter(n_segments=2, init="random", random_state=0)
    np.testing.assert_array_equal(seg.cluster_tokens(G), seg.cluster_tokens(W))
