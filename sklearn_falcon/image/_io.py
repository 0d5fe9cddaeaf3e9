"""Image loading and conversion to ``(H, W, 3)`` ``uint8`` RGB arrays.

Only numpy and Pillow are needed here; torch tensors are recognised, and
brought to the host, by the boundary module, without importing torch.
"""

import contextlib
import operator
import os
import re
from pathlib import Path

import numpy as np

from .._backends._boundary import host_array, is_tensor
from .._backends._device import import_library
from .._log import ignoring, warn_user

__all__ = ["as_image_list", "load_image", "check_image_size", "import_pillow",
           "opened_image", "naming_file"]

PILLOW_HINT = "`pip install 'sklearn-falcon[cli]'` (or `pip install pillow`)"


def import_pillow(needs):
    """``PIL.Image``, or an ImportError that starts with ``needs`` ("Reading
    image files needs Pillow"): not installed, and what to install, or
    installed but failing at import (a library of its own missing), and how
    it failed, which was reported as "not installed" without the error."""
    return import_library("PIL.Image", needs, PILLOW_HINT)


def _is_pil_image(obj):
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is a dependency of the image path
        return False
    return isinstance(obj, Image.Image)


def range_text(lo, hi, low, high):
    """``"[lo, hi]"`` for a message that refuses values outside ``[low,
    high]``: each bound to 4 significant digits, or in full where those
    round it into the range (a round-off 1.0000001 was written 1: "must
    have values in [0, 1]; got values in [0, 1]")."""
    def text(v):
        short = f"{v:.4g}"
        return short if low <= v <= high or not low <= float(short) <= high \
            else str(v)
    return f"[{text(lo)}, {text(hi)}]"


# values per block of rows converted at once by _to_uint8
_CONVERT_CHUNK = 1 << 18


