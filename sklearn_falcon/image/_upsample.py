"""Token labels -> pixel labels: prototype reassignment, and label maps from
a working resolution to the full one (joint bilateral upsampling)."""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, validate_params

from .._jit import pjit, prange
from .._memory import check_allocation
from .._threads import fit_threads
from ._affinity import real_float32

__all__ = ["bilinear_matrix", "prototype_upsample", "upsample_labels"]


@validate_params(
    {"n_out": [Interval(Integral, 1, None, closed="left")],
     "n_in": [Interval(Integral, 1, None, closed="left")]},
    prefer_skip_nested_validation=True,
)
def bilinear_matrix(n_out, n_in):
    """``(n_out, n_in)`` 1-D bilinear interpolation matrix (``align_corners=False``).

    Input sample ``i`` sits at the centre of cell ``i`` of a grid covering the
    same extent as the output, as for ViT patches tiling an image.

    Parameters
    ----------
    n_out : int
        Number of output samples (pixels along one axis).
    n_in : int
        Number of input samples (tokens along the same axis).

    Returns
    -------
    M : ndarray of shape (n_out, n_in), float32
        Interpolation weights; each row sums to 1, so ``M @ v`` upsamples a
        signal ``v`` of length ``n_in``.

    Examples
    --------
    >>> from sklearn_falcon.image import bilinear_matrix
    >>> bilinear_matrix(4, 2)
    array([[1.  , 0.  ],
           [0.75, 0.25],
           [0.25, 0.75],
           [0.  , 1.  ]], dtype=float32)
    """
    pos = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
    pos = np.clip(pos, 0.0, n_in - 1)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (pos - lo).astype(np.float32)
    m = np.zeros((n_out, n_in), dtype=np.float32)
    rows = np.arange(n_out)
    np.add.at(m, (rows, lo), 1.0 - frac)
    np.add.at(m, (rows, hi), frac)
    return m


def _out_shape(out_shape):
    """``out_shape`` as ``(H, W)`` ints, or a ValueError: 0 divided by zero,
    a fraction was truncated and a third entry ignored."""
    try:
        shape = tuple(out_shape)
    except TypeError:
        shape = ()
    if len(shape) == 2 and all(
            isinstance(v, Real) and not isinstance(v, (bool, np.bool_))
            and 1 <= v < float("inf") and v == int(v) for v in shape):
        return int(shape[0]), int(shape[1])
    raise ValueError(
        f"out_shape must be a pair of positive integers (H, W); got {out_shape!r}.")


def _label_ids(uniq, name):
    """The sorted distinct labels ``uniq`` as the int64 ids of the output
    (as documented), or a ValueError naming ``name``: a fraction (0.5 was
    written as 0) or a uint64 past the int64 range (written negative) would
    be another id, silently."""
    kind = uniq.dtype.kind
    if kind == "u":  # (a uint64 bound: NumPy < 2 compared a Python int as a
        # float, and 2**63 + 7 passed)
        ok = not uniq.size or uniq[-1] <= np.uint64(np.iinfo(np.int64).max)
    elif kind == "f":  # whole numbers in the int64 range (NaN is not)
        with np.errstate(invalid="ignore"):
            ok = bool(np.all((np.mod(uniq, 1) == 0) & (uniq >= -2.0 ** 63)
                             & (uniq < 2.0 ** 63)))
    else:
        ok = kind in "bi"
    if ok:
        return uniq.astype(np.int64)
    lo, hi = uniq[[0, -1]].tolist() if uniq.size else (None, None)
    values = f" with values in [{lo!r}, {hi!r}]" if uniq.size else ""
    raise ValueError(f"{name} must hold integer label ids (in the int64 range); "
                     f"got dtype={uniq.dtype}{values}.")


