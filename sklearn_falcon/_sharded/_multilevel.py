"""The initialization of a sharded graph: coarsen on the cluster, start on
one worker, project back and refine on the cluster.

1. **Coarsen blockwise.**  Each row block matches its own nodes with the
   single-machine coarsening (:func:`~sklearn_falcon._inits._coarsen.coarsen`:
   a randomized matching by ``W_ij / (d_i d_j)``, with the global degrees)
   on its own columns, so that no task needs another block's rows and the
   coarse nodes of fine block ``b`` form coarse block ``b``: labels project
   back block by block.  The coarse rows of a block, ``P_b' W_b P``, need the
   coarse index of every column: the blocks' maps travel to every task, like
   the labels (``n`` integers).  Levels are added until the graph has at
   most :func:`coarse_max_entries` stored entries (it then fits one worker)
   or coarsening stalls: a level keeps 95% of the nodes, or is too large to
   be kept in the workers' memory (a sparse graph sheds few of its entries
   on the first levels, fewer still when its shards lack locality).  A block holds the edges among its own nodes only:
   the better the shards keep neighbours together, the more it coarsens (on
   a graph whose nodes are in random order, a block of ``B`` holds ``1/B`` of
   each node's edges).
2. **Start on one worker.**  One task joins the coarsest graph and runs the
   single-machine initialization there, through the registry
   (:func:`~sklearn_falcon._inits.make_starts`), solves from each
   candidate with the Numba backend and keeps the best ``f``.  When
   coarsening stalls above the limit (shards without locality), the graph
   would not fit one worker: the start is then random labels on the
   coarsest level, drawn blockwise, with a warning.
3. **Project and refine** level by level with the Dask problem.

Coarsening preserves ``f`` of a projected labelling exactly (``W_c = P' W
P`` keeps the internal weights as self-loops), so the candidates compare
fairly on the coarsest graph.
"""

import contextlib
import copy
import logging
import os
import time
from numbers import Real

import numpy as np
import scipy.sparse as sp

import dask

from .._affinity import count_components, restrict_to_active, warn_of_components
from .._backends import make_problem
from .._backends._dask import DaskProblem, ShardedGraph
from .._backends._dask._blocks import as_csr, label_dtype
from .._backends._dask._graph import decide_persist, persist_compute
from .._inits import InitContext, fill_empty, make_starts
from .._inits._coarsen import coarsen
from .._inits._contract import coarsen_csr
from .._log import logger, warn_user
from .._solver import solve
from .._stats import best_result, with_isolated
from ._starts import random_start

__all__ = ["coarse_max_entries", "coarsen_sharded", "multilevel_start"]

COARSE_MAX_ENTRIES = 8_000_000
MAX_LEVELS = 20
# Below this fraction of the edge weight within blocks (on the finest level)
# the blockwise start is warned about: with nodes in random order a block of
# B holds 1/B of it, and from 4 blocks on the start was poorer than random
# labels (the Dask guide); shards that keep neighbours together hold most.
INNER_WEIGHT_MIN = 0.4


