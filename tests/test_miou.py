import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest

from sklearn_falcon._miou import miou


def test_perfect_up_to_relabelling():
    gt = np.array([[0, 0, 1, 1], [2, 2, 1, 1]])
    pred = np.array([[7, 7, 3, 3], [5, 5, 3, 3]])
    assert miou(pred, gt) == 1.0


def test_hand_computed_two_classes():
    gt = np.array([[0, 0, 1, 1]])
    pred = np.array([[5, 5, 5, 7]])
    # 5<->0: IoU 2/3 ; 7<->1: IoU 1/2
    assert miou(pred, gt) == pytest.approx((2 / 3 + 1 / 2) / 2)


def test_hungarian_is_optimal_not_greedy():
    # Matching predicted ids to equal gt ids would give 1/3; the optimal
    # assignment swaps them.
    gt = np.array([0, 0, 0, 1, 1, 1])[None]
    pred = np.array([1, 0, 0, 0, 0, 0])[None]
    # pairs: (pred0, gt0): I=2,U=6 -> 1/3 ; (pred1, gt1): I=0 -> 0 ; total 1/3
    #        (pred0, gt1): I=3,U=5 -> 3/5 ; (pred1, gt0): I=1,U=3 -> 1/3 ; total 14/15
    assert miou(pred, gt) == pytest.approx((3 / 5 + 1 / 3) / 2)


def test_ignore_index():
    gt = np.array([[0, 255, 1, 1]])
    pred = np.array([[0, 1, 1, 1]])
    assert miou(pred, gt) == 1.0
    with pytest.raises(ValueError, match="ignore_index"):
        miou(pred, np.full_like(gt, 255))


def test_extra_segments_and_many_to_one_background():
    gt = np.array([[0, 0, 0, 0, 1, 1]])
    pred = np.array([[0, 0, 2, 2, 1, 1]])  # background split in two segments
    # strict: seg 0 (or 2) matches bg: IoU 2/4 ; class 1: IoU 1
    assert miou(pred, gt) == pytest.approx((0.5 + 1.0) / 2)
    # many-to-one: the unmatched segment joins the background: IoU 1
    assert miou(pred, gt, background="many_to_one") == 1.0


def test_a_segment_that_touches_no_leftover_class_is_unmatched():
    """The assignment pairs every segment it can, also with a class it does
    not touch: such a segment was matched, not merged into the background
    (many-to-one scored the background 1/2 for 1), and its pixels counted
    as false positives of a class it has none of (dataset average)."""
    gt = np.array([[0, 0, 1, 1, 2, 2, 2, 2]])
    pred = np.array([[0, 0, 0, 0, 1, 1, 2, 2]])  # 1 and 2 split class 2
    score, per_class = miou(pred, gt, background="many_to_one",
                            background_index=2, return_per_class=True)
    assert per_class == {0: 0.5, 1: 0.0, 2: 1.0}
    assert score == pytest.approx(0.5)
    # strict matching: class 1 of the second map is found whole; the first
    # map's leftover segment is no false positive of class 1
    gts = [gt, np.array([[0, 0, 1, 1, 1, 1, 1, 1]])]
    preds = [pred, np.array([[0, 0, 1, 1, 1, 1, 1, 1]])]
    _, per_class = miou(preds, gts, average="dataset", return_per_class=True)
    assert per_class[1] == pytest.approx(6 / 8)


def test_fewer_segments_than_classes():
    gt = np.array([[0, 1, 2, 2]])
    pred = np.zeros((1, 4), int)
    # single segment matched to class 2: IoU 2/4; classes 0 and 1 get 0
    assert miou(pred, gt) == pytest.approx(0.5 / 3)


def test_average_image_vs_dataset():
    gts = [np.array([[0, 0, 1, 1]]), np.array([[0, 0, 0, 0]])]
    preds = [np.array([[0, 0, 0, 1]]), np.array([[3, 3, 3, 3]])]
    # image 1: IoU 2/3 and 1/2 ; image 2: IoU 1
    assert miou(preds, gts) == pytest.approx(((2 / 3 + 1 / 2) / 2 + 1) / 2)
    # dataset: class 0 tp=2+4, fp=1, fn=0 -> 6/7 ; class 1 tp=1, fn=1 -> 1/2
    score, per_class = miou(preds, gts, average="dataset", return_per_class=True)
    assert score == pytest.approx((6 / 7 + 1 / 2) / 2)
    assert per_class[0] == pytest.approx(6 / 7)


