"""Objects on a background: a segmentation set of unequal regions.

Each image is a crop of one scikit-image photograph or texture (the
background) with one to three objects pasted on it: discs, ellipses or
rectangles, each a crop of another source, each covering a random fraction
of the image (2 % to 25 % by default), never overlapping.  Unlike the Voronoi
mosaics (:mod:`benchmarks.mosaics`), whose regions have similar sizes, the
background here covers most of the image, as in a photograph of a few
objects: a segmenter that favours segments of similar size cuts the
background where it should find the objects.

Everything is deterministic given ``seed``; the sources are those of
:data:`benchmarks.mosaics.SOURCES` (bundled with scikit-image).

>>> from benchmarks.objects import make_objects
>>> image, truth = make_objects(1, size=64, seed=0)[0]
>>> image.shape, truth.shape, bool(2 <= truth.max() + 1 <= 4)
((64, 64, 3), (64, 64), True)
"""

import numpy as np

from benchmarks.mosaics import SOURCES, _crop, load_source

__all__ = ["make_objects"]

# placements tried per object before it is left out (it would overlap)
_TRIES = 50


def _shape_mask(yy, xx, area, kind, aspect, centre):
    """Boolean mask, on the pixel grid ``yy, xx``, of an ellipse (``kind`` 0)
    or a rectangle of ``area`` pixels, width/height ``aspect``, centred at
    ``centre``; None when it does not fit in the image."""
    size = yy.shape[0]
    if kind == 0:
        a = np.sqrt(area / np.pi * aspect)  # half-width
        b = area / (np.pi * a)  # half-height
    else:
        a = np.sqrt(area * aspect) / 2
        b = area / (4 * a)
    cy, cx = centre
    if not (b <= cy <= size - b and a <= cx <= size - a):
        return None
    if kind == 0:
        return ((yy - cy) / b) ** 2 + ((xx - cx) / a) ** 2 <= 1
    return (np.abs(yy - cy) <= b) & (np.abs(xx - cx) <= a)


def make_object_image(fractions, size=256, *, rng):
    """One image: a background and one object per entry of ``fractions``
    (the object's area over the image's).

    Returns
    -------
    image : ndarray of shape (size, size, 3), uint8
    truth : ndarray of shape (size, size), int64
        0 the background, ``1..m`` the objects that could be placed.
    """
    names = sorted(SOURCES)
    picked = rng.choice(len(names), size=len(fractions) + 1, replace=False)
    image = _crop(load_source(names[picked[0]]), size, rng).copy()
    truth = np.zeros((size, size), dtype=np.int64)
    yy, xx = np.mgrid[0:size, 0:size]
    n_obj = 0
    for frac, src in zip(fractions, picked[1:]):
        kind, aspect = int(rng.integers(3)), rng.uniform(0.6, 1.6)
        for _ in range(_TRIES):
            m = _shape_mask(yy, xx, frac * size * size, min(kind, 1), aspect,
                            rng.uniform(0, size, 2))
            if m is not None and not truth[m].any():
                break
        else:
            continue
        tex = _crop(load_source(names[src]), size, rng)
        n_obj += 1
        image[m] = tex[m]
        truth[m] = n_obj
    return image, truth


def make_objects(n_images, size=256, seed=0, *, max_objects=3, min_fraction=0.02,
                 max_fraction=0.25):
    """``n_images`` images of 1 to ``max_objects`` objects on a background.

    Parameters
    ----------
    n_images : int
    size : int, default=256
        Image side in pixels.
    seed : int, default=0
        Seed of the whole set: the same seed gives the same list.
    max_objects : int, default=3
    min_fraction, max_fraction : float, default=0.02, 0.25
        Range of an object's area, as a fraction of the image's.

    Returns
    -------
    list of (image, truth)
        ``truth`` ids ``0..m``: 0 the background, at least one object.
    """
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n_images:
        k = int(rng.integers(1, max_objects + 1))
        image, truth = make_object_image(rng.uniform(min_fraction, max_fraction, k),
                                         size, rng=rng)
        if truth.max() > 0:
            out.append((image, truth))
    return out
