"""A graph on Dask in row blocks, and the validation of the input without
gathering it."""

import contextlib
import os
from concurrent.futures import CancelledError, ProcessPoolExecutor
from functools import partial

import numpy as np
import scipy.sparse as sp

import dask
import dask.array as da

from ._blocks import as_csr, scale_task, summary_task

__all__ = ["PERSIST_FRACTION", "ShardedGraph", "compute_scope", "decide_persist",
           "one_process_pool",
           "persist_compute"]

# The graph is kept in the workers' memory ("persisted") when it takes at
# most this fraction of their summed memory_limit (Dask starts spilling at
# 60%, and the solver's own state, WX, needs room too); otherwise every pass
# streams its blocks from where they came from (files, for shards).
PERSIST_FRACTION = 0.4
_SALT = 0x5EED  # seed of the randomized symmetry check (fixed: reproducible)


class ShardedGraph:
    """A symmetric, nonnegative ``n x n`` graph on Dask, in row blocks.

    Parameters
    ----------
    blocks : list of dask.delayed.Delayed
        Row block ``b`` holds rows ``bounds[b] .. bounds[b + 1] - 1`` with all
        ``n`` columns: persisted CSR blocks, or the input's own tasks (which
        load them) when the graph is streamed.
    degrees : list of dask.delayed.Delayed
        The degrees of each block's nodes, persisted.
    bounds : array-like of shape (n_blocks + 1,)
    nnz, nbytes : int
        Stored entries and bytes of the graph as CSR.
    dtype : dtype
        float32 or float64.
    persisted : bool
        Whether ``blocks`` are held in the workers' memory.
    flat : (float, float) or None
        The off-diagonal weight and the diagonal of a complete graph of
        equal weights (and a constant diagonal), whose every partition has
        the same NCut, else None (:func:`~sklearn_falcon._affinity.flat_weight`,
        blockwise).
    """

    def __init__(self, blocks, degrees, bounds, *, nnz, nbytes, dtype, persisted,
                 flat=None):
        self.flat = flat
        self.blocks = list(blocks)
        self.degrees = list(degrees)
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.nnz = int(nnz)
        self.nbytes = int(nbytes)
        self.dtype = np.dtype(dtype)
        self.persisted = bool(persisted)

    @property
    def n(self):
        return int(self.bounds[-1])

    @property
    def n_blocks(self):
        return len(self.blocks)

    @property
    def starts(self):
        return [int(s) for s in self.bounds[:-1]]

    @property
    def sizes(self):
        return [int(s) for s in np.diff(self.bounds)]

    def as_array(self, blocks, dtype):
        """The ``(n,)`` Dask array made of one block per row block."""
        return da.concatenate([
            da.from_delayed(b, shape=(m,), dtype=dtype)
            for b, m in zip(blocks, self.sizes)
        ])

    def degrees_array(self):
        """The degrees as a Dask array (nothing is gathered)."""
        return self.as_array(self.degrees, np.float64)

    def scaled(self, e):
        """The graph times ``2**e``, kept in memory as this one is (the
        blocks of a streamed graph are scaled as they are loaded)."""
        blocks = [dask.delayed(scale_task)(b, e) for b in self.blocks]
        degrees = [dask.delayed(np.ldexp)(d, e) for d in self.degrees]
        if self.persisted:
            blocks = dask.persist(*blocks)
        return ShardedGraph(blocks, dask.persist(*degrees), self.bounds, nnz=self.nnz,
                            nbytes=self.nbytes, dtype=self.dtype,
                            persisted=self.persisted)

    # ------------------------------------------------------------ builders
    @classmethod
    def from_dask(cls, W, *, persist=None, name="X"):
        """Validate a Dask array of row blocks and describe it.

        One map over the blocks computes their degrees (kept on the
        workers) and, per block, what the client needs to check ``W``
        without seeing it: finiteness, the minimum, and the two sums of a
        randomized symmetry check (:func:`._blocks.symmetry_sums`).

        Parameters
        ----------
        W : dask.array.Array of shape (n, n)
            Row blocks of scipy.sparse matrices or NumPy arrays; several
            column chunks are joined.
        persist : {None, "auto", True, False}, default=None
            Keep the blocks in the workers' memory (True), stream them from
            their source at every pass (False), or decide from their size
            and the workers' memory (``"auto"``; see :func:`decide_persist`).
            ``None`` reads the Dask config key
            ``sklearn_falcon.dask.persist`` (default ``"auto"``).
        name : str
            The parameter name in error messages.
        """
        if W.ndim == 2 and any(np.isnan(c) for c in W.chunks[0] + W.chunks[1]):
            raise ValueError(
                f"The Dask array {name} has unknown chunk sizes; call "
                f"{name}.compute_chunk_sizes() (or give from_delayed the shape of "
                "each block) first."
            )
        if W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise ValueError(
                f"A precomputed affinity {name} must be a square (n_samples, "
                f"n_samples) matrix; got {name} with shape={W.shape}."
            )
        n = int(W.shape[0])
        if W.numblocks[1] > 1:
            W = W.rechunk({1: -1})
        raw = list(W.to_delayed()[:, 0])
        sizes = [int(c) for c in W.chunks[0]]
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        task = dask.delayed(summary_task, nout=2)
        parts = [task(blk, int(bounds[b]), sizes[b], n, _SALT, name)
                 for b, blk in enumerate(raw)]
        degrees, infos = persist_compute([p[0] for p in parts], [p[1] for p in parts])
        dtype = W.dtype if W.dtype in (np.float32, np.float64) else np.float64
        _check_summaries(infos, bounds, name, dtype)
        nnz = sum(int(i[0]) for i in infos)
        nbytes = sum(int(i[1]) for i in infos)
        keep = decide_persist(persist, nbytes, max(int(i[1]) for i in infos))
        if keep:
            blocks = dask.persist(*[dask.delayed(as_csr)(b) for b in raw])
        else:
            blocks = raw
        flats = {i[7] for i in infos}  # one (weight, diagonal) in every block
        flat = flats.pop() if len(flats) == 1 and None not in flats else None
        return cls(blocks, degrees, bounds, nnz=nnz, nbytes=nbytes, dtype=dtype,
                   persisted=keep, flat=flat)

    @classmethod
    def from_matrix(cls, W, n_blocks=1):
        """An in-memory matrix split into ``n_blocks`` row blocks (persisted)."""
        W = sp.csr_matrix(W) if sp.issparse(W) else np.asarray(W)
        n = W.shape[0]
        bounds = np.linspace(0, n, n_blocks + 1).astype(np.int64)
        meta = sp.csr_matrix((0, 0), dtype=W.dtype) if sp.issparse(W) else (
            np.empty((0, 0), dtype=W.dtype))
        # persisted first: sent to the workers once, not in the graph of the
        # validation and again in that of the persisted CSR blocks (and, not
        # scattered, recomputed from the graph if a worker is lost)
        blocks = dask.persist(*[dask.delayed(W[b0:b1])
                                for b0, b1 in zip(bounds[:-1], bounds[1:])])
        parts = [
            da.from_delayed(blk, shape=(int(b1 - b0), W.shape[1]), dtype=W.dtype,
                            meta=meta)
            for blk, b0, b1 in zip(blocks, bounds[:-1], bounds[1:])
        ]
        return cls.from_dask(da.concatenate(parts, axis=0), persist=True)


