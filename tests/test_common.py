"""scikit-learn's estimator checks on FalconNCut."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_falcon import FalconNCut

# No check is expected to fail: this dict lists the exceptions with reasons.
EXPECTED_FAILED_CHECKS = {}


@parametrize_with_checks(
    [
        FalconNCut(),
        FalconNCut(affinity="rbf", n_clusters=3),
        FalconNCut(affinity="cosine", power=2.0, n_clusters=3),
    ],
    expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS,
)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
