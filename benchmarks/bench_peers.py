"""Falcon against every peer on every graph family (issue 15's benchmark).

Usage::

    python -m benchmarks.bench_peers           # full run -> results/peers.md
    python -m benchmarks.bench_peers --quick   # a few graphs a family -> results/quick/
    python -m benchmarks.bench_peers --quick \
        --falcon ml2='{"init": "multilevel", "n_init": 2}'
    python -m benchmarks.bench_peers --families pixel grid --graphs 'coffee|grid2d'
    python -m benchmarks.bench_peers --quick --refresh-peers  # recompute the peers
    python -m benchmarks.bench_peers --quick --rewrite  # tables again from peers.json

On every graph of :mod:`benchmarks.families` it runs, side by side:

* Falcon variants: ``default`` = ``FalconNCut(K, affinity="precomputed",
  random_state=seed)``; ``n_init=10`` (the same with ``n_init=10``); every
  ``--falcon NAME=JSON`` (JSON: a dict of FalconNCut parameters); and the
  diagnostic ``from-best`` = the default started from the best peer's labels
  (``init=labels``), which tells the start from the solver;
* every peer of :mod:`benchmarks.peer_jobs` (SpectralClustering for every
  eigen_solver x assign_labels, recursive 2-way NCut, METIS, KaHIP fast /
  eco / strong, ncut-pytorch), each at its strongest.

Peer results (labels, NCut, time, status) are cached under
``benchmarks/results/_raw/peers/`` (git-ignored; ``--cache`` moves it), keyed by
graph name, a hash of the graph, job and seed: a new Falcon variant re-runs
only Falcon. ``--refresh-peers`` recomputes them. A timeout or memory failure
is cached with its budget and retried when a larger budget is given.

Every job (peer configuration or Falcon fit) runs in a guarded worker process
(:mod:`benchmarks.sandbox`) with a per-run time budget (``--budget``, larger for
the scale group: ``--scale-budget``) and a memory budget (``--memory-mb``); a
peer that fails, times out or runs out of memory is reported as such. Once a
configuration of a peer times out, its remaining configurations are skipped
(they would take as long) and reported as skipped.

Times. A peer's time is the time of the configuration that gave its reported
NCut (the *chosen* run); the time of its whole configuration grid is reported
next to it (``grid s``). Cached peer times come from the run that computed
them, so the ratios are measured afresh: on every graph the fastest peer's
chosen configuration and METIS's chosen configuration are re-run in this
run, interleaved with the Falcon fits (``--repeats`` rounds, fastest of each
kept). ``time/fastest`` and ``time/METIS`` are these same-run ratios.

The report (``peers.md``, ``peers_detail.md``, ``peers.json`` in ``--out``) is
written by :mod:`benchmarks.peers_report` after every graph, so a run that is
stopped keeps what it measured.
"""

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import families as F
from . import peer_jobs as J
from .sandbox import Sandbox, save_graph

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
CACHE = RESULTS / "_raw"
# the scale group of --quick only times the fast partitioners
QUICK_SCALE_GROUPS = ("metis", "kahip-fast")
# in the scale group the configuration grids shrink (a KaHIP eco run of a
# 100k-node graph takes ~30 s, a strong run ~6 min); METIS keeps both schemes
SCALE_GRID = [{"vw": vw, "imbalance": imb} for vw in ("degree", "unit")
              for imb in (0.03, 0.3)]


