"""The Numba switch shared by every kernel module: lazy kernels and their cache.

``@jit`` (serial) and ``@pjit`` (parallel, with :data:`prange`) turn a
function into a :class:`Kernel`: a stand-in that imports Numba and builds
the real dispatcher the first time the kernel is called (or typed inside
another kernel), so ``import sklearn_falcon`` does not import Numba and a
fit compiles only the kernels its path calls.  ``@jit(inline=True)`` marks
a small helper that Numba inlines into its callers instead of compiling it
on its own (a separately compiled helper costs about 70 ms of compile time).

Compiled kernels are cached on disk (Numba's ``cache=True``):

* ``SKLEARN_FALCON_NUMBA_CACHE=0`` (or ``false``, ``no``, ``off``) switches
  the cache off;
* when no writable cache location exists (a read-only install without a
  writable ``NUMBA_CACHE_DIR`` or home), kernels are compiled in every
  process, with one ``RuntimeWarning``;
* an unreadable cache entry (a corrupted file, or an index entry naming the
  data of another signature, which two processes saving at once can leave)
  is recompiled and rewritten, with one ``RuntimeWarning``;
* a cached kernel is tied to the sources of every kernel module, not only
  its own file (Numba's default): kernels compile their callees into
  themselves, so an edit of a callee's module invalidates its callers too;
* ``NUMBA_BOUNDSCHECK=1`` kernels are cached apart (Numba's key ignores it);
* a read-only install whose ``__pycache__`` holds a prebuilt cache is read
  from (Numba itself only uses directories it can write to);
* a cached kernel's LLVM bitcode, which only a kernel compiled later that
  calls it needs, is parsed when such a compile first links it, not on
  every load (its defined symbols are saved with it).

Parallel kernels launched from several Python threads at once take turns
on Numba's workqueue threading layer, which is not thread-safe (it aborts
the process); the OpenMP and TBB layers run them at once.  In a forked
process (``multiprocessing``'s default start on Linux, PyTorch's data
loader workers), every parallel kernel runs as its
:attr:`ParallelKernel.serial_twin` unless the layer is known to be
fork-safe: a child of a process that used GNU OpenMP (Numba's parallel
kernels, torch's CPU operations) is terminated by Numba, or hangs, at its
first parallel loop.  A launch runs on at most the CPUs that joblib counts
(Numba's count, the affinity's CPUs, leaves out a container's CPU quota:
64 threads throttled on 2 CPUs) unless ``NUMBA_NUM_THREADS`` sets it, as
``OMP_NUM_THREADS`` does for scikit-learn; only a launch reads Numba's count,
which starts its threads (a fork hazard, above).  Parallel kernels are
called from Python only (never from another kernel), so that these rules
see every launch.

When compiling takes more than a second, the ``"sklearn_falcon"`` logger
says so, once per process.  Python's cyclic garbage collector is paused
while a kernel of the package compiles (Numba's compiler allocates millions
of short-lived objects: the collector's passes over them were about a tenth
of a first fit's compile time) and resumes when the outermost compile ends.
``python -m sklearn_falcon.prebuild`` compiles the kernels of the common
paths ahead (for Docker images and clusters).
"""

import contextlib
import functools
import gc
import hashlib
import importlib
import logging
import os
import re
import threading
import time
import types
import warnings
from pathlib import Path

__all__ = ["CACHE", "PARALLEL_MIN", "Kernel", "ParallelKernel", "inlined", "jit",
           "pjit", "prange", "usable_cpus"]

CACHE = os.environ.get("SKLEARN_FALCON_NUMBA_CACHE", "1").lower() not in (
    "0", "false", "no", "off")

# Below this much work (array entries or nonzeros) a kernel runs serially:
# waking the thread pool costs more than it saves on tiny (coarse) graphs.
PARALLEL_MIN = 1_000_000

# ``prange`` of the kernel modules: ``range`` until a parallel kernel is
# built, when its module's global is pointed at ``numba.prange`` (Numba
# recognises a parallel loop by that object).  Called from Python, both are
# ``range``.
prange = range

# Compile time after which the logger says that kernels are being compiled.
NOTICE_AFTER_S = 1.0

logger = logging.getLogger("sklearn_falcon")

_lock = threading.RLock()
_state = {"numba": False, "cache_ok": CACHE, "warned_locator": False,
          "warned_load": False, "warned_save": False, "stamp": None,
          "notice": True, "serial_after_fork": False}
