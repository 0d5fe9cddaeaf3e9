"""Patch-feature extractors.

Two extractors share one small interface, ``extract(rgb) -> (gh, gw, C)``
float32 token grid, and a ``patch_size`` attribute:

- :class:`ColorPositionFeatures`: a non-learned, offline extractor (numpy only);
- :class:`TimmFeatures`: any timm Vision Transformer; torch and timm are
  imported only when it is built.
"""

import copy
import numbers
import os
from pathlib import Path

import numpy as np

from ._io import check_image_size

__all__ = ["ColorPositionFeatures", "TimmFeatures", "rgb_to_lab", "make_extractor"]

_IMAGE_EXTRA_MSG = (
    "requires torch and timm, which are not installed. Install the image extra: "
    "pip install 'sklearn-falcon[image]'"
)


def _import_torch_timm(what):
    try:
        import timm  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{what} {_IMAGE_EXTRA_MSG} ({exc}).") from exc
    return torch, timm


def rgb_to_lab(rgb):
    """Convert sRGB ``uint8`` (or [0, 1] float) pixels to CIE L*a*b* (D65).

    Parameters
    ----------
    rgb : ndarray of shape (..., 3)
        sRGB values, ``uint8`` in 0..255 or float in [0, 1].

    Returns
    -------
    lab : ndarray of shape (..., 3), float32
        L* in [0, 100], a* and b* roughly in [-128, 127].

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import rgb_to_lab
    >>> np.round(rgb_to_lab(np.array([[255, 255, 255], [0, 0, 0]], np.uint8)), 2)
    array([[100.,   0.,   0.],
           [  0.,   0.,   0.]], dtype=float32)
    """
    rgb = np.asarray(rgb)
    c = rgb.astype(np.float32) / 255.0 if rgb.dtype == np.uint8 else rgb.astype(np.float32)
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    m = np.array(
        [
            [0.4124564, 0.3575761, 0.1804375],
            [0.2126729, 0.7151522, 0.0721750],
            [0.0193339, 0.1191920, 0.9503041],
        ],
        dtype=np.float32,
    )
    xyz = c @ m.T
    xyz /= np.array([0.95047, 1.0, 1.08883], dtype=np.float32)
    eps = 216.0 / 24389.0
    kappa = 24389.0 / 27.0
    f = np.where(xyz > eps, np.cbrt(xyz), (kappa * xyz + 16.0) / 116.0)
    lab = np.empty_like(f)
    lab[..., 0] = 116.0 * f[..., 1] - 16.0
    lab[..., 1] = 500.0 * (f[..., 0] - f[..., 1])
    lab[..., 2] = 200.0 * (f[..., 1] - f[..., 2])
    lab[..., 0] = np.clip(lab[..., 0], 0.0, 100.0)
    return lab.astype(np.float32)


def _cell_edges(size, n):
    return np.round(np.linspace(0, size, n + 1)).astype(np.intp)


def _box(arr, r):
    """Sum of ``arr`` (gh, gw, c) over (2r+1)^2 cell windows, edges clipped."""
    if r == 0:
        return arr
    c = np.cumsum(np.cumsum(np.pad(arr, ((1, 0), (1, 0), (0, 0))), 0), 1)
    gh, gw = arr.shape[:2]
    y0 = np.clip(np.arange(gh) - r, 0, gh)
    y1 = np.clip(np.arange(gh) + r + 1, 0, gh)
    x0 = np.clip(np.arange(gw) - r, 0, gw)
    x1 = np.clip(np.arange(gw) + r + 1, 0, gw)
    return (c[y1][:, x1] - c[y0][:, x1] - c[y1][:, x0] + c[y0][:, x0])


def _cell_sums(arr, re, ce):
    """Sum ``arr`` (H, W, ...) over the grid cells given by row/col edges."""
    s = np.add.reduceat(arr, re[:-1], axis=0)
    return np.add.reduceat(s, ce[:-1], axis=1)


