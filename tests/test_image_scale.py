"""Photo-scale ImageSegmenter: token budget, memory check, streaming
upsampling, kNN token graph, device twins (on CPU torch), video, batching."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

from pathlib import Path  # noqa: E402

import numpy as np
import pytest

from sklearn_falcon import ImageSegmenter
from sklearn_falcon._miou import miou
from sklearn_falcon.image import (
    ColorTextureFeatures,
    cosine_power_affinity,
    knn_cosine_power_affinity,
    prototype_upsample,
    upsample_labels,
)
from sklearn_falcon.image import _budget
from sklearn_falcon.image._dataset import segment_batch_on_device
from sklearn_falcon.image._video import match_ids, resize_labels


def _blocks(h, w, seed=0, noise=6):
    """Three flat-coloured vertical bands with a diagonal edge, and the mask."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    mask = (xx > w / 3 + (yy - h / 2) * 0.3).astype(int) + (xx > 2 * w / 3).astype(int)
    colours = np.array([[200, 40, 40], [40, 180, 60], [40, 60, 200]])
    img = colours[mask] + rng.normal(0, noise, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8), mask


# ----------------------------------------------------------- ColorTextureFeatures
def test_color_texture_features_shape_determinism_and_texture():
    rng = np.random.default_rng(0)
    img = np.full((64, 96, 3), 128, np.uint8)
    img[:, 48:] = rng.integers(0, 256, (64, 48, 1))  # same mean, noisy texture
    fe = ColorTextureFeatures()
    f = fe.extract(img)
    assert f.shape == (8, 12, fe.n_features) and f.dtype == np.float32
    np.testing.assert_array_equal(f, ColorTextureFeatures().extract(img))
    h = f[..., :fe.n_texture_words + fe.n_color_words].reshape(-1, 48)
    np.testing.assert_allclose(np.linalg.norm(h, axis=1), 1.0, rtol=1e-5)
    left, right = f[:, 1].reshape(-1, f.shape[-1]), f[:, 10].reshape(-1, f.shape[-1])
    cos = lambda a, b: (a @ b.T) / np.outer(np.linalg.norm(a, axis=1),  # noqa: E731
                                            np.linalg.norm(b, axis=1))
    assert cos(left, right).max() < cos(left, left).min()
    assert ColorTextureFeatures(position_weight=0).extract(img).shape[-1] == 48


def test_texture_histogram_window_is_a_gaussian_of_the_window_scale():
    from sklearn_falcon.image._texture import _WINDOW_SIGMA, _window_sum

    counts = np.zeros((21, 21, 2))
    counts[10, 10, 0] = 1.0  # one word in one cell
    np.testing.assert_array_equal(_window_sum(counts, 0), counts)
    out = _window_sum(counts, 2)[..., 0]
    assert np.isclose(out.sum(), 1.0)  # mass kept away from the edges
    np.testing.assert_allclose(out, out.T)  # isotropic
    row = out[10, 10:]
    assert np.all(np.diff(row[:6]) < 0) and row[6:].max() == 0  # cut at 3 sd
    s = _WINDOW_SIGMA * 2
    np.testing.assert_allclose(row[1] / row[0], np.exp(-0.5 / s**2), rtol=1e-3)
    assert not _window_sum(counts, 2)[..., 1].any()  # words do not mix
    # at a corner the window is cut: nothing comes from outside the grid
    corner = np.zeros((9, 9, 1))
    corner[0, 0, 0] = 1.0
    assert _window_sum(corner, 2).sum() < 0.5


def test_color_texture_features_validation():
    with pytest.raises(ValueError, match="patch_size"):
        ColorTextureFeatures(0)
    with pytest.raises(ValueError, match="sigmas"):
        ColorTextureFeatures(sigmas=())
    with pytest.raises(ValueError, match="position_weight"):
        ColorTextureFeatures(position_weight=-1)
    with pytest.raises(ValueError, match="n_color_words"):
        ColorTextureFeatures(n_color_words=0)
    # word_maps gave the texture id -1 for 0 words, ids up to 98 of 32
    # words for 100, and kmeans_plusplus's "n_clusters" error for 2.5
    img = np.random.default_rng(0).integers(0, 256, (32, 32, 3)).astype(np.uint8)
    fe = ColorTextureFeatures()
    for bad in ((0, 3), (100, 3), (3, 0), (2.5, 3), (3,), 3):
        with pytest.raises(ValueError, match=r"n_words must be two integers in "
                           r"\[1, 32\] and \[1, 16\]"):
            fe.word_maps(img, bad)
    tex, col = fe.word_maps(img, (np.int64(32), 16))
    assert tex.max() < 32 and col.max() < 16 and min(tex.min(), col.min()) >= 0
    with pytest.raises(ValueError, match="smaller than one 8x8 patch"):
        ColorTextureFeatures().extract(np.zeros((4, 40, 3), np.uint8))


# ------------------------------------------------------------- upsampling
def test_upsample_labels_follows_edges_and_keeps_ids():
    img, mask = _blocks(120, 160)
    from sklearn_falcon.image._budget import resize_rgb

    small = resize_rgb(img, (30, 40))
    coarse = resize_labels(mask, (30, 40)) * 10 + 3  # arbitrary ids
    out = upsample_labels(coarse, img, small)
    assert out.shape == mask.shape and out.dtype == np.int64
    assert set(np.unique(out)) == {3, 13, 23}
    assert miou(out, mask) > 0.97
    # a nearest-neighbour upsampling is blockier than the guided one
    nearest = resize_labels(coarse, mask.shape)
    assert np.mean(out == mask * 10 + 3) > np.mean(nearest == mask * 10 + 3)