def prototype_upsample(features, token_labels, out_shape, *, return_scores=False,
                       device=None):
    """Assign every pixel to the nearest cluster prototype.

    Prototypes are the mean L2-normalized token feature of each cluster; the
    token feature map is bilinearly upsampled to ``out_shape`` and each pixel
    takes the prototype of highest cosine similarity. Because bilinear
    interpolation is linear and the pixel's own norm does not change the
    arg-max, this equals bilinear upsampling of the token-prototype
    similarity maps, which is what is computed (no ``H x W x C`` tensor).

    Parameters
    ----------
    features : ndarray of shape (gh, gw, C)
        Token features.
    token_labels : ndarray of shape (gh, gw) or (gh * gw,)
        Cluster label of every token.
    out_shape : (int, int)
        Output ``(H, W)``.
    return_scores : bool, default=False
        Also return the ``(H, W, K)`` similarity maps (on the host).
    device : str or torch.device, default=None
        ``None``: NumPy on the host.  A torch device (``"cuda"``, ``"cpu"``,
        ``"auto"`` or a ``torch.device``): the torch twin there (float32; the same labels up to
        float rounding on ties).

    Returns
    -------
    labels : ndarray of shape (H, W), int64
        Pixel labels, in the same label ids as ``token_labels``.
    scores : ndarray of shape (H, W, K), float32
        Only if ``return_scores``; channel ``k`` is the ``k``-th sorted unique
        token label.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import prototype_upsample
    >>> F = np.zeros((2, 2, 2)); F[:, 0, 0] = 1; F[:, 1, 1] = 1
    >>> prototype_upsample(F, np.array([[0, 1], [0, 1]]), (2, 4))
    array([[0, 0, 1, 1],
           [0, 0, 1, 1]])
    """
    out_shape = _out_shape(out_shape)
    if not isinstance(return_scores, (bool, np.bool_)):  # "no" returned a pair
        raise ValueError(f"return_scores must be True or False; got {return_scores!r}.")
    dev = torch_device_of(device, "prototype_upsample")
    f = real_float32(features)
    lab = np.asarray(token_labels)
    # a transposed (gw, gh) label grid was reshaped to (gh, gw), silently
    if f.ndim != 3 or lab.shape not in (f.shape[:2], (f.shape[0] * f.shape[1],)):
        raise ValueError(
            f"features of shape {f.shape} and token_labels of shape {lab.shape} do "
            "not match; expected (gh, gw, C) and (gh, gw) or (gh * gw,).")
    gh, gw, c = f.shape
    if f.size == 0:  # it said "cannot reshape array of size 0" or "index -1"
        raise ValueError(f"features of shape {f.shape} hold no token or no channel.")
    if not np.all(np.isfinite(f)):  # a NaN prototype: every pixel took label 0
        raise ValueError("features contain NaN or infinite values.")
    lab = lab.reshape(gh, gw)
    uniq, inv = np.unique(lab, return_inverse=True)
    uniq, inv = _label_ids(uniq, "token_labels"), inv.reshape(-1)
    if device is not None and not return_scores:
        return uniq[_prototype_on_device(f, inv, len(uniq), out_shape, dev)]
    fn = f.reshape(-1, c)
    fn = fn / np.maximum(np.linalg.norm(fn, axis=1, keepdims=True), 1e-12)
    k = len(uniq)
    onehot = np.zeros((gh * gw, k), dtype=np.float32)
    onehot[np.arange(gh * gw), inv] = 1.0
    protos = onehot.T @ fn
    protos /= np.maximum(np.linalg.norm(protos, axis=1, keepdims=True), 1e-12)
    sim = (fn @ protos.T).reshape(gh, gw, k)
    h, w = int(out_shape[0]), int(out_shape[1])
    _check_score_map(k, h, w)
    ry, rx = bilinear_matrix(h, gh), bilinear_matrix(w, gw)
    up = np.einsum("hi,ijk->hjk", ry, sim, optimize=True)
    up = np.einsum("hjk,wj->hwk", up, rx, optimize=True)
    labels = uniq[np.argmax(up, axis=2)]
    if return_scores:
        return labels, up
    return labels


