"""The FM searches of the multilevel start: the default FalconNCut with them
(``new``) and without them (``old``: ``Effort.fm_stall = 0``, the start as
it was before), side by side on the graphs of the peer benchmark, against
the best peer NCut recorded in ``results/peers.json``.

Usage::

    python -m benchmarks.bench_fm                      # all families but scale
    python -m benchmarks.bench_fm --families grid shapes --repeats 3
    python -m benchmarks.bench_fm --rewrite            # tables from fm.json
    python -m benchmarks.bench_fm --study flow         # the max-flow refinement
    python -m benchmarks.bench_fm --study spectral     # the spectral candidate

The peers are not run again: their NCuts are those of the last
``python -m benchmarks.bench_peers`` run (``results/peers.json``).  Both
variants are fitted in the same process, interleaved (``--repeats`` rounds,
fastest kept), after a warm-up fit of each, so the time ratio ``new/old``
is measured side by side; on a shared machine read the ratios, not the
seconds.  Writes ``STUDY.md`` and ``STUDY.json`` (``fm`` by default) in ``--out``
(default ``benchmarks/results``).
"""

import argparse
import dataclasses
import json
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


# what each study switches off in ``old``; ``new`` is the default
STUDIES = {"fm": {"fm_stall": 0}, "flow": {"flow_rounds": 0},
           "spectral": {"spectral_budget": 0}}


def _variants(study="fm"):
    from sklearn_falcon._inits import _multilevel as ML

    new = ML.SPARSE
    return ML, {"old": dataclasses.replace(new, **STUDIES[study]), "new": new}


def _fit(ML, effort, W, K, n_init=1, seed=0):
    """``(ncut_, seconds, labels_)`` of the default FalconNCut on ``W`` with
    the sparse ``Effort`` of its multilevel start set to ``effort``."""
    from sklearn_falcon import FalconNCut

    saved = ML.SPARSE
    ML.SPARSE = effort  # the sparse default of multilevel_labels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            est = FalconNCut(K, affinity="precomputed", random_state=seed,
                             n_init=n_init).fit(W)
            seconds = time.perf_counter() - t0
    finally:
        ML.SPARSE = saved
    return float(est.ncut_), seconds, est.labels_


def _warm_up(ML, variants):
    """Fit both variants on small graphs whose paths call every kernel the
    graphs of the runs do, so that no timed fit compiles one: an SBM, and
    a pixel graph (the only one of these whose flows move nodes, and whose
    FM searches count the weights to own clusters)."""
    from benchmarks.families import pixel_graph
    from benchmarks.graphs import sbm_graph

    Ws, _ = sbm_graph(300, 3, avg_degree=10, p_in_ratio=0.9, seed=1)
    Wp, _ = pixel_graph("coffee", (50, 75))
    for W, K in ((Ws, 3), (Wp, 4)):
        for eff in variants.values():
            _fit(ML, eff, W, K)


def measure(args):
    from benchmarks.families import graph_specs
    from benchmarks.peers_report import _ari

    peers = {r["graph"]: r for r in
             json.loads((RESULTS / "peers.json").read_text())["rows"]}
    ML, variants = _variants(args.study)
    _warm_up(ML, variants)
    rows = []
    for spec in graph_specs("full", families=args.families, pattern=args.graphs):
        if spec.family == "scale":
            continue
        g = spec.build()
        runs = {v: [] for v in variants}
        for _ in range(args.repeats):
            for name, eff in variants.items():
                runs[name].append(_fit(ML, eff, g.W, g.K, args.n_init))
        rec = peers.get(g.name)
        row = {"graph": g.name, "family": g.family, "n": int(g.W.shape[0]),
               "K": g.K,
               "best_peer": rec["best_peer"] if rec else None,
               "best_ncut": rec["best_ncut"] if rec else None,
               "ncut": {v: runs[v][0][0] for v in variants},
               "seconds": {v: min(r[1] for r in runs[v]) for v in variants}}
        if g.y_true is not None:  # the ARI of the first round's labels
            row["ari"] = {v: _ari(g.y_true, runs[v][0][2]) for v in variants}
            row["best_ari"] = rec["best_ari"] if rec else None
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _ratio(x, best):
    if best is None:
        return float("nan")
    if best <= 0:
        return 1.0 if x <= 1e-12 else float("inf")
    return x / best


def _line(r):
    b = r["best_ncut"]
    return (f"| {r['graph']} | {r['n']} | {r['K']} | {r['best_peer']} | "
            f"{b:.4g} | {_ratio(r['ncut']['old'], b):.4f} | "
            f"{_ratio(r['ncut']['new'], b):.4f} | "
            f"{r['ncut']['new'] / r['ncut']['old'] if r['ncut']['old'] > 0 else 1.0:.4f} | "
            f"{r['seconds']['old']:.3f} | "
            f"{r['seconds']['new'] / r['seconds']['old']:.2f} |")


