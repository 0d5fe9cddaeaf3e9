"""Patch-feature extractors.

The extractors share one small interface, ``extract(rgb) -> (gh, gw, C)``
float32 token grid, and a ``patch_size`` attribute:

- :class:`ColorPositionFeatures` (here): a non-learned, offline colour +
  position extractor (numpy only);
- :class:`~sklearn_falcon.image.ColorTextureFeatures` (``_texture``): the
  offline default, colour and texture words;
- :class:`TimmFeatures`: any timm Vision Transformer; torch and timm are
  imported only when it is built.

:func:`~sklearn_falcon.image.make_extractor` (``_extractors``) builds one
from ImageSegmenter's parameters.
"""

import numbers

import numpy as np

from ._io import _to_uint8, check_image_size, load_image, range_text
from ._position import check_seed, generator
from ._timm import TimmFeatures

__all__ = ["ColorPositionFeatures", "TimmFeatures", "rgb_to_lab"]


def rgb_to_lab(rgb):
    """Convert sRGB ``uint8`` (or [0, 1] float) pixels to CIE L*a*b* (D65).

    Parameters
    ----------
    rgb : ndarray of shape (..., 3)
        sRGB values: float in [0, 1], or integers and booleans in their
        natural range (as :func:`load_image` reads them: 0..255, 16-bit
        0..65535, ``True`` as 255).

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
    if rgb.shape[-1:] != (3,):  # NumPy said "matmul: ... mismatch in its core dim"
        raise ValueError(
            f"rgb must hold 3 channels in its last axis; got shape {rgb.shape}. "
            "load_image converts grey and RGBA images to RGB.")
    if np.issubdtype(rgb.dtype, np.floating):
        # finite before the cast: 1e300 is, but it is inf in float32
        if not np.all(np.isfinite(rgb)):
            raise ValueError("rgb contains NaN or infinite values.")
        with np.errstate(over="ignore"):
            c = rgb.astype(np.float32)
        if c.size and not (0.0 <= c.min() and c.max() <= 1.0):
            raise ValueError(
                "Floating-point rgb must have values in [0, 1]; got values in "
                f"{range_text(rgb.min(), rgb.max(), 0.0, 1.0)}. Scale it to [0, 1] "
                "or pass uint8 data.")
    else:  # integers were read as floats in [0, 1]: 255 gave an a* of 6461
        c = _to_uint8(rgb, source="rgb").astype(np.float32) / 255.0
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


def as_rgb(rgb):
    """``rgb`` itself if it is a NumPy array, else the RGB array of
    :func:`load_image` (a PIL image, a tensor, a path, nested lists), as
    ``TimmFeatures`` converts it: the offline extractors, which share its
    ``extract(rgb)``, raised "'Image' object has no attribute 'shape'"."""
    return rgb if isinstance(rgb, np.ndarray) else load_image(rgb)


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


def check_int(name, val, lo):
    """``val`` as an int, or a ValueError naming ``name`` (a bool is no
    integer here: ``patch_size=True`` was a cell of one pixel)."""
    if not isinstance(val, numbers.Integral) or isinstance(val, (bool, np.bool_)) \
            or val < lo:
        raise ValueError(f"{name} must be an integer >= {lo}; got {val!r}.")
    return int(val)


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
    :math:`z = \\sqrt{2 / D} \\cos(d \\Omega + \\beta)` with a fixed seed,
    so that the cosine similarity of two embeddings approximates the
    Gaussian kernel :math:`\\exp(-\\lVert d_i - d_j \\rVert^2 / 2)`. This
    makes the features a drop-in for the
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
        patch_size = check_int("patch_size", patch_size, 1)
        for name, val in (
            ("color_scale", color_scale),
            ("texture_scale", texture_scale),
            ("position_scale", position_scale),
        ):
            if not isinstance(val, numbers.Real) or not val > 0:
                raise ValueError(f"{name} must be a positive number; got {val!r}.")
        self.context = check_int("context", context, 0)
        n_components = check_int("n_components", n_components, 2)
        self.patch_size = (patch_size, patch_size)
        self.color_scale = float(color_scale)
        self.texture_scale = float(texture_scale)
        self.position_scale = float(position_scale)
        self.n_components = int(n_components)
        self.random_state = check_seed(random_state, type(self).__name__)
        rng = generator(random_state)
        n_desc = 9 if self.context == 0 else 12
        self._omega = rng.standard_normal((n_desc, self.n_components)).astype(np.float32)
        self._beta = rng.uniform(0, 2 * np.pi, self.n_components).astype(np.float32)

    def descriptors(self, rgb):
        """Per-cell descriptors before the Fourier embedding.

        Parameters
        ----------
        rgb : ndarray of shape (H, W, 3), uint8
            The image (or float in [0, 1], 16-bit); another image
            :func:`load_image` takes (a PIL image, a tensor, a path) is
            converted by it, as by :meth:`TimmFeatures.preprocess`.

        Returns
        -------
        desc : ndarray of shape (gh, gw, 9) or (gh, gw, 12), float32
            Scaled cell mean Lab (3), context mean Lab (3, only if
            ``context > 0``), context std Lab (3), context gradient
            magnitude (1) and position (2).
        """
        rgb = as_rgb(rgb)
        check_image_size(rgb, self.patch_size)
        h, w = rgb.shape[:2]
        gh, gw = h // self.patch_size[0], w // self.patch_size[1]
        re, ce = _cell_edges(h, gh), _cell_edges(w, gw)
        counts = np.outer(np.diff(re), np.diff(ce)).astype(np.float64)[..., None]
        lab = rgb_to_lab(rgb).astype(np.float64)
        # no gradient along a side of one pixel (np.gradient refused the image)
        gy, gx = (np.gradient(lab[..., 0], axis=a) if lab.shape[a] > 1 else
                  np.zeros_like(lab[..., 0]) for a in (0, 1))
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
            The image (or float in [0, 1], 16-bit); another image
            :func:`load_image` takes (a PIL image, a tensor, a path) is
            converted by it, as by :meth:`TimmFeatures.preprocess`.

        Returns
        -------
        features : ndarray of shape (H // patch, W // patch, n_components), float32
        """
        d = self.descriptors(rgb)
        z = np.cos(d @ self._omega + self._beta) * np.float32(np.sqrt(2.0 / self.n_components))
        return z.astype(np.float32)
