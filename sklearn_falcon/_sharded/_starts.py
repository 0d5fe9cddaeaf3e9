"""Starting labels of a sharded graph drawn blockwise, the repair of empty
clusters, and the cluster of the isolated nodes."""

import numpy as np

import dask

from .._backends._dask._blocks import isolated_task, random_task, relabel_task
from .._backends._dask._problem import Labels

__all__ = ["fill_empty_blocks", "isolated_to", "random_start"]


def random_start(P, rng):
    """Uniformly random labels, each block from its own seed."""
    G = P.graph
    seeds = rng.integers(np.iinfo(np.int64).max, size=G.n_blocks)
    task = dask.delayed(random_task)
    return Labels(dask.persist(*[task(m, P.n_clusters, int(s), P.label_dtype)
                                 for m, s in zip(G.sizes, seeds)]))


def _count_task(labels, degrees, cluster):
    return int(np.count_nonzero((labels == cluster) & (degrees > 0)))


def fill_empty_blocks(P, X, rng):
    """Give every cluster without a node of nonzero degree one such node,
    taken at random from the largest cluster (as
    :func:`~sklearn_falcon._inits.fill_empty` does in memory); ``X`` itself
    when no cluster is empty."""
    X = P.evaluate(P.from_labels(X))
    counts = X.state[3].copy()
    empty = np.flatnonzero(counts == 0)
    if empty.size == 0:
        return X
    G = P.graph
    blocks = list(X.blocks)
    for k in empty:
        big = int(np.argmax(counts))
        per_block = np.array(dask.compute(*[
            dask.delayed(_count_task)(blocks[b], G.degrees[b], big)
            for b in range(G.n_blocks)]))
        nth = int(rng.integers(per_block.sum()))
        b = int(np.searchsorted(np.cumsum(per_block), nth, side="right"))
        nth -= int(per_block[:b].sum())
        blocks[b] = dask.persist(dask.delayed(relabel_task)(
            blocks[b], G.degrees[b], big, nth, int(k)))[0]
        counts[big] -= 1
        counts[k] += 1
    return P.evaluate(Labels(blocks))


def isolated_to(P, X, cluster):
    """``X`` with its nodes of zero degree in ``cluster`` (their degree and
    rows are zero, so the state of ``X`` is unchanged)."""
    G = P.graph
    task = dask.delayed(isolated_task)
    blocks = dask.persist(*[task(X.blocks[b], G.degrees[b], cluster)
                            for b in range(G.n_blocks)])
    return Labels(blocks, X.state)
