"""The Numba compilation switch shared by every kernel module.

Kernels are compiled with ``cache=True`` by default, so that a process
after the first loads them from disk; the environment variable
``SKLEARN_FALCON_NUMBA_CACHE=0`` (or ``false``, ``no``, ``off``) switches the
cache off.  ``jit`` compiles a serial kernel, ``pjit`` a parallel one
(``prange``).
"""

import os

from numba import njit

CACHE = os.environ.get("SKLEARN_FALCON_NUMBA_CACHE", "1").lower() not in (
    "0",
    "false",
    "no",
    "off",
)

jit = njit(cache=CACHE, nogil=True)
pjit = njit(cache=CACHE, nogil=True, parallel=True)

# Below this much work (array entries or nonzeros) a kernel runs serially:
# waking the thread pool costs more than it saves on tiny (coarse) graphs.
PARALLEL_MIN = 1_000_000