def _row_blocks(arr):
    """Slices of ``arr``'s rows, about ``_CONVERT_CHUNK`` values each."""
    rows = max(1, _CONVERT_CHUNK // max(1, arr[:1].size))
    return [slice(s, s + rows) for s in range(0, arr.shape[0], rows)]


def _blockwise_uint8(arr, convert):
    """``convert`` (to values in 0..255) of each block of rows of ``arr``,
    written into one ``uint8`` array: the float64 temporaries are a
    block's, not the image's (48 bytes a pixel of a 16-bit RGB image, 2.5
    times the whole segmentation's peak of a 12-megapixel one)."""
    out = np.empty(arr.shape, dtype=np.uint8)
    for rows in _row_blocks(arr):
        out[rows] = convert(arr[rows])
    return out


def _to_uint8(arr, *, source):
    """Convert a numeric array to ``uint8`` using its dtype's natural range."""
    if arr.dtype == np.uint8:
        return arr
    if arr.dtype == bool:
        return arr.astype(np.uint8) * 255
    if np.issubdtype(arr.dtype, np.floating):
        if not all(np.isfinite(arr[rows]).all() for rows in _row_blocks(arr)):
            raise ValueError(f"{source} contains NaN or infinite values.")
        lo, hi = arr.min(initial=0.0), arr.max(initial=0.0)  # in its dtype
        if lo < 0.0 or hi > 1.0:
            raise ValueError(
                f"Floating-point {source} must have values in [0, 1]; got values in "
                f"{range_text(lo, hi, 0.0, 1.0)}. Scale it to [0, 1] or pass uint8 "
                "data.")
        return _blockwise_uint8(arr, lambda a: np.round(a * 255.0))
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 2:
        # 16-bit images: map the full 0..65535 range linearly onto 0..255
        # (in either byte order: a big-endian one, as FITS and raw PGM files
        # hold, is not ``== np.uint16`` and was read by its values)
        return _blockwise_uint8(arr, _from_16bit)
    if np.issubdtype(arr.dtype, np.integer):
        lo, hi = int(arr.min(initial=0)), int(arr.max(initial=0))
        if lo < 0:
            raise ValueError(
                f"Integer {source} has negative values (min {lo}); expected "
                "non-negative intensities."
            )
        if hi <= 255:
            return arr.astype(np.uint8)
        if hi <= 65535:
            return _blockwise_uint8(arr, _from_16bit)
        raise ValueError(
            f"Integer {source} has values up to {hi}; only 8-bit (0..255) and "
            "16-bit (0..65535) intensities are supported."
        )
    raise TypeError(f"Unsupported dtype {arr.dtype} for {source}.")


def _from_16bit(a):
    """16-bit intensities mapped linearly from 0..65535 onto 0..255."""
    return np.round(a.astype(np.float64) / 257.0)


def _array_to_rgb(arr, *, source):
    arr = given = np.asarray(arr)
    if arr.ndim == 3 and arr.shape[2] in (1, 2, 3, 4):
        pass
    elif arr.ndim == 2:
        arr = arr[:, :, None]
    else:
        # a channels-first array (torchvision's layout, a tensor's .numpy())
        hint = (" A channels-first (C, H, W) image is read as such from a torch "
                "tensor, or pass np.moveaxis(image, 0, -1)."
                if arr.ndim == 3 and arr.shape[0] in (1, 3, 4) else "")
        raise ValueError(
            f"Expected {source} of shape (H, W), (H, W, 1), (H, W, 2), (H, W, 3) "
            f"or (H, W, 4); got shape {arr.shape}.{hint}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{source} is empty (shape {arr.shape}).")
    arr = _to_uint8(arr, source=source)
    channels = arr.shape[2]
    if channels in (1, 2):  # grey, grey + alpha: drop alpha, replicate grey
        arr = np.repeat(arr[:, :, :1], 3, axis=2)
    elif channels == 4:  # RGBA: alpha is discarded
        arr = arr[:, :, :3]
    arr = np.ascontiguousarray(arr)
    if np.may_share_memory(arr, given) or not arr.flags.writeable:
        # an RGB uint8 array (or tensor) came back itself, and a PIL image's
        # pixels read-only: a new array, which the caller may write into
        arr = arr.copy()
    return arr


# formats whose files Pillow opens in mode "I" only for 16-bit samples (a
# PGM of maxval > 255, scaled to 0..65535; a 16-bit grey PNG in earlier
# Pillow versions): a dark one (values up to 255) was read as 8-bit, 257
# times too bright
_SIXTEEN_BIT_I = ("PPM", "PNG")


def _pil_to_rgb(img, *, source, file_format=None):
    try:
        img.load()
    except AssertionError:  # Pillow's bare "assert self.fp is not None"
        raise ValueError(
            f"The {source}'s pixels cannot be read: its file was closed before "
            "they were loaded (Image.open in a with block ends before the image "
            "is used). Call image.load() inside the block, or pass the path."
        ) from None
    mode = img.mode
    if mode in ("RGB", "L"):
        arr = np.asarray(img)
    elif mode in ("I;16", "I;16B", "I;16L", "I;16N"):
        arr = np.asarray(img).astype(np.uint16)
    elif mode == "I" and (file_format or img.format) in _SIXTEEN_BIT_I:
        arr = np.asarray(img).astype(np.uint16)
    elif mode == "I":
        arr = np.asarray(img).astype(np.int64)
    elif mode == "F":
        arr = np.asarray(img).astype(np.float64)
        lo, hi = float(arr.min(initial=0.0)), float(arr.max(initial=0.0))
        if lo < 0.0 or hi > 65535.0:  # they were clipped to black or white
            raise ValueError(
                f"Floating-point {source} has values in "
                f"{range_text(lo, hi, 0.0, 65535.0)}; "
                "expected intensities in 0..1, 0..255 or 0..65535. Scale it, or "
                "pass it as an array in [0, 1].")
        if hi > 1.0:  # 32-bit float images from PIL are usually 0..255 or 0..65535
            arr = arr / (255.0 if hi <= 255.0 else 65535.0)
    elif mode in ("RGBA", "LA", "RGBa", "La", "PA") or (
            mode == "P" and "transparency" in img.info):
        # a palette with alpha (PNG-8 from pngquant, a GIF): through RGBA,
        # or Pillow warns that it "should be converted to RGBA images"
        if mode == "La":  # Pillow converts premultiplied grey to LA only
            img = img.convert("LA")
        arr = np.asarray(img.convert("RGBA"))[:, :, :3]
    else:  # "1", "P", "CMYK", "YCbCr", "LAB", "HSV", ...
        arr = np.asarray(img.convert("RGB"))
    return _array_to_rgb(arr, source=source)


_EXIF_ORIENTATION = 0x0112
# formats that Pillow reads only through a plugin (iPhones save HEIC)
_PLUGINS = {".heic": "pillow-heif", ".heif": "pillow-heif"}


def _register_plugin(path):
    """Register the plugin that reads ``path``'s format, where it is
    installed; return whether it is (True for formats that need none)."""
    if Path(path).suffix.lower() not in _PLUGINS:
        return True
    try:
        import pillow_heif
    except ImportError:
        return False
    pillow_heif.register_heif_opener()
    return True


@contextlib.contextmanager
def opened_image(path):
    """The PIL image of the file ``path``, its header read and its pixels
    not yet, with the plugin its format needs registered where installed.
    A failure to read it, on opening or in the block, is a ValueError that
    names the file (and the plugin to install, where one is missing)."""
    from PIL import Image

    registered = _register_plugin(path)
    try:
        with ignoring(Image.DecompressionBombWarning, module="PIL"):
            opened = Image.open(path)  # its warning: which file? (below)
        with opened as img:
            n, limit = img.size[0] * img.size[1], Image.MAX_IMAGE_PIXELS
            if limit and n > limit:
                warn_user(f"Image '{path}' has {n} pixels, more than Pillow's "
                          f"limit of {limit} against decompression bombs "
                          "(PIL.Image.MAX_IMAGE_PIXELS).",
                          Image.DecompressionBombWarning)
            yield img
    except (OSError, SyntaxError, Image.DecompressionBombError) as exc:
        # (UnidentifiedImageError is an OSError; the bomb's said no file)
        msg = f"Cannot read image '{path}': {exc}"
        if isinstance(exc, Image.DecompressionBombError):
            msg += " (PIL.Image.MAX_IMAGE_PIXELS, twice over)"
        if not registered:
            plugin = _PLUGINS[Path(path).suffix.lower()]
            msg += (f". Pillow reads {Path(path).suffix} files through the {plugin} "
                    f"plugin: pip install {plugin}")
        raise ValueError(msg) from None


@contextlib.contextmanager
def naming_file(image, doing="segment"):
    """A ValueError in the block names the file ``image``, where it is a
    path: a refusal of its size ("Image of size 2x2 (HxW) is smaller than
    one 8x8 patch") did not say which of a folder's images it was
    ("Cannot segment image 'a.png': ...", or another ``doing``)."""
    if not isinstance(image, (str, os.PathLike)):
        yield
        return
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"Cannot {doing} image '{Path(image)}': {exc}") from exc


