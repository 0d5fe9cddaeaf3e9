"""Memory estimates: refuse an allocation that cannot fit, before making it.

A dense ``n x n`` affinity of 200,000 samples needs 298 GiB; NumPy would
say so only when it fails to allocate it, deep inside a kernel, with a raw
``MemoryError`` and no hint of what to do instead.  :func:`check_allocation`
compares an estimate with the memory the machine has available *before*
anything is allocated, and raises a :class:`MemoryError` whose message says
what was asked, what is available and what to do instead (the caller's
``advice``).  :func:`row_chunks` splits work over rows so that each chunk
stays within scikit-learn's ``working_memory``.  :func:`release_free_heap`
gives the heap's free memory back to the system before a large
allocation.

This module imports nothing from the package (layer 0): any part of it may
use it.

Examples
--------
>>> from sklearn_falcon._memory import dense_nbytes, format_bytes
>>> format_bytes(dense_nbytes((200_000, 200_000), "float64"))
'298 GiB'
"""

import contextlib
import os
import threading

import numpy as np

__all__ = [
    "available_memory",
    "available_memory_once",
    "check_allocation",
    "dense_nbytes",
    "format_bytes",
    "release_free_heap",
    "row_chunks",
]

_CGROUP_V2 = "/sys/fs/cgroup"
_CGROUP_V1 = "/sys/fs/cgroup/memory"
_PROC_CGROUP = "/proc/self/cgroup"
_LIBC = {}  # glibc's malloc_trim, looked up once (None: not glibc)
_ONCE = threading.local()  # .left: [] or [bytes left], in available_memory_once


def dense_nbytes(shape, dtype="float64"):
    """Bytes of a dense array of ``shape`` and ``dtype``."""
    return int(np.prod([int(s) for s in shape], dtype=np.float64)
               * np.dtype(dtype).itemsize)


def format_bytes(nbytes):
    """``nbytes`` in the largest binary unit that keeps it >= 1, rounded to
    3 significant digits (``'298 GiB'``, ``'1.5 MiB'``, ``'512 B'``)."""
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            break
        value /= 1024
    return f"{value:.3g} {unit}"


def _read_int(path):
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:  # "max": no limit
        return None


def _stat_value(path, key):
    """The value of ``key`` in a cgroup's ``memory.stat``, or 0."""
    try:
        with open(path) as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _own_cgroups():
    """The paths of this process's cgroups: ``(v2, v1 memory)`` (``"/"``
    where unknown), from ``/proc/self/cgroup``."""
    paths = {"v2": "/", "v1": "/"}
    try:
        with open(_PROC_CGROUP) as fh:
            for line in fh:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if not controllers:
                    paths["v2"] = path
                elif "memory" in controllers.split(","):
                    paths["v1"] = path
    except (OSError, ValueError):
        pass
    return paths["v2"], paths["v1"]


def _cgroup_levels(mount, path):
    """The folder of the cgroup ``path`` under ``mount``, then its parents'
    up to ``mount`` (in a cgroup namespace, or a container that mounts its
    own cgroup there, ``mount`` itself holds the process's limit)."""
    parts = [p for p in path.split("/") if p not in ("", ".", "..")]
    return [os.path.join(mount, *parts[:i]) for i in range(len(parts), -1, -1)]


def _cgroup_room():
    """Memory left under this process's cgroup limits, or None (no limit
    found): the smallest room of its cgroup's and its ancestors' (a Slurm
    job's or a systemd unit's limit is in its own cgroup, below the mount
    point; only the mount point's was read).

    The cgroup's usage counts the page cache of the files its processes
    read; its inactive part is reclaimed before an allocation fails, so it
    counts as free (as ``MemAvailable`` and ``docker stats`` count it):
    a container that had read a large file was refused allocations that
    fit.
    """
    v2, v1 = _own_cgroups()
    rooms = []
    for mount, path, limit_name, usage_name, inactive in (
        (_CGROUP_V2, v2, "memory.max", "memory.current", "inactive_file"),
        (_CGROUP_V1, v1, "memory.limit_in_bytes", "memory.usage_in_bytes",
         "total_inactive_file"),
    ):
        for base in _cgroup_levels(mount, path):
            limit = _read_int(f"{base}/{limit_name}")
            if limit is None or limit >= 2**60:  # absent, "max", v1's "no limit"
                continue
            usage = _read_int(f"{base}/{usage_name}") or 0
            usage -= min(usage, _stat_value(f"{base}/memory.stat", inactive))
            rooms.append(max(0, limit - usage))
    return min(rooms) if rooms else None


