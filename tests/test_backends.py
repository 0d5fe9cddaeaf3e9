"""Every backend against the NumPy references and against the Numba backend.

Parametrized over ``shared.BACKENDS``: a new backend is covered by adding it
there.  Only the problem protocol (NumPy in, NumPy out) is used, so the
tests do not depend on a backend's array type.
"""

import numpy as np
import pytest
from shared import BACKENDS, noisy, planted, tokens

from sklearn_falcon import FalconNCut, normalized_cut
from sklearn_falcon._affinity import cosine_power_affinity
from sklearn_falcon._backends import make_problem
from sklearn_falcon._solver import SolverOptions, solve


def _graph(kind):
    if kind == "csr":
        W, y = planted(400, 4, seed=1)
    else:
        X, y = tokens(300, 4, seed=2)
        W = cosine_power_affinity(X, 3.0)[0]
    return W, y


def _onehot(y, K):
    X = np.zeros((y.size, K))
    X[np.arange(y.size), y] = 1
    return X


def _reference_f(W, y, K):
    Wd = W.toarray() if hasattr(W, "toarray") else W
    X = _onehot(y, K)
    vol = X.T @ Wd.sum(1)
    assoc = np.einsum("ik,ik->k", X, Wd @ X)
    return float(np.sum(assoc / vol)), Wd @ X, vol, assoc


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["csr", "dense"])
def test_problem_operations_match_the_numpy_reference(backend, kind):
    name, device = backend
    K = 4
    W, y = _graph(kind)
    y0 = noisy(y, K, 0.5, seed=3)
    P = make_problem(W, K, backend=name, device=device)
    X = P.from_labels(y0)
    WX = P.weights(X)
    vol, assoc = P.stats(WX, X)
    f_ref, WX_ref, vol_ref, assoc_ref = _reference_f(W, y0, K)
    assert P.objective(vol, assoc)[0] == pytest.approx(f_ref, rel=1e-12)
    # the proximal step is the arg-max of the score with the inertia bonus
    d = WX_ref.sum(1)
    mu = 2 * WX_ref / vol_ref - d[:, None] * assoc_ref / vol_ref**2
    for tau in (0.0, 1e-3):
        cand, moved = P.step(WX, vol, assoc, X, np.array([tau]))
        bonus = mu + tau * _onehot(y0, K)
        ref = np.where(bonus.max(1) > bonus[np.arange(y0.size), y0],
                       bonus.argmax(1), y0)
        got = P.to_numpy(cand)[0]
        assert np.mean(got != ref) < 0.01  # exact ties only
        assert moved[0] == np.count_nonzero(got != y0) > 0
        # the candidate's objective without forming its weights
        cvol, cassoc = P.candidate_stats(WX, vol, assoc, X, cand)
        assert P.objective(cvol, cassoc)[0] == pytest.approx(
            _reference_f(W, got, K)[0], rel=1e-10)
    WX = P.commit(WX, X, cand)
    vol, assoc = P.stats(WX, cand)
    assert P.objective(vol, assoc)[0] == pytest.approx(_reference_f(W, got, K)[0],
                                                       rel=1e-10)
    # one exact local-move sweep, in place, never lowers f
    f0 = P.objective(vol, assoc)[0]
    assert P.supports_polish
    moves = P.polish(cand, WX, vol, assoc)
    lab = P.to_numpy(cand)[0]
    assert moves[0] > 0
    assert P.objective(vol, assoc)[0] == pytest.approx(_reference_f(W, lab, K)[0],
                                                       rel=1e-9)
    assert P.objective(vol, assoc)[0] > f0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["csr", "dense"])
@pytest.mark.parametrize("polish", [False, True])
def test_solve_matches_the_numba_backend(backend, kind, polish):
    name, device = backend
    W, y = _graph(kind)
    y0 = noisy(y, 4, 0.5, seed=5)
    opt = SolverOptions(polish=polish)
    ref = solve(make_problem(W, 4, backend="numba"), y0, opt)
    res = solve(make_problem(W, 4, backend=name, device=device), y0, opt)
    assert res.objective[0] == pytest.approx(ref.objective[0], abs=1e-9)
    assert normalized_cut(W, res.labels[0]) == pytest.approx(
        normalized_cut(W, ref.labels[0]), abs=1e-6)
    assert np.mean(res.labels != ref.labels) < 1e-3  # only exact ties may differ
    assert res.n_iter[0] == ref.n_iter[0] > 0
    assert np.all(np.diff(res.objective_path[0]) >= 0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("affinity", ["nearest_neighbors", "rbf", "cosine"])
def test_estimator_matches_the_numba_backend(backend, affinity):
    name, device = backend
    X, _ = tokens(300, 3, seed=8)
    # the same start on every backend: a matrix-free backend runs the graph
    # inits on the kNN graph of X (it holds no W), so for the dense
    # affinities the start is drawn from the features
    init = "multilevel" if affinity == "nearest_neighbors" else "kmeans"
    kw = dict(n_clusters=3, affinity=affinity, gamma=0.01, init=init, random_state=0)
    a = FalconNCut(backend="numba", **kw).fit(X)
    b = FalconNCut(backend=name, device=device, **kw).fit(X)
    assert b.backend_ == name
    assert b.ncut_ == pytest.approx(a.ncut_, abs=1e-6)
    assert b.ncut_ == pytest.approx(normalized_cut(b.affinity_matrix_, b.labels_),
                                    abs=1e-9)
    assert np.all(np.diff(b.objective_path_) >= 0)