class ColorPositionFeatures:
    """Offline, non-learned colour + texture + position patch features.

    The image is cut into a grid of ``patch_size`` cells (the last cells
    absorb the remainder, so the grid covers the whole image). Each cell is
    described by

    - the mean CIE L*a*b* colour of the cell (scaled by ``color_scale``),
    - texture statistics over the cell and its ``context`` rings of
      neighbouring cells: the standard deviation of L*, a*, b* and the mean
      gradient magnitude of L* (scaled by ``texture_scale``), plus, when
      ``context > 0``, the mean colour of that window,
    - the cell centre, in units of the longer image side (scaled by
      ``position_scale``).

    The descriptor ``d`` is then embedded with random Fourier features,
    ``z = sqrt(2 / D) cos(d Omega + beta)`` with a fixed seed, so that the
    cosine similarity of two embeddings approximates the Gaussian kernel
    ``exp(-||d_i - d_j||^2 / 2)``. This makes the features a drop-in for the
    cosine + power affinity used for ViT tokens.

    Parameters
    ----------
    patch_size : int, default=8
        Side of a grid cell in pixels.
    color_scale : float, default=12.0
        L*a*b* distance that counts as one unit (one kernel bandwidth).
    texture_scale : float, default=16.0
        Scale of the texture statistics, in L*a*b* units.
    position_scale : float, default=0.3
        Distance, as a fraction of the longer image side, that counts as one
        unit. Smaller values favour compact segments.
    context : int, default=0
        Radius, in cells, of the window of the texture statistics (0: the
        cell itself).
    n_components : int, default=256
        Number of random Fourier features.
    random_state : int, default=0
        Seed of the random Fourier projection (fixed, so features are
        deterministic).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import ColorPositionFeatures
    >>> img = np.zeros((32, 48, 3), np.uint8); img[:, 24:] = 255
    >>> feats = ColorPositionFeatures(patch_size=8).extract(img)
    >>> feats.shape
    (4, 6, 256)
    """

    default_power = 3.0

    def __init__(
        self,
        patch_size=8,
        *,
        color_scale=12.0,
        texture_scale=16.0,
        position_scale=0.3,
        context=0,
        n_components=256,
        random_state=0,
    ):
        if not isinstance(patch_size, numbers.Integral) or patch_size < 1:
            raise ValueError(f"patch_size must be a positive integer; got {patch_size!r}.")
        for name, val in (
            ("color_scale", color_scale),
            ("texture_scale", texture_scale),
            ("position_scale", position_scale),
        ):
            if not isinstance(val, numbers.Real) or not val > 0:
                raise ValueError(f"{name} must be a positive number; got {val!r}.")
        if not isinstance(context, numbers.Integral) or context < 0:
            raise ValueError(f"context must be a non-negative integer; got {context!r}.")
        self.context = int(context)
        if not isinstance(n_components, numbers.Integral) or n_components < 2:
            raise ValueError(f"n_components must be an integer >= 2; got {n_components!r}.")
        self.patch_size = (int(patch_size), int(patch_size))
        self.color_scale = float(color_scale)
        self.texture_scale = float(texture_scale)
        self.position_scale = float(position_scale)
        self.n_components = int(n_components)
        self.random_state = random_state
        rng = np.random.default_rng(random_state)
        n_desc = 9 if self.context == 0 else 12
        self._omega = rng.standard_normal((n_desc, self.n_components)).astype(np.float32)
        self._beta = rng.uniform(0, 2 * np.pi, self.n_components).astype(np.float32)

    def descriptors(self, rgb):
        """Per-cell descriptors before the Fourier embedding.

        Parameters
        ----------
        rgb : ndarray of shape (H, W, 3), uint8
            The image.

        Returns
        -------
        desc : ndarray of shape (gh, gw, 9) or (gh, gw, 12), float32
            Scaled cell mean Lab (3), context mean Lab (3, only if
            ``context > 0``), context std Lab (3), context gradient
            magnitude (1) and position (2).
        """
        check_image_size(rgb, self.patch_size)
        h, w = rgb.shape[:2]
        gh, gw = h // self.patch_size[0], w // self.patch_size[1]
        re, ce = _cell_edges(h, gh), _cell_edges(w, gw)
        counts = np.outer(np.diff(re), np.diff(ce)).astype(np.float64)[..., None]
        lab = rgb_to_lab(rgb).astype(np.float64)
        gy, gx = np.gradient(lab[..., 0])
        stack = np.concatenate([lab, lab * lab, np.hypot(gy, gx)[..., None]], axis=-1)
        sums = _cell_sums(stack, re, ce)
        mean = sums[..., :3] / counts
        r = self.context
        csum, ccount = _box(sums, r), _box(counts, r)
        cmean = csum[..., :3] / ccount
        blocks = [mean / self.color_scale]
        if r > 0:
            blocks.append(cmean / self.color_scale)
        csq = csum[..., 3:6] / ccount
        cstd = np.sqrt(np.maximum(csq - cmean * cmean, 0.0))
        grad = csum[..., 6:7] / ccount
        side = float(max(h, w))
        cy = (re[:-1] + re[1:]) / 2.0 / side
        cx = (ce[:-1] + ce[1:]) / 2.0 / side
        pos = np.stack(np.meshgrid(cy, cx, indexing="ij"), axis=-1)
        blocks += [cstd / self.texture_scale, grad / self.texture_scale,
                   pos / self.position_scale]
        desc = np.concatenate(blocks, axis=-1)
        return desc.astype(np.float32)

    def extract(self, rgb):
        """Token grid of L2-comparable features.

        Parameters
        ----------
        rgb : ndarray of shape (H, W, 3), uint8
            The image.

        Returns
        -------
        features : ndarray of shape (H // patch, W // patch, n_components), float32
        """
        d = self.descriptors(rgb)
        z = np.cos(d @ self._omega + self._beta) * np.float32(np.sqrt(2.0 / self.n_components))
        return z.astype(np.float32)


