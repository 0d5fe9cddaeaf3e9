"""Segment ids kept from frame to frame (ImageSegmenter.segment_video)."""

import os

import numpy as np
from scipy.optimize import linear_sum_assignment

from .._backends._boundary import is_tensor
from .._log import given_once
from ._io import _is_pil_image, load_image, naming_file

__all__ = ["colour_histogram", "is_blank", "match_ids", "progress_bar",
           "resize_labels", "segment_frames"]


def match_ids(previous, current, next_id):
    """Ids for the segments of ``current`` that follow ``previous``.

    The segments of ``current`` (ids ``0..K-1``) are matched one-to-one to
    those of ``previous`` (any ids) by maximal total overlap (Hungarian
    algorithm); a matched segment takes its partner's id, an unmatched one
    (or one with no overlap) a new id from ``next_id`` on.

    Parameters
    ----------
    previous : ndarray of shape (h, w), int
        The previous frame's label map (at the same resolution).
    current : ndarray of shape (h, w), int
        The current frame's map, ids ``0..K-1``.
    next_id : int
        The first id not used so far.

    Returns
    -------
    ids : ndarray of shape (K,), int64
        ``ids[k]`` is the id of segment ``k`` of ``current``.
    next_id : int
        The first id not used after this frame.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.image._video import match_ids
    >>> prev = np.array([[7, 7, 3, 3]])
    >>> cur = np.array([[1, 1, 0, 2]])
    >>> match_ids(prev, cur, 8)
    (array([3, 7, 8]), 9)
    """
    prev_u, prev_i = np.unique(previous, return_inverse=True)
    k = int(current.max()) + 1
    overlap = np.bincount(np.asarray(current).ravel() * len(prev_u) + prev_i.ravel(),
                          minlength=k * len(prev_u)).reshape(k, len(prev_u))
    rows, cols = linear_sum_assignment(overlap, maximize=True)
    ids = np.full(k, -1, dtype=np.int64)
    keep = overlap[rows, cols] > 0
    ids[rows[keep]] = prev_u[cols[keep]]
    for j in np.flatnonzero(ids < 0):
        ids[j] = next_id
        next_id += 1
    return ids, int(next_id)


def resize_labels(labels, shape):
    """Nearest-neighbour resize of a label map to ``(h, w)``."""
    h, w = labels.shape
    rows = np.minimum((np.arange(shape[0]) + 0.5) * h / shape[0], h - 1).astype(np.intp)
    cols = np.minimum((np.arange(shape[1]) + 0.5) * w / shape[1], w - 1).astype(np.intp)
    return labels[rows][:, cols]


