"""The coarsening hierarchy of the multilevel initialization (:class:`Hierarchy`).

A matching about halves the nodes of a level but, on a random sparse
graph, keeps most of its entries, and so does a label propagation level (a
1M-node SBM of mean degree 10 and 10M entries has levels of 9.5M, 8.4M and
7.8M entries at 516k, 124k and 30k nodes).  Two rules bound the memory the
coarse levels hold:

* **a budget:** the coarse levels are kept up to ``HIERARCHY_BUDGET``
  times the entries of the input in all; beyond, a level is dropped and
  contracted again, bit for bit the same graph, when it is needed (one at a
  time is held);
* **on random graphs, levels are contracted from the input:** once a
  matching has kept most of its level's entries, on an input of more than
  ``INPUT_SOURCE_MIN_ENTRIES`` entries, a level coarsened from a level of
  more than ``INPUT_SOURCE`` of the input's entries is contracted from the
  input, through the maps composed, rather than from that level.  The
  level it was drawn from is let go before the contraction writes the new
  one (each is about as large as the input), unless the budget, less one
  input's worth, still holds it; a dropped level is contracted again from
  the input alone.  The input is the caller's graph,
  held anyway: building or loading a level holds one coarse level at a
  time.  The new level is the same graph as a contraction of its finer
  neighbour would give, its entries in another order.  These contractions
  read the input's rows in order (``buckets``,
  :func:`._contract.coarsen_csr`), 1.6x faster than gathering each coarse
  node's scattered members.  The free memory of the C heap is given back
  to the system before each (:func:`.._memory.release_free_heap`).

On a 1M-node SBM (10M entries) the fit's peak memory growth went from
2.85x to 1.95-1.98x the CSR size, for about 5-10 % more time
(``benchmarks/results/fit_memory_stages.md``, ``hierarchy.md``).
"""

import numpy as np
import scipy.sparse as sp

from .._memory import release_free_heap
from .._stats import n_entries
from ._coarsen import cluster_map
from ._contract import contract

__all__ = ["Hierarchy"]

COARSE_PER_CLUSTER = 30  # coarsest graph: about this many nodes per cluster
ALPHA = 0.1  # contraction guard of the matching (see _coarsen)
MAX_LEVELS = 64
# entries of the coarse levels a hierarchy keeps, in units of the input's
# (beyond, levels are contracted again when needed); 1.5, not 2: a 1M-node
# SBM's fit peak 3.6x -> 2.9x the CSR at the same time
HIERARCHY_BUDGET = 1.5
# a matching that keeps more than this share of a level's entries (a random
# graph: about 0.95 on SBMs, 0.5 on meshes and kNN graphs) switches the
# next large levels to label propagation clustering (Effort.lp_shrink) and
# to contractions from the input (INPUT_SOURCE)
LP_TRIGGER = 0.9
# on a random graph, a level of more than this share of the input's entries
# is no source of contractions: the next level is contracted from the input
INPUT_SOURCE = 0.5
# ... on inputs of more than this many entries: below, the coarse levels
# hold a few tens of MB, and contracting each from its finer neighbour is
# faster (20,000-node SBMs of 300k-400k entries fit up to 1.2x slower so)
INPUT_SOURCE_MIN_ENTRIES = 2_000_000
LARGE_ENTRIES = 200_000  # Effort.large_entries


