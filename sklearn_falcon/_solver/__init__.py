"""The Falcon solver: the proximal loop, its options and its interface.

* :mod:`._loop`: :func:`solve`, the Python loop over any problem (batched);
* :mod:`._compiled`: the same loop compiled with Numba for one graph;
* :mod:`._rules`: the acceptance, stopping and ``tau`` rules both loops use;
* :mod:`._options`: :class:`SolverOptions`, the settings as one object;
* :mod:`._protocol`: :class:`Problem`, what the loop needs from a backend;
* :mod:`._predict`: the score of new samples (``FalconNCut.predict``).
"""

from ._loop import SolveResult, solve
from ._options import SOLVER_CONSTRAINTS, SolverOptions
from ._predict import out_of_sample_labels
from ._protocol import Problem
from ._rules import score_scale

__all__ = ["SOLVER_CONSTRAINTS", "Problem", "SolveResult", "SolverOptions",
           "out_of_sample_labels", "score_scale", "solve"]