# ------------------------------------------------------------ the settings
class Settings:
    """What one run does (parsed from the command line)."""

    def __init__(self, args):
        self.mode = "smoke" if args.smoke else ("quick" if args.quick else "full")
        self.seed = args.seed
        self.budget = args.budget or {"full": 120.0, "quick": 30.0,
                                      "smoke": 20.0}[self.mode]
        self.scale_budget = args.scale_budget or (
            300.0 if self.mode == "full" else self.budget)
        self.memory_mb = args.memory_mb
        self.repeats = args.repeats or {"full": 3, "quick": 2, "smoke": 1}[self.mode]
        self.refresh = args.refresh_peers
        self.cache = Path(args.cache) if args.cache else CACHE
        if args.out:
            self.out = Path(args.out)
        else:
            self.out = RESULTS if self.mode == "full" else RESULTS / self.mode
        self.variants = {"default": {}, "n_init=10": {"n_init": 10}}
        for item in args.falcon or []:
            name, params = parse_variant(item)
            self.variants[name] = params
        available, self.missing = J.available_peer_groups()
        if args.peers:
            wanted = [p.strip() for p in ",".join(args.peers).split(",") if p.strip()]
            unknown = set(wanted) - set(J.peer_groups())
            if unknown:
                raise SystemExit(f"unknown peers {sorted(unknown)}; known: "
                                 f"{sorted(J.peer_groups())}")
            available = [g for g in available if g in wanted]
            self.missing = {g: r for g, r in self.missing.items() if g in wanted}
        self.groups = available
        self.specs = F.graph_specs(self.mode, args.families, args.graphs)


def parse_variant(item):
    """``"NAME=JSON"`` -> ``(name, dict)``.

    Examples
    --------
    >>> parse_variant('ml={"n_init": 3}')
    ('ml', {'n_init': 3})
    """
    if "=" not in item:
        raise SystemExit(f"--falcon expects NAME=JSON, got {item!r}")
    name, text = item.split("=", 1)
    name = name.strip()
    try:
        params = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--falcon {name}: invalid JSON {text!r}: {exc}")
    if not isinstance(params, dict):
        raise SystemExit(f"--falcon {name}: JSON must be an object, got {text!r}")
    # the report's targets read "default" as FalconNCut's defaults
    if name in ("default", "n_init=10", "from-best") or not name:
        raise SystemExit(f"--falcon: the name {name!r} is reserved")
    return name, params


# ------------------------------------------------------------ graph files
def graph_hash(W, K):
    h = hashlib.sha1()
    for a in (W.indptr, W.indices, W.data):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(str((W.shape, K)).encode())
    return h.hexdigest()[:16]


def _safe(name):
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)


def prepare_graph(spec, cache):
    """Build the graph, write its file for the worker; returns (graph, path, hash)."""
    g = spec.build()
    gh = graph_hash(g.W, g.K)
    gdir = cache / "graphs"
    gdir.mkdir(parents=True, exist_ok=True)
    path = gdir / f"{_safe(g.name)}.npz"
    stamp = gdir / f"{_safe(g.name)}.hash"
    if not (path.exists() and stamp.exists() and stamp.read_text() == gh):
        save_graph(path, g.W, g.K, g.y_true)
        stamp.write_text(gh)
    return g, path, gh


# ------------------------------------------------------------- the cache
def _cache_file(cache, gname, job_id, seed):
    return cache / "peers" / _safe(gname) / f"{_safe(job_id)}__seed{seed}.npz"


def load_cached(cache, gname, job_id, seed, ghash, budget):
    path = _cache_file(cache, gname, job_id, seed)
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta["graph_hash"] != ghash:
                return None
            if meta["status"] in ("timeout", "memory") and budget > meta["budget"]:
                return None
            for k, out in enumerate(meta["outputs"]):
                out["labels"] = z[f"labels{k}"]
    except (OSError, KeyError, ValueError):
        return None
    meta["cached"] = True
    return meta


