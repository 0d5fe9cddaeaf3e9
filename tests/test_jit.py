"""Numba kernels built on first use, and a cache that never stops a fit:
no writable cache location, a corrupted cache file, a read-only install
with a prebuilt cache (issue 18, defect 1; issue 16)."""

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sklearn_falcon import _jit

ROOT = Path(__file__).resolve().parents[1]

# two kernels (one CSR, one dense): a fallback that warns per kernel shows
CHILD = r"""
import json, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import numpy as np, scipy.sparse as sp
    import sklearn_falcon
    from sklearn_falcon import normalized_cut
    W = np.kron(np.eye(2), np.ones((3, 3)))
    y = np.array([0, 0, 1, 1, 1, 0])
    out = [normalized_cut(sp.csr_matrix(W), y), normalized_cut(W, y)]
print("JSON:" + json.dumps({
    "ncut": out,
    "warnings": [str(w.message) for w in caught
                 if issubclass(w.category, RuntimeWarning)]}))
"""


def _run(env_extra, code=CHILD, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    line = [x for x in p.stdout.splitlines() if x.startswith("JSON:")][-1]
    return json.loads(line[5:])


def test_import_does_not_import_numba_or_torch():
    code = ("import sys, json, sklearn_falcon; print('JSON:' + json.dumps("
            "[m in sys.modules for m in ('numba', 'torch')]))")
    assert _run({}, code) == [False, False]


def test_without_a_writable_cache_location_kernels_compile_with_one_warning(tmp_path):
    # Numba's only locator here needs NUMBA_CACHE_DIR, which is a file: no
    # cache can be written anywhere ("no locator available" from Numba).
    # The child keeps that one locator itself (NUMBA_CACHE_LOCATOR_CLASSES
    # says the same from Numba 0.60 on, and earlier ones ignore it).
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    only_user_provided = (
        "import numba.core.caching as caching\n"
        "caching.CompileResultCacheImpl._locator_classes = [\n"
        "    c for c in caching.CompileResultCacheImpl._locator_classes\n"
        "    if c.__name__.lstrip('_') == 'UserProvidedCacheLocator']\n")
    out = _run({"NUMBA_CACHE_DIR": str(blocker / "cache")},
               only_user_provided + CHILD)
    assert out["ncut"] == pytest.approx([8 / 9, 8 / 9])
    assert len(out["warnings"]) == 1
    assert "no writable location for Numba's cache" in out["warnings"][0]


@pytest.mark.parametrize("what", ["index", "data"])
def test_a_corrupted_cache_file_is_recompiled_with_a_warning(tmp_path, what):
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    first = _run(env)
    assert first["warnings"] == []
    files = list(tmp_path.rglob("*.nbi" if what == "index" else "*.nbc"))
    assert files
    for f in files:
        f.write_bytes(b"\x80\x04garbage, not a pickle" * 3)
    second = _run(env)
    assert second["ncut"] == first["ncut"]
    assert len(second["warnings"]) == 1
    assert "unreadable Numba cache entry" in second["warnings"][0]
    # the entries were written anew: the next process loads them silently
    assert _run(env)["warnings"] == []


def test_an_index_entry_naming_another_signatures_data_is_recompiled(tmp_path):
    """Numba writes a kernel's index and its data files apart: two processes
    saving two signatures of one kernel at once (a float32 and a float64
    fit on a cold shared cache) can leave the index's entry of one naming a
    data file that holds the other's machine code.  That entry was loaded,
    and every later call of the kernel failed ("can't unbox array from
    PyObject into native value"), in every process.  It is recompiled and
    rewritten, as an unreadable entry is."""
    code = r"""
import json, sys, warnings
warnings.simplefilter("always")
import numpy as np
from sklearn_falcon._backends._numba import _kernels as nk
dt = np.dtype(sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    f = nk.objective(np.array([2.0, 4.0], dt), np.array([1.0, 1.0], dt))
print("JSON:" + json.dumps({
    "f": f, "hits": sum(nk.objective.stats.cache_hits.values()),
    "warnings": [str(w.message) for w in caught
                 if issubclass(w.category, RuntimeWarning)]}))
"""
    f32, f64 = tmp_path / "f32", tmp_path / "f64"
    run32 = code.replace("sys.argv[1]", "'float32'")
    assert _run({"NUMBA_CACHE_DIR": str(f32)}, run32)["hits"] == 0
    _run({"NUMBA_CACHE_DIR": str(f64)}, code.replace("sys.argv[1]", "'float64'"))
    # the float32 index entry now names the float64 kernel's data
    data = sorted(f64.rglob("*objective*.nbc"))
    assert len(data) == 1
    target = f32 / data[0].relative_to(f64)
    assert target.exists()
    target.write_bytes(data[0].read_bytes())
    swapped = _run({"NUMBA_CACHE_DIR": str(f32)}, run32)
    assert swapped["f"] == 0.75 and swapped["hits"] == 0
    assert len(swapped["warnings"]) == 1
    assert "unreadable Numba cache entry" in swapped["warnings"][0]
    # written anew: the next process loads it silently
    assert _run({"NUMBA_CACHE_DIR": str(f32)}, run32) == {
        "f": 0.75, "hits": 1, "warnings": []}


def test_a_read_only_install_reads_its_prebuilt_cache(tmp_path):
    code = r"""
import json, sys
import numba.core.caching as caching
if sys.argv[1] == "read-only":
    def refuse(self):
        raise OSError("read-only file system")
    for name in ("InTreeCacheLocator", "UserWideCacheLocator"):
        # public from Numba 0.60, with a leading underscore before
        cls = getattr(caching, name, None) or getattr(caching, "_" + name)
        cls.ensure_cache_path = refuse
import numpy as np
from sklearn_falcon._backends._numba import _kernels as nk
f = nk.objective(np.array([2.0, 4.0]), np.array([1.0, 1.0]))
print("JSON:" + json.dumps({"f": f, "hits": sum(nk.objective.stats.cache_hits.values()),
                            "path": nk.objective.stats.cache_path}))
"""
    env = {"HOME": str(tmp_path)}
    writable = _run(env, code.replace("sys.argv[1]", "'writable'"))
    assert writable["path"].endswith("__pycache__")  # the package's own
    ro = _run(env, code.replace("sys.argv[1]", "'read-only'"))
    assert ro["f"] == writable["f"] == 0.75
    assert ro["hits"] == 1 and ro["path"] == writable["path"]


def test_numba_boundscheck_is_not_served_the_unchecked_cached_kernels(tmp_path):
    """Numba's cache key ignores ``NUMBA_BOUNDSCHECK``: with the flag set,
    the kernels cached without it were loaded, and an index out of bounds
    read (or wrote) past the array instead of raising IndexError.  Both
    builds are cached, each loaded in its own mode."""
    code = r"""
import json, sys
import numpy as np
from sklearn_falcon._backends._numba import _kernels as nk
vol, assoc = np.array([2.0, 4.0]), np.array([1.0, 1.0])
try:
    nk.objective(vol, assoc[:int(sys.argv[1])])
    raised = False
except IndexError:
    raised = True
print("JSON:" + json.dumps({"raised": raised,
                            "hits": sum(nk.objective.stats.cache_hits.values())}))
"""
    env = {"NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_BOUNDSCHECK": "0"}
    run = code.replace("sys.argv[1]", "2")
    assert _run(env, run) == {"raised": False, "hits": 0}
    checked = {**env, "NUMBA_BOUNDSCHECK": "1"}
    assert _run(checked, code.replace("sys.argv[1]", "1")) == {"raised": True,
                                                               "hits": 0}
    assert _run(env, run) == {"raised": False, "hits": 1}
    assert _run(checked, run) == {"raised": False, "hits": 1}


def test_a_cached_kernel_loads_without_numbas_context_refresh(tmp_path):
    # A load from the cache skips Numba's target-context refresh (which
    # imports its NumPy implementations); a compile after it (a signature
    # not in the cache) still refreshes the context itself and runs.
    code = r"""
import json, sys
import numpy as np
from sklearn_falcon._backends._numba import _kernels as nk
f = nk.objective(np.array([2.0, 4.0]), np.array([1.0, 1.0]))
loaded = 'numba.np.arraymath' in sys.modules
f32 = None
if WARM:
    f32 = float(nk.objective(np.array([2.0, 4.0], np.float32),
                             np.array([1.0, 1.0], np.float32)))
print("JSON:" + json.dumps({"f": f, "f32": f32, "loaded": loaded,
                            "hits": sum(nk.objective.stats.cache_hits.values()),
                            "misses": sum(nk.objective.stats.cache_misses.values())}))
"""
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    cold = _run(env, code.replace("WARM", "False"))
    assert (cold["hits"], cold["misses"]) == (0, 1) and cold["loaded"]
    warm = _run(env, code.replace("WARM", "True"))
    assert (warm["hits"], warm["misses"]) == (1, 1) and not warm["loaded"]
    assert warm["f"] == warm["f32"] == cold["f"] == 0.75


LAZY_MODULE = """
from sklearn_falcon._jit import jit


@jit
def inner(x):
    return 2.0 * x


@jit
def outer(x):
    return inner(x) + 1.0
"""

LAZY_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from sklearn_falcon import _jit
if sys.argv[2] == "numba-format":  # save entries as Numba does, without symbols
    _jit._with_symbols = lambda payload, library: payload
import lazymod
out = {"inner": lazymod.inner(1.0)}
library = next(iter(lazymod.inner.overloads.values())).library
out["unparsed"] = "_lazy_bitcode" in vars(library)
if sys.argv[3] == "outer":
    out["outer"] = lazymod.outer(1.0)  # links inner's module into outer's
    out["unparsed_after"] = "_lazy_bitcode" in vars(library)
out["hits"] = [sum(k.stats.cache_hits.values()) for k in (lazymod.inner, lazymod.outer)]
print("JSON:" + json.dumps(out))
"""


@pytest.mark.parametrize("fmt", ["symbols", "numba-format"])
def test_a_cached_kernels_bitcode_is_parsed_when_a_compile_links_it(tmp_path, fmt):
    # A kernel loaded from the cache leaves its LLVM bitcode unparsed (its
    # defined symbols are saved with it) until a kernel compiled later links
    # it; an entry saved without the symbols loads as Numba loads it.
    (tmp_path / "lazymod.py").write_text(LAZY_MODULE)
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run(call):
        return _run(env, LAZY_CHILD.replace("sys.argv[1]", repr(str(tmp_path)))
                    .replace("sys.argv[2]", repr(fmt))
                    .replace("sys.argv[3]", repr(call)))

    cold = run("inner")  # compiles and saves inner only
    assert cold == {"inner": 2.0, "unparsed": False, "hits": [0, 0]}
    warm = run("outer")  # loads inner, compiles outer against it
    lazy = fmt == "symbols"
    assert warm == {"inner": 2.0, "unparsed": lazy, "outer": 3.0,
                    "unparsed_after": False, "hits": [1, 0]}
    both = run("outer")  # loads both
    assert both == {"inner": 2.0, "unparsed": lazy, "outer": 3.0,
                    "unparsed_after": lazy, "hits": [1, 1]}


def test_a_kernel_is_a_plain_function_until_called():
    from sklearn_falcon._solver import _rules

    assert isinstance(_rules.accept, _jit.Kernel)
    # the Python loop calls the plain function on arrays
    assert _rules.accept.py_func(np.array([0, 2]), np.array([1.0, 0.0]),
                                 np.array([1.0, 1.0]), 0.1, 1.0).tolist() == [True,
                                                                           False]
    assert "kernel" in repr(_rules.accept)


def test_a_kernel_pickles_by_reference():
    import pickle

    from sklearn_falcon._backends._numba import _kernels as nk

    assert pickle.loads(pickle.dumps(nk.objective)) is nk.objective


def test_the_compile_notice_is_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(_jit, "NOTICE_AFTER_S", 0.05)
    notice = _jit._CompileNotice()
    with caplog.at_level(logging.WARNING, logger="sklearn_falcon"):
        notice.on_start()
        notice.on_start()  # nested compiles count once
        time.sleep(0.3)
        notice.on_end()
        notice.on_end()
        notice.on_start()
        time.sleep(0.2)
        notice.on_end()
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1 and "compiling kernels" in msgs[0]


def test_a_short_compile_says_nothing(monkeypatch, caplog):
    monkeypatch.setattr(_jit, "NOTICE_AFTER_S", 5.0)
    notice = _jit._CompileNotice()
    with caplog.at_level(logging.WARNING, logger="sklearn_falcon"):
        notice.on_start()
        notice.on_end()
        time.sleep(0.05)
    assert not caplog.records


class _Disp:
    def __init__(self, module):
        self.py_func = type("F", (), {"__module__": module})


def test_the_collector_pauses_during_a_package_compile_only():
    import gc

    was = gc.isenabled()
    gc.enable()
    try:
        pause = _jit._GcPause()
        pause.on_start(_Disp("sklearn_falcon._inits._coarsen"))
        pause.on_start(_Disp("numba.np.arrayobj"))  # nested: still paused
        assert not gc.isenabled()
        pause.on_end()
        assert not gc.isenabled()
        pause.on_end()
        assert gc.isenabled()
        pause.on_start(_Disp("somebody_else"))  # another library's compile
        assert gc.isenabled()
        pause.on_end()
        gc.disable()  # disabled by the user: stays disabled
        pause.on_start(_Disp("sklearn_falcon._solver._compiled"))
        pause.on_end()
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()
        else:
            gc.disable()


def test_the_collector_is_paused_while_a_kernel_compiles(monkeypatch):
    import gc

    from numba.core import event

    def plus_one(x):
        return x + 1

    plus_one.__module__ = "sklearn_falcon._test_only"
    monkeypatch.setitem(_jit._state, "cache_ok", False)  # write no cache file
    kernel = _jit.Kernel(plus_one, {})
    _jit._setup_numba()  # its listener first

    seen = []

    class Seen(event.Listener):
        def on_start(self, e):
            seen.append(gc.isenabled())

        def on_end(self, e):
            pass

    assert gc.isenabled()
    with event.install_listener("numba:compile", Seen()):
        assert kernel(1) == 2
    assert seen and not seen[0]
    assert gc.isenabled()


def test_prebuild_runs(capsys):
    from sklearn_falcon import prebuild

    prebuild.main([])
    out = capsys.readouterr().out
    assert "sparse graphs" in out and "Done in" in out


def test_prebuild_compiles_the_upsampling_and_the_serial_twins():
    from sklearn_falcon import prebuild
    from sklearn_falcon._backends._numba import _kernels as nk
    from sklearn_falcon.image import _pamr, _upsample

    prebuild.prebuild(verbose=False, fork_twins=True)
    assert _jit._state["serial_after_fork"] is False  # back as it was
    # the first segmentation of a large image compiled it (1.5 s) before
    assert any(str(sig[0]).startswith("array(uint8")
               for sig in _upsample._joint_bilateral_labels.signatures)
    for kernel in (nk._cluster_weights_csr_par, _pamr._affinities,
                   _upsample._joint_bilateral_labels):
        twin = kernel.serial_twin.dispatcher
        assert twin.signatures and not twin.targetoptions.get("parallel")
        assert kernel.dispatcher.targetoptions.get("parallel")


def test_parallel_kernels_take_turns_on_numbas_workqueue_layer():
    # the workqueue layer (Numba's fallback without TBB or OpenMP, as on
    # macOS without libomp) aborts the process when two Python threads
    # launch parallel kernels at once; there the package serializes them
    code = r"""
import json, threading
import numba, numpy as np, scipy.sparse as sp
from sklearn_falcon._backends._numba import _kernels as nk
W = sp.random(5000, 5000, density=0.004, format="csr", random_state=0)
labels = (np.arange(5000) % 5).astype(np.int64)
args = (W.indptr, W.indices, W.data, labels, 5)
ref = nk._cluster_weights_csr_par(*args)
barrier, same = threading.Barrier(4), []
def run():
    barrier.wait()
    for _ in range(150):
        same.append(bool(np.array_equal(nk._cluster_weights_csr_par(*args), ref)))
threads = [threading.Thread(target=run) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("JSON:" + json.dumps({"layer": numba.threading_layer(), "same": same}))
"""
    out = _run({"NUMBA_THREADING_LAYER": "workqueue"}, code)
    assert out["layer"] == "workqueue"
    assert len(out["same"]) == 600 and all(out["same"])


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
@pytest.mark.parametrize("parent", ["numba", "torch"])
def test_a_child_forked_after_openmp_runs_parallel_kernels_serially(parent):
    # GNU OpenMP is not fork-safe: once the parent has used it, Numba
    # terminates a forked child at its first parallel loop (the parent ran
    # one) or the loop hangs (torch's CPU operations used it)
    if parent == "torch":
        pytest.importorskip("torch")
    code = r"""
import json, multiprocessing
import numba, numpy as np, scipy.sparse as sp
from sklearn_falcon._backends._numba import _kernels as nk
W = sp.random(3000, 3000, density=0.004, format="csr", random_state=0)
args = (W.indptr, W.indices, W.data, (np.arange(3000) % 5).astype(np.int64), 5)
ref = np.asarray(W.sum(1)).ravel()
if PARENT == "numba":
    nk._cluster_weights_csr_par(*args)
else:
    import torch
    a = torch.randn(1500, 1500, dtype=torch.float64)
    float(torch.softmax(a @ a, 1).sum())
def child(queue):
    queue.put(bool(np.allclose(nk._cluster_weights_csr_par(*args).sum(1), ref)))
ctx = multiprocessing.get_context("fork")
queue = ctx.Queue()
p = ctx.Process(target=child, args=(queue,))
p.start()
p.join(120)
if p.is_alive():
    p.kill()
nk._cluster_weights_csr_par(*args)  # the parent's layer, for the skip
print("JSON:" + json.dumps({"layer": numba.threading_layer(),
                            "exitcode": p.exitcode,
                            "same": queue.get(timeout=5) if p.exitcode == 0 else None}))
""".replace("PARENT", repr(parent))
    out = _run({}, code)
    if out["layer"] != "omp":
        pytest.skip(f"Numba's threading layer is {out['layer']}, which is fork-safe")
    assert out["exitcode"] == 0 and out["same"]


def test_after_prebuild_the_common_paths_compile_nothing(tmp_path):
    # a copy of the package without its cache: prebuild, then the paths a
    # user takes first load every kernel from the cache
    import shutil

    shutil.copytree(ROOT / "sklearn_falcon", tmp_path / "sklearn_falcon",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONPATH": str(tmp_path)}
    code = "from sklearn_falcon import prebuild; prebuild.prebuild(verbose=False)"
    _run(env, code + "\nprint('JSON:{}')", cwd=tmp_path)
    paths = r"""
import gc, json, warnings
warnings.simplefilter("ignore")
import numpy as np, scipy.sparse as sp
import sklearn_falcon
from sklearn_falcon import FalconNCut, ImageSegmenter, normalized_cut
from sklearn_falcon._jit import Kernel
assert sklearn_falcon.__file__.startswith(%r)
rng = np.random.default_rng(0)
X = np.r_[rng.normal(0, 1, (150, 3)), rng.normal(5, 1, (150, 3))]
for affinity in ("nearest_neighbors", "rbf", "cosine"):
    for init in ("multilevel", "kmeans", "spectral", "random"):
        est = FalconNCut(3, affinity=affinity, init=init, gamma=0.1,
                         random_state=0).fit(X)
        est.predict(X[:5]), est.score(X[:50])
W = est.affinity_matrix_
for A in (W, W.astype(np.float32), sp.csr_matrix(W)):
    normalized_cut(A, FalconNCut(3, affinity="precomputed").fit_predict(A))
img = np.zeros((300, 400, 3), np.uint8)
img[:, 200:] = 200
img[150:] += 40
for k in (3, "auto"):
    ImageSegmenter(n_segments=k, max_tokens=256, random_state=0).segment(img)
compiled = sorted(k.py_func.__qualname__ for k in gc.get_objects()
                  if isinstance(k, Kernel) and k._dispatcher is not None
                  and k._dispatcher.stats.cache_misses)
print("JSON:" + json.dumps(compiled))
""" % str(tmp_path)
    assert _run(env, paths, cwd=tmp_path) == []


def test_prebuild_says_where_the_cache_is_under_numba_cache_dir(tmp_path):
    # the docs said the cache goes next to the package when it is writable,
    # "else to NUMBA_CACHE_DIR", and prebuild named its "sibling __pycache__
    # directories": a set NUMBA_CACHE_DIR comes first (Numba's first
    # locator), where the siblings are no __pycache__
    from sklearn_falcon import prebuild

    code = ("from sklearn_falcon import prebuild; prebuild.STEPS.clear(); "
            "prebuild.prebuild(); print('JSON:0')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CACHE")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["NUMBA_CACHE_DIR"] = str(tmp_path)
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    line, = [x for x in p.stdout.splitlines() if x.startswith("Numba cache")]
    assert str(tmp_path) in line and "__pycache__" not in line
    assert prebuild.__doc__.index("NUMBA_CACHE_DIR") < prebuild.__doc__.index(
        "__pycache__")


def test_prebuild_command_fails_where_nothing_would_be_kept(monkeypatch, capsys):
    # with SKLEARN_FALCON_NUMBA_CACHE=0 (or no writable cache location),
    # `python -m sklearn_falcon.prebuild --quiet` compiled for minutes, kept
    # nothing, printed nothing and exited 0: a Docker build went on without
    # its cache
    from sklearn_falcon import prebuild

    ran = []
    monkeypatch.setattr(prebuild, "STEPS", {"step": lambda: ran.append(1)})
    monkeypatch.setattr(_jit, "CACHE", False)
    with pytest.raises(SystemExit) as exc:
        prebuild.main(["--quiet"])
    assert exc.value.code == 1 and ran == []
    assert "cache is off (SKLEARN_FALCON_NUMBA_CACHE)" in capsys.readouterr().err
    monkeypatch.setattr(_jit, "CACHE", True)
    monkeypatch.setitem(_jit._state, "cache_ok", False)
    with pytest.raises(SystemExit) as exc:
        prebuild.main(["--quiet"])
    assert exc.value.code == 1 and ran == [1]
    assert "nothing was kept" in capsys.readouterr().err
    monkeypatch.setitem(_jit._state, "cache_ok", True)
    assert prebuild.main(["--quiet"]) == 0


def test_prebuild_help_says_quiet_keeps_the_errors(capsys):
    # --help said that --quiet prints "nothing", but a run that keeps
    # nothing prints its error (and exits 1) with --quiet too
    from sklearn_falcon import prebuild

    with pytest.raises(SystemExit):
        prebuild.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--quiet print no progress (errors still go to stderr)" in out
