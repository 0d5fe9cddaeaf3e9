"""Loading a local checkpoint into the model of a :class:`TimmFeatures`;
its path, and its ``layer`` against the model's depth, checked before the
model is built.

torch (and safetensors for a ``.safetensors`` file) are imported by the
caller or lazily, never at import time.
"""

import functools
import numbers
import sys
from pathlib import Path

__all__ = ["check_checkpoint_path", "check_layer", "load_checkpoint",
           "path_hint", "registry_depth"]

#: parameters of a classifier that the token features never use
_IGNORED = ("head.", "fc_norm.", "head_drop.")
#: wrappers' prefixes of state dict keys, stripped
_PREFIXES = ("module.", "_orig_mod.", "backbone.", "model.")
#: suffixes of weight files, named when a directory is given
_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".ckpt", ".tar")


def path_hint(model):
    """The end of the refusal of ``model``, an unknown timm name, where it
    names a local file or folder: a checkpoint is ``checkpoint_path``'s, a
    folder in timm's format ``"local-dir:"``'s ("" otherwise)."""
    try:  # (a name longer than a file's: "File name too long", an OSError)
        is_file, is_dir = Path(model).is_file(), Path(model).is_dir()
    except OSError:
        return ""
    if is_file:
        return (" It is a file: pass the timm name of its architecture as model "
                "and the file as checkpoint_path (e.g. model='vit_small_patch14_"
                f"dinov2', checkpoint_path={str(model)!r}).")
    if is_dir:  # (no apostrophe: the command line renames outside quotes)
        return (" It is a folder: a model saved by timm (config.json and the "
                f"weights) is read from it by model='local-dir:{model}'.")
    return ""


def check_layer(layer, n_blocks):
    """Refuse a ``layer`` that is no block of ``n_blocks`` (None: of an
    unknown depth, any integer); ``True`` is not block 1."""
    if not isinstance(layer, numbers.Integral) or isinstance(layer, bool) or (
            n_blocks is not None and not -n_blocks <= layer < n_blocks):
        raise ValueError("layer must be an integer" + (
            "" if n_blocks is None else f" in [{-n_blocks}, {n_blocks - 1}]")
            + f"; got {layer!r}.")


@functools.lru_cache(maxsize=64)
def registry_depth(name):
    """The number of blocks of timm's model ``name``, from a build on
    torch's meta device (no weights, no memory: a tenth of a second where
    the model's takes seconds, and its pretrained weights a download), or
    None where it cannot be built there."""
    import timm
    import torch

    try:
        with torch.device("meta"):
            return len(timm.create_model(name, pretrained=False).blocks)
    except Exception:  # any failure: the depth is checked after the build
        return None


def _is_safetensors(path):
    """Whether the file starts as a safetensors file does (an 8-byte
    little-endian header length, then a JSON object), whatever its name."""
    try:
        with open(path, "rb") as f:
            head = f.read(9)
    except OSError:
        return False
    return (len(head) == 9 and head[8:] == b"{"
            and 0 < int.from_bytes(head[:8], "little") < path.stat().st_size)


def check_checkpoint_path(path):
    """``path`` as a ``Path``: a file that exists (checked before the model
    is built, and again when it is loaded)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint_path not found: '{path}'.")
    if path.is_dir():  # a Hugging Face snapshot folder, say
        found = sorted(p.name for p in path.iterdir() if p.suffix in _SUFFIXES)
        raise IsADirectoryError(
            f"checkpoint_path '{path}' is a directory; give the weights file "
            f"itself{' (it holds ' + ', '.join(found[:3]) + ')' if found else ''}.")
    return path


def _load_state_dict(path, torch):
    path = check_checkpoint_path(path)
    if path.suffix == ".safetensors" or _is_safetensors(path):
        try:
            from safetensors.torch import load_file
        except ImportError as exc:
            raise ImportError(
                "Loading a .safetensors checkpoint requires the 'safetensors' package: "
                "pip install 'sklearn-falcon[image]'."
            ) from exc
        try:
            state = load_file(str(path), device="cpu")
        except Exception as exc:  # noqa: BLE001 - SafetensorError and the like
            raise ValueError(f"Cannot read checkpoint '{path}': {exc}") from None
    else:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - not torch's weights_only=False advice
            raise ValueError(
                f"Cannot read checkpoint '{path}': not a .safetensors file nor "
                "tensors that torch.load(weights_only=True) reads "
                f"({type(exc).__name__}). A trusted training checkpoint holding "
                "other objects can be saved as its state dict alone: torch.save("
                "torch.load(path, weights_only=False)['model'], 'weights.pth')."
            ) from None
    for key in ("state_dict_ema", "state_dict", "model", "module", "teacher"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not state:
        raise ValueError(f"Checkpoint '{path}' does not contain a state dict.")
    out = {}
    for k, v in state.items():
        # DDP's module., torch.compile's _orig_mod. (in either order), ...
        while k.startswith(_PREFIXES):
            k = k[len(next(p for p in _PREFIXES if k.startswith(p))):]
        out[k] = v
    return out


def _mismatch(net, state, path):
    """Load ``state`` into ``net``; the error message of a mismatch, or None."""
    try:
        res = net.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        detail = " ".join(str(exc).split())
        return f"Checkpoint '{path}' does not match the model: {detail[:300]}"
    missing = [k for k in res.missing_keys if not k.startswith(_IGNORED)]
    unexpected = [k for k in res.unexpected_keys if not k.startswith(_IGNORED)]
    if missing or unexpected:
        return (f"Checkpoint '{path}' does not match the model: "
                f"{len(missing)} missing keys (e.g. {missing[:3]}), "
                f"{len(unexpected)} unexpected keys (e.g. {unexpected[:3]}).")
    return None


def _timm_converted(net, state):
    """``state`` converted by the ``checkpoint_filter_fn`` of the timm module
    that defines ``net``'s class (what timm applies to the pretrained
    weights it loads: the official DINOv2 layout with its ``mask_token`` and
    ``register_tokens``, OpenAI CLIP, a position embedding of another
    grid, ...), or None."""
    name = type(net).__module__
    fn = getattr(sys.modules.get(name), "checkpoint_filter_fn", None)
    if not name.startswith("timm.") or not callable(fn):
        return None
    # weights of another patch size are another model: not resampled
    own = getattr(getattr(getattr(net, "patch_embed", None), "proj", None),
                  "weight", None)
    theirs = state.get("patch_embed.proj.weight")
    if own is not None and theirs is not None and own.shape != theirs.shape:
        return None
    try:
        return fn(dict(state), net)
    except Exception:  # noqa: BLE001 - a layout it does not know: the first error
        return None


def load_checkpoint(net, path, torch):
    """Load the checkpoint at ``path`` into ``net`` (in place).

    A state dict that does not match the model as it is is converted by
    timm's own filter of the model's family and loaded again; the
    classification head is ignored.

    Parameters
    ----------
    net : torch.nn.Module
        The model (a private copy: a failed load may leave it half loaded).
    path : str or path-like
        A ``torch.save`` state dict, ``.safetensors`` file or training
        checkpoint.
    torch : module
        The torch module.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    IsADirectoryError
        When ``path`` is a directory.
    ValueError
        When the file cannot be read, or does not match the model.
    """
    state = _load_state_dict(path, torch)
    problem = _mismatch(net, state, path)
    if problem is None:
        return
    converted = _timm_converted(net, state)
    if converted is None or _mismatch(net, converted, path) is not None:
        raise ValueError(problem)
