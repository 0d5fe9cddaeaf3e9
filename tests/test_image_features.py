import copy
import os

os.environ["HF_HUB_OFFLINE"] = "1"

import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from sklearn_falcon.image import (
    ColorPositionFeatures,
    ColorTextureFeatures,
    cosine_power_affinity,
    knn_cosine_power_affinity,
    make_extractor,
    prototype_upsample,
    rgb_to_lab,
)


def _img(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# ---------------------------------------------------------------- offline path
def test_rgb_to_lab_matches_skimage():
    color = pytest.importorskip("skimage.color")
    img = _img(9, 7)
    np.testing.assert_allclose(rgb_to_lab(img), color.rgb2lab(img), atol=0.05)


def test_rgb_to_lab_reads_integers_in_their_range():
    # an int64 array (np.array([[255, 0, 0]])) was read as floats in [0, 1]:
    # a* = 6461 for red, silently, and the extractors' features with it
    red = rgb_to_lab(np.array([[255, 0, 0]], np.uint8))
    for arr in (np.array([[255, 0, 0]]), np.array([[65535, 0, 0]], np.uint16),
                np.array([[True, False, False]])):
        np.testing.assert_allclose(rgb_to_lab(arr), red, atol=1e-4)
    img = _img(32, 40)
    np.testing.assert_array_equal(ColorTextureFeatures().extract(img.astype(np.int64)),
                                  ColorTextureFeatures().extract(img))
    with pytest.raises(ValueError,
                       match=r"values in \[0, 1\]; got values in \[0, 255\]"):
        rgb_to_lab(img.astype(np.float64))
    with pytest.raises(ValueError, match="NaN"):
        rgb_to_lab(np.array([[np.nan, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="negative"):
        rgb_to_lab(np.array([[-1, 0, 0]]))



def test_offline_extractors_name_a_wrong_channel_count():
    # an RGBA or grey array failed with NumPy's "matmul: Input operand 1 has
    # a mismatch in its core dimension 0"
    for shape in ((32, 40, 4), (32, 40), (32, 40, 1)):
        for ext in (ColorTextureFeatures(), ColorPositionFeatures()):
            with pytest.raises(ValueError, match=re.escape(
                    f"3 channels in its last axis; got shape {shape}. load_image")):
                ext.extract(np.zeros(shape, np.uint8))


@pytest.mark.parametrize("shape,patch,grid", [((64, 64), 8, (8, 8)),
                                               ((50, 75), 8, (6, 9)),
                                               ((30, 100), 10, (3, 10))])
def test_color_features_grid(shape, patch, grid):
    fe = ColorPositionFeatures(patch)
    f = fe.extract(_img(*shape))
    assert f.shape == grid + (fe.n_components,) and f.dtype == np.float32
    np.testing.assert_array_equal(f, fe.extract(_img(*shape)))  # deterministic


def test_color_position_features_of_a_one_pixel_strip():
    # np.gradient refused a side of one pixel: "Shape of array too small to
    # calculate a numerical gradient"
    from sklearn_falcon import ImageSegmenter

    img = _img(1, 40)
    for strip in (img, img.transpose(1, 0, 2)):
        assert ColorPositionFeatures(1).extract(strip).shape == strip.shape[:2] + (256,)
        lab = ImageSegmenter("color-position", 2, patch_size=1).segment(strip)
        assert lab.shape == strip.shape[:2] and len(np.unique(lab)) == 2
    # a 2-D image's descriptors are those of np.gradient, as before
    d = ColorPositionFeatures(4).descriptors(_img(16, 24))
    assert np.isfinite(d).all() and d[..., 6].std() > 0


def test_color_features_separate_colours():
    img = np.zeros((32, 64, 3), np.uint8)
    img[:, 32:] = (220, 40, 40)
    f = ColorPositionFeatures(8, position_scale=10.0).extract(img).reshape(-1, 256)
    f /= np.linalg.norm(f, axis=1, keepdims=True)
    left, right = f[[0, 1, 8]], f[[7, 6, 15]]
    assert (left @ left.T).min() > 0.9
    assert (left @ right.T).max() < 0.3


def test_color_features_validation():
    with pytest.raises(ValueError, match="patch_size"):
        ColorPositionFeatures(0)
    with pytest.raises(ValueError, match="color_scale"):
        ColorPositionFeatures(8, color_scale=-1)
    with pytest.raises(ValueError, match="smaller than one 8x8 patch"):
        ColorPositionFeatures(8).extract(_img(7, 40))
    with pytest.raises(ValueError, match="no pretrained"):
        make_extractor("color", checkpoint_path="x.pt")


def test_a_misspelt_offline_model_is_refused_by_the_name_meant(monkeypatch):
    """``model="colour"`` (or ``"Color"``, ``"color_position"``) was taken
    for a timm model name: "Unknown timm model name 'colour'", and without
    torch an ImportError that asked to install it."""
    import sklearn_falcon.image._extractors as ex

    def no_vit(*args, **kwargs):
        raise ImportError("TimmFeatures needs torch and timm")

    monkeypatch.setattr(ex, "TimmFeatures", no_vit)  # as without torch
    for model, meant in (("colour", "color"), ("Color", "color"), (" color", "color"),
                         ("color_position", "color-position"),
                         ("Colour-Position", "color-position")):
        with pytest.raises(ValueError, match=rf"Unknown model={re.escape(repr(model))}"
                           rf"; did you mean model='{meant}'\?"):
            make_extractor(model)
    assert make_extractor("color").patch_size == (8, 8)
    with pytest.raises(ImportError, match="needs torch"):  # a timm name
        make_extractor("colorful")


@pytest.mark.parametrize("model", ["color", "color-position"])
def test_offline_models_refuse_the_vit_parameters(model):
    """``ImageSegmenter(resolution=1024)`` (``--resolution 1024`` on the
    command line), ``layer``, ``feature="key"`` and ``pos_interpolation``
    were silently ignored by the offline extractors: the same labels as
    without them, where ``smoothing`` and a checkpoint were refused."""
    from sklearn_falcon import ImageSegmenter

    img = _img(32, 40)
    for kw, named in ((dict(resolution=1024), "resolution=1024 is a ViT"),
                      (dict(resolution=(64, 80)), "resolution=(64, 80)"),
                      (dict(layer=3, feature="key"),
                       "layer=3, feature='key' are ViT parameters"),
                      (dict(pos_interpolation="timm"), "pos_interpolation='timm'")):
        with pytest.raises(ValueError, match=re.escape(named)):
            make_extractor(model, **kw)
        with pytest.raises(ValueError, match=re.escape(named)):
            ImageSegmenter(model, n_segments=2, **kw).segment(img)
    # their defaults, spelled out, are the offline extractor's
    explicit = ImageSegmenter(model, n_segments=2, layer=-1, feature="token",
                              resolution=None, pos_interpolation="bicubic")
    np.testing.assert_array_equal(explicit.segment(img),
                                  ImageSegmenter(model, n_segments=2).segment(img))


def test_cosine_power_affinity_definition():
    rng = np.random.default_rng(0)
    F = rng.normal(size=(20, 5))
    W = cosine_power_affinity(F, power=3)
    Fn = F / np.linalg.norm(F, axis=1, keepdims=True)
    S = Fn @ Fn.T
    expected = ((S - S.min()) / (S.max() - S.min())) ** 3
    np.testing.assert_allclose(W, expected, atol=1e-5)
    np.testing.assert_array_equal(W, W.T)
    assert W.min() >= 0 and W.max() <= 1
    with pytest.raises(ValueError, match="power"):
        cosine_power_affinity(F, power=0)


@pytest.mark.parametrize("scale", [1e20, 1e40])
def test_token_affinities_of_float64_features_beyond_float32(scale):
    """The token affinities are computed in float32, and float64 features
    were cast as they were: features of 1e20 overflowed their squared norms
    to a silently flat W (all ones), and features beyond 3.4e38 were refused
    as "contain NaN or infinite values".  The cosine is blind to a row's
    scale: such rows are scaled by a power of two before the cast."""
    F = np.random.default_rng(0).normal(size=(30, 4))
    for affinity in (cosine_power_affinity, knn_cosine_power_affinity):
        ref = affinity(F, 2.0)
        W = affinity(F * scale, 2.0)
        if hasattr(W, "toarray"):
            W, ref = W.toarray(), ref.toarray()
        assert W.dtype == np.float32
        np.testing.assert_allclose(W, ref, atol=1e-6)
    mixed = F.copy()
    mixed[0] *= scale  # one row far out: its cosines are those of F[0]
    np.testing.assert_allclose(cosine_power_affinity(mixed, 2.0),
                               cosine_power_affinity(F, 2.0), atol=1e-6)
    with pytest.raises(ValueError, match="NaN or infinite"):
        cosine_power_affinity(np.full((3, 2), np.inf))


@pytest.mark.parametrize("cls", [ColorTextureFeatures, ColorPositionFeatures])
def test_offline_extractors_take_any_image_load_image_takes(cls):
    """``extract(rgb)`` of the offline extractors, whose interface
    ``TimmFeatures`` shares (it converts any image), raised "'Image' object
    has no attribute 'shape'" for a PIL image and "'list' object has no
    attribute 'shape'" for nested lists; they are converted by
    ``load_image``, arrays kept as they are."""
    from PIL import Image

    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (32, 40, 3), dtype=np.uint8)
    ext = cls()
    ref = ext.extract(rgb)
    for other in (Image.fromarray(rgb), rgb.tolist()):
        np.testing.assert_array_equal(ext.extract(other), ref)
    if cls is ColorTextureFeatures:
        for a, b in zip(ext.word_maps(Image.fromarray(rgb)), ext.word_maps(rgb)):
            np.testing.assert_array_equal(a, b)


def test_token_affinities_of_no_token_or_no_feature_are_refused_by_name():
    """A ``(gh, gw, 0)`` grid raised NumPy's "cannot reshape array of size
    0 into shape (0)", ``(n, 0)`` features scikit-learn's "a minimum of 1
    is required by check_pairwise_arrays" (the dense affinity) or gave a
    flat ``W`` (the kNN one), and ``(0, 5)`` was said not to be 2-D."""
    for affinity in (cosine_power_affinity, knn_cosine_power_affinity):
        for shape in ((2, 3, 0), (5, 0), (0, 5), (0, 3, 4), ()):
            with pytest.raises(ValueError, match=r"features must be 2-D .* with at "
                               rf"least one token and one feature; got shape "
                               rf"{re.escape(str(shape))}"):
                affinity(np.zeros(shape))


def test_rgb_to_lab_of_large_finite_floats_says_their_range():
    """Float64 colours past float32's range (1e300) were cast first, to
    inf, and refused as "rgb contains NaN or infinite values" (with NumPy's
    overflow warning): they are finite; the message says their range."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"must have values in \[0, 1\]; got "
                           r"values in \[0, 1e\+300\]"):
            rgb_to_lab(np.array([[0.0, 0.5, 1e300]]))
        with pytest.raises(ValueError, match="rgb contains NaN or infinite"):
            rgb_to_lab(np.array([[0.0, 0.5, np.inf]]))


def test_complex_token_features_are_refused_by_name():
    """Complex token features were cast to float32 with NumPy's
    ComplexWarning (the imaginary part dropped, silently otherwise), as the
    estimator refuses them."""
    import warnings

    from sklearn_falcon.image import knn_cosine_power_affinity

    F = np.random.default_rng(0).normal(size=(2, 3, 4)) + 1j
    lab = np.array([[0, 0, 1], [0, 1, 1]])
    calls = [lambda f: cosine_power_affinity(f, 2.0),
             lambda f: knn_cosine_power_affinity(f, 2.0, n_neighbors=2),
             lambda f: prototype_upsample(f, lab, (4, 6))]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for call in calls:
            with pytest.raises(ValueError, match="Complex data not supported: "
                               "features has dtype=complex128"):
                call(F)
            call(F.real)

def test_prototype_upsample_resolution_and_boundary():
    F = np.zeros((3, 4, 2), np.float32)
    F[:, :2, 0] = 1
    F[:, 2:, 1] = 1
    tok = np.array([[0, 0, 1, 1]] * 3)
    lab = prototype_upsample(F, tok, (30, 41))
    assert lab.shape == (30, 41)
    assert (lab[:, :20] == 0).all() and (lab[:, 21:] == 1).all()
    # one NaN token made its prototype NaN and every pixel label 0, silently
    F[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        prototype_upsample(F, tok, (30, 41))
    # a transposed label grid was reshaped to the features' grid, silently
    F[0, 0, 0] = 1.0
    for bad in (tok.T, tok[:, :3], np.zeros(11, int)):
        with pytest.raises(ValueError, match=r"token_labels of shape .* do not match"):
            prototype_upsample(F, bad, (30, 41))
    with pytest.raises(ValueError, match=r"features of shape \(12, 2\)"):
        prototype_upsample(F.reshape(12, 2), tok.ravel(), (30, 41))
    assert prototype_upsample(F, tok.ravel(), (30, 41)).shape == (30, 41)


def test_import_without_torch():
    code = textwrap.dedent(
        """
        import sys

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "timm", "torchvision"):
                    raise ImportError(f"No module named {name!r} (blocked)")
                return None

        sys.meta_path.insert(0, Block())
        import numpy as np
        import sklearn_falcon.image as im
        from sklearn_falcon import ImageSegmenter
        img = np.zeros((32, 32, 3), np.uint8); img[:, 16:] = 200
        lab = ImageSegmenter(n_segments=2, refine=None).segment(img)
        assert lab.shape == (32, 32), lab.shape
        try:
            im.TimmFeatures("vit_tiny_patch16_224")
        except ImportError as exc:
            assert "sklearn-falcon[image]" in str(exc), exc
        else:
            raise AssertionError("no ImportError")
        assert "torch" not in sys.modules
        print("ok")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().endswith("ok")


# -------------------------------------------------------------------- timm path
def _vit(patch, *, reg_tokens=0, seed=0, depth=2):
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    return VisionTransformer(img_size=4 * patch, patch_size=patch, embed_dim=32,
                             depth=depth, num_heads=2, num_classes=0, reg_tokens=reg_tokens,
                             dynamic_img_size=True)


@pytest.mark.parametrize("patch,resolution", [(8, 32), (14, 56), (16, 64)])
def test_timm_token_grid_non_square(patch, resolution):
    from sklearn_falcon.image import TimmFeatures

    ext = TimmFeatures(_vit(patch), resolution=resolution)
    assert ext.patch_size == (patch, patch)
    f = ext.extract(_img(40, 60))  # shorter side -> resolution, aspect kept
    assert f.shape == (4, 6, 32)
    f = ext.extract(_img(60, 40))
    assert f.shape == (6, 4, 32)
    sq = TimmFeatures(_vit(patch), resolution=(2 * patch, 5 * patch)).extract(_img(9 * patch, 9 * patch))
    assert sq.shape == (2, 5, 32)


def test_timm_register_tokens_removed_and_keys():
    from sklearn_falcon.image import TimmFeatures

    model = _vit(14, reg_tokens=4)
    assert model.num_prefix_tokens == 5
    tok = TimmFeatures(model, resolution=56).extract(_img(56, 84))
    key = TimmFeatures(model, resolution=56, feature="key").extract(_img(56, 84))
    assert tok.shape == key.shape == (4, 6, 32)
    assert not np.allclose(tok, key)
    first = TimmFeatures(model, resolution=56, layer=0).extract(_img(56, 84))
    assert not np.allclose(first, tok)


def test_timm_position_term():
    from sklearn_falcon.image import ColorTextureFeatures, TimmFeatures

    model = _vit(14)
    img = _img(56, 84)
    raw = TimmFeatures(model, resolution=56).extract(img)
    ext = TimmFeatures(model, resolution=56, position_weight=0.5)
    f = ext.extract(img)
    assert f.shape == (4, 6, 32 + 64) and f.dtype == np.float32
    unit = raw / np.linalg.norm(raw, axis=-1, keepdims=True)
    np.testing.assert_allclose(f[..., :32], unit, rtol=1e-5, atol=1e-6)
    pos = f[..., 32:].reshape(-1, 64)
    assert abs(np.linalg.norm(pos, axis=1).mean() - 0.5) < 0.1
    # the offline features' term on the same grid (one basis, one geometry)
    offline = ColorTextureFeatures(14, position_weight=0.5).extract(img)[..., 48:]
    np.testing.assert_allclose(f[..., 32:], offline, rtol=1e-5, atol=1e-6)
    # a close pair of tokens is more alike than a far pair, through the term
    cos = lambda a, b: float(a @ b)  # noqa: E731
    assert cos(f[0, 0, 32:], f[0, 1, 32:]) > cos(f[0, 0, 32:], f[3, 5, 32:])
    for bad in (-1, "0.3", float("nan")):
        with pytest.raises(ValueError, match="position_weight"):
            TimmFeatures(model, position_weight=bad)
    with pytest.raises(ValueError, match="position_scale"):
        TimmFeatures(model, position_scale=0)


def test_segmenter_position_weight_reaches_the_extractor():
    from sklearn_falcon import ImageSegmenter

    img = _img(48, 64)
    same = ImageSegmenter(n_segments=3, position_weight=0.3).segment(img)
    np.testing.assert_array_equal(same, ImageSegmenter(n_segments=3).segment(img))
    seg = ImageSegmenter(n_segments=3, position_weight=0)
    assert seg.extract_features(img).shape[-1] == 48
    seg.set_params(position_weight=1.0)
    assert seg.extract_features(img).shape[-1] == 48 + 64
    with pytest.raises(ValueError, match="position_weight=0.3"):
        ImageSegmenter(model="color-position", position_weight=0.3).segment(img)
    with pytest.raises(ValueError, match="'position_weight' parameter"):
        ImageSegmenter(position_weight=-0.1).segment(img)
    vit = ImageSegmenter(model=_vit(16), resolution=64, n_segments=3,
                         position_weight=0.3)
    assert vit.extract_features(img).shape[-1] == 32 + 64
    assert vit.segment(img).shape == img.shape[:2]


def test_timm_token_smoothing():
    from scipy import ndimage as ndi

    from sklearn_falcon import ImageSegmenter
    from sklearn_falcon.image import TimmFeatures
    from sklearn_falcon.image._timm import smooth_tokens

    model = _vit(14)
    img = _img(56, 84)
    raw = TimmFeatures(model, resolution=56, feature="key").extract(img)
    f = TimmFeatures(model, resolution=56, feature="key", smoothing=1.0).extract(img)
    assert f.shape == raw.shape and f.dtype == np.float32
    unit = raw / np.linalg.norm(raw, axis=-1, keepdims=True)
    # each channel of the unit-norm tokens, filtered over the grid
    expect = ndi.gaussian_filter(unit[..., 3], 1.0, mode="nearest")
    np.testing.assert_allclose(f[..., 3], expect, rtol=1e-5, atol=1e-6)
    assert not np.allclose(f, unit, atol=1e-3)
    # a uniform grid stays uniform
    same = smooth_tokens(np.ones((4, 6, 5), np.float32), 2.0)
    np.testing.assert_allclose(same, 5 ** -0.5, rtol=1e-6)
    # then the position term, appended to the renormalized smoothed tokens
    both = TimmFeatures(model, resolution=56, feature="key", smoothing=1.0,
                        position_weight=0.5).extract(img)
    np.testing.assert_allclose(
        both[..., :32], f / np.linalg.norm(f, axis=-1, keepdims=True), rtol=1e-5,
        atol=1e-6)
    assert TimmFeatures(model, smoothing=2).smoothing == 2.0
    for bad in (-0.5, "1", float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="smoothing"):
            TimmFeatures(model, smoothing=bad)
    seg = ImageSegmenter(model=model, resolution=56, feature="key", smoothing=1.0,
                         n_segments=3)
    np.testing.assert_allclose(seg.extract_features(img), f, rtol=1e-6)
    assert seg.segment(img).shape == img.shape[:2]
    with pytest.raises(ValueError, match="smoothing=1.0"):
        ImageSegmenter(smoothing=1.0).segment(img)
    with pytest.raises(ValueError, match="'smoothing' parameter"):
        ImageSegmenter(model=model, smoothing=-1.0).segment(img)


def test_timm_keys_match_manual_computation():
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    model = _vit(16).eval()
    ext = TimmFeatures(model, resolution=(32, 48), feature="key",
                       pos_interpolation="timm")  # the manual forward's _pos_embed
    img = _img(32, 48)
    key = ext.extract(img)
    x = ext.preprocess(img)
    with torch.no_grad():
        t = model.norm_pre(model._pos_embed(model.patch_embed(x)))
        t = model.blocks[0](t)
        qkv = model.blocks[1].attn.qkv(model.blocks[1].norm1(t))
    manual = qkv[0, model.num_prefix_tokens:, 32:64].reshape(2, 3, 32).detach().numpy()
    np.testing.assert_allclose(key, manual, atol=1e-5)


def test_timm_by_name_and_preprocessing_config():
    pytest.importorskip("timm")
    from sklearn_falcon.image import TimmFeatures

    ext = TimmFeatures("vit_tiny_patch16_224", resolution=32)
    np.testing.assert_allclose(ext.mean, [0.5, 0.5, 0.5])  # the model's pretrained_cfg
    assert ext.extract(_img(32, 64)).shape == (2, 4, 192)
    with pytest.raises(ValueError, match="Unknown timm model"):
        TimmFeatures("definitely_not_a_model")
    with pytest.raises(ValueError, match="layer"):
        TimmFeatures(_vit(8), layer=5)
    with pytest.raises(ValueError, match="feature"):
        TimmFeatures(_vit(8), feature="value")


def test_timm_random_weights_are_seeded_and_leave_the_global_state():
    """Without pretrained weights a model by name gets timm's random
    initialization from a generator of its own, seeded: the same features
    whatever torch's global state, which the creation leaves as it was."""
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    img = _img(32, 32)
    torch.manual_seed(1)
    before = torch.get_rng_state()
    a = TimmFeatures("vit_tiny_patch16_224", resolution=32).extract(img)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(2)
    b = TimmFeatures("vit_tiny_patch16_224", resolution=32).extract(img)
    np.testing.assert_array_equal(a, b)


def test_timm_models_created_in_threads_at_once_leave_the_global_state(
        monkeypatch):
    # each creation forks torch's random state and seeds it: two at once
    # saved and restored each other's seeded state
    pytest.importorskip("timm")
    import time

    import timm
    import torch

    from sklearn_falcon.image import TimmFeatures

    create, spans = timm.create_model, []

    def slow_create(*args, **kwargs):
        t0 = time.perf_counter()
        time.sleep(0.2)
        net = create(*args, **kwargs)
        spans.append((t0, time.perf_counter()))
        return net

    monkeypatch.setattr(timm, "create_model", slow_create)
    img = _img(32, 32)
    torch.manual_seed(1)
    before = torch.get_rng_state()
    out = [None, None]

    def run(i):
        out[i] = TimmFeatures("vit_tiny_patch16_224", resolution=32).extract(img)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0  # one after the other
    assert torch.equal(torch.get_rng_state(), before)
    np.testing.assert_array_equal(out[0], out[1])


def test_timm_extract_takes_greyscale_rgba_and_float_images():
    """TimmFeatures.extract on a greyscale, RGBA or float image raised
    "operands could not be broadcast together with shapes (64,96) (3,)" or
    PIL's "Cannot handle this data type"; it converts them as load_image
    does (and ImageSegmenter before it)."""
    from sklearn_falcon.image import TimmFeatures, load_image

    ext = TimmFeatures(_vit(8), resolution=32)
    rgb = _img(32, 40)
    grey, rgba = rgb[..., 0], np.dstack([rgb, rgb[..., :1]])
    for image in (grey, grey[..., None], rgba, rgb / 255.0):
        np.testing.assert_array_equal(ext.extract(image),
                                      ext.extract(load_image(image)))
    np.testing.assert_array_equal(ext.extract(rgba), ext.extract(rgb))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ext.extract(rgb.astype(np.float32))


@pytest.mark.parametrize("feature", ["token", "key"])
def test_timm_module_in_another_precision(feature):
    """A module in float64 or bfloat16 (``model.half()`` on a GPU) raised
    "Input type (float) and bias type (c10::BFloat16) should be the same":
    the input is given in the model's precision."""
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    model, img = _vit(8).eval(), _img(32, 40)
    expected = TimmFeatures(model, resolution=32, feature=feature).extract(img)
    for dtype, atol in ((torch.float64, 1e-4), (torch.bfloat16, 0.5)):
        other = copy.deepcopy(model).to(dtype)
        got = TimmFeatures(other, resolution=32, feature=feature).extract(img)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expected, atol=atol)


def test_timm_unknown_device_names_the_parameter():
    """device="gpu" with a ViT raised torch's "Expected one of cpu, cuda,
    ipu, xpu, mkldnn, ... device type at start of device string: gpu"
    (the offline models named the parameter)."""
    from sklearn_falcon.image import ImageSegmenter, TimmFeatures

    with pytest.raises(ValueError, match="device must be .*got device='gpu'"):
        TimmFeatures(_vit(8), device="gpu")
    seg = ImageSegmenter(_vit(8), device="cuda:x")
    with pytest.raises(ValueError, match="got device='cuda:x'"):
        seg.segment(_img(32, 32))


@pytest.mark.parametrize("device, cuda, match", [
    ("cuda", False, "CUDA is not available"),
    ("cuda:1", False, "CUDA is not available"),
    ("cuda:3", True, "only 1 CUDA device"),
    ("torch:cuda:3", True, "only 1 CUDA device"),
])
def test_timm_cuda_device_refused_before_the_model_is_built(monkeypatch, device,
                                                            cuda, match):
    """TimmFeatures(device="cuda") used directly without CUDA (or "cuda:3" on
    one GPU) built the model, then failed in torch's ``.to``: "Torch not
    compiled with CUDA enabled", "invalid device ordinal".  It says so, as
    ImageSegmenter and pamr do, before a model is built or copied."""
    timm = pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    if device.startswith("torch:"):
        device = torch.device(device[6:])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: int(cuda))
    built, create = [], timm.create_model
    monkeypatch.setattr(timm, "create_model",
                        lambda *a, **k: built.append(a) or create(*a, **k))
    with pytest.raises(ValueError, match=match):
        TimmFeatures("vit_tiny_patch16_224", pretrained=False, device=device)
    assert built == []
    net = _vit(8).train()
    with pytest.raises(ValueError, match=match):
        TimmFeatures(net, device=device)
    assert net.training  # the caller's module, left as it was


