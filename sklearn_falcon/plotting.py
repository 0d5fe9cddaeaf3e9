"""Plotting helpers: colours for label maps and image overlays.

These are the helpers of the gallery examples and of the ``sklearn-falcon
segment`` command; they need only NumPy (draw the results with matplotlib,
or save them with Pillow).
"""

import operator
import os
from numbers import Real

import numpy as np

__all__ = ["label_colors", "overlay"]

_PALETTE = np.array(
    [
        [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
        [245, 130, 48], [145, 30, 180], [70, 240, 240], [240, 50, 230],
        [210, 245, 60], [250, 190, 212], [0, 128, 128], [220, 190, 255],
        [170, 110, 40], [255, 250, 200], [128, 0, 0], [170, 255, 195],
        [128, 128, 0], [255, 215, 180], [0, 0, 128], [128, 128, 128],
    ],
    dtype=np.uint8,
)
# label ids below this are coloured by id (label_colors(id)); a map with
# other ids (negative, larger, not integers) by the rank of its ids
_BY_ID = 65536


def label_colors(n_labels):
    """``n_labels`` distinct RGB colours, one per segment id.

    The first 20 are a fixed palette of well separated colours; further ones
    are drawn at random with a fixed seed, so a label always gets the same
    colour.

    Parameters
    ----------
    n_labels : int
        Number of colours.

    Returns
    -------
    colors : ndarray of shape (n_labels, 3), uint8

    Examples
    --------
    >>> from sklearn_falcon.plotting import label_colors
    >>> label_colors(2)
    array([[230,  25,  75],
           [ 60, 180,  75]], dtype=uint8)
    >>> label_colors(30).shape
    (30, 3)
    """
    try:
        n_labels = operator.index(n_labels)  # an integer, NumPy's included
    except TypeError:
        raise TypeError(
            f"n_labels must be an integer; got n_labels={n_labels!r}.") from None
    if n_labels < 0:
        raise ValueError(f"n_labels must be >= 0; got n_labels={n_labels}.")
    extra = np.random.default_rng(0).integers(
        0, 256, (max(0, n_labels - len(_PALETTE)), 3))
    return np.concatenate([_PALETTE, extra.astype(np.uint8)])[:n_labels]


def overlay(image, labels, *, alpha=0.5):
    """Blend ``image`` with one colour per segment and mark boundaries.

    Parameters
    ----------
    image : ndarray of shape (H, W, 3), uint8, or PIL image
        The image; greyscale ``(H, W)`` or ``(H, W, 1)`` is shown in grey and
        an alpha channel (``(H, W, 2)`` grey and alpha, ``(H, W, 4)``) is
        ignored, as :func:`~sklearn_falcon.image.load_image` reads them; an
        8-bit PIL image of any
        mode (palette, CMYK, ...) is shown in its colours.  Other dtypes are
        refused: :func:`sklearn_falcon.image.load_image` converts any image
        to this form.
    labels : ndarray of shape (H, W), int
        Segment ids (NaN is refused).  In a map whose ids are all integers
        in ``0..65535``, id ``i`` takes colour ``label_colors(i)``, so an
        id has the same colour in every such map (the frames of
        :meth:`~sklearn_falcon.ImageSegmenter.segment_video`); a map with
        any other id (negative, larger, a float or a string) is coloured
        by the rank of its ids, its ids in ``0..65535`` included.
    alpha : float in [0, 1], default=0.5
        Weight of the segment colours (:func:`label_colors`).

    Returns
    -------
    out : ndarray of shape (H, W, 3), uint8
        The blend, with the boundaries between segments drawn in white.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.plotting import overlay
    >>> overlay(np.zeros((2, 2, 3), np.uint8), np.array([[0, 1], [0, 1]])).shape
    (2, 2, 3)
    """
    if isinstance(image, (str, bytes, os.PathLike)):  # it said "got shape ()"
        raise TypeError(
            f"image must be an image array or a PIL image; got the path {image!r}: "
            "read it with sklearn_falcon.image.load_image(path).")
    mode = getattr(image, "mode", None) if type(image).__module__.startswith(
        "PIL.") else None
    if mode is not None and mode not in ("RGB", "RGBA", "L") and not mode.startswith(
            ("I", "F")):  # (16-bit, float: refused by their dtype below)
        # NumPy reads a palette image's indices as grey and CMYK's four inks
        # (YCbCr's, LAB's channels) as RGB(A): the overlay showed them
        image = image.convert("RGBA")
    image = np.asarray(image)
    labels = np.asarray(labels)
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3 or image.shape[2] not in (1, 2, 3, 4):
        raise ValueError(
            "image must have shape (H, W), (H, W, 1), (H, W, 2), (H, W, 3) or "
            f"(H, W, 4); got shape {image.shape}.")
    if labels.shape != image.shape[:2]:
        raise ValueError(
            f"labels must have the image's shape {image.shape[:2]}; got "
            f"{labels.shape}.")
    if labels.dtype.kind not in "biufUSO":  # complex: coloured by its real part
        raise ValueError(
            f"labels must be integers or strings; got dtype={labels.dtype}.")
    if labels.dtype.kind == "f" and np.isnan(labels).any():
        # NaN != NaN: every NaN pixel was drawn as a boundary, in white
        raise ValueError(
            "labels must be integers or strings; got the value nan of "
            f"dtype={labels.dtype} ({int(np.isnan(labels).sum())} pixels).")
    if image.dtype != np.uint8:
        raise TypeError(
            f"image must be uint8 RGB; got dtype={image.dtype}. "
            "sklearn_falcon.image.load_image converts it.")
    # (None compared: "'<=' not supported between ... 'float' and 'NoneType'")
    if not (isinstance(alpha, Real) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha must be in [0, 1]; got {alpha!r}.")
    if image.shape[2] != 3:  # grey to three channels, alpha dropped
        # (grey and alpha, (H, W, 2), as load_image and ImageSegmenter take it)
        image = (np.repeat(image[:, :, :1], 3, axis=2) if image.shape[2] <= 2
                 else image[:, :, :3])
    if not labels.size:
        return image.copy()
    if (np.issubdtype(labels.dtype, np.integer) and labels.min() >= 0
            and labels.max() < _BY_ID):
        ids = labels  # its own colour: the same id, the same colour in any map
    else:
        ids = np.unique(labels, return_inverse=True)[1].reshape(labels.shape)
    palette = label_colors(int(ids.max()) + 1).astype(np.float64)
    out = (1 - alpha) * image.astype(np.float64) + alpha * palette[ids]
    edge = np.zeros(labels.shape, bool)
    edge[:-1] |= labels[:-1] != labels[1:]
    edge[:, :-1] |= labels[:, :-1] != labels[:, 1:]
    out[edge] = 255.0
    return np.clip(np.round(out), 0, 255).astype(np.uint8)