def _load_state_dict(path, torch):
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint_path not found: '{path}'.")
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
        except ImportError as exc:
            raise ImportError(
                "Loading a .safetensors checkpoint requires the 'safetensors' package: "
                "pip install 'sklearn-falcon[image]'."
            ) from exc
        state = load_file(str(path), device="cpu")
    else:
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - report any decoding failure clearly
            raise ValueError(f"Cannot read checkpoint '{path}': {exc}") from None
    for key in ("state_dict_ema", "state_dict", "model", "module", "teacher"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
            break
    if not isinstance(state, dict) or not state:
        raise ValueError(f"Checkpoint '{path}' does not contain a state dict.")
    out = {}
    for k, v in state.items():
        for prefix in ("module.", "backbone.", "model."):
            if k.startswith(prefix):
                k = k[len(prefix):]
        out[k] = v
    return out


def _on_device(tensor, device):
    """Whether ``tensor`` lives on ``device`` (``cuda`` matches any index)."""
    return tensor.device.type == device.type and (
        device.index is None or tensor.device.index == device.index
    )


class TimmFeatures:
    """Patch tokens (or attention keys) of a timm Vision Transformer.

    Parameters
    ----------
    model : str or torch.nn.Module
        A timm model name (e.g. ``"vit_small_patch8_224.dino"``) or a
        timm-style ViT module (with ``patch_embed``, ``blocks`` and
        ``num_prefix_tokens``).
    pretrained : bool, default=False
        Load pretrained weights through timm (needs them in the local cache
        or network access).
    checkpoint_path : str or path-like, default=None
        A local state dict (``torch.save``), ``.safetensors`` file or timm
        training checkpoint (``{"state_dict": ...}``) to load.
    layer : int, default=-1
        Index of the transformer block whose output (or keys) is used.
    feature : {"token", "key"}, default="token"
        ``"token"``: the block's output patch tokens (the final norm is
        applied for the last block); ``"key"``: the block's attention keys,
        captured by a forward hook on its ``qkv`` (or ``k_proj``) linear.
    resolution : int or (int, int), default=None
        Target size of the shorter image side in pixels (aspect ratio kept,
        both sides rounded to a multiple of the patch size), or an exact
        ``(height, width)``. ``None`` uses the model's pretrained input size.
        Models built without ``dynamic_img_size`` get their fixed input size.
    device : str, default="cpu"
        Torch device, or ``"auto"`` (CUDA if available).

    Notes
    -----
    A module passed as ``model`` is never modified: when it must be
    changed (a ``checkpoint_path`` to load, training mode, another device)
    the extractor works on a deep copy; a module already in eval mode on
    ``device`` is used as is, without a copy.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import TimmFeatures
    >>> ext = TimmFeatures("vit_tiny_patch16_224", resolution=64)  # doctest: +SKIP
    >>> ext.extract(np.zeros((64, 96, 3), np.uint8)).shape  # doctest: +SKIP
    (4, 6, 192)
    """

    default_power = 10.0

    def __init__(
        self,
        model,
        *,
        pretrained=False,
        checkpoint_path=None,
        layer=-1,
        feature="token",
        resolution=None,
        device="cpu",
    ):
        torch, timm = _import_torch_timm(f"TimmFeatures(model={model!r})")
        self._torch = torch
        if feature not in ("token", "key"):
            raise ValueError(f"feature must be 'token' or 'key'; got {feature!r}.")
        if isinstance(model, str):
            if not timm.is_model(model):
                raise ValueError(
                    f"Unknown timm model name {model!r}; see timm.list_models()."
                )
            try:
                net = timm.create_model(
                    model, pretrained=bool(pretrained), dynamic_img_size=True
                )
            except TypeError:  # architectures without dynamic_img_size support
                net = timm.create_model(model, pretrained=bool(pretrained))
        elif isinstance(model, torch.nn.Module):
            net = model
        else:
            raise TypeError(
                "model must be a timm model name or a torch.nn.Module; got "
                f"{type(model).__name__}."
            )
        if not (hasattr(net, "patch_embed") and hasattr(net, "blocks")):
            raise ValueError(
                f"Model {type(net).__name__} is not a timm-style Vision Transformer "
                "(needs 'patch_embed' and 'blocks')."
            )
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        device = torch.device(device)
        if net is model and (
            checkpoint_path is not None
            or net.training
            or any(not _on_device(p, device) for p in net.parameters())
        ):
            # The caller's module is never changed (weights, mode, device):
            # a private copy is loaded, switched to eval mode and moved.
            net = copy.deepcopy(net)
        if checkpoint_path is not None:
            state = _load_state_dict(checkpoint_path, torch)
            try:
                res = net.load_state_dict(state, strict=False)
            except RuntimeError as exc:  # shape mismatches
                detail = " ".join(str(exc).split())
                raise ValueError(
                    f"Checkpoint '{checkpoint_path}' does not match the model: {detail[:300]}"
                ) from None
            ignored = ("head.", "fc_norm.", "head_drop.")
            missing = [k for k in res.missing_keys if not k.startswith(ignored)]
            unexpected = [k for k in res.unexpected_keys if not k.startswith(ignored)]
            if missing or unexpected:
                raise ValueError(
                    f"Checkpoint '{checkpoint_path}' does not match the model: "
                    f"{len(missing)} missing keys (e.g. {missing[:3]}), "
                    f"{len(unexpected)} unexpected keys (e.g. {unexpected[:3]})."
                )
        n_blocks = len(net.blocks)
        if not isinstance(layer, numbers.Integral) or not -n_blocks <= layer < n_blocks:
            raise ValueError(
                f"layer must be an integer in [{-n_blocks}, {n_blocks - 1}]; got {layer!r}."
            )
        self.device = device
        self.model = net.eval().to(self.device)
        self.layer = int(layer) % n_blocks
        self.feature = feature
        ps = net.patch_embed.patch_size
        self.patch_size = (int(ps[0]), int(ps[1])) if not np.isscalar(ps) else (int(ps),) * 2
        self.num_prefix_tokens = int(getattr(net, "num_prefix_tokens", 1))
        self.dynamic = bool(getattr(net, "dynamic_img_size", False)) or bool(
            getattr(net.patch_embed, "dynamic_img_pad", False)
        )
        from timm.data import resolve_data_config

        cfg = resolve_data_config({}, model=net)
        self.mean = np.asarray(cfg["mean"], dtype=np.float32)
        self.std = np.asarray(cfg["std"], dtype=np.float32)
        self.interpolation = cfg.get("interpolation", "bicubic")
        fixed = getattr(net.patch_embed, "img_size", None) or cfg["input_size"][1:]
        self.fixed_size = (int(fixed[0]), int(fixed[1]))
        self.default_short = int(min(cfg["input_size"][1:]))
        if resolution is not None:
            ok = isinstance(resolution, numbers.Integral) and resolution > 0
            ok = ok or (
                isinstance(resolution, (tuple, list))
                and len(resolution) == 2
                and all(isinstance(r, numbers.Integral) and r > 0 for r in resolution)
            )
            if not ok:
                raise ValueError(
                    "resolution must be None, a positive int or a (height, width) pair; "
                    f"got {resolution!r}."
                )
        self.resolution = resolution

    def input_size(self, height, width):
        """Network input size ``(H', W')`` used for an image of ``(height, width)``."""
        ph, pw = self.patch_size
        if not self.dynamic:
            return self.fixed_size
        if isinstance(self.resolution, (tuple, list)):
            th, tw = self.resolution
        else:
            short = self.resolution or self.default_short
            scale = short / min(height, width)
            th, tw = height * scale, width * scale
        return max(ph, int(round(th / ph)) * ph), max(pw, int(round(tw / pw)) * pw)

    def preprocess(self, rgb):
        """Resize and normalize an ``(H, W, 3)`` uint8 image into a (1, 3, H', W') tensor."""
        from PIL import Image

        check_image_size(rgb, self.patch_size)
        th, tw = self.input_size(*rgb.shape[:2])
        resample = {
            "bicubic": Image.BICUBIC,
            "bilinear": Image.BILINEAR,
            "nearest": Image.NEAREST,
            "lanczos": Image.LANCZOS,
        }.get(self.interpolation, Image.BICUBIC)
        img = Image.fromarray(rgb).resize((tw, th), resample=resample)
        x = (np.asarray(img, dtype=np.float32) / 255.0 - self.mean) / self.std
        x = np.ascontiguousarray(x.transpose(2, 0, 1)[None])
        return self._torch.from_numpy(x).to(self.device)

    def _key_module(self):
        attn = getattr(self.model.blocks[self.layer], "attn", None)
        for name in ("qkv", "k_proj", "k"):
            mod = getattr(attn, name, None) if attn is not None else None
            if isinstance(mod, self._torch.nn.Linear):
                return name, mod
        raise ValueError(
            f"feature='key' needs block {self.layer} to have an attention 'qkv' or "
            "'k_proj' linear layer."
        )

    def extract(self, rgb):
        """Token grid ``(gh, gw, C)`` float32 with prefix/register tokens removed."""
        torch = self._torch
        x = self.preprocess(rgb)
        gh, gw = x.shape[2] // self.patch_size[0], x.shape[3] // self.patch_size[1]
        captured = {}
        handle = None
        if self.feature == "key":
            name, mod = self._key_module()

            def hook(_module, _inp, out):
                captured["out"] = out

            handle = mod.register_forward_hook(hook)
        try:
            with torch.inference_mode():
                if hasattr(self.model, "forward_intermediates"):
                    last = self.layer == len(self.model.blocks) - 1
                    out = self.model.forward_intermediates(
                        x,
                        indices=[self.layer],
                        norm=last,
                        stop_early=True,
                        output_fmt="NLC",
                        intermediates_only=True,
                    )[0]
                else:  # generic timm-style ViT: run the blocks by hand
                    t = self.model.patch_embed(x)
                    if hasattr(self.model, "_pos_embed"):
                        t = self.model._pos_embed(t)
                    for i, blk in enumerate(self.model.blocks):
                        t = blk(t)
                        if i == self.layer:
                            break
                    out = t[:, self.num_prefix_tokens:]
        finally:
            if handle is not None:
                handle.remove()
        if self.feature == "key":
            qkv = captured["out"]
            if name == "qkv":
                dim = qkv.shape[-1] // 3
                qkv = qkv[..., dim: 2 * dim]
            out = qkv[:, self.num_prefix_tokens:]
        out = out.reshape(out.shape[0], -1, out.shape[-1])
        if out.shape[1] != gh * gw:
            raise RuntimeError(
                f"Expected {gh * gw} patch tokens for a {gh}x{gw} grid, got "
                f"{out.shape[1]}; is num_prefix_tokens={self.num_prefix_tokens} right?"
            )
        return out[0].reshape(gh, gw, -1).float().cpu().numpy().astype(np.float32)


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
):
    """Build the feature extractor described by :class:`ImageSegmenter` parameters.

    ``model="color"`` gives :class:`ColorPositionFeatures` (``patch_size``
    defaults to 8); anything else is passed to :class:`TimmFeatures`.

    Parameters
    ----------
    model : str or torch.nn.Module, default="color"
        ``"color"`` for the offline colour + position features, else a timm
        model name, a checkpoint-backed timm name, or a module.
    patch_size : int or (int, int), default=None
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
    device : str, default="cpu"
        Torch device of the ViT.

    Returns
    -------
    extractor : ColorPositionFeatures or TimmFeatures
        An object whose ``extract(rgb)`` returns the token-grid features.

    Examples
    --------
    >>> from sklearn_falcon.image import make_extractor
    >>> make_extractor("color").patch_size
    (8, 8)
    """
    if isinstance(model, str) and model == "color":
        if checkpoint_path is not None or pretrained:
            raise ValueError(
                "model='color' is the non-learned offline extractor; it takes no "
                "pretrained weights or checkpoint_path."
            )
        return ColorPositionFeatures(8 if patch_size is None else patch_size)
    if isinstance(model, (str, os.PathLike)) or hasattr(model, "parameters"):
        if patch_size is not None:
            raise ValueError(
                "patch_size only applies to model='color'; a ViT's patch size is fixed "
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
        )
    raise TypeError(
        "model must be 'color', a timm model name or a torch.nn.Module; got "
        f"{type(model).__name__}."
    )
