"""Patch tokens (or attention keys) of a timm Vision Transformer.

torch and timm are imported when a :class:`TimmFeatures` is built, never at
import time.
"""

import copy
import numbers
import os
import threading

import numpy as np

from .._backends._boundary import tensor_version, torch_device
from .._backends._device import import_library
from ._budget import grid_under_budget
from ._checkpoint import check_checkpoint_path, check_layer, load_checkpoint
from ._checkpoint import path_hint, registry_depth
from ._io import check_image_size, load_image
from ._position import check_position, fourier_basis, grid_positions, position_features

__all__ = ["TimmFeatures"]

_create_lock = threading.Lock()


def _after_fork_in_child():
    global _create_lock
    _create_lock = threading.Lock()  # a parent's thread may have held it


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _import_torch_timm(what):
    """(torch, timm), or an ImportError that names the one missing or
    failing to import (torch first: timm imports it)."""
    return tuple(import_library(
        name, f"{what} requires {lib}",
        "`pip install 'sklearn-falcon[image]'` (or `pip install torch timm`)",
        "model='color' (the offline features)")
        for name, lib in (("torch", "PyTorch"), ("timm", "timm")))


def _on_device(tensor, device):
    """Whether ``tensor`` lives on ``device`` (``cuda`` matches any index)."""
    return tensor.device.type == device.type and (
        device.index is None or tensor.device.index == device.index
    )


def smooth_tokens(tokens, sigma):
    """Unit-norm tokens filtered by a Gaussian over their grid.

    Parameters
    ----------
    tokens : ndarray of shape (gh, gw, C)
        Token grid.
    sigma : float
        Standard deviation of the filter, in tokens; the grid's edge tokens
        are repeated beyond it (``mode="nearest"``).

    Returns
    -------
    smoothed : ndarray of shape (gh, gw, C), float32

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image._timm import smooth_tokens
    >>> z = np.zeros((1, 5, 2), np.float32); z[..., 0] = 1; z[0, 2] = (0, 3)
    >>> smooth_tokens(z, 1.0)[0, :, 1].round(2)
    array([0.05, 0.24, 0.4 , 0.24, 0.05], dtype=float32)
    """
    from scipy import ndimage as ndi

    z = np.asarray(tokens, dtype=np.float32)
    z = z / np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-12)
    return ndi.gaussian_filter(z, (sigma, sigma, 0), mode="nearest").astype(np.float32)


