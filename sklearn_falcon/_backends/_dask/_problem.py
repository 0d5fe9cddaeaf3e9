"""One graph on a Dask cluster, solved blockwise with the Numba kernels."""

import numpy as np

import dask

from .._numba._kernels import objective
from ._blocks import (
    add_parts,
    concat_blocks,
    freeze_task,
    label_dtype,
    pass_task,
    polish_task,
    step_task,
    sum_values,
)
from ._graph import persist_compute

__all__ = ["DaskProblem", "Labels", "join_blocks", "tree_reduce"]

_FANIN = 16  # partial sums added per task of the reduction tree
# Up to this many blocks every task that needs all nodes' labels (or maps,
# or degrees) reads the blocks themselves; beyond, one task joins them first,
# so that the scheduler tracks 2 B dependencies a pass rather than B**2.
_JOIN_DIRECT_MAX = 8


def join_blocks(blocks):
    """The arguments that give a task the values of all blocks: the blocks
    themselves, or one Delayed that concatenates them (many blocks)."""
    if len(blocks) <= _JOIN_DIRECT_MAX:
        return list(blocks)
    return [dask.delayed(concat_blocks)(*blocks)]


def tree_reduce(parts):
    """One Delayed of the element-wise sum of ``parts`` (tuples of partial
    sums), added on the workers in a tree with fan-in 16, in block order."""
    parts = list(parts)
    add = dask.delayed(add_parts)
    while len(parts) > 1:
        parts = [add(*parts[i:i + _FANIN]) for i in range(0, len(parts), _FANIN)]
    return parts[0]


class Weights:
    """``WX`` on the cluster: one persisted ``(m, K)`` block per row block."""

    __slots__ = ("blocks",)

    def __init__(self, blocks):
        self.blocks = list(blocks)


class Labels:
    """Labels on the cluster, one persisted block per row block.

    ``state``, when known, is the fresh pass over ``W`` for these labels:
    ``(Weights, vol, assoc, counts)``, ``counts`` being the nodes of nonzero
    degree per cluster.
    """

    __slots__ = ("blocks", "state")

    def __init__(self, blocks, state=None):
        self.blocks = list(blocks)
        self.state = state


