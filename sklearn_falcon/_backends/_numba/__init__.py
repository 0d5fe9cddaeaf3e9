"""The Numba backend: kernels on NumPy arrays and the one-graph problem.

The kernel names here are those of :mod:`sklearn_falcon._backends._torch`
(same semantics, without the batch dimension); ``apply_moves_dense``,
``candidate_stats_*``, the row-by-row CSR iteration (:mod:`._csr`) and the
``local_move_sweep_*`` polish, the FM searches (:mod:`._fm`) and the flow
networks (:mod:`._flow`) exist only here.
"""

from ._csr import (
    candidate_stats_rows,
    cluster_stats_csr,
    label_dtype,
    own_cluster_weights_csr,
    row_choices,
    threshold_step,
)
from ._flow import flow_corridor, flow_network, min_cut_sides, move_nodes_csr
from ._fm import boundary_nodes_csr, fm_round_csr
from ._kernels import (
    apply_moves_dense,
    candidate_stats_dense,
    cluster_pair_weights_csr,
    cluster_stats,
    cluster_weights_csr,
    cluster_weights_dense,
    objective,
    proximal_step,
    score_matrix,
)
from ._polish import local_move_sweep_csr, local_move_sweep_dense, local_move_sweep_rows
from ._problem import COMPILED_LOOP_MAX_ENTRIES, NumbaProblem

__all__ = [
    "COMPILED_LOOP_MAX_ENTRIES",
    "NumbaProblem",
    "apply_moves_dense",
    "boundary_nodes_csr",
    "candidate_stats_dense",
    "candidate_stats_rows",
    "cluster_pair_weights_csr",
    "cluster_stats",
    "cluster_stats_csr",
    "cluster_weights_csr",
    "cluster_weights_dense",
    "flow_corridor",
    "flow_network",
    "min_cut_sides",
    "fm_round_csr",
    "label_dtype",
    "local_move_sweep_csr",
    "local_move_sweep_dense",
    "local_move_sweep_rows",
    "move_nodes_csr",
    "objective",
    "own_cluster_weights_csr",
    "proximal_step",
    "row_choices",
    "score_matrix",
    "threshold_step",
]
