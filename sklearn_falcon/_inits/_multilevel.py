"""The multilevel V-cycle initialization (the default, ``init="multilevel"``).

In the spirit of METIS and Graclus, with Falcon as the refinement:

1. **Coarsen** (:mod:`._coarsen`) by randomized normalized heavy-edge
   matchings, about halving the graph per level, down to about
   ``COARSE_PER_CLUSTER * K`` nodes.  The matching order is drawn from the
   seed, so every restart (``n_init``) coarsens differently.
2. **Partition the coarsest graph** from many starts (:mod:`._coarsest`:
   random, region growing, spectral, recursive bisection), each refined by
   the solver; the ``Effort.n_keep`` best are improved by split-and-merge moves and
   pair re-bisections (:mod:`._moves`).
3. **Uncoarsen**: project level by level, refining at every level with the
   solver (proximal steps, then exact single-node moves) and with
   split-and-merge moves that extract whole coarse nodes.  While the levels
   are small (up to ``Effort.beam_max_nodes`` nodes and
   ``Effort.beam_max_entries`` entries, fewer on random graphs) all kept
   candidates go up; above, only the best by ``f`` (``f`` is preserved
   exactly by projection, so they compare fairly).
4. A **spectral candidate** on graphs where ``nnz * K`` is at most
   ``Effort.spectral_budget``: the coarsest graph's leading eigenvectors,
   projected, refined by a few LOBPCG iterations on the input graph and
   discretized, then refined by the solver.  The coarse starts see the
   input graph through coarse graphs that distort its shape; on meshes the
   spectral embedding of the input graph finds the global arrangement.
5. **V-cycles** on the finest partitions: coarsen again within its clusters
   (so that every level represents it), re-bisect pairs of clusters and
   split-and-merge on the coarsest levels, and refine back down, with
   localized **FM searches** (:func:`._moves.fm_refine`: strips of a
   boundary moved together, which single moves cannot; on meshes the
   boundaries then follow light edges or move a few rows over) after the
   solver on every level; repeated
   while ``f`` rises by a relative ``Effort.vcycle_min_gain``, at most
   ``Effort.n_vcycles`` times (fewer on graphs of over
   ``Effort.large_entries`` stored entries, where a cycle costs a few
   passes over the graph).

The FM searches also refine the spectral candidate and the levels of step
3 that only the best candidate goes down.

6. **Pairwise flows** (:func:`._flow.flow_refine`) on the final labels of a
   sparse graph: for each pair of adjacent clusters, the minimum cut of a
   corridor of their boundary (KaHIP's flow refinement), kept when it
   raises ``f``.  A mesh boundary that should run a few rows over, or along
   a line of light edges, is a local optimum of single moves and FM
   searches; a minimum cut moves the whole region at once.

How much of 2-6 is done is an :class:`Effort`: ``SPARSE`` for sparse
graphs, the lighter ``DENSE`` for dense (feature) graphs.  The init
``"multilevel_fast"`` takes ``SPARSE_FAST`` and ``DENSE_FAST``: one pass
down and up (steps 1-3, with fewer coarse starts and no pair
re-bisections below the coarsest graph).

Every step only accepts what raises ``f``, so the labels it returns are at
least as good as any start it refined.
"""

from dataclasses import dataclass, replace

import numpy as np
import scipy.sparse as sp

from .._log import log_stage
from .._solver import SolverOptions
from .._stats import cluster_statistics, n_entries, objective_of
from ._coarsest import coarse_starts
from ._flow import flow_refine
from ._hierarchy import INPUT_SOURCE_MIN_ENTRIES, LARGE_ENTRIES, Hierarchy
from ._moves import fm_refine, pair_rebisection, refine, split_merge
from ._simple import fill_empty
from ._spectral import leading_vectors, spectral_embedding_labels

__all__ = ["DENSE", "DENSE_FAST", "FAST", "SPARSE", "SPARSE_FAST", "Effort",
           "multilevel_labels"]


