"""A guarded worker process for benchmark jobs: time and memory budgets.

A peer that hangs in C code (an ARPACK run that does not converge, a LU
factorisation that fills up, KaHIP's strong mode on a large graph) cannot be
interrupted from Python. :class:`Sandbox` runs each job in a long-lived
worker process (``spawn`` start method, so no thread pool of the parent is
inherited); the worker loads a graph once from its ``.npz`` file and runs
:func:`benchmarks.peer_jobs.run_job` on it. The parent waits for the answer
while watching the clock and the worker's resident memory; past either
budget it kills the worker (a fresh one starts for the next job) and reports
``"timeout"`` or ``"memory"``. An exception in the job is reported as
``"error"`` with its message, a crash of the worker as ``"crashed"``.

Examples
--------
>>> import tempfile, os
>>> from benchmarks.graphs import sbm_graph
>>> from benchmarks.sandbox import Sandbox, save_graph
>>> W, y = sbm_graph(300, 3, avg_degree=10, p_in_ratio=0.9, seed=0)
>>> path = os.path.join(tempfile.mkdtemp(), "g.npz")
>>> save_graph(path, W, 3, y)
>>> with Sandbox() as box:
...     res = box.run(path, "rncut", seed=0, timeout=60)
>>> res["status"], res["outputs"][0]["labels"].shape
('ok', (300,))
"""

import multiprocessing as mp
import os
import time
import traceback

import numpy as np
import scipy.sparse as sp

__all__ = ["Sandbox", "save_graph", "load_graph"]


def save_graph(path, W, K, y=None, **meta):
    """Write a CSR graph, its K and truth to an ``.npz`` file (uncompressed)."""
    W = sp.csr_matrix(W)
    np.savez(path, data=W.data, indices=W.indices, indptr=W.indptr,
             shape=np.array(W.shape), K=np.array(K),
             y=np.array([] if y is None else y, dtype=np.int64),
             has_y=np.array(y is not None),
             meta=np.array(repr(meta)))


def load_graph(path):
    """``(W, K, y)`` from :func:`save_graph`'s file."""
    with np.load(path) as z:
        W = sp.csr_matrix((z["data"], z["indices"], z["indptr"]),
                          shape=tuple(z["shape"]))
        y = z["y"] if bool(z["has_y"]) else None
        return W, int(z["K"]), y


def _worker(conn):
    import warnings

    warnings.simplefilter("ignore")
    from .peer_jobs import run_job

    loaded = (None, None, None)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        path, kind, seed, params = msg
        try:
            if loaded[0] != path:
                W, K, _ = load_graph(path)
                loaded = (path, W, K)
            outputs = run_job(kind, loaded[1], loaded[2], seed, **params)
            conn.send(("ok", outputs, ""))
        except Exception as exc:  # reported to the parent, never raised here
            conn.send(("error", [], f"{type(exc).__name__}: {exc}\n"
                                    f"{traceback.format_exc(limit=4)}"))


def _rss_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return 0.0
    return 0.0


class Sandbox:
    """Run jobs in a worker process with a time and a memory budget.

    Parameters
    ----------
    memory_mb : float, default=6144
        Resident-memory budget of the worker (MB); the worker is killed above
        it. The worker's baseline (the loaded graph, imports) counts.
    poll : float, default=0.2
        Seconds between two checks of the clock and the memory.
    """

    def __init__(self, memory_mb=6144.0, poll=0.2):
        self.memory_mb = float(memory_mb)
        self.poll = float(poll)
        self._proc = None
        self._conn = None
        self.n_started = 0

    def _start(self):
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.n_started += 1

    def _kill(self):
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=10)
            self._conn.close()
        self._proc, self._conn = None, None

    def run(self, graph_path, kind, seed=0, timeout=60.0, **params):
        """Run ``run_job(kind, W, K, seed, **params)`` on the graph file.

        Returns
        -------
        result : dict
            ``status`` ("ok", "error", "timeout", "memory" or "crashed"),
            ``outputs`` (list, empty unless ok), ``message``, ``wall_s``
            (the whole round trip, graph loading included) and ``peak_mb``
            (the worker's largest resident set seen while polling).
        """
        if self._proc is None or not self._proc.is_alive():
            self._kill()
            self._start()
        t0 = time.perf_counter()
        peak = 0.0
        try:
            self._conn.send((os.fspath(graph_path), kind, int(seed), params))
        except (BrokenPipeError, OSError):  # pragma: no cover - worker died
            self._kill()
            return {"status": "crashed", "outputs": [], "message": "worker died",
                    "wall_s": 0.0, "peak_mb": 0.0}
        while True:
            # never wait past the budget: a job that answers within one poll
            # period must still be timed against it
            left = timeout - (time.perf_counter() - t0)
            if self._conn.poll(max(0.0, min(self.poll, left))):
                try:
                    status, outputs, message = self._conn.recv()
                except (EOFError, OSError):
                    status, outputs, message = "crashed", [], "worker died"
                    self._kill()
                break
            elapsed = time.perf_counter() - t0
            peak = max(peak, _rss_mb(self._proc.pid))
            if not self._proc.is_alive():
                status, outputs = "crashed", []
                message = f"worker exited with code {self._proc.exitcode}"
                self._kill()
                break
            if elapsed >= timeout:
                status, outputs = "timeout", []
                message = f"killed after {elapsed:.0f} s (budget {timeout:.0f} s)"
                self._kill()
                break
            if peak > self.memory_mb:
                status, outputs = "memory", []
                message = (f"killed at {peak:.0f} MB resident "
                           f"(budget {self.memory_mb:.0f} MB)")
                self._kill()
                break
        return {"status": status, "outputs": outputs, "message": message,
                "wall_s": time.perf_counter() - t0, "peak_mb": peak}

    def close(self):
        """Stop the worker."""
        if self._proc is not None and self._proc.is_alive():
            try:
                self._conn.send(None)
                self._proc.join(timeout=5)
            except (BrokenPipeError, OSError):  # pragma: no cover
                pass
        self._kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