# --------------------------------------------- labels to full resolution
# Joint bilateral upsampling (Kopf et al., SIGGRAPH 2007) of a label map
# computed at a working resolution: each full-resolution pixel takes the label
# of highest total weight among the (2 r)^2 nearest working-resolution pixels,
# with weight exp(-d^2 / (2 sigma_s^2)) (exp(-|c - c_q|^2 / (2 sigma_c^2)) +
# FLOOR), d the distance in working pixels and c, c_q the colours of the pixel
# and of the working pixel. FLOOR keeps a spatial fallback where no colour
# matches. Pixels are independent: nothing but the output map is allocated.
_JBU_RADIUS = 2
_JBU_SIGMA_S = 1.0
_JBU_SIGMA_C = 12.0
_JBU_FLOOR = 1e-4


@pjit
def _joint_bilateral_labels(image, small_image, small_labels, ids, radius,
                            sigma_s, sigma_c, floor, out):  # pragma: no cover
    """Fill ``out`` (H, W) with the upsampled labels (see above): ``image``
    is (H, W, C), ``small_image`` (h, w, C), ``small_labels`` (h, w) indices
    in ``[0, K)`` and ``ids`` (K,) the label id written for each index."""
    h_out, w_out = out.shape
    n_labels = ids.shape[0]
    h, w = small_labels.shape
    c = image.shape[2]
    sy, sx = h / h_out, w / w_out
    inv_s = 1.0 / (2.0 * sigma_s * sigma_s)
    inv_c = 1.0 / (2.0 * sigma_c * sigma_c)
    span = 2 * radius
    # the spatial weight is separable: exp(-dy^2 s) exp(-dx^2 s), the column
    # factors computed once
    col_q = np.empty((w_out, span), dtype=np.int64)
    col_w = np.empty((w_out, span), dtype=np.float64)
    for x in range(w_out):
        fx = (x + 0.5) * sx - 0.5
        ix0 = int(np.floor(fx))
        for b in range(span):
            ix = ix0 - radius + 1 + b
            col_q[x, b] = min(max(ix, 0), w - 1)
            col_w[x, b] = np.exp(-(fx - ix) * (fx - ix) * inv_s)
    for y in prange(h_out):
        acc = np.zeros(n_labels, dtype=np.float64)
        row_q = np.empty(span, dtype=np.int64)
        row_w = np.empty(span, dtype=np.float64)
        fy = (y + 0.5) * sy - 0.5
        iy0 = int(np.floor(fy))
        for a in range(span):
            iy = iy0 - radius + 1 + a
            row_q[a] = min(max(iy, 0), h - 1)
            row_w[a] = np.exp(-(fy - iy) * (fy - iy) * inv_s)
        for x in range(w_out):
            for k in range(n_labels):
                acc[k] = 0.0
            for a in range(span):
                qy = row_q[a]
                for b in range(span):
                    qx = col_q[x, b]
                    dc = 0.0
                    for ch in range(c):
                        t = float(image[y, x, ch]) - float(small_image[qy, qx, ch])
                        dc += t * t
                    wt = row_w[a] * col_w[x, b] * (np.exp(-dc * inv_c) + floor)
                    acc[small_labels[qy, qx]] += wt
            best = 0
            for k in range(1, n_labels):
                if acc[k] > acc[best]:
                    best = k
            out[y, x] = ids[best]
    return out


