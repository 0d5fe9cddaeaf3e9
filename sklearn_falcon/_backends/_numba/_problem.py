"""One graph on the CPU, solved with the Numba kernels."""

import numpy as np
import scipy.sparse as sp

from ..._jit import PARALLEL_MIN
from . import _csr as ncsr
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
        self._choices = None  # CSR: the per-node arrays of :func:`_csr.row_choices`
        self._choices_of = None  # ... and the (state, labels, vol, assoc) they are of

    @property
    def host_degrees(self):
        return [self.degrees]

    # -- state -----------------------------------------------------------
    @property
    def label_dtype(self):
        """Labels are ``int64`` on a dense graph; on a CSR graph the narrowest
        type that holds ``K`` (the pass gathers them at random)."""
        return ncsr.label_dtype(self.n_clusters) if self.sparse else np.dtype(np.int64)

    def from_labels(self, labels):
        return np.array(np.asarray(labels).reshape(-1), dtype=self.label_dtype,
                        order="C", copy=True)

    def to_numpy(self, labels):
        return labels.reshape(1, -1).astype(np.int64)

    def weights(self, labels):
        """``WX = W @ onehot(labels)`` (dense), or for a CSR graph a
        :class:`CSRState`: the CSR iteration never forms ``WX``."""
        if self.sparse:
            return CSRState()
        return nk.cluster_weights_dense(self.W, labels, self.n_clusters)

    def stats(self, WX, labels):
        if self.sparse:
            return ncsr.cluster_stats_csr(self.indptr, self.indices, self.data, labels,
                                          self.degrees, self.n_clusters)
        return nk.cluster_stats(WX, labels, self.degrees, self.n_clusters)

    def _row_choices(self, state, labels, vol, assoc):
        """The per-node choices of the step from ``labels`` with ``(vol,
        assoc)``: one pass over W, shared by every trial step (and the
        candidate statistics) of an iteration."""
        key = (state, labels, vol, assoc)
        if self._choices_of is None or any(a is not b for a, b in
                                           zip(key, self._choices_of)):
            if self._choices is None:
                n = self.degrees.shape[0]
                self._choices = (np.empty(n, dtype=self.label_dtype),) + tuple(
                    np.empty(n) for _ in range(4))
            ncsr.row_choices(self.indptr, self.indices, self.data, labels,
                             self.degrees, vol, assoc, *self._choices)
            self._choices_of = key
        return self._choices

    def candidate_stats(self, WX, vol, assoc, old, new):
        """``(vol, assoc)`` of ``new`` without forming its ``WX``."""
        if self.sparse:
            best, _, _, w_own, w_best = self._row_choices(WX, old, vol, assoc)
            return ncsr.candidate_stats_rows(self.indptr, self.indices, self.data,
                                             self.degrees, old, new, best, w_own,
                                             w_best, vol, assoc)
        return nk.candidate_stats_dense(self.W, self.degrees, old, new, WX, vol,
                                        assoc)

    def commit(self, WX, old, new):
        """``WX`` of ``new``: dense, updated in place (no (n, K) copy); CSR, a
        new state."""
        if self.sparse:
            return CSRState()
        nk.apply_moves_dense(self.W, old, new, WX)
        return WX

    def objective(self, vol, assoc):
        return np.array([nk.objective(vol, assoc)])

    def step(self, WX, vol, assoc, labels, tau):
        if self.sparse:
            best, s_best, s_own, _, _ = self._row_choices(WX, labels, vol, assoc)
            new, moved = ncsr.threshold_step(best, s_best, s_own, labels,
                                             float(tau[0]), self.n_clusters)
        else:
            new, moved = nk.proximal_step(WX, self.degrees, vol, assoc, labels,
                                          float(tau[0]))
        return new, np.array([moved])

    def select(self, mask, a, b):
        return a if bool(mask[0]) else b

    def polish(self, labels, WX, vol, assoc):
        """One exact local-move sweep, in place; returns moves per graph."""
        if self.sparse:
            self._choices_of = None  # labels, vol and assoc change in place
            m = npol.local_move_sweep_csr(self.indptr, self.indices, self.data,
                                          self.degrees, labels, vol, assoc)
        else:
            m = npol.local_move_sweep_dense(self.W, self.degrees, labels, WX, vol,
                                            assoc)
        return np.array([m])

    def compiled_graph(self):
        """The graph for the compiled loop (:mod:`sklearn_falcon._solver.
        _compiled`), or None.

        The Python loop's per-iteration overhead (a dozen small calls)
        outweighs the work on small graphs.  On a dense graph an iteration
        reads only the rows of the nodes that move, after the first pass, so
        the compiled loop on serial kernels made token fits 1.4x faster at
        2,116 and 4,096 tokens (4.5M and 16.8M entries) than the Python loop
        on the parallel kernels; it is offered while the per-step ``(n, K)``
        work is below the parallel threshold and ``W`` has at most
        ``COMPILED_LOOP_MAX_ENTRIES`` entries.  On a CSR graph an iteration
        is one pass over ``W``: the compiled loop is offered below
        ``CSR_PARALLEL_MIN`` stored entries, where the kernels run serially
        anyway.  Larger problems keep the Python loop and the parallel
        kernels.
        """
        if self.sparse:
            # an iteration is a pass over W, in parallel from CSR_PARALLEL_MIN on
            if self.data.shape[0] >= ncsr.CSR_PARALLEL_MIN:
                return None
            return None, self.indptr, self.indices, self.data, self.degrees
        n = self.degrees.shape[0]
        if (n * self.n_clusters >= PARALLEL_MIN
                or self.W.size > COMPILED_LOOP_MAX_ENTRIES):
            return None
        return self.W, None, None, None, self.degrees


class CSRState:
    """What a CSR :class:`NumbaProblem` hands the solver as ``WX``.

    The CSR iteration never forms ``WX = W @ onehot(X)``
    (:mod:`sklearn_falcon._backends._numba._csr`): its steps read one pass
    of per-node choices, which the problem keeps for the state, labels and
    statistics it was computed from.  A state is a token for "the labels
    of this iteration"; :meth:`NumbaProblem.commit` returns a new one.
    """

    __slots__ = ()
