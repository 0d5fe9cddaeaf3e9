"""Torch kernels of the Falcon solver (CPU and CUDA), batched over graphs.

The functions here have the names and the semantics of
:mod:`sklearn_falcon._backends._numba`, on ``torch.Tensor`` and with a
leading batch dimension ``B``: a batch holds ``B`` graphs padded to a common
number of nodes ``n``.  Like the Numba kernels they are pure functions: no
validation, no estimator state and no NumPy (the NumPy <-> torch boundary is
:mod:`sklearn_falcon._backends._boundary`).  This module imports torch at
import time; import it only when torch is wanted.

Conventions
-----------
* ``labels`` is an ``int64`` tensor of shape ``(B, n)`` with values in
  ``[0, K)``.  ``valid`` is a bool tensor of shape ``(B, n)``: padding nodes
  (``valid == False``) have zero degree and no edge, are labelled 0, never
  move and are not counted in cluster sizes.
* ``WX`` is the ``(B, n, K)`` **float64** tensor ``W @ onehot(labels)``;
  ``degrees`` is ``(B, n)`` float64; ``vol`` and ``assoc`` are ``(B, K)``
  float64.  The graph itself (dense ``W``, CSR values or features) keeps its
  compute dtype (float32 by default on CUDA): products with it are formed
  in that dtype and accumulated into float64 ``WX``, and the objective and
  the scores are always float64, so that the solver's monotonicity test is
  made in float64.
* A graph is given in one of three forms:

  - dense: ``W`` of shape ``(B, n, n)``;
  - CSR: ``indptr``, ``indices``, ``data`` of the block-diagonal
    ``(B n, B n)`` matrix of the batch (graph ``b`` occupies rows and
    columns ``b n .. b n + n - 1``), i.e. the three arrays of a torch sparse
    CSR tensor;
  - matrix-free (*features*): :class:`._affinity.Affinity` computes any set
    of rows of ``W`` from the features on demand (:mod:`._affinity`).

The sequential local-move sweeps have no efficient data-parallel form;
:class:`sklearn_falcon._backends._torch.TorchProblem` runs the Numba sweeps
on the host.
"""

import torch

__all__ = [
    "cluster_stats",
    "cluster_weights_csr",
    "cluster_weights_dense",
    "csr_rows",
    "objective",
    "proximal_step",
    "update_cluster_weights_csr",
    "update_cluster_weights_dense",
]

F64 = torch.float64

def _onehot(labels, n_clusters, dtype, valid=None):
    """``(B, n, K)`` one-hot of ``labels`` in ``dtype``; padding rows are 0."""
    X = torch.nn.functional.one_hot(labels, n_clusters).to(dtype)
    if valid is not None:
        X = X * valid.unsqueeze(-1).to(dtype)
    return X


def _moved_index(old, new):
    """Indices of the moved nodes of every graph, padded to the largest count.

    Returns ``(idx, flag, m)``: ``idx`` of shape ``(B, m)``, ``flag`` the
    bool mask of the real (not padding) entries, ``m`` the largest number of
    moved nodes in a graph (0 when nothing moved).
    """
    moved = old != new
    counts = moved.sum(dim=1)
    m = int(counts.max()) if moved.numel() else 0
    if m == 0:
        return None, None, 0
    # stable sort puts the moved nodes first, in index order
    order = torch.sort(moved.to(torch.int8), dim=1, descending=True, stable=True)
    idx = order.indices[:, :m]
    flag = torch.arange(m, device=old.device).unsqueeze(0) < counts.unsqueeze(1)
    return idx, flag, m


def _delta(old, new, idx, flag, n_clusters, dtype):
    """``onehot(new) - onehot(old)`` on the moved rows ``idx``: ``(B, m, K)``."""
    a = old.gather(1, idx)
    b = new.gather(1, idx)
    D = _onehot(b, n_clusters, dtype) - _onehot(a, n_clusters, dtype)
    return D * flag.unsqueeze(-1).to(dtype)


# ----------------------------------------------------------------- dense W
def cluster_weights_dense(W, labels, n_clusters, valid=None):
    """Weight from each node to each cluster, ``W @ onehot(labels)``.

    Parameters
    ----------
    W : Tensor of shape (B, n, n)
    labels : int64 Tensor of shape (B, n)
    n_clusters : int
    valid : bool Tensor of shape (B, n), default=None

    Returns
    -------
    WX : float64 Tensor of shape (B, n, n_clusters)

    Examples
    --------
    >>> import torch
    >>> from sklearn_falcon._backends._torch._kernels import cluster_weights_dense
    >>> W = torch.tensor([[[0., 1., 0.], [1., 0., 2.], [0., 2., 0.]]])
    >>> cluster_weights_dense(W, torch.tensor([[0, 0, 1]]), 2)[0]
    tensor([[1., 0.],
            [1., 2.],
            [2., 0.]], dtype=torch.float64)
    """
    return torch.bmm(W, _onehot(labels, n_clusters, W.dtype, valid)).to(F64)