@pytest.mark.parametrize("device", ["cpu:0", "torch:cpu:0"])
def test_timm_eval_module_on_cpu_0_is_not_copied(device):
    """A module in eval mode on the CPU, given with ``device="cpu:0"`` (or
    ``torch.device("cpu:0")``, which ImageSegmenter passes on as given), was
    deep-copied: its parameters' device (``cpu``, no index) did not match
    ``cpu:0``, so a large ViT's weights were held twice."""
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    if device.startswith("torch:"):
        device = torch.device(device[6:])
    net = _vit(8).eval()
    assert TimmFeatures(net, device=device).model is net



def test_timm_module_made_in_inference_mode():
    """A ViT created under ``torch.inference_mode()`` (its weights inference
    tensors, which keep no version counter) failed in every ``extract``
    with "Inference tensors do not track version counter" (read to tell
    whether its position embedding changed in place), and so did an
    ImageSegmenter given it.  Its features are those of the same module
    made outside inference mode."""
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon import ImageSegmenter
    from sklearn_falcon.image import TimmFeatures

    with torch.inference_mode():
        net = _vit(8).eval()
    want = TimmFeatures(_vit(8).eval(), resolution=32).extract(_img(40, 60))
    ext = TimmFeatures(net, resolution=32)
    np.testing.assert_array_equal(ext.extract(_img(40, 60)), want)
    np.testing.assert_array_equal(ext.extract(_img(40, 60)), want)  # cached
    seg = ImageSegmenter(net, n_segments=2, refine=None, resolution=32)
    assert seg.segment(_img(40, 60)).shape == (40, 60)


