"""Graphs and backends shared by the tests.

The planted graphs and token features come from ``benchmarks/graphs.py``
(the generators the benchmarks use), given random edge weights where exact
ties between nodes would make two correct backends disagree.  ``BACKENDS``
is the one list of backends under test: a parity test parametrized over it
covers a new backend when the backend is added here.
"""

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp

from benchmarks.graphs import blobs_graph, sbm_graph, token_features
from sklearn_falcon._affinity import cosine_power_affinity

__all__ = ["BACKENDS", "blobs_graph", "dense_token_graph", "noisy", "planted",
           "random_graph", "spy_on", "tokens"]

_HAS_TORCH = importlib.util.find_spec("torch") is not None
_HAS_DASK = importlib.util.find_spec("dask") is not None

# every backend, with the device the CPU-only CI runs it on
BACKENDS = [
    pytest.param(("numba", "cpu"), id="numba"),
    pytest.param(("torch", "cpu"), id="torch-cpu",
                 marks=pytest.mark.skipif(not _HAS_TORCH, reason="torch missing")),
    # an in-memory W is one row block on Dask's default scheduler; several
    # blocks and clusters are tested in test_dask_backend.py
    pytest.param(("dask", "cpu"), id="dask",
                 marks=pytest.mark.skipif(not _HAS_DASK, reason="dask missing")),
]


def random_graph(n=60, seed=0, density=0.2, dtype=np.float64, diagonal=None):
    """Dense symmetric random weights (zero with probability ``1 - density``)
    and the same matrix as CSR; ``diagonal`` sets self-loops."""
    rng = np.random.default_rng(seed)
    A = rng.random((n, n)) * (rng.random((n, n)) < density)
    W = A + A.T
    if diagonal is not None:
        np.fill_diagonal(W, diagonal)
    W = W.astype(dtype)
    return W, sp.csr_matrix(W)


def parallel_edges(dtype):
    """``(rows, cols, G, W)``: a 4-node edge list of repeated edges (300
    parallel edges 0-1 and 2-3 of weight 1, one 1-2 and one 0-3) as the COO
    matrix ``G`` of ``dtype`` ones with its duplicates, and its float64 sum
    ``W``: summed in uint8 they weigh 44 (int8: -16)."""
    rows, cols = [], []
    for a, b, m in [(0, 1, 300), (2, 3, 300), (1, 2, 1), (0, 3, 1)]:
        rows += [a, b] * m
        cols += [b, a] * m
    rows, cols = np.array(rows), np.array(cols)
    G = sp.coo_matrix((np.ones(len(rows), dtype), (rows, cols)), shape=(4, 4))
    W = np.zeros((4, 4))
    np.add.at(W, (rows, cols), 1.0)
    return rows, cols, G, W


def planted(n=1500, K=5, seed=0, degree=12, p_in=0.8):
    """An SBM (``benchmarks.graphs.sbm_graph``) with symmetric random weights
    in [0.5, 1.5], and its planted labels."""
    W, y = sbm_graph(n, K, avg_degree=degree, p_in_ratio=p_in, seed=seed)
    rng = np.random.default_rng(seed + 1)
    U = sp.triu(W, 1, format="coo")
    w = rng.uniform(0.5, 1.5, size=U.nnz)
    T = sp.coo_matrix((w, (U.row, U.col)), shape=W.shape)
    W = (T + T.T).tocsr()
    W.sort_indices()
    return W, y


def tokens(n=400, K=4, dim=24, seed=0):
    """Token-like features (``benchmarks.graphs.token_features``) in float64,
    and their planted groups."""
    F, y = token_features(n, K, dim=dim, rank=min(8, dim - 1), seed=seed)
    return F.astype(np.float64), y


def dense_token_graph(n=400, K=4, power=3.0, seed=0):
    """The dense cosine-power affinity of :func:`tokens`."""
    return cosine_power_affinity(tokens(n, K, seed=seed)[0], power)[0]


def noisy(y, K, frac, seed):
    """``y`` with a fraction ``frac`` of its labels redrawn (all K present)."""
    rng = np.random.default_rng(seed)
    y0 = np.array(y, copy=True)
    flip = rng.random(y.size) < frac
    y0[flip] = rng.integers(K, size=flip.sum())
    y0[:K] = np.arange(K)
    return y0.astype(np.int64)


def spy_on(monkeypatch, owner, name, record=lambda args, kwargs: args):
    """Replace ``owner.name`` for the test by a wrapper that calls it and
    appends ``record(args, kwargs)`` to the returned list, once per call."""
    calls = []
    real = getattr(owner, name)

    def spy(*args, **kwargs):
        calls.append(record(args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls
