"""scikit-learn's estimator checks on FalconNCut, over its configurations.

Every backend (Numba; torch on the CPU when it is installed), every affinity
(each kind of ``AFFINITIES``, and a callable) and every initialization of
``INITS`` runs through :func:`~sklearn.utils.estimator_checks.check_estimator`
at least once, without running the full product: 15 configurations, about
a minute on two cores.
"""

from sklearn.metrics.pairwise import rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_falcon import FalconNCut
from sklearn_falcon._affinity import AFFINITIES
from sklearn_falcon._backends._device import torch_available
from sklearn_falcon._inits import INITS

# The checks expected to fail, with the reason, per configuration.
# check_clustering fits raw (n_samples, 2) features without applying the
# pairwise tag (it would fail scikit-learn's own
# SpectralClustering(affinity="precomputed") the same way): a precomputed
# affinity or distance matrix must be square and nonnegative.
_PAIRWISE_FEATURES = (
    "check_clustering passes raw features, not a square affinity or distance "
    "matrix, to a pairwise estimator"
)
PRECOMPUTED_FAILED_CHECKS = {
    "check_clustering": _PAIRWISE_FEATURES,
    "check_clustering(readonly_memmap=True)": _PAIRWISE_FEATURES,
}


def expected_failed_checks(estimator):
    if isinstance(estimator.affinity, str) and estimator.affinity.startswith(
            "precomputed"):
        return PRECOMPUTED_FAILED_CHECKS
    return {}

NUMBA = [
    FalconNCut(),
    FalconNCut(affinity="rbf", backend="numba", n_clusters=3),
    FalconNCut(affinity="cosine", power=2.0, n_clusters=3),
    FalconNCut(affinity="precomputed", n_clusters=3),
    FalconNCut(affinity="precomputed_nearest_neighbors", n_clusters=3),
    FalconNCut(affinity=rbf_kernel, n_clusters=3),  # a callable
    FalconNCut(init="kmeans", n_clusters=3),
    FalconNCut(init="spectral", n_clusters=3),
    FalconNCut(init="random", n_init=2, n_clusters=3),
    FalconNCut(init="multilevel_fast", n_clusters=3),
]
TORCH = [
    FalconNCut(backend="torch", device="cpu", n_clusters=3),
    # matrix-free: W formed in row blocks, the graph init on the kNN graph
    FalconNCut(affinity="rbf", backend="torch", device="cpu", n_clusters=3),
    FalconNCut(affinity="cosine", power=2.0, init="kmeans", backend="torch",
               device="cpu", n_clusters=3),
    FalconNCut(affinity="precomputed", backend="torch", device="cpu", n_clusters=3),
    FalconNCut(init="spectral", backend="torch", device="cpu", n_clusters=3),
]
ESTIMATORS = NUMBA + (TORCH if torch_available() else [])


def test_configurations_cover_every_affinity_init_and_backend():
    def names(attr):
        return {p if isinstance(p, str) else "callable"
                for p in (getattr(est, attr) for est in ESTIMATORS)}

    assert names("affinity") == set(AFFINITIES) | {"callable"}
    assert names("init") == set(INITS)
    backends = {"numba", "auto"} | ({"torch"} if torch_available() else set())
    assert names("backend") == backends


@parametrize_with_checks(
    ESTIMATORS,
    expected_failed_checks=expected_failed_checks,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