def upsample_labels(labels, image, small_image, *, device=None):
    """Bring a label map from a working resolution to the image's, guided by it.

    Joint bilateral upsampling: each pixel takes the label of highest total
    weight among the 4x4 nearest working-resolution pixels, weighted by
    their distance and by the difference of their colour to the pixel's.
    Pixels are processed independently, so nothing of size ``H x W x K`` is
    ever allocated: memory is the output map (and, on a torch device, strips
    of rows).

    Parameters
    ----------
    labels : ndarray of shape (h, w), int
        Labels at the working resolution.
    image : ndarray of shape (H, W, C) or (H, W)
        The full-resolution image: 8-bit, 16-bit or boolean, or float in
        [0, 1] (float images of larger values are read in 0..255 units);
        greyscale as ``(H, W)`` or ``(H, W, 1)``.
    small_image : ndarray of shape (h, w, C) or (h, w)
        The image at the working resolution, in the same scale or another
        of these (an 8-bit image and a float resize of it in [0, 1]
        compare alike); two float images of larger values are read in
        0..255 units together.
    device : str or torch.device, default=None
        ``None``: the Numba kernel on the CPU; a torch device: its torch
        twin there, in strips of rows.

    Returns
    -------
    labels : ndarray of shape (H, W), int64
        Same label ids as ``labels``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import upsample_labels
    >>> img = np.zeros((8, 8, 3), np.uint8); img[:, 5:] = 255
    >>> small = img[::2, ::2]
    >>> lab = (small[..., 0] > 0).astype(int)
    >>> upsample_labels(lab, img, small)[0]
    array([0, 0, 0, 0, 0, 1, 1, 1])
    """
    lab = np.asarray(labels)
    dev = torch_device_of(device, "upsample_labels")
    # greyscale images as one channel (they were said not to match)
    img, small = (a[:, :, None] if a.ndim == 2 else a
                  for a in (np.asarray(image), np.asarray(small_image)))
    if lab.ndim != 2 or small.shape[:2] != lab.shape or img.ndim != 3 or \
            small.ndim != 3 or small.shape[2] != img.shape[2]:
        raise ValueError(
            f"labels {lab.shape}, image {img.shape} and small_image {small.shape} do "
            "not match; expected (h, w), (H, W, C) and (h, w, C).")
    # the kernel divides by H and W, and reads the nearest working pixels
    # (of an empty map: past its end, a segmentation fault or garbage ids)
    if img.shape[0] == 0 or img.shape[1] == 0:
        return np.empty(img.shape[:2], dtype=np.int64)
    if lab.size == 0:
        raise ValueError(
            f"labels of shape {lab.shape} hold no pixel to bring to the image's "
            f"{img.shape[:2]}.")
    img, small = _colours(img, "image"), _colours(small, "small_image")
    for a, name in ((img, "image"), (small, "small_image")):
        if a.dtype.kind == "f" and not np.all(np.isfinite(a)):  # NaN weights
            raise ValueError(f"{name} contains NaN or infinite values.")
    img, small = _in_255_units(img, small)
    uniq, inv = np.unique(lab, return_inverse=True)
    inv = inv.reshape(lab.shape).astype(np.int64)
    uniq = _label_ids(uniq, "labels")
    if device is not None:
        return _upsample_labels_on_device(inv, img, small, uniq, dev)
    # one layout for the kernel (each layout, and read-only arrays, are a
    # compile of their own): the working image is small, so it is copied
    # where it is not a writable C array; the full image only where it is
    # not C-contiguous (``prebuild`` compiles both of its flags)
    # (and in the machine's byte order: Numba types no big-endian array)
    if not (small.flags.c_contiguous and small.flags.writeable
            and small.dtype.isnative):
        small = np.array(small, order="C", dtype=small.dtype.newbyteorder("="))
    img = np.ascontiguousarray(img, dtype=img.dtype.newbyteorder("="))
    out = np.empty(img.shape[:2], dtype=np.int64)
    with fit_threads(None, limit_blas=False):  # (torch's thread count kept)
        return _joint_bilateral_labels(img, small, inv, uniq, _JBU_RADIUS,
                                       _JBU_SIGMA_S, _JBU_SIGMA_C, _JBU_FLOOR, out)