def store_cached(cache, gname, job_id, seed, ghash, budget, res):
    path = _cache_file(cache, gname, job_id, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    outs, arrays = [], {}
    for k, o in enumerate(res["outputs"]):
        arrays[f"labels{k}"] = np.asarray(o["labels"], dtype=np.int64)
        outs.append({kk: v for kk, v in o.items() if kk != "labels"})
    meta = {"graph_hash": ghash, "budget": budget, "status": res["status"],
            "message": res["message"], "wall_s": res["wall_s"],
            "peak_mb": res["peak_mb"], "outputs": outs,
            "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, meta=np.array(json.dumps(meta, default=_jdefault)),
                        **arrays)
    os.replace(tmp, path)


def _jdefault(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


# ------------------------------------------------------------------ peers
def _groups_for(g, st):
    groups = list(st.groups)
    if st.mode != "full" and g.family == "scale":
        groups = [x for x in groups if x in QUICK_SCALE_GROUPS]
    return groups


def _jobs_for(group, scale):
    jobs = J.peer_groups()[group]
    if scale and (group == "metis" or group.startswith("kahip-")):
        grid = SCALE_GRID[:1] if group.startswith("kahip-strong") else SCALE_GRID
        jobs = [j for j in jobs if {k: v for k, v in j[2].items()
                                    if k not in ("mode", "scheme")} in grid]
    return jobs


def run_peers(g, path, ghash, st, box, log):
    """Every peer job on one graph (cached); returns the raw job records."""
    scale = g.family == "scale"
    budget = st.scale_budget if scale else st.budget
    records = []
    for group in _groups_for(g, st):
        stopped = None
        for job_id, kind, params in _jobs_for(group, scale):
            if stopped is not None:
                records.append({"group": group, "job": job_id, "kind": kind,
                                "params": params, "status": "skipped",
                                "message": f"skipped after {stopped}",
                                "outputs": [], "cached": False})
                continue
            res = None if st.refresh else load_cached(
                st.cache, g.name, job_id, st.seed, ghash, budget)
            if res is None:
                res = box.run(path, kind, seed=st.seed, timeout=budget, **params)
                store_cached(st.cache, g.name, job_id, st.seed, ghash, budget, res)
                res["cached"] = False
                first = (res["message"] or " ").splitlines()[0]
                log(f"    {job_id}: {res['status']} {res['wall_s']:.2f} s {first}")
            res.update(group=group, job=job_id, kind=kind, params=params)
            records.append(res)
            if res["status"] in ("timeout", "memory"):
                stopped = f"{job_id}: {res['status']}"
    return records


# ----------------------------------------------------------------- Falcon
def _retime(box, path, spec, st, budget):
    """Re-run a peer's chosen configuration; returns its seconds or None."""
    group, job_id, kind, params, peer = spec
    res = box.run(path, kind, seed=st.seed, timeout=budget, **params)
    if res["status"] != "ok":
        return None
    for o in res["outputs"]:
        if o["peer"] == peer:
            return o["seconds"]
    return None


def run_falcon(g, path, st, box, best_labels, refs, log):
    """Falcon variants and the same-run timing of the reference peers.

    Returns ``(falcon, ref_times)``: ``falcon[name]`` is a dict with the
    labels of the first round, the fastest time and a status; ``ref_times``
    maps a reference name to its fastest re-run time.
    """
    budget = st.scale_budget if g.family == "scale" else st.budget
    runs = [(name, {"params": p}) for name, p in st.variants.items()]
    if best_labels is not None:
        runs.append(("from-best", {"params": {}, "init_labels": best_labels}))
    falcon = {name: {"status": "pending", "times": []} for name, _ in runs}
    ref_times = {key: [] for key in refs}
    for r in range(st.repeats):
        for name, job in runs:
            rec = falcon[name]
            if rec["status"] not in ("pending", "ok"):
                continue
            res = box.run(path, "falcon", seed=st.seed, timeout=budget,
                          name=name, **job)
            if res["status"] != "ok":
                rec.update(status=res["status"], message=res["message"])
                first = (res["message"] or " ").splitlines()[0]
                log(f"    falcon {name}: {res['status']} {first}")
                continue
            out = res["outputs"][0]
            if r == 0:
                rec.update(status="ok", labels=out["labels"], info=out["info"])
            elif not np.array_equal(out["labels"], rec["labels"]):
                rec["info"]["deterministic"] = False
            rec["times"].append(out["seconds"])
        for key, spec in refs.items():
            t = _retime(box, path, spec, st, budget)
            if t is not None:
                ref_times[key].append(t)
    for rec in falcon.values():
        rec["seconds"] = min(rec["times"]) if rec["times"] else None
    return falcon, {k: (min(v) if v else None) for k, v in ref_times.items()}


# ------------------------------------------------------------------- main
def run(st, log=print):
    """Run the benchmark of ``st``; returns the report's data."""
    from . import peers_report as R

    st.out.mkdir(parents=True, exist_ok=True)
    report = R.Report(st)
    log(f"[bench_peers] mode={st.mode} graphs={len(st.specs)} "
        f"peers={','.join(st.groups)} variants={','.join(st.variants)} "
        f"out={st.out}")
    for name, why in st.missing.items():
        log(f"[bench_peers] peer {name} unavailable: {why}")
    t_all = time.perf_counter()
    with Sandbox(memory_mb=st.memory_mb) as box:
        for i, spec in enumerate(st.specs):
            t0 = time.perf_counter()
            try:
                g, path, ghash = prepare_graph(spec, st.cache)
            except Exception as exc:
                log(f"[{i + 1}/{len(st.specs)}] {spec.name}: graph failed: {exc}")
                report.graph_failed(spec, f"{type(exc).__name__}: {exc}")
                continue
            log(f"[{i + 1}/{len(st.specs)}] {g.name} n={g.W.shape[0]} "
                f"nnz={g.W.nnz} K={g.K}")
            records = run_peers(g, path, ghash, st, box, log)
            peers = R.aggregate_peers(g, records)
            best = R.best_peer(peers)
            refs = R.reference_peers(peers)
            falcon, ref_times = run_falcon(
                g, path, st, box, None if best is None else best["labels"],
                refs, log)
            row = report.add_graph(g, peers, falcon, ref_times, records)
            report.write()
            log(f"    -> {R.one_line_summary(row)}  [{time.perf_counter() - t0:.1f} s]")
    report.finish(time.perf_counter() - t_all)
    report.write()
    log(f"[bench_peers] done in {time.perf_counter() - t_all:.0f} s; "
        f"{st.out / 'peers.md'}")
    return report


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_peers",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="a few small graphs of every family (minutes)")
    ap.add_argument("--smoke", action="store_true", help="tiny graphs (seconds)")
    ap.add_argument("--families", nargs="+", choices=F.FAMILIES,
                    help="keep these families")
    ap.add_argument("--graphs", default=None,
                    help="keep graphs whose name matches this regular expression")
    ap.add_argument("--falcon", action="append", metavar="NAME=JSON",
                    help="an extra Falcon variant (FalconNCut parameters as JSON)")
    ap.add_argument("--peers", action="append", metavar="GROUP[,GROUP]",
                    help="run only these peer groups (e.g. metis,kahip-fast,rncut)")
    ap.add_argument("--out", default=None, help="output directory of the report")
    ap.add_argument("--cache", default=None,
                    help="peer cache directory (default benchmarks/results/_raw)")
    ap.add_argument("--refresh-peers", action="store_true",
                    help="recompute the peers instead of reading the cache")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds per run (default 120 full, 30 quick)")
    ap.add_argument("--scale-budget", type=float, default=None,
                    help="seconds per run in the scale group (default 300 full)")
    ap.add_argument("--memory-mb", type=float, default=6144.0,
                    help="resident memory budget of a run (default 6144)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="timing rounds (default 3 full, 2 quick)")
    ap.add_argument("--rewrite", action="store_true",
                    help="only write the tables again from OUT/peers.json")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.simplefilter("ignore")
    st = Settings(args)
    st.command = " ".join(
        ["python -m benchmarks.bench_peers"]
        + [shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)])
    if args.rewrite:
        from .peers_report import Report

        Report.from_json(st, st.out / "peers.json").write()
        print(f"[bench_peers] tables written again in {st.out}")
        return 0
    if not st.specs:
        raise SystemExit("no graph matches the selection")
    run(st)
    return 0


if __name__ == "__main__":
    sys.exit(main())
