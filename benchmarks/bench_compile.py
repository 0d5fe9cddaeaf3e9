"""JIT compile cost of the Numba kernels against a small fit.

Each measurement runs in a fresh interpreter:

* **cold**: an empty ``NUMBA_CACHE_DIR``, so every kernel compiles;
* **warm**: the same cache directory again, so kernels load from disk
  (what every run after the first one on a machine sees);
* **steady**: a second fit in the same process (no JIT at all).

Run::

    python -m benchmarks.bench_compile
"""

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, time
t0 = time.perf_counter()
import numpy as np
from sklearn.datasets import make_blobs
from sklearn_falcon import FalconNCut
t_import = time.perf_counter() - t0
X, _ = make_blobs(n_samples=300, centers=3, random_state=0)
t0 = time.perf_counter(); FalconNCut(3, random_state=0).fit(X); t_first = time.perf_counter() - t0
t0 = time.perf_counter(); FalconNCut(3, random_state=0).fit(X); t_steady = time.perf_counter() - t0
print(json.dumps(dict(import_s=t_import, first_fit_s=t_first, steady_fit_s=t_steady)))
"""


def _run(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    with tempfile.TemporaryDirectory() as cache:
        cold = _run(cache)
        warm = _run(cache)
    lines = ["| run | import (s) | first fit (s) | second fit (s) | first / second |",
             "|---|---:|---:|---:|---:|"]
    for name, r in (("cold cache (compiles)", cold), ("warm cache (loads)", warm)):
        lines.append(f"| {name} | {r['import_s']:.2f} | {r['first_fit_s']:.2f} | "
                     f"{r['steady_fit_s']:.3f} | "
                     f"{r['first_fit_s'] / r['steady_fit_s']:.1f}x |")
    print("Small fit: FalconNCut(3) on make_blobs(300), kNN affinity.\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