@dataclass(frozen=True)
class Effort:
    """How much work the scheme does beyond one pass down and up.

    Attributes
    ----------
    n_starts : int
        Random and region-growing starts on the coarsest graph, each.
    starts_times_k : int
        At least this many over ``K`` (more starts for few clusters, whose
        coarsest graph is tiny: with ``K = 2`` the ring-separating seeds of
        noisy circles are drawn by few starts).
    n_keep : int
        Coarse candidates improved and carried up.
    beam_max_nodes : int
        Above this level size only the best candidate goes up.
    beam_max_entries, beam_max_entries_random : int
        Nor above this many stored entries; on a random graph (where a
        matching kept most entries) above the second.  Its small levels are
        dense (a 1M-node SBM's 30k- and 3k-node levels hold 7.8M and 3.8M
        entries), and its candidates gain little from the beam there
        (``benchmarks/results/beam_entries.md``).
    n_vcycles : int
        At most; ``n_vcycles_large`` on graphs of more than ``large_entries``
        stored entries (where a cycle costs a few passes over the graph).
    vcycle_min_gain : float
        Another V-cycle only after a relative gain of ``f`` this large.
    pair_per_cluster : int
        Pair re-bisections on levels of at most this many nodes per cluster.
    spectral_budget : int
        A spectral candidate of the input graph when ``nnz * K`` is at most
        this (0: never).  On the peer suite it cost a median 1.55x the
        fit's time, for 21 NCuts lower by up to 27 % and 10 higher by at
        most 2.3 % (``benchmarks/results/spectral.md``).
    spectral_start_budget : int
        The spectral start of the coarsest graph (``n_c`` nodes, about
        ``30 K``) when ``n_c * K**2`` is at most this: its eigensolve of
        ``K`` vectors and their k-means grow as ``K**3``.  The default keeps
        it at any K (at K = 128 and 256 it lowers the NCut by up to 4.6 %
        for 20-47 % of the fit's time); ``init="multilevel_fast"`` stops at
        1e7.
    fm_stall : int
        FM searches (:func:`._moves.fm_refine`) after the solver on every
        level of the last pass down and of the V-cycles, and on the spectral
        candidate, each search stopping after this many moves without a new
        best (0: no FM).
    fm_rounds : int
        Rounds of FM searches per level, at most.
    fm_alpha : float
        Of the adaptive rule that stops a search whose moves lose steadily.
    fm_passes : float
        A round of FM searches stops after reading this many times the
        entries of the level's graph.
    fm_min_gain : float
        On levels of more than ``large_entries`` stored entries, the FM
        searches stop for the rest of the restart (V-cycles included) once
        they raise ``f`` by less than this relative amount on
        ``fm_gate_levels`` such levels in a row of the first pass down: on
        random graphs every node is on a boundary and a round costs a few
        passes of the solver for gains of about 1e-6 (on a 1M-node SBM they
        took 27 % of the fit).
    fm_gate_levels : int
        See ``fm_min_gain``.  With 1, one large level of low gain closed
        the gate on some pixel graphs whose finer levels still gained, at a
        cost of up to 1.2 % in NCut (``benchmarks/results/fm_gate.md``).
    fm_beam : bool
        FM searches also on the levels that all kept candidates go up
        (``benchmarks/results/fm_beam.md``: lower NCuts on the grids and
        random geometric graphs, higher on noisy circles and on a few pixel
        graphs, at 1.0-1.5x the time; off by default).
    flow_rounds : int
        Rounds of pairwise max-flow refinement (:func:`._flow.flow_refine`)
        of the final labels (0: none): on meshes, the boundaries that only
        moving a whole region at once improves.
    flow_fm_rounds : int
        After flows that raise ``f``, FM searches from the boundaries they
        drew, then flows again while both gain, at most this many times.
    flow_fractions : tuple of float
        Corridor sizes tried per pair: each cluster gives at most this
        fraction of its volume.
    flow_work : float
        The flows stop once their networks hold this many times the entries
        of the graph (in a comparison on the grid, geometric, pixel, LFR
        and SBM graphs of the peer suite, 4 gave nearly the NCuts of 8 at
        0.8x the flows' time).
    flow_large : bool
        Flows also on graphs of more than ``large_entries`` entries, where
        the FM gate is open, with ``flow_fractions_large`` and
        ``flow_work_large``.  Off by default, for their time.  On the large
        graphs of the peer suite (``benchmarks/results/flow_large.md``)
        these light flows, alternating with FM searches
        (``flow_fm_rounds``), lowered NCut by 0-2.7 % on 60,000-pixel
        graphs and by 1.5-10.9 % on 100k-node kNN, mesh and geometric
        graphs (nothing on SBMs), at 1.0-2.6x the fit's time, and the
        small-graph settings gained up to 4 % more, at 1.0-8.0x.  Their
        minimum cuts take 0.06-0.25 us per entry of a network there
        (Boykov-Kolmogorov; 0.17-0.84 us with the Dinic kernel before it,
        when the light flows cost 1.2-3.7x the fit's time).
    flow_fractions_large, flow_work_large
        ``flow_fractions`` and ``flow_work`` on those graphs.
    vcycle_fm_gate : bool
        No V-cycle on a graph of more than ``large_entries`` entries where
        the FM gate has closed (``fm_min_gain``: local searches gained next
        to nothing on its large levels).  Off by default: on the 100k- and
        1M-node SBMs, where the gate closes, the fit takes 0.68-0.81x the
        time but ends 1e-5 to 1.8e-5 (relative) higher in NCut; dropping
        the V-cycle on every large graph (``n_vcycles_large=0``) costs up
        to 23 % on pixel graphs and 11 % on random geometric ones
        (``benchmarks/results/vcycle.md``).
    lp_shrink : float
        Once a matching keeps more than ``LP_TRIGGER`` (0.9) of its level's
        entries, the next levels of more than ``large_entries`` stored
        entries are coarsened by label propagation clustering
        (:func:`._coarsen.cluster_csr`, KaMinPar's coarsening), each
        cluster's volume at most this many times the level's mean degree,
        instead of a matching (0: matchings only).  A matching halves the
        nodes at best and, on a random graph, keeps most entries: a 1M-node
        SBM needs 11 levels of 7.5M-9.5M entries each.  On meshes, pixel
        and kNN graphs a matching keeps about half, and they keep their
        matchings.
    input_source_entries : int
        On a random graph of more stored entries than this, the levels
        drawn from a level of over half the input's entries are contracted
        from the input, and only one such level is held at a time
        (:mod:`._hierarchy`): a 1M-node SBM's fit peaks at 1.95-1.98x its
        CSR size, not 2.85x, for about 5-10 % more time; 20,000-node SBMs
        of 300k-400k entries fit up to 1.2x slower that way, and their
        levels are small.
    """

    n_starts: int = 8
    starts_times_k: int = 48
    n_keep: int = 4
    beam_max_nodes: int = 50_000
    beam_max_entries: int = 1_000_000
    beam_max_entries_random: int = 200_000
    n_vcycles: int = 3
    n_vcycles_large: int = 1
    large_entries: int = LARGE_ENTRIES
    input_source_entries: int = INPUT_SOURCE_MIN_ENTRIES
    vcycle_min_gain: float = 1e-4
    pair_per_cluster: int = 60
    spectral_budget: int = 2_000_000
    spectral_start_budget: int = 10**18
    fm_stall: int = 50
    fm_rounds: int = 2
    fm_alpha: float = 3.0
    fm_passes: float = 2.0
    fm_min_gain: float = 1e-5
    fm_gate_levels: int = 2
    fm_beam: bool = False
    flow_rounds: int = 3
    flow_fm_rounds: int = 2
    flow_fractions: tuple = (0.5, 0.25, 0.125, 0.0625)
    flow_work: float = 4.0
    flow_large: bool = False
    flow_fractions_large: tuple = (0.25,)
    flow_work_large: float = 1.0
    vcycle_fm_gate: bool = False
    lp_shrink: float = 16.0


