"""Backend and device resolution, and the only numpy <-> torch boundary.

The proximal loop in :mod:`sklearn_falcon._solver` never touches an array
library directly: it talks to a *problem* object built here.  A problem
holds one graph (Numba) or a batch of ``B`` graphs (torch) on its device and
exposes the handful of operations the loop needs.  Per-graph scalars
(objective values, numbers of moved rows, ``tau``) cross the boundary as
small NumPy arrays of shape ``(B,)``; labels come back as NumPy ``int64``.

:class:`TorchProblem` holds a batch of graphs (dense, sparse or matrix-free
features) on a torch device and runs the kernels of
:mod:`sklearn_falcon._kernels_torch`; torch is imported lazily, inside its
methods, so that the package works without torch.
"""

import importlib.util
import os
import re
import sys
import warnings

import numpy as np
import scipy.sparse as sp

from . import _kernels_numba as nk

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def torch_available():
    """Whether torch can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        return False


def _import_torch(what="backend='torch'", instead="backend='numba'"):
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised by simulation
        raise ImportError(
            f"{what} requires PyTorch, which is not installed. Install it "
            "with `pip install sklearn-falcon[torch]` (or `pip install torch`), or "
            f"use {instead}."
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
        if device == "auto" and not _may_have_cuda():
            # importing torch costs seconds (and finding it 0.3 ms a fit):
            # skip both where no GPU can exist
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


def _may_have_cuda():
    """False when CUDA is certainly unavailable, without importing torch.

    If torch is already imported, ask it.  Otherwise look for the NVIDIA
    driver (Linux device nodes / proc entry) and honour an empty
    ``CUDA_VISIBLE_DEVICES``; elsewhere (e.g. Windows) answer True and let
    torch decide.
    """
    torch = sys.modules.get("torch")
    if torch is not None:  # None: an import of torch was blocked
        return bool(torch.cuda.is_available())
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    if sys.platform.startswith("linux"):
        return os.path.exists("/proc/driver/nvidia/version") or os.path.exists(
            "/dev/nvidia0"
        )
    return sys.platform != "darwin"


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


def pamr_torch(planes, inv, n_labels, offsets, n_dilations, n_iter, device):
    """PAMR with the torch kernels on ``device``: the NumPy <-> torch boundary
    of :func:`sklearn_falcon.image.pamr`.

    ``planes`` is the ``(C, H, W)`` float64 image, ``inv`` the ``(H, W)``
    int64 label indices in ``[0, n_labels)``; returns the refined ``(H, W)``
    label indices as a NumPy array.
    """
    torch = _import_torch(f"pamr(device={device!r})", "device=None")
    from .image import _pamr_torch as pk

    dev = _torch_device(torch, device)
    img = torch.from_numpy(planes).to(dev)
    inv = torch.from_numpy(np.asarray(inv, dtype=np.int64)).to(dev)
    mask = torch.nn.functional.one_hot(inv, n_labels)
    mask = mask.permute(2, 0, 1).to(torch.float32).contiguous()
    offs = [(int(dy), int(dx)) for dy, dx in offsets]
    aff = pk._affinities(img, offs, int(n_dilations))
    out = pk._propagate(mask, aff, offs, int(n_iter))
    return out.argmax(dim=0).cpu().numpy()


# Largest graph (stored entries: nnz, or n**2 when dense) solved by the
# compiled loop; see NumbaProblem.compiled_loop.  The same limit as the dense
# pass's parallel threshold, so that the compiled loop only ever needs the
# plain serial pass over a dense W.
COMPILED_LOOP_MAX_ENTRIES = nk._DENSE_PAR_MIN


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

    def stats(self, WX, labels):
        return nk.cluster_stats(WX, labels, self.degrees, self.n_clusters)

    def candidate_stats(self, WX, vol, assoc, old, new):
        """``(vol, assoc)`` of ``new`` without forming its ``WX``."""
        if self.sparse:
            return nk.candidate_stats_csr(self.indptr, self.indices, self.data,
                                          self.degrees, old, new, WX, vol, assoc)
        return nk.candidate_stats_dense(self.W, self.degrees, old, new, WX, vol,
                                        assoc)

    def commit(self, WX, old, new):
        """``WX`` of ``new``, updated in place (no (n, K) copy)."""
        if self.sparse:
            nk.apply_moves_csr(self.indptr, self.indices, self.data, old, new, WX)
        else:
            nk.apply_moves_dense(self.W, old, new, WX)
        return WX

    def objective(self, vol, assoc):
        return np.array([nk.objective(vol, assoc)])

    def step(self, WX, vol, assoc, labels, tau):
        new, moved = nk.proximal_step(
            WX, self.degrees, vol, assoc, labels, float(tau[0])
        )
        return new, np.array([moved])

    def select(self, mask, a, b):
        return a if bool(mask[0]) else b

    @property
    def compiled_loop(self):
        """The whole proximal loop as one Numba call, or None.

        After the first pass over ``W``, an iteration only reads the rows of
        the nodes that move, so the Python loop's per-iteration overhead (a
        dozen small calls) outweighs the work even on fairly large graphs:
        the compiled loop, on serial kernels, made dense token fits 1.4x
        faster at 2,116 and 4,096 tokens (4.5M and 16.8M entries) than the
        Python loop on the parallel kernels.  It is offered while the
        per-step ``(n, K)`` work is below the parallel threshold and ``W``
        has at most ``COMPILED_LOOP_MAX_ENTRIES`` stored entries; larger
        problems keep the Python loop and the parallel kernels.
        """
        size = self.data.shape[0] if self.sparse else self.W.size
        n = self.degrees.shape[0]
        if (n * self.n_clusters >= nk._PARALLEL_MIN
                or size > COMPILED_LOOP_MAX_ENTRIES):
            return None
        return self._run_compiled

    def _run_compiled(self, labels, tau, **params):
        labels = np.ascontiguousarray(np.asarray(labels).reshape(-1), dtype=np.int64)
        args = (self.degrees, labels, self.n_clusters, int(params["max_iter"]),
                float(params["tol"]), float(tau), float(params["gamma_backtrack"]),
                float(params["delta"]), bool(params["polish"]),
                int(params["max_polish"]), int(params["max_backtrack"]),
                bool(params["shrink_tau"]))
        if self.sparse:
            return nk.falcon_loop_csr(self.indptr, self.indices, self.data, *args)
        return nk.falcon_loop_dense(self.W, *args)

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


# ---------------------------------------------------------------- torch
def _torch_dtype(torch, dtype, device):
    """Compute dtype: float32 on CUDA and float64 on the CPU by default."""
    if dtype is None:
        return torch.float32 if torch.device(device).type == "cuda" else torch.float64
    if isinstance(dtype, torch.dtype):
        out = dtype
    else:
        name = np.dtype(dtype).name
        out = {"float32": torch.float32, "float64": torch.float64}.get(name)
    if out not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be float32 or float64; got dtype={dtype!r}.")
    return out


def _torch_device(torch, device):
    if device is None or device == "auto":
        device = resolve_backend("torch", "auto")[1]
    elif isinstance(device, str):
        resolve_backend("torch", device)  # validates and checks CUDA
    return torch.device(device)


def _as_list(obj):
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]


def _score_scale(degrees, n_clusters):
    """Per-graph typical score magnitude, with NumbaProblem's formula."""
    out = np.empty(len(degrees))
    for b, d in enumerate(degrees):
        total = float(d.sum())
        n_active = max(int(np.count_nonzero(d > 0)), 1)
        out[b] = n_clusters * (total / n_active) / total if total > 0 else 1.0
    return out


