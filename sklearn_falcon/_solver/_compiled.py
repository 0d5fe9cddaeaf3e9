"""The proximal loop of :func:`sklearn_falcon._solver.solve`, compiled with
Numba for one graph on the Numba kernels.

Same steps, same decisions (the predicates of :mod:`._rules`), same polish,
hence the same labels and objective path as the Python loop (tested bit for
bit in ``tests/test_solver.py``).  It calls serial kernels only: they sum in
the same order as the parallel ones, so both loops give the same result, and
a cached serial function that calls a parallel one can crash when loaded
from Numba's cache (numba issue #8578).
:meth:`sklearn_falcon._backends._numba.NumbaProblem.compiled_graph` says on
which graphs it beats the Python loop on the parallel kernels.
"""

import numpy as np

from .._backends._numba import _csr as ncsr
from .._backends._numba import _kernels as nk
from .._backends._numba import _polish as npol
from .._jit import inlined, jit
from ._rules import accept, next_tau, stop

# the CSR steps, inlined: compiled once, into the loop (a first fit of 500
# points spent 0.3 s less in LLVM; the kernels stay for the Python loop)
_row_choices_i = inlined(ncsr._row_choices_ser)
_threshold_step_i = inlined(ncsr.threshold_step)
_candidate_stats_i = inlined(ncsr._candidate_stats_ser)
_local_move_sweep_csr_i = inlined(npol.local_move_sweep_csr)


@jit
def _falcon_loop(W, indptr, indices, data, degrees, labels, n_clusters, max_iter, tol,
                 tau0, gamma_backtrack, delta, polish, max_polish, max_backtrack,
                 shrink_tau):
    """The loop on the dense graph ``W``, or (``W`` None) on the CSR graph
    ``indptr``, ``indices``, ``data`` (None for a dense graph).

    Numba prunes the branches of the absent kind (``is not None`` on a None
    argument), so a fit compiles only its graph's kernels.  ``labels`` is
    copied; ``tau0`` is in absolute score units.
    """
    X = labels.copy()
    n = X.shape[0]
    if W is not None:
        WX = nk._cluster_weights_dense_ser(W, X, n_clusters)
        vol, assoc = nk.cluster_stats(WX, X, degrees, n_clusters)
    if indptr is not None:
        vol, assoc = ncsr._cluster_stats_csr_ser(indptr, indices, data, X, degrees,
                                                 n_clusters)
        best = np.empty_like(X)
        s_best = np.empty(n)
        s_own = np.empty(n)
        w_own = np.empty(n)
        w_best = np.empty(n)
    f = nk.objective(vol, assoc)
    path = np.empty(max_iter + max_polish + 1, dtype=np.float64)
    path[0] = f
    n_path = 1
    tau_cur = tau0
    n_iter = 0
    n_back = 0
    converged = False
    for _ in range(max_iter):
        trial_tau = tau_cur
        acc_X, acc_vol, acc_assoc, acc_f, acc_moved = X, vol, assoc, f, 0
        if indptr is not None:
            _row_choices_i(indptr, indices, data, X, degrees, vol, assoc, best,
                           s_best, s_own, w_own, w_best)
        for _b in range(max_backtrack):
            if W is not None:
                new = nk._argmax_with_inertia_ser(WX, degrees, vol, assoc, X,
                                                  trial_tau)
                cand, moved = nk._guard_empty(X, new, n_clusters)
            if indptr is not None:
                cand, moved = _threshold_step_i(best, s_best, s_own, X, trial_tau,
                                                n_clusters)
            if moved > 0:
                if W is not None:
                    cvol, cassoc = nk._candidate_stats_dense_ser(W, degrees, X, cand,
                                                                 WX, vol, assoc)
                if indptr is not None:
                    cvol, cassoc = _candidate_stats_i(
                        indptr, indices, data, degrees, X, cand, best, w_own, w_best,
                        vol, assoc)
                fc = nk.objective(cvol, cassoc)
            else:
                cvol, cassoc, fc = vol, assoc, f
            if accept(moved, fc, f, delta, trial_tau):
                acc_X, acc_vol, acc_assoc, acc_f, acc_moved = (cand, cvol, cassoc,
                                                               fc, moved)
                break
            n_back += 1
            trial_tau *= gamma_backtrack
        # still rejected after max_backtrack: X is kept (no move)
        gain = acc_f - f
        n_iter += 1
        if acc_moved > 0:
            if W is not None:
                nk._apply_moves_dense_ser(W, X, acc_X, WX)
            path[n_path] = acc_f
            n_path += 1
        X, vol, assoc = acc_X, acc_vol, acc_assoc
        done = stop(acc_moved, gain, f, tol)
        f = acc_f
        if done:
            converged = True
            break
        tau_cur = next_tau(trial_tau, tau0, gamma_backtrack, shrink_tau)
    n_polish = 0
    if polish:
        for _ in range(max_polish):
            if W is not None:
                m = npol.local_move_sweep_dense(W, degrees, X, WX, vol, assoc)
            if indptr is not None:
                m = _local_move_sweep_csr_i(indptr, indices, data, degrees, X,
                                            vol, assoc)
            if m == 0:
                break
            f = nk.objective(vol, assoc)
            path[n_path] = f
            n_path += 1
            n_polish += 1
        f = nk.objective(vol, assoc)
    return X, f, path[:n_path].copy(), n_iter, n_back, n_polish, converged, tau_cur


def run(graph, labels, n_clusters, tau0, options, polish):
    """Solve one graph with the compiled loop.

    Parameters
    ----------
    graph : tuple
        ``(W, indptr, indices, data, degrees)`` from
        :meth:`NumbaProblem.compiled_graph
        <sklearn_falcon._backends._numba.NumbaProblem.compiled_graph>`:
        ``W`` is the dense matrix, or None for a CSR graph.
    labels : array-like of shape (n,)
    n_clusters : int
    tau0 : float
        Initial ``tau`` in absolute score units.
    options : SolverOptions
    polish : bool

    Returns
    -------
    tuple
        ``(labels, f, objective_path, n_iter, n_backtracks, n_polish,
        converged, tau)``.
    """
    W, indptr, indices, data, degrees = graph
    # CSR: labels in the narrowest type, as the Python loop's (NumbaProblem)
    dtype = np.int64 if W is not None else ncsr.label_dtype(n_clusters)
    labels = np.ascontiguousarray(np.asarray(labels).reshape(-1), dtype=dtype)
    o = options
    out = _falcon_loop(W, indptr, indices, data, degrees, labels,
                       int(n_clusters), int(o.max_iter), float(o.tol), float(tau0),
                       float(o.gamma_backtrack), float(o.delta), bool(polish),
                       int(o.max_polish), int(o.max_backtrack), bool(o.shrink_tau))
    return (out[0].astype(np.int64),) + tuple(out[1:])
