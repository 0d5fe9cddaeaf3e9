"""The benchmarks' shared toolkit: resident-memory peaks, machine records,
and the result tables every suite writes (markdown, reStructuredText, JSON).

:mod:`benchmarks.run` (the suites and their entry point) and the suites that
live in modules of their own (:mod:`benchmarks.bandwidth`,
:mod:`benchmarks.bench_dask`, :mod:`benchmarks.peers_report`) import it, so
that no suite imports the runner that imports it.
"""

import gc
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


# ============================================================== measurement
def _proc_kb(path, key):
    """The kB figure of ``key`` in a ``/proc`` file (None off Linux)."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:  # pragma: no cover - non-Linux
        return None
    return None


def _status_kb(key):
    return _proc_kb("/proc/self/status", key)


def _malloc_trim():
    """Return freed heap memory to the OS (glibc), so RSS growth is honest."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


class PeakMemory:
    """Context manager measuring the peak growth of the resident set (MB).

    Uses Linux's resettable high-water mark (``/proc/self/clear_refs``);
    elsewhere falls back to ``tracemalloc`` (numpy allocations only).
    """

    def __enter__(self):
        gc.collect()
        _malloc_trim()
        self.mode = "rss"
        try:
            with open("/proc/self/clear_refs", "w") as fh:
                fh.write("5")
            self.base = _status_kb("VmRSS")
            if self.base is None:
                raise OSError
        except OSError:  # pragma: no cover - non-Linux
            import tracemalloc

            self.mode = "tracemalloc"
            tracemalloc.start()
        return self

    def __exit__(self, *exc):
        if self.mode == "rss":
            self.peak_mb = max(0, _status_kb("VmHWM") - self.base) / 1024.0
        else:  # pragma: no cover
            import tracemalloc

            self.peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        return False


def csr_bytes(W):
    if sp.issparse(W):
        W = W.tocsr()
        return W.data.nbytes + W.indices.nbytes + W.indptr.nbytes
    return np.asarray(W).nbytes


# ============================================================ machine info
def _version(mod):
    from importlib.metadata import PackageNotFoundError, version
    from importlib.util import find_spec

    if find_spec(mod) is None:
        return "not installed"
    dist = {"sklearn": "scikit-learn", "sklearn_falcon": "sklearn-falcon",
            "ncut_pytorch": "ncut-pytorch"}.get(mod, mod)
    try:
        return version(dist)
    except PackageNotFoundError:
        try:
            return getattr(__import__(mod), "__version__", "?")
        except Exception:
            return "?"