def _to_host_graph(torch, W):
    """A graph as a scipy CSR matrix or a C-contiguous ndarray (torch input
    is brought to the host; its dtype is kept)."""
    if sp.issparse(W):
        return W.tocsr()
    if isinstance(W, torch.Tensor):
        W = W.detach()
        if W.layout == torch.sparse_csr:
            W = W.cpu()
            return sp.csr_matrix(
                (W.values().numpy(), W.col_indices().numpy(), W.crow_indices().numpy()),
                shape=tuple(W.shape),
            )
        if W.layout != torch.strided:
            W = W.to_dense()
        return np.ascontiguousarray(W.cpu().numpy())
    return np.ascontiguousarray(W)


class TorchProblem:
    """A batch of ``B`` graphs on a torch device, solved with the kernels of
    :mod:`sklearn_falcon._kernels_torch`.

    The graphs are padded to a common size ``n``; padding nodes have no edge
    and zero degree, never move and are not counted in cluster sizes.  Build
    it with :meth:`from_affinity` (dense or sparse ``W``) or
    :meth:`from_features` (matrix-free cosine or rbf affinity).  Per-graph
    scalars cross to the solver as NumPy ``(B,)`` arrays and labels come
    back as NumPy ``int64`` (:meth:`to_numpy`, :meth:`labels_list`).

    ``polish`` (the exact sequential local-move sweep) has no data-parallel
    form, so it runs the Numba sweep on the host: on the host copy of each
    graph when the graphs are held explicitly (dense or sparse ``W``), and
    for matrix-free problems on the rows of ``W``, computed block by block
    on the device and streamed to
    :func:`sklearn_falcon._kernels_numba.local_move_sweep_rows`.
    Either way the sweep is the one of the Numba backend, node for node; the
    ``(n, K)`` state is shared with the tensors on the CPU (zero copy) and
    transferred on CUDA.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backend import TorchProblem
    >>> from sklearn_falcon._solver import solve
    >>> W = np.kron(np.eye(2), np.ones((3, 3)))
    >>> P = TorchProblem.from_affinity(W, 2, device="cpu")
    >>> res = solve(P, [0, 0, 1, 1, 1, 0])
    >>> res.labels[0].tolist(), float(res.objective[0])
    ([0, 0, 0, 1, 1, 1], 2.0)
    """

    def __init__(self, kind, n_clusters, device, dtype, sizes, host_degrees, *,
                 W=None, csr=None, affinity=None, host_graphs=None):
        import torch

        self.kind = kind
        self.n_clusters = int(n_clusters)
        self.device = device
        self.dtype = dtype
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.n_graphs = len(sizes)
        self.n_nodes = int(self.sizes.max())
        B, n = self.n_graphs, self.n_nodes
        self.valid = (torch.arange(n, device=device).unsqueeze(0)
                      < torch.as_tensor(self.sizes, device=device).unsqueeze(1))
        deg = np.zeros((B, n), dtype=np.float64)
        for b, d in enumerate(host_degrees):
            deg[b, : d.shape[0]] = d
        self.degrees = torch.as_tensor(deg, device=device)
        self._host_degrees = [np.ascontiguousarray(d, dtype=np.float64)
                              for d in host_degrees]
        self.score_scale = _score_scale(self._host_degrees, self.n_clusters)
        self.W = W
        self.csr = csr
        self.affinity = affinity
        self._host_graphs = host_graphs
        if host_graphs is not None:
            self.polish = self._polish_host
        elif affinity is not None:
            self.polish = self._polish_stream

    # -- construction ----------------------------------------------------
    @classmethod
    def from_affinity(cls, graphs, n_clusters, *, device="cpu", dtype=None,
                      degrees=None):
        """Problem of one affinity ``W`` or of a list of them.

        Parameters
        ----------
        graphs : {ndarray, sparse matrix, Tensor} or list of them
            Symmetric nonnegative ``(n_b, n_b)`` affinities (not validated
            here).  If any of them is sparse, all are held as one
            block-diagonal CSR matrix; otherwise as a dense ``(B, n, n)``
            tensor.
        n_clusters : int
        device : str or torch.device, default="cpu"
        dtype : {None, "float32", "float64"} or torch.dtype, default=None
            Compute dtype of ``W``; ``None`` means float32 on CUDA and
            float64 on the CPU.  Cluster weights, scores and the objective
            are float64 in any case.
        degrees : ndarray or list of ndarray, default=None
            Row sums of the graphs; computed when omitted.

        Returns
        -------
        TorchProblem
        """
        torch = _import_torch()
        device = _torch_device(torch, device)
        dtype = _torch_dtype(torch, dtype, device)
        host = [_to_host_graph(torch, W) for W in _as_list(graphs)]
        if degrees is None:
            degrees = [np.asarray(W.sum(axis=1), dtype=np.float64).ravel() for W in host]
        else:
            degrees = [np.asarray(d, dtype=np.float64).ravel() for d in _as_list(degrees)]
        sizes = [W.shape[0] for W in host]
        B, n = len(host), max(sizes)
        if any(sp.issparse(W) for W in host):
            host = [W if sp.issparse(W) else sp.csr_matrix(W) for W in host]
            blocks = []
            for W in host:
                Wp = W.copy()
                Wp.resize((n, n))
                blocks.append(Wp)
            M = blocks[0] if B == 1 else sp.block_diag(blocks, format="csr")
            M = sp.csr_matrix(M)
            csr = (
                torch.as_tensor(M.indptr.astype(np.int64), device=device),
                torch.as_tensor(M.indices.astype(np.int64), device=device),
                torch.as_tensor(M.data, device=device).to(dtype),
            )
            from ._kernels_torch import csr_rows

            csr = csr + (csr_rows(csr[0]),)
            return cls("csr", n_clusters, device, dtype, sizes, degrees, csr=csr,
                       host_graphs=host)
        if B == 1:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # read-only arrays
                Wt = torch.as_tensor(host[0]).to(device=device, dtype=dtype)
            Wt = Wt.unsqueeze(0)
        else:
            Wt = torch.zeros(B, n, n, dtype=dtype, device=device)
            for b, W in enumerate(host):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    Wt[b, : W.shape[0], : W.shape[0]] = torch.as_tensor(W).to(
                        device=device, dtype=dtype)
        return cls("dense", n_clusters, device, dtype, sizes, degrees, W=Wt,
                   host_graphs=host)

    @classmethod
    def from_features(cls, features, n_clusters, *, affinity="cosine", power=1.0,
                      gamma=1.0, device="cpu", dtype=None, block_elems=None):
        """Matrix-free problem of the dense affinity of features.

        ``W`` is computed row block by row block whenever it is needed and
        never stored: memory is ``O(B n (p + K))`` plus one block of
        ``block_elems`` entries.

        Parameters
        ----------
        features : array-like of shape (n, p), or list of them
            One feature matrix per graph (the same ``p`` for all).
        n_clusters : int
        affinity : {"cosine", "rbf"}, default="cosine"
            ``"cosine"``: min-max normalised cosine similarity raised to
            ``power``; ``"rbf"``: ``exp(-gamma ||x - y||^2)``.  Both equal
            the dense matrices of ``FalconNCut(affinity=...)``.
        power : float, default=1.0
        gamma : float, default=1.0
        device : str or torch.device, default="cpu"
        dtype : {None, "float32", "float64"} or torch.dtype, default=None
            ``None``: float32 on CUDA, float64 on the CPU.
        block_elems : int, default=None
            Affinity entries formed at once; ``None``: 2**22 on the CPU and
            2**25 on CUDA.

        Returns
        -------
        TorchProblem
        """
        torch = _import_torch()
        from ._kernels_torch import Affinity, default_block_elems

        if affinity not in ("cosine", "rbf"):
            raise ValueError(
                f"A matrix-free affinity must be 'cosine' or 'rbf'; got "
                f"affinity={affinity!r}."
            )
        device = _torch_device(torch, device)
        dtype = _torch_dtype(torch, dtype, device)
        feats = [np.asarray(F) for F in _as_list(features)]
        if any(F.ndim != 2 for F in feats) or len({F.shape[1] for F in feats}) != 1:
            raise ValueError(
                "features must be 2-D arrays with the same number of columns; got "
                f"shapes {[F.shape for F in feats]}."
            )
        sizes = [F.shape[0] for F in feats]
        B, n, p = len(feats), max(sizes), feats[0].shape[1]
        Xt = torch.zeros(B, n, p, dtype=dtype, device=device)
        for b, F in enumerate(feats):
            Xt[b, : F.shape[0]] = torch.as_tensor(np.ascontiguousarray(F)).to(
                device=device, dtype=dtype)
        valid = (torch.arange(n, device=device).unsqueeze(0)
                 < torch.as_tensor(sizes, device=device).unsqueeze(1))
        A = Affinity(Xt, valid, affinity, power=power, gamma=gamma,
                     block_elems=block_elems or default_block_elems(device))
        d = A.degrees().cpu().numpy()
        degrees = [d[b, : sizes[b]] for b in range(B)]
        return cls("features", n_clusters, device, dtype, sizes, degrees,
                   affinity=A)

    # -- helpers -----------------------------------------------------------
    @property
    def cosine_range(self):
        """``(lo, hi)`` of the cosine similarities, per graph, as NumPy arrays
        (matrix-free cosine problems only)."""
        A = self.affinity
        if A is None or A.kind != "cosine":
            raise AttributeError("cosine_range exists only for affinity='cosine'.")
        return (A.lo.to(self._torch.float64).cpu().numpy(),
                A.hi.to(self._torch.float64).cpu().numpy())

    @property
    def _torch(self):
        import torch

        return torch

    def labels_list(self, labels):
        """Per-graph NumPy label vectors, padding removed."""
        arr = labels if isinstance(labels, np.ndarray) else self.to_numpy(labels)
        return [arr[b, : self.sizes[b]].copy() for b in range(self.n_graphs)]

    def cluster_statistics(self, labels):
        """``(vol, assoc)`` of NumPy labels, as ``(B, K)`` NumPy arrays."""
        X = self.from_labels(labels)
        vol, assoc = self.stats(self.weights(X), X)
        return vol.cpu().numpy(), assoc.cpu().numpy()

    def degrees_numpy(self):
        """Per-graph degrees ``W 1`` as NumPy arrays."""
        return [d.copy() for d in self._host_degrees]

    # -- solver protocol ---------------------------------------------------
    def from_labels(self, labels):
        torch = self._torch
        B, n = self.n_graphs, self.n_nodes
        if isinstance(labels, (list, tuple)) and len(labels) == B and B > 0 and (
            np.ndim(labels[0]) == 1
        ):
            rows = [np.asarray(y, dtype=np.int64).ravel() for y in labels]
        else:
            arr = np.asarray(labels, dtype=np.int64)
            arr = arr.reshape(1, -1) if arr.ndim == 1 else arr
            rows = list(arr)
        out = np.zeros((B, n), dtype=np.int64)
        for b, y in enumerate(rows):
            out[b, : self.sizes[b]] = y[: self.sizes[b]]
        return torch.as_tensor(out, device=self.device)

    def to_numpy(self, labels):
        return labels.detach().cpu().numpy().astype(np.int64, copy=True)

    def weights(self, labels):
        from . import _kernels_torch as tk

        K = self.n_clusters
        if self.kind == "dense":
            return tk.cluster_weights_dense(self.W, labels, K, self.valid)
        if self.kind == "csr":
            indptr, indices, data, rows = self.csr
            WX = tk.cluster_weights_csr(indptr, indices, data, labels.reshape(-1), K,
                                        rows=rows)
            return WX.view(self.n_graphs, self.n_nodes, K)
        return tk.cluster_weights_features(self.affinity, labels, K)

    def update(self, WX, old, new):
        from . import _kernels_torch as tk

        if self.kind == "dense":
            return tk.update_cluster_weights_dense(self.W, old, new, WX, self.valid)
        if self.kind == "csr":
            indptr, indices, data, _ = self.csr
            out = tk.update_cluster_weights_csr(
                indptr, indices, data, old.reshape(-1), new.reshape(-1),
                WX.reshape(-1, self.n_clusters))
            return out.view(WX.shape)
        return tk.update_cluster_weights_features(self.affinity, old, new, WX)

    def candidate_stats(self, WX, vol, assoc, old, new):
        """``(vol, assoc)`` of ``new``, through a temporary updated ``WX``."""
        return self.stats(self.update(WX, old, new), new)

    def commit(self, WX, old, new):
        """``WX`` of ``new`` (a new tensor)."""
        return self.update(WX, old, new)

    def stats(self, WX, labels):
        from ._kernels_torch import cluster_stats

        return cluster_stats(WX, labels, self.degrees, self.n_clusters)

    def objective(self, vol, assoc):
        from ._kernels_torch import objective

        return objective(vol, assoc).cpu().numpy()

    def step(self, WX, vol, assoc, labels, tau):
        from ._kernels_torch import proximal_step

        tau_t = self._torch.as_tensor(np.asarray(tau, dtype=np.float64),
                                      device=self.device)
        new, moved = proximal_step(WX, self.degrees, vol, assoc, labels, tau_t,
                                   self.valid)
        return new, moved.cpu().numpy()

    def select(self, mask, a, b):
        mask = np.asarray(mask, dtype=bool)
        if mask.all():
            return a
        if not mask.any():
            return b
        m = self._torch.as_tensor(mask, device=self.device)
        return self._torch.where(m.view((-1,) + (1,) * (a.dim() - 1)), a, b)

    def _polish_host(self, labels, WX, vol, assoc):
        """One exact local-move sweep per graph, in place, with the Numba
        kernels on the host copies of the graphs; returns moves per graph."""
        on_cpu = self.device.type == "cpu"
        Xn, WXn, vn, an = self._host_state(labels, WX, vol, assoc)
        moves = np.zeros(self.n_graphs, dtype=np.int64)
        for b, G in enumerate(self._host_graphs):
            nb = int(self.sizes[b])
            args = (self._host_degrees[b], Xn[b, :nb], WXn[b, :nb], vn[b], an[b])
            if sp.issparse(G):
                moves[b] = nk.local_move_sweep_csr(G.indptr, G.indices, G.data, *args)
            else:
                moves[b] = nk.local_move_sweep_dense(G, *args)
        if not on_cpu:
            self._copy_back(labels, WX, vol, assoc, Xn, WXn, vn, an)
        return moves

    def _host_state(self, labels, WX, vol, assoc):
        if self.device.type == "cpu":
            return labels.numpy(), WX.numpy(), vol.numpy(), assoc.numpy()
        return (labels.cpu().numpy(), WX.cpu().numpy(), vol.cpu().numpy(),
                assoc.cpu().numpy())

    def _copy_back(self, labels, WX, vol, assoc, Xn, WXn, vn, an):
        torch = self._torch
        for t, h in ((labels, Xn), (WX, WXn), (vol, vn), (assoc, an)):
            t.copy_(torch.from_numpy(h))

    def _polish_stream(self, labels, WX, vol, assoc):
        """One exact local-move sweep per graph, in place, for a matrix-free
        problem: the rows of ``W`` are formed block by block on the device
        and swept on the host in node order; returns moves per graph."""
        from ._kernels_numba import local_move_sweep_rows

        torch = self._torch
        Xn, WXn, vn, an = self._host_state(labels, WX, vol, assoc)
        B, n, K = self.n_graphs, self.n_nodes, self.n_clusters
        counts = [np.bincount(Xn[b, : self.sizes[b]], minlength=K).astype(np.int64)
                  for b in range(B)]
        moves = np.zeros(B, dtype=np.int64)
        A = self.affinity
        step = A.block_rows()
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            idx = torch.arange(r0, r1, device=self.device).expand(B, r1 - r0)
            R = A.rows(idx).cpu().numpy()
            for b in range(B):
                nb = int(self.sizes[b])
                if r0 >= nb:
                    continue
                rows = np.ascontiguousarray(R[b, : min(r1, nb) - r0, :nb])
                moves[b] += local_move_sweep_rows(
                    rows, r0, self._host_degrees[b], Xn[b, :nb], WXn[b, :nb], vn[b],
                    an[b], counts[b])
        if self.device.type != "cpu":
            self._copy_back(labels, WX, vol, assoc, Xn, WXn, vn, an)
        return moves


