"""The backend-independent Falcon proximal loop.

The loop maximizes the normalized association ``f(X) = sum_k x_k' W x_k /
x_k' D x_k`` over one-hot label matrices ``X``.  Each iteration

1. computes the gradient score ``mu = 2 (W X) / vol - d assoc / vol**2``,
2. takes the proximal step with inertia ``x_i <- e_argmax(mu_i + tau x_i)``,
3. accepts it only when ``f(X+) >= f(X) + delta * tau / 2 * ||X+ - X||_F**2``;
   otherwise ``tau <- gamma * tau`` and the step is recomputed from ``X``.

A large ``tau`` moves nothing, so backtracking always terminates and ``f``
never decreases.  ``tau`` keeps its accepted value: letting it shrink back by
``gamma`` after each accepted step (``shrink_tau=True``) reached the same
NCut on the benchmark graphs but cost up to 25x more rejected steps
(``benchmarks/bench_quality.py`` graphs, see the issue notes).

Everything array-related is delegated to a *problem* object from
:mod:`sklearn_falcon._backend` (one graph on Numba, or a batch of graphs on
torch); the loop itself handles only small per-graph NumPy vectors, so the
same code drives every backend and every batch size.

For one graph on the CPU that overhead (a dozen small calls an iteration)
outweighed the work: on 400-token graphs the loop took twice as long as its
kernels.  :class:`~sklearn_falcon._backend.NumbaProblem` therefore also
offers this loop compiled (``_kernels_numba.falcon_loop_*``, built from the
same kernels); :func:`solve` hands it the whole run, and
``tests/test_solver.py`` checks that both loops give the same labels, path,
iteration and backtrack counts, bit for bit.
"""

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp


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


