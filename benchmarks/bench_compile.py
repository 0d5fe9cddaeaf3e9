"""Cold start: import time, the first fit with an empty or a warm Numba
cache, the compile time of every kernel, and the prebuild command.

Every measurement runs in a fresh interpreter:

* **cold**: an empty ``NUMBA_CACHE_DIR``, so every kernel the fit needs is
  compiled; a Numba event listener records the compile time of each;
* **warm**: the same cache directory again: kernels load from disk (every
  process after the first on a machine);
* **import**: ``import sklearn_falcon`` after scikit-learn's own modules
  (``sklearn.base``, ``sklearn.utils.validation``), and whether it imports
  Numba or torch;
* **prebuild**: ``python -m sklearn_falcon.prebuild`` into an empty cache,
  then a first fit.

The fit is ``FalconNCut(3).fit(X)`` on ``make_blobs(500)`` (the default kNN
affinity and multilevel init).  Times are wall-clock seconds and, because
the machine is shared, also the CPU seconds of the process (a compile is
single-threaded: on an idle machine its wall time is its CPU time).

Run::

    python -m benchmarks.bench_compile            # writes results/compile.md
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent

FIT_CHILD = r"""
import json, sys, time
records = []
listen = sys.argv[1] == "1"
w0, c0 = time.perf_counter(), time.process_time()
import numpy as np
from sklearn.datasets import make_blobs
import sklearn_falcon
from sklearn_falcon import FalconNCut
t_import = (time.perf_counter() - w0, time.process_time() - c0)
if listen:
    import numba
    from numba.core import event as ev

    class L(ev.Listener):
        stack = []
        def on_start(self, e):
            d = e.data["dispatcher"]
            self.stack.append([d.py_func.__module__, d.py_func.__qualname__,
                               time.perf_counter(), time.process_time(), 0.0, 0.0])
        def on_end(self, e):
            mod, name, w, c, cw, cc = self.stack.pop()
            dw, dc = time.perf_counter() - w, time.process_time() - c
            if self.stack:
                self.stack[-1][4] += dw
                self.stack[-1][5] += dc
            records.append(dict(module=mod, name=name, wall=dw - cw, cpu=dc - cc,
                                depth=len(self.stack)))
    ev.register("numba:compile", L())
X, _ = make_blobs(n_samples=500, centers=3, random_state=0)
w0, c0 = time.perf_counter(), time.process_time()
FalconNCut(3, random_state=0).fit(X)
t_first = (time.perf_counter() - w0, time.process_time() - c0)
w0 = time.perf_counter()
FalconNCut(3, random_state=0).fit(X)
t_second = time.perf_counter() - w0
print(json.dumps(dict(import_s=t_import, first_fit_s=t_first, second_fit_s=t_second,
                      compiles=records,
                      numba_at_import="numba" in sys.modules and not listen)))
"""

# where the CPU time of a cold first fit goes: Numba's compiler stages timed
# by wrapping them (exclusive of the stages they call); benchmark-only
# instrumentation of Numba internals (names as of numba 0.6x)
BREAKDOWN_CHILD = r"""
import json, time, collections
c0 = time.process_time()
import numpy as np
from sklearn.datasets import make_blobs
from sklearn_falcon import FalconNCut
c1 = time.process_time()
import numba
from numba.core import codegen, compiler, dispatcher, lowering, typeinfer
c2 = time.process_time()
acc = collections.Counter()
stack = []
def wrap(owner, name, cat):
    f = getattr(owner, name)
    def w(*a, **k):
        t = time.process_time()
        stack.append(0.0)
        try:
            return f(*a, **k)
        finally:
            el = time.process_time() - t
            acc[cat] += el - stack.pop()
            if stack:
                stack[-1] += el
    setattr(owner, name, w)