_TEXT = {
    "fm": ("FM searches in the multilevel start",
           "`old` = the default FalconNCut without FM searches "
           "(`Effort.fm_stall=0`: the start before them); `new` = the default "
           "(FM searches in the V-cycles, on the spectral candidate and on the "
           "levels only the best candidate goes down).",
           "the FM searches"),
    "flow": ("Pairwise max-flow refinement of the multilevel start",
             "`old` = the default FalconNCut without the flows "
             "(`Effort.flow_rounds=0`); `new` = the default (rounds of "
             "pairwise max-flow refinement of the start's final labels, "
             "`sklearn_falcon/_inits/_flow.py`).",
             "the flows"),
    "spectral": ("The spectral candidate of the multilevel start",
                 "`old` = the default FalconNCut without the spectral candidate "
                 "(`Effort.spectral_budget=0`); `new` = the default (on sparse "
                 "graphs with `nnz * K <= 2e6`, the coarsest graph's eigenvectors "
                 "projected, refined by at most 30 LOBPCG iterations on the input "
                 "graph and discretized, then refined, FM-searched and V-cycled "
                 "beside the multilevel candidate; the better one is kept).",
                 "the spectral candidate"),
}


def write(rows, meta, out):
    study = meta.get("study", "fm")
    title, what, they = _TEXT[study]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{study}.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                  indent=1))
    fam = {}
    for r in rows:
        fam.setdefault(r["family"], []).append(r)
    lines = [
        f"## {title}: old against new",
        "",
        f"`{meta['command']}` (`benchmarks/bench_fm.py`); {meta['repeats']} "
        "interleaved round(s), fastest time kept; the machine was shared "
        "(2 cores, several other jobs), so read the ratios, not the seconds. "
        f"{what} Best peer: the lowest "
        "peer NCut recorded in `results/peers.json` (peers not re-run).",
        "",
        "### Per family",
        "",
        "W/L vs best: graphs at or below the best peer / above it. "
        f"new<old, new>old: graphs whose NCut {they} lowered / raised "
        "(relative change over 1e-9).",
        "",
        "| family | graphs | old W/L vs best | new W/L vs best | new<old | "
        "new>old | worst new/old | median time new/old | max time new/old |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rs in list(fam.items()) + [("all", rows)]:
        def wins(v):
            w = sum(_ratio(r["ncut"][v], r["best_ncut"]) <= 1 + 1e-9 for r in rs)
            return f"{w}/{len(rs) - w}"
        rel = [r["ncut"]["new"] / r["ncut"]["old"] if r["ncut"]["old"] > 0 else 1.0
               for r in rs]
        t = [r["seconds"]["new"] / r["seconds"]["old"] for r in rs]
        lines.append(f"| {name} | {len(rs)} | {wins('old')} | {wins('new')} | "
                     f"{sum(x < 1 - 1e-9 for x in rel)} | "
                     f"{sum(x > 1 + 1e-9 for x in rel)} | {max(rel):.4f} | "
                     f"{np.median(t):.2f} | {max(t):.2f} |")
    lines += ["", "### Per graph", "",
              "| graph | n | K | best peer | best NCut | old/best | new/best | "
              "new/old | old s | time new/old |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_line(r) for r in rows]
    truth = [r for r in rows if r.get("ari") and r.get("best_ari") is not None]
    if truth:
        ok = {v: sum(r["ari"][v] >= r["best_ari"] - 0.02 for r in truth)
              for v in ("old", "new")}
        lines += ["", "### ARI (graphs with a ground truth)", "",
                  f"Against the ARI of the best-NCut peer recorded in "
                  f"`peers.json`: ARI at least that minus 0.02 on "
                  f"{ok['old']}/{len(truth)} graphs (old) and "
                  f"{ok['new']}/{len(truth)} (new).", "",
                  "| graph | best peer | its ARI | old ARI | new ARI |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['graph']} | {r['best_peer']} | {r['best_ari']:.4f} | "
                  f"{r['ari']['old']:.4f} | {r['ari']['new']:.4f} |" for r in truth]
    (out / f"{study}.md").write_text("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="*", default=None)
    ap.add_argument("--graphs", default=None, help="names matching this regex")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--n-init", type=int, default=1)
    ap.add_argument("--study", choices=sorted(STUDIES), default="fm",
                    help="what `old` switches off (writes STUDY.md, STUDY.json)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--rewrite", action="store_true",
                    help="only write STUDY.md again from OUT/STUDY.json")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.rewrite:
        data = json.loads((out / f"{args.study}.json").read_text())
        data["meta"].setdefault("study", args.study)
        write(data["rows"], data["meta"], out)
        return
    from benchmarks.families import graph_specs

    if not [s for s in graph_specs("full", families=args.families,
                                   pattern=args.graphs) if s.family != "scale"]:
        ap.error("--families and --graphs match no graph (the scale family is "
                 "not run)")
    meta = {"command": "python -m benchmarks.bench_fm " + shlex.join(
        sys.argv[1:] if argv is None else argv), "repeats": args.repeats,
        "study": args.study}
    write(measure(args), meta, out)


if __name__ == "__main__":
    main()