def test_timm_input_size_under_the_budget_rounds_where_it_fits():
    """Under ``max_tokens`` a ViT's input rounded both sides down to whole
    patches: a 500 x 700 image at max_tokens=64 (6.8 x 9.5 patches) got 6 x
    9 = 54 tokens where 7 x 9 = 63 fit.  Each side is rounded where the
    budget allows (as without a budget), else down: never fewer tokens than
    before, never more than the budget, each side within a patch."""
    pytest.importorskip("timm")
    from sklearn_falcon.image import TimmFeatures

    ext = TimmFeatures(_vit(16), resolution=448)
    ext.max_tokens = 64
    assert ext.input_size(500, 700) == (7 * 16, 9 * 16)
    rng = np.random.default_rng(0)
    for _ in range(300):
        h, w = (int(v) for v in rng.integers(20, 3000, 2))
        ext.max_tokens = budget = int(rng.integers(4, 5000))
        i, j = (v // 16 for v in ext.input_size(h, w))
        grid = (448 / 16) ** 2 * max(h, w) / min(h, w)
        if grid <= budget:
            continue
        rows, cols = (h / min(h, w) * 28, w / min(h, w) * 28)
        rows, cols = rows * (budget / grid) ** 0.5, cols * (budget / grid) ** 0.5
        assert max(1, int(rows)) * max(1, int(cols)) <= i * j
        assert i * j <= max(budget, int(max(rows, cols)))  # one patch a side
        assert abs(i - rows) < 1 and abs(j - cols) < 1 or min(i, j) == 1


def test_timm_features_pickle():
    """pickle.dumps(TimmFeatures(...)) raised "cannot pickle 'module'
    object" (it held the torch module); ColorTextureFeatures pickles."""
    import pickle

    from sklearn_falcon.image import TimmFeatures

    ext, img = TimmFeatures(_vit(8), resolution=32, feature="key"), _img(32, 40)
    expected = ext.extract(img)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(ext)).extract(img),
                                  expected)


