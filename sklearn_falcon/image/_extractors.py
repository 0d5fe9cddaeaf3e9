"""Build a feature extractor from ImageSegmenter's parameters."""

import os

from .._backends._boundary import tensor_version, torch_device
from .._backends._device import is_torch_device, normalize_device, torch_available
from ._features import ColorPositionFeatures, TimmFeatures
from ._texture import ColorTextureFeatures

__all__ = ["OFFLINE_MODELS", "checkpoint_key", "make_extractor", "model_key",
           "segmenter_extractor"]

#: ``model`` names of the offline (weight-free) extractors.
OFFLINE_MODELS = ("color", "color-position")


def model_key(model):
    """What an extractor built from ``model`` depends on, to tell when it is
    stale: a name as is; a module's identity, mode, and its tensors'
    identities, devices and in-place versions (an extractor may hold a copy
    of the module, which a fine-tuning step or a ``load_state_dict`` on the
    module leaves behind); anything else by identity."""
    if isinstance(model, str) or not hasattr(model, "state_dict"):
        return model if isinstance(model, str) else id(model)
    tensors = model.state_dict(keep_vars=True).values()
    return (id(model), bool(model.training),
            tuple((id(t), tensor_version(t), str(t.device)) for t in tensors))


def checkpoint_key(path):
    """What identifies the weights of ``checkpoint_path`` in ImageSegmenter's
    extractor cache: the path, and the file's modification time and size
    (keyed by its name alone, a checkpoint saved again under it, as a
    training loop saves its last epoch, was never read again)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):  # refused by the extractor itself
        return str(path)
    return str(path), st.st_mtime_ns, st.st_size


def _refuse_misspelt_offline_name(model):
    """Refuse a spelling of an offline model (``"colour"``, ``"Color"``,
    ``"color_position"``) by the name meant: it was taken for a timm model
    name, "Unknown timm model name 'colour'", or without torch an
    ImportError that asked to install it."""
    if not isinstance(model, str):
        return
    key = "-".join(model.strip().lower().replace("colour", "color")
                   .replace("_", " ").replace("-", " ").split())
    if key in OFFLINE_MODELS:
        raise ValueError(
            f"Unknown model={model!r}; did you mean model={key!r}? The offline "
            f"extractors are {' and '.join(map(repr, OFFLINE_MODELS))}.")


def _check_device_name(device):
    """Refuse a ``device`` that a ViT would refuse ("banana" was taken by
    the offline extractors, which run on NumPy): Falcon's devices without
    torch (a CUDA device need not exist), any of torch's with it."""
    if device is None or is_torch_device(device):
        return
    try:
        normalize_device(device)
    except ValueError:
        if not torch_available():
            raise
        torch_device(device, any_type=True)  # "mps", "xpu": a ViT's devices


