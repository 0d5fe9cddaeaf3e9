"""Exact k-nearest-neighbour searches of the kNN affinity (Euclidean).

Two searchers with the one method of ``NearestNeighbors`` the affinities
call, ``kneighbors_graph``:

* :class:`_TreeNeighbors`, SciPy's k-d tree, where scikit-learn would search
  a tree (dense samples of at most 15 features);
* :class:`_BruteNeighbors`, scikit-learn's brute force elsewhere (more
  features, sparse samples), with a choice among samples at equal distances
  that does not depend on the number of threads.

and :func:`_knn_connectivity`, the ``k`` nearest of each row of a
precomputed distance matrix (``affinity="precomputed_nearest_neighbors"``).

scikit-learn's brute force (``ArgKmin``) splits its work by its OpenMP
threads, and which of several samples at one distance it keeps depends on
that split: the kNN graph of the digits (integer pixels, many equal
distances) had 24,053, 24,061, 24,059 and 24,055 entries on 1, 2, 3 and 4
threads, and so its partition differed from machine to machine for one
``random_state``.  :class:`_BruteNeighbors` takes twice as many candidates
from it, measures their distances itself, and keeps the ``k`` nearest,
equal distances by sample index, as the precomputed path does; a query whose
candidates could miss a sample at its ``k``-th distance (many equal
distances: duplicate samples, one-hot codes) takes four times as many, until
none could.
"""

import copy

import numpy as np
import scipy.sparse as sp
from sklearn.utils.extmath import row_norms

from .. import _jit  # not `from .._jit import`, which marks a kernel module
from .._threads import effective_n_threads
from ._check import check_finite_top

__all__ = ["_BruteNeighbors", "_TreeNeighbors", "_check_distance_range",
           "_far_shift", "_knn_connectivity"]

# float64 entries of one block of queries' candidates (the searches of
# unsure queries, the sparse distances): 32 MB
_BLOCK = 1 << 22
# float64 entries of one block of dense differences (query rows x
# candidates x features), squared in place: 2 MB (32 MB blocks, squared
# apart, held 110 MB at 20,000 x 64 samples, k=10; this takes 5 MB)
_DIFF_BLOCK = 1 << 18
# candidates of one block of queries of a search (their distances,
# indices and order: a few MB; all queries at once held them for all)
_QUERY_BLOCK = 1 << 16


def _check_distance_range(X, of="distances", name="X", underflow=False):
    """Refuse samples whose squared Euclidean distances (``of="distances"``)
    or squared norms (``"norms"``) can overflow their dtype, float64 values
    beyond about 1e153 and float32 ones beyond about 1e18 (scikit-learn
    computes float32 norms and distances in float32): a neighbour search
    would see every neighbour at an infinite distance and return arbitrary
    ones, an RBF kernel would be NaN or 0 everywhere, and the cosine would
    take every row for a zero one.

    With ``underflow``, also refuse training samples whose squared distances
    are all below the normal range of their dtype (float64 values below
    about 1e-155, float32 ones below about 1e-20, which scikit-learn's sparse
    search squares in float32): they round to subnormal numbers or zero, and
    the neighbours were chosen among equal distances, in index order (a kNN
    graph of 1e-170 times some samples was not theirs)."""
    data = X.data if sp.issparse(X) else X
    if not data.size:
        return
    top = float(np.abs(data).max())
    check_finite_top(top, name)
    bound = (4.0 if of == "distances" else 1.0) * top * top * max(X.shape[1], 1)
    dtype = np.dtype(np.float32 if X.dtype == np.float32 else np.float64)
    if bound >= float(np.finfo(dtype).max):
        what = ("distances between the samples" if of == "distances"
                else "norms of the samples")
        raise ValueError(
            f"The squared {what} of {name} can overflow {dtype.name}: its values "
            f"reach {top:.3g}. Scale {name}, for example with StandardScaler"
            + (f", or pass {name} as float64." if dtype == np.float32 else ".")
        )
    # (all samples zero: all distances are exactly equal)
    if underflow and top != 0 and bound < float(np.finfo(dtype).tiny):
        raise ValueError(
            f"The squared distances between the samples of {name} underflow "
            f"{dtype.name}: its values are at most {top:.3g}, and the nearest "
            f"neighbours would be chosen among equal distances. Scale {name} up, "
            "for example with StandardScaler."
        )