def _in_255_units(img, small):
    """The two images with colours in 0..255 units, as ``_JBU_SIGMA_C``
    compares them: floats in [0, 1] (load_image's convention) times 255,
    16-bit images over 257 (on floats in [0, 1], colour differences of at
    most 1.7 turned the guidance off).  Each image by its own dtype, so that
    an 8-bit image and a float resize of it in [0, 1] (scikit-image's
    ``resize``) are compared in the same units (they were not: the guidance
    was off); two float images by their joint maximum (a dark one in 0..255
    units stays so)."""
    floats = [a.dtype.kind == "f" for a in (img, small)]
    if all(floats):
        top = max(np.max(img, initial=0.0), np.max(small, initial=0.0))
        if top <= 1.0:
            return img * np.float32(255.0), small * np.float32(255.0)
        return img, small
    out = []
    for a, is_float in zip((img, small), floats):
        if is_float and np.max(a, initial=0.0) <= 1.0:
            a = a * np.float32(255.0)
        elif a.dtype.kind == "u" and a.dtype.itemsize == 2:
            a = a / np.float32(257.0)
        out.append(a)
    return out


def _colours(a, name):
    """The image ``a`` in a dtype the kernel computes with, or a ValueError
    naming ``name``.  Numba has no arithmetic on booleans or float16 ("No
    implementation of function float(bool)"): those as uint8 (0/255, as
    load_image reads them) and float32; an object array of numbers as
    float64 (it raised Numba's TypingError, as a complex one did)."""
    if a.dtype == bool:
        return a.astype(np.uint8) * np.uint8(255)
    if a.dtype == np.float16:
        return a.astype(np.float32)
    if a.dtype.kind in "iuf":
        return a
    if a.dtype.kind == "O":
        try:
            return a.astype(np.float64)
        except (TypeError, ValueError):
            pass
    raise ValueError(f"{name} must hold real colour values; got dtype={a.dtype}.")


def _check_score_map(k, h, w):
    """Refuse the (H, W, K) float32 scores (and the arg-max) of
    :func:`prototype_upsample` where they cannot fit."""
    check_allocation(4 * h * w * (k + 2), f"prototype_upsample of {k} labels to "
                     f"{h}x{w} pixels", "It holds an (H, W, K) float32 score map: "
                     "use fewer token labels, or a smaller out_shape.")


def torch_device_of(device, caller):
    """The ``torch.device`` of ``device`` of a function ``caller``, or None
    for None: checked before any early return, for which a device that
    does not exist ("banana") was accepted."""
    if device is None:
        return None
    from .._backends import _boundary as bd
    from .._backends._device import import_torch

    import_torch(f"{caller}(device={device!r})", "device=None")
    return bd.torch_device(device)


def _prototype_on_device(features, inv, n_labels, out_shape, dev):
    from .._backends import _boundary as bd
    from . import _upsample_torch as ut

    if dev.type == "cpu":  # in host memory (CUDA raises its own OutOfMemoryError)
        _check_score_map(n_labels, int(out_shape[0]), int(out_shape[1]))
    idx = ut._prototype_labels(bd.to_tensor(features, dev),
                               bd.to_tensor(inv.astype(np.int64), dev), n_labels,
                               (int(out_shape[0]), int(out_shape[1])))
    return bd.to_numpy(idx)


def _upsample_labels_on_device(inv, image, small, ids, dev):
    from .._backends import _boundary as bd
    from . import _upsample_torch as ut

    out = np.empty(image.shape[:2], dtype=np.int64)
    small_t = bd.to_tensor(small, dev)
    lab_t = bd.to_tensor(inv, dev)
    ids_t = bd.to_tensor(ids, dev)
    rows = ut.strip_rows(image.shape[1], len(ids))
    for y0 in range(0, image.shape[0], rows):
        strip = bd.to_tensor(image[y0:y0 + rows], dev)
        out[y0:y0 + rows] = bd.to_numpy(ut._joint_bilateral_labels(
            strip, y0, image.shape[0], small_t, lab_t, ids_t, _JBU_RADIUS,
            _JBU_SIGMA_S, _JBU_SIGMA_C, _JBU_FLOOR))
    return out