def progress_bar(total):
    """A tqdm progress bar over ``total`` images, or None without tqdm."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional (the image extra installs it)
        return None
    return tqdm(total=total, desc="segmenting", unit="img")


def segment_frames(seg, frames):
    """The generator of :meth:`ImageSegmenter.segment_video` (``seg``, its
    parameters checked): one label map per frame, ids kept across frames.
    A path is refused at once: iterated, a file name gave its characters as
    frames ("Image file not found: 'c'" for ``"clip.mp4"``)."""
    if isinstance(frames, (str, bytes, os.PathLike)):
        raise TypeError(
            f"frames must be an iterable of frames (arrays, PIL images, tensors "
            f"or image paths); got the path {os.fsdecode(frames)!r}. Decode a "
            "video file's frames first, e.g. with imageio.v3.imiter(path) or "
            "torchvision.io.read_video(path).")
    one = _one_image(frames)
    if one:  # an animated GIF's advice was [image]: its first frame alone
        n = int(getattr(frames, "n_frames", 1)) if _is_pil_image(frames) else 1
        raise TypeError(
            f"frames must be an iterable of frames; got one image ({one}), whose "
            "rows or channels would be taken for frames. " + (
                f"Pass PIL.ImageSequence.Iterator(image) for its {n} frames."
                if n > 1 else
                "Pass [image] for a one-frame video, or segment(image)."))
    try:  # (a list, a generator: read when the maps are; iterated once: a
        frames = iter(frames)  # DataLoader's iter() starts its workers)
    except TypeError:  # "'int' object is not iterable", at the first frame
        raise TypeError(
            "frames must be an iterable of frames (arrays, PIL images, tensors "
            f"or image paths); got {type(frames).__name__}.") from None
    return _segment_frames(seg, frames)


def _one_image(frames):
    """What ``frames`` is, where it is one image, not a video: a PIL image,
    a 2-D array, an ``(H, W, C)`` array or tensor (iterated: frames of
    width C; an array's C may be 2, grey and alpha, as load_image reads
    it), a ``(C, H, W)`` tensor with ``C`` 3 or 4 (iterated: one grey
    frame per channel, segmented without a word); else ``""``."""
    if _is_pil_image(frames):
        return f"a PIL image of size {frames.size}"
    if not (isinstance(frames, np.ndarray) or is_tensor(frames)):
        return ""
    shape = tuple(frames.shape)
    channels = (1, 3, 4) if is_tensor(frames) else (1, 2, 3, 4)
    if len(shape) == 2 or (len(shape) == 3 and shape[2] in channels) or (
            len(shape) == 3 and is_tensor(frames) and shape[0] in (3, 4)):
        return f"{'a tensor' if is_tensor(frames) else 'an array'} of shape {shape}"
    return ""


def _token_grid(seg, work_shape):
    """The token grid ``(gh, gw)`` of ``seg``'s extractor on a working image
    of ``work_shape`` (a ViT resizes its input first)."""
    ext = seg._get_extractor()
    h, w = work_shape
    if hasattr(ext, "input_size"):
        h, w = ext.input_size(h, w)
    return h // ext.patch_size[0], w // ext.patch_size[1]


# when to check a frame's warm start against a fresh fit (the lower NCut is
# kept): a warm start from a partition that no longer fits (after a black
# frame, whose tokens differ by position only; after a cut) was kept for
# the whole video (mIoU 0.52 where a fresh fit of each frame gives 0.97).
# On the moving shapes of bench_warm_video, consecutive frames' colour
# histograms differ by at most 0.005 and their NCuts by at most 8 %.
SHOT_CHANGE = 0.25  # total variation between the frames' colour histograms
BLANK_STD = 2.0  # grey levels: the previous frame is blank (black, flat)
NCUT_JUMP = 1.25  # the warm NCut over the previous frame's


def colour_histogram(rgb, bins=4):
    """The share of the pixels of the uint8 image ``rgb`` in each of
    ``bins ** 3`` colour cells."""
    q = rgb.reshape(-1, rgb.shape[-1])[:, :3] // (256 // bins)
    cell = (q[:, 0].astype(np.intp) * bins + q[:, 1]) * bins + q[:, 2]
    return np.bincount(cell, minlength=bins ** 3) / len(cell)


def is_blank(rgb):
    """Whether the uint8 image ``rgb`` has no content (:data:`BLANK_STD`)."""
    return bool(np.all(rgb.reshape(-1, rgb.shape[-1]).std(axis=0) <= BLANK_STD))


class _VideoFalcon:
    """The FalconNCut of a video's frames (``fit(X)`` returns the fitted
    estimator): warm-started from the previous frame's labels, and also
    fitted afresh, the lower NCut kept, where ``recheck`` (set per frame:
    a cut, a blank previous frame) or its NCut jumped (:data:`NCUT_JUMP`)."""

    def __init__(self, seg, k, affinity):
        self.seg, self.k, self.affinity = seg, k, affinity
        self.est, self.ncut, self.recheck = (
            seg._falcon(k, affinity, warm_start=True), None, False)

    def fit(self, X):
        est = self.est.fit(X)
        if self.ncut is not None and (self.recheck
                                      or est.ncut_ > NCUT_JUMP * self.ncut):
            cold = self.seg._falcon(self.k, self.affinity, warm_start=True)
            if cold.fit(X).ncut_ < est.ncut_:  # (no labels_ yet: a fresh start)
                self.est = est = cold  # the next frame starts from its labels
        self.ncut = est.ncut_
        return est


def _segment_frames(seg, frames):
    est, grid, prev, next_id, hist, blank = None, None, None, 0, None, False
    seen = set()  # a warning that the frames share is given once per video
    seg._get_extractor()  # (its errors are no frame's: naming_file below)
    for frame in frames:
        rgb = load_image(frame)
        with given_once(seen), naming_file(frame):  # which frame is too small
            plan, work = seg._prepare(rgb)
            if seg.n_segments != "auto" and int(seg.n_segments) > 1:
                affinity = "precomputed" if plan.graph == "knn" else "cosine"
                # the previous labels start a frame of the same token grid
                # only: on a 6 x 16 grid, those of an 8 x 12 one (as many
                # tokens) are a scrambled start (mIoU 0.36 where a fresh
                # start gives 0.99)
                last, grid = grid, _token_grid(seg, plan.work_shape)
                if est is None or est.affinity != affinity or grid != last:
                    est = _VideoFalcon(seg, int(seg.n_segments), affinity)
                before, hist = hist, colour_histogram(work)  # a cut, a fade-in
                est.recheck = blank or bool(before is not None and 0.5 * np.abs(
                    hist - before).sum() > SHOT_CHANGE)
                blank = is_blank(work)
            labels = seg._segment_work(work, plan, est=est)
        if prev is None:
            ids = np.arange(int(labels.max()) + 1)
            next_id = len(ids)
        else:
            if prev.shape != labels.shape:
                prev = resize_labels(prev, labels.shape)
            ids, next_id = match_ids(prev, labels, next_id)
        prev = ids[labels]
        yield seg._full(rgb, work, labels, ids=ids)