def update_cluster_weights_dense(W, old_labels, new_labels, WX, valid=None):
    """Return ``W @ onehot(new_labels)`` given ``WX = W @ onehot(old_labels)``.

    Only the rows of the moved nodes are read (``W`` is symmetric): the cost
    is ``O(n m K)`` for ``m`` moved nodes.  When more than a third of the
    nodes moved, the product is recomputed from scratch, which is cheaper
    and drops the accumulated rounding.  ``WX`` is not modified.
    """
    B, n, K = WX.shape
    idx, flag, m = _moved_index(old_labels, new_labels)
    if m == 0:
        return WX.clone()
    if 3 * m > n:
        return cluster_weights_dense(W, new_labels, K, valid)
    rows = W.gather(1, idx.unsqueeze(-1).expand(B, m, n))  # (B, m, n)
    D = _delta(old_labels, new_labels, idx, flag, K, W.dtype)
    return WX + torch.bmm(rows.transpose(1, 2), D).to(F64)


# --------------------------------------------------------------- sparse W
def csr_rows(indptr):
    """Row index of every stored entry of a CSR matrix (int64)."""
    n = indptr.shape[0] - 1
    lengths = (indptr[1:] - indptr[:-1]).to(torch.int64)
    return torch.repeat_interleave(
        torch.arange(n, device=indptr.device), lengths, output_size=None
    )


def cluster_weights_csr(indptr, indices, data, labels, n_clusters, rows=None):
    """Weight from each node to each cluster, ``W @ onehot(labels)``, for CSR W.

    One scatter-add over the nonzeros: ``O(nnz + N K)``.  ``labels`` is the
    flattened ``(N,)`` label vector of the (block-diagonal) matrix, ``rows``
    the optional precomputed :func:`csr_rows`.  Returns ``(N, K)`` float64.

    Examples
    --------
    >>> import torch
    >>> from sklearn_falcon._backends._torch._kernels import cluster_weights_csr
    >>> indptr, indices = torch.tensor([0, 1, 3, 4]), torch.tensor([1, 0, 2, 1])
    >>> data = torch.tensor([1., 1., 2., 2.])
    >>> cluster_weights_csr(indptr, indices, data, torch.tensor([0, 0, 1]), 2)
    tensor([[1., 0.],
            [1., 2.],
            [2., 0.]], dtype=torch.float64)
    """
    N = indptr.shape[0] - 1
    if rows is None:
        rows = csr_rows(indptr)
    flat = rows * n_clusters + labels[indices.to(torch.int64)]
    out = torch.zeros(N * n_clusters, dtype=F64, device=data.device)
    out.index_add_(0, flat, data.to(F64))
    return out.view(N, n_clusters)


def update_cluster_weights_csr(indptr, indices, data, old_labels, new_labels, WX):
    """Return ``W @ onehot(new_labels)`` given ``WX = W @ onehot(old_labels)``
    for CSR W (flattened labels, ``WX`` of shape ``(N, K)``).

    Only the rows of the moved nodes are read; their total length, not nnz,
    is the cost.  ``WX`` is not modified.
    """
    N, K = WX.shape
    j = torch.nonzero(old_labels != new_labels).view(-1)
    out = WX.clone()
    if j.numel() == 0:
        return out
    start = indptr[j].to(torch.int64)
    lengths = indptr[j + 1].to(torch.int64) - start
    seg = torch.repeat_interleave(torch.arange(j.numel(), device=j.device), lengths)
    if seg.numel() == 0:
        return out
    offsets = torch.cumsum(lengths, 0) - lengths
    pos = start[seg] + (torch.arange(seg.numel(), device=j.device) - offsets[seg])
    i = indices[pos].to(torch.int64)
    w = data[pos].to(F64)
    a = old_labels[j][seg]
    b = new_labels[j][seg]
    flat = out.view(-1)
    flat.index_add_(0, i * K + a, -w)
    flat.index_add_(0, i * K + b, w)
    return out