def load_image(image):
    """Load an image as an ``(H, W, 3)`` ``uint8`` RGB array.

    Parameters
    ----------
    image : str, os.PathLike, PIL.Image.Image, ndarray or torch.Tensor
        The image. Accepted forms:

        - a path to any file Pillow can read (HEIC through the pillow-heif
          plugin, where installed), turned as its EXIF orientation tag says
          (as image viewers show phone photos);
        - a PIL image in any mode, its pixels as they are, so that the
          label map matches ``np.asarray(image)`` (not turned by its EXIF
          tag: ``PIL.ImageOps.exif_transpose(image)`` turns it first);
        - an array of shape ``(H, W)``, ``(H, W, 1)``, ``(H, W, 2)`` (grey
          and alpha), ``(H, W, 3)`` or ``(H, W, 4)``;
        - a torch tensor of shape ``(C, H, W)`` or ``(1, C, H, W)`` with
          ``C`` in 1, 3 or 4 (the torchvision convention), ``(H, W, C)`` (a
          frame of ``torchvision.io.read_video``), or ``(H, W)``.

        Conversions: greyscale is replicated to three channels; an alpha
        channel is discarded; ``uint16`` data (either byte order) is mapped
        linearly from 0..65535 to 0..255; other integer data is read by its
        values, as 8-bit when its maximum is at most 255, else as 16-bit (up
        to 65535; a darker 16-bit image in ``int32`` comes out brighter than
        in ``uint16``: convert it with ``.astype(np.uint16)``; a 16-bit PGM
        or PNG file that Pillow opens as 32-bit is read as 16-bit);
        floating-point data must lie in [0, 1] (a float PIL image or file, in
        0..1, 0..255 or 0..65535); booleans map to 0/255.

    Returns
    -------
    rgb : ndarray of shape (H, W, 3), dtype uint8
        A new array; the input is never modified.

    Raises
    ------
    FileNotFoundError
        If a path does not exist.
    ValueError
        If the file cannot be decoded as an image, or the array has an
        unsupported shape or value range.
    TypeError
        If ``image`` is of an unsupported type.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import load_image
    >>> grey16 = np.full((4, 5), 65535, dtype=np.uint16)
    >>> rgb = load_image(grey16)
    >>> rgb.shape, rgb.dtype, int(rgb.max())
    ((4, 5, 3), dtype('uint8'), 255)
    """
    if isinstance(image, (str, os.PathLike)):
        path = Path(image)
        if not path.exists():
            raise FileNotFoundError(_not_found(image, path))
        if path.is_dir():
            raise ValueError(f"Expected an image file, got a directory: '{path}'.")
        import_pillow("Reading image files needs Pillow")
        from PIL import ImageOps
        with opened_image(path) as img:
            img.load()
            file_format = img.format  # (a turned image has none)
            if img.getexif().get(_EXIF_ORIENTATION, 1) != 1:
                # a phone photo: its pixels as a viewer shows them
                img = ImageOps.exif_transpose(img)
            return _pil_to_rgb(img, source=f"image '{path}'",
                               file_format=file_format)
    if _is_pil_image(image):
        return _pil_to_rgb(image, source="PIL image")
    if is_tensor(image):
        arr = host_array(image)
        if arr.ndim == 4:
            if arr.shape[0] != 1:
                raise ValueError(
                    "A 4-D tensor must hold exactly one image (shape (1, C, H, W)); "
                    f"got shape {tuple(arr.shape)}."
                )
            arr = arr[0]
        if arr.ndim == 3:
            if arr.shape[0] in (1, 3, 4):
                arr = np.moveaxis(arr, 0, -1)
            elif arr.shape[2] not in (1, 3, 4):  # (H, W, C): a video decoder's frame
                raise ValueError(
                    "A 3-D tensor must have shape (C, H, W) or (H, W, C) with C in "
                    f"(1, 3, 4); got shape {tuple(arr.shape)}."
                )
        return _array_to_rgb(arr, source="tensor")
    if isinstance(image, (list, tuple)) and image and _is_image(image[0]):
        # a dataset's item: torchvision's (image, target) pair
        raise TypeError(
            f"image must be one image; got a {type(image).__name__} whose first item "
            f"is an image ({type(image[0]).__name__}), as in a dataset's (image, "
            "target) pairs: pass the images, e.g. (image for image, _ in dataset).")
    if isinstance(image, np.ndarray) or isinstance(image, (list, tuple)):
        return _array_to_rgb(np.asarray(image), source="image array")
    hint = (" (a dataset's record? pass its image, e.g. record['image'])"
            if isinstance(image, dict) else "")
    raise TypeError(
        "image must be a file path, a PIL image, a numpy array or a torch tensor; "
        f"got {type(image).__name__}{hint}."
    )


