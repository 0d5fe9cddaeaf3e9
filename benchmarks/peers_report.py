"""Tables of the peer benchmark: ``peers.md``, ``peers.rst``, ``peers_detail.md``
and ``peers.json`` (see :mod:`benchmarks.bench_peers`).

Definitions used in the tables:

* **best peer**: the peer of lowest NCut among those that returned K
  non-empty clusters (a peer returning fewer clusters never counts as best).
  ``X/best`` is a method's NCut divided by the best peer's (``n/a`` when the
  best NCut is 0 and the method's is not).
* **win / within 3% / loss**: ``NCut/best <= 1`` (to 1e-9), ``<= 1.03``,
  ``> 1.03``.
* **time/fastest**: Falcon's fit time over the time of the fastest peer's chosen
  configuration, both measured in this run, interleaved (fastest of the
  rounds); **time/METIS** the same against METIS's chosen configuration.
* **ARI**: adjusted Rand index against the truth, where there is one.
* **cost check**: within a family, graphs with the same K and sizes within a
  factor 1.5 are *same-size graphs*; a graph is flagged when Falcon's time on
  it exceeds 3x the median of the others' and by more than 0.05 s.
"""

import json
from pathlib import Path

import numpy as np
from sklearn.metrics import adjusted_rand_score

from sklearn_falcon import normalized_cut

from ._report import Table, _one_line, _version, machine_info

__all__ = ["aggregate_peers", "best_peer", "reference_peers", "Report",
           "one_line_summary", "ncut_ratio"]

WIN_TOL = 1e-9
WITHIN = 1.03

ABOUT = """\
Graph families (`benchmarks/families.py`; every W symmetric, nonnegative, no \
zero-degree node):

* `pixel`: 8-neighbour pixel graphs of scikit-image's coffee, astronaut, chelsea \
and rocket at 50x75 and 100x150 with K = 4, 8, 16, and at 200x300 with K = 8; \
Shi-Malik weights \
exp(-dc^2 / sigma_c^2) exp(-dp^2 / sigma_p^2) (dc, dp: the colour and position \
distances of the two pixels), RGB in [0, 1], \
sigma_c^2 = the image's mean squared neighbour colour difference, sigma_p = 4 px;
* `grid`: 2D (4-neighbour) and 3D (6-neighbour) meshes, unweighted or with \
weights uniform in [0.1, 1];
* `rgg`: random geometric graphs (unit square or cube, expected degree 10);
* `shapes`: noisy circles and two moons, kNN graph with k=15;
* `datasets`: iris, wine, breast_cancer and digits of scikit-learn, raw and \
standardized, kNN graph with k=10, K = the number of classes;
* `lfr`: LFR graphs (networkx; seeds tried in order until one converges), \
mu = 0.1 to 0.5;
* `sbm`: unbalanced planted partitions (sizes from 1 to 10x) and hierarchical \
ones (4 groups of 4 blocks, at K=16 and K=4);
* `realnet`: karate club, Les Miserables, Florentine families, Davis' southern \
women (networkx);
* `scale`: 100,000-node graphs (SBM, kNN mixture, weighted 3D grid, random \
geometric) and a 1,000,000-node SBM, K=20 (16 for the grid).

Peers (`benchmarks/peer_jobs.py`), each at its strongest: scikit-learn \
SpectralClustering for every eigen_solver (arpack, lobpcg, amg) x assign_labels \
(kmeans, discretize, cluster_qr); recursive 2-way NCut (`rncut`, Shi-Malik); \
METIS (pymetis) and KaHIP (kaffpa fast, eco, strong, fastsocial, ecosocial, \
strongsocial) on integer weights \
(W / max W scaled so that the weights sum below 2^29, rounded), each on a grid of \
vertex weights (degrees or ones) x imbalance (3%, 10%, 30%, 100%; 3% and 30% for \
KaHIP strong(social); 3% and 30% in the scale group, degrees and 3% only for KaHIP \
strong(social) there) and, for METIS, the scheme (k-way or recursive bisection), the lowest \
NCut kept and its own run's time reported (the grid's total time is in \
`peers_detail.md`); ncut-pytorch's K-way discretization of the K \
leading eigenvectors of D^-1/2 W D^-1/2. Once one configuration of a peer runs \
out of time or memory, its other configurations are skipped."""


