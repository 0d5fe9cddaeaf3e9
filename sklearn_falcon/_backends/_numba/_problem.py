"""One graph on the CPU, solved with the Numba kernels."""

import numpy as np
import scipy.sparse as sp

from ..._jit import PARALLEL_MIN
from . import _kernels as nk
from . import _polish as npol

# Largest graph (stored entries: nnz, or n**2 when dense) solved by the
# compiled loop; see NumbaProblem.compiled_graph.  The same limit as the
# dense pass's parallel threshold, so that the compiled loop only ever needs
# the plain serial pass over a dense W.
COMPILED_LOOP_MAX_ENTRIES = nk._DENSE_PAR_MIN


class NumbaProblem:
    """One graph on the CPU, solved with the Numba kernels (the
    :class:`~sklearn_falcon._solver.Problem` protocol, ``B = 1``).

    Parameters
    ----------
    W : scipy CSR matrix or ndarray of shape (n, n)
        Symmetric nonnegative affinity (float32 or float64, kept as is).
    n_clusters : int
    degrees : ndarray of shape (n,), default=None
        Row sums of ``W``; computed when omitted.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backends._numba import NumbaProblem
    >>> P = NumbaProblem(np.eye(3), 2)
    >>> P.n_graphs, P.supports_polish
    (1, True)
    """

    n_graphs = 1
    supports_polish = True

    def __init__(self, W, n_clusters, degrees=None):
        self.n_clusters = int(n_clusters)
        if sp.issparse(W):
            W = W.tocsr()
            self.sparse = True
            self.indptr = W.indptr
            self.indices = W.indices
            self.data = W.data
        else:
            self.sparse = False
            self.W = np.ascontiguousarray(W)
        if degrees is None:
            degrees = np.asarray(W.sum(axis=1), dtype=np.float64).ravel()
        self.degrees = np.ascontiguousarray(degrees, dtype=np.float64)

    @property
    def host_degrees(self):
        return [self.degrees]

    # -- state -----------------------------------------------------------
    def from_labels(self, labels):
        return np.array(np.asarray(labels).reshape(-1), dtype=np.int64, order="C",
                        copy=True)

    def to_numpy(self, labels):
        return labels.reshape(1, -1).copy()

    def weights(self, labels):
        if self.sparse:
            return nk.cluster_weights_csr(
                self.indptr, self.indices, self.data, labels, self.n_clusters
            )
        return nk.cluster_weights_dense(self.W, labels, self.n_clusters)

    def stats(self, WX, labels):
        return nk.cluster_stats(WX, labels, self.degrees, self.n_clusters)

    def candidate_stats(self, WX, vol, assoc, old, new):
        """``(vol, assoc)`` of ``new`` without forming its ``WX``."""
        if self.sparse:
            return nk.candidate_stats_csr(self.indptr, self.indices, self.data,
                                          self.degrees, old, new, WX, vol, assoc)
        return nk.candidate_stats_dense(self.W, self.degrees, old, new, WX, vol,
                                        assoc)

    def commit(self, WX, old, new):
        """``WX`` of ``new``, updated in place (no (n, K) copy)."""
        if self.sparse:
            nk.apply_moves_csr(self.indptr, self.indices, self.data, old, new, WX)
        else:
            nk.apply_moves_dense(self.W, old, new, WX)
        return WX

    def objective(self, vol, assoc):
        return np.array([nk.objective(vol, assoc)])

    def step(self, WX, vol, assoc, labels, tau):
        new, moved = nk.proximal_step(
            WX, self.degrees, vol, assoc, labels, float(tau[0])
        )
        return new, np.array([moved])

    def select(self, mask, a, b):
        return a if bool(mask[0]) else b

    def polish(self, labels, WX, vol, assoc):
        """One exact local-move sweep, in place; returns moves per graph."""
        if self.sparse:
            m = npol.local_move_sweep_csr(
                self.indptr, self.indices, self.data, self.degrees, labels, WX,
                vol, assoc,
            )
        else:
            m = npol.local_move_sweep_dense(self.W, self.degrees, labels, WX, vol,
                                            assoc)
        return np.array([m])

    def compiled_graph(self):
        """The graph for the compiled loop (:mod:`sklearn_falcon._solver.
        _compiled`), or None.

        After the first pass over ``W``, an iteration only reads the rows of
        the nodes that move, so the Python loop's per-iteration overhead (a
        dozen small calls) outweighs the work even on fairly large graphs:
        the compiled loop, on serial kernels, made dense token fits 1.4x
        faster at 2,116 and 4,096 tokens (4.5M and 16.8M entries) than the
        Python loop on the parallel kernels.  It is offered while the
        per-step ``(n, K)`` work is below the parallel threshold and ``W``
        has at most ``COMPILED_LOOP_MAX_ENTRIES`` stored entries; larger
        problems keep the Python loop and the parallel kernels.
        """
        size = self.data.shape[0] if self.sparse else self.W.size
        n = self.degrees.shape[0]
        if n * self.n_clusters >= PARALLEL_MIN or size > COMPILED_LOOP_MAX_ENTRIES:
            return None
        if self.sparse:
            return None, self.indptr, self.indices, self.data, self.degrees
        return self.W, None, None, None, self.degrees
