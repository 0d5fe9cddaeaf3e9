"""The only place where NumPy arrays and torch tensors meet.

Every conversion between the two goes through these functions: the torch
problem (:mod:`._torch._problem`) and the torch PAMR path of
:func:`sklearn_falcon.image.pamr` call them, and the torch kernels never see
a NumPy array.  Importing this module does not import torch.
"""

import numpy as np
import scipy.sparse as sp

from ._device import check_cuda, import_torch, normalize_device

__all__ = [
    "as_host_graph",
    "copy_into",
    "host_array",
    "host_view",
    "is_tensor",
    "tensor_version",
    "to_numpy",
    "to_tensor",
    "torch_device",
    "torch_dtype",
]


def torch_device(device, *, any_type=False):
    """A validated ``torch.device`` from a device string (``"auto"``:
    CUDA when available) or a ``torch.device``; ``any_type``: any of
    torch's device types and strings ("mps", "xpu": a ViT runs there), not
    only Falcon's.  A CUDA device is checked to exist.  An integer (torch's
    CUDA ordinal) is refused, as by ``FalconNCut`` and ``ImageSegmenter``."""
    torch = import_torch()
    if device is None or device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif any_type or isinstance(device, torch.device):
        try:
            if not isinstance(device, (str, torch.device)):  # torch's ordinal 0:
                raise TypeError  # "device='cuda:0' was requested" of device=0
            device = torch.device(device)
        except (RuntimeError, TypeError):  # not torch's list of device types
            raise ValueError(
                "device must be 'auto' or a torch device ('cpu', 'cuda', "
                f"'cuda:N', ...); got device={device!r}.") from None
        if device.type == "cuda":  # the same check as a "cuda:N" string
            check_cuda(torch, str(device))
        elif device.type == "cpu":  # "cpu:0": a tensor's device is "cpu"
            device = torch.device("cpu")
    else:
        device = normalize_device(device)  # "cpu:0" too
        if device.startswith("cuda"):
            check_cuda(torch, device)
    return torch.device(device)


def torch_dtype(dtype, device):
    """Compute dtype: float32 on CUDA and float64 on the CPU by default."""
    torch = import_torch()
    if dtype is None:
        return torch.float32 if torch.device(device).type == "cuda" else torch.float64
    if isinstance(dtype, torch.dtype):
        out = dtype
    else:
        name = np.dtype(dtype).name
        out = {"float32": torch.float32, "float64": torch.float64}.get(name)
    if out not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be float32 or float64; got dtype={dtype!r}.")
    return out


def to_tensor(array, device, dtype=None):
    """A tensor on ``device`` from a NumPy array (or anything array-like);
    ``dtype`` is a torch dtype, or None to keep the array's."""
    torch = import_torch()
    array = np.asarray(array)
    if (not array.flags.writeable or not array.dtype.isnative
            or any(s < 0 for s in array.strides)):
        # torch has no read-only tensors (it would share the memory and warn
        # that writing to it is undefined behaviour), and refuses negative
        # strides (a flipped image, ``img[..., ::-1]``) and a non-native byte
        # order: a native, C-ordered copy
        array = np.array(array, dtype=array.dtype.newbyteorder("="))
    t = torch.as_tensor(array, device="cpu")  # not torch.set_default_device's
    return t.to(device=device, dtype=dtype) if dtype is not None else t.to(device)


def to_numpy(tensor):
    """A NumPy copy of a tensor (detached, on the host)."""
    return tensor.detach().cpu().numpy()


def host_view(tensor):
    """A NumPy view of a CPU tensor (zero copy; writes go to the tensor), or a
    host copy of a CUDA one (write it back with :func:`copy_into`)."""
    if tensor.device.type == "cpu":
        return tensor.numpy()
    return tensor.cpu().numpy()


def copy_into(tensor, array):
    """Write the NumPy ``array`` into ``tensor`` in place (any device)."""
    torch = import_torch()
    tensor.copy_(torch.from_numpy(np.ascontiguousarray(array)))


def is_tensor(obj):
    """Whether ``obj`` is a torch tensor, of a subclass too (torchvision's
    ``tv_tensors.Image``, a ``Parameter``): told without importing torch."""
    return any(c.__name__ == "Tensor" and c.__module__ == "torch"
               for c in type(obj).__mro__)



def tensor_version(tensor):
    """The in-place version counter of ``tensor`` (it grows with each
    in-place change), or None for an inference tensor (one made under
    ``torch.inference_mode()``), which keeps none."""
    try:
        return tensor._version
    except RuntimeError:  # "Inference tensors do not track version counter"
        return None


def host_array(X):
    """``X`` itself, or a torch tensor (on any device, with or without
    autograd) brought to the host: a NumPy array of its dtype (bfloat16 and
    the float8 types, which NumPy lacks, as float32), or a SciPy CSR matrix
    for a sparse one (COO, CSR, CSC, or the block layouts BSR and BSC; a
    hybrid one, with dense dimensions, as a NumPy array; float16, which
    SciPy's matrices lack, and integers, whose duplicates torch would sum
    with wrap-around, as float64), so that the input
    checks see what the user passed.  A CPU tensor's array shares its
    memory, as ``tensor.numpy()`` does."""
    if not is_tensor(X):
        return X
    torch = import_torch()
    if X.device.type == "meta":  # torch: "Cannot copy out of meta tensor"
        raise ValueError(
            f"Expected a tensor with data; got one of shape {tuple(X.shape)} on "
            "the 'meta' device, which holds no data.")
    X = X.detach()
    if X.dtype.is_floating_point and X.dtype not in (
            torch.float16, torch.float32, torch.float64):
        X = X.float()  # bfloat16 and the float8 types: NumPy has none
    elif X.dtype == torch.complex32:
        X = X.to(torch.complex64)  # (refused as complex, by name)
    if X.layout == torch.strided:
        return X.resolve_conj().resolve_neg().cpu().numpy()
    if X.dim() != 2:
        raise ValueError(
            f"Expected a 2-D sparse tensor; got one of shape {tuple(X.shape)}.")
    if X.dense_dim():  # a hybrid layout (rows or blocks stored dense): dense
        return X.to_dense().resolve_conj().resolve_neg().cpu().numpy()
    if X.dtype == torch.float16 or not (X.dtype.is_floating_point
                                        or X.dtype.is_complex or X.dtype == torch.bool):
        X = X.double()  # float16 as NumPy's is read; integers summed without wrapping
    if X.layout in (torch.sparse_bsr, torch.sparse_bsc):
        X = X.to_sparse_coo()  # (torch converts no block layout to CSR)
    if X.layout != torch.sparse_csr:
        X = X.to_sparse_csr() if X.layout != torch.sparse_coo else X.coalesce()
    X = X.cpu()
    if X.layout == torch.sparse_coo:
        rows, cols = X.indices().numpy()
        return sp.csr_matrix((X.values().numpy(), (rows, cols)), shape=tuple(X.shape))
    return sp.csr_matrix(
        (X.values().numpy(), X.col_indices().numpy(), X.crow_indices().numpy()),
        shape=tuple(X.shape),
    )


def as_host_graph(W):
    """A graph as a scipy CSR matrix or a C-contiguous ndarray: torch input
    (dense or sparse) is brought to the host with its dtype."""
    W = host_array(W)
    if sp.issparse(W):
        return W.tocsr()
    return np.ascontiguousarray(W)
