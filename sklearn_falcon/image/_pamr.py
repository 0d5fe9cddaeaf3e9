"""PAMR: pixel-adaptive mask refinement (Araslanov & Roth, CVPR 2020).

The label map is refined by repeatedly averaging one-hot label masks over
dilated 3x3 neighbourhoods, with weights given by a softmax over image-colour
differences normalized by the local colour spread. Because every update is a
convex combination of the current masks, the refined arg-max only uses label
ids already present: the number of segments can never increase.
"""

from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import Interval, validate_params

from .._jit import jit, pjit, prange
from .._memory import check_allocation
from .._threads import fit_threads
from ._upsample import _colours, torch_device_of

__all__ = ["pamr"]


def _offsets(dilations):
    offs = []
    for d in dilations:
        for dy in (-d, 0, d):
            for dx in (-d, 0, d):
                if dy or dx:
                    offs.append((dy, dx))
    return np.asarray(offs, dtype=np.int64)


@jit
def _clamped_span(x_shift, w):  # pragma: no cover - compiled
    """``(x0, x1)``: for ``x < x0`` the column ``x + x_shift`` is left of a row
    of ``w`` pixels, for ``x >= x1`` right of it, and inside in between."""
    x0 = min(max(-x_shift, 0), w)
    return x0, max(min(w - x_shift, w), x0)


@pjit
def _affinities(img, offs, dilations):  # pragma: no cover - compiled
    """Softmax weights ``(P, H, W)`` of each pixel's ``P`` dilated neighbours.

    ``img`` is channel-first ``(C, H, W)``.  Weights are
    ``softmax_q(-mean_c |I_c(x + o_q) - I_c(x)| / (1e-8 + 0.1 std_c(x)))``
    with ``std_c(x)`` the spread of channel ``c`` over the centre and its
    neighbours (the centre counted once per dilation); neighbours outside
    the image are clamped to the border.  Rows are computed independently,
    element by element along the row (which vectorizes), so the result does
    not depend on the number of threads.
    """
    c, h, w = img.shape
    p = offs.shape[0]
    nd = dilations.shape[0]
    aff = np.empty((p, h, w), dtype=np.float32)
    n_std = p + nd  # the 8 neighbours and the centre, per dilation
    for y in prange(h):
        nb = np.empty((p, c, w), dtype=np.float64)  # neighbour q of each pixel
        for q in range(p):
            yy = min(max(y + offs[q, 0], 0), h - 1)
            dx = offs[q, 1]
            x0, x1 = _clamped_span(dx, w)
            for ch in range(c):
                row = img[ch, yy]
                dst = nb[q, ch]
                for x in range(x0):
                    dst[x] = row[0]
                dst[x0:x1] = row[x0 + dx:x1 + dx]
                for x in range(x1, w):
                    dst[x] = row[w - 1]
        std = np.empty((c, w), dtype=np.float64)
        s = np.empty(w, dtype=np.float64)
        s2 = np.empty(w, dtype=np.float64)
        for ch in range(c):
            centre = img[ch, y]
            for x in range(w):
                s[x] = nd * centre[x]
                s2[x] = nd * centre[x] * centre[x]
            for q in range(p):
                v = nb[q, ch]
                for x in range(w):
                    s[x] += v[x]
                    s2[x] += v[x] * v[x]
            sd = std[ch]
            for x in range(w):
                m = s[x] / n_std
                sd[x] = np.sqrt(max((s2[x] - n_std * m * m) / (n_std - 1), 0.0))
        vals = np.zeros((p, w), dtype=np.float64)
        vmax = np.full(w, -np.inf)
        for q in range(p):
            acc = vals[q]
            for ch in range(c):
                v = nb[q, ch]
                centre = img[ch, y]
                sd = std[ch]
                for x in range(w):
                    acc[x] -= abs(v[x] - centre[x]) / (1e-8 + 0.1 * sd[x])
            for x in range(w):
                acc[x] /= c
                vmax[x] = max(vmax[x], acc[x])
        tot = np.zeros(w, dtype=np.float64)
        for q in range(p):
            acc = vals[q]
            for x in range(w):
                acc[x] = np.exp(acc[x] - vmax[x])
                tot[x] += acc[x]
        for q in range(p):
            acc = vals[q]
            out = aff[q, y]
            for x in range(w):
                out[x] = acc[x] / tot[x]
    return aff