def persist_compute(keep, small):
    """Persist the Delayed objects of ``keep`` and compute those of
    ``small``, in one graph (their shared tasks run once).

    Returns ``(persisted list, computed list)``: on a distributed client the
    kept results stay on the workers and only ``small`` comes back.
    """
    out = dask.persist(*keep, *small)
    return list(out[:len(keep)]), list(dask.compute(*out[len(keep):]))


@contextlib.contextmanager
def one_process_pool():
    """Run every compute inside on one process pool, on Dask's
    ``"processes"`` scheduler without a ``pool`` of its own.

    That scheduler otherwise starts a pool of fresh processes at each
    compute, which import the package and load its kernels again (seconds
    each, for some twenty computes a fit).  The pool is made as Dask makes
    its own (its context, initializer and ``num_workers``) and shut down on
    exit; other schedulers, and a configured pool, are left as they are.
    """
    from dask import multiprocessing as mp
    from dask.base import get_scheduler

    if get_scheduler() is not mp.get or dask.config.get("pool", None) is not None:
        yield
        return
    if os.environ.get("PYTHONHASHSEED") in (None, "0"):  # as Dask does
        os.environ["PYTHONHASHSEED"] = "6640"
    initializer = partial(mp.initialize_worker_process, user_initializer=(
        dask.config.get("multiprocessing.initializer", None)))
    workers = dask.config.get("num_workers", None) or mp.CPU_COUNT
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context(),
                               initializer=initializer)
    try:
        with dask.config.set(pool=pool):
            yield
    finally:  # tasks queued by an interrupted compute are not run
        pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def compute_scope():
    """The context of a fit's computes: one process pool on Dask's
    ``"processes"`` scheduler (:func:`one_process_pool`), and a cancelled
    compute (``client.restart()``, or the fit's persisted data released,
    during the fit) reported as what happened and what to do, from Dask's
    error (which names a task key and "lost dependencies"); so is a compute
    that failed because the distributed client the fit began on was closed
    during it (Dask's "Missing dependency getitem-..." of its next compute)."""
    client = _scheduler_client()
    if client is not None and client.status != "running":
        client = None
    with one_process_pool():
        try:
            yield
        except Exception as exc:
            if client is not None and client.status != "running":
                raise RuntimeError(
                    "The Dask client the fit ran on was closed (or lost its "
                    "scheduler) while the fit ran (FalconNCut.fit, falcon_batch): "
                    "the data its workers held for the fit is gone, so it cannot go "
                    "on. Run it again on an open client. Dask said: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(exc, CancelledError):
                raise
            raise RuntimeError(
                "The Dask fit lost the data its workers held for it (the persisted "
                "graph blocks and solver state): the cluster was restarted (e.g. "
                "client.restart()) or that data was cancelled or released while "
                "the fit ran (FalconNCut.fit, falcon_batch), so it cannot go on. Run "
                "it again once the cluster is up. Dask said: "
                f"{type(exc).__name__}: {exc}"
            ) from exc


def _check_summaries(infos, bounds, name, dtype=np.float64):
    for b, (_, _, finite, *_) in enumerate(infos):
        if not finite:
            raise ValueError(
                f"Input {name} contains NaN or infinity (in the row block starting at "
                f"row {int(bounds[b])})."
            )
    dmin = min(float(i[3]) for i in infos)
    if dmin < 0:
        raise ValueError(
            f"The affinity {name} must be nonnegative; found a minimum value of "
            f"{dmin:.6g}."
        )
    total = sum(float(i[6]) for i in infos)
    limit = float(np.finfo(np.float64).max)
    if not total < limit:  # inf, from a block (summed in its dtype) or the sum
        # what the in-memory check says (check_finite_degrees)
        what = f": its largest entry is {max(float(i[8]) for i in infos):.3g}"
        if (top := max(float(i[9]) for i in infos)) < limit:
            what = (" in their total (the volume): its largest degree is "
                    f"{top:.3g}")
        raise ValueError(
            f"The degrees (row sums) of the affinity {name} overflow "
            f"{np.dtype(dtype).name}{what}. "
            f"Divide {name} by its maximum; the normalized cut does not change "
            "when the affinity is scaled."
        )
    s1 = sum(float(i[4]) for i in infos)
    s2 = sum(float(i[5]) for i in infos)
    if abs(s1 - s2) > 1e-8 * max(abs(s1), abs(s2)):
        raise ValueError(
            f"The affinity {name} must be symmetric: a randomized check over its "
            f"row blocks found sum W_ij h(i) g(j) = {s1:.10g} but sum W_ji h(i) g(j) "
            f"= {s2:.10g}. A sharded graph is not symmetrized for you (that needs a "
            "transpose across blocks): store both (i, j) and (j, i)."
        )


def _current_client():
    """The current ``distributed.Client``, or None without one."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def _scheduler_client():
    """The ``distributed.Client`` that Dask computes on here (the configured
    scheduler, else the current client), or None on a local scheduler."""
    from dask.base import get_scheduler

    client = getattr(get_scheduler(), "__self__", None)
    return client if type(client).__name__ == "Client" else None


def _worker_memory_limits():
    """The memory_limit of each worker of the current distributed client, or
    None without one."""
    client = _current_client()
    if client is None:
        return None
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:  # older distributed
        info = client.scheduler_info()
    return [int(w.get("memory_limit") or 0) for w in info["workers"].values()]


def decide_persist(setting, nbytes, max_block_bytes):
    """Whether to keep a graph of ``nbytes`` in the workers' memory.

    ``True``/``False`` are kept; ``None`` reads the Dask config key
    ``sklearn_falcon.dask.persist`` (default ``"auto"``).  ``"auto"``
    persists when the graph takes at most :data:`PERSIST_FRACTION` of the
    workers' summed ``memory_limit`` and its largest block a quarter of the
    smallest one; on Dask's local schedulers (no client), when it takes at
    most half of this machine's available memory.
    """
    if setting is None:
        setting = dask.config.get("sklearn_falcon.dask.persist", "auto")
    if isinstance(setting, (bool, np.bool_)):
        return bool(setting)
    if setting != "auto":
        raise ValueError(
            "The Dask config key sklearn_falcon.dask.persist must be 'auto', True "
            f"or False; got {setting!r}."
        )
    limits = _worker_memory_limits()
    if limits is None:
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil comes with distributed
            return True
        return nbytes <= 0.5 * psutil.virtual_memory().available
    if not limits or min(limits) <= 0:  # no memory limit set
        return True
    return (nbytes <= PERSIST_FRACTION * sum(limits)
            and max_block_bytes <= 0.25 * min(limits))