@pytest.mark.parametrize("kw", [{"layer": True}, {"resolution": True},
                                {"resolution": (True, 32)}])
def test_timm_refuses_booleans_for_integers(kw):
    """layer=True was taken for block 1 and resolution=True for a 1-pixel
    short side (bool is an Integral); they are refused, by name."""
    from sklearn_falcon.image import ImageSegmenter, TimmFeatures

    name = next(iter(kw))
    with pytest.raises(ValueError, match=f"{name} must be"):
        TimmFeatures(_vit(8), **kw)
    with pytest.raises(ValueError, match=f"{name} must be"):
        ImageSegmenter(_vit(8), n_segments=2, **kw).segment(_img(32, 32))


def test_timm_compiled_or_data_parallel_module():
    """A torch.compile'd ViT raised "VisionTransformer does not support
    len()" (in timm's resolve_data_config) and a DataParallel one "is not
    a timm-style Vision Transformer"; the ViT inside is used."""
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    model, img = _vit(8).eval(), _img(32, 40)
    expected = TimmFeatures(model, resolution=32, feature="key").extract(img)
    for wrapped in (torch.compile(model), torch.nn.DataParallel(model),
                    torch.compile(torch.nn.DataParallel(model))):
        ext = TimmFeatures(wrapped, resolution=32, feature="key")
        assert ext.model is model
        np.testing.assert_array_equal(ext.extract(img), expected)


