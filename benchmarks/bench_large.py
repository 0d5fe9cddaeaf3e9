"""Variants of the multilevel start that differ only on large graphs, side
by side with the default, with METIS in the same run.  The studies:

``vcycle``
    The V-cycle: kept (the default), dropped (``Effort.n_vcycles_large =
    0``), or dropped only where the FM gate has closed
    (``Effort.vcycle_fm_gate``).  Writes ``vcycle.md`` / ``.json``.
``fm-gate``
    The gate of the FM searches on large levels: closing after
    ``Effort.fm_gate_levels`` (the default) large levels of low gain in a
    row, after one, or never (``fm_min_gain = 0``).  Writes
    ``fm_gate.md`` / ``.json``.
``flow``
    The pairwise max-flow refinement of the final labels on large graphs:
    off by default, against light flows where the FM gate is open
    (``Effort.flow_large``) and against the settings of smaller graphs.
    Writes ``flow_large.md`` / ``.json``.
``lp``
    The coarsening of random graphs: label propagation clustering once a
    matching keeps most entries (``Effort.lp_shrink``, the default 16)
    against matchings only and two other cluster sizes.  Writes
    ``lp_coarsening.md`` / ``.json``.
``beam``
    The beam of coarse candidates: carried up through the small levels
    only while these also hold at most ``Effort.beam_max_entries`` entries
    (``Effort.beam_max_entries_random`` on random graphs; the default),
    without the random-graph cap, or on every level of at most
    ``Effort.beam_max_nodes`` nodes (the rule before).  Writes
    ``beam_entries.md`` / ``.json``.
``hierarchy``
    The coarse levels of large random graphs: contracted from the input,
    one held at a time (``Effort.input_source_entries``, the default on
    graphs of over 2M entries), against contractions of each level from
    its finer neighbour (the rule before).  The fit's peak memory is
    measured in fresh processes by ``python -m benchmarks.bandwidth
    --child-memory sbm 1000000``.  Writes ``hierarchy.md`` / ``.json``.
``fast``
    ``init="multilevel_fast"`` (``Effort`` ``SPARSE_FAST``: one pass down
    and up, fewer coarse starts, no pair re-bisections below the coarsest
    graph, no spectral candidate, V-cycles or flows) against the default,
    on any graphs of the peer benchmark (``--graphs``): unlike the studies
    above, it differs on graphs of every size.  Writes ``fast_init.md`` /
    ``.json``.
``many``
    ``init="multilevel_fast"`` against the default at more clusters than the
    suite's K (``--k 64,128,256``): the cost of the multilevel start as K
    grows.  Writes ``many_clusters.md`` / ``.json``.
``metis``
    No variant: the default alone against METIS's best configuration, in
    one run, on any graphs of the peer benchmark (``--graphs``; for
    example its graphs of 1,000 to 100,000 nodes, whose peer run is long
    because it also runs every peer and ``n_init=10``).  Writes
    ``metis_time.md`` / ``.json``.

Usage::

    python -m benchmarks.bench_large --study vcycle --seeds 3
    python -m benchmarks.bench_large --study fm-gate --graphs '200x300'
    python -m benchmarks.bench_large --study metis --repeats 3 \
        --graphs '^(pixel|grid[23]d|rgg[23]d|circles|moons|digits|lfr|sbm)-'
    python -m benchmarks.bench_large --study fast --repeats 3 \
        --graphs '^(pixel|grid[23]d|rgg[23]d|circles|moons|digits|lfr|sbm|scale)-'
    python -m benchmarks.bench_large --study many --k 64,128,256

The graphs: those of the peer benchmark (``benchmarks/families.py``) with
over ``Effort.large_entries`` stored entries, where the variants differ
(the four 200x300 pixel graphs, the 20,000-node SBMs and the scale group);
on smaller graphs the variants are the same code path (the flows on them
are measured by ``python -m benchmarks.bench_fm --study flow``).  The
variants are fitted in one process, interleaved, after a warm-up fit of each
(``--repeats`` rounds, fastest time kept); METIS runs its grid of
configurations (``benchmarks/peer_jobs.py``, ``METIS_GRID``) once per graph
and seed, and its lowest NCut and that configuration's time are reported.
On a shared machine read the ratios, not the seconds.  Tables go to
``--out`` (default ``benchmarks/results``).
"""

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
GRAPHS = "200x300|sbm-unbalanced-20000|sbm-hier-20000|^scale-"
STUDIES = {
    "vcycle": {
        "file": "vcycle",
        "title": "The V-cycle of the multilevel start on large graphs",
        "variants": {"no V-cycle": {"n_vcycles_large": 0},
                     "no V-cycle where FM gated": {"vcycle_fm_gate": True}},
        "about": "`default` (one V-cycle on graphs of over 200,000 entries); "
                 "`no V-cycle` (`Effort.n_vcycles_large = 0`); `no V-cycle where "
                 "FM gated` (`Effort.vcycle_fm_gate = True`: none where the FM "
                 "gate has closed).",
    },
    "fm-gate": {
        "file": "fm_gate",
        "title": "The gate of the FM searches on large levels",
        "variants": {"gate on one level": {"fm_gate_levels": 1},
                     "no gate": {"fm_min_gain": 0.0}},
        "about": "`default` (FM searches stop on large levels once they gain "
                 "less than a relative `fm_min_gain` = 1e-5 on "
                 "`fm_gate_levels` = 2 large levels in a row of the first pass "
                 "down); `gate on one level` (`fm_gate_levels = 1`, the rule "
                 "before); `no gate` (`fm_min_gain = 0`: FM on every level).",
    },
    "flow": {
        "file": "flow_large",
        "title": "Pairwise flows of the multilevel start on large graphs",
        "variants": {"light flows": {"flow_large": True},
                     "small-graph flows": {"flow_large": True,
                                           "flow_fractions_large":
                                           (0.5, 0.25, 0.125, 0.0625),
                                           "flow_work_large": 4.0}},
        "about": "`default` (no flows on graphs of over 200,000 entries); "
                 "`light flows` (`Effort.flow_large = True`: where the FM gate "
                 "is open, corridors of a quarter of each cluster's volume, "
                 "networks of at most the graph's entries in all); "
                 "`small-graph flows` (the settings of smaller graphs: four "
                 "corridor sizes, 4x the entries).",
    },
    "lp": {
        "file": "lp_coarsening",
        "title": "Label propagation coarsening of random graphs",
        "variants": {"matchings only": {"lp_shrink": 0.0},
                     "lp_shrink=8": {"lp_shrink": 8.0},
                     "lp_shrink=32": {"lp_shrink": 32.0}},
        "about": "`default` (`Effort.lp_shrink = 16`: once a matching keeps "
                 "over 90 % of its level's entries, the next levels of over "
                 "200,000 entries are clustered by size-constrained label "
                 "propagation, each cluster at most 16 times the mean degree "
                 "in volume); `matchings only` (`lp_shrink = 0`, the "
                 "coarsening before); `lp_shrink=8` and `lp_shrink=32` "
                 "(smaller and larger clusters).",
    },
    "beam": {
        "file": "beam_entries",
        "title": "The beam of coarse candidates on levels of many entries",
        "variants": {"no random-graph cap": {"beam_max_entries_random": 10**18},
                     "beam by nodes only": {"beam_max_entries": 10**18,
                                            "beam_max_entries_random": 10**18}},
        "about": "`default` (all kept coarse candidates go up through the "
                 "levels of at most `Effort.beam_max_nodes` = 50,000 nodes "
                 "and `Effort.beam_max_entries` = 1,000,000 stored entries, "
                 "and on a random graph, where a matching kept over 90 % of "
                 "a level's entries, at most `Effort.beam_max_entries_random` "
                 "= 200,000); `no random-graph cap` (1,000,000 entries on "
                 "every graph); `beam by nodes only` (the rule before both: "
                 "levels of at most 50,000 nodes, whatever their entries; on "
                 "a 1M-node SBM the levels of 30k and 3k nodes hold 7.8M and "
                 "3.8M entries).",
    },
    "hierarchy": {
        "file": "hierarchy",
        "title": "The coarse levels of large random graphs: from the input",
        "variants": {"levels from their finer neighbour":
                     {"input_source_entries": 10**18}},
        "about": "`default` (on a random graph of over "
                 "`Effort.input_source_entries` = 2,000,000 entries, a level "
                 "drawn from a level of over half the input's entries is "
                 "contracted from the input through the composed maps, and "
                 "one such level is held at a time); `levels from their finer "
                 "neighbour` (the rule before: every level contracted from "
                 "the one below it, up to 1.5x the input's entries kept). "
                 "The graphs of fewer entries take the same path in both.",
    },
    "fast": {
        "file": "fast_init",
        "title": "init=\"multilevel_fast\" against the default, with METIS",
        "variants": {"multilevel_fast": "SPARSE_FAST"},
        "about": "`default` (`init=\"multilevel\"`); `multilevel_fast` "
                 "(`init=\"multilevel_fast\"`, the `Effort` `SPARSE_FAST`: one "
                 "pass down and up with FM searches, max(4, 16 // K) random "
                 "and as many region-growing coarse starts, no "
                 "pair re-bisections below the coarsest graph, no spectral "
                 "candidate, V-cycles or flows).",
    },
    "many": {
        "file": "many_clusters",
        # its --graphs default: six graphs of 10,000-20,000 nodes (two pixel
        # graphs, a weighted mesh, a geometric graph, an LFR, an SBM)
        "graphs": "^(pixel-(astronaut|coffee)-100x150-K8|grid2d-120x120-w-K4|"
                  "rgg2d-10000-K8|lfr-10000-mu0.3|sbm-unbalanced-20000-K10)$",
        "title": "Many clusters: the default and init=\"multilevel_fast\" "
                 "against METIS at K = 64 to 256",
        "variants": {"multilevel_fast": "SPARSE_FAST",
                     "fast, spectral start at any K":
                         ("SPARSE_FAST", {"spectral_start_budget": 10**18}),
                     "default, spectral start to 1e7":
                         {"spectral_start_budget": 10**7}},
        "about": "`default` (`init=\"multilevel\"`); `multilevel_fast` "
                 "(`init=\"multilevel_fast\"`: the coarsest graph's spectral "
                 "start only where `n_c * K**2` is at most 1e7, "
                 "`Effort.spectral_start_budget`, K up to about 70); `fast, "
                 "spectral start at any K` (the fast init before that limit); "
                 "`default, spectral start to 1e7` (the default with that "
                 "limit, not adopted); on graphs of the peer benchmark "
                 "partitioned into more clusters than the suite's K (`--k`).",
    },
    "metis": {
        "file": "metis_time",
        "title": "The default against METIS, in one run",
        "variants": {},
        "about": "`default` only (the default FalconNCut, its multilevel "
                 "start as on any graph), against METIS's configuration of "
                 "lowest NCut, timed in the same run.",
    },
}


