"""The token budget of ImageSegmenter: working resolution and memory check.

An image is segmented at a *working resolution* with at most ``max_tokens``
tokens (the image is resized first, as a ViT resizes its input), and the
label map is brought back to the full resolution by
:func:`~sklearn_falcon.image.upsample_labels`, which allocates nothing but
the output map.  Before anything large is allocated, :func:`check_memory`
compares an estimate of the peak memory with what the process may still
allocate, and refuses with a message that names ``max_tokens``.
"""

import math
from dataclasses import dataclass, field

import numpy as np

from .. import _memory

__all__ = ["Plan", "available_memory", "check_memory", "make_plan", "resize_rgb",
           "too_few_tokens"]

#: Above this many tokens the token graph is a sparse kNN graph instead of a
#: dense ``W`` (1 GiB in float32), unless Falcon runs matrix-free on a device.
DENSE_MAX_TOKENS = 16384
#: Neighbours of each token in that kNN graph.
KNN_NEIGHBORS = 30
# peak bytes per working pixel of the colour + texture extractor (L*a*b*,
# the 15-map filter bank, smoothed colours, two word maps, each float32 or
# int64) and of PAMR (48 neighbour weights, the image in float64; the K
# masks are counted apart)
_FEATURE_BYTES_PER_PIXEL = 4 * (3 + 15 + 3) + 8 * 2
_PAMR_BYTES_PER_PIXEL = 4 * 48 + 8 * 3
_GIB = float(1 << 30)


@dataclass
class Plan:
    """How one image is segmented: sizes that set the memory it needs."""

    image_shape: tuple
    work_shape: tuple
    n_tokens: int
    n_features: int
    n_segments: int
    graph: str  # "dense", "knn" or "matrix-free"
    refine: bool
    parts: dict = field(default_factory=dict)

    @property
    def resized(self):
        return tuple(self.work_shape) != tuple(self.image_shape)

    def peak_bytes(self):
        """Largest stage plus what lives throughout (image, label map)."""
        stages = {k: v for k, v in self.parts.items() if not k.startswith("full ")}
        keep = sum(v for k, v in self.parts.items() if k.startswith("full "))
        return keep + max(stages.values(), default=0)