wrap(typeinfer.TypeInferer, "propagate", "Numba: type inference")
wrap(lowering.Lower, "lower", "Numba: lowering to LLVM IR")
wrap(lowering.Lower, "create_cpython_wrapper", "Numba: entry points from Python")
wrap(codegen.CPUCodeLibrary, "add_ir_module", "LLVM: IR text and parsing")
wrap(codegen.CPUCodeLibrary, "_optimize_functions", "LLVM: function passes")
wrap(codegen.CPUCodeLibrary, "_optimize_final_module", "LLVM: module passes")
wrap(codegen.CPUCodeLibrary, "_finalize_final_module", "LLVM: machine code")
wrap(compiler.CompilerBase, "compile_extra", "Numba: other passes (bytecode, SSA, inlining, rewrites)")
wrap(dispatcher.Dispatcher, "compile", "Numba: dispatch and cache writes")
X, _ = make_blobs(n_samples=500, centers=3, random_state=0)
c3 = time.process_time()
FalconNCut(3, random_state=0).fit(X)
c4 = time.process_time()
fit = c4 - c3
acc["outside compiles (the fit itself, kNN graph, Numba's set-up)"] = fit - sum(acc.values())
print(json.dumps(dict(fit=fit, numba_import=c2 - c1, parts=dict(acc))))
"""

IMPORT_CHILD = r"""
import json, sys, time
w0 = time.perf_counter()
import sklearn.base, sklearn.utils.validation
t_sk = time.perf_counter() - w0
w0 = time.perf_counter()
import sklearn_falcon
t_f = time.perf_counter() - w0
mods = {m: m in sys.modules for m in ("numba", "torch", "sklearn.neighbors")}
w0 = time.perf_counter()
from sklearn.cluster import SpectralClustering
t_sc = time.perf_counter() - w0
print(json.dumps(dict(sklearn=t_sk, falcon=t_f, spectral_after=t_sc, modules=mods)))
"""


def _env(cache_dir, tree=ROOT):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
    return env


def _child(code, cache_dir, *args, tree=ROOT):
    out = subprocess.run([sys.executable, "-c", code, *args],
                         env=_env(cache_dir, tree), check=True, capture_output=True,
                         text=True, cwd=tree)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["stderr"] = out.stderr
    return res


def _timed(cmd, cache_dir):
    w0 = time.perf_counter()
    r0 = os.times()
    out = subprocess.run(cmd, env=_env(cache_dir), check=True, capture_output=True,
                         text=True, cwd=ROOT)
    r1 = os.times()
    cpu = (r1.children_user - r0.children_user) + (r1.children_system
                                                     - r0.children_system)
    return time.perf_counter() - w0, cpu, out.stdout + out.stderr


def _s(seconds):
    """Seconds for a table: three decimals below a second, two above."""
    return f"{seconds:.3f}" if seconds < 1 else f"{seconds:.2f}"


def _med(values):
    return statistics.median(values)


def _kernel_table(records):
    """Per kernel of the package: compile seconds (exclusive of the kernels
    it calls, which have their own rows); Numba's own helpers in one row."""
    rows = {}
    for r in records:
        if r["module"].startswith("sklearn_falcon"):
            key = f"{r['module'].replace('sklearn_falcon.', '')}.{r['name']}"
        else:
            key = "(Numba's implementations of NumPy functions)"
        cpu, wall, n = rows.get(key, (0.0, 0.0, 0))
        rows[key] = (cpu + r["cpu"], wall + r["wall"], n + 1)
    return sorted(rows.items(), key=lambda kv: -kv[1][0])


def _command(args):
    """The command that measures again what ``args`` asked: its options,
    ``--out`` for a file other than the default (relative to the repository
    when inside it), a baseline named by its commit."""
    words = ["python -m benchmarks.bench_compile", f"--repeats {args.repeats}"]
    if args.no_prebuild:
        words.append("--no-prebuild")
    out = Path(args.out).resolve() if args.out else None
    if out is None or out != RESULTS / "compile.md":
        words.append("--out " + shlex.quote(
            "" if out is None else str(out.relative_to(ROOT)
                                       if out.is_relative_to(ROOT) else out)))
    words += [f"--baseline <checkout of {_rev(b)}>" for b in args.baseline]
    return " ".join(words)


