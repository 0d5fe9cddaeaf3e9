"""Mean intersection-over-union with per-image Hungarian matching.

This follows the unsupervised-segmentation protocol of DiffCut and Falcon
(after Leopart / Deep Spectral Methods): predicted segment ids are arbitrary,
so in each image they are matched one-to-one to the ground-truth classes
present by maximizing the total IoU (Hungarian algorithm); the image's mIoU
is the mean IoU over its ground-truth classes, and the dataset score is the
mean over images.
"""

import numbers

import numpy as np
from scipy.optimize import linear_sum_assignment

__all__ = ["miou"]


def _host(a):
    """``a``, or a torch tensor on any device as a NumPy array (NumPy reads
    only a CPU tensor: "can't convert cuda:0 device type tensor to numpy");
    told by its module, as ``_backends.is_tensor`` does, without torch."""
    if type(a).__module__.split(".")[0] == "torch" and hasattr(a, "detach"):
        return a.detach().cpu().numpy()
    return a


def _as_list(x, name):
    """The label maps of ``x``: one 2-D map, or a sequence of them (a 3-D
    array or tensor, or a list or tuple of 2-D maps, or any iterable of
    them, e.g. the generator of ``segment_video``: read into a list).  A
    list of equally long 1-D rows (nested lists) is one map."""
    if not (isinstance(x, (list, tuple, str, bytes)) or hasattr(x, "shape")
            or hasattr(x, "__array__")) and hasattr(x, "__iter__"):
        x = list(x)  # it said "got shape ()"
    x = _host(x)
    if isinstance(x, (list, tuple)):
        out = [np.asarray(_host(a)) for a in x]
        if out and all(a.ndim == 1 and a.shape == out[0].shape for a in out):
            out = [np.stack(out)]  # the rows of one map
    else:
        arr = np.asarray(x)
        if arr.ndim not in (2, 3):
            raise ValueError(
                f"{name} must be a 2-D label map or a sequence of them; got shape "
                f"{arr.shape}."
            )
        out = [arr] if arr.ndim == 2 else list(arr)
    for a in out:
        if a.ndim != 2:
            raise ValueError(
                f"Each map in {name} must be 2-D (H, W); got shape {a.shape}.")
    return out


#: Above this many (predicted id, class) pairs an image is matched on the
#: pairs that share pixels (a sparse assignment) instead of a dense IoU
#: matrix: two maps of a million ids each (superpixels) made NumPy allocate
#: a confusion matrix of 7 TiB.  Where two matchings tie, either may be
#: taken (with ``"many_to_one"`` the merged segments then differ).
_DENSE_PAIRS = 1 << 22


def _assign_sparse(rows, cols, iou, n_pred, n_gt):
    """A one-to-one matching of predicted ids ``rows`` to classes ``cols``
    (the pairs that share pixels) that maximizes the summed ``iou``; returns
    the indices of the matched pairs.  Each id and class also has a dummy
    partner (weight 2) and the dummies of a matched pair pair up, so a full
    matching exists; a real pair weighs ``2 - iou``, so the lightest full
    matching has the largest summed IoU."""
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import min_weight_full_bipartite_matching

    n_pairs = len(rows)
    r_pred, r_gt = np.arange(n_pred), np.arange(n_gt)
    i = np.concatenate([rows, r_pred, n_pred + r_gt, n_pred + cols])
    j = np.concatenate([cols, n_gt + r_pred, r_gt, n_gt + rows])
    w = np.full(len(i), 2.0)
    w[:n_pairs] -= iou
    graph = coo_array((w, (i, j)), shape=(n_pred + n_gt,) * 2).tocsr()
    row_ind, col_ind = min_weight_full_bipartite_matching(graph)
    col_of = np.empty(n_pred + n_gt, dtype=np.int64)
    col_of[row_ind] = col_ind
    return np.flatnonzero(col_of[rows] == cols)