def test_upsample_labels_of_bool_and_float16_images():
    # Numba refused them: "No implementation of function float(bool)"
    img = np.zeros((8, 8, 3), np.uint8)
    img[:, 5:] = 255
    small = img[::2, ::2]
    lab = (small[..., 0] > 0).astype(int)
    ref = upsample_labels(lab, img, small)
    np.testing.assert_array_equal(upsample_labels(lab, img > 0, small > 0), ref)
    np.testing.assert_array_equal(
        upsample_labels(lab, img.astype(np.float16), small.astype(np.float16)), ref)
    # an object image raised Numba's TypingError ("non-precise type"), as a
    # complex one did ("No implementation of function float")
    np.testing.assert_array_equal(
        upsample_labels(lab, img.astype(object), small.astype(object)), ref)
    with pytest.raises(ValueError, match="small_image must hold real colour"):
        upsample_labels(lab, img, small.astype(complex))


def test_upsample_labels_of_float_and_16_bit_images_are_guided_alike():
    """Colours are compared in 0..255 units: on float images in [0, 1]
    (``load_image``'s floats) the colour differences were at most 1.7 and
    the guidance off (the edge placed by distance alone); 16-bit images
    were compared in 0..65535 units."""
    img, mask = _blocks(90, 120, seed=1)
    small = img[2::6, 2::6]
    lab = mask[2::6, 2::6]
    ref = upsample_labels(lab, img, small)
    assert miou(ref, mask) > 0.97
    for a, b in ((img / 255.0, small / 255.0),
                 (img.astype(np.uint16) * 257, small.astype(np.uint16) * 257),
                 # big-endian (not == np.uint16): compared in 0..65535 units
                 ((img.astype(np.uint16) * 257).astype(">u2"),
                  (small.astype(np.uint16) * 257).astype(">u2"))):
        got = upsample_labels(lab, a, b)
        assert np.mean(got == ref) > 0.999


def test_upsample_labels_of_images_in_different_scales_are_guided_alike():
    """An 8-bit image and a float resize of it in [0, 1] (scikit-image's
    ``resize`` returns one) had their colours compared in different units:
    every difference was large, the guidance off, the edge placed by
    distance alone (1 pixel in 30 moved), silently; a 16-bit image and an
    8-bit working image likewise."""
    img, mask = _blocks(90, 120, seed=1)
    small = img[2::6, 2::6]
    lab = mask[2::6, 2::6]
    ref = upsample_labels(lab, img, small)
    img16, small16 = img.astype(np.uint16) * 257, small.astype(np.uint16) * 257
    for a, b in ((img, small / 255.0), (img / 255.0, small),
                 (img16, small), (img, small16), (img16, small / 255.0)):
        got = upsample_labels(lab, a, b)
        assert np.mean(got == ref) > 0.999


