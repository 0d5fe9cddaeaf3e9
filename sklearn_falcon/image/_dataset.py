"""Many images at once (ImageSegmenter.segment_dataset): joblib tasks on the
CPU, one batched Falcon call per group of images on a CUDA device."""

from numbers import Integral

import numpy as np

from .._log import warns_once
from ._io import as_image_list, load_image
from ._video import progress_bar

__all__ = ["segment_batch_on_device", "segment_dataset"]


@warns_once  # a warning that the images share (in this process): once
def segment_dataset(seg, images, n_jobs, batch_size, progress):
    """:meth:`ImageSegmenter.segment_dataset` of the (checked) segmenter
    ``seg``: the label maps of ``images``, in order."""
    from joblib import Parallel, delayed
    from sklearn.utils._param_validation import (
        Interval,
        validate_parameter_constraints,
    )

    # joblib's own refusal named its Parallel; "2" and 1.5 ran; on a CUDA
    # device n_jobs is not read
    validate_parameter_constraints(
        {"n_jobs": [Interval(Integral, None, -1, closed="right"),
                    Interval(Integral, 1, None, closed="left"), None]},
        {"n_jobs": n_jobs}, caller_name="ImageSegmenter.segment_dataset")
    if not isinstance(batch_size, Integral) or batch_size < 1:
        raise ValueError(
            f"batch_size must be a positive integer; got {batch_size!r}.")
    items = as_image_list(images)
    batches = [items[i: i + batch_size] for i in range(len(items))[::batch_size]]
    dev = seg._torch_device()
    results = []
    bar = progress_bar(len(items)) if progress else None
    try:
        # the batched solve makes one start per graph: n_init > 1 (as "auto")
        # goes image by image, or it was ignored without a word
        if dev is not None and seg.n_segments != "auto" and seg.n_init == 1:
            out = (segment_batch_on_device(seg, batch, dev) for batch in batches)
        else:
            params = seg.get_params(deep=False)
            out = Parallel(n_jobs=n_jobs, return_as="generator")(
                delayed(_segment_batch)(type(seg), params, batch) for batch in batches
            )
        for batch_labels in out:
            results.extend(batch_labels)
            if bar is not None:
                bar.update(len(batch_labels))
    finally:
        if bar is not None:
            bar.close()
    return results


def segment_batch_on_device(seg, batch, device):
    """Label maps of a batch of images, the token graphs solved together
    by one batched, matrix-free Falcon call on ``device``."""
    from .._batch import falcon_batch

    k = int(seg.n_segments)
    rgbs = [load_image(im) for im in batch]
    prepared = [seg._prepare(rgb) for rgb in rgbs]
    ext = seg._get_extractor()
    feats = [ext.extract(work) for _, work in prepared]
    for f in feats:
        if f.shape[0] * f.shape[1] < k:
            raise ValueError(
                f"An image yields only {f.shape[0] * f.shape[1]} patch tokens, "
                f"fewer than n_segments={k}.")
    if k == 1:
        toks = [np.zeros(f.shape[0] * f.shape[1], dtype=np.int64) for f in feats]
    else:
        toks = falcon_batch(
            [f.reshape(-1, f.shape[-1]) for f in feats], k, affinity="cosine",
            power=seg._power(), init=seg.init, random_state=seg.random_state,
            backend="torch", device=str(device)).labels
    out = []
    for rgb, (_, work), f, tok in zip(rgbs, prepared, feats, toks):
        labels = seg._finish_work(work, f, tok.reshape(f.shape[:2]), device)
        out.append(seg._full(rgb, work, labels))
    return out


def _segment_batch(cls, params, batch):
    """A joblib task: a segmenter made from ``params`` (its extractor built
    once) segments each image of ``batch``."""
    seg = cls(**params)
    return [seg.segment(im) for im in batch]