def make_problem(W, n_clusters, *, backend="numba", device="cpu", degrees=None,
                 dtype=None):
    """Build the problem object of ``backend`` for one affinity ``W``.

    Parameters
    ----------
    W : {ndarray, sparse matrix} of shape (n, n)
        Validated symmetric nonnegative affinity.
    n_clusters : int
    backend : {"numba", "torch"}
        A resolved backend (see :func:`resolve_backend`).
    device : str
        A resolved device (``"cpu"`` for Numba).
    degrees : ndarray of shape (n,), default=None
    dtype : {None, "float32", "float64"}, default=None
        Torch compute dtype (``None``: float32 on CUDA, float64 on the CPU).

    Returns
    -------
    NumbaProblem or TorchProblem

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backend import make_problem
    >>> make_problem(np.eye(3), 2).n_graphs
    1
    """
    if backend == "numba":
        return NumbaProblem(W, n_clusters, degrees=degrees)
    if backend == "torch":
        return TorchProblem.from_affinity(W, n_clusters, device=device, dtype=dtype,
                                          degrees=degrees)
    raise ValueError(f"backend must be 'numba' or 'torch'; got backend={backend!r}.")


def make_problem_from_features(X, n_clusters, *, affinity="cosine", power=1.0,
                               gamma=1.0, device="cpu", dtype=None,
                               block_elems=None):
    """Matrix-free torch problem of the cosine or rbf affinity of ``X``.

    The dense ``W`` of ``FalconNCut(affinity="cosine"|"rbf")`` is computed
    in row blocks whenever the solver needs it and never stored, so memory
    is ``O(n (p + K))`` plus one block.  See
    :meth:`TorchProblem.from_features` for the parameters.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backend import make_problem_from_features
    >>> X = np.r_[np.ones((3, 2)), -np.ones((3, 2))] + np.arange(6)[:, None] * 0.01
    >>> P = make_problem_from_features(X, 2, affinity="cosine", power=2.0)
    >>> P.kind, P.n_graphs
    ('features', 1)
    """
    return TorchProblem.from_features(
        X, n_clusters, affinity=affinity, power=power, gamma=gamma, device=device,
        dtype=dtype, block_elems=block_elems)
