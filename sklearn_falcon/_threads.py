"""Threads during a fit: ``n_jobs`` for Numba's kernels, one BLAS thread.

The Numba kernels run on Numba's own (OpenMP or TBB) threads.  BLAS threads
(``eigsh``, k-means and dense products in the initializations) competing
with them for the same cores slowed a 1,024-token fit 2.3x on 2 cores, so,
as scikit-learn's ``KMeans`` does around its OpenMP loops, BLAS runs on one
thread while a Numba backend solves (torch keeps its own threads, which the
first launch of Numba's OpenMP pool sets: they are restored too).  Both
settings are restored on exit.  The BLAS limit is process-wide: of fits
that overlap in several Python threads, the first to start sets it and
restores it when it ends.
"""

import contextlib
import functools
import os
import sys
import threading
from numbers import Integral

from sklearn.utils._param_validation import Interval

from . import _jit
from ._jit import requested

__all__ = ["N_JOBS_CONSTRAINT", "effective_n_threads", "fit_threads",
           "imported_module", "num_threads", "one_openmp_thread_after_fork",
           "requested_threads"]

def _numba():
    """Numba, imported under the lock its kernels are built under: a first
    fit with ``n_jobs`` imported it while another thread's first fit set it
    up, got it partially initialized ("partially initialized module
    'numba.core.event'"), and died, leaving llvmlite's lock held: the other
    threads hung."""
    with _jit._lock:
        import numba
    return numba


# an estimator's n_jobs: None or a nonzero integer (0 was refused only when
# the first threads were set, after the affinity had been built)
N_JOBS_CONSTRAINT = [Interval(Integral, None, -1, closed="right"),
                     Interval(Integral, 1, None, closed="left"), None]


@functools.cache
def _threadpool_controller():
    """One ThreadpoolController per process (finding the libraries takes
    ms): scikit-learn's own, which its ``KMeans`` limits BLAS with."""
    try:
        from sklearn.utils.parallel import _get_threadpool_controller
    except ImportError:  # pragma: no cover - a scikit-learn that moved it
        from threadpoolctl import ThreadpoolController

        return ThreadpoolController()
    return _get_threadpool_controller()


# Built on import, before fits run in threads: its search of the loaded
# libraries (dl_iterate_phdr, holding the loader's lock) in a first fit,
# while another thread's first fit imported an extension module (dlopen,
# holding the GIL on Python 3.10), deadlocked the two.  scikit-learn builds
# its controller in the first KMeans fit (the "kmeans" init) and hung so:
# it is the one built here.
_threadpool_controller()


def effective_n_threads(n_jobs, maximum):
    """Threads for ``n_jobs`` (joblib's convention), at most ``maximum``.

    ``None`` means ``maximum`` (Numba's thread count), ``-1`` all of them,
    ``-2`` all but one, and so on.
    """
    if n_jobs is None:
        return maximum
    if n_jobs == 0:
        raise ValueError("n_jobs == 0 has no meaning; use None, -1 or a positive "
                         "integer.")
    n = n_jobs if n_jobs > 0 else maximum + 1 + n_jobs
    return max(1, min(int(n), maximum))


_blas_lock = threading.Lock()
_blas_owner = {"thread": None}


def _forked_before_import():
    """Whether this process is a ``multiprocessing`` child that was forked
    (not spawned, nor forked from a fresh fork server, nor one of joblib's
    loky workers, which are spawned): one that imports the package after the
    fork was not marked by the hook below, and after the parent's OpenMP
    loops (scikit-learn's KMeans, its kNN search) its first one hung."""
    import multiprocessing

    argv = " ".join(getattr(sys, "orig_argv", ()))  # (the interpreter's own)
    return (multiprocessing.parent_process() is not None and not any(
        m in argv for m in ("--multiprocessing-fork", "multiprocessing.forkserver",
                            "loky.backend.popen_loky")))


# this process was forked (see fit_threads)
_forked = {"child": _forked_before_import()}