def test_validation():
    a = np.zeros((2, 2), int)
    with pytest.raises(ValueError, match="shape"):
        miou(a, np.zeros((2, 3), int))
    with pytest.raises(ValueError, match="background"):
        miou(a, a, background="x")
    with pytest.raises(ValueError, match="integer"):
        miou(a + 0.5, a)
    with pytest.raises(ValueError, match="ground-truth maps"):
        miou([a, a], [a])
    # maps without pixels were said to have every pixel equal to
    # ignore_index, even with ignore_index=None
    empty = np.zeros((0, 4), int)
    for ignore in (None, 255):
        with pytest.raises(ValueError, match="The maps in gt have no pixels"):
            miou(empty, empty, ignore_index=ignore)
    with pytest.raises(ValueError, match="Every ground-truth pixel equals "
                       "ignore_index=7"):
        miou(a, a + 7, ignore_index=7)
    # a background_index of no integer class matched none: many-to-one was
    # strict matching without a word
    for bad in (None, "0"):
        with pytest.raises(ValueError, match="background_index must be an integer"):
            miou(a, a, background="many_to_one", background_index=bad)


def test_one_map_as_nested_lists_and_maps_as_a_3d_tensor():
    """A map given as nested lists (rows) was taken for a sequence of 1-D
    maps ("Each map in pred must be 2-D"), and a 3-D tensor of maps, which
    a 3-D array is, was refused; both are read as array-likes."""
    gt = np.array([[0, 0, 1, 1], [0, 0, 1, 1]])
    pred = np.array([[5, 5, 7, 7], [5, 5, 7, 5]])
    want = miou(pred, gt)
    assert miou(pred.tolist(), gt.tolist()) == want
    assert miou(tuple(pred), tuple(gt)) == want
    assert miou([[0, 0, 1]], [[2, 2, 3]]) == 1.0
    assert miou([pred.tolist()] * 2, [gt.tolist()] * 2) == want
    torch = pytest.importorskip("torch")
    stack = np.stack([pred, pred])
    assert miou(torch.as_tensor(stack), torch.as_tensor(np.stack([gt, gt]))) == want
    with pytest.raises(ValueError, match=r"Each map in pred must be 2-D"):
        miou([[0, 0, 1], [0, 1]], [[0, 0, 1], [0, 1]])  # ragged rows
    with pytest.raises(ValueError, match=r"pred must be a 2-D label map or a "
                       r"sequence of them; got shape \(3,\)"):
        miou(np.zeros(3, int), np.zeros(3, int))


def test_maps_from_a_generator():
    # segment_video yields its maps: miou(seg.segment_video(frames), truths)
    # said "pred must be a 2-D label map or a sequence of them; got shape ()"
    gts = [np.array([[0, 0, 1, 1]]), np.array([[0, 0, 0, 1]])]
    preds = [np.array([[4, 4, 2, 2]]), np.array([[1, 1, 1, 1]])]
    expected = miou(preds, gts)
    assert miou((p for p in preds), iter(gts)) == expected
    assert miou(map(np.asarray, preds), gts, average="dataset") == \
        miou(preds, gts, average="dataset")