def _meminfo_available():
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory():
    """Bytes of memory a new allocation can use now, or None if unknown.

    The smaller of the system's available memory (``psutil`` when it is
    installed, else ``/proc/meminfo``'s ``MemAvailable``, else free pages
    from ``sysconf``) and the room left under a cgroup (container) limit.
    """
    found = []
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
        try:
            found.append(int(psutil.virtual_memory().available))
        except Exception:  # pragma: no cover - a broken psutil
            pass
    if not found:
        value = _meminfo_available()
        if value is None:
            try:
                value = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (AttributeError, ValueError, OSError):
                value = None
        if value is not None:
            found.append(int(value))
    room = _cgroup_room()
    if room is not None:
        found.append(room)
    return min(found) if found else None


def check_allocation(nbytes, what, advice=""):
    """Raise MemoryError, before allocating, if ``nbytes`` cannot fit.

    Parameters
    ----------
    nbytes : int
        The estimated peak of the allocation.
    what : str
        What would be allocated, e.g. ``"the dense (200000, 200000) float64
        rbf affinity"``.
    advice : str, default=""
        What to do instead; appended to the message.

    Raises
    ------
    MemoryError
        If ``nbytes`` exceeds :func:`available_memory` (nothing is raised
        when the available memory is unknown).

    Examples
    --------
    >>> from sklearn_falcon._memory import check_allocation
    >>> check_allocation(2**80, "a huge array", "Use less.")
    Traceback (most recent call last):
    ...
    MemoryError: a huge array needs about ... TiB, but only ... available. Use less.
    """
    held = getattr(_ONCE, "left", None)  # within available_memory_once
    if held is None:
        available = available_memory()
    else:
        if not held:
            held.append(available_memory())
        available = held[0]
    if available is None or nbytes <= available:
        if held is not None and available is not None:
            held[0] = available - nbytes  # what the next allocation finds
        return
    message = (
        f"{what} needs about {format_bytes(nbytes)}, but only "
        f"{format_bytes(available)} of memory is available."
    )
    raise MemoryError(f"{message} {advice}".strip())


@contextlib.contextmanager
def available_memory_once():
    """Within: :func:`check_allocation` (in this thread) reads the available
    memory once, at its first call, and takes each allocation it allows off
    it, instead of reading it at every call (psutil and the cgroup files:
    about 0.4 ms, more than the copy of a small graph, of which
    ``falcon_batch`` makes hundreds)."""
    saved = getattr(_ONCE, "left", None)
    _ONCE.left = []
    try:
        yield
    finally:
        _ONCE.left = saved


def row_chunks(n_rows, row_bytes, working_memory=None):
    """Slices of ``range(n_rows)`` whose work of ``row_bytes`` a row fits in
    ``working_memory`` MiB (scikit-learn's ``working_memory`` setting when
    None, see :func:`sklearn.config_context`); at least one row a chunk.

    Examples
    --------
    >>> from sklearn_falcon._memory import row_chunks
    >>> [(s.start, s.stop) for s in row_chunks(5, 2**20, working_memory=2)]
    [(0, 2), (2, 4), (4, 5)]
    """
    if working_memory is None:
        from sklearn import get_config

        working_memory = get_config()["working_memory"]
    step = max(1, int(working_memory * 2**20) // max(1, int(row_bytes)))
    return [slice(start, min(start + step, n_rows))
            for start in range(0, n_rows, step)]


def release_free_heap():
    """Give the free memory of the C heap back to the system (glibc's
    ``malloc_trim``; nothing elsewhere).  Returns whether it could.

    glibc serves allocations of up to 32 MB from its heap once arrays of
    that size have been freed (its mmap threshold adapts), and keeps what
    is freed there.  A fit of a 1M-node graph frees many such arrays
    between its stages: when the hierarchy of its V-cycle started, 65 MB
    of the process's resident memory was free heap, half a coarse level's
    worth, and the levels then came on top of it.
    """
    if "trim" not in _LIBC:
        try:
            import ctypes

            _LIBC["trim"] = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc
            _LIBC["trim"] = None
    trim = _LIBC["trim"]
    if trim is None:
        return False
    trim(0)
    return True