def _variants(study):
    from sklearn_falcon._inits import _multilevel as ML

    base = ML.SPARSE
    out = {"default": base}
    for name, change in STUDIES[study]["variants"].items():
        # a name: one of the module's own efforts (what an init name selects);
        # (name, changes): that effort changed; changes: the default changed
        if isinstance(change, tuple):
            out[name] = dataclasses.replace(getattr(ML, change[0]), **change[1])
        else:
            out[name] = (getattr(ML, change) if isinstance(change, str)
                         else dataclasses.replace(base, **change))
    return ML, out


def _metis(W, K, seed):
    """METIS's grid on ``W``: ``(ncut, seconds, config)`` of its lowest NCut,
    among the partitions with K non-empty clusters when there are any (as
    ``benchmarks/peers_report.py`` picks a peer's best)."""
    from benchmarks.peer_jobs import METIS_GRID, run_job
    from sklearn_falcon.metrics import normalized_cut

    runs = [(float(normalized_cut(W, out["labels"])), out["seconds"], cfg,
             np.unique(out["labels"]).shape[0] == K)
            for cfg in METIS_GRID for out in run_job("metis", W, K, seed=seed, **cfg)]
    pool = [r for r in runs if r[3]] or runs
    return min(pool, key=lambda r: (r[0], r[1]))[:3]


