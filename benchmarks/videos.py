"""A synthetic video of moving textured shapes with known region maps.

The background is a texture (a crop of scikit-image's ``grass``, as in
:mod:`benchmarks.mosaics`); two textured shapes (a disc cut from ``coffee``
and a square cut from ``immunohistochemistry``) move across it in straight
lines, bouncing off the borders, a few pixels per frame.  Everything is
deterministic given ``seed``.

>>> from benchmarks.videos import make_moving_shapes
>>> frames, truths = make_moving_shapes(3, size=64, seed=0)
>>> len(frames), frames[0].shape, truths[0].shape, int(truths[0].max())
(3, (64, 64, 3), (64, 64), 2)
"""

import numpy as np

from benchmarks.mosaics import _crop, load_source

__all__ = ["make_moving_shapes", "static_pixels"]


def make_moving_shapes(n_frames, size=256, seed=0, *, speed=4.0):
    """``n_frames`` frames and their region maps (ids 0..2).

    Regions: 0 the background, 1 a disc and 2 a square (the square passes
    under the disc), each shape moving ``speed`` pixels per frame (scaled
    with ``size / 256``) in a seed-dependent direction.

    Returns
    -------
    frames : list of ndarray of shape (size, size, 3), uint8
    truths : list of ndarray of shape (size, size), int64
    """
    rng = np.random.default_rng(seed)
    back = _crop(load_source("grass"), size, rng)
    r = size // 6
    disc_tex = _crop(load_source("coffee"), 2 * r, rng)
    square_tex = _crop(load_source("immunohistochemistry"), 2 * r, rng)
    step = speed * size / 256.0
    p_disc = np.array([size * 0.3, size * 0.25])
    p_sq = np.array([size * 0.65, size * 0.3])
    a1, a2 = rng.uniform(0, 2 * np.pi, 2)
    v_disc = step * np.array([np.sin(a1), np.cos(a1)])
    v_sq = step * np.array([np.sin(a2), np.cos(a2)])
    frames, truths = [], []
    ly, lx = np.mgrid[0:2 * r, 0:2 * r]
    disc_mask = (ly - r + 0.5) ** 2 + (lx - r + 0.5) ** 2 <= r * r
    for t in range(n_frames):
        img = back.copy()
        truth = np.zeros((size, size), dtype=np.int64)
        for pos, vel, tex, mask, rid in ((p_sq, v_sq, square_tex, None, 2),
                                         (p_disc, v_disc, disc_tex, disc_mask, 1)):
            c = pos + t * vel
            c = np.abs(np.mod(c - r, 2 * (size - 2 * r))
                       - (size - 2 * r)) + r  # bounce off the borders
            y0, x0 = int(round(c[0] - r)), int(round(c[1] - r))
            m = np.ones((2 * r, 2 * r), bool) if mask is None else mask
            img[y0:y0 + 2 * r, x0:x0 + 2 * r][m] = tex[m]
            truth[y0:y0 + 2 * r, x0:x0 + 2 * r][m] = rid
        frames.append(img)
        truths.append(truth)
    return frames, truths


def static_pixels(frames, truths, t):
    """Pixels that did not move between frames ``t - 1`` and ``t``: same
    region and same colour in both frames."""
    same_region = truths[t] == truths[t - 1]
    same_colour = np.all(frames[t] == frames[t - 1], axis=-1)
    return same_region & same_colour