def work_shape(height, width, max_pixels, min_size=(1, 1)):
    """The largest ``(h, w)`` with the aspect ratio of ``(height, width)``,
    no larger than it, and ``h * w <= max_pixels``; a side keeps at least
    ``min_size`` pixels (one patch) where the image has them, the other
    side then shortened to the budget (a 12 x 40,000 strip with 100 tokens
    of 8 pixels is 8 x 800, not 1 x 4,618, which holds no patch)."""
    if height * width <= max_pixels:
        return int(height), int(width)
    s = math.sqrt(max_pixels / float(height * width))
    h = max(1, int(math.floor(height * s)))
    w = max(1, int(math.floor(width * s)))
    while h * w > max_pixels:  # floating-point edge cases
        if h >= w:
            h -= 1
        else:
            w -= 1
    mh, mw = min(int(height), int(min_size[0])), min(int(width), int(min_size[1]))
    if h < mh:
        h = mh
        w = max(mw, min(int(width), max_pixels // h))
    elif w < mw:
        w = mw
        h = max(mh, min(int(height), max_pixels // w))
    return h, w


def grid_under_budget(rows, cols, max_tokens):
    """The patch grid ``(i, j)`` of a ViT's input for ``rows x cols``
    patches at the budget (``rows * cols == max_tokens``): each side
    rounded where ``i * j <= max_tokens`` allows, else down, the most
    tokens first, then the shape nearest ``rows / cols`` (6.8 x 9.5 under
    64 is 7 x 9, 63 tokens; rounding both down gave 6 x 9, 54)."""
    sides = [(i, j) for i in {int(rows), round(rows)} for j in {int(cols), round(cols)}
             if i * j <= max_tokens]
    return max(sides, key=lambda s: (s[0] * s[1], -abs(s[0] * cols - s[1] * rows)))


def resize_rgb(rgb, shape):
    """``rgb`` resized to ``(h, w)`` with Pillow's antialiasing filter."""
    from ._io import import_pillow

    # the core install: an array, no image file
    Image = import_pillow("An image larger than ImageSegmenter's token budget "
                          "(max_tokens) is resized with Pillow")

    h, w = int(shape[0]), int(shape[1])
    img = Image.fromarray(np.ascontiguousarray(rgb))
    return np.asarray(img.resize((w, h), resample=Image.BILINEAR, reducing_gap=3.0))


def make_plan(image_shape, *, max_tokens, patch, n_features, n_segments, refine,
              vit_tokens=None, matrix_free=False, min_size=None):
    """The :class:`Plan` of one image.

    Parameters
    ----------
    image_shape : (int, int)
        Full-resolution ``(H, W)``.
    max_tokens : int
        Token budget.
    patch : int
        Side of a token cell in working pixels (the offline extractor's
        ``patch_size``); the working image has at most ``max_tokens * patch**2``
        pixels (``patch`` is 8 for a ViT, whose own input size is set apart).
    n_features : int
        Feature length of a token.
    n_segments : int
        Clusters K (the upper end of the range for ``"auto"``); counted up
        to the number of tokens.
    refine : bool
        Whether PAMR runs.
    vit_tokens : callable, default=None
        ``vit_tokens(h, w)``: the tokens a ViT makes of a ``(h, w)`` image
        (None: the grid of ``patch`` cells).
    matrix_free : bool, default=False
        Falcon forms ``W`` in row blocks on a torch device.
    min_size : (int, int), default=None
        The extractor's patch ``(ph, pw)``: the working image keeps at least
        that many pixels along a side where the image has them (None:
        ``(patch, patch)``).
    """
    H, W = int(image_shape[0]), int(image_shape[1])
    h, w = work_shape(H, W, int(max_tokens) * patch * patch,
                      (patch, patch) if min_size is None else min_size)
    if vit_tokens is not None:
        n = int(vit_tokens(h, w))
    else:
        n = max(1, h // patch) * max(1, w // patch)
    if matrix_free:
        graph = "matrix-free"
    elif n > DENSE_MAX_TOKENS:
        graph = "knn"
    else:
        graph = "dense"
    k = min(int(n_segments), n)  # more are refused, or not swept ("auto")
    px = h * w
    parts = {}
    if (h, w) != (H, W):
        parts["full label map"] = 8 * H * W
        parts["full image"] = 3 * H * W  # the resized copy is counted below
    per_pixel = _FEATURE_BYTES_PER_PIXEL if vit_tokens is None else 12
    parts["features"] = px * (3 + per_pixel)
    graph_bytes = {"dense": 3 * 4 * n * n,  # W, the similarity temporaries
                   "knn": 3 * 12 * n * KNN_NEIGHBORS + 4 * n * 2048,
                   "matrix-free": 4 * n * (n_features + 2 * k)}[graph]
    parts["token graph"] = graph_bytes + 4 * n * n_features + 8 * 4 * n * k
    parts["upsampling"] = 3 * 4 * px * k + 8 * px
    if refine:
        parts["PAMR"] = px * _PAMR_BYTES_PER_PIXEL + 3 * 4 * px * k
    return Plan((H, W), (h, w), n, int(n_features), k, graph, bool(refine), parts)


def available_memory():
    """Bytes the process may still allocate, or None when unknown.

    The smaller of the memory the estimator's guard sees (the system's
    available memory and the room under the process's cgroup limits: a
    container's, a Slurm job's) and what is left under the address-space
    limit (``ulimit -v``) given the process's current virtual size.
    """
    avail = []
    system = _memory.available_memory()
    if system is not None:
        avail.append(system)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft not in (resource.RLIM_INFINITY, -1):
            used = None
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmSize:"):
                        used = int(line.split()[1]) * 1024
                        break
            if used is not None:
                avail.append(max(0, soft - used))
    except (ImportError, OSError, ValueError):
        pass
    return min(avail) if avail else None


def _fmt(n_bytes):
    return f"{n_bytes / _GIB:.2f} GiB" if n_bytes >= 0.1 * _GIB else \
        f"{n_bytes / (1 << 20):.0f} MiB"


def check_memory(plan, max_tokens, *, available=None, margin=0.9):
    """Raise MemoryError, naming ``max_tokens``, when ``plan`` needs more
    memory than ``margin`` times what is available (nothing when unknown)."""
    if available is None:
        available = available_memory()
    if available is None:
        return
    need = plan.peak_bytes()
    if need <= margin * available:
        return
    H, W = plan.image_shape
    h, w = plan.work_shape
    detail = ", ".join(f"{k}: {_fmt(v)}" for k, v in
                       sorted(plan.parts.items(), key=lambda kv: -kv[1])[:3])
    # below the tokens the image makes: a budget above them, a fourth of
    # which was the example, may change nothing
    lower = max(64, min(int(max_tokens), int(plan.n_tokens)) // 4)
    advice = f"Lower max_tokens (e.g. max_tokens={lower}), or free memory."
    if sum(v for k, v in plan.parts.items() if k.startswith("full ")) > \
            margin * available:  # the full-size image and map: no budget helps
        advice = ("The image and its label map at full resolution alone do not fit, "
                  "whatever max_tokens: segment a downscaled copy, or free memory.")
    raise MemoryError(
        f"Segmenting a {H}x{W} image with max_tokens={max_tokens} ({plan.n_tokens} "
        f"tokens, working resolution {h}x{w}, {plan.graph} token graph) needs about "
        f"{_fmt(need)} ({detail}), more than the {_fmt(available)} this process can "
        f"still allocate. {advice}"
    )


def too_few_tokens(n, k, name, max_tokens, resolution, vit, resized):
    """The ValueError of an image of ``n`` tokens, fewer than ``name=k``
    segments: what to change (``vit``: a ViT's tokens; ``resized``: the
    image was resized for ``max_tokens``)."""
    # a budget under K caps the tokens too (a ViT's, in whole patches: 2 K)
    hint = (f"a larger max_tokens (now {max_tokens}), "
            if max_tokens < (2 * k if vit else k) else "")
    size, what = ("a larger image, ", "a smaller patch_size "), "The image"
    if vit:  # its input size is its resolution, and its patch its model's
        size = (f"a larger resolution (now {resolution}), ", "")
    elif resized:  # max_tokens alone sets its tokens: not its size or patch
        size, what = ("", ""), f"The image, resized for max_tokens={max_tokens},"
        hint = f"a larger max_tokens (now {max_tokens}) "
    return ValueError(
        f"{what} yields only {n} patch token{'s' * (n != 1)}, fewer than {name}={k}. "
        f"Use {size[0]}{hint}{size[1]}or fewer segments.")
