"""The decisions of the proximal loop, defined once.

Both loops call these: :func:`sklearn_falcon._solver.solve` (the Python
loop, vectorized over a batch of graphs) through ``.py_func`` on NumPy
arrays of shape ``(B,)``, and the compiled loop of
:mod:`sklearn_falcon._solver._compiled` as Numba functions on scalars.  The
bodies use only operators and ufuncs that mean the same on both, so the two
loops take the same decisions by construction.  The unit of ``tau``
(:func:`score_scale`) is defined here too.
"""

import numpy as np

from .._jit import jit


@jit(inline=True)
def accept(n_moved, f_trial, f, delta, tau):
    """Whether a trial step is accepted.

    ``f(X+) >= f(X) + delta * tau / 2 * ||X+ - X||_F**2``, where
    ``||X+ - X||_F**2 = 2 * n_moved``; a step that moves nothing is always
    accepted (it is how convergence is detected).
    """
    return (n_moved == 0) | (f_trial >= f + delta * tau * n_moved)


@jit(inline=True)
def stop(n_moved, gain, f, tol):
    """Whether a graph stops after an accepted iteration: no row moved, or the
    relative gain ``gain / |f|`` (``f`` before the iteration) fell below
    ``tol``."""
    return (n_moved == 0) | (gain / np.maximum(np.abs(f), 1e-300) < tol)


@jit(inline=True)
def next_tau(trial_tau, tau0, gamma, shrink):
    """``tau`` of the next iteration: the accepted one, or with ``shrink``
    that divided by ``gamma`` and floored at the initial ``tau0``."""
    if shrink:
        return np.maximum(trial_tau / gamma, tau0)
    return trial_tau


def score_scale(degrees, n_clusters):
    """Typical magnitude of a score, the unit of ``tau``, per graph.

    ``d_mean / vol_mean = K * d_mean / sum(d)`` (``d_mean`` over the nodes of
    nonzero degree), so that one ``tau`` suits graphs of every size.

    Parameters
    ----------
    degrees : list of ndarray
        Degrees of each graph of a batch.
    n_clusters : int

    Returns
    -------
    ndarray of shape (B,)
    """
    out = np.empty(len(degrees))
    for b, d in enumerate(degrees):
        total = float(d.sum())
        n_active = max(int(np.count_nonzero(d > 0)), 1)
        out[b] = n_clusters * (total / n_active) / total if total > 0 else 1.0
    return out