# Chosen on the benchmark suites (benchmarks/bench_peers.py for sparse
# graphs; dense token graphs for DENSE, see docs/user_guide.rst, "init").
SPARSE = Effort()
# Dense graphs are feature graphs (image tokens): there the extra candidates
# and V-cycles changed the NCut of 4 of 30 token graphs by 1e-5 at twice
# the time,
# and the spectral candidate (meant for meshes) is a dense eigensolve.
DENSE = Effort(n_keep=1, n_vcycles=0, spectral_budget=0, fm_stall=0, flow_rounds=0)
# init="multilevel_fast": one pass down and up, the FM searches kept; on the
# peer suite's 71 graphs of 1e3-1e5 nodes a median 2.5x METIS's time (the
# default 18x) for a median 2.5 % more NCut than the default's
# (benchmarks/results/fast_init.md)
# It also skips the coarsest graph's spectral start above K of about 70
# (n_c * K**2 > 1e7): at K = 128 and 256 that start was a median 63 % and
# 78 % of its time; without it the fit takes 0.37x and 0.22x the time for
# 0.9 % and 1.5 % more NCut (benchmarks/results/many_clusters.md)
FAST = dict(n_keep=1, n_starts=4, starts_times_k=16, pair_per_cluster=0,
            spectral_budget=0, spectral_start_budget=10**7, n_vcycles=0,
            n_vcycles_large=0, flow_rounds=0)
