"""What the proximal loop needs from a problem: the solver's interface to
the backends, written down.

A *problem* holds ``B`` graphs (``B = 1`` for the Numba backend) on its
device and implements the operations below on its own array type; the loop
never touches an array library.  Per-graph scalars cross as NumPy arrays of
shape ``(B,)``; labels come back as NumPy ``int64``.  The backends satisfy
the protocol structurally (they do not import it);
``tests/test_solver.py`` checks it with ``isinstance``.
"""

from typing import Protocol, runtime_checkable

__all__ = ["Problem"]


@runtime_checkable
class Problem(Protocol):
    """A batch of graphs to solve, on one device.

    Attributes
    ----------
    n_graphs : int
        ``B``.
    n_clusters : int
        ``K``.
    host_degrees : list of ndarray
        The degrees of each graph, on the host (they fix the unit of
        ``tau``).
    supports_polish : bool
        Whether :meth:`polish` (exact single-node moves) is available.
    """

    n_graphs: int
    n_clusters: int
    host_degrees: list
    supports_polish: bool

    def compiled_graph(self):
        """The graph in the form of the compiled loop
        (:func:`sklearn_falcon._solver._compiled.run`), or None when this
        problem is solved by the Python loop."""

    def from_labels(self, labels):
        """Device labels ``X`` from NumPy labels of shape ``(n,)`` or
        ``(B, n)``."""

    def to_numpy(self, X):
        """NumPy ``int64`` labels of shape ``(B, n)``."""

    def weights(self, X):
        """``WX = W @ onehot(X)``, one pass over ``W``."""

    def stats(self, WX, X):
        """``(vol, assoc)`` of ``X``."""

    def candidate_stats(self, WX, vol, assoc, X, new):
        """``(vol, assoc)`` of ``new`` from the state of ``X``, without
        keeping the ``WX`` of ``new``."""

    def commit(self, WX, X, new):
        """``WX`` of ``new`` (may update ``WX`` in place)."""

    def objective(self, vol, assoc):
        """``f`` per graph, a NumPy ``(B,)`` array."""

    def step(self, WX, vol, assoc, X, tau):
        """The proximal step with inertia ``tau`` (NumPy ``(B,)``, in absolute
        score units; ``inf`` moves nothing); returns ``(new, n_moved)`` with
        ``n_moved`` a NumPy ``(B,)`` array."""

    def select(self, mask, a, b):
        """Per graph, ``a`` where ``mask`` (NumPy bool ``(B,)``) else ``b``."""

    def polish(self, X, WX, vol, assoc):
        """One exact local-move sweep per graph, in place; returns the number
        of moves per graph (NumPy ``(B,)``)."""
