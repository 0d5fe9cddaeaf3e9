"""Matrix-free affinities on torch: the rows of ``W`` from the features.

:class:`Affinity` computes any set of rows of the dense cosine-power or rbf
affinity of a batch of feature sets on demand, in row blocks, so that the
``n x n`` matrix is never stored: memory is ``O(n (p + K))`` plus one block.
The values are those of the one definition of each affinity in
:mod:`sklearn_falcon._affinity` (tested against it).  Pure torch: no NumPy,
no validation.
"""

import torch

from ._kernels import F64, _delta, _moved_index, _onehot

__all__ = [
    "Affinity",
    "cluster_weights_features",
    "default_block_elems",
    "update_cluster_weights_features",
]

class Affinity:
    """Dense affinity of a batch of feature sets, computed row block by row
    block so that the ``n x n`` matrix is never stored.

    ``kind="cosine"``: ``W = clip((S - lo) / (hi - lo), 0, 1) ** power`` with
    ``S`` the cosine similarity of the rows and ``lo``/``hi`` its minimum and
    maximum over the graph (all ones when ``hi <= lo``), as
    ``FalconNCut(affinity="cosine")``.  ``kind="rbf"``:
    ``W = exp(-gamma ||x_i - x_j||^2)`` (exactly 1 on the diagonal), as
    :func:`sklearn.metrics.pairwise.rbf_kernel`.

    Parameters
    ----------
    X : Tensor of shape (B, n, p)
        Features in the compute dtype; padding rows are ignored.
    valid : bool Tensor of shape (B, n)
    kind : {"cosine", "rbf"}
    power : float
    gamma : float
    block_elems : int
        Largest number of affinity entries formed at once (``B * rows * n``).
    zero_norm : float, default=None
        ``kind="cosine"``: rows of norm below it have similarity exactly 0 to
        every row, as in the dense affinity (``10 eps`` of the features'
        dtype); ``None``: ``10 eps`` of the compute dtype.

    Examples
    --------
    >>> import torch
    >>> from sklearn_falcon._backends._torch._affinity import Affinity
    >>> X = torch.tensor([[[1., 0.], [1., 1.], [0., 1.]]], dtype=torch.float64)
    >>> A = Affinity(X, torch.ones(1, 3, dtype=torch.bool), "cosine", power=2.0)
    >>> A.rows(torch.tensor([[0]]))
    tensor([[[1.0000, 0.5000, 0.0000]]], dtype=torch.float64)
    """

    # the affinities marked matrix_free in sklearn_falcon._affinity.AFFINITIES
    KINDS = ("cosine", "rbf")

    def __init__(self, X, valid, kind="cosine", *, power=1.0, gamma=1.0,
                 block_elems=2**22, zero_norm=None):
        self.kind = kind
        self.power = float(power)
        self.gamma = float(gamma)
        self.valid = valid
        self.block_elems = int(block_elems)
        B, n, _ = X.shape
        self.shape = (B, n)
        padded = not bool(valid.all())
        vmask = valid.unsqueeze(-1).to(X.dtype)
        if kind == "cosine":
            # rows of (near) zero norm become zero: their similarity to
            # every row is exactly 0, as in the dense cosine affinity
            if zero_norm is None:
                zero_norm = 10 * torch.finfo(X.dtype).eps
            norms = torch.linalg.vector_norm(X, dim=2, keepdim=True)
            tiny = norms < zero_norm
            G = X / torch.where(tiny, 1.0, norms)  # the only copy of X
            G.masked_fill_(tiny, 0.0)
            self.X = G.mul_(vmask) if padded else G
            self.lo = torch.zeros(B, dtype=X.dtype, device=X.device)
            self.hi = torch.zeros(B, dtype=X.dtype, device=X.device)
            self._min_max()
        elif kind == "rbf":
            self.X = X * vmask if padded else X
            self.sqn = (self.X * self.X).sum(dim=2)
        else:
            raise ValueError(f"kind must be one of {self.KINDS}; got kind={kind!r}.")

    @property
    def dtype(self):
        return self.X.dtype

    @property
    def device(self):
        return self.X.device

    def block_rows(self):
        """Rows per block so that one block holds at most ``block_elems``."""
        B, n = self.shape
        return max(1, min(n, self.block_elems // max(B * n, 1)))

    def _row_blocks(self):
        B, n = self.shape
        step = self.block_rows()
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            yield torch.arange(r0, r1, device=self.device).expand(B, r1 - r0)

    def _gather(self, idx):
        B, m = idx.shape
        return self.X.gather(1, idx.unsqueeze(-1).expand(B, m, self.X.shape[2]))

    def _min_max(self):
        lo = torch.full_like(self.lo, torch.inf)
        hi = torch.full_like(self.hi, -torch.inf)
        padded = not bool(self.valid.all())
        for idx in self._row_blocks():
            S = torch.bmm(self._gather(idx), self.X.transpose(1, 2))
            if padded:  # in place, so that one block is the only big buffer
                bad = ~(self.valid.unsqueeze(1)
                        & self.valid.gather(1, idx).unsqueeze(-1))
                S.masked_fill_(bad, torch.inf)
                lo = torch.minimum(lo, S.amin(dim=(1, 2)))
                S.masked_fill_(bad, -torch.inf)
                hi = torch.maximum(hi, S.amax(dim=(1, 2)))
                del bad
            else:
                lo = torch.minimum(lo, S.amin(dim=(1, 2)))
                hi = torch.maximum(hi, S.amax(dim=(1, 2)))
            del S
        # a span within rounding is flat: hi = lo (as the dense
        # sklearn_falcon._affinity.cosine_range, tested equal)
        flat = (hi - lo) <= torch.finfo(self.X.dtype).eps ** 0.5
        self.lo, self.hi = lo, torch.where(flat, lo, hi)

    def rows(self, idx):
        """Rows ``idx`` (int64, ``(B, m)``) of ``W``: a ``(B, m, n)`` tensor,
        zero on padding rows and columns."""
        Xr = self._gather(idx)
        if self.kind == "cosine":
            A = torch.bmm(Xr, self.X.transpose(1, 2))
            span = (self.hi - self.lo).view(-1, 1, 1)
            flat = span <= 0
            A.sub_(self.lo.view(-1, 1, 1)).div_(torch.where(flat, 1.0, span))
            A.clamp_(0.0, 1.0)
            if self.power != 1.0:
                A.pow_(self.power)
            if bool(flat.any()):
                A.masked_fill_(flat, 1.0)
        else:
            A = torch.bmm(Xr, self.X.transpose(1, 2))
            A.mul_(-2.0).add_(self.sqn.unsqueeze(1)).add_(
                self.sqn.gather(1, idx).unsqueeze(-1))
            A.clamp_(min=0.0)
            A.scatter_(2, idx.unsqueeze(-1), 0.0)  # exact zero self-distance
            if self.gamma <= torch.finfo(A.dtype).max:
                A.mul_(-self.gamma).exp_()
            else:  # -gamma is -inf in A's dtype, and 0 * -inf NaN: in float64
                A = A.to(F64).mul_(-self.gamma).exp_().to(self.X.dtype)
        A.mul_(self.valid.unsqueeze(1).to(A.dtype))
        A.mul_(self.valid.gather(1, idx).unsqueeze(-1).to(A.dtype))
        return A

    def degrees(self):
        """Row sums ``W 1`` as a ``(B, n)`` float64 tensor."""
        B, n = self.shape
        d = torch.zeros(B, n, dtype=F64, device=self.device)
        for idx in self._row_blocks():
            d[:, idx[0]] = self.rows(idx).sum(dim=2, dtype=F64)
        return d

    def dense(self):
        """The full ``(B, n, n)`` matrix (for tests and small graphs only)."""
        B, n = self.shape
        idx = torch.arange(n, device=self.device).expand(B, n)
        return self.rows(idx)


def cluster_weights_features(A, labels, n_clusters):
    """``W @ onehot(labels)`` for a matrix-free :class:`Affinity`, block by
    block: ``O(n^2 (p + K))`` time, one block of memory.  ``(B, n, K)``
    float64."""
    B, n = A.shape
    X = _onehot(labels, n_clusters, A.dtype, A.valid)
    WX = torch.empty(B, n, n_clusters, dtype=F64, device=A.device)
    for idx in A._row_blocks():
        WX[:, idx[0]] = torch.bmm(A.rows(idx), X).to(F64)
    return WX


def update_cluster_weights_features(A, old_labels, new_labels, WX):
    """Return ``W @ onehot(new_labels)`` given ``WX`` for a matrix-free
    :class:`Affinity`: the rows of the ``m`` moved nodes are recomputed from
    the features (``O(n m (p + K))``), or everything when more than a third
    of the nodes moved.  ``WX`` is not modified."""
    B, n, K = WX.shape
    idx, flag, m = _moved_index(old_labels, new_labels)
    if m == 0:
        return WX.clone()
    if 3 * m > n:
        return cluster_weights_features(A, new_labels, K)
    D = _delta(old_labels, new_labels, idx, flag, K, A.dtype)
    out = WX.clone()
    step = A.block_rows()
    for c0 in range(0, m, step):
        c1 = min(m, c0 + step)
        rows = A.rows(idx[:, c0:c1])  # (B, c, n)
        out += torch.bmm(rows.transpose(1, 2), D[:, c0:c1]).to(F64)
    return out


def default_block_elems(device):
    """Entries of one matrix-free block: 2**22 on the CPU, 2**25 on CUDA."""
    return 2**25 if torch.device(device).type == "cuda" else 2**22