def test_upsample_labels_errors():
    img = np.zeros((8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match="do not match"):
        upsample_labels(np.zeros((4, 4), int), img, img[:3, :4])
    with pytest.raises(ValueError, match="do not match"):
        upsample_labels(np.zeros((4, 4), int), img[..., 0], img[:4, :4])


@pytest.mark.parametrize("device", [None, "cpu"])
def test_upsample_labels_of_greyscale_images(device):
    """Greyscale ``(H, W)`` and ``(h, w)`` images were refused as not
    matching ``labels``; they are the one-channel images."""
    if device is not None:
        pytest.importorskip("torch")
    grey = np.zeros((8, 8), np.uint8)
    grey[:, 5:] = 255
    small = grey[::2, ::2]
    lab = (small > 0).astype(int)
    ref = upsample_labels(lab, grey[..., None], small[..., None], device=device)
    got = upsample_labels(lab, grey, small, device=device)
    np.testing.assert_array_equal(got, ref)
    assert got[0].tolist() == [0] * 5 + [1] * 3



@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("where", ["image", "small_image"])
def test_upsample_labels_refuses_nan_or_infinite_colours(device, where):
    """A NaN colour made every weight NaN: the pixels took the first label
    (or any other), silently, as ``pamr`` refuses to."""
    if device is not None:
        pytest.importorskip("torch")
    img = np.zeros((8, 8, 3))
    img[:, 5:] = 1.0
    small = img[::2, ::2].copy()
    lab = (small[..., 0] > 0).astype(int)
    bad = img if where == "image" else small
    for value in (np.nan, np.inf):
        bad[3, 3, 1] = value
        with pytest.raises(ValueError, match=f"{where} contains NaN or infinite"):
            upsample_labels(lab, img, small, device=device)

def test_label_ids_that_int64_cannot_hold_are_refused():
    """Labels of fractions (0.5, 1.5) came back as the ids 0 and 1, and
    uint64 ids past the int64 range as negative ids, silently; whole
    floats and booleans keep their ids."""
    img = np.zeros((8, 8, 3), np.uint8)
    img[:, 5:] = 255
    small = img[::2, ::2]
    lab = (small[..., 0] > 0).astype(np.int64) * 7
    F = np.zeros((2, 2, 2))
    F[:, 0, 0] = F[:, 1, 1] = 1
    tok = np.array([[0, 7], [0, 7]])
    ref = upsample_labels(lab, img, small)
    for bad in (lab + 0.5, lab.astype(np.uint64) + np.uint64(2 ** 63)):
        with pytest.raises(ValueError, match="labels must hold integer label ids"):
            upsample_labels(bad, img, small)
    for bad in (tok + 0.5, tok.astype(np.uint64) + np.uint64(2 ** 63)):
        with pytest.raises(ValueError, match="token_labels must hold integer"):
            prototype_upsample(F, bad, (2, 4))
    np.testing.assert_array_equal(upsample_labels(lab.astype(float), img, small), ref)
    np.testing.assert_array_equal(prototype_upsample(F, tok.astype(np.uint64), (2, 4)),
                                  prototype_upsample(F, tok, (2, 4)))


def test_prototype_upsample_of_no_token_or_no_channel():
    """Features of no channel raised NumPy's "cannot reshape array of size
    0", an empty token grid "index -1 is out of bounds"."""
    for F, tok in ((np.zeros((2, 2, 0)), np.array([[0, 1], [0, 1]])),
                   (np.zeros((0, 2, 3)), np.zeros((0, 2), int))):
        with pytest.raises(ValueError, match="hold no token or no channel"):
            prototype_upsample(F, tok, (2, 4))



def test_prototype_upsample_return_scores_must_be_a_bool():
    """``return_scores="no"`` (or any truthy non-bool) returned a
    ``(labels, scores)`` pair where a label map was expected, silently."""
    F = np.zeros((2, 2, 2))
    F[:, 0, 0] = F[:, 1, 1] = 1
    tok = np.array([[0, 1], [0, 1]])
    for bad in ("no", "False", 1, None):
        with pytest.raises(ValueError, match="return_scores must be True or "
                           f"False; got {bad!r}"):
            prototype_upsample(F, tok, (2, 4), return_scores=bad)
    assert prototype_upsample(F, tok, (2, 4), return_scores=np.bool_(False)).shape \
        == (2, 4)


def test_prototype_upsample_and_bilinear_matrix_refuse_bad_sizes():
    """An ``out_shape`` of 0 raised "ZeroDivisionError: division by zero"
    (torch: "Input and output sizes should be greater than 0"), a negative
    one NumPy's "negative dimensions", a fraction was truncated (2.5 as 2)
    and a third entry ignored, silently; ``bilinear_matrix`` raised the
    same ZeroDivisionError, or "index -1 is out of bounds" for ``n_in=0``."""
    from sklearn_falcon.image import bilinear_matrix

    F = np.zeros((2, 2, 2))
    F[:, 0, 0] = F[:, 1, 1] = 1
    tok = np.array([[0, 1], [0, 1]])
    devices = [None]
    try:
        import torch  # noqa: F401
        devices.append("cpu")
    except ImportError:
        pass
    for out_shape in ((0, 4), (-2, 4), (2.5, 4), (2, 4, 3), (4,), "ab", (True, 4),
                      (np.inf, 4), (np.nan, 4)):
        for device in devices:
            with pytest.raises(ValueError, match=r"out_shape must be a pair of "
                               r"positive integers \(H, W\); got "):
                prototype_upsample(F, tok, out_shape, device=device)
    np.testing.assert_array_equal(prototype_upsample(F, tok, (2.0, np.int64(4))),
                                  prototype_upsample(F, tok, (2, 4)))
    for n_out, n_in in ((0, 2), (4, 0), (-1, 2), (4.5, 2)):
        with pytest.raises(ValueError, match="parameter of bilinear_matrix must be"):
            bilinear_matrix(n_out, n_in)

def test_prototype_upsample_refuses_a_score_map_that_cannot_fit(monkeypatch):
    """The (H, W, K) float32 scores of many token labels at a large
    out_shape (1000 labels at 4000x4000: 64 GiB) were allocated, and the
    process killed for memory; they are refused before allocating."""
    from sklearn_falcon import _memory

    F = np.random.default_rng(0).normal(size=(16, 16, 4))
    tok = np.arange(256).reshape(16, 16)
    monkeypatch.setattr(_memory, "available_memory", lambda: 4 << 20)
    with pytest.raises(MemoryError, match="prototype_upsample of 256 labels to "
                       "128x128 pixels"):
        prototype_upsample(F, tok, (128, 128))
    assert prototype_upsample(F, tok % 3, (128, 128)).shape == (128, 128)


def test_prototype_upsample_on_the_torch_cpu_device_refuses_what_cannot_fit(
        monkeypatch):
    """The torch path holds the (K, H, W) float32 scores too, but only the
    host path checked the memory: ``device="cpu"`` at a large out_shape
    raised torch's "DefaultCPUAllocator: can't allocate memory" (or got the
    process killed).  It is refused before allocating, as on the host."""
    pytest.importorskip("torch")
    from sklearn_falcon import _memory

    F = np.random.default_rng(0).normal(size=(16, 16, 4))
    tok = np.arange(256).reshape(16, 16)
    monkeypatch.setattr(_memory, "available_memory", lambda: 4 << 20)
    with pytest.raises(MemoryError, match="prototype_upsample of 256 labels to "
                       "128x128 pixels"):
        prototype_upsample(F, tok, (128, 128), device="cpu")
    np.testing.assert_array_equal(
        prototype_upsample(F, tok % 3, (128, 128), device="cpu"),
        prototype_upsample(F, tok % 3, (128, 128)))


def test_upsample_labels_of_an_empty_map_or_image():
    """An empty label map (0 rows or columns) was read past its end by the
    kernel: garbage ids, or a segmentation fault; an empty image divided
    by zero ("ZeroDivisionError: division by zero")."""
    import subprocess
    import sys

    code = """
import numpy as np
from sklearn_falcon.image import upsample_labels
img = np.zeros((8, 8, 3), np.uint8)
for shape in ((0, 0), (0, 4), (4, 0)):
    try:
        upsample_labels(np.zeros(shape, int), img, np.zeros(shape + (3,), np.uint8))
    except ValueError as exc:
        assert "hold no pixel" in str(exc), exc
        print("refused")
for shape in ((0, 8, 3), (8, 0, 3), (0, 0, 3)):
    out = upsample_labels(np.zeros((4, 4), int), np.zeros(shape, np.uint8), img[:4, :4])
    assert out.shape == shape[:2] and out.dtype == np.int64
    print("empty")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["refused"] * 3 + ["empty"] * 3, out.stdout


def test_device_twins_match_on_cpu_torch():
    pytest.importorskip("torch")
    img, mask = _blocks(90, 120, seed=1)
    from sklearn_falcon.image._budget import resize_rgb

    small = resize_rgb(img, (30, 40))
    coarse = resize_labels(mask, (30, 40))
    a = upsample_labels(coarse, img, small)
    b = upsample_labels(coarse, img, small, device="cpu")
    assert np.mean(a == b) > 0.999
    rng = np.random.default_rng(0)
    F = rng.normal(size=(6, 8, 16)).astype(np.float32)
    tok = rng.integers(0, 3, (6, 8)) * 5
    p1 = prototype_upsample(F, tok, (48, 64))
    p2 = prototype_upsample(F, tok, (48, 64), device="cpu")
    assert np.mean(p1 == p2) > 0.999 and set(np.unique(p2)) <= {0, 5, 10}



def test_device_twins_take_flipped_and_big_endian_arrays():
    """A flipped image (``img[..., ::-1]``, BGR to RGB) or features, or a
    big-endian array, raised torch's "At least one stride in the given numpy
    array is negative" / "byte order different from the native byte order"
    on a torch device; they are copied across instead."""
    pytest.importorskip("torch")
    img, mask = _blocks(45, 60, seed=2)
    from sklearn_falcon.image._budget import resize_rgb

    small = resize_rgb(img, (15, 20))
    coarse = resize_labels(mask, (15, 20))
    for im, sm in ((img[..., ::-1], small[..., ::-1]), (img[:, ::-1], small[:, ::-1]),
                   (img.astype(">f8"), small.astype(">f8"))):
        lab = coarse[:, ::-1] if im.strides[1] < 0 else coarse
        ref = upsample_labels(lab, np.array(im, "=" + im.dtype.char),
                              np.array(sm, "=" + sm.dtype.char))
        np.testing.assert_array_equal(upsample_labels(lab, im, sm, device="cpu"), ref)
    F = np.random.default_rng(0).normal(size=(6, 8, 16)).astype(np.float32)
    tok = np.arange(48).reshape(6, 8) % 3
    for f in (F[:, ::-1], F.astype(">f4")):
        np.testing.assert_array_equal(
            prototype_upsample(f, tok, (24, 32), device="cpu"),
            prototype_upsample(f, tok, (24, 32)))


def test_numba_upsampling_takes_big_endian_arrays_and_returns_int64():
    """The Numba kernel raised Numba's "non-precise type pyobject" for a
    big-endian image (FITS files are), and prototype_upsample returned the
    token labels' dtype where it documents int64."""
    img, mask = _blocks(45, 60, seed=2)
    from sklearn_falcon.image._budget import resize_rgb

    small = resize_rgb(img, (15, 20)).astype(np.float64)
    coarse = resize_labels(mask, (15, 20))
    ref = upsample_labels(coarse, img.astype(np.float64), small)
    np.testing.assert_array_equal(
        upsample_labels(coarse.astype(">i8"), img.astype(">f8"), small.astype(">f8")),
        ref)
    F = np.random.default_rng(0).normal(size=(6, 8, 16)).astype(np.float32)
    tok = (np.arange(48).reshape(6, 8) % 3).astype(np.int32)
    out = prototype_upsample(F, tok, (24, 32))
    assert out.dtype == np.int64
    assert prototype_upsample(F, tok, (24, 32), return_scores=True)[0].dtype == np.int64


# ----------------------------------------------------------- kNN token graph
def test_knn_affinity_keeps_the_dense_weights():
    rng = np.random.default_rng(0)
    F = rng.random((300, 6))
    W = knn_cosine_power_affinity(F, 3.0, n_neighbors=15)
    D = cosine_power_affinity(F, 3.0)
    assert abs(W - W.T).max() == 0
    r = W.tocoo()
    np.testing.assert_allclose(r.data, D[r.row, r.col], rtol=1e-5, atol=1e-6)
    assert (np.diff(W.indptr) >= 15).all()
    # each row keeps its 15 most similar tokens
    top = np.argsort(-D, axis=1)[:, :15]
    assert all(set(top[i]) <= set(W.indices[W.indptr[i]:W.indptr[i + 1]])
               for i in range(0, 300, 37))
    with pytest.raises(ValueError, match="n_neighbors"):
        knn_cosine_power_affinity(F, n_neighbors=0)
    with pytest.raises(ValueError, match="NaN"):
        knn_cosine_power_affinity(np.full((3, 2), np.nan))


def test_knn_affinity_of_identical_tokens_is_flat():
    # the dense affinity of identical tokens is all ones; the kNN one
    # stretched their rounding-level differences to weights of 0.001 to 1
    rng = np.random.default_rng(0)
    F = np.tile(rng.random(112).astype(np.float32), (50, 1))
    F *= rng.uniform(0.5, 2.0, (50, 1)).astype(np.float32)
    np.testing.assert_array_equal(cosine_power_affinity(F, 6.0), 1.0)
    W = knn_cosine_power_affinity(F, 6.0, n_neighbors=10)
    np.testing.assert_array_equal(W.data, 1.0)
    # tokens all zero (similarity 0 to one another): flat as well, not all 0
    Z = np.zeros((6, 4), np.float32)
    np.testing.assert_array_equal(cosine_power_affinity(Z, 6.0), 1.0)
    Wz = knn_cosine_power_affinity(Z, 6.0, n_neighbors=3)
    assert Wz.nnz >= 18 and (Wz.data == 1.0).all()



def test_knn_affinity_takes_rows_below_the_zero_norm_for_zero_rows():
    # rows of norm below 10 eps (float32) have similarity 0 to every row in
    # the dense affinity; the kNN one scaled them by 1 / (10 eps) instead,
    # to norms of 0.08 (weights off by 0.08 at power 1), and tokens that
    # were all such rows gave a W of all zeros, not the dense one's all ones
    rng = np.random.default_rng(0)
    F = np.vstack([rng.normal(size=(28, 6)), np.full((2, 6), 1e-7)])
    W = knn_cosine_power_affinity(F, 1.0, n_neighbors=30, n_range_rows=30)
    np.testing.assert_allclose(W.toarray(), cosine_power_affinity(F, 1.0),
                               atol=1e-6)
    T = rng.normal(size=(6, 4)) * 1e-30
    np.testing.assert_array_equal(cosine_power_affinity(T, 6.0), 1.0)
    Wt = knn_cosine_power_affinity(T, 6.0, n_neighbors=3)
    assert Wt.nnz >= 18 and (Wt.data == 1.0).all()


def test_knn_affinity_keeps_each_token_among_its_neighbours():
    """"Neighbours kept per token (itself included)": with duplicated tokens
    (a flat region, or one token scaled) a duplicate, of similarity 1 as
    well (or 1 plus rounding), took the token's place, so ``W_ii`` was 0
    for about a third of them, where the dense affinity has ``W_ii = 1``."""
    rng = np.random.default_rng(0)
    F = np.repeat(rng.random((30, 16)), 3, axis=0) * rng.uniform(0.5, 2, (90, 1))
    for k in (1, 2, 5):
        W = knn_cosine_power_affinity(F, 2.0, n_neighbors=k)
        np.testing.assert_allclose(W.diagonal(), 1.0, rtol=1e-5)
        assert abs(W - W.T).max() == 0
    W = knn_cosine_power_affinity(np.repeat(rng.random((4, 6)), 5, axis=0), 2.0,
                                  n_neighbors=3, n_range_rows=3)
    assert (W.diagonal() > 0.99).all() and (np.diff(W.indptr) >= 3).all()


# ------------------------------------------------------- budget and memory
def test_work_shape_and_plan():
    assert _budget.work_shape(512, 512, 512 * 512) == (512, 512)
    h, w = _budget.work_shape(3000, 4000, 4096 * 64)
    assert h * w <= 4096 * 64 and abs(w / h - 4 / 3) < 0.01
    p = _budget.make_plan((3000, 4000), max_tokens=4096, patch=8, n_features=112,
                          n_segments=6, refine=True)
    assert p.resized and p.graph == "dense" and p.n_tokens <= 4096
    big = _budget.make_plan((3000, 4000), max_tokens=40000, patch=8, n_features=112,
                            n_segments=6, refine=True)
    assert big.graph == "knn"
    # the budget bounds the working memory: only the full-size maps grow
    small = _budget.make_plan((512, 512), max_tokens=4096, patch=8, n_features=112,
                              n_segments=6, refine=True)
    work = {k: v for k, v in p.parts.items() if not k.startswith("full ")}
    assert work.keys() == small.parts.keys()
    assert all(work[k] <= 1.01 * small.parts[k] for k in work)


def test_thin_image_keeps_a_patch_at_the_working_resolution():
    # a 12 x 40,000 strip under max_tokens=100 was worked on at 1 x 4,618,
    # smaller than one 8 x 8 patch: "Image of size 1x4618 is smaller than one
    # 8x8 patch", a size the caller never gave (max_tokens=1 did the same to
    # a 480 x 640 photo)
    assert _budget.work_shape(12, 40000, 100 * 64, (8, 8)) == (8, 800)
    assert _budget.work_shape(40000, 12, 100 * 64, (8, 8)) == (800, 8)
    assert _budget.work_shape(480, 640, 64, (8, 8)) == (8, 8)
    assert _budget.work_shape(3000, 4000, 4096 * 64, (8, 8)) == \
        _budget.work_shape(3000, 4000, 4096 * 64)
    strip = np.zeros((12, 40000, 3), np.uint8)
    strip[:, 20000:] = (200, 40, 40)
    labels = ImageSegmenter(n_segments=2, refine=None, max_tokens=100).segment(strip)
    assert labels.shape == (12, 40000)
    assert len(np.unique(labels[:, :19900])) == 1
    assert len(np.unique(labels[:, 20100:])) == 1
    assert labels[0, 0] != labels[0, -1]
    photo, _ = _blocks(48, 64)
    assert ImageSegmenter(n_segments=1, max_tokens=1).segment(photo).shape == (48, 64)
    # an image smaller than a patch is named at the size the caller gave
    with pytest.raises(ValueError, match="size 4x100000"):
        ImageSegmenter(n_segments=1).segment(np.zeros((4, 100000, 3), np.uint8))


def test_check_memory_refuses_naming_max_tokens():
    p = _budget.make_plan((4000, 4000), max_tokens=100000, patch=8, n_features=112,
                          n_segments=6, refine=True)
    with pytest.raises(MemoryError, match="Lower max_tokens") as exc:
        _budget.check_memory(p, 100000, available=1 << 30)
    assert "max_tokens=100000" in str(exc.value) and "4000x4000" in str(exc.value)
    _budget.check_memory(p, 100000, available=1 << 40)  # enough: no error
    # a 40,000 x 40,000 image: its full-size image and label map (16.4 GiB)
    # alone exceed 10 GiB, at any max_tokens, which the advice was to lower
    huge = _budget.make_plan((40000, 40000), max_tokens=4096, patch=8,
                             n_features=112, n_segments=6, refine=True)
    with pytest.raises(MemoryError, match="at full resolution alone do not fit, "
                       "whatever max_tokens: segment a downscaled copy") as exc:
        _budget.check_memory(huge, 4096, available=10 << 30)
    assert "Lower max_tokens" not in str(exc.value)
    with pytest.raises(MemoryError, match="Lower max_tokens"):  # 16.4 fit, not 16.6
        _budget.check_memory(huge, 4096, available=int(18.3 * (1 << 30)))


def test_check_memory_suggests_a_budget_below_the_images_tokens():
    # max_tokens=10**9 on a 3000 x 4000 image (3,000,000 tokens of 2 x 2
    # pixels) advised "max_tokens=250000000", which still gave it 3,000,000
    p = _budget.make_plan((3000, 4000), max_tokens=10**9, patch=2, n_features=112,
                          n_segments=6, refine=True)
    assert p.n_tokens == 3_000_000
    with pytest.raises(MemoryError, match=r"e\.g\. max_tokens=750000\)"):
        _budget.check_memory(p, 10**9, available=1 << 30)


def test_memory_plan_counts_no_more_segments_than_tokens():
    """The memory plan counted ``n_segments`` (or ``auto_range``'s upper
    end) segments even above the number of tokens: ``n_segments=10**7``
    on a 48-token image raised a ``MemoryError`` of 343 GiB advising a
    lower ``max_tokens`` instead of naming its 48 tokens, and
    ``auto_range=(2, 10**7)``, whose sweep starts at 48, was refused."""
    img, _ = _blocks(48, 64)
    with pytest.raises(ValueError, match="yields only 48 patch tokens, fewer "
                       "than n_segments=10000000"):
        ImageSegmenter(n_segments=10**7, refine=None).segment(img)
    lab = ImageSegmenter(n_segments="auto", auto_range=(2, 10**7)).segment(img)
    assert lab.shape == (48, 64)
    p = _budget.make_plan((48, 64), max_tokens=4096, patch=8, n_features=112,
                          n_segments=10**7, refine=True)
    assert p.n_segments == 48


def test_segment_refuses_before_allocating(monkeypatch):
    monkeypatch.setattr(_budget, "available_memory", lambda: 1 << 20)
    img, _ = _blocks(64, 64)
    with pytest.raises(MemoryError, match="max_tokens=4096"):
        ImageSegmenter(n_segments=3).segment(img)


def test_segment_refuses_under_a_cgroup_limit(monkeypatch):
    # the image guard read MemAvailable and ulimit -v only: in a container
    # (a Slurm job, a systemd unit) whose cgroup limit is far below the
    # host's free memory it let the allocation through, and the kernel
    # killed the process; the estimator's guard counts the cgroup limits
    from sklearn_falcon import _memory

    monkeypatch.setattr(_memory, "_cgroup_room", lambda: 1 << 20)
    avail = _budget.available_memory()
    assert avail is not None and avail <= 1 << 20
    img, _ = _blocks(64, 64)
    with pytest.raises(MemoryError, match="max_tokens=4096"):
        ImageSegmenter(n_segments=3).segment(img)


def test_cli_reports_memory_error(tmp_path, monkeypatch, capsys):
    from PIL import Image

    from sklearn_falcon.cli import main

    img, _ = _blocks(64, 64)
    path = tmp_path / "a.png"
    Image.fromarray(img).save(path)
    monkeypatch.setattr(_budget, "available_memory", lambda: 1 << 20)
    assert main(["segment", str(path), "--out", str(tmp_path), "-k", "3"]) == 1
    assert "Lower --max-tokens" in capsys.readouterr().err  # the option
    monkeypatch.undo()
    assert main(["segment", str(path), "--out", str(tmp_path), "-k", "3",
                 "--max-tokens", "16", "-q"]) == 0
    lab = np.asarray(Image.open(tmp_path / "a_labels.png"))
    assert lab.shape == (64, 64)


def test_max_tokens_working_resolution():
    img, mask = _blocks(192, 256)
    full = ImageSegmenter(n_segments=3, random_state=0).segment(img)
    capped = ImageSegmenter(n_segments=3, max_tokens=192, random_state=0)
    lab = capped.segment(img)
    assert lab.shape == (192, 256) and lab.dtype == np.int64
    assert np.array_equal(np.unique(lab), np.arange(lab.max() + 1))
    assert capped.extract_features(img).shape[0] * \
        capped.extract_features(img).shape[1] <= 192
    assert miou(lab, mask) > 0.95 and miou(full, mask) > 0.95
    # under the budget nothing changes: the same map as without a budget
    same = ImageSegmenter(n_segments=3, max_tokens=768, random_state=0).segment(img)
    assert np.array_equal(same, full)
    with pytest.raises(ValueError, match="max_tokens"):
        ImageSegmenter(max_tokens=0).segment(img)


def test_knn_graph_above_the_dense_limit(monkeypatch):
    monkeypatch.setattr(_budget, "DENSE_MAX_TOKENS", 50)
    img, mask = _blocks(96, 128)
    lab = ImageSegmenter(n_segments=3, random_state=0).segment(img)
    assert miou(lab, mask) > 0.9


def test_vit_tokens_obey_max_tokens():
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=1,
                            num_heads=2, num_classes=0, dynamic_img_size=True)
    img, _ = _blocks(96, 128)
    seg = ImageSegmenter(model=vit, n_segments=3, resolution=96, max_tokens=48)
    f = seg.extract_features(img)
    assert f.shape[0] * f.shape[1] <= 48 and f.shape[1] > f.shape[0]
    assert seg.segment(img).shape == (96, 128)
    big = ImageSegmenter(model=vit, n_segments=3, resolution=96).extract_features(img)
    assert big.shape[:2] == (12, 16)