class Hierarchy:
    """Coarsening hierarchy of one graph.

    Level 0 is the input graph; ``maps[l]`` maps the nodes of level
    ``l`` to those of level ``l + 1``.  With ``part``, every matching pairs
    only nodes of the same label, and ``parts[l]`` is the labelling on
    level ``l``.  :meth:`level` gives the graph of a level, and
    ``sources[l]`` the level it is contracted from (``l - 1``, or 0 on a
    random graph; see the module docstring).

    Parameters
    ----------
    W : CSR matrix or ndarray
    degrees : ndarray
    n_clusters : int
    rng : numpy.random.Generator
        Draws the matching orders.
    coarse_size : int, default=None
        Stop at this many nodes (``COARSE_PER_CLUSTER * n_clusters``).
    part : ndarray, default=None
    budget : float, default=None
        Entries of the coarse levels kept, in units of ``W``'s
        (``HIERARCHY_BUDGET`` when None).  It changes which levels are
        contracted again, never a level.
    shrink : float, default=0.0
        When positive, once a matching has kept more than ``LP_TRIGGER`` of
        its level's entries (a random graph), the next sparse levels of more
        than ``large_entries`` stored entries are coarsened by label
        propagation clustering with this ``shrink``
        (:func:`._coarsen.coarsen`) instead of a matching.
    large_entries : int, default=None
        See ``shrink`` (``LARGE_ENTRIES`` when None).
    input_source_entries : int, default=None
        Contractions from the input on random graphs of more entries than
        this (``INPUT_SOURCE_MIN_ENTRIES`` when None; see the module
        docstring).
    """

    def __init__(self, W, degrees, n_clusters, rng, *, coarse_size=None, part=None,
                 budget=None, shrink=0.0, large_entries=None,
                 input_source_entries=None):
        self.n_clusters = n_clusters
        if coarse_size is None:
            coarse_size = max(COARSE_PER_CLUSTER * n_clusters, 2 * n_clusters)
        self._graphs = [(W, degrees)]  # (None, degrees) for a dropped level
        self.sizes = [W.shape[0]]
        self.entries = [n_entries(W)]  # stored entries of each level
        self.sources = [None]
        self._held = None  # (level, graph) of the last level contracted again
        self.maps = []
        self.parts = [None if part is None else np.asarray(part, dtype=np.int64)]
        budget = HIERARCHY_BUDGET if budget is None else budget
        if large_entries is None:
            large_entries = LARGE_ENTRIES
        if input_source_entries is None:
            input_source_entries = INPUT_SOURCE_MIN_ENTRIES
        sparse = sp.issparse(W)  # and so is every level
        # a large sparse input: contractions from it, and the free heap
        # given back before large levels are written
        self._lean = sparse and self.entries[0] > input_source_entries
        slow = False  # a matching kept most entries: cluster the next levels
        kept, limit = 0, budget * self.entries[0] if sparse else np.inf
        while len(self.maps) < MAX_LEVELS:
            lv = len(self.maps)
            Wl, dl = self._graphs[lv]  # the last level is always held
            n = Wl.shape[0]
            if n <= coarse_size:
                break
            large = sparse and self.entries[lv] > large_entries
            lp = shrink if slow and shrink and large else None
            lean = self._lean and large
            nc, mapping = cluster_map(Wl, dl, rng, part=self.parts[-1], alpha=ALPHA,
                                      shrink=lp, min_nodes=coarse_size)
            if lp is not None and nc > 0.9 * n:
                nc, mapping = cluster_map(Wl, dl, rng, part=self.parts[-1],
                                          alpha=ALPHA)
            if nc > 0.9 * n:
                # stalled (guarded edges everywhere): one level without guard
                nc, mapping = cluster_map(Wl, dl, rng, part=self.parts[-1],
                                          alpha=0.0)
            if nc < n_clusters or nc > 0.95 * n:
                break
            source = lv
            if slow and lean and self.entries[lv] > INPUT_SOURCE * self.entries[0]:
                source = 0
                if self.sources[lv] == 0 and kept > limit - self.entries[0]:
                    # done with: let it go before the next level is written
                    # (the input is held, and a contraction from it takes
                    # up to the input's entries)
                    kept -= self.entries[lv]
                    self._graphs[lv] = (None, dl)
                    Wl = None
            if lean:
                release_free_heap()  # the level may be as large as the input
            if source == 0:  # only on a large random graph (slow and lean)
                Wc, dc = contract(W, degrees, self._to_level(lv, mapping), nc,
                                  buckets=True)
            else:
                Wc, dc = contract(Wl, dl, mapping, nc)
            Wl = None
            self.entries.append(n_entries(Wc))
            if lp is None and sparse:
                slow = slow or self.entries[-1] > LP_TRIGGER * self.entries[-2]
            self._graphs.append((Wc, dc))
            self.sources.append(source)
            self.sizes.append(nc)
            self.maps.append(mapping)
            if part is not None:
                pc = np.empty(nc, dtype=np.int64)
                pc[mapping] = self.parts[-1]
                self.parts.append(pc)
            Wc = dc = None  # held by self._graphs alone (it may drop it)
            kept += self.entries[-1]
            prev = len(self._graphs) - 2  # drop it if its finer neighbour is kept
            if kept > limit and prev >= 1 and self.sources[prev] == prev - 1 \
                    and self._graphs[prev - 1][0] is not None \
                    and self._graphs[prev][0] is not None:
                kept -= self.entries[prev]
                self._graphs[prev] = (None, self._graphs[prev][1])
        self.random = slow  # a matching kept most entries

    def _to_level(self, lv, mapping=None):
        """The node of level ``lv`` of every node of the input; with
        ``mapping`` (from level ``lv`` to a new level), its node there."""
        m = mapping if lv == 0 else self.maps[0]
        for j in range(1, lv):
            m = self.maps[j][m]
        if lv and mapping is not None:
            m = mapping[m]
        return m

    def level(self, lv):
        """``(W, degrees)`` of level ``lv`` (contracted again if dropped)."""
        Wl, dl = self._graphs[lv]
        if Wl is not None:
            return Wl, dl
        if dl is None:
            raise RuntimeError(f"level {lv} of the hierarchy was released")
        if self._held is None or self._held[0] != lv:
            self._held = None  # free the one held before contracting another
            src = self.sources[lv]
            Wf, df = self._graphs[src]
            mapping = self._to_level(lv) if src == 0 else self.maps[lv - 1]
            if src == 0:  # from the input: a level of a large random graph
                release_free_heap()
            self._held = (lv, contract(Wf, df, mapping, self.sizes[lv],
                                       buckets=src == 0)[0])
        return self._held[1], dl

    def release(self, lv):
        """Free the graphs of the levels from ``lv`` up (the maps stay: a
        released level can no longer be refined, only projected through)."""
        for j in range(max(lv, 1), len(self._graphs)):
            self._graphs[j] = (None, None)
        if self._held is not None and self._held[0] >= lv:
            self._held = None

    def project(self, labels, level, to_level=0):
        """Labels of ``level`` expressed on ``to_level``."""
        for lv in range(level - 1, to_level - 1, -1):
            labels = labels[self.maps[lv]]
        return labels
