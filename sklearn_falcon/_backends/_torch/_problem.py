"""A batch of graphs on a torch device (the torch backend's problem).

Every NumPy <-> torch conversion goes through :mod:`.._boundary`; the
kernels are those of :mod:`._kernels` and :mod:`._affinity`.  This module
imports torch at import time; :mod:`sklearn_falcon._backends._torch` imports
it only when a torch problem is built.
"""

import copy

import numpy as np
import scipy.sparse as sp
import torch

from .. import _boundary as bd
from .._numba import _polish as npol
from . import _kernels as tk
from ._host import HostCSR, HostState
from ._affinity import (
    Affinity,
    cluster_weights_features,
    default_block_elems,
    update_cluster_weights_features,
)


def _as_list(obj):
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]


def _float32_scaled(graphs, degrees):
    """``(graphs, degrees, exps)``: each graph whose largest degree float32
    cannot hold (beyond about 1e36, where its weights and sums were inf and
    the scores NaN, or below about 1e-30, where its weights were subnormal
    or zero) times ``2**e`` that brings it into ``[1, 2)``, on the host,
    exactly; the normalized cut does not depend on the scale of ``W``."""
    out, degs, exps = [], [], []
    for W, d in zip(graphs, degrees):
        top = float(d.max()) if d.size else 0.0
        e = 0
        if np.isfinite(top) and top > 0 and not 2.0**-100 <= top < 2.0**120:
            e = 1 - int(np.frexp(top)[1])
            if sp.issparse(W):
                W = sp.csr_matrix((np.ldexp(W.data, e), W.indices, W.indptr),
                                  shape=W.shape)
            else:
                W = np.ldexp(W, e)
            d = np.ldexp(d, e)
        out.append(W)
        degs.append(d)
        exps.append(e)
    return out, degs, exps


def _fit_range(feats, affinity, zero_norm, gamma, finfo):
    """``(feats, zero_norm, gamma)`` whose rows the compute dtype holds.

    The features are checked against the range of their own dtype, but the
    rows are computed in the compute dtype: in float32 (the CUDA default)
    float64 features of 1e19 overflowed their squared norms, so that every
    cosine entry was 1 (or NaN) and every rbf row NaN.  Where the squares
    may overflow, the cosine rows are scaled to unit norm on the host (rows
    of zero norm zero; the cosine is blind to a row's scale), and the rbf
    features by a power of two ``s``, ``gamma`` by ``s**2`` (so are rbf
    features whose squared distances are below the smallest normal number
    times ``2**24``: features of 1e-22 in float32).  Others are returned as
    they are.
    """
    top = max((float(np.abs(F).max()) for F in feats if F.size), default=0.0)
    sq = top * top * max(feats[0].shape[1], 1)
    tiny = affinity == "rbf" and 0.0 < sq < float(finfo.tiny) * 2.0**24
    if (4.0 if affinity == "rbf" else 1.0) * sq < float(finfo.max) / 16 and not tiny:
        return feats, zero_norm, gamma
    if affinity == "cosine":
        out = []
        for F in feats:
            norms = np.linalg.norm(F.astype(np.float64), axis=1, keepdims=True)
            tiny = norms < zero_norm
            out.append(np.where(tiny, 0.0, F / np.where(tiny, 1.0, norms)))
        return out, 0.5, gamma  # unit rows, or zero ones
    s = 2.0 ** int(np.frexp(top)[1])
    gamma = min(float(gamma) * s * s, float(np.finfo(np.float64).max))
    return [F / s for F in feats], zero_norm, gamma


# Sparse graphs on the CPU are solved with the Numba CSR kernels on views of
# the problem's tensors (:mod:`._host`); False runs torch's own CSR kernels
# there too (the CUDA path, tested on the CPU).
HOST_CSR_ON_CPU = True


