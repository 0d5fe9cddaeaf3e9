"""The structure of a sparse matrix's index arrays, checked before any read.

SciPy checks that the indices of a CSR or CSC matrix lie within its shape
only in ``check_format(full_check=True)``, not when the matrix is built
from ``(data, indices, indptr)``; the Numba kernels (and SciPy's own
routines) index with them unchecked.  :func:`check_sparse_structure` refuses
such a matrix by name before anything reads it.

This module imports nothing from the package (layer 0): the affinities'
validation (``_affinity``) and the Dask backend's validation of row blocks
(``_backends._dask``) both use it, and :func:`float_sparse`.
"""

import numpy as np
import scipy.sparse as sp

__all__ = ["check_sparse_structure", "float_sparse", "sparse_astype"]


def check_sparse_structure(W, name="X"):
    """Raise ValueError, naming ``name``, if the CSR or CSC matrix ``W`` has
    index arrays out of its shape (SciPy checks them only in
    ``check_format(full_check=True)``, not on construction): the kernels
    and SciPy's own routines would read and write outside their arrays (a
    segmentation fault, or garbage).  Other formats are checked by SciPy
    when they are built.  ``W`` is not modified; O(nnz)."""
    if not sp.issparse(W) or W.format not in ("csr", "csc"):
        return
    major, minor = W.shape if W.format == "csr" else W.shape[::-1]
    indptr, indices = np.asarray(W.indptr), np.asarray(W.indices)
    problem = None
    if indptr.ndim != 1 or indptr.shape[0] != major + 1:
        problem = f"indptr has {indptr.size} entries, not {major + 1}"
    elif indptr[0] != 0 or np.any(indptr[1:] < indptr[:-1]):  # (unsigned too)
        problem = "indptr does not start at 0, or decreases"
    elif indptr[-1] > min(indices.size, np.asarray(W.data).size):
        problem = (f"indptr ends at {int(indptr[-1])}, past the "
                   f"{min(indices.size, np.asarray(W.data).size)} stored entries")
    elif indptr[-1] > 0:
        stored = indices[:indptr[-1]]
        lo, hi = int(stored.min()), int(stored.max())
        if lo < 0 or hi >= minor:
            problem = (f"a {'column' if W.format == 'csr' else 'row'} index "
                       f"{lo if lo < 0 else hi} is out of range [0, {minor})")
    if problem is not None:
        raise ValueError(
            f"The sparse matrix {name} of shape {W.shape} is malformed: {problem}.")


def sparse_astype(W, dtype):
    """A copy of the sparse ``W`` in ``dtype``, its duplicate entries kept
    (to be summed in ``dtype`` later): SciPy before 1.11 sums a COO matrix's
    duplicates in its own dtype in ``astype``, where uint8 or int8 weights
    wrap around (300 edges of weight 1 weighed 44)."""
    if W.format not in ("coo", "csr", "csc", "bsr"):  # (no duplicates)
        return W.astype(dtype)
    W = W.copy()
    W.data = W.data.astype(dtype)
    return W


def float_sparse(X):
    """``X`` itself, or, for a sparse ``X`` of integers, a float64 copy (its
    duplicate entries kept), before ``check_array`` converts its format:
    SciPy sums the duplicates of a COO matrix in their own dtype, where
    uint8 or int8 weights wrap around (300 edges of weight 1 weighed 44),
    while the metrics, which keep COO, sum them in float64."""
    if sp.issparse(X) and X.dtype.kind in "iu":
        return sparse_astype(X, np.float64)
    return X