# ------------------------------------------------------------------ video
def test_match_ids():
    prev = np.array([[5, 5, 9, 9, 9]])
    cur = np.array([[0, 0, 1, 1, 2]])
    ids, nxt = match_ids(prev, cur, 10)
    assert ids.tolist() == [5, 9, 10] and nxt == 11


def _moving_square(t, size=96):
    rng = np.random.default_rng(0)
    img = np.empty((size, size, 3))
    img[:] = (60, 90, 200)
    img[:, size // 2:] = (70, 180, 60)
    y0, x0 = 20 + 3 * t, 16 + 4 * t
    img[y0:y0 + 28, x0:x0 + 28] = (220, 200, 40)
    img += rng.normal(0, 5, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def test_segment_video_keeps_ids_and_warm_starts(capsys):
    frames = [_moving_square(t) for t in range(4)]
    seg = ImageSegmenter(n_segments=3, refine=None, random_state=0)
    gen = seg.segment_video(iter(frames))
    maps = list(gen)
    assert len(maps) == 4 and all(m.shape == (96, 96) for m in maps)
    for a, b in zip(maps, maps[1:]):
        assert np.mean(a[-8:, -8:] == b[-8:, -8:]) == 1.0  # the static corner
        assert np.mean(a == b) > 0.85
    # each frame alone labels the segments in its own order; the video keeps ids
    assert set(np.unique(maps[-1])) == set(np.unique(maps[0]))


def test_segment_video_warm_starts_on_the_same_token_grid_only():
    # an 8 x 12 grid's labels started the next frame's 12 x 8 grid (as many
    # tokens, another shape): a scrambled start, mIoU 0.36 instead of 0.99
    def frame(h, w, seed):
        mask = np.zeros((h, w), int)
        mask[:h // 2, w // 2:] = 1
        mask[h // 2:, :w // 3] = 2
        mask[h // 2:, w // 3:] = 3
        cols = np.array([[200, 40, 40], [40, 180, 60], [40, 60, 200], [230, 220, 60]])
        noise = np.random.default_rng(seed).normal(0, 10, (h, w, 3))
        return np.clip(cols[mask] + noise, 0, 255).astype(np.uint8), mask

    (a, _), (c, mc) = frame(64, 96, 0), frame(48, 128, 2)  # 8x12, 6x16 tokens
    seg = ImageSegmenter(n_segments=4, refine=None)
    last = list(seg.segment_video([a, c]))[-1]
    assert miou(last, mc) > 0.95
    assert miou(last, seg.segment(c)) == 1.0  # the frame alone: a fresh start


def _three_colours(kind, seed):
    h, w = 64, 96
    mask = np.zeros((h, w), int)
    if kind == "rings":
        r = np.hypot(*np.mgrid[:h, :w] - np.array([h / 2, w / 2])[:, None, None])
        mask[r < 20], mask[r < 8] = 1, 2
    else:  # three stripes
        mask[:, w // 4:w // 2], mask[:, w // 2:] = 2, 1
    cols = np.array([[200, 40, 40], [40, 180, 60], [40, 60, 200]])
    noise = np.random.default_rng(seed).normal(0, 8, (h, w, 3))
    return np.clip(cols[mask] + noise, 0, 255).astype(np.uint8)


def test_segment_video_starts_afresh_after_a_blank_frame_or_a_cut(monkeypatch):
    """A fade from black and a cut trapped the video in the partition of
    the frame before: a black frame's (its tokens differ by position only)
    started the next frame (NCut 1.05, a fresh fit 0.35), and every later
    frame from it (mIoU 0.43-0.50 against each frame alone).  Such a frame
    is fitted afresh too and the lower NCut kept; a video without a cut
    stays warm (one estimator, no fresh fit)."""
    frames = [_moving_square(t) for t in range(3)]
    seg = ImageSegmenter(n_segments=4, refine=None, random_state=0)
    maps = list(seg.segment_video([np.zeros_like(frames[0])] + frames))
    assert miou(maps[1], seg.segment(frames[0])) == 1.0  # was 0.43
    assert min(miou(m, seg.segment(f)) for m, f in zip(maps[1:], frames)) > 0.8
    seg = ImageSegmenter(n_segments=3, refine=None)
    cut = _three_colours("stripes", 1)
    last = list(seg.segment_video([_three_colours("rings", 0), cut]))[-1]
    assert miou(last, seg.segment(cut)) == 1.0  # was 0.42
    made = []
    falcon = ImageSegmenter._falcon
    monkeypatch.setattr(ImageSegmenter, "_falcon",
                        lambda self, *a, **k: made.append(1) or falcon(self, *a, **k))
    assert len(list(seg.segment_video([_three_colours("stripes", s)
                                       for s in range(4)]))) == 4
    assert len(made) == 1


def test_segment_video_auto_and_errors():
    frames = [_moving_square(t, 64) for t in range(2)]
    maps = list(ImageSegmenter(n_segments="auto", refine=None).segment_video(frames))
    assert len(maps) == 2
    with pytest.raises(ValueError, match="n_segments"):
        ImageSegmenter(n_segments=0).segment_video(frames)  # raised at once
    # a video file's path was iterated: "Image file not found: 'c'"
    for path in ("clip.mp4", Path("clip.mp4"), b"clip.mp4"):
        with pytest.raises(TypeError, match="got the path 'clip.mp4'. Decode"):
            ImageSegmenter(n_segments=2).segment_video(path)  # raised at once
    # no iterable: Python's "'int' object is not iterable" at the first
    # frame read, naming no parameter
    for bad, name in ((5, "int"), (None, "NoneType")):
        with pytest.raises(TypeError, match=r"^frames must be an iterable of frames "
                           rf"\(.*\); got {name}\.$"):
            ImageSegmenter(n_segments=2).segment_video(bad)  # raised at once


def test_segment_video_iterates_its_frames_once():
    # the check that frames are iterable called iter(frames) and dropped
    # it, then the generator called it again: an iterable whose iter()
    # does work (a torch DataLoader starts its worker processes) did it twice
    class Clip:
        calls = 0

        def __iter__(self):
            Clip.calls += 1
            return iter([_moving_square(t, 64) for t in range(2)])

    maps = list(ImageSegmenter(n_segments=2, refine=None).segment_video(Clip()))
    assert len(maps) == 2 and Clip.calls == 1


def test_segment_video_refuses_one_image():
    """One image given as the video: an (H, W, 3) array was iterated into
    frames of its rows ("Image of size 64x3 is smaller than one 8x8
    patch"), a PIL image said "'Image' object is not iterable", and a
    (3, H, W) tensor gave three label maps, one per colour channel."""
    img = _moving_square(0, 64)
    seg = ImageSegmenter(n_segments=2, refine=None)
    from PIL import Image

    # an (H, W, 2) grey + alpha array (read by load_image) gave frames of
    # width 2: "Image of size 64x2 is smaller than one 8x8 patch"
    ones = [img, img[..., 0], Image.fromarray(img), img[..., :2]]
    torch = None
    try:
        import torch
    except ImportError:
        pass
    if torch is not None:
        t = torch.from_numpy(img)
        ones += [t, t.permute(2, 0, 1), t[..., 0]]
    for one in ones:
        with pytest.raises(TypeError, match=r"got one image \(.*\).*Pass \[image\]"):
            seg.segment_video(one)  # raised at once
    # videos as arrays and tensors are still read frame by frame
    clip = np.stack([_moving_square(t, 64) for t in range(2)])
    grey = clip[..., 0]
    assert len(list(seg.segment_video(clip))) == 2
    assert len(list(seg.segment_video(grey))) == 2  # (T, H, W)
    assert len(list(seg.segment_video([img]))) == 1
    if torch is not None:
        assert len(list(seg.segment_video(torch.from_numpy(grey)))) == 2



def test_segment_video_refuses_an_animated_image_with_its_frames_iterator(tmp_path):
    """``segment_video(Image.open("clip.gif"))`` advised "Pass [image] for a
    one-frame video": its first frame alone; the advice names PIL's
    iterator of its frames, which segment_video reads."""
    from PIL import Image, ImageSequence

    frames = [Image.fromarray(_moving_square(t, 64)) for t in range(3)]
    frames[0].save(tmp_path / "clip.gif", save_all=True, append_images=frames[1:])
    seg = ImageSegmenter(n_segments=2, refine=None)
    with Image.open(tmp_path / "clip.gif") as gif:
        with pytest.raises(TypeError, match=r"Pass PIL\.ImageSequence\.Iterator\("
                                            r"image\) for its 3 frames\.$"):
            seg.segment_video(gif)
        assert len(list(seg.segment_video(ImageSequence.Iterator(gif)))) == 3

# --------------------------------------------------- batched device path
def test_segment_dataset_batched_solve_on_cpu_torch():
    torch = pytest.importorskip("torch")
    images = [_blocks(64, 96, seed=s)[0] for s in range(3)]
    masks = [_blocks(64, 96, seed=s)[1] for s in range(3)]
    seg = ImageSegmenter(n_segments=3, random_state=0)
    out = segment_batch_on_device(seg, images, torch.device("cpu"))
    assert [o.shape for o in out] == [(64, 96)] * 3
    assert miou(out, masks) > 0.75  # the batched solve starts from a kNN graph
    assert all(len(np.unique(o)) <= 3 for o in out)


def test_segment_dataset_on_a_device_keeps_n_init(monkeypatch):
    # on a CUDA device, segment_dataset solved each batch with falcon_batch,
    # one start per image: n_init=3 was ignored without a word (labels of
    # one start, where segment() takes the best of three)
    from sklearn_falcon.image import _dataset

    images = [_blocks(48, 64, seed=s)[0] for s in range(2)]
    batched = []
    monkeypatch.setattr(_dataset, "segment_batch_on_device",
                        lambda seg, batch, dev, start=0: batched.append(1) or [
                            np.zeros(im.shape[:2], np.int64) for im in batch])
    for n_init, expected in ((1, [1]), (3, [])):
        seg = ImageSegmenter(n_segments=3, n_init=n_init, random_state=0)
        monkeypatch.setattr(seg, "_torch_device", lambda: "cuda")  # a GPU's path
        batched.clear()
        out = seg.segment_dataset(images, batch_size=2, progress=False)
        assert batched == expected
    plain = ImageSegmenter(n_segments=3, n_init=3, random_state=0)
    for o, im in zip(out, images):
        np.testing.assert_array_equal(o, plain.segment(im))


def _cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="CUDA is not available")
def test_device_pipeline_on_cuda():
    img, mask = _blocks(96, 128, seed=2)
    from sklearn_falcon.image._budget import resize_rgb

    small = resize_rgb(img, (24, 32))
    coarse = resize_labels(mask, (24, 32))
    cpu = upsample_labels(coarse, img, small)
    gpu = upsample_labels(coarse, img, small, device="cuda")
    assert np.mean(cpu == gpu) > 0.999
    seg = ImageSegmenter(n_segments=3, device="cuda", max_tokens=64, random_state=0)
    out = seg.segment_dataset([img, img], batch_size=2, progress=False)
    assert [o.shape for o in out] == [(96, 128)] * 2
    assert miou(out, [mask, mask]) > 0.75


def test_upsampling_checks_its_device_whatever_the_input():
    # an empty image (upsample_labels) and return_scores=True
    # (prototype_upsample) returned before the device was looked at:
    # device="banana" was accepted for them, and refused otherwise
    pytest.importorskip("torch")
    img = np.zeros((8, 8, 3), np.uint8)
    lab = np.zeros((4, 4), int)
    with pytest.raises(ValueError, match="device='banana'"):
        upsample_labels(lab, img[:0], img[::2, ::2], device="banana")
    assert upsample_labels(lab, img[:0], img[::2, ::2], device="cpu").shape == (0, 8)
    with pytest.raises(ValueError, match="device='banana'"):
        prototype_upsample(np.ones((4, 4, 3)), lab, (8, 8), return_scores=True,
                           device="banana")
    labels, scores = prototype_upsample(np.ones((4, 4, 3)), lab, (8, 8),
                                        return_scores=True, device="cpu")
    assert labels.shape == (8, 8) and scores.shape == (8, 8, 1)
