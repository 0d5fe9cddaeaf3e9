"""The initialization of a sharded graph: coarsen on the cluster, start on
one worker, project back and refine on the cluster.

1. **Coarsen on the cluster**, exactly as on one machine
   (:mod:`sklearn_falcon._inits._coarsen`): every node points at its
   heaviest neighbour by ``W_ij / (d_i d_j)`` -- a row is local to its block,
   and the degrees of all nodes travel to every task, like the labels -- and
   the components of that forest become the coarse nodes.  The forest's
   components are found by one task (``n`` integers on one worker); the
   coarse nodes are dealt to the blocks in turn, so that the coarse blocks
   stay balanced whatever the order of the nodes, and every block sends its
   coarse rows ``P_b' W_b P`` to the blocks that own them, where they are
   added.  Levels are added until the graph has at most
   :func:`coarse_max_entries` stored entries (it then fits one worker) or
   coarsening stalls.  (Matching each block's nodes among themselves only,
   with no exchange, was tried first: on a 600,000-node SBM whose nodes are
   in random order a block holds a sixth of each node's neighbours, the
   coarse nodes mixed communities and the fit ended at NCut 5.2 where one
   machine reaches 1.99.)
2. **Start on one worker.**  One task joins the coarsest graph and runs the
   single-machine initialization there, through the registry
   (:func:`~sklearn_falcon._inits.make_starts`), solves from each
   candidate with the Numba backend and keeps the best ``f``.
3. **Project and refine** level by level with the Dask problem.

Coarsening preserves ``f`` of a projected labelling exactly (``W_c = P' W
P`` keeps the internal weights as self-loops), so the candidates compare
fairly on the coarsest graph.
"""

import copy
import time

import numpy as np
import scipy.sparse as sp

import dask

from .._backends import make_problem
from .._backends._dask import DaskProblem, ShardedGraph
from .._backends._dask._blocks import as_csr, label_dtype
from .._backends._dask._graph import persist_compute
from .._backends._dask._problem import join_blocks
from .._inits import InitContext, fill_empty, make_starts
from .._inits._coarsen import coarsen_csr, forest_components, heaviest_neighbor_csr
from .._solver import solve

__all__ = ["coarse_max_entries", "coarsen_sharded", "multilevel_start"]

COARSE_MAX_ENTRIES = 8_000_000
MAX_LEVELS = 20