def test_timm_keys_from_two_threads():
    """feature="key" hooks the shared model: a thread's hook also caught the
    keys of another thread's image when their forwards overlapped (8 of 60
    extractions wrong, silently).  Each hook keeps its own thread's."""
    from sklearn_falcon.image import TimmFeatures

    ext = TimmFeatures(_vit(8), resolution=32, feature="key", layer=0)
    imgs = [_img(32, 40, seed=s) for s in range(2)]
    expected = [ext.extract(im) for im in imgs]
    run_blocks, first_done, second_done = ext._run_blocks, threading.Event(), \
        threading.Event()
    out = [None, None]

    def slow_first(x):  # the first thread's forward overlaps the second's
        t = run_blocks(x)
        if threading.current_thread().name == "first":
            first_done.set()
            second_done.wait(30)
        return t

    ext._run_blocks = slow_first

    def run(i):
        out[i] = ext.extract(imgs[i])
        if i == 1:
            second_done.set()

    first = threading.Thread(target=run, args=(0,), name="first")
    first.start()
    first_done.wait(30)
    run(1)
    first.join(30)
    for got, exp in zip(out, expected):
        np.testing.assert_allclose(got, exp, atol=1e-5)


@pytest.mark.parametrize("fmt", ["state_dict", "timm_checkpoint", "safetensors",
                                 "safetensors_named_pth", "compiled"])