def measure(args):
    from benchmarks.bench_fm import _fit
    from benchmarks.families import graph_specs
    from benchmarks.graphs import sbm_graph

    ML, variants = _variants(args.study)
    Ws, _ = sbm_graph(300, 3, avg_degree=10, p_in_ratio=0.9, seed=1)
    for eff in variants.values():  # compile the kernels of every path
        _fit(ML, eff, Ws, 3)
    rows = []
    ks = [int(k) for k in args.k.split(",")] if args.k else None
    for spec in graph_specs("full", pattern=args.graphs):
        g = spec.build()
        W = g.W.tocsr()
        # the parallel kernels of graphs of over 1M entries compile on first use
        _fit(ML, variants["default"], W, g.K)
        for K, seed in ((K, seed) for K in (ks or [g.K]) if K < W.shape[0] // 4
                        for seed in range(args.seeds)):
            name = g.name if ks is None else f"{g.name.rsplit('-K', 1)[0]}-K{K}"
            runs = {v: [] for v in variants}
            for _ in range(args.repeats):
                for v, eff in variants.items():
                    runs[v].append(_fit(ML, eff, W, K, seed=seed))
            m_ncut, m_s, m_cfg = _metis(W, K, seed)
            row = {"graph": name, "family": g.family, "n": int(W.shape[0]),
                   "nnz": int(W.nnz), "K": K, "seed": seed,
                   "ncut": {v: runs[v][0][0] for v in variants},
                   "seconds": {v: min(r[1] for r in runs[v]) for v in variants},
                   "metis": {"ncut": m_ncut, "seconds": m_s, "config": m_cfg}}
            rows.append(row)
            print(_line(row, list(variants)), flush=True)
    return rows


