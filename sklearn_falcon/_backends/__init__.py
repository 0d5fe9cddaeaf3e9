"""Backends: where a Falcon problem lives and which kernels solve it.

A backend is one entry of :data:`BACKENDS` plus its own subpackage
(:mod:`._numba`, :mod:`._torch`, :mod:`._dask`), which holds its kernels and its problem
class (the :class:`~sklearn_falcon._solver.Problem` protocol).  Everything
else derives from the registry: the ``backend`` parameter's options,
``backend="auto"``, the matrix-free path and the batched solves.
:mod:`._device` resolves device strings; :mod:`._boundary` is the only
NumPy <-> torch conversion.

Examples
--------
>>> from sklearn_falcon._backends import BACKENDS, resolve_backend
>>> sorted(BACKENDS)
['dask', 'numba', 'torch']
>>> resolve_backend("numba", "auto")
('numba', 'cpu')
"""

import contextlib
from dataclasses import dataclass
from typing import Callable, Optional

from . import _dask, _numba, _torch
from ._boundary import host_array
from ._device import DEVICE_CONSTRAINT, cuda_present, import_torch, normalize_device
from ._device import torch_available

__all__ = ["BACKENDS", "DEVICE_CONSTRAINT", "Backend", "host_array", "make_problem",
           "make_problem_from_features", "normalize_device", "resolve_backend"]


@dataclass(frozen=True)
class Backend:
    """One backend of :data:`BACKENDS`.

    Attributes
    ----------
    name : str
    devices : tuple of str
        Device kinds it runs on (``"cpu"``, ``"cuda"``).
    is_available : callable
        ``() -> bool``, without importing an optional library.
    resolve_device : callable
        ``(device) -> str``: the concrete device of a device string, or an
        error that says why not.
    make_problem : callable
        ``(W, n_clusters, *, device, degrees, dtype) -> Problem``.
    make_problem_from_features : callable or None
        ``(X, n_clusters, *, affinity, power, gamma, device, dtype,
        block_elems) -> Problem``: a matrix-free problem, if offered; it
        forms every affinity marked ``matrix_free`` in
        :data:`sklearn_falcon._affinity.AFFINITIES`, and its
        ``restricted(keep)`` is the problem of the nodes ``keep`` (the
        others of zero degree) with the same entries.
    batched : bool
        Whether one problem holds a batch of graphs (``falcon_batch``).
    limit_blas : bool
        Whether BLAS runs on one thread while it solves (its kernels use
        their own threads).
    scope : callable
        ``() -> context manager`` in which its problems are built and
        solved (the Dask backend: one process pool for all the computes on
        Dask's ``"processes"`` scheduler).
    """

    name: str
    devices: tuple
    is_available: Callable
    resolve_device: Callable
    make_problem: Callable
    make_problem_from_features: Optional[Callable] = None
    batched: bool = False
    limit_blas: bool = False
    scope: Callable = contextlib.nullcontext


def _numba_device(device):
    if device.startswith("cuda"):
        raise ValueError(
            f"backend='numba' runs on the CPU only; got device={device!r}. Use "
            "backend='torch' for CUDA."
        )
    return "cpu"


def _numba_problem(W, n_clusters, *, device="cpu", degrees=None, dtype=None):
    return _numba.NumbaProblem(W, n_clusters, degrees=degrees)


# In order of preference on the CPU: "auto" takes the first available
# backend that runs on the chosen device.
BACKENDS = {
    "numba": Backend(
        name="numba", devices=("cpu",), is_available=lambda: True,
        resolve_device=_numba_device, make_problem=_numba_problem, limit_blas=True,
    ),
    "torch": Backend(
        name="torch", devices=("cpu", "cuda"), is_available=torch_available,
        resolve_device=_torch.resolve_device, make_problem=_torch.make_problem,
        make_problem_from_features=_torch.make_problem_from_features, batched=True,
    ),
    # a graph in row blocks on a Dask cluster; "auto" picks it for Dask input
    # (FalconNCut routes a dask.array.Array to it before validation)
    "dask": Backend(
        name="dask", devices=("cpu",), is_available=_dask.dask_available,
        resolve_device=_dask.resolve_device, make_problem=_dask.make_problem,
        scope=_dask.compute_scope,
    ),
}