def test_checkpoint_loading(tmp_path, fmt):
    # safetensors_named_pth: a safetensors file under another suffix
    # (dinov2_offline --out weights.pth) was read with torch.load: "Cannot
    # read checkpoint ... (KeyError)"
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    src, dst = _vit(8, seed=0), _vit(8, seed=1)
    sd = src.state_dict()
    if fmt == "state_dict":
        path = tmp_path / "w.pth"
        torch.save(sd, path)
    elif fmt == "timm_checkpoint":
        path = tmp_path / "w.pth.tar"
        torch.save({"epoch": 3, "state_dict": {"module." + k: v for k, v in sd.items()}}, path)
    elif fmt == "compiled":  # torch.compile of a DDP model: "_orig_mod.module."
        path = tmp_path / "w.pt"
        wrapped = {"_orig_mod.module." + k: v for k, v in sd.items()}
        torch.save({"model": wrapped}, path)
    else:
        pytest.importorskip("safetensors")
        from safetensors.torch import save_file

        path = tmp_path / ("w.safetensors" if fmt == "safetensors" else "w.pth")
        save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
    img = _img(32, 40)
    expected = TimmFeatures(src, resolution=32).extract(img)
    got = TimmFeatures(dst, resolution=32, checkpoint_path=path).extract(img)
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("registers", [0, 4])
def test_checkpoint_official_dinov2_layout(tmp_path, registers):
    """The checkpoints of Meta's DINOv2 release (``dinov2_vits14_pretrain.pth``)
    hold a ``mask_token``, and those with registers ``register_tokens`` and
    a position embedding with a class row: they raised "does not match the
    model: 1 unexpected keys (e.g. ['mask_token'])".  They are converted by
    timm's own filter, as timm's pretrained weights are."""
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    from sklearn_falcon.image import TimmFeatures

    torch.manual_seed(0)
    src = VisionTransformer(img_size=28, patch_size=14, embed_dim=32, depth=2,
                            num_heads=2, num_classes=0, reg_tokens=registers,
                            no_embed_class=registers > 0, init_values=1e-5,
                            dynamic_img_size=True).eval()
    with torch.no_grad():
        for p in src.parameters():
            p.normal_(0.0, 0.1)
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    sd["mask_token"] = torch.zeros(1, 32)
    if registers:  # Meta's layout: the class row in the position embedding
        pos0 = torch.randn(1, 1, 32)
        sd["register_tokens"] = sd.pop("reg_token")
        sd["cls_token"] = sd["cls_token"] - pos0
        sd["pos_embed"] = torch.cat([pos0, sd["pos_embed"]], 1)
    path = tmp_path / "dinov2_pretrain.pth"
    torch.save(sd, path)
    dst = VisionTransformer(img_size=28, patch_size=14, embed_dim=32, depth=2,
                            num_heads=2, num_classes=0, reg_tokens=registers,
                            no_embed_class=registers > 0, init_values=1e-5,
                            dynamic_img_size=True)
    img = _img(30, 44)
    expected = TimmFeatures(src, resolution=28).extract(img)
    got = TimmFeatures(dst, resolution=28, checkpoint_path=path).extract(img)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_checkpoint_with_pretrained_downloads_nothing(tmp_path, monkeypatch):
    """pretrained=True with a checkpoint_path fetched the pretrained weights
    first, which the checkpoint then replaced: offline it raised the hub's
    LocalEntryNotFoundError although the weights were on disk."""
    pytest.importorskip("timm")
    import timm
    import torch

    from sklearn_falcon.image import TimmFeatures

    create, asked = timm.create_model, []

    def spy(name, pretrained=False, **kwargs):
        asked.append(pretrained)
        return create(name, pretrained=False, **kwargs)

    monkeypatch.setattr(timm, "create_model", spy)
    src = TimmFeatures("vit_tiny_patch16_224", resolution=32)
    path = tmp_path / "w.pth"
    torch.save(src.model.state_dict(), path)
    ext = TimmFeatures("vit_tiny_patch16_224", pretrained=True, checkpoint_path=path,
                       resolution=32)
    assert asked == [False, False]
    img = _img(32, 48)
    np.testing.assert_array_equal(ext.extract(img), src.extract(img))


