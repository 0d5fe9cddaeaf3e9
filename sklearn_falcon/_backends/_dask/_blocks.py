"""Per-block tasks of the Dask backend: pure functions on the arrays of one
row block, run on the workers.

A row block holds the rows ``r0 .. r0 + m - 1`` of the symmetric ``W``, with
all ``n`` columns, as CSR.  The tasks call the kernels of
:mod:`sklearn_falcon._backends._numba` on it -- each kernel is a function of
the rows it is given and of the labels of every node -- and return the
block's share: its rows of ``WX``, its new labels, and ``K``-sized partial
sums that :func:`add_parts` reduces.  They call the serial twins of the
kernels: the parallelism is Dask's, one thread per block.  No task modifies
its inputs (a persisted array may be shared by later tasks).

Labels travel in the narrowest integer type that holds ``K`` (the Numba
backend's :func:`label_dtype`, which its CSR kernels take: int8 up to 127
clusters): every pass over ``W`` reads the labels of all ``n`` nodes.
"""

import numpy as np
import scipy.sparse as sp

from ..._jit import jit
from ..._structure import check_sparse_structure, float_sparse
from .._numba._kernels import (
    _argmax_with_inertia_ser,
    _cluster_weights_csr_ser,
    cluster_stats,
    objective,
)
from .._numba._csr import label_dtype
from .._numba._polish import local_move_sweep_csr_wx

__all__ = ["add_parts", "as_csr", "concat_blocks", "flat_block", "freeze_task",
           "isolated_task", "label_dtype", "pass_task", "polish_task", "random_task",
           "relabel_task", "scale_task", "step_task", "sum_values", "summary_task",
           "symmetry_sums"]


def as_csr(block):
    """A row block as CSR with sorted indices and no duplicates, in float32
    or float64 (other dtypes become float64); a copy only where needed.

    Dense blocks are converted: every task runs the CSR kernels.
    """
    if sp.issparse(block):
        W = float_sparse(block).tocsr()  # COO duplicates: summed in float64
    elif isinstance(block, np.ndarray) and block.ndim == 2:
        if block.dtype in (np.float16, object):  # dtypes scipy.sparse refuses
            block = block.astype(np.float64)
        elif not block.dtype.isnative:  # as it refuses a big-endian one
            block = block.astype(block.dtype.newbyteorder("="))
        W = sp.csr_matrix(block)
    else:
        raise TypeError(
            "The row blocks of a Dask affinity must be scipy.sparse matrices or 2-D "
            f"NumPy arrays; got a block of type {type(block).__name__}."
        )
    if W.dtype not in (np.float32, np.float64):
        W = W.astype(np.float64)
    if not W.has_canonical_format:
        W = W.copy()
        W.sum_duplicates()
    return W


def scale_task(block, e):
    """A row block as CSR times ``2**e`` (exact, barring underflow): a new
    data array, the index arrays shared."""
    W = as_csr(block)
    out = sp.csr_matrix((np.ldexp(W.data, e), W.indices, W.indptr), shape=W.shape,
                        copy=False)
    out.has_canonical_format = True  # as W's
    return out