def ncut_ratio(a, b):
    """``a / b`` for NCuts, with ``0 / 0 = 1`` and ``x / 0 = inf``.

    Examples
    --------
    >>> ncut_ratio(0.2, 0.1), ncut_ratio(0.0, 0.0)
    (2.0, 1.0)
    """
    if a is None or b is None:
        return None
    if b <= 1e-12:
        return 1.0 if a <= 1e-12 else float("inf")
    return float(a) / float(b)


def _verdict(ratio):
    if ratio is None:
        return None
    if ratio <= 1.0 + WIN_TOL:
        return "win"
    return "within" if ratio <= WITHIN else "loss"


def _peer_names(group):
    if group.startswith("sc-"):
        return [f"{group}-{a}" for a in ("kmeans", "discretize", "cluster_qr")]
    return [group]


def _ari(y, labels):
    return None if y is None else float(adjusted_rand_score(y, labels))


def aggregate_peers(g, records):
    """One entry per peer: its best configuration (lowest NCut with K clusters).

    Returns
    -------
    peers : dict
        ``name -> {status, ncut, clusters, labels, seconds, grid_s, config,
        job, ari, configs, message}``; ``status`` is ``ok``, ``fewer
        clusters``, or the failure of its runs (timeout, memory, error,
        crashed, skipped).
    """
    peers = {}
    for rec in records:
        for name in _peer_names(rec["group"]):
            peers.setdefault(name, {"peer": name, "group": rec["group"],
                                    "runs": [], "failures": []})
        if rec["status"] != "ok":
            for name in _peer_names(rec["group"]):
                peers[name]["failures"].append(
                    (rec["job"], rec["status"], rec.get("message", "")))
            continue
        for out in rec["outputs"]:
            labels = np.asarray(out["labels"])
            peers[out["peer"]]["runs"].append({
                "job": (rec["group"], rec["job"], rec["kind"], rec["params"],
                        out["peer"]),
                "labels": labels, "seconds": float(out["seconds"]),
                "config": out.get("config", {}),
                "ncut": float(normalized_cut(g.W, labels)),
                "clusters": int(np.unique(labels).shape[0]),
                "cached": rec.get("cached", False),
            })
    result = {}
    for name, p in peers.items():
        runs = p["runs"]
        entry = {"peer": name, "group": p["group"],
                 "configs": f"{len(runs)}/{len(runs) + len(p['failures'])}",
                 "grid_s": float(sum(r["seconds"] for r in runs)),
                 "failures": p["failures"]}
        if runs:
            valid = [r for r in runs if r["clusters"] == g.K]
            pool = valid or runs
            r = min(pool, key=lambda r: (r["ncut"], r["seconds"]))
            entry.update(status="ok" if valid else "fewer clusters",
                         ncut=r["ncut"], clusters=r["clusters"],
                         labels=r["labels"], seconds=r["seconds"],
                         config=r["config"], job=r["job"],
                         ari=_ari(g.y_true, r["labels"]), cached=r["cached"])
            entry["message"] = "; ".join(f"{j}: {s}" for j, s, _ in p["failures"])
        else:
            job, status, msg = p["failures"][0]
            entry.update(status=status, message=_one_line(f"{job}: {msg}", 160))
        result[name] = entry
    return result


def best_peer(peers):
    """The entry of lowest NCut among peers with status ``ok`` (or None)."""
    ok = [p for p in peers.values() if p["status"] == "ok"]
    if not ok:
        return None
    return min(ok, key=lambda p: (p["ncut"], p["seconds"]))


