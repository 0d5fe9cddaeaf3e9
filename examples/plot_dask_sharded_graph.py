"""
==============================================
Clustering a sharded graph on a Dask cluster
==============================================

A graph too large for one machine is stored as **shards**: consecutive row
blocks of its affinity matrix, each a ``scipy.sparse`` CSR file.
:class:`~sklearn_falcon.FalconNCut` clusters it on a Dask cluster from a
``dask.array`` of those blocks, without ever gathering the graph on the
client.  Here the cluster is a small local one (threads in this process),
the graph a planted partition of 20,000 nodes written as 4 shards; the same
code runs on a real cluster with ``Client("scheduler-address:8786")``.  See
:ref:`the Dask guide <dask>` for what runs where.
"""

# %%
# Write the graph as shards
# -------------------------
# An edge list, in chunks (each undirected edge once), is routed to the
# shards of both endpoints; every shard becomes one CSR row block saved as
# ``.npz``.  (The guide has the same recipe as Dask tasks, and one for a
# kNN search done shard by shard.)  The nodes of a community are numbered
# together, so that a shard holds neighbours: the coarsening on the cluster
# matches the nodes of each shard among themselves and needs that (numbered
# at random, this graph was coarsened into a start whose fit ended at NCut
# 2.24, where a random start reaches 1.25).
import tempfile
import time

import dask
import dask.array as da
import matplotlib.pyplot as plt
import numpy as np
import scipy.sparse as sp
from dask.distributed import Client, LocalCluster

from sklearn_falcon import FalconNCut

rng = np.random.default_rng(0)
n, K, n_shards = 20_000, 6, 4
truth = np.sort(rng.permutation(n) % K)  # planted communities, in node ranges
members = np.argsort(truth, kind="stable")
first = np.searchsorted(truth[members], np.arange(K))
i = rng.integers(n, size=120_000)
inside = members[first[truth[i]] + rng.integers(n // K, size=i.size)]
j = np.where(rng.random(i.size) < 0.75, inside, rng.integers(n, size=i.size))
i, j = i[i != j], j[i != j]

bounds = np.linspace(0, n, n_shards + 1).astype(int)
folder = tempfile.mkdtemp()
rows, cols = np.r_[i, j], np.r_[j, i]  # both directions: W is symmetric
shard_of = np.searchsorted(bounds, rows, side="right") - 1
for s in range(n_shards):
    m = shard_of == s
    block = sp.csr_matrix((np.ones(m.sum()), (rows[m] - bounds[s], cols[m])),
                          shape=(bounds[s + 1] - bounds[s], n))
    sp.save_npz(f"{folder}/shard-{s}.npz", block)  # duplicates summed
print(f"{n} nodes, {rows.size} stored entries in {n_shards} shards")

# %%
# Read them lazily
# ----------------
# Each block is loaded by the worker that needs it; the client only knows
# the shapes.
W = da.concatenate([
    da.from_delayed(dask.delayed(sp.load_npz)(f"{folder}/shard-{s}.npz"),
                    shape=(int(b - a), n), dtype=np.float64,
                    meta=sp.csr_matrix((0, 0)))
    for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))])
W

# %%
# Fit on the cluster
# ------------------
# ``backend="auto"`` picks the Dask backend for a Dask array.  Every step is
# a map over the shards and a reduction of a few numbers per cluster.  The
# start is made at scale: the graph is coarsened on the cluster until it
# fits one worker, started there, then refined level by level.  A graph this
# small would fit at once (up to 8 million entries by default), so the
# limit is lowered to show the levels.
cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                       dashboard_address=":0")
client = Client(cluster)
t = time.perf_counter()
with dask.config.set({"sklearn_falcon.dask.coarse_max_entries": 50_000}):
    est = FalconNCut(n_clusters=K, affinity="precomputed", random_state=0).fit(W)
print(f"backend={est.backend_}: NCut={est.ncut_:.4f} after {est.n_iter_} "
      f"iterations ({time.perf_counter() - t:.1f} s)")

# %%
# The same graph on one machine
# -----------------------------
# Only to compare: the graph is small enough to gather here.  From the same
# start, the Dask solve takes the Numba backend's steps; only the last
# polishing sweeps may differ (blockwise on Dask, node by node on one
# machine).
W_local = W.compute()
y0 = rng.integers(K, size=n)
one = FalconNCut(n_clusters=K, affinity="precomputed", init=y0,
                 backend="numba").fit(W_local)
many = FalconNCut(n_clusters=K, affinity="precomputed", init=y0).fit(W)
print(f"same start: NCut {one.ncut_:.4f} on one machine, {many.ncut_:.4f} on "
      f"Dask; {np.count_nonzero(one.labels_ != many.labels_)} labels differ")
client.close()
cluster.close()

# %%
# The objective along the way
# ---------------------------
# ``f = K - NCut`` never decreases: the proximal steps first, then the
# polishing sweeps.
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(K - one.objective_path_, "o-", label="Numba, one machine")
ax.plot(K - many.objective_path_, "s--", label="Dask, 4 shards")
ax.set_xlabel("accepted step (proximal, then polish)")
ax.set_ylabel("NCut")
ax.set_title("Same start, same steps")
ax.legend()
fig.tight_layout()
plt.show()