# ------------------------------------------------- graph-independent parts
def cluster_stats(WX, labels, degrees, n_clusters):
    """Cluster volumes and associations ``(vol, assoc)``, each ``(B, K)``
    float64 (padding nodes have zero degree and zero ``WX``)."""
    B = labels.shape[0]
    vol = torch.zeros(B, n_clusters, dtype=F64, device=WX.device)
    vol.scatter_add_(1, labels, degrees.to(F64))
    own = WX.gather(2, labels.unsqueeze(-1)).squeeze(-1)
    assoc = torch.zeros_like(vol).scatter_add_(1, labels, own)
    return vol, assoc


def objective(vol, assoc):
    """Normalized association ``f = sum_k assoc_k / vol_k`` per graph
    (clusters of zero volume contribute 0): ``(B,)`` float64.

    Examples
    --------
    >>> import torch
    >>> from sklearn_falcon._backends._torch._kernels import objective
    >>> objective(torch.tensor([[2., 0.]], dtype=torch.float64),
    ...           torch.tensor([[1., 0.]], dtype=torch.float64))
    tensor([0.5000], dtype=torch.float64)
    """
    safe = torch.where(vol > 0, vol, 1.0)
    return torch.where(vol > 0, assoc / safe, 0.0).sum(dim=1)


def _inv_pen(vol, assoc):
    inv = torch.where(vol > 0, 1.0 / torch.where(vol > 0, vol, 1.0), 0.0)
    return inv, assoc * inv * inv


def _guard_empty(labels, new, n_clusters, valid):
    """Cancel every move out of a cluster the step would empty, repeatedly
    (cancelling can empty a destination), as the Numba kernel does."""
    B = labels.shape[0]
    ones = valid.to(torch.int64)
    while True:
        counts = torch.zeros(B, n_clusters, dtype=torch.int64, device=new.device)
        counts.scatter_add_(1, new, ones)
        bad = (new != labels) & (counts.gather(1, labels) == 0)
        if not bool(bad.any()):
            break
        new = torch.where(bad, labels, new)
    return new


def proximal_step(WX, degrees, vol, assoc, labels, tau, valid=None):
    """Row-wise proximal one-hot update with inertia, for every graph.

    ``new_i = argmax_k (mu_ik + tau_b [k == labels_i])``; ties keep the
    current label, and among other clusters the smallest index wins (the
    Numba kernel's order).  Moves that would empty a cluster are cancelled;
    padding nodes never move.

    Parameters
    ----------
    WX : float64 Tensor of shape (B, n, K)
    degrees : Tensor of shape (B, n)
    vol, assoc : float64 Tensor of shape (B, K)
    labels : int64 Tensor of shape (B, n)
    tau : float64 Tensor of shape (B,)
        Per-graph inertia (``inf`` moves nothing).
    valid : bool Tensor of shape (B, n), default=None

    Returns
    -------
    new_labels : int64 Tensor of shape (B, n)
    n_moved : int64 Tensor of shape (B,)

    Examples
    --------
    >>> import torch
    >>> from sklearn_falcon._backends._torch import _kernels as tk
    >>> W = torch.tensor([[[1., 1., 0.], [1., 1., 0.], [0., 0., 1.]]],
    ...                  dtype=torch.float64)
    >>> labels = torch.tensor([[0, 1, 1]])
    >>> WX = tk.cluster_weights_dense(W, labels, 2)
    >>> d = W.sum(-1)
    >>> vol, assoc = tk.cluster_stats(WX, labels, d, 2)
    >>> new, moved = tk.proximal_step(WX, d, vol, assoc, labels,
    ...                               torch.zeros(1, dtype=torch.float64))
    >>> new.tolist(), moved.tolist()
    ([[0, 0, 1]], [1])
    """
    B, n, K = WX.shape
    if valid is None:
        valid = torch.ones(B, n, dtype=torch.bool, device=WX.device)
    inv, pen = _inv_pen(vol, assoc)
    s = 2.0 * WX * inv.unsqueeze(1) - degrees.to(F64).unsqueeze(-1) * pen.unsqueeze(1)
    cur = s.gather(2, labels.unsqueeze(-1)).squeeze(-1) + tau.to(F64).unsqueeze(1)
    s.masked_fill_((vol <= 0).unsqueeze(1), -torch.inf)
    s.scatter_(2, labels.unsqueeze(-1), -torch.inf)
    best, k = s.max(dim=2)
    move = (best > cur) & valid
    new = torch.where(move, k, labels)
    if K > 1:  # (no `move.any()` test: one host sync less on CUDA)
        new = _guard_empty(labels, new, K, valid)
    return new, (new != labels).sum(dim=1)
