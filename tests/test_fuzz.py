"""Property-based (hypothesis) fuzzing of FalconNCut on small random inputs.

Random small affinities (dense or sparse) and random small features (every
feature affinity), on both backends, with every initialization that applies.
Whatever the input, a fit must keep the invariants of the method:

* ``ncut_`` equals an independent NCut computation on ``affinity_matrix_``;
* ``objective_path_`` never decreases;
* there are ``n_clusters`` non-empty clusters;
* the input is never modified;
* the same seed gives the same labels.

The examples are derandomized (the same ones on every run), so a failure
reproduces; ``max_examples`` keeps the file to about a minute on two cores.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra.numpy import arrays  # noqa: E402

from sklearn_falcon import FalconNCut  # noqa: E402
from sklearn_falcon._backends._device import torch_available  # noqa: E402

BACKENDS = ["numba"] + (["torch"] if torch_available() else [])
FUZZ = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


def independent_ncut(W, labels):
    """NCut by its definition, with dense NumPy and nothing of the package."""
    W = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    d = W.sum(axis=1)
    total = 0.0
    for k in np.unique(labels):
        members = labels == k
        vol = d[members].sum()
        if vol > 0:
            total += (vol - W[np.ix_(members, members)].sum()) / vol
    return total


def check_invariants(est, X, y0=None):
    X_before = X.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # isolated/disconnected
        est.fit(X)
        again = clone(est).fit(X)
    # the input is never modified
    if sp.issparse(X):
        assert (X != X_before).nnz == 0
    else:
        np.testing.assert_array_equal(X, X_before)
    K = est.n_clusters
    labels = est.labels_
    # K non-empty clusters
    assert labels.shape == (X.shape[0],)
    assert np.array_equal(np.unique(labels), np.arange(K))
    # ncut_ is the NCut of labels_ on affinity_matrix_, computed independently
    W = est.affinity_matrix_
    assert est.ncut_ == pytest.approx(independent_ncut(W, labels), rel=1e-6,
                                      abs=1e-6)
    # the objective path never decreases
    path = est.objective_path_
    assert path.ndim == 1 and path.size >= 1
    assert np.all(np.diff(path) >= -1e-9 * np.maximum(1.0, np.abs(path[1:])))
    # the same seed gives the same labels
    np.testing.assert_array_equal(again.labels_, labels)


@st.composite
def affinities(draw):
    n = draw(st.integers(4, 24))
    K = draw(st.integers(2, min(4, n)))
    A = draw(arrays(np.float64, (n, n),
                    elements=st.floats(0, 1, allow_nan=False, width=32)))
    W = (A + A.T) / 2
    threshold = draw(st.sampled_from([0.0, 0.5, 0.8]))
    W[W < threshold] = 0.0
    W[np.diag_indices(n)] += 1e-3  # every sample has a degree
    if draw(st.booleans()):
        W = sp.csr_matrix(W)
    return W, K


@st.composite
def features(draw):
    n = draw(st.integers(5, 30))
    p = draw(st.integers(1, 4))
    K = draw(st.integers(2, min(4, n)))
    X = draw(arrays(np.float64, (n, p),
                    elements=st.floats(-10, 10, allow_nan=False, width=32)))
    if draw(st.booleans()):
        X = X.astype(np.float32)
    return X, K


@pytest.mark.parametrize("backend", BACKENDS)
@FUZZ
@given(data=affinities(), init=st.sampled_from(["multilevel", "spectral", "random"]),
       seed=st.integers(0, 2**16))
def test_fuzz_precomputed_affinities(backend, data, init, seed):
    W, K = data
    est = FalconNCut(K, affinity="precomputed", init=init, backend=backend,
                     device="cpu", random_state=seed)
    check_invariants(est, W)


@pytest.mark.parametrize("backend", BACKENDS)
@FUZZ
@given(data=features(),
       affinity=st.sampled_from(["nearest_neighbors", "rbf", "cosine"]),
       init=st.sampled_from(["multilevel", "multilevel_fast", "kmeans", "spectral",
                             "random"]),
       n_neighbors=st.integers(1, 8), power=st.sampled_from([1.0, 3.0]),
       seed=st.integers(0, 2**16))
def test_fuzz_features(backend, data, affinity, init, n_neighbors, power, seed):
    X, K = data
    est = FalconNCut(K, affinity=affinity, init=init, n_neighbors=n_neighbors,
                     gamma=0.1, power=power, backend=backend, device="cpu",
                     random_state=seed)
    try:
        check_invariants(est, X)
    except ValueError as exc:
        # the one refusal a valid input may meet: too few samples with an
        # affinity to any other sample (all-zero cosine rows, say)
        assert "have a nonzero degree" in str(exc) or "all zeros" in str(exc), exc