SPARSE_FAST = replace(SPARSE, **FAST)
DENSE_FAST = replace(DENSE, **FAST)
# exact-move sweeps per refinement of a coarse level (the finest level gets
# the solver's own max_polish): the next level refines again
COARSE_POLISH = 3


def _f(W, degrees, labels, n_clusters):
    return objective_of(*cluster_statistics(W, labels, n_clusters, degrees))


class _FMGate:
    """Whether a restart's FM searches run on large levels (of more than
    ``effort.large_entries`` entries). The first pass down decides: they
    stop once, on ``effort.fm_gate_levels`` of its large levels in a row,
    they raise ``f`` by less than a relative ``effort.fm_min_gain``; the
    V-cycles then keep that decision (their coarse levels, within the
    clusters, seldom gain, even where the fine ones do)."""

    def __init__(self):
        self.large = True
        self.frozen = False
        self.low = 0  # large levels of low gain in a row

    def record(self, gain, f, effort):
        """Count a large level's FM gain (while not frozen)."""
        if self.frozen:
            return
        self.low = self.low + 1 if gain < effort.fm_min_gain * abs(f) else 0
        if self.low >= effort.fm_gate_levels:
            self.large = False


def _fm(W, degrees, labels, f, n_clusters, rng, effort, gate=None):
    """FM searches after a refinement (when ``effort`` asks for them, on a
    sparse graph, and ``gate`` lets them on a large one); returns
    ``(labels, f)``, never worse."""
    if effort is None or not effort.fm_stall or not sp.issparse(W):
        return labels, f
    large = gate is not None and n_entries(W) > effort.large_entries
    if large and not gate.large:
        return labels, f
    y, f2 = fm_refine(W, degrees, labels, n_clusters, rng, max_stall=effort.fm_stall,
                      max_rounds=effort.fm_rounds, alpha=effort.fm_alpha,
                      max_passes=effort.fm_passes)
    if large:
        gate.record(f2 - f, f, effort)
    return (y, f2) if f2 > f else (labels, f)


def _flows(W, degrees, labels, f, n_clusters, rng, effort, large, gate):
    """Pairwise flows (:func:`._flow.flow_refine`) and, after flows that
    raised ``f``, FM searches from the boundaries they drew, alternating
    while both gain (``effort.flow_fm_rounds`` times at most); returns
    ``(labels, f)``, never worse."""
    memo = {}  # the cuts of the networks solved so far (flow_refine's memo)

    def flows(y):
        return flow_refine(
            W, degrees, y, n_clusters, max_rounds=effort.flow_rounds,
            fractions=effort.flow_fractions_large if large else effort.flow_fractions,
            max_work=effort.flow_work_large if large else effort.flow_work,
            memo=memo)

    best = (labels, f)
    y, f2 = flows(labels)
    for _ in range(effort.flow_fm_rounds):
        if f2 <= best[1]:
            break
        best = (y, f2)
        y, f2 = _fm(W, degrees, y, f2, n_clusters, rng, effort, gate)
        if f2 <= best[1]:
            break
        best = (y, f2)
        y, f2 = flows(y)
    return (y, f2) if f2 > best[1] else best