class DaskProblem:
    """One graph in row blocks on Dask (the
    :class:`~sklearn_falcon._solver.Problem` protocol, ``B = 1``).

    Every operation is a map over the row blocks that calls the Numba
    kernels on each block, then one reduction of ``K``-sized partial sums;
    the labels, ``WX`` and the blocks stay on the workers (persisted Dask
    objects), and the client holds ``O(K)`` numbers per step.

    * A trial step is one graph: the proximal step of every block's rows,
      then a fresh pass over ``W`` with the new labels of all nodes (each
      pass task reads the label blocks of every block), which gives the
      candidate's ``WX`` and partial ``(vol, assoc)``.  The solver's
      acceptance test then decides once, globally, from the reduced sums;
      :meth:`commit` keeps the candidate's ``WX``.  The passes are fresh,
      not incremental: ``WX`` is exact at every iteration.
    * The guard against empty clusters is global: moves out of a cluster
      that the step would empty are cancelled, until none is emptied
      (the rule of the Numba step, applied to the counts of all blocks).
    * :meth:`polish` sweeps every block's rows at once (exact local moves
      with the other blocks fixed, :func:`._blocks.polish_task`; a block's
      last node of a cluster that other blocks hold may move), then
      accepts the combined moves only if ``f`` rises and no cluster is
      emptied; otherwise it keeps the moves of the block with the largest
      gain alone, whose gain is exact.  ``f`` never decreases.

    Parameters
    ----------
    graph : ShardedGraph
    n_clusters : int
    gather_labels : bool, default=True
        Whether :meth:`to_numpy` gathers the labels to the client.  When
        False it returns them as a ``(1, n)`` Dask array instead (a
        sharded fit keeps its labels on the workers).
    """

    n_graphs = 1
    supports_polish = True

    def __init__(self, graph, n_clusters, *, gather_labels=True):
        self.graph = graph
        self.n_clusters = int(n_clusters)
        self.gather_labels = gather_labels
        self.label_dtype = label_dtype(self.n_clusters)
        self.host_degrees = [graph.degrees_array()]

    @property
    def degrees(self):
        """The degrees as a NumPy array (gathered: for graphs that fit the
        client, e.g. those of ``falcon_batch``)."""
        return np.asarray(self.host_degrees[0].compute())

    def compiled_graph(self):
        return None

    # -- labels ----------------------------------------------------------
    def from_labels(self, labels):
        """:class:`Labels` from a :class:`Labels` (a new container, same
        blocks), a Dask array or NumPy labels of shape ``(n,)`` or ``(1, n)``."""
        if isinstance(labels, Labels):
            state = labels.state
            if state is not None:  # its own Weights: polish updates it in place
                state = (Weights(state[0].blocks),) + tuple(state[1:])
            return Labels(labels.blocks, state)
        G = self.graph
        if dask.is_dask_collection(labels):
            arr = labels.reshape(-1).astype(self.label_dtype).rechunk((tuple(G.sizes),))
            return Labels(dask.persist(*arr.to_delayed().ravel()))
        y = np.asarray(labels).reshape(-1).astype(self.label_dtype)
        return Labels(dask.persist(*[dask.delayed(y[a:b].copy()) for a, b in
                                     zip(G.bounds[:-1], G.bounds[1:])]))

    def labels_array(self, X):
        """The labels as an ``(n,)`` int64 Dask array (nothing is gathered)."""
        return self.graph.as_array(X.blocks, self.label_dtype).astype(np.int64)

    def to_numpy(self, X):
        if not self.gather_labels:
            return self.labels_array(X).reshape(1, -1)
        parts = dask.compute(*X.blocks)
        return np.concatenate(parts).astype(np.int64).reshape(1, -1)

    # -- passes over W ---------------------------------------------------
    def _pass_graph(self, label_blocks):
        """Delayed ``WX`` blocks and the reduced ``(vol, assoc, counts)`` of a
        fresh pass with ``label_blocks``."""
        G = self.graph
        task = dask.delayed(pass_task, nout=2)
        labels = join_blocks(label_blocks)
        parts = [task(G.blocks[b], G.starts[b], G.degrees[b], self.n_clusters,
                      *labels) for b in range(G.n_blocks)]
        return [p[0] for p in parts], tree_reduce([p[1] for p in parts])

    def evaluate(self, X):
        """``X`` with its state from a fresh pass (its own if known)."""
        if X.state is None:
            WX, total = self._pass_graph(X.blocks)
            WX, (total,) = persist_compute(WX, [total])
            vol, assoc, counts = total
            X.state = (Weights(WX), vol, assoc, counts)
        return X

    def weights(self, X):
        return self.evaluate(X).state[0]

    def stats(self, WX, X):
        """``(vol, assoc)`` of ``X`` (``WX`` is its weights: both come from
        the same pass)."""
        state = self.evaluate(X).state
        return state[1].copy(), state[2].copy()

    def candidate_stats(self, WX, vol, assoc, X, new):
        state = self.evaluate(new).state
        return state[1].copy(), state[2].copy()

    def commit(self, WX, X, new):
        return self.evaluate(new).state[0]

    def objective(self, vol, assoc):
        return np.array([objective(vol, assoc)])

    def select(self, mask, a, b):
        return a if bool(mask[0]) else b

    # -- the step --------------------------------------------------------
    def step(self, WX, vol, assoc, X, tau):
        """The proximal step of all blocks and, in the same graph, the pass
        over ``W`` that evaluates it; the global guard against empty
        clusters may repeat the pass (rarely)."""
        G = self.graph
        old_counts = self.evaluate(X).state[3]
        task = dask.delayed(step_task, nout=2)
        t = float(tau[0])
        parts = [task(WX.blocks[b], G.degrees[b], vol, assoc, X.blocks[b], t)
                 for b in range(G.n_blocks)]
        frozen = np.zeros(self.n_clusters, dtype=bool)
        while True:
            cand = [p[0] for p in parts]
            WXc, total = self._pass_graph(cand)
            moved = dask.delayed(sum_values)(*[p[1] for p in parts])
            kept, (total, n_moved) = persist_compute(cand + WXc, [total, moved])
            cvol, cassoc, counts = total
            emptied = (counts == 0) & (old_counts > 0)
            if not emptied.any():
                break
            frozen |= emptied
            freeze = dask.delayed(freeze_task, nout=2)
            cand = kept[:G.n_blocks]
            parts = [freeze(X.blocks[b], cand[b], frozen) for b in range(G.n_blocks)]
        cand, WXc = kept[:G.n_blocks], kept[G.n_blocks:]
        new = Labels(cand, (Weights(WXc), cvol, cassoc, counts))
        return new, np.array([int(n_moved)])

    # -- exact local moves -----------------------------------------------
    def polish(self, X, WX, vol, assoc):
        """One blockwise sweep of exact local moves, in place; returns the
        number of moves kept (0 when neither the combined moves nor the
        best block's raise ``f``)."""
        G = self.graph
        state = self.evaluate(X).state
        f0 = objective(vol, assoc)
        task = dask.delayed(polish_task, nout=2)
        parts = [task(G.blocks[b], G.starts[b], G.degrees[b], X.blocks[b],
                      state[0].blocks[b], vol, assoc, state[3])
                 for b in range(G.n_blocks)]
        new, gains = persist_compute([p[0] for p in parts], [p[1] for p in parts])
        moves = np.array([g[0] for g in gains])
        if moves.sum() == 0:
            return np.array([0])
        trial = self.evaluate(Labels(new))
        n_kept = int(moves.sum())
        if not self._improves(trial, f0, state[3]):
            b = int(np.argmax([g[1] for g in gains]))
            if moves[b] == 0:
                return np.array([0])
            blocks = list(X.blocks)
            blocks[b] = new[b]
            trial = self.evaluate(Labels(blocks))
            n_kept = int(moves[b])
            if not self._improves(trial, f0, state[3]):
                return np.array([0])
        WX.blocks = trial.state[0].blocks
        X.blocks, X.state = trial.blocks, (WX,) + tuple(trial.state[1:])
        vol[:] = trial.state[1]
        assoc[:] = trial.state[2]
        return np.array([n_kept])

    @staticmethod
    def _improves(trial, f0, old_counts):
        _, vol, assoc, counts = trial.state
        if np.any((counts == 0) & (old_counts > 0)):
            return False
        return objective(vol, assoc) > f0
