"""The backend-independent Falcon proximal loop.

The loop maximizes the normalized association ``f(X) = sum_k x_k' W x_k /
x_k' D x_k`` over one-hot label matrices ``X``.  Each iteration

1. computes the gradient score ``mu = 2 (W X) / vol - d assoc / vol**2``,
2. takes the proximal step with inertia ``x_i <- e_argmax(mu_i + tau x_i)``,
3. accepts it only when ``f(X+) >= f(X) + delta * tau / 2 * ||X+ - X||_F**2``;
   otherwise ``tau <- gamma * tau`` and the step is recomputed from ``X``.

A large ``tau`` moves nothing, so backtracking always terminates and ``f``
never decreases.  ``tau`` keeps its accepted value (see
:class:`SolverOptions.shrink_tau <sklearn_falcon._solver.SolverOptions>`).

Everything array-related is delegated to a problem object (the protocol of
:mod:`._protocol`, implemented by the backends): one graph on Numba, or a
batch of graphs on torch.  The loop itself handles only small per-graph
NumPy vectors, so the same code drives every backend and every batch size.

For one graph on the CPU that overhead (a dozen small calls an iteration)
outweighed the work: on 400-token graphs the loop took twice as long as its
kernels.  A problem that offers it (:meth:`Problem.compiled_graph`) is
therefore solved by the same loop compiled with Numba
(:mod:`._compiled`); both loops take their decisions from :mod:`._rules`,
and ``tests/test_solver.py`` checks that they give the same labels, path,
iteration and backtrack counts, bit for bit.
"""

import time
from dataclasses import dataclass, field

import numpy as np

from .._log import log_stage
from . import _compiled
from ._options import SolverOptions
from ._rules import accept, next_tau, score_scale, stop

_accept = accept.py_func
_stop = stop.py_func
_next_tau = next_tau.py_func


@dataclass
class SolveResult:
    """Outcome of :func:`solve` for a batch of ``B`` graphs."""

    labels: np.ndarray  # (B, n) int64
    objective: np.ndarray  # (B,) final f
    objective_path: list  # B arrays of f, starting at the initial labels
    n_iter: np.ndarray  # (B,) proximal iterations run (the last may move nothing)
    n_backtracks: np.ndarray  # (B,) rejected trial steps
    n_polish: np.ndarray  # (B,) local-move sweeps that moved a node
    converged: np.ndarray  # (B,) bool
    tau: np.ndarray = field(default=None)  # (B,) final tau (score units)