# ------------------------------------------------------------- validation
@jit
def _unit_hash(i, salt):
    """A pseudo-random number in [0, 1) from a node index (splitmix64)."""
    x = np.uint64(i) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(salt)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return np.float64(x >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@jit
def symmetry_sums(indptr, indices, data, r0, salt):
    """``(sum W_ij h(i) g(j), sum W_ij h(j) g(i))`` over the rows of a block
    (rows numbered from ``r0``), with ``h``, ``g`` pseudo-random functions of
    the node index.

    Over all blocks the two sums are equal when ``W`` is symmetric, and
    differ with high probability when it is not (their difference is
    ``sum (W_ij - W_ji) h(i) g(j)``): a check of symmetry that needs no
    transpose and moves two numbers per block.
    """
    s1 = 0.0
    s2 = 0.0
    for r in range(indptr.shape[0] - 1):
        i = r0 + r
        hi = _unit_hash(i, salt)
        gi = _unit_hash(i, salt + 1)
        for p in range(indptr[r], indptr[r + 1]):
            j = indices[p]
            w = np.float64(data[p])
            s1 += w * hi * _unit_hash(j, salt + 1)
            s2 += w * _unit_hash(j, salt) * gi
    return s1, s2


def flat_block(W, r0):
    """``(w, d)`` when every off-diagonal entry of the canonical CSR row block
    ``W`` (rows ``r0 ..``) is the same weight ``w > 0`` and every diagonal
    one ``d``, else None: the blocks of a complete graph of equal weights
    (:func:`~sklearn_falcon._affinity.flat_weight`), which only a block that
    stores every entry can be."""
    m, n = W.shape
    if n < 3 or m == 0 or W.nnz < m * (n - 1):
        return None
    rows = np.repeat(np.arange(m), np.diff(W.indptr))
    on = W.indices == rows + r0
    off = W.data[~on]
    if off.size != m * (n - 1) or not (off[0] > 0 and np.all(off == off[0])):
        return None
    diag = np.zeros(m, dtype=W.dtype)
    diag[rows[on]] = W.data[on]
    return (float(off[0]), float(diag[0])) if np.all(diag == diag[0]) else None


def summary_task(block, r0, n_rows, n, salt, name="X"):
    """Degrees of a block and what the client checks without seeing it:
    ``(degrees, (nnz, nbytes, all finite, min, s1, s2, total degree,
    flat, max, max degree))``, ``flat`` from :func:`flat_block`.

    A CSR or CSC block whose index arrays leave its shape is refused, naming
    it, before anything reads them (SciPy does not check them when a matrix
    is built from its arrays; the kernels would read out of bounds)."""
    check_sparse_structure(block, f"{name} (its row block starting at row {r0})")
    dtype = block.dtype if isinstance(block, np.ndarray) or sp.issparse(block) else (
        None)  # a block's own, not the array's (others: as_csr's TypeError)
    if dtype is not None and dtype.kind in "cSU":
        raise ValueError(
            f"The row block of {name} starting at row {r0} has dtype={dtype}; pass "
            "real float32 or float64 values (complex values lose their imaginary "
            "part).")
    W = as_csr(block)
    if W.shape != (n_rows, n):
        raise ValueError(
            f"The row block of {name} starting at row {r0} has shape {W.shape}; its "
            f"chunk says ({n_rows}, {n})."
        )
    data = W.data
    finite = bool(np.isfinite(data).all())
    dmin = float(data.min()) if data.size else 0.0
    s1, s2 = symmetry_sums(W.indptr, W.indices, data, r0, salt) if finite else (
        0.0, 0.0)
    nbytes = data.nbytes + W.indices.nbytes + W.indptr.nbytes
    with np.errstate(over="ignore"):  # an inf degree is refused by the client
        degrees = np.asarray(W.sum(axis=1), dtype=np.float64).ravel()
        total = float(degrees.sum())
    flat = flat_block(W, r0) if finite else None
    top = float(data.max()) if data.size else 0.0  # (an overflow's message)
    dtop = float(degrees.max()) if degrees.size else 0.0
    return degrees, (W.nnz, nbytes, finite, dmin, s1, s2, total, flat, top, dtop)


# ---------------------------------------------------------------- solver
# Tasks take many Dask values as separate arguments, never as one list: a
# list of persisted values is passed to the scheduler as bare futures, which
# it may release before the task runs ("lost dependencies").
def concat_blocks(*blocks):
    """The blocks' arrays joined in order (the labels of all nodes, ...)."""
    return np.concatenate(blocks)


def sum_values(*values):
    """The sum of numbers (the moves of all blocks)."""
    return int(sum(values))


def add_parts(*parts):
    """Element-wise sum of tuples of partial sums (arrays or numbers), in
    order: one node of the reduction tree."""
    out = list(parts[0])
    for p in parts[1:]:
        for t, v in enumerate(p):
            out[t] = out[t] + v
    return tuple(out)


def pass_task(block, r0, degrees, n_clusters, *label_blocks):
    """One pass over a block: its rows of ``WX = W @ onehot(labels)`` and the
    partial ``(vol, assoc, counts)`` of its nodes (``counts``: nodes of
    nonzero degree per cluster)."""
    W = as_csr(block)
    labels = np.concatenate(label_blocks)
    WX = _cluster_weights_csr_ser(W.indptr, W.indices, W.data, labels, n_clusters)
    own = labels[r0:r0 + W.shape[0]]
    vol, assoc = cluster_stats(WX, own, degrees, n_clusters)
    counts = np.bincount(own[degrees > 0], minlength=n_clusters)
    return WX, (vol, assoc, counts)


def step_task(WX, degrees, vol, assoc, labels, tau):
    """The proximal step of a block's rows (arg-max of the score with inertia
    ``tau``), before the global guard against empty clusters:
    ``(new labels, n_moved)``."""
    new = _argmax_with_inertia_ser(WX, degrees, vol, assoc, labels, tau)
    return new, int(np.count_nonzero(new != labels))


def freeze_task(labels, new, frozen):
    """Cancel the moves out of the clusters marked in ``frozen`` (the global
    guard: those moves would empty them): ``(new labels, n_moved)``."""
    out = np.where(frozen[labels], labels, new).astype(labels.dtype)
    return out, int(np.count_nonzero(out != labels))


def polish_task(block, r0, degrees, labels, WX, vol, assoc, counts):
    """One exact local-move sweep over a block's rows, the other blocks'
    labels fixed: ``(new labels, (n_moves, gain))``.

    The sweep of the Numba backend runs on the block's own columns (the
    moves of its nodes change ``WX`` only there, among its rows) with the
    block's full rows of ``WX``, so each move's gain, and ``gain`` (the
    change of ``f`` of the block's moves alone), is exact.  ``counts`` (the
    nodes of nonzero degree of each cluster, in all blocks) guards the
    moves: the block's moves alone empty no cluster, but its last node of a
    cluster that other blocks hold may leave it (the moves of several
    blocks together may then empty it: the caller checks).
    """
    W = as_csr(block)
    m = W.shape[0]
    D = W if (r0 == 0 and m == W.shape[1]) else W[:, r0:r0 + m].tocsr()
    lab = labels.copy()
    v = vol.copy()
    a = assoc.copy()
    moves = local_move_sweep_csr_wx(D.indptr, D.indices, D.data, degrees, lab,
                                    WX.copy(), v, a, counts.astype(np.int64))
    return lab, (int(moves), float(objective(v, a) - objective(vol, assoc)))


# ---------------------------------------------------------------- labels
def random_task(n_rows, n_clusters, seed, dtype):
    """Uniformly random labels of a block, from its own seed."""
    rng = np.random.default_rng(seed)
    return rng.integers(n_clusters, size=n_rows).astype(dtype)


def relabel_task(labels, degrees, old, nth, new):
    """The labels with the ``nth`` node of nonzero degree in cluster ``old``
    moved to ``new`` (the repair of an empty cluster)."""
    out = labels.copy()
    out[np.flatnonzero((labels == old) & (degrees > 0))[nth]] = new
    return out


def isolated_task(labels, degrees, cluster):
    """The labels with every node of zero degree in ``cluster``."""
    return np.where(degrees > 0, labels, cluster).astype(labels.dtype)
