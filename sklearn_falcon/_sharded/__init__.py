"""Clustering a graph held by Dask in row blocks (shards).

:func:`fit_sharded` is :meth:`FalconNCut.fit <sklearn_falcon.FalconNCut.fit>`
for a ``dask.array.Array``: it validates the graph blockwise, starts it at
scale (:mod:`._multilevel`: blockwise coarsening, the single-machine start
on one worker, projection and refinement on the cluster) and solves it with
the Dask backend's problem (:mod:`sklearn_falcon._backends._dask`).  Dask is
imported only when such a fit runs.
"""

from ._fit import fit_sharded, is_dask_array

__all__ = ["fit_sharded", "is_dask_array"]
