"""Backend and device resolution, and the only numpy <-> torch boundary.

The proximal loop in :mod:`sklearn_falcon._solver` never touches an array
library directly: it talks to a *problem* object built here.  A problem
holds one graph (Numba) or a batch of ``B`` graphs (torch) on its device and
exposes the handful of operations the loop needs.  Per-graph scalars
(objective values, numbers of moved rows, ``tau``) cross the boundary as
small NumPy arrays of shape ``(B,)``; labels come back as NumPy ``int64``.

The torch problems live in :mod:`sklearn_falcon._backend_torch`, imported
lazily so that the package works without torch.
"""

import importlib.util
import re

import numpy as np
import scipy.sparse as sp

from . import _kernels_numba as nk

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def torch_available():
    """Whether torch can be imported (without importing it)."""
    return importlib.util.find_spec("torch") is not None


def _import_torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised by simulation
        raise ImportError(
            "backend='torch' requires PyTorch, which is not installed. Install it "
            "with `pip install sklearn-falcon[torch]` (or `pip install torch`), or "
            "use backend='numba'."
        ) from exc
    return torch


def resolve_backend(backend="auto", device="auto"):
    """Resolve ``(backend, device)`` to concrete values.

    Parameters
    ----------
    backend : {"auto", "numba", "torch"}
        ``"auto"`` selects torch on CUDA when torch and a GPU are present,
        otherwise Numba.
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Returns
    -------
    backend : {"numba", "torch"}
    device : str
        ``"cpu"`` for Numba; a torch device string for torch.

    Raises
    ------
    ValueError
        If ``device`` is malformed, or Numba is asked to run on CUDA, or the
        requested CUDA device does not exist.
    ImportError
        If ``backend="torch"`` (or a CUDA device) is requested and torch is
        not installed.

    Examples
    --------
    >>> from sklearn_falcon._backend import resolve_backend
    >>> resolve_backend("numba", "auto")
    ('numba', 'cpu')
    """
    if not isinstance(device, str) or not _DEVICE_RE.match(device):
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N'; got device={device!r}."
        )
    if backend == "numba":
        if device.startswith("cuda"):
            raise ValueError(
                f"backend='numba' runs on the CPU only; got device={device!r}. Use "
                "backend='torch' for CUDA."
            )
        return "numba", "cpu"
    if backend == "auto":
        if device == "cpu":
            return "numba", "cpu"
        if not torch_available():
            if device.startswith("cuda"):
                _import_torch()
            return "numba", "cpu"
        torch = _import_torch()
        if device == "auto":
            if torch.cuda.is_available():
                return "torch", "cuda"
            return "numba", "cpu"
        return "torch", _check_cuda(torch, device)
    if backend == "torch":
        torch = _import_torch()
        if device == "auto":
            return "torch", "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu":
            return "torch", "cpu"
        return "torch", _check_cuda(torch, device)
    raise ValueError(
        f"backend must be 'auto', 'numba' or 'torch'; got backend={backend!r}."
    )


def _check_cuda(torch, device):
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but CUDA is not available "
            "(torch.cuda.is_available() is False). Use device='cpu' or 'auto'."
        )
    index = int(device.split(":")[1]) if ":" in device else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"device={device!r} was requested but only {count} CUDA device(s) exist."
        )
    return device


class NumbaProblem:
    """One graph on the CPU, solved with the Numba kernels.

    Parameters
    ----------
    W : scipy CSR matrix or ndarray of shape (n, n)
        Symmetric nonnegative affinity (float32 or float64, kept as is).
    n_clusters : int
    degrees : ndarray of shape (n,), default=None
        Row sums of ``W``; computed when omitted.
    """

    n_graphs = 1

    def __init__(self, W, n_clusters, degrees=None):
        self.n_clusters = int(n_clusters)
        if sp.issparse(W):
            W = W.tocsr()
            self.sparse = True
            self.indptr = W.indptr
            self.indices = W.indices
            self.data = W.data
        else:
            self.sparse = False
            self.W = np.ascontiguousarray(W)
        if degrees is None:
            degrees = np.asarray(W.sum(axis=1), dtype=np.float64).ravel()
        self.degrees = np.ascontiguousarray(degrees, dtype=np.float64)
        total = float(self.degrees.sum())
        n_active = max(int(np.count_nonzero(self.degrees > 0)), 1)
        # typical magnitude of a score: d_mean / vol_mean = K * d_mean / sum(d)
        self.score_scale = np.array(
            [self.n_clusters * (total / n_active) / total if total > 0 else 1.0]
        )

    # -- state -----------------------------------------------------------
    def from_labels(self, labels):
        return np.array(np.asarray(labels).reshape(-1), dtype=np.int64, order="C", copy=True)

    def to_numpy(self, labels):
        return labels.reshape(1, -1).copy()

    def weights(self, labels):
        if self.sparse:
            return nk.cluster_weights_csr(
                self.indptr, self.indices, self.data, labels, self.n_clusters
            )
        return nk.cluster_weights_dense(self.W, labels, self.n_clusters)

    def update(self, WX, old, new):
        if self.sparse:
            return nk.update_cluster_weights_csr(
                self.indptr, self.indices, self.data, old, new, WX
            )
        return nk.update_cluster_weights_dense(self.W, old, new, WX)

    def stats(self, WX, labels):
        return nk.cluster_stats(WX, labels, self.degrees, self.n_clusters)

    def objective(self, vol, assoc):
        return np.array([nk.objective(vol, assoc)])

    def step(self, WX, vol, assoc, labels, tau):
        new, moved = nk.proximal_step(
            WX, self.degrees, vol, assoc, labels, float(tau[0])
        )
        return new, np.array([moved])

    def select(self, mask, a, b):
        return a if bool(mask[0]) else b

    def polish(self, labels, WX, vol, assoc):
        """One exact local-move sweep, in place; returns moves per graph."""
        if self.sparse:
            m = nk.local_move_sweep_csr(
                self.indptr, self.indices, self.data, self.degrees, labels, WX,
                vol, assoc,
            )
        else:
            m = nk.local_move_sweep_dense(self.W, self.degrees, labels, WX, vol, assoc)
        return np.array([m])


def make_problem(W, n_clusters, *, backend="numba", device="cpu", degrees=None,
                 dtype=None):
    """Build the problem object of ``backend`` for one affinity ``W``."""
    if backend == "numba":
        return NumbaProblem(W, n_clusters, degrees=degrees)
    from ._backend_torch import TorchProblem

    return TorchProblem.from_affinity(W, n_clusters, device=device, dtype=dtype)
