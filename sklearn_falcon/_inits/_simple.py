"""The simple starts: uniformly random labels, k-means++ on features, the
previous fit's labels (``warm_start``), and the repair of empty clusters."""

import numpy as np

from .._log import log_stage

__all__ = ["fill_empty", "kmeans_labels", "random_labels", "warm_labels"]


def random_labels(n, n_clusters, rng):
    """Uniform random labels in which every cluster has at least one node."""
    labels = rng.integers(n_clusters, size=n)
    labels[rng.permutation(n)[:n_clusters]] = np.arange(n_clusters)
    return labels.astype(np.int64)


def fill_empty(labels, n_clusters, rng):
    """Give every empty cluster one node taken from the largest clusters
    (a new array; ``labels`` is not modified)."""
    labels = np.array(labels, dtype=np.int64, copy=True)
    counts = np.bincount(labels, minlength=n_clusters)
    for k in np.flatnonzero(counts == 0):
        big = int(np.argmax(counts))
        members = np.flatnonzero(labels == big)
        i = members[rng.integers(members.size)]
        labels[i] = k
        counts[big] -= 1
        counts[k] += 1
    return labels


def kmeans_labels(X, n_clusters, rng):
    """k-means++ labels of feature vectors (one k-means run)."""
    from sklearn.cluster import KMeans

    seed = int(rng.integers(np.iinfo(np.int32).max))
    km = KMeans(n_clusters=n_clusters, n_init=1, random_state=seed).fit(X)
    return fill_empty(km.labels_, n_clusters, rng)


def warm_labels(prev, n_samples, n_clusters, init, verbose=0):
    """Start labels of a ``warm_start`` fit: a copy of the previous
    ``labels_`` when the previous fit had ``n_samples`` samples and
    ``n_clusters`` clusters (every cluster of ``labels_`` is non-empty), else
    None (the usual ``init`` runs); with ``verbose``, the choice and its
    reason are logged.  Fewer previous clusters are no start: the new ones
    would be single nodes, far from any optimum."""
    if prev is not None and prev.shape[0] == n_samples and \
            int(prev.max()) + 1 == n_clusters:
        if verbose:
            log_stage("init", "warm start from the previous labels_")
        return prev.copy()
    if not verbose:
        return None
    reason = ("no previous fit" if prev is None else
              f"the previous fit had {prev.shape[0]} samples, not {n_samples}"
              if prev.shape[0] != n_samples else
              f"the previous fit had {int(prev.max()) + 1} clusters, "
              f"n_clusters is now {n_clusters}")
    log_stage("init", "warm_start=True but %s: init=%r", reason, init)
    return None