def test_maps_as_tensors_on_a_device(monkeypatch):
    # label maps on a GPU (`logits.argmax(1)`): NumPy reads only CPU tensors,
    # and miou said torch's "can't convert cuda:0 device type tensor to
    # numpy", where the rest of the package reads a tensor on any device.
    # A CUDA tensor is played by CPU tensors that NumPy cannot read.
    torch = pytest.importorskip("torch")

    def on_a_device(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy.")

    gt = np.array([[0, 0, 1, 1], [0, 0, 1, 1]])
    pred = np.array([[5, 5, 7, 7], [5, 5, 7, 5]])
    want = miou(pred, gt)
    monkeypatch.setattr(torch.Tensor, "__array__", on_a_device)
    t = torch.as_tensor
    assert miou(t(pred), t(gt)) == want
    assert miou([t(pred)] * 2, [t(gt)] * 2) == want
    assert miou(t(np.stack([pred, pred])), (t(gt) for _ in range(2))) == want


def test_metrics_reexport():
    metrics = pytest.importorskip("sklearn_falcon.metrics")
    if not hasattr(metrics, "miou"):
        pytest.skip("sklearn_falcon.metrics does not re-export miou yet")
    assert metrics.miou is miou


def test_maps_of_many_ids_are_matched_sparsely():
    """Two maps of 300,000 ids each (superpixels, one id a pixel) made NumPy
    allocate a dense confusion matrix of ids x ids ("Unable to allocate
    671 GiB"); only the pairs of ids that share pixels are matched now."""
    n = 480 * 640
    pred = np.arange(n).reshape(480, 640)
    gt = (np.arange(n) // 2)[::-1].reshape(480, 640)  # two pixels a class
    assert miou(pred, gt, ignore_index=None) == 0.5  # one of its two pixels
    score, per_class = miou(pred, gt, ignore_index=None, background="many_to_one",
                            return_per_class=True)
    assert per_class[0] == pytest.approx(2 / (n // 2 + 1))  # the rest merged
    assert score == pytest.approx(0.5 - (0.5 - per_class[0]) / (n // 2))


@pytest.mark.parametrize("background", [None, "many_to_one"])
def test_the_sparse_matching_gives_the_dense_one(monkeypatch, background):
    """On maps whose best matching is unique (with 40 ids of these maps two
    matchings tie, and the two paths may take either)."""
    import sklearn_falcon._miou as miou_module

    rng = np.random.default_rng(0)
    maps = [(rng.integers(0, k, (30, 40)), rng.integers(0, 6, (30, 40)))
            for k in (3, 6, 9, 300)]
    maps.append((rng.integers(0, 4, (30, 40)) * 2, np.repeat(np.arange(40) % 5, 30)
                 .reshape(30, 40)))  # a pred id beside a class it misses
    pred, gt = [p for p, _ in maps], [g for _, g in maps]
    kw = dict(background=background, ignore_index=5, return_per_class=True)
    want = [miou(pred, gt, average=a, **kw) for a in ("image", "dataset")]
    monkeypatch.setattr(miou_module, "_DENSE_PAIRS", 0)
    got = [miou(pred, gt, average=a, **kw) for a in ("image", "dataset")]
    for (s1, c1), (s2, c2) in zip(got, want):
        assert s1 == pytest.approx(s2, rel=1e-12) and c1.keys() == c2.keys()
        assert all(c1[k] == pytest.approx(c2[k], rel=1e-12) for k in c1)


def test_return_per_class_must_be_a_bool():
    """``return_per_class="no"`` (or any truthy non-bool) returned a
    ``(score, per_class)`` pair where a float was expected, silently."""
    gt = np.array([[0, 0, 1, 1]])
    pred = np.array([[5, 5, 7, 7]])
    for bad in ("no", "False", 1, None):
        with pytest.raises(ValueError, match="return_per_class must be True or "
                           f"False; got {bad!r}"):
            miou(pred, gt, return_per_class=bad)
    assert miou(pred, gt, return_per_class=np.bool_(False)) == 1.0


def test_whole_float_labels_are_integer_labels():
    """Labels read from a float image (0.0, 1.0, 2.0) were refused as "must
    hold integer labels; got float64", where scikit-learn's metrics and
    ``normalized_cut`` take whole floats; they are read as integers
    (``ignore_index`` and the per-class keys included), and fractions, NaN
    and infinities are still refused, naming the value."""
    rng = np.random.default_rng(0)
    gt = rng.integers(0, 3, (12, 10))
    gt[:2] = 255
    pred = rng.integers(0, 4, (12, 10))
    want = miou(pred, gt, return_per_class=True)
    for dtype in (np.float64, np.float32, np.float16):
        got = miou(pred.astype(dtype), gt.astype(dtype), return_per_class=True)
        assert got == want
        assert all(type(k) is int for k in got[1])
    for bad in (0.5, np.nan, np.inf):
        f = gt.astype(float)
        f[5, 5] = bad
        with pytest.raises(ValueError, match=f"Map 0: gt must hold integer labels; "
                           f"got the value {bad} of dtype=float64"):
            miou(pred, f)
    with pytest.raises(ValueError, match="Map 0: pred must hold integer labels; "
                       "got the value 1e.20"):
        miou(np.full(gt.shape, 1e20), gt)
