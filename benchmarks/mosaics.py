"""Mosaics of real photographs and textures: a segmentation benchmark dataset.

Each image is a Voronoi partition of a ``size x size`` square into 3 to 6
regions; every region shows a crop of a different image bundled with
scikit-image (colour photographs such as ``astronaut``, ``coffee`` or
``rocket``, and grey textures such as ``brick``, ``grass`` and ``gravel``),
taken at a random position and scale and flipped at random. Regions therefore
differ by texture and content, not by a flat colour, and a region may itself
contain edges (a crop of ``astronaut`` shows a face and a suit): the ground
truth is "which source image", which is what a segmenter that follows objects
and textures should recover.

Everything is deterministic given ``seed``; no file is downloaded (only the
images shipped inside the scikit-image wheel are used).

>>> from benchmarks.mosaics import make_mosaics
>>> image, truth = make_mosaics(1, size=64, seed=0)[0]
>>> image.shape, image.dtype, truth.shape, bool(3 <= truth.max() + 1 <= 6)
((64, 64, 3), dtype('uint8'), (64, 64), True)
"""

from functools import lru_cache

import numpy as np

__all__ = ["SOURCES", "make_mosaic", "make_mosaics", "load_source"]

#: scikit-image loaders used as region sources, with the fraction of the
#: source kept around its centre before cropping (retina and hubble have wide
#: black margins that would make two regions identical).
SOURCES = {
    # colour photographs
    "astronaut": 1.0,
    "chelsea": 1.0,
    "coffee": 1.0,
    "rocket": 1.0,
    "immunohistochemistry": 1.0,
    "retina": 0.55,
    "hubble_deep_field": 1.0,
    "stereo_motorcycle": 1.0,
    # grey textures and photographs
    "brick": 1.0,
    "grass": 1.0,
    "gravel": 1.0,
    "moon": 1.0,
    "camera": 1.0,
    "coins": 1.0,
    "clock": 1.0,
}


@lru_cache(maxsize=None)
def load_source(name):
    """One source image as ``uint8`` RGB, trimmed to its central part.

    Parameters
    ----------
    name : str
        A key of :data:`SOURCES` (a ``skimage.data`` loader name).

    Returns
    -------
    rgb : ndarray of shape (h, w, 3), uint8
        Read-only (cached).
    """
    from skimage import data

    if name not in SOURCES:
        raise ValueError(f"name must be one of {sorted(SOURCES)}; got {name!r}.")
    img = getattr(data, name)()
    if isinstance(img, tuple):  # stereo_motorcycle -> (left, right, disparity)
        img = img[0]
    img = np.asarray(img)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    img = img[..., :3].astype(np.uint8)
    keep = SOURCES[name]
    if keep < 1.0:
        h, w = img.shape[:2]
        dh, dw = int(h * (1 - keep) / 2), int(w * (1 - keep) / 2)
        img = img[dh:h - dh, dw:w - dw]
    img = np.ascontiguousarray(img)
    img.setflags(write=False)
    return img


def _voronoi(size, n_regions, rng):
    """A label map of ``n_regions`` well-spread, slightly warped Voronoi cells."""
    from .bench_segmentation import voronoi_regions

    truth = voronoi_regions(size, n_regions, rng, warp=size / 40.0).astype(np.int64)
    # relabel so that every id 0..n-1 is present (a tiny cell could vanish)
    _, truth = np.unique(truth, return_inverse=True)
    return truth.reshape(size, size)


def _crop(src, size, rng):
    """A random ``size x size`` view of ``src``: window of 35-100 % of the
    shorter side, random position, random horizontal flip, resized."""
    from skimage.transform import resize

    h, w = src.shape[:2]
    side = int(round(min(h, w) * rng.uniform(0.35, 1.0)))
    side = max(side, 16)
    y0 = int(rng.integers(0, h - side + 1))
    x0 = int(rng.integers(0, w - side + 1))
    win = src[y0:y0 + side, x0:x0 + side]
    if rng.random() < 0.5:
        win = win[:, ::-1]
    out = resize(win, (size, size), order=1, anti_aliasing=side > size,
                 preserve_range=True)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def make_mosaic(n_regions, size=256, *, seed=0, sources=None):
    """One mosaic with ``n_regions`` regions.

    Parameters
    ----------
    n_regions : int
        Number of Voronoi regions (each shows a different source).
    size : int, default=256
        Image side in pixels.
    seed : int, default=0
        Seed of the layout, the sources and the crops.
    sources : sequence of str, default=None
        Source names to draw from (all of :data:`SOURCES` when None); at
        least ``n_regions`` of them.

    Returns
    -------
    image : ndarray of shape (size, size, 3), uint8
    truth : ndarray of shape (size, size), int64
        Region ids ``0..n_regions-1``.
    """
    names = sorted(SOURCES) if sources is None else list(sources)
    if not 1 <= n_regions <= len(names):
        raise ValueError(
            f"n_regions must be in [1, {len(names)}] (one source per region); "
            f"got {n_regions!r}.")
    rng = np.random.default_rng(seed)
    truth = _voronoi(size, n_regions, rng)
    picked = rng.choice(len(names), size=int(truth.max()) + 1, replace=False)
    image = np.empty((size, size, 3), dtype=np.uint8)
    for region, idx in enumerate(picked):
        crop = _crop(load_source(names[idx]), size, rng)
        sel = truth == region
        image[sel] = crop[sel]
    return image, truth


def make_mosaics(n_images, size=256, seed=0, *, min_regions=3, max_regions=6):
    """``n_images`` mosaics with ``min_regions`` to ``max_regions`` regions each.

    Parameters
    ----------
    n_images : int
        Number of mosaics.
    size : int, default=256
        Image side in pixels.
    seed : int, default=0
        Seed of the whole set: the same seed gives the same list.
    min_regions, max_regions : int, default=3, 6
        Range (inclusive) of the number of regions, drawn uniformly per image.

    Returns
    -------
    mosaics : list of (image, truth)
        ``image`` is ``(size, size, 3)`` uint8, ``truth`` is ``(size, size)``
        int64 with ids ``0..K-1`` (``K = truth.max() + 1``).

    Examples
    --------
    >>> from benchmarks.mosaics import make_mosaics
    >>> a = make_mosaics(2, size=32, seed=3)
    >>> b = make_mosaics(2, size=32, seed=3)
    >>> all((x[0] == y[0]).all() and (x[1] == y[1]).all() for x, y in zip(a, b))
    True
    """
    if not 1 <= min_regions <= max_regions:
        raise ValueError(
            f"need 1 <= min_regions <= max_regions; got {min_regions}, {max_regions}.")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(int(n_images)):
        k = int(rng.integers(min_regions, max_regions + 1))
        out.append(make_mosaic(k, size, seed=int(rng.integers(2**31))))
    return out