def solve(problem, labels, options=None):
    """Run Falcon's monotone proximal-gradient loop from ``labels``.

    Parameters
    ----------
    problem : Problem
        A problem object from :func:`sklearn_falcon._backends.make_problem`
        (or a batched torch problem).
    labels : array-like of shape (n,) or (B, n)
        Initial labels; every cluster must be non-empty.
    options : SolverOptions, default=None
        The solver settings (defaults when None).

    Returns
    -------
    SolveResult

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backends import make_problem
    >>> from sklearn_falcon._solver import solve
    >>> W = np.kron(np.eye(2), np.ones((3, 3)))
    >>> res = solve(make_problem(W, 2), [0, 0, 1, 1, 1, 0])
    >>> res.labels[0].tolist(), float(res.objective[0])
    ([0, 0, 0, 1, 1, 1], 2.0)
    """
    opt = SolverOptions() if options is None else options
    P = problem
    B = P.n_graphs
    polish = bool(opt.polish) and P.supports_polish
    scale = score_scale(P.host_degrees, P.n_clusters)
    tau0 = np.broadcast_to(np.asarray(opt.tau, dtype=np.float64), (B,)) * scale
    graph = P.compiled_graph() if opt.compiled and not opt.verbose else None
    if graph is not None:
        out = _compiled.run(graph, labels, P.n_clusters, float(tau0[0]), opt, polish)
        labels, f, path, n_iter, n_back, n_polish, converged, tau_end = out
        return SolveResult(
            labels=labels.reshape(1, -1),
            objective=np.array([f]),
            objective_path=[path],
            n_iter=np.array([n_iter], dtype=np.int64),
            n_backtracks=np.array([n_back], dtype=np.int64),
            n_polish=np.array([n_polish], dtype=np.int64),
            converged=np.array([converged]),
            tau=np.array([tau_end / scale[0]]),
        )
    t_start = time.perf_counter()
    X = P.from_labels(labels)
    WX = P.weights(X)
    vol, assoc = P.stats(WX, X)
    f = P.objective(vol, assoc)
    tau_cur = tau0.copy()
    active = np.ones(B, dtype=bool)
    converged = np.zeros(B, dtype=bool)
    n_iter = np.zeros(B, dtype=np.int64)
    n_back = np.zeros(B, dtype=np.int64)
    paths = [[float(v)] for v in f]

    for it in range(opt.max_iter):
        if not active.any():
            break
        pending = active.copy()
        trial_tau = tau_cur.copy()
        acc_X, acc_vol, acc_assoc = X, vol, assoc
        acc_f = f.copy()
        acc_moved = np.zeros(B, dtype=np.int64)
        for _ in range(opt.max_backtrack):
            # graphs that are not pending get tau = inf: they move nothing, so
            # a batched problem spends no work on converged graphs
            step_tau = np.where(pending, trial_tau, np.inf)
            cand, moved = P.step(WX, vol, assoc, X, step_tau)
            moved = np.asarray(moved, dtype=np.int64)
            if np.any(moved[pending] > 0):
                # f of the candidate without forming its (n, K) weights
                cvol, cassoc = P.candidate_stats(WX, vol, assoc, X, cand)
                fc = P.objective(cvol, cassoc)
            else:
                cvol, cassoc, fc = vol, assoc, f
            ok = pending & _accept(moved, fc, f, opt.delta, trial_tau)
            if ok.any():
                acc_X = P.select(ok, cand, acc_X)
                acc_vol = P.select(ok, cvol, acc_vol)
                acc_assoc = P.select(ok, cassoc, acc_assoc)
                acc_f = np.where(ok, fc, acc_f)
                acc_moved = np.where(ok, moved, acc_moved)
            rejected = pending & ~ok
            n_back += rejected
            trial_tau = np.where(rejected, trial_tau * opt.gamma_backtrack, trial_tau)
            pending = rejected
            if not pending.any():
                break
        # graphs still pending after max_backtrack keep X (no move)
        gain = acc_f - f
        moved_any = acc_moved > 0
        n_iter += active
        if moved_any.any():
            WX = P.commit(WX, X, acc_X)  # graphs that did not move keep X
        X, vol, assoc = acc_X, acc_vol, acc_assoc
        for b in np.flatnonzero(active & moved_any):
            paths[b].append(float(acc_f[b]))
        done = active & _stop(acc_moved, gain, f, opt.tol)
        f = np.where(active, acc_f, f)
        converged |= done
        active &= ~done
        tau_cur = np.where(
            active, _next_tau(trial_tau, tau0, opt.gamma_backtrack, opt.shrink_tau),
            tau_cur)
        if opt.verbose:
            log_stage("solve", "iter %3d  f=%s  moved=%s  active=%d  tau=%s  %.2f s",
                      it + 1, np.array2string(f, precision=6), acc_moved.tolist(),
                      int(active.sum()), np.array2string(tau_cur / scale, precision=3),
                      time.perf_counter() - t_start)

    n_polish = np.zeros(B, dtype=np.int64)
    if polish:
        live = np.ones(B, dtype=bool)
        for _ in range(opt.max_polish):
            moves = np.asarray(P.polish(X, WX, vol, assoc))
            live &= moves > 0
            if not live.any():
                break
            f_new = P.objective(vol, assoc)
            for b in np.flatnonzero(live):
                paths[b].append(float(f_new[b]))
            n_polish += live
            f = f_new
            if opt.verbose:
                log_stage("polish", "sweep %d  f=%s  moved=%s  %.2f s",
                          int(n_polish.max()), np.array2string(f, precision=6),
                          moves.tolist(),
                          time.perf_counter() - t_start)
        f = P.objective(vol, assoc)

    return SolveResult(
        labels=P.to_numpy(X),
        objective=np.asarray(f, dtype=np.float64),
        objective_path=[np.asarray(p) for p in paths],
        n_iter=n_iter,
        n_backtracks=n_back,
        n_polish=n_polish,
        converged=converged,
        tau=tau_cur / scale,
    )
