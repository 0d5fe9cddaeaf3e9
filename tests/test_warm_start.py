"""FalconNCut(warm_start=True): fit starts from the previous labels_."""

import logging

import numpy as np
import scipy.sparse as sp

from sklearn_falcon import FalconNCut


def _planted(n=300, k=4, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(k, size=n)
    P = np.where(y[:, None] == y[None, :], 0.3, 0.02)
    A = np.triu(rng.random((n, n)) < P, 1)
    W = (A | A.T).astype(np.float64)
    return W, y


def _messages(caplog):
    out = " ".join(r.getMessage() for r in caplog.records)
    caplog.clear()
    return out


def test_warm_start_starts_from_previous_labels(caplog):
    caplog.set_level(logging.INFO, logger="sklearn_falcon")
    W, _ = _planted()
    est = FalconNCut(4, affinity="precomputed", warm_start=True, random_state=0,
                     verbose=1)
    est.fit(W)
    assert "no previous fit" in _messages(caplog)
    first = est.labels_.copy()
    est.fit(W)
    assert "warm start from the previous labels_" in _messages(caplog)
    # already a local optimum: the solver stops at once and keeps the labels
    assert np.array_equal(est.labels_, first)
    assert est.n_iter_ <= 1
    assert est.objective_path_[0] == est.objective_path_[-1]


def test_warm_start_on_a_perturbed_graph_keeps_labels():
    W, y = _planted(seed=1)
    rng = np.random.default_rng(2)
    est = FalconNCut(4, affinity="precomputed", warm_start=True, random_state=0).fit(W)
    first = est.labels_.copy()
    U = sp.triu(sp.csr_matrix(W)).multiply(rng.uniform(0.9, 1.1, W.shape))
    W2 = (U + U.T).toarray()
    est.fit(W2)
    assert np.mean(est.labels_ == first) >= 0.95
    cold = FalconNCut(4, affinity="precomputed", random_state=0).fit(W2)
    assert est.ncut_ <= cold.ncut_ + 0.05


def test_warm_start_falls_back_when_the_shape_changes(caplog):
    caplog.set_level(logging.INFO, logger="sklearn_falcon")
    W, _ = _planted(n=120)
    est = FalconNCut(3, affinity="precomputed", warm_start=True, verbose=1,
                     random_state=0).fit(W)
    _messages(caplog)
    est.fit(W[:100, :100])
    assert "previous fit had 120 samples, not 100" in _messages(caplog)
    assert est.labels_.shape == (100,)
    est.set_params(n_clusters=2).fit(W[:100, :100])
    assert "n_clusters is now 2" in _messages(caplog)
    assert est.labels_.max() <= 1


def test_without_warm_start_fit_ignores_previous_labels():
    W, _ = _planted(seed=3)
    a = FalconNCut(4, affinity="precomputed", random_state=0).fit(W)
    b = FalconNCut(4, affinity="precomputed", random_state=0)
    b.labels_ = np.zeros(W.shape[0], dtype=np.int64)  # would be a poor start
    b.fit(W)
    assert np.array_equal(a.labels_, b.labels_)


def test_warm_start_with_more_clusters_runs_init(caplog):
    """A warm fit after ``set_params(n_clusters=...)`` with more clusters
    started from the previous labels plus single-node clusters, as the
    docstring says it does not (same number of clusters only): an NCut
    several times the cold fit's.  It now runs ``init``, saying why."""
    from sklearn.datasets import make_blobs

    caplog.set_level(logging.INFO, logger="sklearn_falcon")
    X, _ = make_blobs(600, centers=6, cluster_std=1.5, random_state=3)
    cold = FalconNCut(6, random_state=0).fit(X)
    est = FalconNCut(3, warm_start=True, random_state=0, verbose=1).fit(X)
    _messages(caplog)
    est.set_params(n_clusters=6).fit(X)
    assert "the previous fit had 3 clusters, n_clusters is now 6" in _messages(caplog)
    np.testing.assert_array_equal(est.labels_, cold.labels_)
    est.fit(X)  # the same number of clusters again: warm
    assert "warm start from the previous labels_" in _messages(caplog)


def test_warm_start_is_silent_without_verbose(caplog):
    """With ``verbose=0`` a warm fit logged its choice ("warm start from the
    previous labels_", or why not) to an application's INFO logging, though
    ``verbose=0`` is documented as silent whatever the logging set-up."""
    caplog.set_level(logging.INFO, logger="sklearn_falcon")
    W, _ = _planted(seed=1)
    est = FalconNCut(4, affinity="precomputed", warm_start=True, random_state=0)
    est.fit(W)
    est.fit(W)
    est.set_params(n_clusters=3).fit(W)
    assert _messages(caplog) == ""