def machine_info():
    """CPU, cores, memory and package versions of this machine."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:  # pragma: no cover
        pass
    mem = _status_meminfo()
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = os.cpu_count()
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
            capture_output=True, text=True, timeout=10).stdout.strip()
        commit = commit if commit else ""
    except Exception:  # pragma: no cover
        commit = "?"
    info = {
        "date (UTC)": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "cpu": cpu,
        "cores": f"{os.cpu_count()} logical, {affinity} usable",
        "ram": f"{mem:.1f} GiB" if mem else "?",
        "load average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "os": platform.platform(),
        "python": platform.python_version(),
    }
    for mod in ("numpy", "scipy", "sklearn", "numba", "torch", "pyamg",
                "networkx", "ncut_pytorch", "sklearn_falcon"):
        info[mod] = _version(mod)
    # a run from an exported snapshot (no .git) can name its commit
    info["git commit"] = commit or os.environ.get("SKLEARN_FALCON_COMMIT", "?")
    return info


def _status_meminfo():
    kb = _proc_kb("/proc/meminfo", "MemTotal")
    return None if kb is None else kb / 2**20


# ================================================================ reporting
def _fmt(v):
    if v is None or v == "":
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if not np.isfinite(v):
            return "n/a"
        a = abs(v)
        if a == 0:
            return "0"
        if a >= 1000:
            return f"{v:,.0f}"
        if a >= 100:
            return f"{v:.1f}"
        if a >= 0.01:
            return f"{v:.3f}"
        return f"{v:.2e}"
    return str(v)


class Table:
    """A titled table of rows (dicts) with fixed columns."""

    def __init__(self, title, columns, rows=None, note=""):
        self.title = title
        self.columns = list(columns)
        self.rows = list(rows or [])
        self.note = note

    def add(self, **row):
        self.rows.append(row)

    def markdown(self):
        out = [f"### {self.title}", ""]
        if self.note:
            out += [self.note, ""]
        out.append("| " + " | ".join(self.columns) + " |")
        out.append("|" + "|".join("---" for _ in self.columns) + "|")
        for r in self.rows:
            out.append("| " + " | ".join(_fmt(r.get(c, "")) for c in self.columns)
                       + " |")
        return "\n".join(out) + "\n"

    def rst(self):
        out = [self.title, "~" * max(len(self.title), 3), ""]
        if self.note:
            out += [self.note, ""]
        out += [".. list-table::", "   :header-rows: 1", ""]
        for i, row in enumerate([dict(zip(self.columns, self.columns))]
                                + self.rows):
            cells = [c if i == 0 else _fmt(row.get(c, "")) for c in self.columns]
            cells = [c if c != "" else " " for c in cells]
            out.append("   * - " + cells[0])
            out += ["     - " + c for c in cells[1:]]
        return "\n".join(out) + "\n"

    def to_json(self):
        return {"title": self.title, "columns": self.columns,
                "rows": self.rows, "note": self.note}


class SuiteResult:
    """Tables, plots and target verdicts of one suite."""

    def __init__(self, name, title, intro=""):
        self.name = name
        self.title = title
        self.intro = intro
        self.tables = []
        self.plots = []
        self.targets = []   # (target, measured, holds: bool|None)
        self.notes = []
        self.elapsed = None

    def target(self, text, measured, holds):
        self.targets.append((text, measured, holds))

    def write(self, out_dir, machine, mode):
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        tgt = Table("Targets", ["target", "measured", "holds"])
        for text, measured, holds in self.targets:
            tgt.add(target=text, measured=measured,
                    holds="n/a" if holds is None else ("yes" if holds else "NO"))
        mach = Table("Machine", ["key", "value"],
                     [{"key": k, "value": v} for k, v in machine.items()])
        tables = ([tgt] if self.targets else []) + self.tables
        head = f"{self.title}"
        md = [f"## {head}", "", f"Mode: `{mode}`; suite wall time "
              f"{self.elapsed:.0f} s.", ""]
        if self.intro:
            md += [self.intro, ""]
        md += [t.markdown() for t in tables]
        md += [f"![{p}]({p})\n" for p in self.plots]
        md += [n + "\n" for n in self.notes]
        md.append(mach.markdown())
        (out_dir / f"{self.name}.md").write_text("\n".join(md))
        rst = [head, "-" * len(head), "",
               f"Mode ``{mode}``; suite wall time {self.elapsed:.0f} s.", ""]
        if self.intro:
            rst += [self.intro.replace("`", "``"), ""]
        rst += [t.rst() for t in tables]
        for p in self.plots:
            rst += [f".. image:: _static/bench/{p}", "   :width: 90%", ""]
        rst += [n.replace("`", "``") + "\n" for n in self.notes]
        (out_dir / f"{self.name}.rst").write_text("\n".join(rst))
        (out_dir / f"{self.name}.json").write_text(json.dumps({
            "suite": self.name, "mode": mode, "elapsed_s": self.elapsed,
            "machine": machine,
            "targets": [list(t) for t in self.targets],
            "tables": [t.to_json() for t in self.tables],
            "plots": self.plots, "notes": self.notes,
        }, indent=1, default=_json_default))


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    return str(o)


def _one_line(text, limit=200):
    """Error text fit for a table cell: one line, no pipes, truncated."""
    text = " ".join(str(text).split()).replace("|", "/")
    return text[:limit]
