"""The affinity graph of a fit's input: ``W`` and its degrees, or the
matrix-free problem that forms ``W`` in row blocks.

:meth:`FalconNCut.fit <sklearn_falcon.FalconNCut.fit>` calls
:func:`affinity_graph` on its validated input; the initial labels and the
solve follow in :mod:`sklearn_falcon._falcon`.
"""

import time

import numpy as np

from ._affinity import make_affinity, warn_if_flat_graph
from ._backends import BACKENDS, host_array
from ._log import log_stage
from ._stats import degrees_of

__all__ = ["affinity_graph"]


def affinity_graph(est, X, K, backend, device):
    """``(affinity, W, degrees, problem)``: the affinity of the parameters
    of ``est`` (a :class:`~sklearn_falcon.FalconNCut`), fitted on ``X``,
    its matrix ``W`` and its degrees.

    On the matrix-free path (a backend that forms this affinity in row
    blocks) ``W`` is None and ``problem`` is the backend's problem that
    forms it, on the samples of nonzero degree; otherwise ``problem`` is
    None (it is built on the graph of the connected samples).
    """
    affinity = make_affinity(est.affinity, n_neighbors=est.n_neighbors,
                             gamma=est.gamma, power=est.power, n_jobs=est.n_jobs,
                             to_host=host_array)
    spec = BACKENDS[backend]
    W, problem = None, None
    if spec.make_problem_from_features is not None and affinity.matrix_free:
        affinity.check_features(X)
        t0 = time.perf_counter()
        problem = spec.make_problem_from_features(
            X, K, affinity=est.affinity, power=est.power, gamma=est.gamma,
            device=device,
        )
        degrees = problem.degrees_numpy()[0]
        if est.verbose:
            n, p = X.shape
            log_stage("affinity", "matrix-free %s of %d samples on %s: its "
                      "degrees (a pass over all %.3g entries of W, %.3g flops) "
                      "took %.2f s; each iteration and polishing sweep costs "
                      "about one such pass",
                      est.affinity, n, device, float(n) * n, 2.0 * n * n * (p + K),
                      time.perf_counter() - t0)
        affinity.adopt(X, problem)
        if not np.all(degrees > 0):  # zero rows: the others' problem, same W
            problem = problem.restricted(degrees > 0)
    if problem is None:
        W = affinity.fit(X)
        degrees = degrees_of(W)
        if affinity.name in ("precomputed", "callable"):  # (the others warn)
            warn_if_flat_graph(W, degrees, "X" if affinity.precomputed else
                               "affinity(X)")
    return affinity, W, degrees, problem
