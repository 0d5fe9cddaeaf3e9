"""PAMR: pixel-adaptive mask refinement (Araslanov & Roth, CVPR 2020).

The label map is refined by repeatedly averaging one-hot label masks over
dilated 3x3 neighbourhoods, with weights given by a softmax over image-colour
differences normalized by the local colour spread. Because every update is a
convex combination of the current masks, the refined arg-max only uses label
ids already present: the number of segments can never increase.
"""

import numbers

import numpy as np
from numba import njit

__all__ = ["pamr"]


def _offsets(dilations):
    offs = []
    for d in dilations:
        for dy in (-d, 0, d):
            for dx in (-d, 0, d):
                if dy or dx:
                    offs.append((dy, dx))
    return np.asarray(offs, dtype=np.int64)


@njit(cache=True, nogil=True)
def _affinities(img, offs, dilations):  # pragma: no cover - compiled
    h, w, c = img.shape
    p = offs.shape[0]
    nd = dilations.shape[0]
    aff = np.empty((h, w, p), dtype=np.float32)
    std = np.empty(c, dtype=np.float64)
    vals = np.empty(p, dtype=np.float64)
    n_std = p + nd  # the 8 neighbours and the centre, per dilation
    for y in range(h):
        for x in range(w):
            for ch in range(c):
                centre = img[y, x, ch]
                s = nd * centre
                s2 = nd * centre * centre
                for q in range(p):
                    yy = min(max(y + offs[q, 0], 0), h - 1)
                    xx = min(max(x + offs[q, 1], 0), w - 1)
                    v = img[yy, xx, ch]
                    s += v
                    s2 += v * v
                m = s / n_std
                var = (s2 - n_std * m * m) / (n_std - 1)
                std[ch] = np.sqrt(max(var, 0.0))
            vmax = -np.inf
            for q in range(p):
                yy = min(max(y + offs[q, 0], 0), h - 1)
                xx = min(max(x + offs[q, 1], 0), w - 1)
                acc = 0.0
                for ch in range(c):
                    acc -= abs(img[yy, xx, ch] - img[y, x, ch]) / (1e-8 + 0.1 * std[ch])
                acc /= c
                vals[q] = acc
                if acc > vmax:
                    vmax = acc
            tot = 0.0
            for q in range(p):
                vals[q] = np.exp(vals[q] - vmax)
                tot += vals[q]
            for q in range(p):
                aff[y, x, q] = vals[q] / tot
    return aff


@njit(cache=True, nogil=True)
def _propagate(mask, aff, offs, n_iter):  # pragma: no cover - compiled
    h, w, k = mask.shape
    p = offs.shape[0]
    cur = mask.copy()
    nxt = np.empty_like(mask)
    for _ in range(n_iter):
        for y in range(h):
            for x in range(w):
                for j in range(k):
                    nxt[y, x, j] = 0.0
                for q in range(p):
                    yy = min(max(y + offs[q, 0], 0), h - 1)
                    xx = min(max(x + offs[q, 1], 0), w - 1)
                    a = aff[y, x, q]
                    for j in range(k):
                        nxt[y, x, j] += a * cur[yy, xx, j]
        cur, nxt = nxt, cur
    return cur


def pamr(image, labels, *, n_iter=10, dilations=(1, 2, 4, 8, 12, 24)):
    """Refine a label map with PAMR using the image colours.

    Parameters
    ----------
    image : ndarray of shape (H, W, 3)
        The image (``uint8`` or float); only colour differences relative to
        the local spread matter, so the scale is irrelevant.
    labels : ndarray of shape (H, W), int
        Initial label map.
    n_iter : int, default=10
        Number of propagation steps.
    dilations : tuple of int, default=(1, 2, 4, 8, 12, 24)
        Dilations of the 3x3 neighbourhoods (the PAMR paper's values).

    Returns
    -------
    refined : ndarray of shape (H, W), same dtype as ``labels``
        Refined labels; their set is a subset of the input's.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import pamr
    >>> img = np.zeros((8, 8, 3), np.uint8); img[:, 4:] = 255
    >>> lab = np.zeros((8, 8), int); lab[:, 3:] = 1   # boundary one pixel off
    >>> pamr(img, lab, dilations=(1, 2))[0]
    array([0, 0, 0, 0, 1, 1, 1, 1])
    """
    img = np.asarray(image)
    lab = np.asarray(labels)
    if img.ndim != 3 or img.shape[:2] != lab.shape:
        raise ValueError(
            f"image of shape {img.shape} and labels of shape {lab.shape} do not match; "
            "expected (H, W, C) and (H, W)."
        )
    if not isinstance(n_iter, numbers.Integral) or n_iter < 0:
        raise ValueError(f"n_iter must be a non-negative integer; got {n_iter!r}.")
    dil = np.asarray(dilations, dtype=np.int64).reshape(-1)
    if dil.size == 0 or np.any(dil < 1):
        raise ValueError(f"dilations must be positive integers; got {dilations!r}.")
    uniq, inv = np.unique(lab, return_inverse=True)
    if len(uniq) <= 1 or n_iter == 0:
        return lab.copy()
    h, w = lab.shape
    offs = _offsets(dil.tolist())
    aff = _affinities(np.ascontiguousarray(img, dtype=np.float64), offs, dil)
    mask = np.zeros((h, w, len(uniq)), dtype=np.float32)
    mask.reshape(-1, len(uniq))[np.arange(h * w), inv.reshape(-1)] = 1.0
    out = _propagate(mask, aff, offs, int(n_iter))
    return uniq[np.argmax(out, axis=2)].astype(lab.dtype, copy=False)