def _integer_labels(a, i, name):
    """Map ``i`` of ``name`` as integer labels: whole floats (a label image
    read as floats) as int64, as scikit-learn's metrics take them; other
    floats (fractions, NaN) and dtypes are refused, naming the map."""
    if a.dtype.kind == "f":
        with np.errstate(invalid="ignore"):  # NaN and inf: not whole
            whole = (np.mod(a, 1) == 0) & (np.abs(a) < np.float64(2**63))
        if not np.all(whole):
            raise ValueError(
                f"Map {i}: {name} must hold integer labels; got the value "
                f"{float(a[~whole][0])} of dtype={a.dtype}.")
        return a.astype(np.int64)
    if not (np.issubdtype(a.dtype, np.integer) or a.dtype == bool):
        raise ValueError(f"Map {i}: {name} must hold integer labels; got {a.dtype}.")
    return a


def _match_image(p, g, background, background_index):
    """Per-class (tp, fp, fn) dictionaries after matching, for one image."""
    pu, pi = np.unique(p, return_inverse=True)
    gu, gi = np.unique(g, return_inverse=True)
    pi, gi = pi.ravel(), gi.ravel()
    pred_total = np.bincount(pi, minlength=len(pu))
    gt_count = np.bincount(gi, minlength=len(gu))
    mapping = np.full(len(pu), -1, dtype=np.int64)  # pred row -> gt column, -1 none
    if len(pu) * len(gu) <= _DENSE_PAIRS:
        c = np.bincount(pi * len(gu) + gi, minlength=len(pu) * len(gu)).reshape(
            len(pu), len(gu))
        inter = c.astype(np.float64)
        union = pred_total[:, None] + gt_count[None, :] - inter
        iou = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        rows, cols = linear_sum_assignment(iou, maximize=True)
        # a pair with no common pixel is no match: the assignment pairs the
        # segments left over with classes they do not touch
        keep = c[rows, cols] > 0
        mapping[rows[keep]] = cols[keep]

        def common(r, col):
            return c[r, col]
    else:  # the pairs that share pixels only
        codes, counts = np.unique(pi.astype(np.int64) * len(gu) + gi,
                                  return_counts=True)
        rows, cols = np.divmod(codes, len(gu))
        iou = counts / (pred_total[rows] + gt_count[cols] - counts)
        hit = _assign_sparse(rows, cols, iou, len(pu), len(gu))
        mapping[rows[hit]] = cols[hit]

        def common(r, col):
            at = np.minimum(np.searchsorted(codes, r * len(gu) + col), len(codes) - 1)
            return np.where(codes[at] == r * len(gu) + col, counts[at], 0)
    if background == "many_to_one":
        bg = np.flatnonzero(gu == background_index)
        if bg.size:
            mapping[mapping < 0] = bg[0]
    # confusion after remapping: rows = mapped gt column (or none)
    tp = np.zeros(len(gu), dtype=np.int64)
    pred_count = np.zeros(len(gu), dtype=np.int64)
    r = np.flatnonzero(mapping >= 0)
    np.add.at(tp, mapping[r], common(r, mapping[r]))
    np.add.at(pred_count, mapping[r], pred_total[r])
    fp = pred_count - tp
    fn = gt_count - tp
    return gu, tp, fp, fn