def reference_peers(peers):
    """Jobs to re-time in this run: the fastest valid peer, and METIS."""
    ok = [p for p in peers.values() if p["status"] == "ok"]
    refs = {}
    if ok:
        fastest = min(ok, key=lambda p: p["seconds"])
        refs["fastest"] = fastest["job"]
        if "metis" in peers and peers["metis"]["status"] == "ok" \
                and fastest["peer"] != "metis":
            refs["metis"] = peers["metis"]["job"]
    return refs


def one_line_summary(row):
    f = row["falcon"].get("default", {})
    return (f"default/best={_s(f.get('ratio'))} "
            f"n_init10/best={_s(row['falcon'].get('n_init=10', {}).get('ratio'))} "
            f"from-best/best={_s(row['falcon'].get('from-best', {}).get('ratio'))} "
            f"best={row['best_peer']} time/fastest={_s(row['time_fastest'])} "
            f"time/METIS={_s(row['time_metis'])}")


def _s(v):
    return "n/a" if v is None else f"{v:.3g}"


def _div(a, b):
    return None if a is None or b is None or b <= 0 else float(a) / float(b)


class Report:
    """Rows of one run and the tables written from them."""

    def __init__(self, st):
        self.st = st
        self.rows = []
        self.failed_graphs = []
        self.elapsed = None
        self.command = getattr(st, "command", None)
        self.machine = machine_info()
        for mod in ("pymetis", "kahip", "skimage"):
            self.machine[mod] = _version(mod)
        self.machine["load average at start"] = self.machine.pop("load average")

    @classmethod
    def from_json(cls, st, path):
        """The report of an earlier run (its ``peers.json``), to write again."""
        data = json.loads(Path(path).read_text())
        rep = cls(st)
        rep.rows, rep.failed_graphs = data["rows"], data.get("failed_graphs", [])
        rep.elapsed = data.get("elapsed_s")
        rep.command = data.get("command")
        rep.machine = {k: v for k, v in data["machine"].items()
                       if k != "load average at end"}
        rep._end_load = data["machine"].get("load average at end")
        st.variants = data.get("variants", st.variants)
        return rep

    # ------------------------------------------------------------ rows
    def graph_failed(self, spec, message):
        self.failed_graphs.append({"graph": spec.name, "family": spec.family,
                                   "message": _one_line(message)})

    def add_graph(self, g, peers, falcon, ref_times, records):
        best = best_peer(peers)
        best_ncut = None if best is None else best["ncut"]
        row = {"graph": g.name, "family": g.family, "n": int(g.W.shape[0]),
               "nnz": int(g.W.nnz), "K": g.K, "truth": g.y_true is not None,
               "truth_ncut": (None if g.y_true is None
                              else float(normalized_cut(g.W, g.y_true))),
               "best_peer": None if best is None else best["peer"],
               "best_ncut": best_ncut,
               "best_ari": None if best is None else best["ari"],
               "max_peer_ari": max((p["ari"] for p in peers.values()
                                    if p["status"] == "ok"
                                    and p.get("ari") is not None), default=None),
               "falcon": {}, "peers": {}}
        for name, rec in falcon.items():
            f = {"status": rec["status"], "seconds": rec.get("seconds"),
                 "message": _one_line(rec.get("message", ""))}
            if rec["status"] == "ok":
                lab = rec["labels"]
                info = dict(rec["info"])
                info["falcon_ncut_"] = info.pop("ncut", None)
                f.update(ncut=float(normalized_cut(g.W, lab)),
                         clusters=int(np.unique(lab).shape[0]),
                         ari=_ari(g.y_true, lab), **info)
                f["ratio"] = ncut_ratio(f["ncut"], best_ncut)
                f["verdict"] = _verdict(f["ratio"])
            row["falcon"][name] = f
        for name, p in peers.items():
            row["peers"][name] = {k: v for k, v in p.items()
                                  if k not in ("labels", "job", "failures")}
            if p["status"] in ("ok", "fewer clusters"):
                row["peers"][name]["ratio"] = ncut_ratio(p["ncut"], best_ncut)
        fastest = min((p for p in peers.values() if p["status"] == "ok"),
                      key=lambda p: p["seconds"], default=None)
        metis = peers.get("metis")
        metis_ok = metis is not None and metis["status"] == "ok"
        row["fastest_peer"] = None if fastest is None else fastest["peer"]
        row["fastest_live_s"] = ref_times.get("fastest")
        row["metis_live_s"] = (ref_times.get("metis") if "metis" in ref_times
                               else (ref_times.get("fastest") if metis_ok and
                                     fastest["peer"] == "metis" else None))
        row["metis_ncut"] = metis["ncut"] if metis_ok else None
        row["metis_grid_s"] = metis["grid_s"] if metis_ok else None
        t_f = row["falcon"].get("default", {}).get("seconds")
        row["falcon_s"] = t_f
        row["time_fastest"] = _div(t_f, row["fastest_live_s"])
        row["time_metis"] = _div(t_f, row["metis_live_s"])
        self.rows.append(row)
        return row

    def finish(self, elapsed):
        self.elapsed = elapsed

    # ---------------------------------------------------------- tables
    def _variants(self):
        names = list(self.st.variants)
        if any("from-best" in r["falcon"] for r in self.rows):
            names.append("from-best")
        return names

    def targets(self):
        rows, out = self.rows, []
        d = [r["falcon"].get("default", {}) for r in rows]
        comparable = [(r, f) for r, f in zip(rows, d) if f.get("ratio") is not None]
        wins = sum(f["verdict"] == "win" for _, f in comparable)
        out.append(("Falcon (defaults) NCut <= best peer on every graph",
                    f"{wins}/{len(comparable)} graphs",
                    (wins == len(comparable)) if comparable else None))
        ari = [(r, f) for r, f in comparable if r["truth"] and f.get("ari") is not None
               and r["best_ari"] is not None]
        ari_ok = sum(f["ari"] >= r["best_ari"] - 0.02 for r, f in ari)
        out.append(("ARI >= best peer's ARI - 0.02 (graphs with a truth)",
                    f"{ari_ok}/{len(ari)} graphs",
                    (ari_ok == len(ari)) if ari else None))
        pairs = [(r["falcon"]["default"]["ncut"], r["falcon"]["n_init=10"]["ncut"])
                 for r in rows if r["falcon"].get("default", {}).get("ncut") is not None
                 and r["falcon"].get("n_init=10", {}).get("ncut") is not None]
        worse = sum(b > a * (1 + WIN_TOL) + 1e-12 for a, b in pairs)
        better = sum(b < a * (1 - WIN_TOL) - 1e-12 for a, b in pairs)
        from sklearn_falcon import FalconNCut

        n1 = f"the default (n_init={FalconNCut().get_params()['n_init']})"
        out.append((f"n_init=10 never worse than {n1}",
                    f"worse on {worse}/{len(pairs)} graphs", worse == 0))
        out.append((f"n_init=10 strictly better than {n1} on some graphs",
                    f"better on {better}/{len(pairs)} graphs", better > 0))
        big = [r for r in rows
               if r["family"] == "scale" and r["time_metis"] is not None]
        ok = [r for r in big if r["time_metis"] <= 1 / 3 and
              r["falcon"]["default"]["ncut"] <= r["metis_ncut"] * (1 + WIN_TOL)]
        out.append(("scale group (n ~ 1e5, 1e6): >= 3x faster than METIS, "
                    "NCut <= METIS's",
                    f"{len(ok)}/{len(big)} graphs (time/METIS "
                    + ", ".join(f"{r['time_metis']:.2f}" for r in big) + ")",
                    (len(ok) == len(big)) if big else None))
        mid = [r for r in rows if r["family"] != "scale" and r["n"] >= 1000
               and r["time_metis"] is not None]
        ok = [r for r in mid if r["time_metis"] <= 2.0]
        out.append(("1k <= n < 100k (other families): within 2x of METIS",
                    f"{len(ok)}/{len(mid)} graphs",
                    (len(ok) == len(mid)) if mid else None))
        flagged = [c for c in self.cost_check() if c["flagged"]]
        out.append(("no graph costs > 3x its same-size family graphs",
                    f"{len(flagged)} flagged", not flagged))
        return out

    def cost_check(self):
        """For each graph: Falcon's time over the median of its same-size graphs."""
        res = []
        for r in self.rows:
            t = r["falcon_s"]
            if t is None:
                continue
            others = [o["falcon_s"] for o in self.rows if o is not r
                      and o["family"] == r["family"] and o["K"] == r["K"]
                      and o["falcon_s"] is not None
                      and max(o["n"], r["n"]) <= 1.5 * min(o["n"], r["n"])]
            if not others:
                continue
            med = float(np.median(others))
            res.append({"graph": r["graph"], "family": r["family"], "n": r["n"],
                        "K": r["K"], "same-size graphs": len(others),
                        "Falcon s": t, "median of others s": med,
                        "ratio": t / med if med > 0 else float("inf"),
                        "flagged": bool(t > 3 * med and t - med > 0.05)})
        return res

    def family_table(self):
        variants = self._variants()
        cols = (["family", "graphs"] + [f"{v}: W/3%/L" for v in variants]
                + ["worst default/best", "median time/fastest", "median time/METIS"])
        t = Table("Falcon against the best peer, per family", cols, note=(
            "W/3%/L: graphs where the variant's NCut is at or below the best "
            "peer's / within 3% above / more than 3% above."))
        fams = []
        for r in self.rows:
            if r["family"] not in fams:
                fams.append(r["family"])
        for fam in fams + ["all"]:
            rows = [r for r in self.rows if fam in ("all", r["family"])]
            cell = {"family": fam, "graphs": len(rows)}
            for v in variants:
                verd = [r["falcon"].get(v, {}).get("verdict") for r in rows]
                cell[f"{v}: W/3%/L"] = (f"{verd.count('win')}/{verd.count('within')}/"
                                       f"{verd.count('loss')}")
            ratios = [(r["falcon"].get("default", {}).get("ratio"), r["graph"])
                      for r in rows]
            ratios = [x for x in ratios if x[0] is not None]
            if ratios:
                worst = max(ratios)
                cell["worst default/best"] = f"{worst[0]:.3f} ({worst[1]})"
            for key, col in (("time_fastest", "median time/fastest"),
                             ("time_metis", "median time/METIS")):
                vals = [r[key] for r in rows if r[key] is not None]
                cell[col] = float(np.median(vals)) if vals else None
            t.add(**cell)
        return t

    def graph_table(self):
        variants = self._variants()
        cols = (["graph", "n", "K", "best peer", "best NCut"]
                + [f"{v}/best" for v in variants]
                + ["ARI Falcon", "ARI best peer", "fastest peer", "time/fastest",
                   "time/METIS", "Falcon s"])
        t = Table("Per graph: NCut against the best peer, time against the fastest "
                  "peer and METIS", cols)
        for r in self.rows:
            cell = {"graph": r["graph"], "n": r["n"], "K": r["K"],
                    "best peer": r["best_peer"] or "none",
                    "best NCut": r["best_ncut"], "fastest peer": r["fastest_peer"],
                    "time/fastest": r["time_fastest"], "time/METIS": r["time_metis"],
                    "Falcon s": r["falcon_s"],
                    "ARI Falcon": r["falcon"].get("default", {}).get("ari"),
                    "ARI best peer": r["best_ari"]}
            for v in variants:
                f = r["falcon"].get(v, {})
                cell[f"{v}/best"] = (f["ratio"] if f.get("ratio") is not None
                                     else f.get("status", ""))
            t.add(**cell)
        return t

    def scale_table(self):
        t = Table("Scale group: Falcon against METIS in the same run",
                  ["graph", "n", "nnz", "K", "Falcon s", "METIS s", "Falcon/METIS",
                   "METIS grid s", "Falcon NCut/METIS NCut", "3x faster and NCut <="],
                  note=("METIS s: METIS's chosen configuration, re-run in this run "
                        "(fastest of the rounds); METIS grid s: its whole "
                        "configuration grid, from the run that computed it."))
        for r in self.rows:
            if r["family"] != "scale":
                continue
            fd = r["falcon"].get("default", {})
            ratio = ncut_ratio(fd.get("ncut"), r["metis_ncut"])
            t.add(**{"graph": r["graph"], "n": r["n"], "nnz": r["nnz"], "K": r["K"],
                     "Falcon s": r["falcon_s"], "METIS s": r["metis_live_s"],
                     "Falcon/METIS": r["time_metis"], "METIS grid s": r["metis_grid_s"],
                     "Falcon NCut/METIS NCut": ratio,
                     "3x faster and NCut <=": (
                         None if r["time_metis"] is None or ratio is None
                         else bool(r["time_metis"] <= 1 / 3 and ratio <= 1 + WIN_TOL))})
        return t

    def failure_table(self):
        t = Table("Peers that failed, timed out, ran out of memory or returned fewer "
                  "than K clusters",
                  ["graph", "peer", "status", "configs ok", "message"])
        for r in self.rows:
            for name, p in r["peers"].items():
                if p["status"] != "ok" or p.get("message"):
                    t.add(graph=r["graph"], peer=name, status=p["status"],
                          **{"configs ok": p["configs"]},
                          message=_one_line(p.get("message", ""), 160))
            for name, f in r["falcon"].items():
                if f["status"] != "ok" or f.get("clusters", r["K"]) != r["K"] \
                        or f.get("monotone") is False:
                    t.add(graph=r["graph"], peer=f"Falcon {name}", status=f["status"],
                          message=_one_line(f"clusters={f.get('clusters')} "
                                            f"monotone={f.get('monotone')} "
                                            f"{f.get('message', '')}", 160))
        for fg in self.failed_graphs:
            t.add(graph=fg["graph"], peer="(graph)", status="not built",
                  message=fg["message"])
        return t

    def detail_tables(self):
        out = []
        for r in self.rows:
            t = Table(f"{r['graph']} (n={r['n']:,}, nnz={r['nnz']:,}, K={r['K']}"
                      + (f", truth NCut {r['truth_ncut']:.4g}" if r["truth"] else "")
                      + ")",
                      ["method", "status", "clusters", "NCut", "NCut/best", "ARI",
                       "seconds", "grid s", "configs ok", "chosen config", "note"])
            for name, f in r["falcon"].items():
                t.add(method=f"Falcon {name}", status=f["status"],
                      clusters=f.get("clusters"), NCut=f.get("ncut"),
                      **{"NCut/best": f.get("ratio"), "ARI": f.get("ari"),
                         "seconds": f.get("seconds"),
                         "note": _one_line(f"n_iter={f.get('n_iter')} "
                                           f"monotone={f.get('monotone')} "
                                           f"{f.get('message', '')}", 120)})
            for name, p in sorted(r["peers"].items(),
                                  key=lambda kv: kv[1].get("ncut", np.inf)):
                cfg = p.get("config") or {}
                t.add(method=name, status=p["status"], clusters=p.get("clusters"),
                      NCut=p.get("ncut"),
                      **{"NCut/best": p.get("ratio"), "ARI": p.get("ari"),
                         "seconds": p.get("seconds"), "grid s": p.get("grid_s"),
                         "configs ok": p["configs"],
                         "chosen config": ",".join(f"{k}={v}" for k, v in cfg.items()),
                         "note": _one_line(p.get("message", ""), 120)})
            out.append(t)
        return out

    def intro(self):
        st = self.st
        return (
            f"Mode `{st.mode}`, seed {st.seed}; "
            + (f"run time {self.elapsed:.0f} s. " if self.elapsed is not None else
               "the run was stopped before its end: the tables hold the graphs "
               "it finished. ")
            + f"`{self.command or 'python -m benchmarks.bench_peers'}` "
            "(`benchmarks/bench_peers.py`; graphs in `benchmarks/families.py`, peers "
            "in `benchmarks/peer_jobs.py`). Every method runs on the same W, each "
            "job in a guarded worker process with a budget of "
            f"{st.budget:.0f} s ({st.scale_budget:.0f} s in the scale group) and "
            f"{st.memory_mb:.0f} MB. Falcon variants: "
            + "; ".join(f"`{k}` = {json.dumps(v)}" for k, v in st.variants.items())
            + "; `from-best` = the defaults started from the best peer's labels. "
            "NCut/best: ratio to the lowest NCut of the peers (with K non-empty "
            "clusters). Times: Falcon's fit and the reference peers' chosen "
            "configurations re-run side by side in this run "
            f"({st.repeats} interleaved rounds, fastest kept); the machine is "
            "shared, so read ratios, not absolute times. Peers whose packages are "
            "missing: " + (", ".join(f"{k} ({v})" for k, v in st.missing.items())
                           or "none") + ".")

    # ----------------------------------------------------------- write
    def write(self):
        out = Path(self.st.out)
        out.mkdir(parents=True, exist_ok=True)
        machine = dict(self.machine)
        import os

        machine["load average at end"] = getattr(self, "_end_load", None) or " ".join(
            f"{x:.2f}" for x in os.getloadavg())
        tgt = Table("Targets of issue 15", ["target", "measured", "holds"])
        targets = self.targets() if self.rows else []
        for text, measured, holds in targets:
            tgt.add(target=text, measured=measured,
                    holds="n/a" if holds is None else ("yes" if holds else "NO"))
        cost = Table("Cost check: Falcon's time against its same-size family graphs",
                     ["graph", "family", "n", "K", "same-size graphs", "Falcon s",
                      "median of others s", "ratio", "flagged"],
                     [c for c in self.cost_check() if c["ratio"] > 2.0])
        cost.note = ("Graphs whose time is more than 2x the median of their "
                     "same-size graphs (same family and K, n within 1.5x); "
                     "flagged above 3x and 0.05 s.")
        mach = Table("Machine and versions", ["key", "value"],
                     [{"key": k, "value": v} for k, v in machine.items()])
        tables = [tgt, self.family_table(), self.scale_table(), self.graph_table(),
                  cost, self.failure_table(), mach]
        title = "Falcon against every peer, family by family"
        md = [f"## {title}", "", self.intro(), "", ABOUT, ""]
        md += [_markdown(t) for t in tables]
        md.append("Per-peer NCut, ARI, time and chosen configuration of every "
                  "graph: `peers_detail.md`.\n")
        (out / "peers.md").write_text("\n".join(md))
        rst = [title, "-" * len(title), "", self.intro().replace("`", "``"), "",
               ABOUT.replace("`", "``"), ""]
        rst += [_rst(t) for t in tables]
        (out / "peers.rst").write_text("\n".join(rst))
        detail = [f"## {title}: every peer on every graph", "", self.intro(), ""]
        detail += [t.markdown() for t in self.detail_tables()]
        (out / "peers_detail.md").write_text("\n".join(detail))
        (out / "peers.json").write_text(json.dumps({
            "mode": self.st.mode, "seed": self.st.seed, "elapsed_s": self.elapsed,
            "command": self.command,
            "variants": self.st.variants, "machine": machine,
            "targets": [list(t) for t in targets], "rows": self.rows,
            "failed_graphs": self.failed_graphs,
        }, indent=1, default=_jdefault))


def _markdown(table):
    if table.rows:
        return table.markdown()
    note = f"{table.note}\n\n" if table.note else ""
    return f"### {table.title}\n\n{note}None.\n"


def _rst(table):
    """A table's rst (a list-table needs a body row: an empty one is a line)."""
    if table.rows:
        return table.rst()
    return (f"{table.title}\n{'~' * len(table.title)}\n\n"
            + (f"{table.note}\n\n" if table.note else "") + "None.\n")


def _jdefault(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)
