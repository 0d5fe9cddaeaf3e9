"""Device strings, and whether torch and CUDA are present (without importing
torch where it can be avoided)."""

import importlib.util
import os
import re
import sys

from sklearn.utils._param_validation import HasMethods

from .._threads import imported_module

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def is_torch_device(obj):
    """Whether ``obj`` is a ``torch.device`` (told by its type, without
    importing torch)."""
    return type(obj).__module__ == "torch" and type(obj).__name__ == "device"


def normalize_device(device):
    """``device`` as ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``: a
    ``torch.device`` as its string, and ``"cpu:N"`` as ``"cpu"`` (torch
    takes both for its one CPU device); anything else is refused with a
    ValueError naming ``device`` and its value."""
    text = str(device) if is_torch_device(device) else device
    if isinstance(text, str) and re.fullmatch(r"cpu:\d+", text):
        text = "cpu"
    if not isinstance(text, str) or not _DEVICE_RE.match(text):
        raise ValueError(
            "device must be 'auto', 'cpu', 'cuda', 'cuda:N' or a torch.device of "
            f"them; got device={device!r}.")
    return text


class _TorchDevices(HasMethods):
    """The ``_parameter_constraints`` entry of a ``torch.device`` (one of
    scikit-learn's constraint types, so that it is accepted there)."""

    def __init__(self):
        super().__init__([])

    def is_satisfied_by(self, val):
        return is_torch_device(val)

    def __str__(self):
        return "a torch.device"


#: ``_parameter_constraints`` of a ``device`` parameter (its value is then
#: checked by :func:`normalize_device`).
DEVICE_CONSTRAINT = [str, _TorchDevices()]


def torch_available():
    """Whether torch can be imported (without importing it)."""
    return module_installed("torch")


def import_torch(what="backend='torch'", instead="backend='numba'"):
    """``import torch``, or an ImportError that says what to install."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised by simulation
        raise ImportError(missing_library(
            exc, f"{what} requires PyTorch", torch_available(),
            "`pip install 'sklearn-falcon[torch]'` (or `pip install torch`)",
            instead)) from exc
    return torch


def module_installed(name):
    """Whether the module ``name`` is installed (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken or blocked installation
        return False


def import_library(name, requires, install, instead=None):
    """``import name``, or an ImportError of :func:`missing_library` (its
    package found: installed, but failing at import)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ImportError(missing_library(
            exc, requires, module_installed(name.split(".")[0]), install,
            instead)) from exc


def missing_library(exc, requires, installed, install, instead=None):
    """The message of an ImportError ``exc`` of a library that ``requires``
    (a clause) names: not installed, or (``installed``) its import failed,
    which was reported as "not installed" without the import's error;
    ``instead``: what else to use, if anything."""
    other = f", or use {instead}." if instead else "."
    if installed:
        return (f"{requires}, which is installed but cannot be imported "
                f"({type(exc).__name__}: {exc}). Repair or reinstall it{other}")
    return f"{requires}, which is not installed. Install it with {install}{other}"


def may_have_cuda():
    """False when CUDA is certainly unavailable, without importing torch.

    If torch is already imported, ask it.  Otherwise look for the NVIDIA
    driver (Linux device nodes / proc entry) and honour an empty
    ``CUDA_VISIBLE_DEVICES``; elsewhere (e.g. Windows) answer True and let
    torch decide.  Importing torch costs seconds, and finding it 0.3 ms a
    fit: both are skipped where no GPU can exist.
    """
    torch = imported_module("torch")
    if torch is not None:  # None: not imported, blocked, or being imported
        return bool(torch.cuda.is_available())
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    if sys.platform.startswith("linux"):
        return os.path.exists("/proc/driver/nvidia/version") or os.path.exists(
            "/dev/nvidia0"
        )
    return sys.platform != "darwin"


def cuda_present():
    """Whether torch is installed and sees a CUDA device."""
    if not may_have_cuda() or not torch_available():
        return False
    return bool(import_torch().cuda.is_available())


def check_cuda(torch, device):
    """``device`` (``"cuda"`` or ``"cuda:N"``) if it exists, else ValueError."""
    if not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} was requested but CUDA is not available "
            "(torch.cuda.is_available() is False). Use device='cpu' or 'auto'."
        )
    index = int(device.split(":")[1]) if ":" in device else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(
            f"device={device!r} was requested but only {count} CUDA device(s) exist."
        )
    return device
