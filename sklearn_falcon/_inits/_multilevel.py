"""The multilevel (Graclus-like) initialization.

1. **Coarsen** (:mod:`._coarsen`): every node points at its heaviest
   neighbour by ``W_ij / (d_i d_j)``; the components of that forest are the
   nodes of the next level.  Repeat until about ``4 K`` nodes remain or
   coarsening stalls.
2. **Solve a coarse graph** with Falcon plus exact local moves from many
   random starts.  A spectral labelling of the finest level on which an
   eigensolve is cheap (at most ``spectral_max_nnz`` stored entries: the
   input graph itself for small sparse graphs, a coarse level for dense
   token graphs) is one more start: a safety net, not the method.
3. **Project and refine** level by level with the same solver.

Several coarsening depths are tried because no depth wins everywhere; the
candidates are refined on the finest level by the caller and the best ``f``
is kept.
"""

import numpy as np

from .._backends import make_problem
from .._log import log_stage
from .._solver import SolverOptions, solve
from .._stats import n_entries
from ._coarsen import coarsen
from ._simple import random_labels
from ._spectral import spectral_embedding_labels

__all__ = ["Hierarchy", "multilevel_candidates"]


class Hierarchy:
    """Coarsening hierarchy of one graph.

    ``graphs[0]`` is the input graph; ``maps[l]`` maps the nodes of level
    ``l`` to those of level ``l + 1``.
    """

    def __init__(self, W, degrees, n_clusters, *, min_size=None, max_levels=40):
        self.n_clusters = n_clusters
        min_size = max(4 * n_clusters, n_clusters + 1) if min_size is None else min_size
        self.graphs = [(W, degrees)]
        self.maps = []
        while len(self.maps) < max_levels:
            Wl, dl = self.graphs[-1]
            n = Wl.shape[0]
            if n <= min_size:
                break
            Wc, dc, mapping = coarsen(Wl, dl)
            nc = Wc.shape[0]
            if nc < n_clusters or nc > 0.95 * n:
                break
            self.graphs.append((Wc, dc))
            self.maps.append(mapping)

    @property
    def sizes(self):
        return [g[0].shape[0] for g in self.graphs]

    def project(self, labels, level, to_level=0):
        """Labels of ``level`` expressed on ``to_level``."""
        for lv in range(level - 1, to_level - 1, -1):
            labels = labels[self.maps[lv]]
        return labels


def _refine(W, degrees, labels, n_clusters, options):
    res = solve(make_problem(W, n_clusters, degrees=degrees), labels, options)
    return res.labels[0], float(res.objective[0])


def multilevel_candidates(
    W,
    degrees,
    n_clusters,
    rng,
    *,
    n_starts=10,
    depths=(None, 16),
    spectral=True,
    spectral_max_nnz=100_000,
    options=None,
    hierarchy=None,
    verbose=0,
):
    """Candidate labelings of the finest graph from a multilevel scheme.

    Parameters
    ----------
    W : CSR matrix or ndarray
        Affinity of the finest graph (no isolated nodes).
    degrees : ndarray
    n_clusters : int
    rng : numpy Generator
    n_starts : int
        Random starts on the coarsest graph of each depth.
    depths : tuple
        Coarsest sizes to start from, as multiples of ``n_clusters``
        (``None``: the coarsest level of the hierarchy).
    spectral : bool
        Also start from a spectral labelling of the finest level whose graph
        has at most ``spectral_max_nnz`` stored entries (a cheap eigensolve
        there).
    spectral_max_nnz : int
        Largest graph (in stored entries: ``nnz`` for sparse, ``n**2`` for
        dense) on which the spectral start is computed.  An eigensolve costs
        about ``nnz`` per iteration, so this bounds its cost; a dense token
        graph gets its spectral start on a coarse level.
    options : SolverOptions, default=None
        Options of the refinement on the coarse levels (defaults when None).
    hierarchy : Hierarchy, default=None
        Reuse a hierarchy built earlier (it is deterministic).
    verbose : int, default=0
        When > 0, log the hierarchy and each start's ``f`` on every level
        it is refined on (stage ``level`` of the ``sklearn_falcon`` logger).

    Returns
    -------
    candidates : list of ndarray
        Label vectors projected to the finest level (the caller refines them
        there): the best by ``f`` on level 1 of the starts made on coarse
        levels, then one per start made on the finest level.
    hierarchy : Hierarchy
    """
    params = options if options is not None else SolverOptions()
    H = hierarchy if hierarchy is not None else Hierarchy(W, degrees, n_clusters)
    sizes = H.sizes
    if verbose:
        log_stage("level", "hierarchy of %d levels, %s nodes", len(sizes), sizes)
    starts = []
    for depth in depths:
        if depth is None:
            level = len(sizes) - 1
        else:
            # the coarsest level still holding at least depth * K nodes
            ok = [lv for lv, s in enumerate(sizes) if s >= depth * n_clusters]
            level = ok[-1] if ok else 0
        if (level, "random") not in starts and sizes[level] <= 50_000:
            starts.append((level, "random"))
    if spectral:
        # the finest level on which an eigensolve is cheap; from a coarse
        # level the start is refined down the hierarchy like the random ones
        nnz = [n_entries(g[0]) for g in H.graphs]
        level = next((lv for lv, z in enumerate(nnz) if z <= spectral_max_nnz), None)
        if level is not None:
            starts.append((level, "spectral"))
    candidates = []
    for level, kind in starts:
        Wl, dl = H.graphs[level]
        n_l = Wl.shape[0]
        if kind == "spectral":
            tries = [spectral_embedding_labels(Wl, dl, n_clusters, rng)]
        else:
            # restarts cost O(nnz) each: fewer of them on the larger levels
            n_try = max(4, min(n_starts, (n_starts * 200) // max(n_l, 1)))
            tries = [random_labels(n_l, n_clusters, rng) for _ in range(n_try)]
        best, best_f = None, -np.inf
        for y in tries:
            y, f = _refine(Wl, dl, y, n_clusters, params)
            if f > best_f:
                best, best_f = y, f
        labels, f = best, best_f
        if verbose:
            log_stage("level", "%d (%d nodes): %s start, best f=%.6f of %d", level,
                      n_l, kind, f, len(tries))
        for lv in range(level - 1, 0, -1):
            labels = labels[H.maps[lv]]
            Wf, df = H.graphs[lv]
            labels, f = _refine(Wf, df, labels, n_clusters, params)
            if verbose:
                log_stage("level", "%d (%d nodes): refined, f=%.6f", lv, sizes[lv], f)
        candidates.append((level, f, labels))
    if not candidates:  # the graph did not coarsen and is too large to restart
        return [random_labels(W.shape[0], n_clusters, rng)], H
    # f is preserved exactly by projection, so the candidates refined down to
    # level 1 compare fairly there: only the best of them goes on to the
    # finest level, with those that started there
    coarse = [c for c in candidates if c[0] > 0]
    candidates = [c for c in candidates if c[0] == 0]
    if coarse:
        candidates.insert(0, max(coarse, key=lambda c: c[1]))
    return [c[2][H.maps[0]] if c[0] > 0 else c[2] for c in candidates], H