def _ratio(a, b, digits):
    """``a / b`` with ``digits`` decimals, by :func:`benchmarks.bench_fm._ratio`
    (1 when both are 0, a graph whose components are the clusters: NCut 0;
    inf when only ``b`` is)."""
    from benchmarks.bench_fm import _ratio as ratio

    return f"{ratio(a, b):.{digits}f}"


def _line(r, names):
    nc, s, m = r["ncut"], r["seconds"], r["metis"]
    d = nc["default"]
    cells = [r["graph"], str(r["seed"]), f"{r['nnz']:,}", f"{d:.6f}"]
    for v in names[1:]:
        cells += [_ratio(nc[v], d, 7), _ratio(s[v], s["default"], 2)]
    cells += [_ratio(m["ncut"], d, 7)]
    cells += [_ratio(s[v], m["seconds"], 2) for v in names]
    return "| " + " | ".join(cells) + " |"


def write(rows, meta, out):
    study = STUDIES[meta["study"]]
    names = ["default", *study["variants"]]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{study['file']}.json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=1))
    head = ["graph", "seed", "entries", "default NCut"]
    for v in names[1:]:
        head += [f"{v}: NCut ratio", "time ratio"]
    head += ["METIS: NCut ratio"] + [f"time/METIS: {v}" for v in names]
    lines = [
        f"## {study['title']}",
        "",
        f"`{meta['command']}` (`benchmarks/bench_large.py`); {meta['repeats']} "
        f"interleaved round(s) of the {len(names)} "
        f"variant{'s' if len(names) > 1 else ''}, fastest time kept; "
        "METIS (its configuration grid, lowest NCut) in the same run. Shared "
        "machine (2 cores): read the ratios, not the seconds.",
        "",
        f"Variants: {study['about']} Ratios are to the default's NCut and "
        "time; time/METIS: each variant's time over the time of METIS's best "
        "configuration.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += [_line(r, names) for r in rows]
    worse = {v: sum(r["ncut"][v] > r["ncut"]["default"] * (1 + 1e-9) for r in rows)
             for v in names[1:]}
    better = {v: sum(r["ncut"][v] < r["ncut"]["default"] * (1 - 1e-9) for r in rows)
              for v in names[1:]}
    below = {v: sum(r["ncut"][v] <= r["metis"]["ncut"] for r in rows)
             for v in names}
    ratios = {v: [r["seconds"][v] / r["metis"]["seconds"] for r in rows
                  if r["metis"]["seconds"] > 0] for v in names}
    summary = f"Rows: {len(rows)}."
    if names[1:]:
        summary += (" NCut above / below the default's: "
                    + "; ".join(f"{v} {worse[v]} / {better[v]}" for v in names[1:])
                    + ".")
    summary += (" At or below METIS's NCut: "
                + "; ".join(f"{v} {below[v]}" for v in names) + ".")
    if rows:
        summary += " time/METIS, median [min, max]: " + "; ".join(
            f"{v} {np.median(q):.2f} [{min(q):.2f}, {max(q):.2f}]"
            for v, q in ratios.items() if q) + "."
    lines += [
        "",
        summary,
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in meta["machine"].items())
        + ".",
        "",
    ]
    (out / f"{study['file']}.md").write_text("\n".join(lines))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--study", choices=sorted(STUDIES), default="vcycle")
    p.add_argument("--graphs", default=None,
                   help="regular expression of graph names (default: the "
                        f"study's, else {GRAPHS})")
    p.add_argument("--seeds", type=int, default=1,
                   help="random states 0 .. seeds-1 per graph (default: 1)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--k", default=None,
                   help="comma-separated K to partition each graph into, "
                        "instead of its own (those under n / 4)")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    from benchmarks._report import machine_info

    command = "python -m benchmarks.bench_large " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if args.graphs is None:
        args.graphs = STUDIES[args.study].get("graphs", GRAPHS)
    from benchmarks.families import graph_specs

    if not graph_specs("full", pattern=args.graphs):  # never an empty table
        p.error(f"--graphs {args.graphs!r} matches no graph")
    rows = measure(args)
    if not rows:  # every K of --k at least n / 4: never an empty table
        p.error(f"--k {args.k}: no K under a quarter of the nodes of the graphs")
    meta = {"command": command.strip(), "study": args.study, "repeats": args.repeats,
            "machine": machine_info()}
    write(rows, meta, args.out)


if __name__ == "__main__":
    main()