def coarse_max_entries():
    """Largest coarse graph (stored entries) gathered on one worker.

    The Dask config key ``sklearn_falcon.dask.coarse_max_entries`` (default
    8,000,000: about 100 MB as CSR), and at most what takes a twentieth of
    the smallest worker's ``memory_limit`` as CSR (the single-machine start
    needs several copies of its graph)."""
    from .._backends._dask._graph import _worker_memory_limits

    limit = int(dask.config.get("sklearn_falcon.dask.coarse_max_entries",
                                COARSE_MAX_ENTRIES))
    limits = _worker_memory_limits()
    if limits and min(limits) > 0:
        limit = min(limit, min(limits) // (20 * 12))
    return max(limit, 1)


# ------------------------------------------------------------------ tasks
def _target_task(block, r0, *degree_blocks):
    """Each node's heaviest neighbour by ``W_ij / (d_i d_j)`` among all its
    neighbours (global indices; the node itself when it has none).

    :func:`~sklearn_falcon._inits._coarsen.heaviest_neighbor_csr` numbers
    rows and columns alike; the block's columns are shifted past its rows
    (and self-loops get weight 0, so that they lose to any neighbour), which
    keeps its rule, ties included.
    """
    W = as_csr(block)
    m = W.shape[0]
    d = np.concatenate(degree_blocks)
    rows = np.repeat(np.arange(r0, r0 + m), np.diff(W.indptr))
    data = np.where(W.indices == rows, 0, W.data).astype(W.dtype)
    t = heaviest_neighbor_csr(W.indptr, W.indices.astype(np.int64) + m, data,
                              np.concatenate([np.zeros(m), d]))
    return np.where(t >= m, t - m, np.arange(r0, r0 + m))


def _components_task(n_blocks, *parts):
    """The coarse node of every node (the components of the forest
    ``i -> target[i]``) and the coarse degrees, on one worker.

    Coarse nodes are dealt to the ``n_blocks`` coarse blocks in turn (the
    component numbered ``c`` goes to block ``c % n_blocks``), so that the
    coarse blocks stay balanced whatever the order of the nodes; they are
    numbered block after block.  Returns ``(mapping, bounds, degrees)``.
    """
    targets = np.concatenate(parts[:n_blocks])
    d = np.concatenate(parts[n_blocks:])
    n_comp, comp = forest_components(targets)
    c = np.arange(n_comp)
    counts = np.bincount(c % n_blocks, minlength=n_blocks)
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    renumber = bounds[c % n_blocks] + c // n_blocks
    mapping = renumber[comp]
    return mapping, bounds, np.bincount(mapping, weights=d, minlength=n_comp)


def _pieces_task(block, r0, bounds, *maps):
    """``P_b' W_b P`` of a block, split by the coarse blocks of its rows.

    :func:`~sklearn_falcon._inits._coarsen.coarsen_csr` groups rows and
    columns by one mapping; the block's columns are shifted past its rows so
    that one array maps both.
    """
    W = as_csr(block)
    m = W.shape[0]
    mp = np.concatenate(maps)
    n_coarse = int(bounds[-1])
    indptr, indices, data = coarsen_csr(
        W.indptr, W.indices.astype(np.int64) + m, W.data,
        np.concatenate([mp[r0:r0 + m], mp]), n_coarse)
    C = sp.csr_matrix((data, indices, indptr), shape=(n_coarse, n_coarse))
    return tuple(C[a:b] for a, b in zip(bounds[:-1], bounds[1:]))


def _sum_task(*pieces):
    """A coarse block: the sum of its pieces from every fine block."""
    S = pieces[0]
    for p in pieces[1:]:
        S = S + p
    S = sp.csr_matrix(S)
    if S.nnz < np.iinfo(np.int32).max and S.shape[1] < np.iinfo(np.int32).max:
        S.indptr, S.indices = S.indptr.astype(np.int32), S.indices.astype(np.int32)
    S.sum_duplicates()
    return S, (S.nnz, S.data.nbytes + S.indices.nbytes + S.indptr.nbytes)


def _coarse_init_task(n_clusters, init, n_init, rng, options, n_blocks, *parts):
    """The single-machine start on the joined coarsest graph (``parts``: the
    blocks' degrees, then the blocks): the best, by ``f``, of the registry's
    candidates solved with the Numba backend."""
    W = sp.vstack([as_csr(b) for b in parts[n_blocks:]], format="csr")
    d = np.concatenate(parts[:n_blocks])
    active = d > 0
    idx = np.flatnonzero(active)
    if idx.size < W.shape[0]:
        W = W[idx][:, idx].tocsr()
    d_act = d[idx]
    ctx = InitContext(n_clusters, rng, options, W=W, degrees=d_act)
    problem = make_problem(W, n_clusters, degrees=d_act)
    best, best_f = None, -np.inf
    for y0 in make_starts(init, ctx, n_init):
        res = solve(problem, fill_empty(y0, n_clusters, rng), options.quieter())
        if res.objective[0] > best_f:
            best, best_f = res.labels[0], float(res.objective[0])
    labels = np.empty(d.shape[0], dtype=np.int64)
    labels[idx] = best
    labels[~active] = int(np.argmax(np.bincount(best, weights=d_act,
                                                minlength=n_clusters)))
    return labels.astype(label_dtype(n_clusters))


def _project_task(mapping, *coarse_blocks):
    return np.concatenate(coarse_blocks)[mapping]


def _n_active_task(degrees):
    return int(np.count_nonzero(degrees > 0))


def _item_task(obj, i):
    return obj[i]


def _slice_task(values, a, b):
    return values[a:b].copy()


# ----------------------------------------------------------------- driver
def coarsen_sharded(G):
    """One coarsening level of a sharded graph, as on one machine.

    Every row picks its heaviest neighbour (rows are local to their block;
    the degrees of all nodes travel to every task), one task finds the
    components of that forest (``n`` integers on one worker), and every
    block sends its coarse rows ``P_b' W_b P`` to the coarse blocks that
    own them, where they are added.

    Returns
    -------
    coarse : ShardedGraph
        ``P' W P`` in row blocks, persisted.
    maps : list of Delayed
        Per fine block, the coarse node of each of its nodes.
    n_active : int
        Coarse nodes of nonzero degree.
    """
    B = G.n_blocks
    target = dask.delayed(_target_task)
    degrees = join_blocks(G.degrees)
    targets = [target(G.blocks[b], G.starts[b], *degrees) for b in range(B)]
    comp = dask.delayed(_components_task)(B, *targets, *G.degrees)
    item, cut = dask.delayed(_item_task), dask.delayed(_slice_task)
    mapping, bounds, dc = item(comp, 0), item(comp, 1), item(comp, 2)
    maps = [cut(mapping, a, b) for a, b in zip(G.starts, G.starts[1:] + [G.n])]
    kept, (bounds,) = persist_compute([dc] + maps, [bounds])
    dc, maps = kept[0], kept[1:]
    task = dask.delayed(_pieces_task, nout=B)
    joined = join_blocks(maps)
    pieces = [task(G.blocks[b], G.starts[b], bounds, *joined) for b in range(B)]
    sums = [dask.delayed(_sum_task, nout=2)(*[pieces[b][c] for b in range(B)])
            for c in range(B)]
    degrees = [cut(dc, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    count = dask.delayed(_n_active_task)(dc)
    kept, infos = persist_compute([s[0] for s in sums] + degrees,
                                  [s[1] for s in sums] + [count])
    coarse = ShardedGraph(
        kept[:B], kept[B:], bounds, nnz=sum(i[0] for i in infos[:B]),
        nbytes=sum(i[1] for i in infos[:B]), dtype=G.dtype, persisted=True)
    return coarse, maps, int(infos[B])


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
    while levels[-1].nnz > max_entries and len(maps) < MAX_LEVELS:
        fine = levels[-1]
        coarse, mp, n_active = coarsen_sharded(fine)
        if n_active < n_clusters or coarse.n > 0.95 * fine.n:
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
    start = dask.delayed(_coarse_init_task)(
        n_clusters, init, n_init, copy.deepcopy(rng), options, top.n_blocks,
        *top.degrees, *top.blocks)
    start = dask.persist(start)[0]
    if info is not None:
        dask.compute(start[:0])  # wait for it, to time it
        info["coarse_start_s"] = time.perf_counter() - t0 - info["coarsen_s"]
    blocks = [dask.delayed(_slice_task)(start, a, b) for a, b in
              zip(top.starts, top.starts[1:] + [top.n])]
    quiet = options.quieter()
    top = levels[-1] = None  # released once its start is computed
    for lv in range(len(maps) - 1, -1, -1):
        coarse = join_blocks(blocks)
        blocks = [dask.delayed(_project_task)(maps[lv][b], *coarse)
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