@pjit
def _propagate(mask, aff, offs, n_iter):  # pragma: no cover - compiled
    """``n_iter`` steps of ``m(x) <- sum_q aff_q(x) m(x + offset_q)`` on ``(K, H, W)``.

    Neighbours outside the image are clamped to the border.  Each row is
    computed from the previous step only, one offset at a time along
    contiguous runs of the row (the interior needs no clamping), so every
    pixel sums its neighbours in the same order on any number of threads.
    """
    k, h, w = mask.shape
    p = offs.shape[0]
    cur = mask.copy()
    nxt = np.empty_like(mask)
    for _ in range(n_iter):
        for y in prange(h):
            for j in range(k):
                for x in range(w):
                    nxt[j, y, x] = 0.0
            for q in range(p):
                yy = min(max(y + offs[q, 0], 0), h - 1)
                dx = offs[q, 1]
                x0, x1 = _clamped_span(dx, w)
                a = aff[q, y]
                a_in = a[x0:x1]
                for j in range(k):
                    out = nxt[j, y]
                    src = cur[j, yy]
                    for x in range(x0):
                        out[x] += a[x] * src[0]
                    # the interior as aligned slices: unit-stride, no index
                    # arithmetic, so the loop vectorizes
                    out_in = out[x0:x1]
                    src_in = src[x0 + dx:x1 + dx]
                    for i in range(x1 - x0):
                        out_in[i] += a_in[i] * src_in[i]
                    for x in range(x1, w):
                        out[x] += a[x] * src[w - 1]
        cur, nxt = nxt, cur
    return cur


