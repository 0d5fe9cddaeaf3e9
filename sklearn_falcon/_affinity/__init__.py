"""Affinities: features or precomputed input -> a validated symmetric ``W``.

:mod:`._kinds` holds one class per affinity and the registry
:data:`AFFINITIES`; :mod:`._check` validates affinity matrices.
"""

from ._check import (
    active_subgraph,
    canonical_sparse,
    check_active_count,
    check_affinity,
    check_cross_affinity,
    check_dtype_kind,
    check_nonnegative,
    check_sparse_structure,
    clean_csr,
    count_components,
    float_sparse,
    restrict_to_active,
    unit_exponent,
    unit_scaled,
    warn_if_disconnected,
    warn_if_flat_cosine,
    warn_of_components,
)
from ._flat import flat_weight, warn_if_flat_graph, warn_of_flat_weight
from ._kinds import (
    AFFINITIES,
    Affinity,
    cosine_power,
    cosine_power_affinity,
    cosine_range,
    cosine_similarity,
    make_affinity,
    start_graph,
    warn_if_flat_rbf,
    zero_norm,
)

PRECOMPUTED = tuple(name for name, cls in AFFINITIES.items() if cls.precomputed)

__all__ = [
    "AFFINITIES",
    "PRECOMPUTED",
    "Affinity",
    "active_subgraph",
    "canonical_sparse",
    "check_active_count",
    "check_affinity",
    "check_cross_affinity",
    "check_dtype_kind",
    "float_sparse",
    "check_nonnegative",
    "check_sparse_structure",
    "clean_csr",
    "cosine_power",
    "cosine_power_affinity",
    "cosine_range",
    "cosine_similarity",
    "count_components",
    "flat_weight",
    "make_affinity",
    "restrict_to_active",
    "start_graph",
    "unit_exponent",
    "unit_scaled",
    "warn_if_disconnected",
    "warn_if_flat_cosine",
    "warn_if_flat_graph",
    "warn_if_flat_rbf",
    "warn_of_components",
    "warn_of_flat_weight",
    "zero_norm",
]