def make_extractor(
    model="color",
    *,
    patch_size=None,
    pretrained=False,
    checkpoint_path=None,
    layer=-1,
    feature="token",
    resolution=None,
    device="cpu",
    pos_interpolation="bicubic",
    position_weight=None,
    smoothing=0.0,
):
    """Build the feature extractor described by :class:`ImageSegmenter` parameters.

    ``model="color"`` gives :class:`ColorTextureFeatures` and
    ``model="color-position"`` the earlier :class:`ColorPositionFeatures`
    (``patch_size`` defaults to 8), which refuse the ViT parameters
    (``layer``, ``feature``, ``resolution``, ``pos_interpolation``,
    ``smoothing``, weights) other than at their defaults; anything else is
    passed to :class:`TimmFeatures`.

    Parameters
    ----------
    model : str or torch.nn.Module, default="color"
        ``"color"`` for the offline colour + texture features,
        ``"color-position"`` for the colour + position ones, else a timm
        model name (``"local-dir:/folder"`` and ``"hf-hub:..."`` ones too; a
        checkpoint file is ``checkpoint_path``'s), or a module.
    patch_size : int, default=None
        Cell size of the offline features (8 when None); must be None for
        a ViT, whose patch size is the model's.
    pretrained : bool, default=False
        Load the model's pretrained weights through timm.
    checkpoint_path : str or path-like, default=None
        Local weights (state dict, safetensors or timm checkpoint).
    layer : int, default=-1
        Transformer block whose output is used.
    feature : {"token", "key"}, default="token"
        Patch tokens, or the attention keys of the chosen block.
    resolution : int or (int, int), default=None
        Resize the image to this size before the ViT (the model's own input
        size when None).
    device : str or torch.device, default="cpu"
        Torch device of the ViT.
    pos_interpolation : {"bicubic", "timm"}, default="bicubic"
        Resizing of the ViT's position embedding to other token grids (see
        :class:`TimmFeatures`).
    position_weight : float, default=None
        Weight of the position term of :class:`ColorTextureFeatures` or
        :class:`TimmFeatures`; None keeps the extractor's default (0.3 for
        ``"color"``, 0 for a ViT).  ``"color-position"`` has its own
        position descriptors and takes none.
    smoothing : float, default=0.0
        Gaussian smoothing of a ViT's tokens over their grid, in tokens (see
        :class:`TimmFeatures`); the offline extractors take none.

    Returns
    -------
    extractor : ColorTextureFeatures, ColorPositionFeatures or TimmFeatures
        An object whose ``extract(rgb)`` returns the token-grid features.

    Examples
    --------
    >>> from sklearn_falcon.image import make_extractor
    >>> make_extractor("color").patch_size
    (8, 8)
    """
    if isinstance(model, str) and model in OFFLINE_MODELS:
        _check_device_name(device)
        if checkpoint_path is not None or pretrained:
            given = [f"pretrained={pretrained!r}"] * bool(pretrained) + [
                f"checkpoint_path={checkpoint_path!r}"] * (checkpoint_path is not None)
            raise ValueError(
                f"model={model!r} is a non-learned offline extractor; it takes no "
                f"pretrained weights or checkpoint_path (got {', '.join(given)}).")
        vit_only = [f"{name}={value!r}" for name, value, default in (
            ("layer", layer, -1), ("feature", feature, "token"),
            ("resolution", resolution, None),
            ("pos_interpolation", pos_interpolation, "bicubic"))
            if not (value is default or value == default)]
        if vit_only:  # silently ignored, they changed nothing
            raise ValueError(
                f"{', '.join(vit_only)} "
                f"{'are ViT parameters' if len(vit_only) > 1 else 'is a ViT parameter'}"
                f"; model={model!r} is an offline extractor, which takes none "
                "(its resolution is set by patch_size and max_tokens).")
        if smoothing:
            raise ValueError(  # (the command line names its options)
                f"smoothing={smoothing!r} applies to ViT tokens only; "
                f"model={model!r} is an offline extractor, which takes none.")
        ps = 8 if patch_size is None else patch_size
        if model == "color-position":
            if position_weight is not None:
                raise ValueError(
                    "position_weight applies to model='color' and to ViTs; "
                    "model='color-position' has its own position descriptors "
                    f"(got position_weight={position_weight!r}).")
            return ColorPositionFeatures(ps)
        if position_weight is None:
            return ColorTextureFeatures(ps)
        return ColorTextureFeatures(ps, position_weight=position_weight)
    _refuse_misspelt_offline_name(model)
    if isinstance(model, (str, os.PathLike)) or hasattr(model, "parameters"):
        if patch_size is not None:
            raise ValueError(
                f"patch_size={patch_size!r} only applies to the offline models "
                "('color', 'color-position'); a ViT's patch size is fixed "
                "by its architecture."
            )
        return TimmFeatures(
            str(model) if isinstance(model, os.PathLike) else model,
            pretrained=pretrained,
            checkpoint_path=checkpoint_path,
            layer=layer,
            feature=feature,
            resolution=resolution,
            device=device,
            pos_interpolation=pos_interpolation,
            position_weight=0.0 if position_weight is None else position_weight,
            smoothing=smoothing,
        )
    raise TypeError(  # ('color-position' was left out; a checkpoint is no model)
        "model must be 'color', 'color-position', a timm model name (a "
        "'local-dir:' or 'hf-hub:' one too) or a torch.nn.Module; got "
        f"model={model!r} ({type(model).__name__}).")


def segmenter_extractor(seg):
    """The extractor of the :class:`ImageSegmenter` ``seg``'s parameters,
    kept on ``seg`` (``_extractor_cache``) until one of them, or a module's
    weights changed in place since (:func:`model_key`), makes it stale; a
    ViT's input size obeys ``seg.max_tokens``."""
    key = (model_key(seg.model), seg.pretrained, checkpoint_key(seg.checkpoint_path),
           seg.layer, seg.feature, str(seg.resolution), seg.pos_interpolation,
           seg.position_weight, seg.smoothing, seg.patch_size, seg.device)
    cache = getattr(seg, "_extractor_cache", None)
    if cache is None or cache[0] != key:
        ext = make_extractor(
            seg.model, patch_size=seg.patch_size, pretrained=seg.pretrained,
            checkpoint_path=seg.checkpoint_path, layer=seg.layer,
            feature=seg.feature, resolution=seg.resolution, device=seg.device,
            pos_interpolation=seg.pos_interpolation,
            position_weight=seg.position_weight, smoothing=seg.smoothing)
        seg._extractor_cache = (key, ext)
    ext = seg._extractor_cache[1]
    if hasattr(ext, "max_tokens"):  # a ViT: its input size obeys the budget
        ext.max_tokens = int(seg.max_tokens)
    return ext
