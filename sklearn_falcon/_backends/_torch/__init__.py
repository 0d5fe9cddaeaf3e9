"""The torch backend (CPU and CUDA): batched kernels and the batch problem.

Importing this package does not import torch: :func:`make_problem` and
:func:`make_problem_from_features` import the torch modules
(:mod:`._kernels`, :mod:`._affinity`, :mod:`._problem`) when called, and
raise an ImportError that says what to install when torch is missing.
"""

from .._device import check_cuda, import_torch

__all__ = ["TorchProblem", "make_problem", "make_problem_from_features",
           "resolve_device"]


def resolve_device(device):
    """The torch device string for ``device`` (``"auto"``: CUDA when
    available)."""
    if device.startswith("cuda"):  # backend='numba' runs on the CPU only
        torch = import_torch(f"device={device!r}", "device='cpu' (the Numba backend)")
    else:
        torch = import_torch()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return "cpu"
    return check_cuda(torch, device)


def make_problem(W, n_clusters, *, device="cpu", degrees=None, dtype=None):
    """:meth:`TorchProblem.from_affinity` of one graph or a list of them."""
    import_torch()
    from ._problem import TorchProblem

    return TorchProblem.from_affinity(W, n_clusters, device=device, dtype=dtype,
                                      degrees=degrees)


def make_problem_from_features(X, n_clusters, *, affinity="cosine", power=1.0,
                               gamma=1.0, device="cpu", dtype=None,
                               block_elems=None):
    """:meth:`TorchProblem.from_features`: a matrix-free problem."""
    import_torch()
    from ._problem import TorchProblem

    return TorchProblem.from_features(
        X, n_clusters, affinity=affinity, power=power, gamma=gamma, device=device,
        dtype=dtype, block_elems=block_elems)


def __getattr__(name):
    if name == "TorchProblem":
        import_torch()
        from ._problem import TorchProblem

        return TorchProblem
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