@validate_params(
    {
        "image": ["array-like"],
        "labels": ["array-like"],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "dilations": ["array-like"],
        "device": "no_validation",
    },
    prefer_skip_nested_validation=True,
)
def pamr(image, labels, *, n_iter=10, dilations=(1, 2, 4, 8, 12, 24), device=None):
    """Refine a label map with PAMR using the image colours.

    Parameters
    ----------
    image : ndarray of shape (H, W, C) or (H, W)
        The image (``uint8`` or float; RGB, or greyscale as ``(H, W)`` or
        ``(H, W, 1)``); only colour differences relative to the local
        spread matter, so the scale is irrelevant.
    labels : ndarray of shape (H, W), int
        Initial label map.
    n_iter : int, default=10
        Number of propagation steps.
    dilations : tuple of int, default=(1, 2, 4, 8, 12, 24)
        Dilations of the 3x3 neighbourhoods (the PAMR paper's values).
    device : str or torch.device, default=None
        ``None``: the Numba kernels, on the CPU.  A torch device
        (``"cuda"``, ``"cuda:N"``, ``"cpu"``, ``"auto"`` or a
        ``torch.device``): the torch twins
        of the kernels on that device (needs torch); the same refinement up
        to float rounding.

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
    dev = torch_device_of(device, "pamr")
    if lab.dtype.kind not in "biufUSO":  # complex labels came back complex
        raise ValueError(f"labels must be integers or strings; got dtype={lab.dtype}.")
    if img.ndim == 2:  # greyscale (it said "(H, W) and (H, W) do not match")
        img = img[:, :, None]
    # complex was cast to its real part (a ComplexWarning), text parsed
    img = _colours(img, "image")
    if img.ndim != 3 or img.shape[:2] != lab.shape:
        raise ValueError(
            f"image of shape {img.shape} and labels of shape {lab.shape} do not match; "
            "expected (H, W, C) and (H, W)."
        )
    if img.shape[2] == 0:  # 0 / 0 weights: every pixel took the first label
        raise ValueError(f"image of shape {img.shape} has no colour channel.")
    raw = np.asarray(dilations).reshape(-1)
    # (1.5,) was truncated to 1, silently, and "a" gave int()'s own message
    if raw.dtype.kind not in "iuf" or raw.size == 0 or not np.all(
            (raw >= 1) & (raw == np.floor(raw)) & np.isfinite(raw)):
        raise ValueError(f"dilations must be positive integers; got {dilations!r}.")
    # a shift past the image reads its border, as one of its size does (1e20
    # and 2**63 overflowed int64: "Python int too large to convert to C long")
    dil = np.minimum(raw, max(lab.shape + (1,))).astype(np.int64)
    uniq, inv = np.unique(lab, return_inverse=True)
    if len(uniq) <= 1 or n_iter == 0:
        return lab.copy()
    h, w = lab.shape
    offs = _offsets(dil.tolist())
    if dev is None:  # a float32 mask per label, thrice, and the weights
        n_floats = offs.shape[0] + 3 * len(uniq) + 2 * (img.shape[2] + 1)
        _check_memory(4 * h * w * n_floats, len(uniq), h, w)
    planes = np.ascontiguousarray(np.moveaxis(img, 2, 0), dtype=np.float64)
    if not np.all(np.isfinite(planes)):  # NaN weights: every pixel took label 0
        raise ValueError("image contains NaN or infinite values.")
    # the scale is irrelevant but for float64's range: squares past 1e153
    # overflow (NaN weights) and a spread below 1e-8 drowns in the weights'
    # floor (uniform weights); such an image is scaled by a power of 2
    top = float(np.abs(planes).max()) if planes.size else 0.0
    if top > 2.0**500 or 0 < top < 2.0**-10:
        planes = np.ldexp(planes, -np.frexp(top)[1])
    if dev is not None:
        idx = _pamr_on_device(planes, inv.reshape(h, w), len(uniq), offs, dil.size,
                              int(n_iter), dev)
        return uniq[idx].astype(lab.dtype, copy=False)
    mask = np.zeros((len(uniq), h * w), dtype=np.float32)
    mask[inv.reshape(-1), np.arange(h * w)] = 1.0
    with fit_threads(None, limit_blas=False):  # (torch's thread count kept)
        aff = _affinities(planes, offs, dil)
        out = _propagate(mask.reshape(-1, h, w), aff, offs, int(n_iter))
    return uniq[np.argmax(out, axis=0)].astype(lab.dtype, copy=False)


def _check_memory(nbytes, n_labels, h, w):
    check_allocation(
        nbytes, f"pamr of {n_labels} labels on a {h}x{w} image",
        "PAMR holds a mask per label: refine fewer labels, or a smaller image.")


def _pamr_on_device(planes, inv, n_labels, offsets, n_dilations, n_iter, dev):
    """PAMR with the torch kernels of :mod:`._pamr_torch` on the torch device
    ``dev``: the ``(C, H, W)`` image and the ``(H, W)`` label indices in
    ``[0, n_labels)`` cross to the device and back through the NumPy/torch
    boundary."""
    import torch

    from .._backends import _boundary as bd
    from . import _pamr_torch as pk

    c, h, w = planes.shape
    # the kernels pad by the largest shift: one past the image is the shift
    # to its border (as the Numba kernels clamp), not a terabyte of padding
    offs = [(int(min(max(dy, 1 - h), h - 1)), int(min(max(dx, 1 - w), w - 1)))
            for dy, dx in offsets]
    if dev.type == "cpu":  # in host memory (CUDA raises its own OutOfMemoryError)
        r = max(max(abs(dy), abs(dx)) for dy, dx in offs)
        padded = (h + 2 * r) * (w + 2 * r)
        # the int64 one-hot and its float32 masks; then the masks, the
        # current and next step's and a padded copy; the weights, their
        # float64 logits and the padded float64 image
        n_bytes = max(12 * n_labels * h * w,
                      4 * n_labels * (3 * h * w + padded)) + 12 * len(offs) * h * w
        _check_memory(n_bytes + 8 * c * (padded + 4 * h * w), n_labels, h, w)
    img = bd.to_tensor(planes, dev)
    idx = bd.to_tensor(np.asarray(inv, dtype=np.int64), dev)
    mask = torch.nn.functional.one_hot(idx, n_labels)
    mask = mask.permute(2, 0, 1).to(torch.float32).contiguous()
    aff = pk._affinities(img, offs, int(n_dilations))
    out = pk._propagate(mask, aff, offs, int(n_iter))
    return bd.to_numpy(out.argmax(dim=0))
