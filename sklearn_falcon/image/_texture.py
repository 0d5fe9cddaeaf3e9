"""Offline colour + texture word features (the default of ImageSegmenter).

Every pixel gets two "visual words", learned on the image itself with a few
k-means iterations (no weights, nothing downloaded):

- a **texture word**: the nearest of ``n_texture_words - 1`` centres of a
  small filter bank on L* (first and second Gaussian derivatives at
  ``sigmas`` pixels, scale-normalized), so the word says which local
  structure (edge, bar, blob) and at which scale surrounds the pixel, or a
  last word for the flat pixels, whose responses stay under a noise floor
  of 3 L* units;
- a **colour word**: the nearest of ``n_color_words`` centres of the
  slightly smoothed CIE L*a*b* colour.

A token (a ``patch_size`` cell) is described by the histograms of both words
over the cells around it, weighted by a Gaussian of ``0.75 window`` cells
of standard deviation, in the Hellinger embedding
(square roots of the frequencies): the cosine of two tokens is then the
Bhattacharyya coefficient of their histograms, the classic affinity of
texture segmentation with normalized cuts (Malik, Belongie, Leung and Shi,
*Contour and texture analysis for image segmentation*, IJCV 2001). A weak
position term (random Fourier features of the cell centre, weighted by
``position_weight``; module ``_position``) is appended.
"""

import numbers

import numpy as np

from .._threads import fit_threads
from ._features import _cell_edges, as_rgb, check_int, rgb_to_lab
from ._io import check_image_size
from ._position import (
    N_POSITION, check_position, check_seed, fourier_basis, generator,
    grid_positions, position_features,
)

__all__ = ["ColorTextureFeatures"]

# pixels per chunk of the word assignment (bounds its temporary memory)
_ASSIGN_CHUNK = 1 << 16
# filter-response norm (in tenths of L* units) under which a pixel is flat
_FLAT = 0.3
# standard deviation of the histogram window, in units of ``window`` cells
_WINDOW_SIGMA = 0.75


def _filter_bank(L, sigmas):
    """``(H, W, 5 len(sigmas))`` float32: Gaussian derivatives d/dy, d/dx,
    d2/dy2, d2/dx2, d2/dxdy of ``L`` at each scale, scale-normalized."""
    from scipy import ndimage as ndi

    out = np.empty(L.shape + (5 * len(sigmas),), dtype=np.float32)
    i = 0
    for s in sigmas:
        for order, norm in (((1, 0), s), ((0, 1), s), ((2, 0), s * s),
                            ((0, 2), s * s), ((1, 1), s * s)):
            ndi.gaussian_filter(L, s, order=order, output=out[..., i], mode="reflect")
            out[..., i] *= norm
            i += 1
    return out


def _window_sum(counts, r):
    """Sums of ``counts`` (gh, gw, c) over the cells around each cell,
    weighted by a Gaussian of ``_WINDOW_SIGMA * r`` cells (cut at 3 standard
    deviations; nothing outside the grid).  A Gaussian rather than a box: a
    cell's histogram changes smoothly from one cell to the next, so tokens
    near a boundary mix their two sides in proportion to the distance."""
    if r == 0:
        return counts
    from scipy import ndimage as ndi

    s = _WINDOW_SIGMA * r
    return ndi.gaussian_filter(counts, (s, s, 0), mode="constant", truncate=3.0)


def _assign(X, centers):
    """Index of the nearest centre of every row of ``X``, in chunks."""
    c2 = np.einsum("ij,ij->i", centers, centers)
    out = np.empty(X.shape[0], dtype=np.int64)
    for s in range(0, X.shape[0], _ASSIGN_CHUNK):
        x = X[s:s + _ASSIGN_CHUNK]
        out[s:s + _ASSIGN_CHUNK] = np.argmin(c2 - 2.0 * (x @ centers.T), axis=1)
    return out


def _kmeans(X, k, rng, n_iter):
    """Centres of ``k``-means on the rows of ``X`` (k-means++ seeding, then
    ``n_iter`` Lloyd steps; an emptied centre keeps its place)."""
    from sklearn.cluster import kmeans_plusplus

    k = min(k, X.shape[0])
    seed = int(rng.integers(np.iinfo(np.int32).max))
    centers, _ = kmeans_plusplus(X, k, random_state=seed)
    centers = centers.astype(X.dtype, copy=False)
    for _ in range(n_iter):
        lab = _assign(X, centers)
        counts = np.bincount(lab, minlength=k)
        sums = np.stack([np.bincount(lab, weights=X[:, j], minlength=k)
                         for j in range(X.shape[1])], axis=1)
        full = counts > 0
        new = centers.copy()
        new[full] = (sums[full] / counts[full, None]).astype(X.dtype)
        if np.allclose(new, centers):
            break
        centers = new
    return centers