class TimmFeatures:
    """Patch tokens (or attention keys) of a timm Vision Transformer.

    Parameters
    ----------
    model : str or torch.nn.Module
        A timm model name (e.g. ``"vit_small_patch8_224.dino"``, or a
        ``"local-dir:/path/to/folder"`` or ``"hf-hub:..."`` one) or a
        timm-style ViT module (with ``patch_embed``, ``blocks`` and
        ``num_prefix_tokens``), or one inside ``torch.compile``,
        ``DataParallel`` or ``DistributedDataParallel``.
    pretrained : bool, default=False
        Load pretrained weights through timm (needs them in the local cache
        or network access).  Without them (and without ``checkpoint_path``)
        the weights are timm's random initialization, drawn from a generator
        seeded with 0: the same every time, whatever torch's global random
        state, which the model's creation leaves as it was.  Ignored with a
        ``checkpoint_path``, which replaces every weight (nothing is
        downloaded).
    checkpoint_path : str or path-like, default=None
        A local state dict (``torch.save``), ``.safetensors`` file or timm
        training checkpoint (``{"state_dict": ...}``) to load; one that does
        not match the model is converted by timm's filter of the model's
        family, if it can be (Meta's DINOv2 checkpoints).
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
    device : str or torch.device, default="cpu"
        Torch device, or ``"auto"`` (CUDA if available).
    pos_interpolation : {"bicubic", "timm"}, default="bicubic"
        How an absolute position embedding is resized to a token grid other
        than the model's own: ``"bicubic"`` interpolates the grid bicubically
        without antialiasing (``align_corners=False``), as the DINO and
        DINOv2 reference code and their Hugging Face and ONNX exports do;
        ``"timm"`` uses timm's own resampling (antialiased when it shrinks the
        grid).  The two differ whenever the grid is resized (by up to 0.6 on
        the final DINOv2 ViT-S/14 tokens at 448 pixels, of values up to 11).
        Models without an absolute position embedding, or built without
        ``dynamic_img_size``, always use timm's forward.
    position_weight : float, default=0.0
        Weight of a position term (0: none).  When positive, the tokens are
        scaled to unit norm and random Fourier features of the token centres
        are appended, so that the cosine of two tokens is
        ``(c + position_weight**2 k) / (1 + position_weight**2)``, ``c``
        being the cosine of the tokens and ``k`` a Gaussian kernel of their
        distance, as in :class:`ColorTextureFeatures`.  On the mosaics of
        ``benchmarks/bench_dinov2.py`` (DINOv2 block 7 keys), 0.3 raised the
        mean mIoU of held-out mosaics from 0.75 to 0.82; on photographs it
        can also cut a uniform region along a smooth line (the sky of
        scikit-image's ``rocket``), so it is off by default.
    position_scale : float, default=0.3
        Bandwidth of that kernel, as a fraction of the longer side of the
        token grid.
    smoothing : float, default=0.0
        Standard deviation, in tokens, of a Gaussian filter applied to the
        unit-norm tokens over the token grid (0: none; the grid's edge
        tokens are repeated beyond it), before any position term.  It damps
        the token-to-token noise of ViT features and, like the position
        term, favours spatially coherent segments.  On the mosaics of
        ``benchmarks/bench_dinov2.py`` (DINOv2 block 7 keys), 1.0 raised the
        mean mIoU from 0.887 to 0.911 on the 16 seed-0 mosaics and from
        0.804 to 0.844 on 48 held-out ones
        (``benchmarks/results/dinov2_smoothing.md``); on photographs it can
        merge small objects into their surroundings (the flag of
        scikit-image's ``astronaut``), so it is off by default.

    Notes
    -----
    A module passed as ``model`` is never modified: when it must be
    changed (a ``checkpoint_path`` to load, training mode, another device)
    the extractor works on a deep copy; a module already in eval mode on
    ``device`` is used as is, without a copy (pass ``model.eval()`` to
    spare a large ViT's second set of weights).  The copy, not a switch to
    eval mode and back, keeps a module that another thread trains as it is.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import TimmFeatures
    >>> ext = TimmFeatures("vit_tiny_patch16_224", resolution=64)  # random weights
    >>> ext.extract(np.zeros((64, 96, 3), np.uint8)).shape
    (4, 6, 192)
    """

    default_power = 10.0
    #: Token budget (None: none); set by ImageSegmenter's ``max_tokens``.
    max_tokens = None
    #: The end of the message for an image smaller than one patch.
    size_advice = "Use a larger image: a ViT's patch size is its model's."

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
        pos_interpolation="bicubic",
        position_weight=0.0,
        position_scale=0.3,
        smoothing=0.0,
    ):
        position_weight, position_scale = check_position(position_weight,
                                                         position_scale)
        if (not isinstance(smoothing, numbers.Real) or isinstance(smoothing, bool)
                or not smoothing >= 0 or not np.isfinite(smoothing)):
            raise ValueError(
                f"smoothing must be a finite number >= 0; got {smoothing!r}.")
        # checked before the model is built (seconds; a download)
        if resolution is not None:
            def size(r):  # True is not 1 pixel
                return (isinstance(r, numbers.Integral) and not isinstance(r, bool)
                        and r > 0)

            ok = size(resolution)
            ok = ok or (
                isinstance(resolution, (tuple, list))
                and len(resolution) == 2
                and all(size(r) for r in resolution)
            )
            if not ok:
                raise ValueError(
                    "resolution must be None, a positive int or a (height, width) pair; "
                    f"got {resolution!r}."
                )
        check_layer(layer, None)
        if checkpoint_path is not None:
            check_checkpoint_path(checkpoint_path)
        torch, timm = _import_torch_timm(f"TimmFeatures(model={model!r})")
        if feature not in ("token", "key"):
            raise ValueError(f"feature must be 'token' or 'key'; got {feature!r}.")
        if pos_interpolation not in ("bicubic", "timm"):
            raise ValueError(
                "pos_interpolation must be 'bicubic' or 'timm'; got "
                f"{pos_interpolation!r}."
            )
        # a CUDA device that is not there: refused before a build or a copy
        device = torch_device(device, any_type=True)
        if isinstance(model, str):
            # timm's "local-dir:" and "hf-hub:" names read their architecture
            # from the model's folder or repository: no registry name
            source = model.partition(":")[0] if ":" in model else ""
            if source not in ("local-dir", "hf-hub") and not timm.is_model(model):
                raise ValueError(  # (a path: of checkpoint_path or "local-dir:")
                    f"Unknown timm model name {model!r}; see timm.list_models()."
                    + path_hint(model))
            # the weights' random initialization (all of them without
            # pretrained weights) draws from a generator of its own, seeded:
            # the same model every time, and torch's global state untouched
            # (models created in several threads at once take turns: one's
            # fork would save the state another had seeded, and restore it)
            # a checkpoint replaces every weight: none is downloaded for it
            pretrained = bool(pretrained) and checkpoint_path is None
            with _create_lock, torch.random.fork_rng(devices=[]):
                if layer != -1 and not source:  # its depth, without the build
                    check_layer(layer, registry_depth(model))
                torch.manual_seed(0)
                try:
                    net = timm.create_model(
                        model, pretrained=pretrained, dynamic_img_size=True
                    )
                except TypeError:  # architectures without dynamic_img_size support
                    net = timm.create_model(model, pretrained=pretrained)
        elif isinstance(model, torch.nn.Module):
            net = model
            # the ViT inside torch.compile's wrapper (its blocks run one by
            # one here) or DataParallel's / DDP's
            wrappers = (torch.nn.DataParallel,
                        torch.nn.parallel.DistributedDataParallel)
            while True:
                inner = getattr(net, "_orig_mod", None)
                if not isinstance(inner, torch.nn.Module):
                    inner = net.module if isinstance(net, wrappers) else None
                if inner is None:
                    break
                net = inner
            model = net
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
        check_layer(layer, len(net.blocks))  # before a copy, a checkpoint's load
        if net is model and (
            checkpoint_path is not None
            or net.training
            or any(not _on_device(p, device) for p in net.parameters())
        ):
            # The caller's module is never changed (weights, mode, device):
            # a private copy is loaded, switched to eval mode and moved.
            net = copy.deepcopy(net)
        if checkpoint_path is not None:
            load_checkpoint(net, checkpoint_path, torch)
        self.device = device
        self.model = net.eval().to(self.device)
        self.layer = int(layer) % len(net.blocks)
        self.feature = feature
        # the stride of a token: a hybrid's backbone times its patch (feat_ratio)
        pe = net.patch_embed
        ps = (pe.feat_ratio(as_scalar=False) if hasattr(pe, "feat_ratio")
              else getattr(pe, "patch_size", None))
        if ps is None:
            raise ValueError(f"Model {type(net).__name__} is not a timm-style Vision "
                             "Transformer (its patch_embed has no patch size).")
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
        self.resolution = resolution
        self.pos_interpolation = pos_interpolation
        self._pos_cache = {}
        self.position_weight, self.position_scale = position_weight, position_scale
        self._basis = fourier_basis(0)
        self.smoothing = float(smoothing)

    @property
    def _torch(self):
        # the module, not an attribute: an extractor pickles (it said
        # "cannot pickle 'module' object")
        import torch

        return torch

    def input_size(self, height, width):
        """Network input size used for an image of ``(height, width)``.

        Parameters
        ----------
        height, width : int
            The image's size in pixels.

        Returns
        -------
        size : (int, int)
            ``(H', W')``, multiples of the patch size (the model's fixed
            size when it takes no other), at most ``max_tokens`` patches.
        """
        ph, pw = self.patch_size
        if not self.dynamic:
            return self.fixed_size
        if isinstance(self.resolution, (tuple, list)):
            th, tw = self.resolution
        else:
            short = self.resolution or self.default_short
            scale = short / min(height, width)
            th, tw = height * scale, width * scale
        if self.max_tokens and (th / ph) * (tw / pw) > self.max_tokens:
            shrink = (self.max_tokens / ((th / ph) * (tw / pw))) ** 0.5
            i, j = grid_under_budget(th * shrink / ph, tw * shrink / pw,
                                     self.max_tokens)
            return max(ph, i * ph), max(pw, j * pw)
        return max(ph, int(round(th / ph)) * ph), max(pw, int(round(tw / pw)) * pw)

    def preprocess(self, rgb):
        """Resize and normalize an image into the network's input tensor.

        Parameters
        ----------
        rgb : ndarray of shape (H, W, 3), uint8
            Or any other image :func:`load_image` takes (greyscale, RGBA,
            floats in [0, 1], a tensor...), converted by it.

        Returns
        -------
        x : torch.Tensor of shape (1, 3, H', W')
            Resized to :meth:`input_size` and normalized with the model's
            mean and standard deviation, on ``device``.
        """
        from PIL import Image

        if not (isinstance(rgb, np.ndarray) and rgb.dtype == np.uint8
                and rgb.ndim == 3 and rgb.shape[2] == 3):
            rgb = load_image(rgb)  # not "operands could not be broadcast"
        check_image_size(rgb, self.patch_size, advice=self.size_advice)
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

    def _keys(self, captured, name, mod, attn, n_patches):
        """The keys of block ``layer``'s patch tokens from what its hooks
        caught: the key layer's output, or, where the attention applies the
        layer's weight without calling it (EVA's fused ``qkv`` with separate
        biases), the projection of the attention's input."""
        if "out" in captured:
            k = captured["out"]
            k = k.reshape(k.shape[0], -1, k.shape[-1])  # SAM's (B, H, W, 3C)
            if name == "qkv":
                dim = k.shape[-1] // 3
                k = k[..., dim: 2 * dim]
        elif "in" in captured:
            weight, bias = mod.weight, mod.bias
            if name == "qkv":
                dim = weight.shape[0] // 3
                weight = weight[dim: 2 * dim]
                bias = None if bias is None else bias[dim: 2 * dim]
            extra = getattr(attn, "k_bias", None)
            if extra is not None:
                bias = extra if bias is None else bias + extra
            k = self._torch.nn.functional.linear(captured["in"], weight, bias)
        else:
            raise RuntimeError(
                f"feature='key': block {self.layer}'s attention of "
                f"{type(self.model).__name__} was not run; use feature='token'.")
        # the prefix tokens come first, where the block holds them (CaiT's
        # and XCiT's patch blocks do not: their class token joins later)
        return k[:, k.shape[1] - n_patches:] if k.shape[1] >= n_patches else k

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

    def _own_pos_embed(self):
        """Whether :meth:`tokens` adds a resized position embedding itself."""
        m = self.model
        return (
            self.pos_interpolation == "bicubic"
            and getattr(m, "dynamic_img_size", False)
            and isinstance(getattr(m, "pos_embed", None), self._torch.Tensor)
            and hasattr(m.patch_embed, "grid_size")
            and all(callable(getattr(m, a, None))
                    for a in ("pos_drop", "patch_drop", "norm_pre"))
            # rotary embeddings (EVA-02) go into every block: the model's own
            # forward_intermediates runs them
            and getattr(m, "rope", None) is None
        )

    def _pos_embed_for(self, gh, gw):
        """The model's position embedding on a ``gh x gw`` grid (cached).

        Bicubic interpolation without antialiasing, ``align_corners=False``,
        to an explicit output size (the DINOv2 reference).
        """
        m, torch, pe = self.model, self._torch, self.model.pos_embed
        # a module used as is may have its weights changed in place since
        version = (tensor_version(pe), pe.data_ptr())
        if self._pos_cache.get((gh, gw), (None,))[0] != version:
            n_pre = 0 if getattr(m, "no_embed_class", False) else self.num_prefix_tokens
            prefix, grid = pe[:, :n_pre], pe[:, n_pre:]
            oh, ow = (int(v) for v in m.patch_embed.grid_size)
            if (oh, ow) != (gh, gw):
                grid = grid.reshape(1, oh, ow, -1).permute(0, 3, 1, 2).float()
                grid = torch.nn.functional.interpolate(
                    grid, size=(gh, gw), mode="bicubic", align_corners=False,
                    antialias=False,
                )
                grid = grid.permute(0, 2, 3, 1).reshape(1, gh * gw, -1).to(pe.dtype)
            self._pos_cache[gh, gw] = (
                version, torch.cat([prefix, grid], dim=1).detach())
        return self._pos_cache[gh, gw][1]

    def _run_blocks(self, x):
        """Tokens (prefix included) of block ``layer`` for an input batch ``x``."""
        m, torch = self.model, self._torch
        if self._own_pos_embed():
            t = m.patch_embed(x)  # (B, gh, gw, C) with dynamic_img_size
            b, gh, gw, c = t.shape
            t = t.reshape(b, gh * gw, c)
            pos = self._pos_embed_for(gh, gw)
            # timm's order: class, distillation (DeiT), register tokens
            prefix = [getattr(m, name, None)
                      for name in ("cls_token", "dist_token", "reg_token")]
            prefix = [tok.expand(b, -1, -1) for tok in prefix if tok is not None]
            if getattr(m, "no_embed_class", False):
                t = torch.cat(prefix + [t + pos], dim=1)
            else:
                t = torch.cat(prefix + [t], dim=1) + pos
            t = m.norm_pre(m.patch_drop(m.pos_drop(t)))
            for blk in m.blocks[: self.layer + 1]:
                t = blk(t)
            if self.layer == len(m.blocks) - 1:
                t = m.norm(t)
            return t[:, self.num_prefix_tokens:]
        if hasattr(m, "forward_intermediates"):
            kwargs = dict(indices=[self.layer], norm=self.layer == len(m.blocks) - 1,
                          stop_early=True, intermediates_only=True)
            try:
                return m.forward_intermediates(x, output_fmt="NLC", **kwargs)[0]
            except AssertionError:  # ViT-SAM's are NCHW only
                out = m.forward_intermediates(x, output_fmt="NCHW", **kwargs)[0]
                return out.flatten(2).transpose(1, 2)
        # generic timm-style ViT: run the blocks by hand
        t = m.patch_embed(x)
        if hasattr(m, "_pos_embed"):
            t = m._pos_embed(t)
        for blk in m.blocks[: self.layer + 1]:
            t = blk(t)
        return t[:, self.num_prefix_tokens:]

    def tokens(self, x):
        """Token grid of a preprocessed batch, as a torch tensor.

        Parameters
        ----------
        x : torch.Tensor of shape (B, 3, H, W)
            Normalized images (see :meth:`preprocess`), ``H`` and ``W``
            multiples of the patch size.

        Returns
        -------
        tokens : torch.Tensor of shape (B, H // p, W // p, C)
            Patch tokens (or keys) of block ``layer``, prefix and register
            tokens removed.
        """
        torch = self._torch
        # in the model's own precision (a module in half or bfloat16)
        dtype = next((p.dtype for p in self.model.parameters()
                      if p.is_floating_point()), torch.float32)
        x = x.to(self.device, dtype)
        gh, gw = x.shape[2] // self.patch_size[0], x.shape[3] // self.patch_size[1]
        captured, handles = {}, []
        if self.feature == "key":
            name, mod = self._key_module()
            attn = self.model.blocks[self.layer].attn
            # a hook fires for every forward of the module: another thread's
            # too, with another image (the model is shared), so it keeps
            # what its own thread runs only
            me = threading.get_ident()

            def hook(_module, _inp, out):
                if threading.get_ident() == me:
                    captured["out"] = out

            def attn_input(_module, args):
                if threading.get_ident() == me:
                    captured["in"] = args[0]

            handles = [mod.register_forward_hook(hook),
                       attn.register_forward_pre_hook(attn_input)]
        try:
            with torch.inference_mode():
                out = self._run_blocks(x)
                if self.feature == "key":
                    out = self._keys(captured, name, mod, attn, gh * gw)
        finally:
            for handle in handles:
                handle.remove()
        out = out.reshape(out.shape[0], -1, out.shape[-1])
        if out.shape[1] != gh * gw:
            raise RuntimeError(
                f"Expected {gh * gw} patch tokens for a {gh}x{gw} grid, got "
                f"{out.shape[1]}; is num_prefix_tokens={self.num_prefix_tokens} right?"
            )
        return out.reshape(out.shape[0], gh, gw, -1)

    def extract(self, rgb):
        """Token grid of an image, prefix and register tokens removed.

        With a ``smoothing``, unit-norm tokens filtered over the grid; with
        a ``position_weight``, unit-norm tokens followed by the position
        term (``C`` then counts its features too).

        Parameters
        ----------
        rgb : ndarray of shape (H, W, 3), uint8
            Or another image :func:`load_image` takes (see :meth:`preprocess`).

        Returns
        -------
        tokens : ndarray of shape (gh, gw, C), float32
        """
        out = self.tokens(self.preprocess(rgb))
        z = out[0].float().cpu().numpy().astype(np.float32)
        if self.smoothing > 0:
            z = smooth_tokens(z, self.smoothing)
        if self.position_weight > 0:
            gh, gw = z.shape[:2]
            ph, pw = self.patch_size
            z /= np.maximum(np.linalg.norm(z, axis=-1, keepdims=True), 1e-12)
            pos = grid_positions(np.arange(gh + 1) * ph, np.arange(gw + 1) * pw)
            pz = position_features(pos, self._basis, self.position_weight,
                                   self.position_scale)
            z = np.concatenate([z, pz], axis=-1)
        return z