requested = threading.local()  # .n: a fit's n_jobs (fit_threads), set at launch


class Kernel:
    """A Numba kernel built on first use.

    Calling it calls the Numba dispatcher (built, and loaded from the cache
    or compiled, the first time); inside another kernel it is typed as that
    dispatcher.  ``py_func`` is the plain Python function; other attributes
    (``signatures``, ``stats``, ...) are the dispatcher's."""

    def __init__(self, py_func, options):
        self.py_func, self.options, self._dispatcher = py_func, dict(options), None
        functools.update_wrapper(self, py_func)

    @property
    def dispatcher(self):
        """The Numba dispatcher (built on first access)."""
        d = self._dispatcher
        return d if d is not None else self._build()

    def _build(self):
        with _lock:  # Numba is imported under it (and _threads._numba)
            _setup_numba()
        from numba.core.compiler_lock import global_compiler_lock
        # Numba's lock first, as in a compile that types (builds) its callees
        with global_compiler_lock, _lock:
            if self._dispatcher is None:
                self._dispatcher = _make_dispatcher(self.py_func, self.options)
        return self._dispatcher

    def __call__(self, *args):
        return self.dispatcher(*args)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self):
        return f"<sklearn_falcon kernel {self.py_func.__module__}.{self.__qualname__}>"

    def __reduce__(self):
        # by reference, like a function (process pools pickle what they call)
        return _kernel_named, (self.py_func.__module__, self.__qualname__)


class ParallelKernel(Kernel):
    """A :class:`Kernel` whose loops over :data:`prange` run on Numba's
    threads, launched by the rules of the module docstring."""

    def __call__(self, *args):
        if _state["serial_after_fork"]:
            return self.serial_twin(*args)
        layer = _layer["name"]
        if layer is None or layer == "workqueue":
            with _launch_lock, _within_usable_cpus():
                out = self.dispatcher(*args)
                if layer is None:
                    _layer["name"] = _threading_layer()
            return out
        with _within_usable_cpus():
            return self.dispatcher(*args)

    @property
    def serial_twin(self):
        """This kernel compiled without threads (its ``prange`` loops run
        as ``range``), under a name of its own so that the two never share
        a cache entry (Numba's cache key ignores the compile flags)."""
        twin = self.__dict__.get("_twin")
        if twin is None:
            f = self.py_func
            g = types.FunctionType(f.__code__, f.__globals__, f.__name__ + "_serial",
                                   f.__defaults__, f.__closure__)
            g.__qualname__ = f.__qualname__ + "_serial"
            g.__module__, g.__doc__ = f.__module__, f.__doc__
            twin = self.__dict__["_twin"] = Kernel(g, {})
        return twin


def usable_cpus():
    """The CPUs this process may use (its affinity, a container's CPU quota,
    ``LOKY_MAX_CPU_COUNT``), as joblib counts them."""
    from joblib import cpu_count

    return cpu_count()


@contextlib.contextmanager
def _within_usable_cpus():
    """A parallel launch on the :data:`requested` threads (else Numba's), at
    most :func:`usable_cpus` unless ``NUMBA_NUM_THREADS`` sets the count."""
    import numba

    current = numba.get_num_threads()  # starts Numba's threads: a launch only
    threads = getattr(requested, "n", None) or current
    if "NUMBA_NUM_THREADS" not in os.environ:
        threads = min(threads, usable_cpus())
    if threads != current:
        numba.set_num_threads(threads)
    try:
        yield
    finally:
        if threads != current:
            numba.set_num_threads(current)


# Numba's workqueue threading layer (its fallback where neither TBB nor
# OpenMP is available, as on macOS without libomp) is not thread-safe: two
# Python threads launching parallel kernels at once abort the process
# ("Concurrent access has been detected").  There the launches take turns
# (and the first launch, before the layer is known).
_launch_lock = threading.Lock()
_layer = {"name": None}


def _threading_layer():
    """Numba's threading layer, or None before its first parallel launch."""
    import numba

    try:
        return numba.threading_layer()
    except ValueError:
        return None