def _rev(checkout):
    """Short commit hash of a checkout (its path when git cannot tell)."""
    out = subprocess.run(["git", "-C", str(checkout), "log", "-1", "--format=%h"],
                         capture_output=True, text=True).stdout.strip()
    return out or str(checkout)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS / "compile.md"))
    ap.add_argument("--no-prebuild", action="store_true")
    ap.add_argument("--baseline", action="append", default=[],
                    help="another checkout of the package (e.g. a worktree of an "
                         "earlier commit): its cold and warm first fits are "
                         "measured interleaved with this tree's (repeatable)")
    args = ap.parse_args(argv)
    R = args.repeats
    t_start = time.time()
    load = os.getloadavg()

    cold, warm, imports = [], [], []
    bases = {b: ([], [], []) for b in args.baseline}  # cold, warm, imports
    for _ in range(R):  # cold, warm and import runs interleaved
        with tempfile.TemporaryDirectory() as cache:
            cold.append(_child(FIT_CHILD, cache, "1"))
            warm.append(_child(FIT_CHILD, cache, "0"))
        with tempfile.TemporaryDirectory() as cache:
            imports.append(_child(IMPORT_CHILD, cache))
        for base, (b_cold, b_warm, b_imports) in bases.items():
            with tempfile.TemporaryDirectory() as cache:
                b_cold.append(_child(FIT_CHILD, cache, "1", tree=base))
                b_warm.append(_child(FIT_CHILD, cache, "0", tree=base))
            with tempfile.TemporaryDirectory() as cache:
                b_imports.append(_child(IMPORT_CHILD, cache, tree=base))
    # a warm cache loaded by R more processes (the first warm run above may
    # still find the page cache cold)
    with tempfile.TemporaryDirectory() as cache:
        _child(FIT_CHILD, cache, "0")
        for _ in range(R):
            warm.append(_child(FIT_CHILD, cache, "0"))
    with tempfile.TemporaryDirectory() as cache:
        breakdown = _child(BREAKDOWN_CHILD, cache)
    pre = None
    if not args.no_prebuild:
        with tempfile.TemporaryDirectory() as cache:
            wall, cpu, out = _timed([sys.executable, "-m", "sklearn_falcon.prebuild"],
                                    cache)
            after = _child(FIT_CHILD, cache, "0")
            pre = dict(wall=wall, cpu=cpu, out=out, after=after)

    def col(runs, key, i=None):
        vals = [r[key] if i is None else r[key][i] for r in runs]
        return _med(vals), min(vals), max(vals)

    lines = ["## Cold start", "",
             f"Measured {time.strftime('%Y-%m-%d %H:%M', time.gmtime(t_start))} UTC "
             f"with `{_command(args)}` on a shared "
             f"machine ({os.cpu_count()} cores, load average {load[0]:.1f} at the "
             f"start, {platform.python_version()}, numba "
             f"{_numba_version()}).  Median [min, max] of {R} fresh processes "
             "(warm: 2R).  Wall seconds are inflated by the other jobs; CPU seconds "
             "of the process are what an idle machine would show (a compile runs "
             "on one thread).", "",
             "The fit: `FalconNCut(3).fit(X)`, `X = make_blobs(500)` (kNN affinity, "
             "multilevel init).", "",
             "| | target | wall [s] | CPU [s] |", "|---|---|---|---|"]

    def fmt(t):
        return f"{_s(t[0])} [{_s(t[1])}, {_s(t[2])}]"

    lines.append(f"| first fit, empty cache | <= 3 s | "
                 f"{fmt(col(cold, 'first_fit_s', 0))} | "
                 f"{fmt(col(cold, 'first_fit_s', 1))} |")
    lines.append(f"| first fit, warm cache | <= 0.2 s | "
                 f"{fmt(col(warm, 'first_fit_s', 0))} | "
                 f"{fmt(col(warm, 'first_fit_s', 1))} |")
    lines.append(f"| second fit (same process) | | "
                 f"{fmt(col(warm, 'second_fit_s'))} | |")
    lines.append(f"| `import sklearn_falcon` (whole, cold or warm cache) | | "
                 f"{fmt(col(warm, 'import_s', 0))} | {fmt(col(warm, 'import_s', 1))} |")
    sk = col(imports, "sklearn")
    fa = col(imports, "falcon")
    sc = col(imports, "spectral_after")
    lines += ["", "### Import", "",
              "In each process: `import sklearn.base, sklearn.utils.validation` "
              "(scikit-learn's own import, what every estimator needs), then "
              "`import sklearn_falcon`, then, for reference, "
              "`from sklearn.cluster import SpectralClustering`.", "",
              "| | target | wall [s] |", "|---|---|---|",
              f"| scikit-learn's import | | {fmt(sk)} |",
              f"| `import sklearn_falcon` added to it | <= 0.3 s | {fmt(fa)} |",
              f"| `SpectralClustering` added after both | | {fmt(sc)} |", ""]
    for base, (base_cold, base_warm, base_imports) in bases.items():
        rev = _rev(base)
        lines += ["", f"### Against the baseline checkout ({rev}), interleaved", "",
                  "| | baseline | this tree | baseline / this |", "|---|---|---|---|"]
        for label, a, b, key, i in (
                ("first fit, empty cache, CPU s", base_cold, cold, "first_fit_s", 1),
                ("first fit, empty cache, wall s", base_cold, cold, "first_fit_s", 0),
                ("first fit, warm cache, CPU s", base_warm, warm, "first_fit_s", 1),
                ("import sklearn_falcon (after scikit-learn), wall s", base_imports,
                 imports, "falcon", None)):
            va, vb = col(a, key, i)[0], col(b[:len(a)], key, i)[0]
            lines.append(f"| {label} | {_s(va)} | {_s(vb)} | {va / vb:.2f}x |")
        lines.append("")
    mods = imports[0]["modules"]
    lines.append("Imported by `import sklearn_falcon`: " + ", ".join(
        f"{m}: {'yes' if v else 'no'}" for m, v in mods.items())
        + " (Numba is imported by the first kernel call, torch only by the torch "
        "backend).")
    noticed = sum("compiling kernels" in r["stderr"] for r in cold)
    warned_warm = sum("compiling kernels" in r["stderr"] for r in warm)
    lines += ["", f"The notice \"compiling kernels, once per environment...\" was "
              f"printed in {noticed} of {len(cold)} cold runs and {warned_warm} of "
              f"{len(warm)} warm runs.", ""]

    # per kernel, from the first cold run
    table = _kernel_table(cold[0]["compiles"])
    total_cpu = sum(r[1][0] for r in table)
    lines += ["### Compile time per kernel (first cold run)", "",
              "Exclusive of the kernels each calls (they have their own rows); a "
              "kernel compiles once per signature. "
              f"Total {total_cpu:.2f} CPU s of the first fit's "
              f"{cold[0]['first_fit_s'][1]:.2f} CPU s.", "",
              "| kernel | compiles | CPU [s] | wall [s] |", "|---|---|---|---|"]
    for name, (cpu, wall, n) in table:
        lines.append(f"| `{name}` | {n} | {cpu:.2f} | {wall:.2f} |")
    parts = sorted(breakdown["parts"].items(), key=lambda kv: -kv[1])
    lines += ["", "### Where a cold first fit's CPU time goes", "",
              "One more cold process, with Numba's compiler stages timed by "
              "wrapping them (exclusive of the stages each calls; the wrapping "
              "adds a little).  `import numba` (before the fit, not counted in it): "
              f"{breakdown['numba_import']:.2f} CPU s.", "",
              "| stage | CPU [s] | share |", "|---|---|---|"]
    for name, t in parts:
        lines.append(f"| {name} | {t:.2f} | {t / breakdown['fit']:.0%} |")
    lines.append(f"| first fit, in all | {breakdown['fit']:.2f} | |")
    if pre is not None:
        lines += ["", "### Prebuild", "",
                  "`python -m sklearn_falcon.prebuild` into an empty cache, then the "
                  "first fit of a new process:", "",
                  "| | wall [s] | CPU [s] |", "|---|---|---|",
                  f"| prebuild | {pre['wall']:.1f} | {pre['cpu']:.1f} |",
                  f"| first fit after it | {pre['after']['first_fit_s'][0]:.2f} | "
                  f"{pre['after']['first_fit_s'][1]:.2f} |", "", "```",
                  pre["out"].strip(), "```"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


def _numba_version():
    try:
        from importlib.metadata import version

        return version("numba")
    except Exception:  # pragma: no cover
        return "?"


if __name__ == "__main__":
    main()