def test_timm_local_dir_model(tmp_path):
    """timm's "local-dir:" names (a folder with config.json and the weights:
    offline, pretrained=True reads them there) were refused with "Unknown
    timm model name ...; see timm.list_models()"."""
    pytest.importorskip("timm")
    import json

    pytest.importorskip("safetensors")
    from safetensors.torch import save_file

    from sklearn_falcon.image import TimmFeatures

    src = TimmFeatures("vit_tiny_patch16_224", resolution=32)
    save_file({k: v.contiguous() for k, v in src.model.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    cfg = {"architecture": "vit_tiny_patch16_224", "num_classes": 1000,
           "pretrained_cfg": {"input_size": [3, 224, 224], "mean": [0.5] * 3,
                              "std": [0.5] * 3, "interpolation": "bicubic"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    ext = TimmFeatures(f"local-dir:{tmp_path}", pretrained=True, resolution=32)
    img = _img(32, 48)
    np.testing.assert_array_equal(ext.extract(img), src.extract(img))
    with pytest.raises(ValueError, match="Unknown timm model name 'foo:bar'"):
        TimmFeatures("foo:bar")


def test_checkpoint_errors(tmp_path):
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    with pytest.raises(FileNotFoundError, match="checkpoint_path"):
        TimmFeatures(_vit(8), checkpoint_path=tmp_path / "none.pt")
    # a folder (a Hugging Face snapshot): not "torch.load cannot read it
    # (IsADirectoryError)" with advice to re-save it as a state dict
    snap = tmp_path / "snapshot"
    snap.mkdir()
    (snap / "model.safetensors").write_bytes(b"")
    with pytest.raises(IsADirectoryError,
                       match="is a directory.*holds model.safetensors"):
        TimmFeatures(_vit(8), checkpoint_path=snap)
    path = tmp_path / "other.pt"
    torch.save(_vit(16, depth=1).state_dict(), path)
    with pytest.raises(ValueError, match="does not match"):
        TimmFeatures(_vit(8), checkpoint_path=path)
    # another patch size: an error, not timm's resampling of the weights
    torch.save(_vit(16).state_dict(), path)
    with pytest.raises(ValueError, match="does not match.*patch_embed"):
        TimmFeatures(_vit(8), checkpoint_path=path)


def test_timm_eva02_tokens_and_keys():
    """EVA-02 (rotary position embeddings in every block, a fused qkv weight
    applied with separate biases): tokens raised "'NoneType' object is not
    callable" (its patch_drop is None) and keys a KeyError (the attention
    never calls its qkv layer).  Tokens now come from the model's own
    forward_intermediates, keys from the attention's input."""
    pytest.importorskip("timm")
    import torch
    from timm.models.eva import Eva

    from sklearn_falcon.image import TimmFeatures

    torch.manual_seed(0)
    model = Eva(img_size=28, patch_size=14, embed_dim=32, depth=2, num_heads=2,
                num_classes=0, qkv_bias=True, use_rot_pos_emb=True,
                ref_feat_shape=(2, 2), dynamic_img_size=True).eval()
    img = _img(28, 42)
    tokens = TimmFeatures(model, resolution=(28, 42)).extract(img)
    assert tokens.shape == (2, 3, 32) and np.isfinite(tokens).all()
    ext = TimmFeatures(model, resolution=(28, 42), feature="key")
    keys = ext.extract(img)
    attn, seen = model.blocks[1].attn, {}
    hook = attn.register_forward_pre_hook(lambda _m, args: seen.update(x=args[0]))
    with torch.no_grad():
        model.forward_intermediates(ext.preprocess(img), indices=[1])
    hook.remove()
    bias = torch.cat((attn.q_bias, attn.k_bias, attn.v_bias))
    qkv = torch.nn.functional.linear(seen["x"], attn.qkv.weight, bias)
    manual = qkv[0, model.num_prefix_tokens:, 32:64].reshape(2, 3, 32).detach().numpy()
    np.testing.assert_allclose(keys, manual, atol=1e-5)


def test_timm_cait_sam_and_hybrid_vits():
    """Three timm ViT families that failed: CaiT's patch blocks hold no class
    token (its keys came out one token short), ViT-SAM gives its
    intermediates as NCHW only (an AssertionError), and a hybrid ResNet-ViT
    strides its tokens by the backbone's reduction times its patch (the grid
    was computed from the patch alone: 70 tokens where 1,176 were expected)."""
    pytest.importorskip("timm")
    import timm
    import torch
    from timm.models.cait import Cait
    from timm.models.vision_transformer_sam import VisionTransformerSAM

    from sklearn_falcon.image import TimmFeatures

    torch.manual_seed(0)
    img = _img(64, 64)
    cait = Cait(img_size=64, patch_size=16, embed_dim=32, depth=2, num_heads=2,
                depth_token_only=1, num_classes=0).eval()
    sam = VisionTransformerSAM(img_size=64, patch_size=16, embed_dim=32, depth=2,
                               num_heads=2, window_size=2, global_attn_indexes=(1,),
                               num_classes=0, use_rel_pos=False).eval()
    for model in (cait, sam):
        for feature in ("token", "key"):
            out = TimmFeatures(model, resolution=64, feature=feature).extract(img)
            assert out.shape[:2] == (4, 4) and np.isfinite(out).all()
    hybrid = timm.create_model("vit_tiny_r_s16_p8_224", pretrained=False)
    ext = TimmFeatures(hybrid, resolution=64)
    assert ext.patch_size == (32, 32)  # ResNet stem and stages, then 1x1 patches
    assert ext.extract(img).shape == (7, 7, 192)  # 224 / 32 (fixed size)


@pytest.fixture
def timm_builds(monkeypatch):
    """The devices of the timm models built during a test (on torch's meta
    device: built to read their depth, no weights)."""
    timm = pytest.importorskip("timm")
    built, create = [], timm.create_model

    def spy(*args, **kwargs):
        net = create(*args, **kwargs)
        built.append(next(net.parameters()).device.type)
        return net

    monkeypatch.setattr(timm, "create_model", spy)
    return built


@pytest.mark.parametrize("kw,match", [
    (dict(layer=12), r"layer must be an integer in \[-12, 11\]; got 12"),
    (dict(layer=-13, pretrained=True), r"in \[-12, 11\]; got -13"),
    (dict(layer=True), "layer must be"),
    (dict(device="cdua"), "device must be 'auto'.*; got device='cdua'"),
    (dict(resolution=(0, 5)), "resolution must be None"),
])
def test_timm_parameters_refused_before_the_model_is_built(timm_builds, kw, match):
    """A ViT's ``layer`` out of its range (or True), a wrong ``device`` or
    ``resolution`` were refused only once the model was built: 13 s of
    random initialization for a ViT-L (before any image was read), and with
    ``pretrained=True`` a download first (offline: the hub's error, not the
    parameter's).  The depth is read from a build on torch's meta device."""
    from sklearn_falcon.image import ImageSegmenter, TimmFeatures

    with pytest.raises(ValueError, match=match):
        TimmFeatures("vit_tiny_patch16_224", **kw)
    with pytest.raises(ValueError, match=match):
        ImageSegmenter("vit_tiny_patch16_224", n_segments=2, **kw).fit([_img(32, 32)])
    assert set(timm_builds) <= {"meta"}


def test_timm_checkpoint_path_refused_before_the_model_is_built(timm_builds, tmp_path):
    """A ``checkpoint_path`` that does not exist, or a folder, was refused
    only when it was loaded, after the model was built (13 s for a ViT-L)."""
    from sklearn_falcon.image import TimmFeatures

    with pytest.raises(FileNotFoundError, match="checkpoint_path not found"):
        TimmFeatures("vit_tiny_patch16_224", checkpoint_path=tmp_path / "w.pth")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        TimmFeatures("vit_tiny_patch16_224", checkpoint_path=tmp_path, layer=3)
    assert set(timm_builds) <= {"meta"}


def test_cosine_power_affinity_does_not_depend_on_blas_threads():
    """The dense token affinity of ``n_segments="auto"`` was built outside
    the fit's one-BLAS-thread block, so its rounding followed BLAS's thread
    count: a process-pool worker of ``segment_dataset(n_jobs=2)`` (BLAS on
    fewer threads) numbered the same partition's segments differently.
    It is built on one BLAS thread, as within a fit (its kNN twin too, whose
    neighbours at tied similarities followed the rounding)."""
    from threadpoolctl import threadpool_limits

    from sklearn_falcon.image import cosine_power_affinity, knn_cosine_power_affinity

    F = np.random.default_rng(0).random((1500, 48)).astype(np.float32)
    W = cosine_power_affinity(F)
    with threadpool_limits(limits=1, user_api="blas"):
        W1 = cosine_power_affinity(F)
    np.testing.assert_array_equal(W, W1)
    Wk = knn_cosine_power_affinity(F, n_neighbors=10)
    with threadpool_limits(limits=1, user_api="blas"):
        Wk1 = knn_cosine_power_affinity(F, n_neighbors=10)
    assert (Wk != Wk1).nnz == 0


@pytest.mark.parametrize("model", ["color", "color-position"])
def test_offline_make_extractor_refuses_an_unknown_device_by_name(model):
    """``make_extractor("color", device="banana")`` was accepted (the offline
    extractors run on NumPy), where a ViT and ``ImageSegmenter`` refuse it by
    name; the devices they take are still accepted."""
    from sklearn_falcon.image import make_extractor

    for device in ("banana", "cuda:x", "gpu"):
        with pytest.raises(ValueError, match=f"device must be .*got device={device!r}"):
            make_extractor(model, device=device)
    for device in ("cpu", "auto", "cuda", "cuda:1", "cpu:0", None):
        assert make_extractor(model, device=device).patch_size == (8, 8)


@pytest.mark.parametrize("device", [0, 1, 1.5, True])
def test_an_integer_device_is_refused_by_its_value(device):
    """``make_extractor("color", device=0)`` and ``TimmFeatures(device=0)``
    said "device='cuda:0' was requested but CUDA is not available" (torch
    reads 0 as CUDA ordinal 0), a value not given, or used CUDA where there
    was one; ``FalconNCut``, ``ImageSegmenter`` and ``pamr`` refuse an int
    device by its value.  Refused so here too, CUDA or not."""
    from sklearn_falcon.image import TimmFeatures, make_extractor

    match = rf"device must be .*; got device={device!r}\.$"
    for model in ("color", "color-position"):
        with pytest.raises(ValueError, match=match):
            make_extractor(model, device=device)
    with pytest.raises(ValueError, match=match):
        TimmFeatures(_vit(8), device=device)


@pytest.mark.parametrize("bad", [True, 0, 8.0, "8", (4, 8)])
def test_offline_extractors_check_patch_size_alike(bad):
    """``ColorPositionFeatures(True)`` took a cell of one pixel, which
    ``ColorTextureFeatures`` refuses, and the two refused other values in
    words of their own ("a positive integer", "an integer >= 1"); one check
    serves both (and ``context`` and ``n_components``)."""
    from sklearn_falcon.image import ColorPositionFeatures, ColorTextureFeatures

    for cls in (ColorTextureFeatures, ColorPositionFeatures):
        with pytest.raises(ValueError, match=re.escape(
                f"patch_size must be an integer >= 1; got {bad!r}.")):
            cls(bad)
        assert cls(np.int64(4)).patch_size == (4, 4)
    with pytest.raises(ValueError, match="context must be an integer >= 0; got True"):
        ColorPositionFeatures(8, context=True)


@pytest.mark.parametrize("bad", [-1, "a", 1.5])
def test_offline_extractors_refuse_a_bad_random_state_by_name(bad):
    """``random_state=-1`` or ``"a"`` of the offline extractors raised
    NumPy's "expected non-negative integer" or SeedSequence's "expects int
    or sequence of ints", naming no parameter; they are refused as
    ``ImageSegmenter`` refuses them.  Seeds, ``None``,
    ``RandomState`` and ``Generator`` are taken."""
    from sklearn_falcon.image import ColorPositionFeatures, ColorTextureFeatures

    for cls in (ColorTextureFeatures, ColorPositionFeatures):
        with pytest.raises(ValueError, match=f"The 'random_state' parameter of "
                           f"{cls.__name__} must be .*Got {re.escape(repr(bad))} "):
            cls(8, random_state=bad)
        for good in (None, 3, np.int64(3), np.random.RandomState(0),
                     np.random.default_rng(0)):
            assert cls(8, random_state=good).random_state is good


@pytest.mark.parametrize("bad", [3, None, [1]])
def test_make_extractor_names_every_kind_of_model_it_takes(bad):
    """A model of the wrong type was refused as "model must be 'color', a
    timm model name or a torch.nn.Module; got int": without the value, and
    without 'color-position', which it takes.  (It then named "a checkpoint
    path" too, which is no model: see the test below.)"""
    from sklearn_falcon.image import make_extractor

    with pytest.raises(TypeError, match=re.escape(
            "model must be 'color', 'color-position', a timm model name (a "
            "'local-dir:' or 'hf-hub:' one too) or a torch.nn.Module; got "
            f"model={bad!r} ({type(bad).__name__}).")):
        make_extractor(bad)


def test_a_path_as_model_is_refused_with_where_it_goes(tmp_path):
    """make_extractor's refusal of a wrong model listed "a checkpoint path"
    among the models it takes, but a path (a str or a Path) is read as a timm
    name: a checkpoint file or a model folder was refused as "Unknown timm
    model name '/.../dinov2.pth'; see timm.list_models()".  The refusal says
    where each goes: a file to checkpoint_path, a folder to "local-dir:"."""
    pytest.importorskip("timm")
    from sklearn_falcon.image import make_extractor

    ckpt = tmp_path / "dinov2.pth"
    ckpt.write_bytes(b"weights")
    for model in (ckpt, str(ckpt)):
        with pytest.raises(ValueError, match=re.escape(
                f"Unknown timm model name {str(ckpt)!r}; see timm.list_models(). "
                "It is a file: pass the timm name of its architecture as model "
                f"and the file as checkpoint_path (e.g. model='vit_small_patch14_"
                f"dinov2', checkpoint_path={str(ckpt)!r}).")):
            make_extractor(model)
    with pytest.raises(ValueError, match=re.escape(
            "It is a folder: a model saved by timm (config.json and the "
            f"weights) is read from it by model='local-dir:{tmp_path}'.")):
        make_extractor(tmp_path)
    with pytest.raises(ValueError, match=r"timm.list_models\(\)\.$"):
        make_extractor("no_such_vit")  # not a path: as before


def test_a_name_too_long_for_a_file_is_an_unknown_model():
    # the hint of a path given as the model asked the file system about the
    # name: one past 255 characters raised its OSError "File name too long"
    # instead of the refusal of an unknown timm name
    pytest.importorskip("timm")
    from sklearn_falcon.image import make_extractor

    for name in ("x" * 300, "vit/" + "y" * 300):
        with pytest.raises(ValueError, match="^Unknown timm model name "):
            make_extractor(name)