class TorchProblem:
    """A batch of ``B`` graphs on a torch device, solved with the kernels of
    :mod:`sklearn_falcon._backends._torch` (the
    :class:`~sklearn_falcon._solver.Problem` protocol).

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
    on the device and streamed to ``local_move_sweep_rows``.  Either way the
    sweep is the one of the Numba backend, node for node; the ``(n, K)``
    state is shared with the tensors on the CPU (zero copy) and transferred
    on CUDA.  On the CPU, sparse graphs are solved with the Numba CSR
    kernels on views of the tensors altogether (:mod:`._host`): torch's CSR
    kernels, kept for CUDA, were 20x slower there.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon._backends._torch import TorchProblem
    >>> from sklearn_falcon._solver import solve
    >>> W = np.kron(np.eye(2), np.ones((3, 3)))
    >>> P = TorchProblem.from_affinity(W, 2, device="cpu")
    >>> res = solve(P, [0, 0, 1, 1, 1, 0])
    >>> res.labels[0].tolist(), float(res.objective[0])
    ([0, 0, 0, 1, 1, 1], 2.0)
    """

    def __init__(self, kind, n_clusters, device, dtype, sizes, host_degrees, *,
                 W=None, csr=None, affinity=None, host_graphs=None, host_csr=None):
        self.kind = kind
        self.n_clusters = int(n_clusters)
        self.device = device
        self.dtype = dtype
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.n_graphs = len(sizes)
        self.n_nodes = int(self.sizes.max())
        B, n = self.n_graphs, self.n_nodes
        self.valid = (torch.arange(n, device=device).unsqueeze(0)
                      < bd.to_tensor(self.sizes, device).unsqueeze(1))
        deg = np.zeros((B, n), dtype=np.float64)
        for b, d in enumerate(host_degrees):
            deg[b, : d.shape[0]] = d
        self.degrees = bd.to_tensor(deg, device)
        self.host_degrees = [np.ascontiguousarray(d, dtype=np.float64)
                             for d in host_degrees]
        self.W = W
        self.csr = csr
        self.affinity = affinity
        self._host_graphs = host_graphs
        self._host_csr = host_csr
        self._last_update = None  # (WX, old, new, WX of new): see commit
        # per graph, the power of two by which it is held (_float32_scaled)
        self._exps = np.zeros(self.n_graphs, dtype=np.int64)

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
        device = bd.torch_device(device)
        dtype = bd.torch_dtype(dtype, device)
        host = [bd.as_host_graph(W) for W in _as_list(graphs)]
        if degrees is None:
            degrees = [np.asarray(W.sum(axis=1), dtype=np.float64).ravel()
                       for W in host]
        else:
            degrees = [np.asarray(d, dtype=np.float64).ravel()
                       for d in _as_list(degrees)]
        sizes = [W.shape[0] for W in host]
        B, n = len(host), max(sizes)
        sparse = any(sp.issparse(W) for W in host)
        exps = [0] * B
        if dtype == torch.float32 and not (sparse and device.type == "cpu"
                                           and HOST_CSR_ON_CPU):
            host, degrees, exps = _float32_scaled(host, degrees)
        if sparse:
            host = [W if sp.issparse(W) else sp.csr_matrix(W) for W in host]
            if device.type == "cpu" and HOST_CSR_ON_CPU:
                return cls("csr", n_clusters, device, dtype, sizes, degrees,
                           host_graphs=host, host_csr=HostCSR(host, degrees,
                                                              n_clusters))
            blocks = []
            for W in host:
                Wp = W.copy()
                Wp.resize((n, n))
                blocks.append(Wp)
            M = blocks[0] if B == 1 else sp.block_diag(blocks, format="csr")
            M = sp.csr_matrix(M)
            csr = (
                bd.to_tensor(M.indptr.astype(np.int64), device),
                bd.to_tensor(M.indices.astype(np.int64), device),
                bd.to_tensor(M.data, device, dtype),
            )
            csr = csr + (tk.csr_rows(csr[0]),)
            P = cls("csr", n_clusters, device, dtype, sizes, degrees, csr=csr,
                    host_graphs=host)
        else:
            if B == 1:
                Wt = bd.to_tensor(host[0], device, dtype).unsqueeze(0)
            else:
                Wt = torch.zeros(B, n, n, dtype=dtype, device=device)
                for b, W in enumerate(host):
                    Wt[b, : W.shape[0], : W.shape[0]] = bd.to_tensor(W, device,
                                                                     dtype)
            P = cls("dense", n_clusters, device, dtype, sizes, degrees, W=Wt,
                    host_graphs=host)
        P._exps = np.asarray(exps, dtype=np.int64)
        return P

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
        if affinity not in Affinity.KINDS:
            raise ValueError(
                f"A matrix-free affinity must be one of {Affinity.KINDS}; got "
                f"affinity={affinity!r}."
            )
        device = bd.torch_device(device)
        dtype = bd.torch_dtype(dtype, device)
        # sparse features are densified: the row blocks are dense anyway, and
        # (n, p) is small next to the (n, n) affinity that is never formed
        feats = [F.toarray() if sp.issparse(F) else np.asarray(F)
                 for F in _as_list(features)]
        if any(F.ndim != 2 for F in feats) or len({F.shape[1] for F in feats}) != 1:
            raise ValueError(
                "features must be 2-D arrays with the same number of columns; got "
                f"shapes {[F.shape for F in feats]}."
            )
        sizes = [F.shape[0] for F in feats]
        B, n, p = len(feats), max(sizes), feats[0].shape[1]
        # zero norms as in the dense cosine affinity: 10 eps of the features'
        # dtype (sklearn_falcon._affinity.zero_norm, tested equal)
        in_dtype = np.result_type(*[F.dtype for F in feats])
        zero_norm = 10 * float(np.finfo(in_dtype if in_dtype.kind == "f"
                                        else np.float64).eps)
        if affinity == "rbf":
            # rbf is translation invariant: centred features (in float64, on
            # the host) keep ||x||^2 + ||y||^2 - 2 x.y from cancelling in
            # float32, the CUDA default (features 1e4 from the origin made
            # every entry of W exp(0) or garbage)
            feats = [F - F.mean(axis=0, dtype=np.float64) for F in feats]
        feats, zero_norm, gamma = _fit_range(feats, affinity, zero_norm, gamma,
                                             torch.finfo(dtype))
        Xt = torch.zeros(B, n, p, dtype=dtype, device=device)
        for b, F in enumerate(feats):
            Xt[b, : F.shape[0]] = bd.to_tensor(np.ascontiguousarray(F), device, dtype)
        valid = (torch.arange(n, device=device).unsqueeze(0)
                 < bd.to_tensor(np.asarray(sizes), device).unsqueeze(1))
        A = Affinity(Xt, valid, affinity, power=power, gamma=gamma,
                     block_elems=block_elems or default_block_elems(device),
                     zero_norm=zero_norm)
        d = bd.to_numpy(A.degrees())
        degrees = [d[b, : sizes[b]] for b in range(B)]
        return cls("features", n_clusters, device, dtype, sizes, degrees,
                   affinity=A)

    def restricted(self, keep):
        """The matrix-free problem of the nodes ``keep`` of its graphs (a
        boolean mask of one graph's nodes, or a list of one mask, or None
        for all, per graph), with the same affinity entries: their rows of
        the features, the cosine range of the whole graph, and their
        degrees (the others must have none, so these are unchanged)."""
        masks = list(keep) if isinstance(keep, (list, tuple)) else [keep]
        masks = [np.ones(m, dtype=bool) if k is None else np.asarray(k, dtype=bool)
                 for k, m in zip(masks, self.sizes)]
        sizes = [int(k.sum()) for k in masks]
        n = max(sizes)
        rows = np.zeros((len(masks), n), dtype=np.int64)  # padding: row 0
        for b, k in enumerate(masks):
            rows[b, : sizes[b]] = np.flatnonzero(k)
        idx = bd.to_tensor(rows, self.device)
        A = copy.copy(self.affinity)
        A.X = A.X.gather(1, idx.unsqueeze(-1).expand(-1, -1, A.X.shape[2]))
        A.valid = (torch.arange(n, device=self.device).unsqueeze(0)
                   < bd.to_tensor(np.asarray(sizes), self.device).unsqueeze(1))
        A.shape = (len(masks), n)
        if A.kind == "rbf":
            A.sqn = A.sqn.gather(1, idx)
        return TorchProblem("features", self.n_clusters, self.device, self.dtype,
                            sizes, [d[k] for d, k in zip(self.host_degrees, masks)],
                            affinity=A)

    # -- helpers -----------------------------------------------------------
    @property
    def cosine_range(self):
        """``(lo, hi)`` of the cosine similarities, per graph, as NumPy arrays
        (matrix-free cosine problems only)."""
        A = self.affinity
        if A is None or A.kind != "cosine":
            raise AttributeError("cosine_range exists only for affinity='cosine'.")
        return (bd.to_numpy(A.lo.to(torch.float64)),
                bd.to_numpy(A.hi.to(torch.float64)))

    @property
    def compute_dtype(self):
        """The NumPy dtype of the device's computations."""
        return bd.to_numpy(torch.zeros(0, dtype=self.dtype, device="cpu")).dtype

    def labels_list(self, labels):
        """Per-graph NumPy label vectors, padding removed."""
        arr = labels if isinstance(labels, np.ndarray) else self.to_numpy(labels)
        return [arr[b, : self.sizes[b]].copy() for b in range(self.n_graphs)]

    def cluster_statistics(self, labels):
        """``(vol, assoc)`` of NumPy labels, as ``(B, K)`` NumPy arrays."""
        X = self.from_labels(labels)
        vol, assoc = self.stats(self.weights(X), X)
        unit = np.ldexp(1.0, -self._exps)[:, None]
        return bd.to_numpy(vol) * unit, bd.to_numpy(assoc) * unit

    def degrees_numpy(self):
        """Per-graph degrees ``W 1`` as NumPy arrays."""
        return [np.ldexp(d, -e) for d, e in zip(self.host_degrees, self._exps)]

    # -- solver protocol ---------------------------------------------------
    @property
    def supports_polish(self):
        return self._host_graphs is not None or self.affinity is not None

    def compiled_graph(self):
        """None: the batched kernels are driven by the Python loop, whose
        overhead is small next to them."""
        return None

    def from_labels(self, labels):
        B, n = self.n_graphs, self.n_nodes
        if isinstance(labels, (list, tuple)) and len(labels) == B and B > 0 and (
            np.ndim(labels[0]) == 1
        ):
            rows = [np.asarray(y, dtype=np.int64).ravel() for y in labels]
        else:
            arr = np.asarray(labels, dtype=np.int64)
            arr = arr.reshape(1, -1) if arr.ndim == 1 else arr
            rows = list(arr)
        dtype = np.int64 if self._host_csr is None else self._host_csr.label_dtype
        out = np.zeros((B, n), dtype=dtype)
        for b, y in enumerate(rows):
            out[b, : self.sizes[b]] = y[: self.sizes[b]]
        return bd.to_tensor(out, self.device)

    def to_numpy(self, labels):
        return bd.to_numpy(labels).astype(np.int64, copy=True)

    def weights(self, labels):
        K = self.n_clusters
        if self._host_csr is not None:
            return HostState()
        if self.kind == "dense":
            return tk.cluster_weights_dense(self.W, labels, K, self.valid)
        if self.kind == "csr":
            indptr, indices, data, rows = self.csr
            WX = tk.cluster_weights_csr(indptr, indices, data, labels.reshape(-1), K,
                                        rows=rows)
            return WX.view(self.n_graphs, self.n_nodes, K)
        return cluster_weights_features(self.affinity, labels, K)

    def _update(self, WX, old, new):
        if self.kind == "dense":
            return tk.update_cluster_weights_dense(self.W, old, new, WX, self.valid)
        if self.kind == "csr":
            indptr, indices, data, _ = self.csr
            out = tk.update_cluster_weights_csr(
                indptr, indices, data, old.reshape(-1), new.reshape(-1),
                WX.reshape(-1, self.n_clusters))
            return out.view(WX.shape)
        return update_cluster_weights_features(self.affinity, old, new, WX)

    def candidate_stats(self, WX, vol, assoc, old, new):
        """``(vol, assoc)`` of ``new``, through a temporary updated ``WX``."""
        if self._host_csr is not None:
            v, a = self._host_csr.candidate_stats(WX, vol, assoc, old, new)
            return bd.to_tensor(v, self.device), bd.to_tensor(a, self.device)
        updated = self._update(WX, old, new)
        self._last_update = (WX, old, new, updated)
        return self.stats(updated, new)

    def commit(self, WX, old, new):
        """``WX`` of ``new`` (a new tensor): the one the candidate's statistics
        were computed from, when ``new`` is that candidate (no second
        update: on the matrix-free path it recomputes rows of ``W``)."""
        if self._host_csr is not None:
            return HostState()
        last, self._last_update = self._last_update, None
        if last is not None and last[0] is WX and last[1] is old and last[2] is new:
            return last[3]
        return self._update(WX, old, new)

    def stats(self, WX, labels):
        if self._host_csr is not None:
            v, a = self._host_csr.stats(labels)
            return bd.to_tensor(v, self.device), bd.to_tensor(a, self.device)
        return tk.cluster_stats(WX, labels, self.degrees, self.n_clusters)

    def objective(self, vol, assoc):
        return bd.to_numpy(tk.objective(vol, assoc))

    def step(self, WX, vol, assoc, labels, tau):
        if self._host_csr is not None:
            new, moved = self._host_csr.step(WX, vol, assoc, labels,
                                             np.asarray(tau, dtype=np.float64))
            return bd.to_tensor(new, self.device), moved
        tau_t = bd.to_tensor(np.asarray(tau, dtype=np.float64), self.device)
        new, moved = tk.proximal_step(WX, self.degrees, vol, assoc, labels, tau_t,
                                      self.valid)
        return new, bd.to_numpy(moved)

    def select(self, mask, a, b):
        mask = np.asarray(mask, dtype=bool)
        if mask.all():
            return a
        if not mask.any():
            return b
        m = bd.to_tensor(mask, self.device)
        return torch.where(m.view((-1,) + (1,) * (a.dim() - 1)), a, b)

    def polish(self, labels, WX, vol, assoc):
        """One exact local-move sweep per graph, in place, with the Numba
        sweep on the host; returns moves per graph."""
        if self._host_csr is not None:
            return self._host_csr.polish(labels, vol, assoc)
        if self._host_graphs is not None:
            return self._polish_host(labels, WX, vol, assoc)
        return self._polish_stream(labels, WX, vol, assoc)

    def _host_state(self, labels, WX, vol, assoc):
        return tuple(bd.host_view(t) for t in (labels, WX, vol, assoc))

    def _copy_back(self, tensors, arrays):
        if self.device.type != "cpu":  # on the CPU the views were written
            for t, h in zip(tensors, arrays):
                bd.copy_into(t, h)

    def _polish_host(self, labels, WX, vol, assoc):
        """The sweep on the host copies of explicit graphs."""
        state = self._host_state(labels, WX, vol, assoc)
        Xn, WXn, vn, an = state
        moves = np.zeros(self.n_graphs, dtype=np.int64)
        for b, G in enumerate(self._host_graphs):
            nb = int(self.sizes[b])
            if sp.issparse(G):
                # the CSR sweep sums each node's weights from its row: WX is
                # left as it was (the loop does not read it after polishing)
                moves[b] = npol.local_move_sweep_csr(
                    G.indptr, G.indices, G.data, self.host_degrees[b], Xn[b, :nb],
                    vn[b], an[b])
            else:
                moves[b] = npol.local_move_sweep_dense(
                    G, self.host_degrees[b], Xn[b, :nb], WXn[b, :nb], vn[b], an[b])
        self._copy_back((labels, WX, vol, assoc), state)
        return moves

    def _polish_stream(self, labels, WX, vol, assoc):
        """The sweep of a matrix-free problem: the rows of ``W`` are formed
        block by block on the device and swept on the host in node order."""
        state = self._host_state(labels, WX, vol, assoc)
        Xn, WXn, vn, an = state
        B, n, K = self.n_graphs, self.n_nodes, self.n_clusters
        counts = [np.bincount(Xn[b, : self.sizes[b]], minlength=K).astype(np.int64)
                  for b in range(B)]
        moves = np.zeros(B, dtype=np.int64)
        A = self.affinity
        step = A.block_rows()
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            idx = torch.arange(r0, r1, device=self.device).expand(B, r1 - r0)
            R = bd.to_numpy(A.rows(idx))
            for b in range(B):
                nb = int(self.sizes[b])
                if r0 >= nb:
                    continue
                rows = np.ascontiguousarray(R[b, : min(r1, nb) - r0, :nb])
                moves[b] += npol.local_move_sweep_rows(
                    rows, r0, self.host_degrees[b], Xn[b, :nb], WXn[b, :nb], vn[b],
                    an[b], counts[b])
        self._copy_back((labels, WX, vol, assoc), state)
        return moves