def resolve_backend(backend="auto", device="auto", *, batched=False):
    """Resolve ``(backend, device)`` to concrete values.

    Parameters
    ----------
    backend : {"auto"} or a name of :data:`BACKENDS`
        ``"auto"`` takes, in registry order (batched backends first when
        ``batched``), the first available backend that runs on the device;
        ``device="auto"`` asks for CUDA when torch sees a GPU, else the CPU.
        So one graph runs on Numba on the CPU and on torch on CUDA.
    device : str or torch.device
        ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (``"cpu:N"`` and a
        ``torch.device`` are read as these).
    batched : bool, default=False
        Prefer a backend that solves a batch of graphs in one problem.

    Returns
    -------
    backend : str
    device : str

    Raises
    ------
    ValueError
        If ``device`` is malformed, not supported by the backend, or a
        requested CUDA device does not exist.
    ImportError
        If the backend (or the only backend for the device) needs a library
        that is not installed.

    Examples
    --------
    >>> from sklearn_falcon._backends import resolve_backend
    >>> resolve_backend("auto", "cpu")
    ('numba', 'cpu')
    """
    device = normalize_device(device)
    if backend != "auto":
        spec = BACKENDS.get(backend)
        if spec is None:
            raise ValueError(
                f"backend must be 'auto' or one of {sorted(BACKENDS)}; got "
                f"backend={backend!r}."
            )
        return spec.name, spec.resolve_device(device)
    kind = device.split(":")[0]
    if kind == "auto":
        kind = "cuda" if cuda_present() else "cpu"
        device = kind
    order = sorted(BACKENDS.values(), key=lambda s: not s.batched) if batched else (
        list(BACKENDS.values()))
    runs_here = [spec for spec in order if kind in spec.devices]
    for spec in runs_here:
        if spec.is_available():
            return spec.name, spec.resolve_device(device)
    # no available backend runs there: the first that would says what is missing
    if kind == "cuda":  # torch: the device was asked for, not a backend
        import_torch(f"device={device!r}", "device='cpu'")
    return runs_here[0].name, runs_here[0].resolve_device(device)


def make_problem(W, n_clusters, *, backend="numba", device="cpu", degrees=None,
                 dtype=None):
    """Build the problem object of ``backend`` for one affinity ``W``.

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
        Validated symmetric nonnegative affinity.
    n_clusters : int
    backend : str
        A resolved backend (see :func:`resolve_backend`).
    device : str
        A resolved device (``"cpu"`` for Numba).
    degrees : ndarray of shape (n,), default=None
    dtype : {None, "float32", "float64"}, default=None
        Torch compute dtype (``None``: float32 on CUDA, float64 on the CPU).

    Returns
    -------
    Problem

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backends import make_problem
    >>> make_problem(np.eye(3), 2).n_graphs
    1
    """
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {sorted(BACKENDS)}; got backend={backend!r}."
        )
    return BACKENDS[backend].make_problem(W, n_clusters, device=device,
                                          degrees=degrees, dtype=dtype)


def make_problem_from_features(X, n_clusters, *, backend="torch", affinity="cosine",
                               power=1.0, gamma=1.0, device="cpu", dtype=None,
                               block_elems=None):
    """Matrix-free problem of the cosine or rbf affinity of ``X``.

    The dense ``W`` of ``FalconNCut(affinity="cosine"|"rbf")`` is computed
    in row blocks whenever the solver needs it and never stored, so memory
    is ``O(n (p + K))`` plus one block.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backends import make_problem_from_features
    >>> X = np.r_[np.ones((3, 2)), -np.ones((3, 2))] + np.arange(6)[:, None] * 0.01
    >>> P = make_problem_from_features(X, 2, affinity="cosine", power=2.0)
    >>> P.kind, P.n_graphs
    ('features', 1)
    """
    spec = BACKENDS[backend]
    if spec.make_problem_from_features is None:
        raise ValueError(f"backend={backend!r} has no matrix-free problems.")
    return spec.make_problem_from_features(
        X, n_clusters, affinity=affinity, power=power, gamma=gamma, device=device,
        dtype=dtype, block_elems=block_elems)
