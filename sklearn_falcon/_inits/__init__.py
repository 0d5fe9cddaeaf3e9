"""Initialization strategies: the registry and their common signature.

Falcon is a local method: the labels it starts from decide the NCut it
reaches.  Every strategy is an :class:`Init` of :data:`INITS`: a function
``make(context) -> list of label arrays`` for one restart, where the
:class:`InitContext` holds what the strategy may use (the graph, the
features, the seed, the solver options of coarse refinements, and a cache
shared by the restarts).  Every returned array labels the context's samples
with all ``n_clusters`` clusters non-empty.  ``FalconNCut``, ``falcon_batch``
and ``ImageSegmenter`` offer exactly the names of :data:`INITS`.

To add a strategy: a module here with its function, and its entry in
:data:`INITS` (and tests).
"""

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.sparse as sp

from .._log import warn_user
from .._solver import SolverOptions
from ._hierarchy import Hierarchy
from ._multilevel import DENSE_FAST, SPARSE_FAST, multilevel_labels
from ._simple import fill_empty, kmeans_labels, random_labels, warm_labels
from ._spectral import spectral_embedding_labels

__all__ = ["INITS", "Init", "InitContext", "check_init_labels", "fill_empty",
           "make_starts", "random_labels", "warm_labels", "warn_one_start"]


@dataclass
class InitContext:
    """What an initialization may use.

    Attributes
    ----------
    n_clusters : int
    rng : numpy.random.Generator
        The seed, passed down from the estimator's ``random_state``.
    options : SolverOptions
        Options of the refinements an init runs itself (coarse levels).
    W : CSR matrix or ndarray, default=None
        The graph of the samples to label (no isolated nodes), when the init
        needs one.
    degrees : ndarray, default=None
        ``W 1``.
    X : ndarray, default=None
        The features of the same samples, when the input has features.
    cache : dict
        State shared by the restarts of one fit (e.g. the hierarchy).
    """

    n_clusters: int
    rng: np.random.Generator
    options: SolverOptions = field(default_factory=SolverOptions)
    W: object = None
    degrees: object = None
    X: object = None
    cache: dict = field(default_factory=dict)

    @property
    def n_samples(self):
        for a in (self.degrees, self.X):
            if a is not None:
                return a.shape[0]
        return self.W.shape[0]


@dataclass(frozen=True)
class Init:
    """One initialization strategy.

    Attributes
    ----------
    name : str
    make : callable
        ``(InitContext) -> list of ndarray``: the candidate labellings of one
        restart (the caller solves from each and keeps the best ``f``).
    needs_graph : bool
        Uses ``context.W`` (built from the features when the fit itself is
        matrix-free).
    needs_features : bool
        Uses ``context.X`` (so it cannot start a precomputed affinity).
    """

    name: str
    make: Callable
    needs_graph: bool = False
    needs_features: bool = False


def _start_multilevel(ctx, effort=None):
    # each restart draws its own matchings and coarse starts from the seed
    labels, _ = multilevel_labels(ctx.W, ctx.degrees, ctx.n_clusters, ctx.rng,
                                  options=ctx.options.quieter(), effort=effort,
                                  verbose=ctx.options.verbose)
    return [labels]


def _start_multilevel_fast(ctx):
    return _start_multilevel(ctx, SPARSE_FAST if sp.issparse(ctx.W) else DENSE_FAST)


def _start_spectral(ctx):
    return [spectral_embedding_labels(ctx.W, ctx.degrees, ctx.n_clusters, ctx.rng)]


def _start_kmeans(ctx):
    return [kmeans_labels(ctx.X, ctx.n_clusters, ctx.rng)]


def _start_random(ctx):
    return [random_labels(ctx.n_samples, ctx.n_clusters, ctx.rng)]


INITS = {
    spec.name: spec
    for spec in (
        Init("multilevel", _start_multilevel, needs_graph=True),
        Init("multilevel_fast", _start_multilevel_fast, needs_graph=True),
        Init("kmeans", _start_kmeans, needs_features=True),
        Init("spectral", _start_spectral, needs_graph=True),
        Init("random", _start_random),
    )
}


def check_init_labels(init, n_samples, n_clusters, name="init", n_init=1):
    """``init`` given as labels, as int64; a ValueError names ``name`` and
    what is wrong (the shape, or values outside ``[0, n_clusters)``).  The
    estimator's ``init`` may also be a strategy's name; ``falcon_batch``
    checks each of its arrays as ``init[b]``.  With ``n_init > 1`` (the
    estimator's), :func:`warn_one_start` warns."""
    y0 = np.asarray(init)
    if y0.shape != (n_samples,):
        what = ("one of " + ", ".join(repr(s) for s in INITS) + " or an array"
                if name == "init" else "an array")
        raise ValueError(
            f"{name} must be {what} of shape (n_samples,)=({n_samples},); got an "
            f"array of shape {y0.shape}."
        )
    if not np.issubdtype(y0.dtype, np.integer) or (
        y0.size and (y0.min() < 0 or y0.max() >= n_clusters)
    ):
        # the range of numbers only: strings or objects have none to show
        got = (f"values in [{y0.min()}, {y0.max()}] of " if y0.size
               and y0.dtype.kind in "biuf" else "")
        raise ValueError(
            f"{name} labels must be integers in [0, n_clusters={n_clusters}); "
            f"got {got}dtype {y0.dtype}."
        )
    warn_one_start(n_init)
    return y0.astype(np.int64)


def warn_one_start(n_init):
    """A ``RuntimeWarning`` when ``n_init > 1``: labels given as ``init`` are
    one start (solved the same each time), as scikit-learn's ``KMeans``
    warns of explicit centres."""
    if n_init > 1:
        warn_user(f"init is an array of labels: one start is solved, not "
                  f"n_init={n_init}; set n_init=1.", RuntimeWarning)


def make_starts(init, context, n_init=1):
    """The starting labellings of ``n_init`` restarts of the strategy
    ``init`` (a name of :data:`INITS`), in order.  Pass each through
    :func:`fill_empty` before solving from it (a safety net: the strategies
    leave no cluster empty)."""
    spec = INITS[init]
    starts = []
    for _ in range(n_init):
        starts.extend(spec.make(context))
    return starts


__all__ += ["Hierarchy", "multilevel_labels"]
