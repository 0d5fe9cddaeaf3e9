"""Many images at once (ImageSegmenter.segment_dataset): joblib tasks on the
CPU, one batched Falcon call per group of images on a CUDA device."""

import contextlib
import os
import sys
import threading
import warnings
from numbers import Integral

import numpy as np

from .._log import ignoring, recorded, warn_user, warns_once
from .._threads import N_JOBS_CONSTRAINT
from ._budget import too_few_tokens
from ._io import as_image_list, load_image, naming_file
from ._video import progress_bar

__all__ = ["image_seeds", "segment_batch_on_device", "segment_dataset",
           "segment_each"]


def image_seeds(random_state, n):
    """The ``random_state`` of each of ``n`` images: ``random_state`` itself
    (an int, None), or from a RandomState instance one seed per image, drawn
    here, in order: the instance, pickled to each joblib worker, gave each
    task its state, so the maps depended on ``n_jobs`` and ``batch_size``."""
    if random_state is None or isinstance(random_state, Integral):
        return [random_state] * n
    return [int(s) for s in random_state.randint(np.iinfo(np.int32).max, size=n)]


@warns_once  # (ImageSegmenter.fit gave one per image)
def segment_each(seg, images, seeds=None, start=0):
    """``seg.segment`` of each image, image ``i`` with the random_state
    ``seeds[i]`` (:func:`image_seeds` when None), ``seg`` left as it is; a
    warning that the images share is given once.  ``start``: the index of
    ``images[0]`` among the caller's images, which an error names."""
    seeds = image_seeds(seg.random_state, len(images)) if seeds is None else seeds
    seg._get_extractor()  # built once, here: each copy below built its own
    out = []
    for i, (im, seed) in enumerate(zip(images, seeds), start):
        one = seg
        if seed is not seg.random_state:  # a copy that shares the extractor
            one = object.__new__(type(seg))  # (copy.copy drops it: __getstate__)
            one.__dict__.update(vars(seg), random_state=seed)
        with _naming_index(im, i):
            out.append(one.segment(im))
    return out


@contextlib.contextmanager
def _naming_index(image, i):
    """A ValueError or TypeError of ``image``, not a path (``segment`` names
    a file), names its index ``i``: "Image of size 4x4 (HxW) is smaller than
    one 8x8 patch" did not say which of a list's arrays it was."""
    if isinstance(image, (str, os.PathLike)):
        yield
        return
    try:
        yield
    except (ValueError, TypeError) as exc:
        kind = ValueError if isinstance(exc, ValueError) else TypeError
        raise kind(f"Cannot segment images[{i}]: {exc}") from exc


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
    # device n_jobs is not read; progress="no" showed the bar
    validate_parameter_constraints(
        {"n_jobs": N_JOBS_CONSTRAINT,  # FalconNCut's
         "batch_size": [Interval(Integral, 1, None, closed="left")],
         "progress": ["boolean"]},
        {"n_jobs": n_jobs, "batch_size": batch_size, "progress": progress},
        caller_name="ImageSegmenter.segment_dataset")
    items = as_image_list(images)
    batches = [items[i: i + batch_size] for i in range(len(items))[::batch_size]]
    dev = seg._torch_device()
    results, out = [], None
    bar = progress_bar(len(items)) if progress else None
    try:
        # the batched solve makes one start per graph: n_init > 1 (as "auto")
        # goes image by image, or it was ignored without a word
        if dev is not None and seg.n_segments != "auto" and seg.n_init == 1:
            out = ((segment_batch_on_device(seg, batch, dev, i * batch_size), [], [])
                   for i, batch in enumerate(batches))
        else:
            params = seg.get_params(deep=False)
            seeds = image_seeds(seg.random_state, len(items))
            out = Parallel(n_jobs=n_jobs, return_as="generator")(
                delayed(_segment_batch)(type(seg), params, batch,
                                        seeds[i * batch_size: (i + 1) * batch_size],
                                        i * batch_size,
                                        (os.getpid(), threading.get_ident()))
                for i, batch in enumerate(batches))
        registry = {}  # (as a module's: the "default" action shows one once)
        for batch_labels, own, others in out:  # a worker process's, here
            for category, message in own:  # at the caller's line
                warn_user(message, category)
            for category, message, filename, lineno, module in others:
                warnings.warn_explicit(message, category, filename, lineno,
                                       module=module, registry=registry)
            results.extend(batch_labels)
            if bar is not None:
                bar.update(len(batch_labels))
    finally:
        if bar is not None:
            bar.close()
        if out is not None:  # left (a warning raised as an error above): the
            # collected generator warned "N tasks ... have been cancelled"
            with ignoring(UserWarning, message=r"\d+ tasks ", module="joblib"):
                out.close()
    return results


def segment_batch_on_device(seg, batch, device, start=0):
    """Label maps of a batch of images, the token graphs solved together
    by one batched, matrix-free Falcon call on ``device``; ``start``: the
    index of ``batch[0]`` among the caller's images, which an error names
    (as :func:`segment_each`)."""
    from .._batch import falcon_batch

    k = int(seg.n_segments)
    ext = seg._get_extractor()  # (its errors are no image's)
    rgbs, prepared, feats = [], [], []
    for i, im in enumerate(batch, start):
        with _naming_index(im, i):  # an array: its index; a file: its name
            rgbs.append(load_image(im))
            with naming_file(im):  # as segment: which image is too small
                plan, work = seg._prepare(rgbs[-1])
                prepared.append((plan, work))
                feats.append(f := ext.extract(work))
                if f.shape[0] * f.shape[1] < k:  # as segment's: what to do
                    raise too_few_tokens(
                        f.shape[0] * f.shape[1], k, "n_segments", seg.max_tokens,
                        seg.resolution or getattr(ext, "default_short", None),
                        hasattr(ext, "input_size"), plan.resized)
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


def _segment_batch(cls, params, batch, seeds, start, caller):
    """A joblib task: a segmenter made from ``params`` (its extractor built
    once) segments each image of ``batch`` (the first, the caller's
    ``start``-th), with ``seeds``; returns the
    label maps and, run elsewhere than in the thread ``caller`` (``(pid,
    thread id)``), its warnings, which the caller issues: a worker printed
    them on its stderr (attributed to ``multiprocessing/process.py``, past
    the caller's warning filters), a worker thread once per image.  The
    package's warnings as ``(category, message)``, for the caller's line
    (from any thread); in another process's main thread (a loky worker),
    those of other code (a library's DeprecationWarning) as ``(category,
    message, filename, lineno, module)``, at their origin, where the
    caller's filters of their module (and Python's of library
    DeprecationWarnings) apply as with ``n_jobs=1``."""
    seg = cls(**params)
    if (os.getpid(), threading.get_ident()) == caller:
        return segment_each(seg, batch, seeds, start), [], []
    own = []
    if os.getpid() == caller[0] or threading.current_thread() is not (
            threading.main_thread()):  # (catch_warnings: one thread at a time)
        with recorded(own):
            return segment_each(seg, batch, seeds, start), own, []
    with recorded(own), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labels = segment_each(seg, batch, seeds, start)
    names = {w.filename: None for w in caught}  # (one search of each file)
    names = {f: _module_name(f) for f in names}
    return labels, own, [(w.category, str(w.message), w.filename, w.lineno,
                          names[w.filename]) for w in caught]


def _module_name(filename):
    """The name of the imported module of file ``filename`` (None if none),
    which a warning's filters match: ``warnings.warn`` reads it from the
    frame, ``warn_explicit`` would make a path of it."""
    for name, module in list(sys.modules.items()):
        if getattr(module, "__file__", None) == filename:
            return name
    return None