def solve(
    problem,
    labels,
    *,
    max_iter=100,
    tol=1e-6,
    tau=0.01,
    gamma_backtrack=2.0,
    delta=1e-4,
    polish=True,
    max_polish=20,
    max_backtrack=64,
    shrink_tau=False,
    verbose=0,
    compiled=True,
):
    """Run Falcon's monotone proximal-gradient loop from ``labels``.

    Parameters
    ----------
    problem : problem object
        From :func:`sklearn_falcon._backend.make_problem` (or a batched torch
        problem).
    labels : array-like of shape (n,) or (B, n)
        Initial labels; every cluster must be non-empty.
    max_iter : int
        Maximum number of accepted proximal iterations.
    tol : float
        Stop a graph when its relative gain ``(f+ - f) / |f|`` falls below it.
    tau : float or array of shape (B,)
        Initial proximal parameter, in units of the typical score magnitude
        ``problem.score_scale`` (so the same value fits graphs of any size).
    gamma_backtrack : float > 1
        Factor applied to ``tau`` when a step is rejected.
    delta : float >= 0
        Sufficient-increase constant of the acceptance test.
    polish : bool
        Finish with sequential exact single-move sweeps (when the problem
        supports them); they never decrease ``f``.
    max_polish : int
        Maximum number of polishing sweeps.
    max_backtrack : int
        Safety bound on rejected steps per iteration.
    shrink_tau : bool
        After an accepted step, divide ``tau`` by ``gamma_backtrack`` (floored
        at its initial value); by default the accepted ``tau`` is kept.
    verbose : int
        Print one line per iteration when > 0.
    compiled : bool
        Let a problem that offers this loop compiled (``compiled_loop``: a
        :class:`~sklearn_falcon._backend.NumbaProblem` of at most
        ``COMPILED_LOOP_MAX_ENTRIES`` stored entries) run it in one call; it
        takes the same steps and gives the same result (tested).  The Python
        loop runs when False, when ``verbose > 0`` or when the problem offers
        none.

    Returns
    -------
    SolveResult
    """
    P = problem
    B = P.n_graphs
    loop = getattr(P, "compiled_loop", None) if compiled and not verbose else None
    if loop is not None:
        scale = float(np.asarray(P.score_scale, dtype=np.float64).reshape(-1)[0])
        tau0 = float(np.asarray(tau, dtype=np.float64).reshape(-1)[0]) * scale
        labels, f, path, n_iter, n_back, n_polish, converged, tau_end = loop(
            labels, tau0, max_iter=max_iter, tol=tol, gamma_backtrack=gamma_backtrack,
            delta=delta, polish=polish and hasattr(P, "polish"), max_polish=max_polish,
            max_backtrack=max_backtrack, shrink_tau=shrink_tau,
        )
        return SolveResult(
            labels=labels.reshape(1, -1),
            objective=np.array([f]),
            objective_path=[path],
            n_iter=np.array([n_iter], dtype=np.int64),
            n_backtracks=np.array([n_back], dtype=np.int64),
            n_polish=np.array([n_polish], dtype=np.int64),
            converged=np.array([converged]),
            tau=np.array([tau_end / scale]),
        )
    X = P.from_labels(labels)
    WX = P.weights(X)
    vol, assoc = P.stats(WX, X)
    f = P.objective(vol, assoc)
    scale = np.asarray(P.score_scale, dtype=np.float64)
    tau0 = np.broadcast_to(np.asarray(tau, dtype=np.float64), (B,)) * scale
    tau_cur = tau0.copy()
    active = np.ones(B, dtype=bool)
    converged = np.zeros(B, dtype=bool)
    n_iter = np.zeros(B, dtype=np.int64)
    n_back = np.zeros(B, dtype=np.int64)
    paths = [[float(v)] for v in f]

    for it in range(max_iter):
        if not active.any():
            break
        pending = active.copy()
        trial_tau = tau_cur.copy()
        acc_X, acc_vol, acc_assoc = X, vol, assoc
        acc_f = f.copy()
        acc_moved = np.zeros(B, dtype=np.int64)
        for _ in range(max_backtrack):
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
            # ||X+ - X||_F^2 = 2 * (number of moved rows)
            ok = pending & (
                (moved == 0) | (fc >= f + delta * trial_tau * moved)
            )
            if ok.any():
                acc_X = P.select(ok, cand, acc_X)
                acc_vol = P.select(ok, cvol, acc_vol)
                acc_assoc = P.select(ok, cassoc, acc_assoc)
                acc_f = np.where(ok, fc, acc_f)
                acc_moved = np.where(ok, moved, acc_moved)
            rejected = pending & ~ok
            n_back += rejected
            trial_tau = np.where(rejected, trial_tau * gamma_backtrack, trial_tau)
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
        rel = gain / np.maximum(np.abs(f), 1e-300)
        for b in np.flatnonzero(active & moved_any):
            paths[b].append(float(acc_f[b]))
        f = np.where(active, acc_f, f)
        done = active & (~moved_any | (rel < tol))
        converged |= done
        active &= ~done
        # the next iteration starts from the accepted tau (or, with
        # shrink_tau, from tau / gamma, floored at its initial value)
        if shrink_tau:
            tau_cur = np.where(
                active, np.maximum(trial_tau / gamma_backtrack, tau0), tau_cur
            )
        else:
            tau_cur = np.where(active, trial_tau, tau_cur)
        if verbose:
            print(
                f"[Falcon] iter {it + 1:3d}  f={np.array2string(f, precision=6)}"
                f"  moved={acc_moved.tolist()}  active={int(active.sum())}"
            )

    n_polish = np.zeros(B, dtype=np.int64)
    if polish and hasattr(P, "polish"):
        live = np.ones(B, dtype=bool)
        for _ in range(max_polish):
            moves = np.asarray(P.polish(X, WX, vol, assoc))
            live &= moves > 0
            if not live.any():
                break
            f_new = P.objective(vol, assoc)
            for b in np.flatnonzero(live):
                paths[b].append(float(f_new[b]))
            n_polish += live
            f = f_new
            if verbose:
                print(f"[Falcon] polish  f={np.array2string(f, precision=6)}")
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


def out_of_sample_labels(A, labels, vol, assoc):
    """Falcon's score for new rows: ``argmax_k 2 (A X)_k / vol_k - d assoc_k /
    vol_k**2``.

    Parameters
    ----------
    A : {ndarray, sparse matrix} of shape (n_new, n_train)
        Affinity of the new samples to the training samples.
    labels : ndarray of shape (n_train,)
        Training labels.
    vol, assoc : ndarray of shape (K,)
        Volumes and associations of the training clusters.

    Returns
    -------
    ndarray of shape (n_new,)
        Rows with no affinity to the training set get the cluster of largest
        volume.
    """
    K = vol.shape[0]
    n_train = labels.shape[0]
    onehot = sp.csr_matrix(
        (np.ones(n_train), (np.arange(n_train), labels)), shape=(n_train, K)
    )
    AX = A @ onehot
    AX = AX.toarray() if sp.issparse(AX) else np.asarray(AX, dtype=np.float64)
    d = np.asarray(A.sum(axis=1), dtype=np.float64).ravel()
    safe = np.where(vol > 0, vol, np.inf)
    mu = 2.0 * AX / safe - d[:, None] * (assoc / safe**2)
    mu[:, vol <= 0] = -np.inf
    out = np.argmax(mu, axis=1).astype(np.int64)
    out[d <= 0] = int(np.argmax(vol))
    return out