def _uncoarsen(H, labels, level, n_clusters, rng, options, to_level=0, pairs=0,
               release=False, effort=None, gate=None):
    """Project ``labels`` from ``level`` to ``to_level``, refining on every
    level on the way (solver, FM searches when ``effort`` has them, then
    extraction moves; pair re-bisections on the levels of at most
    ``pairs * K`` nodes)."""
    K = n_clusters
    f = None
    for lv in range(level - 1, to_level - 1, -1):
        labels = labels[H.maps[lv]]
        Wl = dl = None  # the coarser level's graph: not held while contracting
        if release:  # the last pass down: the coarser levels are done with
            H.release(lv + 1)
        Wl, dl = H.level(lv)
        lv_opt = options if lv == 0 else options.replace(
            max_polish=min(options.max_polish, COARSE_POLISH))
        labels, f = refine(Wl, dl, labels, K, lv_opt)
        labels, f = _fm(Wl, dl, labels, f, K, rng, effort, gate)
        if Wl.shape[0] <= pairs * K:
            labels, f = pair_rebisection(Wl, dl, labels, K, rng, options)
        labels, f = split_merge(Wl, dl, labels, K, rng, options, bisect=False,
                                max_rounds=3)
    return labels, f


def _vcycle(W, degrees, labels, n_clusters, rng, options, effort, gate=None):
    """One V-cycle from ``labels``: returns ``(labels, f)``, never worse."""
    K = n_clusters
    H = Hierarchy(W, degrees, K, rng, part=labels, shrink=effort.lp_shrink,
                  large_entries=effort.large_entries,
                  input_source_entries=effort.input_source_entries)
    top = len(H.maps)
    Wc, dc = H.level(top)
    yc, _ = refine(Wc, dc, H.parts[top], K, options)
    if Wc.shape[0] <= effort.pair_per_cluster * K:
        yc, _ = pair_rebisection(Wc, dc, yc, K, rng, options)
    yc, fc = split_merge(Wc, dc, yc, K, rng, options, bisect=top > 0)
    if top == 0:
        return yc, fc
    return _uncoarsen(H, yc, top, K, rng, options, pairs=effort.pair_per_cluster,
                      release=True, effort=effort, gate=gate)