def _after_fork_in_child():
    # the parent's owner, if any, is not a thread of this process
    global _blas_lock
    _blas_lock = threading.Lock()
    _blas_owner["thread"] = None
    _forked["child"] = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def _one_blas_thread():
    """BLAS on one thread within the block, set and restored by the first
    block to enter; blocks that overlap it in other threads (or nested in
    it) leave the limit alone.  BLAS's pool is process-wide, and
    threadpoolctl lets one Python thread at a time set it: a second fit that
    limited it too recorded the first one's limit as the original and
    restored it after the first had ended, leaving the process on one BLAS
    thread."""
    with _blas_lock:
        owner = _blas_owner["thread"] is None
        if owner:
            _blas_owner["thread"] = threading.current_thread()
    if not owner:
        yield
        return
    try:
        with _threadpool_controller().limit(limits=1, user_api="blas"):
            yield
    finally:
        with _blas_lock:
            _blas_owner["thread"] = None


def imported_module(name):
    """The module ``name`` where it has been imported, else None: not
    imported, blocked (None in ``sys.modules``), or being imported by
    another thread (partially initialized, as importlib itself tells it: a
    fit that ran while another thread's first torch fit imported torch
    failed with "partially initialized module 'torch' has no attribute
    'get_num_threads'")."""
    module = sys.modules.get(name)
    if getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def _keep_torch_threads(count):
    """Set torch's thread count back to ``count`` (None: torch was not
    imported) if something changed it."""
    torch = imported_module("torch")
    if count is not None and torch is not None and torch.get_num_threads() != count:
        torch.set_num_threads(count)


@contextlib.contextmanager
def one_openmp_thread_after_fork():
    """In a forked process, OpenMP (scikit-learn's, torch's) on one thread
    within the block: GNU OpenMP is not fork-safe, and after the parent's OpenMP loops
    (KMeans, the kNN search) the child's first one hung for good."""
    if not _forked["child"]:
        yield
        return
    controller = _threadpool_controller()
    if imported_module("torch") is not None:
        controller = _controller_after_torch()
    with controller.limit(limits=1, user_api="openmp"):
        yield


@functools.cache
def _controller_after_torch():
    """A ThreadpoolController that also finds the OpenMP that torch loaded
    (its own ``libgomp``): the one built on import, before torch, did not,
    and torch's CPU operations (the matrix-free affinity) hung in a forked
    child after the parent's."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextlib.contextmanager
def fit_threads(n_jobs=None, *, limit_blas=True):
    """Within the block: Numba kernels on ``n_jobs`` threads (``None`` keeps
    Numba's setting; a negative one counts from the usable CPUs, as joblib
    does, unless ``NUMBA_NUM_THREADS`` sets the count), and BLAS on one
    thread when ``limit_blas``; torch's thread count is the caller's in the
    block and after it.  In a forked process, OpenMP (scikit-learn's) runs on
    one thread in the block, as the package's parallel kernels run serially."""
    torch = imported_module("torch")  # None: not imported (or blocked, or being)
    torch_threads = torch.get_num_threads() if torch is not None else None
    with contextlib.ExitStack() as stack:
        # the first launch of Numba's OpenMP pool sets OpenMP's thread count,
        # which torch reads: a torch.set_num_threads(1) was lost for good
        stack.callback(_keep_torch_threads, torch_threads)
        if limit_blas:
            stack.enter_context(_one_blas_thread())
        stack.enter_context(one_openmp_thread_after_fork())
        if n_jobs is not None:
            most = _numba().config.NUMBA_NUM_THREADS  # (a setting: starts no thread)
            if n_jobs < 0 and "NUMBA_NUM_THREADS" not in os.environ:
                # -2 is all the usable CPUs but one (a CPU quota counts, as
                # for joblib), not all but one of Numba's, which a launch
                # then cuts to the usable CPUs, all of them
                from joblib import cpu_count  # as _jit.usable_cpus counts

                most = min(most, cpu_count())
            stack.enter_context(requested_threads(effective_n_threads(n_jobs, most)))
        yield


@contextlib.contextmanager
def requested_threads(n):
    """The parallel kernels launched by this Python thread within the block
    run on ``n`` threads (at most the usable CPUs), set at each launch:
    setting Numba's count on entering started its threads in a fit that
    launches none (a process that has started them cannot fork a child
    that runs parallel loops; see :mod:`sklearn_falcon._jit`)."""
    previous = getattr(requested, "n", None)
    requested.n = int(n)
    try:
        yield
    finally:
        requested.n = previous


def num_threads():
    """The threads of this Python thread's next parallel launch (before the
    usable-CPU cap): the enclosing :func:`requested_threads` block's, else
    Numba's count (reading it starts Numba's threads: just before a launch
    only)."""
    n = getattr(requested, "n", None)
    if n is None:
        n = _numba().get_num_threads()
    return n