def miou(
    pred,
    gt,
    *,
    ignore_index=255,
    background=None,
    background_index=0,
    average="image",
    return_per_class=False,
):
    """Mean IoU of unsupervised segmentations, with Hungarian matching.

    For each image, pixels whose ground truth equals ``ignore_index`` are
    dropped; the predicted segments are matched one-to-one to the
    ground-truth classes present in the image by maximizing the summed IoU
    (:func:`scipy.optimize.linear_sum_assignment`; past 4 million pairs of
    ids, a matching of the pairs that share pixels only, by
    :func:`scipy.sparse.csgraph.min_weight_full_bipartite_matching`, which
    may take another of two matchings that tie). Unmatched predicted
    segments (when there are more segments than classes, or a segment is
    paired with a class it has no pixel of) count as false positives of no
    class, unless ``background="many_to_one"``.

    Parameters
    ----------
    pred : array-like of shape (H, W) or iterable of such arrays
        Predicted label maps (any integer ids, or whole floats such as
        ``2.0``); an iterator (the generator
        of :meth:`~sklearn_falcon.ImageSegmenter.segment_video`) is read
        once, into a list.
    gt : array-like of shape (H, W) or iterable of such arrays
        Ground-truth class maps (integers or whole floats), same shapes as
        ``pred``.
    ignore_index : int or None, default=255
        Ground-truth value excluded from evaluation (VOC's "void").
    background : {None, "many_to_one"}, default=None
        ``None``: strict one-to-one matching. ``"many_to_one"``: after the
        Hungarian matching, every unmatched predicted segment is merged into
        the background class ``background_index`` (if present in the image),
        as in the DiffCut / Falcon evaluation on Pascal VOC, where many
        segments may cover the background.
    background_index : int, default=0
        Ground-truth id of the background class.
    average : {"image", "dataset"}, default="image"
        ``"image"``: mean over images of each image's mIoU (mean IoU over the
        ground-truth classes present in it), the DiffCut / Falcon protocol.
        ``"dataset"``: true/false positives and false negatives of the
        matched predictions are summed over images per class id, and the
        IoUs of all class ids are averaged.
    return_per_class : bool, default=False
        Also return a ``{class_id: IoU}`` dict (dataset-summed counts).

    Returns
    -------
    score : float
        mIoU in [0, 1].
    per_class : dict
        Only if ``return_per_class``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.metrics import miou
    >>> gt = np.array([[0, 0, 1, 1]])
    >>> miou(np.array([[5, 5, 7, 7]]), gt)      # ids are matched, not compared
    1.0
    >>> miou(np.array([[5, 5, 5, 7]]), gt)      # IoUs 2/3 and 1/2
    0.5833...
    """
    if background not in (None, "many_to_one"):
        raise ValueError(f"background must be None or 'many_to_one'; got {background!r}.")
    if average not in ("image", "dataset"):
        raise ValueError(f"average must be 'image' or 'dataset'; got {average!r}.")
    if ignore_index is not None and not isinstance(ignore_index, numbers.Integral):
        raise ValueError(f"ignore_index must be an integer or None; got {ignore_index!r}.")
    if not isinstance(background_index, numbers.Integral):  # None matched no class
        raise ValueError(
            f"background_index must be an integer; got {background_index!r}.")
    if not isinstance(return_per_class, (bool, np.bool_)):  # "no" returned a pair
        raise ValueError(
            f"return_per_class must be True or False; got {return_per_class!r}.")
    preds, gts = _as_list(pred, "pred"), _as_list(gt, "gt")
    if len(preds) != len(gts):
        raise ValueError(f"Got {len(preds)} predicted maps but {len(gts)} ground-truth maps.")
    if not preds:
        raise ValueError("pred and gt are empty.")
    totals = {}
    per_image = []
    for i, (p, g) in enumerate(zip(preds, gts)):
        if p.shape != g.shape:
            raise ValueError(
                f"Map {i}: pred shape {p.shape} differs from gt shape {g.shape}."
            )
        p, g = _integer_labels(p, i, "pred"), _integer_labels(g, i, "gt")
        valid = np.ones(g.shape, bool) if ignore_index is None else g != ignore_index
        if not valid.any():
            continue
        gu, tp, fp, fn = _match_image(p[valid], g[valid], background, background_index)
        denom = tp + fp + fn
        per_image.append(float(np.mean(tp / np.maximum(denom, 1))))
        for cls, a, b, c in zip(gu.tolist(), tp, fp, fn):
            t = totals.setdefault(cls, [0, 0, 0])
            t[0] += int(a)
            t[1] += int(b)
            t[2] += int(c)
    if not per_image:
        if not any(g.size for g in gts):
            raise ValueError("The maps in gt have no pixels; nothing to evaluate.")
        raise ValueError(
            f"Every ground-truth pixel equals ignore_index={ignore_index}; nothing "
            "to evaluate.")
    per_class = {
        cls: (t[0] / (t[0] + t[1] + t[2]) if (t[0] + t[1] + t[2]) else 0.0)
        for cls, t in sorted(totals.items())
    }
    if average == "image":
        score = float(np.mean(per_image))
    else:
        score = float(np.mean(list(per_class.values())))
    return (score, per_class) if return_per_class else score