def _far_shift(X, sq_norms=None):
    """The mean of dense samples far from the origin next to their spread
    (its squared norm above 1e4 times their mean squared distance to it), to
    centre them by: scikit-learn's distances ``||x||^2 + ||y||^2 - 2 x.y``
    round to about ``eps ||x||^2`` (1e7 from the origin, a spread of 1
    gave squared distances off by 0.1); None for others, and sparse ones."""
    if sp.issparse(X) or not X.shape[0]:
        return None
    mean = X.mean(axis=0, dtype=np.float64)
    mu2 = float(mean @ mean)
    sq = row_norms(X, squared=True) if sq_norms is None else sq_norms
    far = mu2 > 0 and float(sq.mean(dtype=np.float64)) - mu2 <= 1e-4 * mu2
    return mean if far else None


def _connectivity(idx, n_train):
    """CSR ``(n_queries, n_train)`` with a 1 at each row's indices."""
    n_q, k = idx.shape
    return sp.csr_matrix(
        (np.ones(idx.size), idx.ravel(), np.arange(0, idx.size + 1, k)),
        shape=(n_q, n_train))


class _TreeNeighbors:
    """The ``k`` nearest training samples (Euclidean) by SciPy's k-d tree,
    with the one method of ``NearestNeighbors`` that the affinities call.

    The tree is exact, like scikit-learn's k-d tree, and finds the same
    neighbours except among samples at exactly equal distances (a lattice,
    duplicate samples), where each tree keeps its own choice.  It takes
    0.50-0.92x the time of ``NearestNeighbors`` on 500 to 100,000 samples
    of 2 to 15 features (median 0.62x, ``benchmarks/bench_knn.py``), and
    ``import sklearn`` has already imported it, where ``sklearn.neighbors``
    adds about 50 ms to a small first fit (as long as its own solve).

    Parameters
    ----------
    X : ndarray of shape (n_train, n_features)
        The training samples.
    k : int
        Neighbours per query, at most ``n_train``.
    n_jobs : int or None
        Threads of a query (joblib's convention; ``None`` is one).
    """

    def __init__(self, X, k, *, n_jobs=None):
        from scipy.spatial import cKDTree

        self.tree = cKDTree(X)
        self.k = k
        self.n_jobs = n_jobs  # its threads: of the CPUs where a query runs

    def kneighbors_graph(self, X, mode="connectivity"):
        """CSR ``(n_queries, n_train)``: a 1 at each query's ``k`` nearest
        training samples (a query that is a training sample finds itself).
        A sparse ``X`` (``predict``'s rows, of at most 15 features) is read
        dense: the tree takes no sparse queries."""
        if mode != "connectivity":
            raise ValueError(f"mode={mode!r} is not supported here; only "
                             "'connectivity'.")
        if sp.issparse(X):
            X = X.toarray()
        workers = (1 if self.n_jobs is None else
                   effective_n_threads(self.n_jobs, _jit.usable_cpus()))
        _, idx = self.tree.query(X, k=self.k, workers=workers)
        idx = idx.reshape(X.shape[0], self.k)
        if np.any(idx == self.tree.n):  # an infinite distance: not an index
            raise ValueError("The k-d tree found neighbours at an infinite "
                             "distance; scale the samples down.")
        return _connectivity(idx, self.tree.n)