def coarse_max_entries():
    """Largest coarse graph (stored entries) gathered on one worker.

    The Dask config key ``sklearn_falcon.dask.coarse_max_entries`` (default
    8,000,000: about 100 MB as CSR), and at most what takes a twentieth of
    the smallest worker's ``memory_limit`` as CSR (the single-machine start
    needs several copies of its graph)."""
    from .._backends._dask._graph import _worker_memory_limits

    value = dask.config.get("sklearn_falcon.dask.coarse_max_entries",
                            COARSE_MAX_ENTRIES)
    if not (isinstance(value, Real) and not isinstance(value, bool)
            and np.isfinite(value) and value == int(value) and value >= 1):
        raise ValueError(
            "The Dask config key sklearn_falcon.dask.coarse_max_entries must be an "
            f"integer >= 1; got {value!r}.")
    limit = int(value)
    limits = _worker_memory_limits()
    if limits and min(limits) > 0:
        limit = min(limit, min(limits) // (20 * 12))
    return max(limit, 1)


# ------------------------------------------------------------------ tasks
def _match_task(block, r0, degrees, seed):
    """The block-local matching of a block's nodes, on its own columns:
    ``(map, (n_coarse, weight among its own nodes, total degree))``."""
    W = as_csr(block)
    m = W.shape[0]
    D = W[:, r0:r0 + m].tocsr()
    D.eliminate_zeros()
    d = np.where(degrees > 0, degrees, 1.0)  # nodes of zero degree stay single
    _, _, mapping = coarsen(D, d, np.random.default_rng(seed))
    return mapping, (int(mapping.max()) + 1 if m else 0, float(D.sum()),
                     float(degrees.sum()))


def _coarse_block_task(block, degrees, local_map, n_comp, global_map):
    """The coarse rows ``P_b' W_b P`` of a block and their degrees.

    :func:`~sklearn_falcon._inits._contract.coarsen_csr` groups rows and
    columns by one mapping; the block's columns are shifted past its rows,
    so that one array maps its rows (to the block's coarse nodes) and all
    columns (to global coarse nodes).
    """
    W = as_csr(block)
    m = W.shape[0]
    n_coarse = int(global_map.max()) + 1
    mapping = np.concatenate([local_map, global_map])
    indptr, indices, data = coarsen_csr(W.indptr, W.indices.astype(np.int64) + m,
                                        W.data, mapping, n_coarse)
    indptr = indptr[:n_comp + 1]
    if indices.shape[0] < np.iinfo(np.int32).max and n_coarse < np.iinfo(np.int32).max:
        indptr, indices = indptr.astype(np.int32), indices.astype(np.int32)
    Wc = sp.csr_matrix((data, indices, indptr), shape=(n_comp, n_coarse))
    Wc.sort_indices()
    dc = np.bincount(local_map, weights=degrees, minlength=n_comp)
    nbytes = Wc.data.nbytes + Wc.indices.nbytes + Wc.indptr.nbytes
    return Wc, dc, (Wc.nnz, nbytes, int(np.count_nonzero(dc > 0)))


def _global_map(offsets, *maps):
    """Every node's coarse node, numbered globally (block after block)."""
    return np.concatenate([mp + off for mp, off in zip(maps, offsets[:-1])])


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append((record.levelno, record.getMessage(),
                             getattr(record, "stage", None)))


@contextlib.contextmanager
def _progress_of_worker(client_pid, verbose):
    """The package's progress records logged within the block, as a list of
    ``(level, message, stage)``, when it runs in another process than the
    client's (a worker of Dask's ``"processes"`` scheduler or of a
    distributed cluster, whose logging the client does not see) and
    ``verbose``; else an empty list (in the client's process they are
    logged as they come)."""
    if os.getpid() == client_pid or not verbose:
        yield []
        return
    handler = _Records()
    kept = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(kept[0])
        logger.propagate = kept[1]


def _relog(records):
    """Log, in the client, the records of :func:`_progress_of_worker`."""
    for level, message, stage in records:
        logger.log(level, "%s", message, extra={"stage": stage})


def _coarse_init_task(n_clusters, init, n_init, rng, options, n_blocks, client_pid,
                      *parts):
    """The single-machine start on the joined coarsest graph (``parts``: the
    blocks' degrees, then the blocks): the best, by ``f``, of the registry's
    candidates solved with the Numba backend, the connected components
    of the graph of its nodes of nonzero degree (those of the finest graph:
    a matching contracts edges only), and its progress records when it ran
    in another process than the client's (:func:`_progress_of_worker`)."""
    with _progress_of_worker(client_pid, options.verbose) as records:
        labels, n_comp = _coarse_init(n_clusters, init, n_init, rng, options,
                                      n_blocks, *parts)
    return labels, n_comp, records


def _coarse_init(n_clusters, init, n_init, rng, options, n_blocks, *parts):
    W = sp.vstack([as_csr(b) for b in parts[n_blocks:]], format="csr")
    d = np.concatenate(parts[:n_blocks])
    active = d > 0
    idx = np.flatnonzero(active)
    if idx.size < W.shape[0]:
        W = restrict_to_active(W, active)
    d_act = d[idx]
    ctx = InitContext(n_clusters, rng, options, W=W, degrees=d_act)
    problem = make_problem(W, n_clusters, degrees=d_act)
    # ranked by the exact objective, as the estimator's restarts are
    runs = (solve(problem, fill_empty(y0, n_clusters, rng), options.quieter())
            for y0 in make_starts(init, ctx, n_init))
    best = best_result(runs, W, n_clusters, d_act).labels[0]
    labels = with_isolated(best, idx, d.shape[0], d_act, n_clusters)
    return labels.astype(label_dtype(n_clusters)), count_components(W)


def _project_task(coarse, mapping):
    return coarse[mapping]


def _slice_task(values, a, b):
    return values[a:b].copy()


# ----------------------------------------------------------------- driver
def coarsen_sharded(G, rng):
    """One blockwise coarsening level of a sharded graph.

    Returns
    -------
    coarse : ShardedGraph
        ``P' W P`` in row blocks (coarse block ``b`` from fine block ``b``),
        persisted.
    maps : list of Delayed
        Per fine block, the coarse node (numbered within its coarse block)
        of each of its nodes.
    n_active : int
        Coarse nodes of nonzero degree.
    inner : float
        The fraction of the edge weight of ``G`` between nodes of the same
        block (what the matching sees).
    """
    B = G.n_blocks
    seeds = rng.integers(np.iinfo(np.int64).max, size=B)
    match = dask.delayed(_match_task, nout=2)
    parts = [match(G.blocks[b], G.starts[b], G.degrees[b], int(seeds[b]))
             for b in range(B)]
    maps, small = persist_compute([p[0] for p in parts], [p[1] for p in parts])
    n_comp = [c for c, _, _ in small]
    offsets = np.concatenate([[0], np.cumsum(n_comp)]).astype(np.int64)
    # one task numbers every node's coarse node; each block reads it
    global_map = dask.delayed(_global_map)(offsets, *maps)
    task = dask.delayed(_coarse_block_task, nout=3)
    parts = [task(G.blocks[b], G.degrees[b], maps[b], n_comp[b], global_map)
             for b in range(B)]
    kept, infos = persist_compute([p[0] for p in parts] + [p[1] for p in parts],
                                  [p[2] for p in parts])
    coarse = ShardedGraph(
        kept[:B], kept[B:], offsets, nnz=sum(i[0] for i in infos),
        nbytes=sum(i[1] for i in infos), dtype=G.dtype, persisted=True)
    total = sum(t for _, _, t in small)
    inner = sum(w for _, w, _ in small) / total if total > 0 else 1.0
    return coarse, maps, sum(i[2] for i in infos), inner


def multilevel_start(G, init, n_clusters, rng, options, n_init=1, *,
                     max_entries=None, info=None):
    """Starting labels of a sharded graph from a graph initialization of
    :data:`~sklearn_falcon._inits.INITS` (module docstring).

    Parameters
    ----------
    G : ShardedGraph
    init : str
        A graph initialization (``"multilevel"``, ``"spectral"``).
    n_clusters : int
    rng : numpy.random.Generator
        Passed (a copy of its state) to the start on the coarsest graph.
    options : SolverOptions
        The solver settings of the refinements (one verbosity level less).
    n_init : int
        Restarts of the strategy on the coarsest graph (the best ``f`` is
        kept).
    max_entries : int, default=None
        Coarsen until at most this many stored entries
        (:func:`coarse_max_entries` when None).
    info : dict, default=None
        Filled with the sizes of the levels (``"levels"``: ``(n, nnz)``).

    Returns
    -------
    Labels
        Labels of ``G``'s nodes, on the cluster.
    """
    t0 = time.perf_counter()
    max_entries = coarse_max_entries() if max_entries is None else max_entries
    # a streamed graph (larger than the workers' memory) keeps only the
    # coarse level in the making: the others are released, and refinement
    # waits for the finest level
    keep = G.persisted
    levels, maps, sizes = [G], [], [(G.n, G.nnz)]
    inner = []
    why = f"it reached {MAX_LEVELS} levels, the most"  # why it stopped above
    while levels[-1].nnz > max_entries and len(maps) < MAX_LEVELS:
        fine = levels[-1]
        coarse, mp, n_active, frac = coarsen_sharded(fine, rng)
        inner.append(frac)
        if n_active < n_clusters:
            why = (f"a coarser level would have fewer than n_clusters={n_clusters} "
                   "nodes")
            break
        if coarse.n > 0.95 * fine.n:
            why = ("its shards hold few edges among their own nodes. Order the "
                   "nodes so that shards keep neighbours together (see the Dask "
                   "guide)")
            break
        if not decide_persist("auto", coarse.nbytes, coarse.nbytes / coarse.n_blocks):
            why = "a coarser level would not fit in the workers' memory"
            break
        if not keep and len(levels) > 1:
            levels[-1] = None
        levels.append(coarse)
        maps.append(mp)
        sizes.append((coarse.n, coarse.nnz))
    if info is not None:
        info["levels"] = sizes
        info["coarsen_s"] = time.perf_counter() - t0
    top = levels[-1]
    if top.nnz > max_entries:  # stalled: it would not fit one worker
        warn_user(
            f"The sharded graph stopped coarsening at {top.n} nodes and {top.nnz} "
            f"stored entries, more than coarse_max_entries={max_entries}: {why}. "
            "The start is random labels on that level. Raise the Dask config key "
            "sklearn_falcon.dask.coarse_max_entries if one worker can hold that "
            "graph.")
        blocks = random_start(DaskProblem(top, n_clusters), rng).blocks
    else:
        if inner and inner[0] < INNER_WEIGHT_MIN:
            warn_user(
                f"The shards of the graph hold {inner[0]:.0%} of its edge weight "
                "among their own nodes: its start, coarsened block by block, saw "
                "little of the graph and may be poorer than init='random'. Order "
                "the nodes so that shards keep neighbours together (see the Dask "
                "guide).")
        start = dask.delayed(_coarse_init_task)(
            n_clusters, init, n_init, copy.deepcopy(rng), options, top.n_blocks,
            os.getpid(), *top.degrees, *top.blocks)
        start = dask.persist(start)[0]
        n_comp, records = dask.compute(start[1], start[2])  # (waits)
        _relog(records)
        warn_of_components(n_comp, n_clusters)
        blocks = [dask.delayed(_slice_task)(start[0], a, b) for a, b in
                  zip(top.starts, top.starts[1:] + [top.n])]
    if info is not None:
        info["coarse_start_s"] = time.perf_counter() - t0 - info["coarsen_s"]
    quiet = options.quieter()
    top = levels[-1] = None  # released once its start is computed
    for lv in range(len(maps) - 1, -1, -1):
        blocks = [dask.delayed(_project_task)(blocks[b], maps[lv][b])
                  for b in range(len(maps[lv]))]
        if lv > 0 and levels[lv] is not None:
            P = DaskProblem(levels[lv], n_clusters, gather_labels=False)
            res = solve(P, P.from_labels(blocks_labels(P, blocks)), quiet)
            blocks = P.from_labels(res.labels[0]).blocks
    P = DaskProblem(G, n_clusters, gather_labels=False)
    out = P.from_labels(blocks_labels(P, blocks))
    if info is not None:
        info["init_s"] = time.perf_counter() - t0
    return out


def blocks_labels(P, blocks):
    """Persisted :class:`Labels` of ``P`` from Delayed label blocks."""
    from .._backends._dask._problem import Labels

    return Labels(dask.persist(*blocks))