def multilevel_labels(W, degrees, n_clusters, rng, options=None, effort=None,
                      verbose=0):
    """Labels of one restart of the multilevel V-cycle scheme.

    Parameters
    ----------
    W : CSR matrix or ndarray of shape (n, n)
        Symmetric nonnegative affinity with positive degrees.
    degrees : ndarray of shape (n,)
    n_clusters : int
    rng : numpy.random.Generator
        Draws the matchings and the coarse starts.
    options : SolverOptions, default=None
        Options of the refinements.
    effort : Effort, default=None
        ``SPARSE`` for a sparse ``W``, ``DENSE`` for a dense one.
    verbose : int, default=0
        When > 0, log the hierarchy and ``f`` on each level (stage ``level``
        of the ``sklearn_falcon`` logger).

    Returns
    -------
    labels : ndarray of shape (n,)
        Refined on ``W``; every cluster non-empty.
    f : float
        Their normalized association.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._inits._multilevel import multilevel_labels
    >>> W = np.kron(np.eye(3), np.ones((5, 5))) + 0.01
    >>> y, f = multilevel_labels(W, W.sum(1), 3, np.random.default_rng(0))
    >>> sorted(np.bincount(y).tolist()), round(f, 3)
    ([5, 5, 5], 2.942)
    """
    opt = SolverOptions() if options is None else options
    eff = effort if effort is not None else (SPARSE if sp.issparse(W) else DENSE)
    K = n_clusters
    n = W.shape[0]
    if K == 1:
        return np.zeros(n, dtype=np.int64), _f(W, degrees, np.zeros(n, np.int64), 1)
    H = Hierarchy(W, degrees, K, rng, shrink=eff.lp_shrink,
                  large_entries=eff.large_entries,
                  input_source_entries=eff.input_source_entries)
    top = len(H.maps)
    Wc, dc = H.level(top)
    if verbose:
        log_stage("level", "hierarchy of %d level%s, %s nodes", top + 1,
                  "s"[:top > 0], H.sizes)
    cands = []
    n_starts = max(eff.n_starts, eff.starts_times_k // K)
    spectral = Wc.shape[0] * K * K <= eff.spectral_start_budget
    for y in coarse_starts(Wc, dc, K, rng, n_random=n_starts, n_grow=n_starts,
                           spectral=spectral, options=opt):
        y, f = refine(Wc, dc, fill_empty(y, K, rng), K, opt)
        cands.append((f, len(cands), y))
    cands.sort(key=lambda c: (-c[0], c[1]))
    kept = []
    memo = {}  # the candidates' pairs often share a union of two clusters
    for _, i, y in cands[:eff.n_keep]:
        y, f = split_merge(Wc, dc, y, K, rng, opt)
        y, f = pair_rebisection(Wc, dc, y, K, rng, opt, memo=memo)
        kept.append((f, i, y))
    kept.sort(key=lambda c: (-c[0], c[1]))
    if verbose:
        log_stage("level", "%d (%d nodes): %d coarse starts, best f=%.6f", top,
                  H.sizes[top], len(cands), kept[0][0])
    # carry the candidates up while the levels are small, then the best
    level = top
    cap = min(eff.beam_max_entries, eff.beam_max_entries_random if H.random else np.inf)
    while (level > 0 and len(kept) > 1 and H.sizes[level - 1] <= eff.beam_max_nodes
           and H.entries[level - 1] <= cap):
        up = []
        for _, i, y in kept:
            y, f = _uncoarsen(H, y, level, K, rng, opt, to_level=level - 1,
                              effort=eff if eff.fm_beam else None)
            up.append((f, i, y))
        kept = sorted(up, key=lambda c: (-c[0], c[1]))
        level -= 1
        if verbose:
            log_stage("level", "%d (%d nodes): %d candidates, best f=%.6f", level,
                      H.sizes[level], len(kept), kept[0][0])
    f, _, y = kept[0]
    gate = _FMGate()
    if level > 0:
        y, f = _uncoarsen(H, y, level, K, rng, opt, release=True, effort=eff,
                          gate=gate)
        if verbose:
            log_stage("level", "0 (%d nodes): refined, f=%.6f", n, f)
    finals = [(f, y)]
    if top > 0 and n_entries(W) * K <= eff.spectral_budget:
        # the spectral embedding of the input graph, from the coarsest
        # graph's projected: the global shape of a mesh, which coarse
        # starts miss (their coarse graph distorts it)
        start = H.project(leading_vectors(Wc, dc, K, rng), top)
        ys = spectral_embedding_labels(W, degrees, K, rng, start=start)
        ys, fs = refine(W, degrees, ys, K, opt)
        ys, fs = _fm(W, degrees, ys, fs, K, rng, eff, gate)
        finals.append((fs, ys))
        if verbose:
            log_stage("level", "0 (%d nodes): spectral candidate, f=%.6f", n, fs)
    # the hierarchy's levels hold about as many entries as W each on graphs
    # that coarsen slowly (7.8x the CSR in all on a 1M-node SBM): free them
    # before a V-cycle builds its own
    del H, Wc, dc
    large = n_entries(W) > eff.large_entries
    if large:
        finals = [max(finals, key=lambda c: c[0])]
    n_vcycles = min(eff.n_vcycles, eff.n_vcycles_large) if large else eff.n_vcycles
    if large and eff.vcycle_fm_gate and not gate.large:
        n_vcycles = 0
    out = []
    gate.frozen = True
    for f, y in finals:
        for _ in range(n_vcycles):
            y2, f2 = _vcycle(W, degrees, y, K, rng, opt, eff, gate)
            gain = f2 - f
            if verbose:
                log_stage("level", "V-cycle: f=%.6f -> %.6f", f, max(f, f2))
            if gain > 0:
                y, f = y2, f2
            if gain <= eff.vcycle_min_gain * max(1.0, abs(f)):
                break
        out.append((f, y))
    f, y = max(out, key=lambda c: c[0])
    if eff.flow_rounds and sp.issparse(W) and (
            not large or (eff.flow_large and gate.large)):
        y, f = _flows(W, degrees, y, f, K, rng, eff, large, gate)
        if verbose:
            log_stage("level", "0 (%d nodes): pairwise flows, f=%.6f", n, f)
    return y, f
