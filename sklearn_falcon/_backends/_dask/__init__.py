"""The Dask backend: one graph in row blocks on a Dask cluster.

``W`` is a ``dask.array.Array`` of row blocks (scipy CSR or dense chunks);
every operation of the solver's problem protocol is a map over the blocks
that calls the Numba kernels on each block, followed by a reduction of
``K``-sized partial sums on the client.  It runs on the current
``distributed.Client``, or on Dask's default scheduler when there is none.

Importing this package does not import Dask: :func:`make_problem` imports
the Dask modules (:mod:`._graph`, :mod:`._problem`) when called and raises
an ImportError that says what to install when Dask is missing.

* :mod:`._blocks`: the per-block tasks (pure functions on arrays);
* :mod:`._graph`: :class:`ShardedGraph`, the blocks, their degrees and the
  validation of the input without gathering it;
* :mod:`._problem`: :class:`DaskProblem`, the solver's problem.
"""

import importlib.util

from .._device import missing_library

__all__ = ["compute_scope", "dask_available", "import_dask", "make_problem",
           "resolve_device"]


def dask_available():
    """Whether ``dask.array`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("dask") is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        return False


def import_dask():
    """``import dask.array``, or an ImportError that says what to install."""
    try:
        import dask
        import dask.array  # noqa: F401
    except ImportError as exc:
        raise ImportError(missing_library(
            exc, "backend='dask' requires Dask", dask_available(),
            "`pip install 'sklearn-falcon[dask]'` (or "
            "`pip install \"dask[distributed]\"`)", "backend='numba'")) from exc
    return dask


def resolve_device(device):
    """``"cpu"``: the Dask backend runs the Numba kernels on its workers."""
    import_dask()
    if device.startswith("cuda"):
        raise ValueError(
            f"backend='dask' runs on the CPUs of its workers; got device={device!r}."
            " Use device='cpu' or 'auto'."
        )
    return "cpu"


def make_problem(W, n_clusters, *, device="cpu", degrees=None, dtype=None):
    """A :class:`DaskProblem` of ``W``: a ``dask.array.Array`` of row blocks,
    a :class:`ShardedGraph`, or an in-memory matrix (one block)."""
    import_dask()
    from ._graph import ShardedGraph
    from ._problem import DaskProblem

    if not isinstance(W, ShardedGraph):
        W = ShardedGraph.from_matrix(W) if not _is_dask(W) else (
            ShardedGraph.from_dask(W))
    return DaskProblem(W, n_clusters)


def compute_scope():
    """The context of a fit's computes (:func:`._graph.compute_scope`): one
    process pool on Dask's ``"processes"`` scheduler, and an error that says
    what happened when a restart of the cluster cancels them."""
    import_dask()
    from ._graph import compute_scope as scope

    return scope()


def _is_dask(W):
    import dask

    return dask.is_dask_collection(W)


def __getattr__(name):
    if name in ("DaskProblem", "ShardedGraph"):
        import_dask()
        from ._graph import ShardedGraph
        from ._problem import DaskProblem

        return {"DaskProblem": DaskProblem, "ShardedGraph": ShardedGraph}[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
