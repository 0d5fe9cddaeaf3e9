"""The settings of one Falcon solve, as one object."""

from dataclasses import dataclass, fields, replace
from numbers import Integral, Real

from sklearn.utils._param_validation import Interval

__all__ = ["SOLVER_CONSTRAINTS", "SolverOptions"]

# The public solver parameters, declared once: FalconNCut's constraints and
# falcon_batch's validation are built from this dict.
SOLVER_CONSTRAINTS = {
    "max_iter": [Interval(Integral, 0, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left")],
    "tau": [Interval(Real, 0, None, closed="neither")],
    "gamma_backtrack": [Interval(Real, 1, None, closed="neither")],
    "delta": [Interval(Real, 0, None, closed="left")],
    "polish": ["boolean"],
}


@dataclass(frozen=True)
class SolverOptions:
    """Parameters of :func:`sklearn_falcon._solver.solve`.

    Attributes
    ----------
    max_iter : int
        Maximum number of accepted proximal iterations.
    tol : float
        Stop a graph when its relative gain ``(f+ - f) / |f|`` falls below it.
    tau : float or ndarray of shape (B,)
        Initial proximal parameter, in units of the typical score magnitude
        (:func:`~sklearn_falcon._solver._rules.score_scale`), so that the
        same value fits graphs of any size; one value per graph of a batch.
    gamma_backtrack : float > 1
        Factor applied to ``tau`` when a step is rejected.
    delta : float >= 0
        Sufficient-increase constant of the acceptance test.
    polish : bool
        Finish with sequential exact single-move sweeps (when the problem
        supports them); they never decrease ``f``.
    max_polish : int
        Maximum number of polishing sweeps.
    max_backtrack : int
        Safety bound on rejected steps per iteration.
    shrink_tau : bool
        After an accepted step, divide ``tau`` by ``gamma_backtrack`` (floored
        at its initial value).  Off: on the benchmark graphs it reached the
        same NCut with up to 25x more rejected steps.
    verbose : int
        When > 0, log one line per iteration and polishing sweep to the
        ``sklearn_falcon`` logger (stages ``solve`` and ``polish``; runs the
        Python loop).
    compiled : bool
        Let a problem that offers the compiled loop run it (the same steps,
        tested equal); the Python loop runs when False or verbose.
    """

    max_iter: int = 100
    tol: float = 1e-6
    tau: object = 0.01
    gamma_backtrack: float = 2.0
    delta: float = 1e-4
    polish: bool = True
    max_polish: int = 20
    max_backtrack: int = 64
    shrink_tau: bool = False
    verbose: int = 0
    compiled: bool = True

    @classmethod
    def from_params(cls, params):
        """Options from a dict of parameters (e.g. an estimator's
        ``get_params()``); keys that are not options are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names})

    def replace(self, **changes):
        """A copy with some options changed."""
        return replace(self, **changes)

    def quieter(self):
        """The options of a nested solve (coarse levels of an init): one
        verbosity level less."""
        return replace(self, verbose=max(0, int(self.verbose) - 1))