def _not_found(image, path):
    """The message of a missing image file ``image`` (as given; ``path``, its
    Path, drops a URL's second slash: "not found: 'https:/host/a.jpg'")."""
    text = os.fspath(image)
    if isinstance(text, str) and re.match(r"[A-Za-z][A-Za-z0-9+.-]+://", text):
        return (f"Image file not found: '{text}' is a URL; images are read from "
                "local files only: download it first (e.g. with "
                "urllib.request.urlretrieve).")
    return f"Image file not found: '{path}'."


def _is_image(obj):
    """Whether ``obj`` is an image on its own (not a row of an array)."""
    return (isinstance(obj, (str, os.PathLike)) or _is_pil_image(obj)
            or is_tensor(obj) or (isinstance(obj, np.ndarray) and obj.ndim >= 2))


def check_image_size(rgb, patch_size, *, advice=None):
    """Raise a clear error if ``rgb`` is smaller than one patch.

    Parameters
    ----------
    rgb : ndarray of shape (H, W, 3)
        The image.
    patch_size : int or tuple of int
        Patch height and width (each >= 1; one integer for both).
    advice : str, default=None
        The sentence that ends the message (``None``: a larger image or a
        smaller ``patch_size``; a ViT, whose patch size is its model's,
        gives its own).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image import check_image_size
    >>> check_image_size(np.zeros((16, 16, 3), np.uint8), 8)
    >>> check_image_size(np.zeros((4, 16, 3), np.uint8), 8)
    Traceback (most recent call last):
    ...
    ValueError: Image of size 4x16 (HxW) is smaller than one 8x8 patch...
    """
    ph, pw = _patch_pair(patch_size)
    shape = tuple(rgb.shape) if hasattr(rgb, "shape") else np.shape(rgb)
    if len(shape) < 2:
        raise ValueError(
            f"rgb must be an image of shape (H, W, C) or (H, W); got shape {shape}.")
    h, w = shape[:2]
    if h < ph or w < pw:
        raise ValueError(
            f"Image of size {h}x{w} (HxW) is smaller than one {ph}x{pw} patch; "
            "it cannot be segmented. "
            + (advice or "Use a larger image or a smaller patch_size."))