def _after_fork_in_child():
    """In a child forked from this process: new locks (another thread of
    the parent may have held one), and serial kernels from now on unless
    Numba's threading layer is known to be fork-safe (TBB, workqueue).  GNU
    OpenMP is not: once the parent has used it (Numba's kernels, or torch's
    CPU operations: that cannot be read), a child's OpenMP loop is
    terminated by Numba or hangs."""
    global _lock, _launch_lock
    _lock = threading.RLock()
    _launch_lock = threading.Lock()
    if _layer["name"] not in ("tbb", "workqueue"):
        _state["serial_after_fork"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _kernel_named(module, qualname):
    return functools.reduce(getattr, qualname.split("."),
                            importlib.import_module(module))


def jit(fn=None, *, inline=False):
    """Decorator of a serial kernel: ``@jit``, or ``@jit(inline=True)`` for a
    small helper that Numba inlines into the kernels that call it."""
    options = {"inline": "always"} if inline else {}
    return (lambda f: Kernel(f, options)) if fn is None else Kernel(fn, options)


def inlined(kernel):
    """A twin of the serial ``kernel`` that Numba inlines into the kernels
    that call it, for a caller that is its only call site on a path.

    A kernel called from another is compiled on its own (with an entry
    point from Python) and its machine code is optimized and generated
    again inside every caller; inlined, it is compiled once, in the caller.
    The kernel itself stays for its callers from Python."""
    return Kernel(kernel.py_func, {"inline": "always"})


def pjit(fn):
    """Decorator of a parallel kernel (its loops over :data:`prange` run on
    Numba's threads)."""
    return ParallelKernel(fn, {"parallel": True})


# ------------------------------------------------------------ numba set-up
def _setup_numba():
    """Once per process: import Numba, type :class:`Kernel` globals as their
    dispatchers, and listen to compilations for the one-time notice."""
    if _state["numba"]:
        return
    from numba.core import event
    from numba.extending import typeof_impl

    @typeof_impl.register(Kernel)
    def _typeof_kernel(val, c):
        return typeof_impl(val.dispatcher, c)

    notice = _CompileNotice()
    pause = _GcPause()

    class _Listener(event.Listener):
        def on_start(self, event):
            pause.on_start(event.data["dispatcher"])
            notice.on_start()

        def on_end(self, event):
            notice.on_end()
            pause.on_end()

    event.register("numba:compile", _Listener())
    _state["numba"] = True


def _make_dispatcher(py_func, options):
    import numba

    if options.get("parallel") and py_func.__globals__.get("prange") is range:
        py_func.__globals__["prange"] = numba.prange
    disp = numba.njit(nogil=True, **options)(py_func)
    if _state["cache_ok"]:
        try:
            disp._cache = _tolerant_cache_class()(py_func)
        except RuntimeError as exc:  # Numba: "cannot cache function ...: no locator"
            _state["cache_ok"] = False
            _warn_once("warned_locator",
                       "sklearn-falcon: no writable location for Numba's cache "
                       f"({exc}); kernels are compiled in every process. Set "
                       "NUMBA_CACHE_DIR to a writable directory to keep them.",
                       stacklevel=5)
    return disp


@functools.cache
def _tolerant_cache_class():
    """Numba's per-function cache, made tolerant of unreadable entries, tied
    to the sources of every kernel module, and able to read a prebuilt cache
    from a read-only install (see the module docstring)."""
    from numba.core import config, sigutils
    from numba.core.caching import (CompileResultCacheImpl, FunctionCache,
                                    IndexDataCacheFile)
    from numba.core.runtime import rtsys

    # Numba's locators accept a cache directory only where they can write;
    # a read-only install whose __pycache__ holds a prebuilt cache of the
    # module is read from (a new signature is compiled, not saved) before
    # falling back to the user-wide directory.
    base = list(CompileResultCacheImpl._locator_classes)
    in_tree = next((k for k, c in enumerate(base)
                    if c.__name__.lstrip("_") == "InTreeCacheLocator"), None)
    if in_tree is not None:
        class PrebuiltLocator(base[in_tree]):
            @classmethod
            def from_function(cls, py_func, py_file):
                if not os.path.exists(py_file):
                    return None
                self = cls(py_func, py_file)
                prefix = os.path.splitext(os.path.basename(py_file))[0] + "."
                try:
                    names = os.listdir(self.get_cache_path())
                except OSError:
                    return None
                if any(n.startswith(prefix) and n.endswith(".nbi") for n in names):
                    return self
                return None

        base.insert(in_tree + 1, PrebuiltLocator)

    class Impl(CompileResultCacheImpl):
        _locator_classes = base

        def reduce(self, cres):
            return _with_symbols(super().reduce(cres), cres.library)

        def rebuild(self, target_context, payload):
            libdata, symbols = _split_symbols(payload[0])
            payload = (libdata,) + tuple(payload[1:])
            codegen = target_context.codegen()
            if symbols is None or not _lazy_supported(codegen):
                return super().rebuild(target_context, payload)

            # Numba's rebuild unserializes the kernel's library: this one
            # library is made lazily (loads run under Numba's compiler lock)
            def unserialize(state):
                if state is libdata:
                    return _lazy_library(codegen, state, symbols)
                return type(codegen).unserialize_library(codegen, state)

            codegen.unserialize_library = unserialize
            try:
                return super().rebuild(target_context, payload)
            finally:
                del codegen.unserialize_library

    class CheckedFile(IndexDataCacheFile):
        def load(self, key):  # an entry naming another signature's data: unreadable
            if (data := super().load(key)) is not None and (
                    data[3].args != sigutils.normalize_signature(key[0])[0]):
                raise ValueError(f"its data file holds the kernel of {data[3]}")
            return data

    class TolerantCache(FunctionCache):
        _impl_class = Impl

        def __init__(self, py_func):
            super().__init__(py_func)
            stamp = (self._impl.locator.get_source_stamp(), _sources_stamp())
            self._cache_file = CheckedFile(
                cache_path=self._cache_path, filename_base=self._impl.filename_base,
                source_stamp=stamp)

        def _index_key(self, sig, codegen):
            key = super()._index_key(sig, codegen)
            return key + ("boundscheck",) if config.BOUNDSCHECK else key

        def load_overload(self, sig, target_context):
            # Numba refreshes the whole target context before every load, which
            # the first time imports its NumPy, typed-container and random
            # implementations (0.16 s, a third of a small first fit with a warm
            # cache).  A cached entry is machine code that needs only the
            # runtime; a miss compiles, and the compiler refreshes the context.
            try:
                rtsys.initialize(target_context)
                with self._guard_against_spurious_io_errors():
                    return self._load_overload(sig, target_context)
            except Exception as exc:  # a corrupted or foreign file: recompile
                _warn_once("warned_load",
                           f"sklearn-falcon: unreadable Numba cache entry for "
                           f"{self._py_func.__qualname__} ({type(exc).__name__}: "
                           f"{exc}) in {self.cache_path}; recompiling it.")
                with contextlib.suppress(OSError):
                    self.flush()  # an empty index: the entry is written anew
                return None

        def save_overload(self, sig, data):
            try:
                super().save_overload(sig, data)
            except Exception as exc:
                self.disable()
                _warn_once("warned_save",
                           f"sklearn-falcon: could not write the Numba cache of "
                           f"{self._py_func.__qualname__} ({type(exc).__name__}: "
                           f"{exc}); it is compiled again in the next process.")

    return TolerantCache


# ------------------------------------------------- lazily parsed bitcode
# A cached kernel holds its machine code and, for kernels compiled later that
# call it, the LLVM bitcode of its module.  Numba parses that bitcode on every
# load, to link it and to list the symbols it defines: about 2 ms a kernel, a
# sixth of a small first fit with a warm cache.  Here the symbols are saved
# with the entry, and the bitcode is parsed when a compile first links the
# kernel.  Entries saved without the symbols (an older cache), or a Numba
# whose libraries lack the attributes used here, load as Numba loads them.


def _with_symbols(payload, library):
    """A kernel's cache payload (``CompileResult._reduce``), with the names
    its module for linking defines (what Numba lists when it loads one)."""
    name, kind, data = payload[0]
    if kind != "object" or len(data) != 2:
        return payload
    try:
        module = library._get_module_for_linking()  # the module of data[1]
        symbols = tuple(value.name
                        for values in (module.functions, module.global_variables)
                        for value in values if not value.is_declaration)
    except Exception:  # pragma: no cover - another Numba's library
        return payload
    return ((name, kind, (*data, symbols)),) + tuple(payload[1:])


def _split_symbols(libdata):
    """``(libdata, symbols)``: a cached library in Numba's own form, and the
    symbols saved with it (None for an entry saved without them)."""
    name, kind, data = libdata
    if kind != "object" or len(data) != 3:
        return libdata, None
    object_code, bitcode, symbols = data
    if not (isinstance(symbols, tuple) and all(isinstance(x, str) for x in symbols)):
        return libdata, None  # pragma: no cover - another Numba's own format
    return (name, kind, (object_code, bitcode)), symbols


def _lazy_supported(codegen):
    """Whether this Numba's code libraries and engine have what
    :func:`_lazy_library` uses."""
    library_class = getattr(codegen, "_library_class", None)
    return (isinstance(getattr(getattr(codegen, "_engine", None),
                               "_defined_symbols", None), set)
            and callable(getattr(codegen, "create_library", None))
            and all(hasattr(library_class, a) for a in (
                "_get_module_for_linking", "enable_object_caching",
                "_set_compiled_object", "_finalize_final_module")))


def _lazy_library(codegen, libdata, symbols):
    """Numba's ``_unserialize`` of an object-code library, but with the
    bitcode kept unparsed and the defined symbols taken from ``symbols``."""
    name, _, (object_code, bitcode) = libdata
    library = codegen.create_library(name)
    library.__class__ = _lazy_linking_class(type(library))
    library._lazy_bitcode = bitcode
    library.enable_object_caching()
    library._set_compiled_object(object_code)
    library._finalize_final_module()
    codegen._engine._defined_symbols.update(symbols)
    return library


@functools.cache
def _lazy_linking_class(base):
    """``base`` (Numba's code library) whose module for linking into other
    kernels is parsed from the saved bitcode when first asked for."""

    class LazyLinking(base):
        @property
        def _shared_module(self):
            d = self.__dict__
            if d.get("_lazy_bitcode") is not None:
                import llvmlite.binding as ll

                d["_shared_module_"] = ll.parse_bitcode(d.pop("_lazy_bitcode"))
            return d.get("_shared_module_")

        @_shared_module.setter
        def _shared_module(self, value):
            self.__dict__["_shared_module_"] = value

    LazyLinking.__name__ = LazyLinking.__qualname__ = base.__name__
    return LazyLinking


def _warn_once(key, message, stacklevel=2):
    if not _state[key]:
        _state[key] = True
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


_KERNEL_MODULE = re.compile(r"^from \.+_jit import ", re.MULTILINE)


def _sources_stamp():
    """A hash of every module of the package that defines kernels."""
    if _state["stamp"] is None:
        h = hashlib.sha256()
        root = Path(__file__).resolve().parent
        try:
            for path in sorted(root.rglob("*.py")):
                text = path.read_bytes()
                if _KERNEL_MODULE.search(text.decode("utf-8", "replace")):
                    h.update(str(path.relative_to(root)).encode())
                    h.update(text)
        except OSError:  # pragma: no cover - sources not readable (zip import)
            pass
        _state["stamp"] = h.hexdigest()
    return _state["stamp"]


class _GcPause:
    """Pauses Python's cyclic garbage collector from the start of the
    outermost compile of a kernel of the package to its end (a Numba event
    listener; compiles are serialized by Numba's compiler lock), and resumes
    it if it was enabled."""

    def __init__(self):
        self.depth, self.resume = 0, False

    def on_start(self, dispatcher):
        if self.depth == 0:
            py_func = getattr(dispatcher, "py_func", None)
            ours = getattr(py_func, "__module__", "").startswith(__package__ + ".")
            self.resume = ours and gc.isenabled()
            if self.resume:
                gc.disable()
        self.depth += 1

    def on_end(self):
        self.depth -= 1
        if self.depth == 0 and self.resume:
            self.resume = False
            gc.enable()


class _CompileNotice:
    """Logs once, when compiling has taken ``NOTICE_AFTER_S`` seconds in this
    process, that kernels are being compiled (a Numba event listener)."""

    def __init__(self):
        self.depth, self.spent, self.done = 0, 0.0, False
        self.t0 = self.timer = None

    def on_start(self):
        if self.depth == 0 and not self.done:
            self.t0 = time.perf_counter()
            self.timer = threading.Timer(max(0.0, NOTICE_AFTER_S - self.spent),
                                         self.announce)
            self.timer.daemon = True
            self.timer.start()
        self.depth += 1

    def on_end(self):
        self.depth -= 1
        if self.depth == 0 and self.t0 is not None:
            self.timer.cancel()
            self.spent += time.perf_counter() - self.t0
            self.t0 = None

    def announce(self):
        if self.done or not _state["notice"]:
            return
        self.done = True
        where = ("once per environment" if _state["cache_ok"] else
                 "in every process: Numba's cache is off")
        logger.warning(
            "sklearn-falcon: compiling kernels, %s (seconds; "
            "`python -m sklearn_falcon.prebuild` does it ahead of time)...", where)
