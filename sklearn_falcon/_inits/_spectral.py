"""Spectral starts: the K leading eigenvectors of ``D^-1/2 W D^-1/2``,
discretized."""

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh, qr, svd

from .._stats import cluster_statistics, objective_of
from ._simple import fill_empty

__all__ = ["cluster_qr", "spectral_embedding_labels", "spectral_labels"]


def cluster_qr(vectors):
    """Discretize a spectral embedding by column-pivoted QR (Damle et al.)."""
    k = vectors.shape[1]
    _, _, piv = qr(vectors.T, pivoting=True)
    ut, _, v = svd(vectors[piv[:k], :].T)
    return np.abs(vectors @ (ut @ v.conj())).argmax(axis=1)


def spectral_labels(W, degrees, n_clusters, rng):
    """Spectral labelling of a small graph by dense eigendecomposition."""
    Wd = W.toarray() if sp.issparse(W) else np.asarray(W, dtype=np.float64)
    inv = np.zeros_like(degrees)
    inv[degrees > 0] = 1.0 / np.sqrt(degrees[degrees > 0])
    M = inv[:, None] * Wd * inv[None, :]
    n = M.shape[0]
    _, vec = eigh(M, subset_by_index=[n - n_clusters, n - 1])
    vec = vec * inv[:, None]
    labels = cluster_qr(vec)
    return fill_empty(labels, n_clusters, rng)


def _lloyd(emb, labels, n_clusters, n_iter=30):
    """Plain k-means (Lloyd) iterations from ``labels``."""
    for _ in range(n_iter):
        centers = np.zeros((n_clusters, emb.shape[1]))
        np.add.at(centers, labels, emb)
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


def spectral_embedding_labels(W, degrees, n_clusters, rng, n_restarts=3):
    """Spectral labels: the K leading eigenvectors of ``D^-1/2 W D^-1/2``
    (dense ``eigh`` for tiny graphs, ARPACK ``eigsh`` otherwise), discretized
    on the row-normalized embedding by k-means started from cluster-QR and
    from ``n_restarts`` k-means++ seedings; the labelling of highest ``f`` on
    ``W`` is kept (cluster-QR alone can be far off on overlapping clusters).
    """
    n = W.shape[0]
    if n <= 100 or n_clusters >= n // 2:
        return spectral_labels(W, degrees, n_clusters, rng)
    from scipy.sparse.linalg import eigsh

    inv = 1.0 / np.sqrt(degrees)
    if sp.issparse(W):
        M = sp.diags(inv) @ W.astype(np.float64) @ sp.diags(inv)
    else:
        M = inv[:, None] * np.asarray(W, dtype=np.float64) * inv[None, :]
    v0 = rng.uniform(-1, 1, n)
    # a loose tolerance (1e-3) gave a different partition for each v0 on
    # nearly degenerate spectra (kNN mixtures); 1e-6 is stable
    _, vec = eigsh(M, k=n_clusters, which="LA", v0=v0, tol=1e-6)
    emb = vec * inv[:, None]
    tries = [cluster_qr(emb)]
    emb /= np.linalg.norm(emb, axis=1, keepdims=True) + 1e-300
    tries += [_kmeans_pp(emb, n_clusters, rng) for _ in range(n_restarts)]
    tries = [fill_empty(_lloyd(emb, y, n_clusters), n_clusters, rng) for y in tries]
    return max(tries, key=lambda y: objective_of(
        *cluster_statistics(W, y, n_clusters, degrees)))