class _BruteNeighbors:
    """The ``k`` nearest training samples (Euclidean) by scikit-learn's
    ``NearestNeighbors``, samples at equal distances taken by index, the
    same on any number of threads (see the module docstring).

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_train, n_features)
        The training samples (held, not modified; dense ones far from the
        origin next to their spread are searched centred, a float64 copy).
    k : int
        Neighbours per query, at most ``n_train``.
    n_jobs : int or None
        ``NearestNeighbors``'s ``n_jobs``.
    """

    def __init__(self, X, k, *, n_jobs=None):
        from sklearn.neighbors import NearestNeighbors

        self.X = X
        self.k = k
        self.n = X.shape[0]
        self.n_candidates = min(self.n, 2 * k)
        self.sq_norms = row_norms(X, squared=True).astype(np.float64)
        # samples far from the origin (coordinates of 1e7) made every query
        # unsure of its candidates, an O(n^2) search: searched centred
        self.shift = _far_shift(X, self.sq_norms)
        self.search_sq_norms = (self.sq_norms if self.shift is None else
                                row_norms(X - self.shift, squared=True))
        self.n_jobs = n_jobs  # read at each query (set after the fit)
        self.nn = NearestNeighbors(n_neighbors=self.n_candidates,
                                   n_jobs=n_jobs).fit(self._search(X))

    def _search(self, X):
        """Samples as scikit-learn's search sees them (centred: float64)."""
        return X if self.shift is None else X - self.shift

    def kneighbors_graph(self, X, mode="connectivity"):
        """CSR ``(n_queries, n_train)``: a 1 at each query's ``k`` nearest
        training samples, equal distances by index."""
        if mode != "connectivity":
            raise ValueError(f"mode={mode!r} is not supported here; only "
                             "'connectivity'.")
        X = (sp.csr_matrix(X) if sp.issparse(self.X) else
             X.toarray() if sp.issparse(X) else X)
        m = self.n_candidates
        # queries in blocks of _QUERY_BLOCK candidates: the candidates'
        # distances, indices and order are held for one block at a time
        step = max(1, _QUERY_BLOCK // m)
        starts = range(0, max(X.shape[0], 1), step)  # (no queries: as one)
        parts = [self._nearest(X[a:a + step], m) for a in starts]
        idx = np.concatenate([p[0] for p in parts])
        unsure = np.concatenate([p[1] + a for p, a in zip(parts, starts)])
        while unsure.size:
            # queries whose candidates could miss a sample at their k-th
            # distance (many equal distances: duplicates, one-hot codes):
            # four times the candidates, until none could (or all samples)
            m = min(self.n, 4 * m)
            step = max(1, _BLOCK // m)
            still = []
            for a in range(0, unsure.size, step):
                rows = unsure[a:a + step]
                idx[rows], u = self._nearest(X[rows], m)
                still.append(rows[u])
            unsure = np.concatenate(still)
        return _connectivity(idx, self.n)

    def _nearest(self, Q, m):
        """``(idx, unsure)``: the ``k`` nearest of ``m`` candidates from
        ``NearestNeighbors`` of each query, by the distances measured here,
        equal distances by index; ``unsure``: the queries where a sample
        outside the candidates could be as near as the ``k``-th (within the
        rounding of both computations of the distances)."""
        S = self._search(Q)
        nn = self.nn
        if nn.n_jobs != self.n_jobs:
            nn = copy.copy(nn)  # the fitted search, shared
            nn.n_jobs = self.n_jobs
        dist, cand = nn.kneighbors(S, n_neighbors=m)
        q_norms = row_norms(Q, squared=True).astype(np.float64)
        d2 = self._sq_distances(Q, cand, q_norms)
        order = np.lexsort((cand, d2), axis=-1)[:, :self.k]
        idx = np.take_along_axis(cand, order, axis=1)
        if m >= self.n:
            return idx, np.empty(0, dtype=np.int64)
        kth = np.take_along_axis(d2, order[:, -1:], axis=1)[:, 0]
        # a sample the candidates missed is at least as far, in
        # scikit-learn's distances, as the last candidate; only samples of
        # norm up to |q| + sqrt(kth) can be as near as the k-th (the others
        # are farther, by the triangle inequality), so their norms bound the
        # rounding (one outlier's norm made every query unsure: an O(n^2)
        # search, 39 s instead of 0.2 s for 8,000 samples)
        eps = np.finfo(np.float64).eps
        last = dist[:, -1].astype(np.float64) ** 2
        s_norms = (q_norms if self.shift is None else
                   row_norms(S, squared=True).astype(np.float64))
        reach = np.minimum(self.search_sq_norms.max(),
                           (np.sqrt(s_norms) + np.sqrt(kth)) ** 2 * (1 + 1e-6))
        margin = (16.0 * (max(Q.shape[1], 1) + 2) * eps * (s_norms + reach)
                  + 4.0 * np.finfo(dist.dtype).eps * last)
        return idx, np.flatnonzero(last - margin <= kth)

    def _sq_distances(self, Q, cand, q_norms):
        """Squared distances of each query to its candidates, in float64, by
        one fixed sequence of operations (``q_norms``: the queries' squared
        norms, for sparse samples)."""
        n_q, m = cand.shape
        out = np.empty((n_q, m), dtype=np.float64)
        if sp.issparse(self.X):
            rows = max(1, _BLOCK // max(m * 16, 1))
            for a in range(0, n_q, rows):
                b = min(n_q, a + rows)
                c = cand[a:b].ravel()
                A = Q[np.repeat(np.arange(a, b), m)]
                dot = np.asarray(A.multiply(self.X[c]).sum(axis=1),
                                 dtype=np.float64).ravel()
                out[a:b] = (q_norms[a:b, None] + self.sq_norms[cand[a:b]]
                            - 2.0 * dot.reshape(b - a, m))
            return np.maximum(out, 0.0)
        d = max(Q.shape[1], 1)
        cols = max(1, min(m, _DIFF_BLOCK // d))  # candidates of one block
        rows = max(1, _DIFF_BLOCK // (cols * d))
        for a in range(0, n_q, rows):
            b = min(n_q, a + rows)
            q = np.asarray(Q[a:b], dtype=np.float64)[:, None, :]
            for c in range(0, m, cols):
                # float64 - float32 is exact; a plain sum of squares, no BLAS:
                # each pair's value whatever the blocks
                diff = q - self.X[cand[a:b, c:c + cols]]
                out[a:b, c:c + cols] = np.square(diff, out=diff).sum(axis=-1)
        return out


def _knn_connectivity(D, k):
    """kNN connectivity (CSR, float64) of the rows of a distance matrix,
    the ``k`` smallest distances of each row (ties in column order).

    Dense ``D``: every entry is a distance.  Sparse ``D``: only the stored
    entries are (a missing entry is no edge, as in scikit-learn's
    precomputed graphs), and a row with fewer than ``k`` of them keeps them
    all, where scikit-learn's ``NearestNeighbors`` refuses the whole matrix.
    Duplicate entries of a non-canonical ``D`` are one distance, their sum
    (as SciPy reads them); the caller's ``D`` is not modified.
    """
    n_rows, n_cols = D.shape
    if sp.issparse(D):
        D = sp.csr_matrix(D)
        if not D.has_canonical_format:  # duplicates summed, columns in order
            D = D.copy()
            D.sum_duplicates()
        rows = np.repeat(np.arange(n_rows), np.diff(D.indptr))
        order = np.lexsort((D.data, rows))  # by row, then distance; stable
        rank = np.arange(order.size) - D.indptr[rows[order]]
        keep = order[rank < k]
        r, c = rows[keep], D.indices[keep]
    else:
        r, c = _dense_knn(D, min(k, n_cols))
    return sp.csr_matrix((np.ones(r.size), (r, c)), shape=(n_rows, n_cols))


def _dense_knn(D, k):
    """``(rows, cols)`` of the ``k`` smallest entries of each row of a dense
    ``D``, equal values in column order, in row blocks of about 4M entries
    (a partition of each row, not a sort)."""
    n_rows, n_cols = D.shape
    cols = np.empty((n_rows, k), dtype=np.int64)
    step = max(1, (1 << 22) // max(n_cols, 1))
    for a in range(0, n_rows, step):
        B = np.asarray(D[a:a + step])
        kth = np.partition(B, k - 1, axis=1)[:, k - 1:k]
        less = B < kth
        tie = B == kth
        # all entries below the k-th value, then the first ties up to k
        need = k - np.count_nonzero(less, axis=1)[:, None]
        take = less | (tie & (np.cumsum(tie, axis=1) <= need))
        cols[a:a + B.shape[0]] = np.nonzero(take)[1].reshape(-1, k)
    return np.repeat(np.arange(n_rows), k), cols.ravel()
