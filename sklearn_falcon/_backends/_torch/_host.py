"""The CSR graphs of a torch problem on the CPU, solved with the Numba kernels.

On the CPU, torch's CSR iteration builds ``(n, K)`` and nnz-sized
temporaries for every operation (a scatter for ``W @ X``, clones for the
candidate's statistics), and fresh allocations of that size fault their
pages in each time: at a million nodes an iteration took 20x the CPU time of
the Numba CSR iteration.  So a :class:`TorchProblem
<sklearn_falcon._backends._torch.TorchProblem>` of sparse graphs on the CPU
runs the Numba CSR kernels (:mod:`.._numba._csr`), graph by graph, on NumPy
views of its tensors (zero copy), as its polish already did.  Labels are
held in the kernels' narrow integer type; ``vol`` and ``assoc`` are the
problem's ``(B, K)`` float64 tensors.  On CUDA the torch kernels run.
"""

import numpy as np

from .. import _boundary as bd
from .._numba import _csr as ncsr
from .._numba import _polish as npol


class HostState:
    """The ``WX`` a host-CSR problem hands the solver: a token for "the
    labels of this iteration" (the CSR iteration never forms ``WX``)."""

    __slots__ = ()


class HostCSR:
    """The CSR operations of a batch of graphs on the host.

    Parameters
    ----------
    graphs : list of scipy CSR matrices
        One per graph (``n_b`` nodes each).
    degrees : list of ndarray
    n_clusters : int
    """

    def __init__(self, graphs, degrees, n_clusters):
        self.graphs = graphs
        self.degrees = degrees
        self.n_clusters = n_clusters
        self.label_dtype = ncsr.label_dtype(n_clusters)
        self._choices = [None] * len(graphs)
        self._key = None

    def _views(self, *tensors):
        return [bd.host_view(t) for t in tensors]

    def stats(self, labels):
        """``(vol, assoc)`` as ``(B, K)`` NumPy arrays."""
        (X,) = self._views(labels)
        K = self.n_clusters
        vol = np.zeros((len(self.graphs), K))
        assoc = np.zeros((len(self.graphs), K))
        for b, G in enumerate(self.graphs):
            nb = G.shape[0]
            vol[b], assoc[b] = ncsr.cluster_stats_csr(G.indptr, G.indices, G.data,
                                                      X[b, :nb], self.degrees[b], K)
        return vol, assoc

    def _row_choices(self, state, labels, vol, assoc):
        key = (state, labels, vol, assoc)
        if self._key is None or any(a is not b for a, b in zip(key, self._key)):
            X, v, a = self._views(labels, vol, assoc)
            for b, G in enumerate(self.graphs):
                nb = G.shape[0]
                if self._choices[b] is None:
                    self._choices[b] = (np.empty(nb, dtype=self.label_dtype),) + tuple(
                        np.empty(nb) for _ in range(4))
                ncsr.row_choices(G.indptr, G.indices, G.data, X[b, :nb],
                                 self.degrees[b], v[b], a[b], *self._choices[b])
            self._key = key
        return self._choices

    def step(self, state, vol, assoc, labels, tau):
        """``(new_labels, n_moved)``: NumPy ``(B, n)`` and ``(B,)``; graphs
        with ``tau = inf`` do not move."""
        choices = self._row_choices(state, labels, vol, assoc)
        (X,) = self._views(labels)
        new = X.copy()
        moved = np.zeros(len(self.graphs), dtype=np.int64)
        for b, G in enumerate(self.graphs):
            if not np.isfinite(tau[b]):
                continue
            nb = G.shape[0]
            best, s_best, s_own, _, _ = choices[b]
            new[b, :nb], moved[b] = ncsr.threshold_step(
                best, s_best, s_own, X[b, :nb], float(tau[b]), self.n_clusters)
        return new, moved

    def candidate_stats(self, state, vol, assoc, labels, new):
        choices = self._row_choices(state, labels, vol, assoc)
        X, N, v, a = self._views(labels, new, vol, assoc)
        v2, a2 = v.copy(), a.copy()
        for b, G in enumerate(self.graphs):
            nb = G.shape[0]
            if np.array_equal(X[b, :nb], N[b, :nb]):
                continue
            best, _, _, w_own, w_best = choices[b]
            v2[b], a2[b] = ncsr.candidate_stats_rows(
                G.indptr, G.indices, G.data, self.degrees[b], X[b, :nb], N[b, :nb],
                best, w_own, w_best, v[b], a[b])
        return v2, a2

    def polish(self, labels, vol, assoc):
        """One sweep per graph, in place (CPU tensors: the views are theirs)."""
        self._key = None
        X, v, a = self._views(labels, vol, assoc)
        moves = np.zeros(len(self.graphs), dtype=np.int64)
        for b, G in enumerate(self.graphs):
            nb = G.shape[0]
            moves[b] = npol.local_move_sweep_csr(G.indptr, G.indices, G.data,
                                                 self.degrees[b], X[b, :nb], v[b],
                                                 a[b])
        return moves
