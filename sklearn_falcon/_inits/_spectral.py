"""Spectral starts: the K leading eigenvectors of ``D^-1/2 W D^-1/2``,
discretized."""

import inspect
import re

import numpy as np
import scipy.sparse as sp
from scipy.linalg import LinAlgError, eigh, qr, svd
from scipy.sparse.linalg import ArpackNoConvergence, eigsh, lobpcg

from .._log import ignoring
from .._stats import cluster_statistics, objective_of
from ._simple import fill_empty

__all__ = ["cluster_qr", "discretize", "leading_vectors", "spectral_embedding_labels"]

# dense eigendecomposition up to this many nodes; bounds of the iterative
# eigensolvers above (see leading_vectors)
_DENSE_MAX = 600
_ARPACK_MAXITER = 300
_LOBPCG_MAXITER = 200
_LOBPCG_WARM_MAXITER = 30

# ARPACK asks for a random vector when its Krylov space becomes invariant
# (a matrix of few distinct eigenvalues: a complete graph, equal cliques).
# SciPy >= 1.17 draws it from ``eigsh(rng=)``, a fresh OS-seeded generator
# when none is given, so without the fit's generator those labels would
# change from one run to the next whatever the random_state.
_EIGSH_RNG = "rng" in inspect.signature(eigsh).parameters


def cluster_qr(vectors):
    """Discretize a spectral embedding by column-pivoted QR (Damle et al.)."""
    k = vectors.shape[1]
    _, _, piv = qr(vectors.T, pivoting=True)
    ut, _, v = svd(vectors[piv[:k], :].T)
    return np.abs(vectors @ (ut @ v.conj())).argmax(axis=1)