class ColorTextureFeatures:
    """Offline colour + multi-scale texture + weak position token features.

    The default extractor of :class:`~sklearn_falcon.ImageSegmenter`
    (``model="color"``): no weights, deterministic for a fixed
    ``random_state``.  Each ``patch_size`` cell is described by the
    histograms, over the cells around it weighted by a Gaussian of
    ``0.75 window`` cells of standard deviation, of per-pixel
    texture words (k-means centres of a Gaussian-derivative filter bank on
    L* at the scales ``sigmas``) and colour words (k-means centres of
    L*a*b*), learned on the image itself.  The feature is the Hellinger
    embedding of the histograms (so the cosine of two tokens is the
    Bhattacharyya coefficient of their histograms), plus random Fourier
    features of the cell centre weighted by ``position_weight``.

    With the true number of segments, the pipeline reaches a mean mIoU of
    0.81 on the mosaics of real photographs and textures of
    ``benchmarks/bench_mosaics.py`` (0.75 with
    :class:`ColorPositionFeatures`) and 0.96 on the synthetic benchmark of
    ``benchmarks/bench_segmentation.py`` (0.85); see the benchmark page.

    Parameters
    ----------
    patch_size : int, default=8
        Side of a grid cell (token) in pixels.
    n_texture_words : int, default=32
        Number of texture words (k-means centres of the filter responses).
    n_color_words : int, default=16
        Number of colour words (k-means centres of L*a*b*).
    window : int, default=2
        Scale, in cells, of the window of the word histograms: a Gaussian of
        standard deviation ``0.75 window`` cells (2: 1.5 cells, cut at 3
        standard deviations; 0: the cell alone); at most a sixteenth of the
        shorter grid side, so that small images keep their detail.  At most
        one word per 16 pixels of a ``(2 window + 1)^2``-cell square is
        learned (fewer words on small windows).
    sigmas : tuple of float, default=(1.0, 2.0, 4.0)
        Scales, in pixels, of the texture filter bank.
    position_weight : float, default=0.3
        Weight of the position term (0: none); the cosine of two tokens is
        ``(BC + position_weight**2 k) / (1 + position_weight**2)`` with
        ``BC`` the Bhattacharyya coefficient of their histograms and ``k``
        a Gaussian kernel of their distance.  A larger weight favours
        segments of similar size: 0.6 scores higher on the mosaics of
        ``benchmarks/bench_mosaics.py`` but loses small objects on a large
        background (``benchmarks/bench_position.py``).
    position_scale : float, default=0.3
        Bandwidth of that kernel, as a fraction of the longer image side.
    n_samples : int, default=8000
        Pixels sampled to learn the words.
    n_iter : int, default=30
        Lloyd iterations of the word k-means.
    random_state : int, default=0
        Seed of the pixel sample, the k-means seeding and the position
        features.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import ColorTextureFeatures
    >>> rng = np.random.default_rng(0)
    >>> img = rng.integers(0, 255, (32, 48, 3)).astype(np.uint8)
    >>> ext = ColorTextureFeatures()
    >>> feats = ext.extract(img)
    >>> feats.shape, feats.dtype
    ((4, 6, 112), dtype('float32'))
    """

    default_power = 6.0

    def __init__(
        self,
        patch_size=8,
        *,
        n_texture_words=32,
        n_color_words=16,
        window=2,
        sigmas=(1.0, 2.0, 4.0),
        position_weight=0.3,
        position_scale=0.3,
        n_samples=8000,
        n_iter=30,
        random_state=0,
    ):
        self.patch_size = (check_int("patch_size", patch_size, 1),) * 2
        self.n_texture_words = check_int("n_texture_words", n_texture_words, 1)
        self.n_color_words = check_int("n_color_words", n_color_words, 1)
        self.window = check_int("window", window, 0)
        self.n_samples = check_int("n_samples", n_samples, 1)
        self.n_iter = check_int("n_iter", n_iter, 0)
        try:
            sig = tuple(float(s) for s in sigmas)
        except TypeError:
            sig = ()
        if not sig or not all(np.isfinite(s) and s > 0 for s in sig):
            raise ValueError(
                "sigmas must be a non-empty sequence of positive numbers; got "
                f"{sigmas!r}.")
        self.sigmas = sig
        self.position_weight, self.position_scale = check_position(position_weight,
                                                                   position_scale)
        self.random_state = check_seed(random_state, type(self).__name__)
        self._basis = fourier_basis(random_state)

    @property
    def n_features(self):
        """Length of a token's feature vector."""
        pos = N_POSITION if self.position_weight > 0 else 0
        return self.n_texture_words + self.n_color_words + pos

    def word_maps(self, rgb, n_words=None):
        """Per-pixel texture and colour words of an image.

        Parameters
        ----------
        rgb : ndarray of shape (H, W, 3), uint8
            The image (or float in [0, 1], 16-bit); another image
            :func:`load_image` takes (a PIL image, a tensor, a path) is
            converted by it, as by :meth:`TimmFeatures.preprocess`.
        n_words : (int, int), default=None
            Numbers of texture and colour words to learn, at most
            ``n_texture_words`` and ``n_color_words`` (those when None).

        Returns
        -------
        texture_words : ndarray of shape (H, W), int64
            Ids in ``[0, n_texture_words)``.
        color_words : ndarray of shape (H, W), int64
            Ids in ``[0, n_color_words)``.
        """
        # small products on many BLAS threads crawl on a busy machine (15x
        # slower on 2 shared cores): one thread, as during a Falcon fit
        top = (self.n_texture_words, self.n_color_words)
        if n_words is None:
            n_words = top
        # 0 words gave the id -1, more than ``top`` ids past the documented
        # range (and a fraction kmeans_plusplus's "n_clusters" error)
        k = tuple(n_words) if np.ndim(n_words) == 1 else ()
        if len(k) != 2 or not all(
                isinstance(v, numbers.Integral) and not isinstance(v, bool)
                and 1 <= v <= m for v, m in zip(k, top)):
            raise ValueError(
                f"n_words must be two integers in [1, {top[0]}] and [1, {top[1]}] "
                f"(n_texture_words, n_color_words); got {n_words!r}.")
        with fit_threads(None, limit_blas=True):
            return self._word_maps(as_rgb(rgb), *n_words)

    def _word_maps(self, rgb, n_tex, n_col):
        from scipy import ndimage as ndi

        rgb = np.asarray(rgb)
        h, w = rgb.shape[:2]
        lab = rgb_to_lab(rgb)
        rng = generator(self.random_state)
        n = h * w
        sample = rng.choice(n, size=min(self.n_samples, n), replace=False)
        # filter responses and colours are in L*a*b* units; /10 keeps the
        # squared distances of the k-means in a comfortable float32 range
        fb = _filter_bank(lab[..., 0], self.sigmas).reshape(n, -1)
        fb *= 0.1
        # pixels whose filter responses stay under the noise floor are "flat":
        # one word of their own, so that flat regions share one texture
        # histogram instead of a random one over words of noise
        flat = np.einsum("ij,ij->i", fb, fb) < _FLAT * _FLAT
        tex = np.full(n, n_tex - 1, dtype=np.int64)
        textured = sample[~flat[sample]]
        if n_tex > 1 and textured.size:
            centers = _kmeans(fb[textured], n_tex - 1, rng, self.n_iter)
            tex[~flat] = _assign(fb[~flat], centers)
        del fb
        col = ndi.gaussian_filter(lab, (1.0, 1.0, 0.0)).reshape(n, 3)
        col *= 0.1
        colw = _assign(col, _kmeans(col[sample], n_col, rng, self.n_iter))
        return tex.reshape(h, w), colw.reshape(h, w)

    def extract(self, rgb):
        """Token grid of features for the cosine affinity.

        Parameters
        ----------
        rgb : ndarray of shape (H, W, 3), uint8
            The image (or float in [0, 1], 16-bit); another image
            :func:`load_image` takes (a PIL image, a tensor, a path) is
            converted by it, as by :meth:`TimmFeatures.preprocess`.

        Returns
        -------
        features : ndarray of shape (H // patch, W // patch, n_features), float32
            Unit-norm histogram part plus the weighted position part.
        """
        rgb = as_rgb(rgb)
        check_image_size(rgb, self.patch_size)
        h, w = rgb.shape[:2]
        gh, gw = h // self.patch_size[0], w // self.patch_size[1]
        re, ce = _cell_edges(h, gh), _cell_edges(w, gw)
        cell = (np.repeat(np.arange(gh), np.diff(re))[:, None] * gw
                + np.repeat(np.arange(gw), np.diff(ce))[None, :]).ravel()
        r = min(self.window, min(gh, gw) // 16)
        # a histogram of a few dozen pixels cannot fill many words: on small
        # images (small windows) fewer words are learned, 16 pixels a word
        window_px = (2 * r + 1) ** 2 * self.patch_size[0] * self.patch_size[1]
        learn = [min(k, max(2, window_px // 16))
                 for k in (self.n_texture_words, self.n_color_words)]
        blocks = []
        for words, n_words in zip(self.word_maps(rgb, learn),
                                  (self.n_texture_words, self.n_color_words)):
            counts = np.bincount(cell * n_words + words.ravel(),
                                 minlength=gh * gw * n_words)
            counts = counts.reshape(gh, gw, n_words).astype(np.float64)
            hist = _window_sum(counts, r)
            hist = np.maximum(hist, 0.0)  # the filter's round-off
            hist /= hist.sum(axis=-1, keepdims=True)
            blocks.append(np.sqrt(hist))
        z = np.concatenate(blocks, axis=-1)
        z /= np.linalg.norm(z, axis=-1, keepdims=True)
        if self.position_weight > 0:
            pz = position_features(grid_positions(re, ce), self._basis,
                                   self.position_weight, self.position_scale)
            z = np.concatenate([z, pz], axis=-1)
        return z.astype(np.float32)