def _patch_pair(patch_size):
    """``patch_size`` (an integer or a pair of them, each >= 1) as ``(ph,
    pw)``, or a ValueError naming it (a 1-tuple said "not enough values to
    unpack", a string "'<' not supported", and 0 or 8.5 were accepted)."""
    pair = [patch_size] * 2 if np.ndim(patch_size) == 0 else patch_size
    try:
        ph, pw = (operator.index(v) for v in pair)
    except (TypeError, ValueError):
        ph = pw = 0
    if ph < 1 or pw < 1:
        raise ValueError(
            "patch_size must be a positive integer or a pair of them (height, "
            f"width); got patch_size={patch_size!r}.")
    return ph, pw


def as_image_list(images):
    """A single image (path, PIL image, 2-D/3-D array or tensor) or a
    sequence or iterator of images (``Path("photos").glob("*.jpg")``, a
    generator: read once, into a list).  A PIL image that an iterator yields
    is copied as it comes: ``PIL.ImageSequence.Iterator`` (a GIF's frames)
    yields one image, moved to the next frame each time."""
    if isinstance(images, np.ndarray) and images.ndim in (2, 3) and images.dtype != object:
        return [images]
    if is_tensor(images):
        return [images] if images.ndim in (2, 3) else list(images)
    if isinstance(images, (str, bytes, os.PathLike, dict)):
        return [images]
    if _is_pil_image(images):  # (the module's test took PIL's iterators too)
        return [images]
    if not (hasattr(images, "__len__") or hasattr(images, "__iter__")):
        return [images]
    if hasattr(images, "__next__"):  # an iterator: its frames, not its last
        return [im.copy() if _is_pil_image(im) else im for im in images]
    return list(images)