def _lloyd(emb, labels, n_clusters, n_iter=30):
    """Plain k-means (Lloyd) iterations from ``labels``."""
    cols = np.ascontiguousarray(emb.T)
    for _ in range(n_iter):
        # per-column bincount: the same sums as np.add.at, in the same order
        # (bit-identical), 7x faster
        centers = np.stack([np.bincount(labels, weights=c, minlength=n_clusters)
                            for c in cols], axis=1)
        counts = np.bincount(labels, minlength=n_clusters)
        centers /= np.maximum(counts, 1)[:, None]
        dist = (centers**2).sum(1)[None, :] - 2.0 * emb @ centers.T
        new = dist.argmin(axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def _kmeans_pp(emb, n_clusters, rng):
    """k-means++ seeding; returns the labels of the nearest seed."""
    n = emb.shape[0]
    seeds = [int(rng.integers(n))]
    d2 = ((emb - emb[seeds[0]]) ** 2).sum(1)
    for _ in range(n_clusters - 1):
        total = d2.sum()
        i = int(rng.choice(n, p=d2 / total)) if total > 0 else int(rng.integers(n))
        seeds.append(i)
        d2 = np.minimum(d2, ((emb - emb[i]) ** 2).sum(1))
    C = emb[seeds]
    return ((C**2).sum(1)[None, :] - 2.0 * emb @ C.T).argmin(axis=1)


def _normalized(W, inv):
    if sp.issparse(W):
        Dm = sp.diags(inv)
        return (Dm @ W.astype(np.float64) @ Dm).tocsr()
    return inv[:, None] * np.asarray(W, dtype=np.float64) * inv[None, :]


def _lobpcg(M, X, maxiter):
    # capped on purpose: its "not reaching the requested tolerance" is noise.
    # Only SciPy's (attributed to SciPy or to this call): the filter is the
    # process's, and a fit in another thread warned meanwhile was silenced
    with ignoring(UserWarning, module=rf"({re.escape(__name__)}$|scipy\.)"):
        return lobpcg(M, X, largest=True, tol=1e-6, maxiter=maxiter)


def _top_vectors(M, k):
    """The eigenvectors of the ``k`` largest eigenvalues of a symmetric
    dense ``M``, by increasing eigenvalue: LAPACK's ``syevr`` for those
    only, and its divide and conquer (``syevd``) for all of them where
    ``syevr`` fails on a cluster of equal eigenvalues (a graph of many
    components has eigenvalue 1 once per component): it can return fewer
    vectors than asked, none at all, or raise."""
    n = M.shape[0]
    try:
        vec = eigh(M, subset_by_index=[n - k, n - 1])[1]
    except LinAlgError:
        vec = None
    if vec is None or vec.shape[1] < k:
        vec = eigh(M, driver="evd")[1][:, n - k:]
    return vec


def _scaled_back(inv):
    """``D^-1/2`` (``inv``) for scaling the eigenvectors back, divided by a
    power of two (exactly) when its entries are far from 1.

    The embedding's rows are only compared up to a common factor, but a
    graph of subnormal weights (degrees near 1e-323) has ``inv`` near
    1e161: the squares of the rows' norms overflowed, every normalized row
    became 0 and the spectral start was arbitrary.
    """
    top = float(inv.max()) if inv.size else 1.0
    e = int(np.frexp(top)[1]) if np.isfinite(top) and top > 0 else 0
    return np.ldexp(inv, -e) if abs(e) > 64 else inv


def leading_vectors(W, degrees, n_vectors, rng, start=None):
    """The ``n_vectors`` leading eigenvectors of ``D^-1/2 W D^-1/2``, scaled
    back by ``D^-1/2`` (columns by decreasing eigenvalue).

    Dense ``eigh`` up to ``_DENSE_MAX`` nodes.  Above, with ``start`` (an
    approximation of the result, e.g. the vectors of a coarse level
    projected), LOBPCG from it for at most ``_LOBPCG_WARM_MAXITER``
    iterations; without, ARPACK with at most ``_ARPACK_MAXITER`` restarts,
    and if it has not converged by then (a nearly degenerate spectrum: one
    pixel graph once took 16,259 iterations), LOBPCG with at most
    ``_LOBPCG_MAXITER`` iterations.  Either way the cost is bounded.
    """
    n = W.shape[0]
    inv = 1.0 / np.sqrt(degrees)
    back = _scaled_back(inv)
    if n <= _DENSE_MAX or n_vectors >= n // 2:
        M = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
        M = inv[:, None] * M * inv[None, :]
        return _top_vectors(M, n_vectors)[:, ::-1] * back[:, None]
    M = _normalized(W, inv)
    if start is not None:
        vals, vec = _lobpcg(M, start * np.sqrt(degrees)[:, None], _LOBPCG_WARM_MAXITER)
    else:
        v0 = rng.uniform(-1, 1, n)
        # a loose tolerance (1e-3) gave a different partition for each v0 on
        # nearly degenerate spectra (kNN mixtures); 1e-6 is stable
        seeded = {"rng": rng} if _EIGSH_RNG else {}
        try:
            vals, vec = eigsh(M, k=n_vectors, which="LA", v0=v0, tol=1e-6,
                              maxiter=_ARPACK_MAXITER, **seeded)
        except ArpackNoConvergence:
            X = rng.uniform(-1, 1, (n, n_vectors))
            X[:, 0] = np.sqrt(degrees)
            vals, vec = _lobpcg(M, X, _LOBPCG_MAXITER)
    order = np.argsort(-vals)
    return vec[:, order] * back[:, None]


def discretize(emb, W, degrees, n_clusters, rng, n_restarts=3):
    """Labels from a spectral embedding: k-means on the row-normalized
    embedding started from cluster-QR and from ``n_restarts`` k-means++
    seedings; the labelling of highest ``f`` on ``W`` is kept (cluster-QR
    alone can be far off on overlapping clusters)."""
    tries = [cluster_qr(emb)]
    if emb.shape[0] > n_clusters:
        emb = emb / (np.linalg.norm(emb, axis=1, keepdims=True) + 1e-300)
        tries += [_kmeans_pp(emb, n_clusters, rng) for _ in range(n_restarts)]
        tries = [_lloyd(emb, y, n_clusters) for y in tries]
    tries = [fill_empty(y, n_clusters, rng) for y in tries]
    return max(tries, key=lambda y: objective_of(
        *cluster_statistics(W, y, n_clusters, degrees)))


def spectral_embedding_labels(W, degrees, n_clusters, rng, start=None):
    """Spectral labels: the K leading eigenvectors of ``D^-1/2 W D^-1/2``
    (:func:`leading_vectors`, from ``start`` if given), discretized
    (:func:`discretize`)."""
    emb = leading_vectors(W, degrees, n_clusters, rng, start=start)
    return discretize(emb, W, degrees, n_clusters, rng)
