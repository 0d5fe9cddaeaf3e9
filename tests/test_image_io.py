import os
import re
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
from PIL import Image

from sklearn_falcon.image import check_image_size, load_image


def _rgb(h=12, w=10, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_array_rgb_roundtrip_and_copy():
    img = _rgb()
    out = load_image(img)
    assert out.dtype == np.uint8 and out.shape == (12, 10, 3)
    np.testing.assert_array_equal(out, img)
    out[0, 0] = 0  # the result must not alias a caller's array in a harmful way
    assert load_image(img).shape == img.shape


def test_the_result_is_a_new_writable_array(tmp_path):
    # "A new array; the input is never modified": an (H, W, 3) uint8 array
    # or tensor came back itself (writing into the result wrote into the
    # caller's image), and a file's or PIL image's pixels were read-only
    # ("assignment destination is read-only")
    img = _rgb()
    keep = img.copy()
    path = tmp_path / "x.png"
    Image.fromarray(img).save(path)
    inputs = [img, path, Image.fromarray(img), img[:, :, :1], img[:, :, [0, 1, 2, 0]]]
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        torch = None
    if torch is not None:
        inputs.append(torch.from_numpy(img))
    for image in inputs:
        out = load_image(image)
        assert out.flags.writeable and out.flags.c_contiguous
        out[:] = 0
    np.testing.assert_array_equal(img, keep)


def test_path_and_pil(tmp_path):
    img = _rgb()
    path = tmp_path / "x.png"
    Image.fromarray(img).save(path)
    np.testing.assert_array_equal(load_image(path), img)
    np.testing.assert_array_equal(load_image(str(path)), img)
    np.testing.assert_array_equal(load_image(Image.fromarray(img)), img)


def test_a_closed_pil_image_is_named(tmp_path):
    """A PIL image used after its ``with Image.open(...)`` block, its pixels
    never loaded, raised Pillow's bare AssertionError (no message)."""
    from sklearn_falcon import ImageSegmenter

    path = tmp_path / "a.png"
    Image.fromarray(_rgb(16, 16)).save(path)
    with Image.open(path) as img:
        pass
    with pytest.raises(ValueError, match="its file was closed before they were "
                       r"loaded .* Call image.load\(\) inside the block"):
        load_image(img)
    with pytest.raises(ValueError, match="file was closed"):
        ImageSegmenter(n_segments=2).segment(img)
    with Image.open(path) as img:
        img.load()
    np.testing.assert_array_equal(load_image(img), _rgb(16, 16))


def test_greyscale_is_replicated(tmp_path):
    grey = np.arange(20, dtype=np.uint8).reshape(4, 5)
    for src in (grey, grey[:, :, None], Image.fromarray(grey)):
        out = load_image(src)
        assert out.shape == (4, 5, 3)
        for c in range(3):
            np.testing.assert_array_equal(out[..., c], grey)
    path = tmp_path / "g.png"
    Image.fromarray(grey).save(path)
    assert load_image(path).shape == (4, 5, 3)


def test_rgba_drops_alpha(tmp_path):
    rgba = np.dstack([_rgb(6, 7), np.full((6, 7), 17, np.uint8)])
    np.testing.assert_array_equal(load_image(rgba), rgba[..., :3])
    path = tmp_path / "a.png"
    Image.fromarray(rgba, "RGBA").save(path)
    np.testing.assert_array_equal(load_image(path), rgba[..., :3])


def test_premultiplied_grey_and_alpha_is_read():
    # a PIL image of mode "La" (grey with premultiplied alpha, as Pillow
    # makes LA images to resample them) raised Pillow's "conversion from La
    # to L not supported", where the docstring takes a PIL image in any mode
    la = np.dstack([np.arange(35, dtype=np.uint8).reshape(5, 7) * 7,
                    np.full((5, 7), 255, np.uint8)])
    img = Image.fromarray(la, "LA").convert("La")
    assert img.mode == "La"
    out = load_image(img)
    np.testing.assert_array_equal(out, np.repeat(la[..., :1], 3, axis=2))


def test_16bit_is_scaled(tmp_path):
    g16 = np.array([[0, 257, 65535]], dtype=np.uint16)
    np.testing.assert_array_equal(load_image(g16)[..., 0], [[0, 1, 255]])
    path = tmp_path / "g16.png"
    Image.fromarray(np.tile(g16, (3, 1))).save(path)  # PIL mode I;16
    out = load_image(path)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, :, 0], [0, 1, 255])
    rgb16 = np.full((2, 2, 3), 65535, np.uint16)
    assert load_image(rgb16).max() == 255


def test_big_endian_16bit_is_scaled_as_16bit():
    """A big-endian uint16 array (FITS, a raw PGM read with '>u2') is not
    ``== np.uint16``: it was read by its values, so a dark one (all <= 255)
    came out 257 times brighter than the same native array."""
    from sklearn_falcon.image import rgb_to_lab

    dark = np.array([[0, 100, 200, 255]], dtype=np.uint16)
    for arr in (dark, np.array([[0, 257, 65535]], np.uint16)):
        np.testing.assert_array_equal(load_image(arr.astype(">u2")), load_image(arr))
    np.testing.assert_array_equal(load_image(dark.astype(">u2"))[..., 0],
                                  [[0, 0, 1, 1]])
    rgb = np.array([[200, 100, 50]], np.uint16)
    np.testing.assert_array_equal(rgb_to_lab(rgb.astype(">u2")), rgb_to_lab(rgb))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.float32, np.float64])
def test_conversion_allocates_about_its_output(dtype):
    """16-bit, wide-integer and float images were converted through float64
    copies of the whole image: 48 bytes a pixel (16 times the uint8 result),
    more than the rest of a 12-megapixel segmentation; they are converted
    in blocks of rows."""
    import tracemalloc

    rng = np.random.default_rng(0)
    img = rng.integers(0, 65536, (1000, 1000, 3))
    img = img / 65535.0 if np.dtype(dtype).kind == "f" else img
    img = img.astype(dtype)
    ref = np.round(img * 255.0 if img.dtype.kind == "f"
                   else img.astype(np.float64) / 257.0).astype(np.uint8)
    tracemalloc.start()
    try:
        out = load_image(img)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, ref)
    assert peak < 3 * out.nbytes  # the result (3 MB) and a block of rows


def test_float_and_bool_arrays():
    np.testing.assert_array_equal(load_image(np.ones((2, 2))), np.full((2, 2, 3), 255))
    assert load_image(np.ones((2, 2), bool)).max() == 255
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        load_image(np.full((2, 2, 3), 2.0))
    with pytest.raises(ValueError, match="NaN"):
        load_image(np.full((2, 2), np.nan))


def test_a_round_off_past_the_float_range_is_named_in_full():
    """A float image 1.0000001 at its brightest (round-off of a colour
    conversion) was refused as "must have values in [0, 1]; got values in
    [0, 1]": the bound is now written in full where 4 digits hide it."""
    from sklearn_falcon.image import rgb_to_lab

    img = np.full((8, 8, 3), 0.5, np.float32)
    img[0, 0, 0] = np.float32(1.0000001)
    for f in (load_image, rgb_to_lab):
        with pytest.raises(ValueError, match=r"got values in \[0\.5, 1\.0000001\]"
                           if f is rgb_to_lab else r"got values in \[0, 1\.0000001\]"):
            f(img)
    with pytest.raises(ValueError, match=r"got values in \[-1e-17, 0\.5\]"):
        load_image(np.where(img > 0.9, -1e-17, img.astype(np.float64)))
    with pytest.raises(ValueError, match=r"got values in \[0, 255\]\."):
        load_image(np.full((8, 8), 255.0))  # clearly outside: 4 digits


def test_rejections(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_image(tmp_path / "missing.png")
    # a URL was named as a file, its second slash dropped ('https:/host/...')
    with pytest.raises(FileNotFoundError, match=r"not found: 'https://example\.com/"
                       r"cat\.jpg' is a URL; .* download it first"):
        load_image("https://example.com/cat.jpg")
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    with pytest.raises(ValueError, match="Cannot read image"):
        load_image(bad)
    with pytest.raises(ValueError, match=r"got shape \(2, 2, 5\)\.$"):
        load_image(np.zeros((2, 2, 5), np.uint8))
    # a channels-first array (a CHW tensor's .numpy()) is named as such
    with pytest.raises(ValueError, match=r"got shape \(3, 12, 10\)\. A channels-first "
                       r"\(C, H, W\) image .* np\.moveaxis\(image, 0, -1\)\.$"):
        load_image(np.moveaxis(_rgb(), -1, 0))
    with pytest.raises(ValueError, match="negative"):
        load_image(-np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match="empty"):
        load_image(np.zeros((0, 3, 3), np.uint8))
    with pytest.raises(TypeError, match="file path"):
        load_image(42)


def test_tiny_image_rejected():
    check_image_size(np.zeros((8, 8, 3), np.uint8), 8)
    with pytest.raises(ValueError, match="smaller than one 8x8 patch"):
        check_image_size(np.zeros((5, 30, 3), np.uint8), 8)
    with pytest.raises(ValueError, match="smaller than one 14x14 patch"):
        check_image_size(np.zeros((30, 13, 3), np.uint8), (14, 14))


def test_check_image_size_refuses_a_bad_patch_size_by_name():
    """A 1-tuple said "not enough values to unpack", a string "'<' not
    supported between instances", None "cannot unpack", and a patch of 0,
    -3 or 8.5 pixels was accepted; a nested list said "'list' object has
    no attribute 'shape'"."""
    img = np.zeros((16, 16, 3), np.uint8)
    for bad in (0, -3, 8.5, (8,), (8, 8, 8), "8", None, (8, 0)):
        with pytest.raises(ValueError, match=r"patch_size must be a positive "
                           rf"integer .*got patch_size={re.escape(repr(bad))}\."):
            check_image_size(img, bad)
    for good in (8, np.int64(16), (16, 8), [8, 16], np.array([16, 16])):
        check_image_size(img, good)
    check_image_size(img.tolist(), 8)
    with pytest.raises(ValueError, match="smaller than one 32x8 patch"):
        check_image_size(img.tolist(), (32, 8))
    with pytest.raises(ValueError, match=r"rgb must be an image .*shape \(16,\)"):
        check_image_size(np.zeros(16), 8)


def test_torch_tensor():
    torch = pytest.importorskip("torch")
    img = _rgb(5, 6)
    chw = torch.from_numpy(img).permute(2, 0, 1)
    np.testing.assert_array_equal(load_image(chw), img)
    np.testing.assert_array_equal(load_image(chw[None]), img)
    np.testing.assert_array_equal(load_image(chw.float() / 255), img)
    assert load_image(torch.zeros(1, 5, 6)).shape == (5, 6, 3)
    with pytest.raises(ValueError, match="exactly one image"):
        load_image(torch.zeros(2, 3, 5, 6))


@pytest.mark.parametrize("orientation, turn", [
    (1, lambda a: a),
    (2, lambda a: a[:, ::-1]),
    (3, lambda a: np.rot90(a, 2)),
    (6, lambda a: np.rot90(a, -1)),  # a portrait phone photo: 90 degrees clockwise
    (8, lambda a: np.rot90(a, 1)),
])
def test_a_file_is_read_in_its_exif_orientation(tmp_path, orientation, turn):
    """A phone photo's pixels are stored as the sensor saw them, with an EXIF
    tag that tells viewers how to turn them; they were read unturned, so the
    label map of a portrait photo came out on its side."""
    from sklearn_falcon.image import ImageSegmenter

    a = np.random.default_rng(0).integers(0, 256, (24, 40, 3), dtype=np.uint8)
    img = Image.fromarray(a)
    exif = img.getexif()
    exif[0x0112] = orientation
    path = tmp_path / "photo.png"
    img.save(path, exif=exif.tobytes())
    before = path.read_bytes()
    np.testing.assert_array_equal(load_image(path), turn(a))
    assert ImageSegmenter(n_segments=2, random_state=0).segment(path).shape == \
        turn(a).shape[:2]
    assert path.read_bytes() == before


def test_heic_photos_need_the_plugin_and_say_so(tmp_path, monkeypatch):
    """iPhones save HEIC, which Pillow reads only through pillow-heif: the
    message said "cannot identify image file"; it now names the plugin, and
    an installed plugin is registered before the file is opened."""
    import sys
    import types

    path = tmp_path / "IMG_0001.HEIC"
    path.write_bytes(b"\x00\x00\x00\x18ftypheic not really")
    monkeypatch.setitem(sys.modules, "pillow_heif", None)  # not installed
    with pytest.raises(ValueError, match=r"IMG_0001.HEIC'.*pip install pillow-heif"):
        load_image(path)
    calls = []
    fake = types.SimpleNamespace(register_heif_opener=lambda: calls.append(1))
    monkeypatch.setitem(sys.modules, "pillow_heif", fake)
    with pytest.raises(ValueError) as info:  # registered, and still unreadable
        load_image(path)
    assert calls and "pip install" not in str(info.value)
    png = tmp_path / "a.png"
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(png)
    calls.clear()
    load_image(png)
    assert not calls  # other formats leave the plugin alone


def test_a_datasets_items_are_named_not_taken_for_arrays():
    """A torchvision dataset's (image, target) pairs passed as images said
    "setting an array element with a sequence"; a Hugging Face record
    (a dict) said only "got dict"."""
    from sklearn_falcon import ImageSegmenter

    img = Image.fromarray(np.zeros((16, 16, 3), np.uint8))
    seg = ImageSegmenter(n_segments=2, refine=None)
    with pytest.raises(TypeError, match=r"first item is an image \(Image\).*"
                                        r"image for image, _ in dataset"):
        seg.segment_dataset([(img, 0), (img, 1)])
    with pytest.raises(TypeError, match=r"got dict \(a dataset's record\? pass "
                                        r"its image, e.g. record\['image'\]\)"):
        load_image({"image": img, "label": 0})
    # nested lists of numbers are still an array
    assert load_image([[0, 255], [255, 0]]).shape == (2, 2, 3)


def test_fit_and_segment_dataset_take_an_iterator_of_images(tmp_path):
    """``segment_dataset(Path("photos").glob("*.png"))`` (and any generator,
    as the hint above suggests for a dataset's pairs) said "image must be a
    file path, ...; got generator": an object without ``len`` was taken
    for one image."""
    from pathlib import Path

    from sklearn_falcon import ImageSegmenter

    for i, shape in enumerate([(16, 24), (24, 16)]):
        img = np.zeros(shape + (3,), np.uint8)
        img[:, shape[1] // 2:] = 200
        Image.fromarray(img).save(tmp_path / f"{i}.png")
    seg = ImageSegmenter(n_segments=2, refine=None)
    expected = [seg.segment(p) for p in sorted(tmp_path.glob("*.png"))]
    for images in (lambda: iter(sorted(Path(tmp_path).glob("*.png"))),
                   lambda: (p for p in sorted(tmp_path.glob("*.png"))),
                   lambda: ((load_image(p), 0)[0] for p in
                            sorted(tmp_path.glob("*.png")))):
        got = seg.segment_dataset(images(), n_jobs=1, progress=False)
        assert len(got) == 2 and all(map(np.array_equal, got, expected))
        got = seg.fit(images()).labels_
        assert len(got) == 2 and all(map(np.array_equal, got, expected))
    # a record is still one (refused, with its hint), not a list of its keys
    with pytest.raises(TypeError, match="record"):
        seg.fit({"image": expected[0], "label": 0})



def test_fit_and_segment_dataset_take_the_frames_of_a_gif(tmp_path):
    """``fit(ImageSequence.Iterator(gif))`` (and ``segment_dataset``) said
    "image must be a file path, ...; got Iterator": an object of a PIL module
    was taken for one image; and the iterator yields one image, moved to the
    next frame, so a list of its items held the same frame N times."""
    from PIL import ImageSequence

    from sklearn_falcon import ImageSegmenter

    frames = []
    for s in range(3):
        f = np.zeros((24, 32, 3), np.uint8)
        f[:, 6 + 8 * s:] = 200
        frames.append(f)
    path = tmp_path / "clip.gif"
    Image.fromarray(frames[0]).save(path, save_all=True, append_images=[
        Image.fromarray(f) for f in frames[1:]])
    seg = ImageSegmenter(n_segments=2, refine=None)
    expected = [seg.segment(f) for f in frames]
    with Image.open(path) as gif:
        got = seg.segment_dataset(ImageSequence.Iterator(gif), progress=False)
    assert len(got) == 3 and all(map(np.array_equal, got, expected))
    with Image.open(path) as gif:
        got = seg.fit(ImageSequence.Iterator(gif)).labels_
    assert len(got) == 3 and all(map(np.array_equal, got, expected))

@pytest.mark.parametrize("transparency", ["bytes", "index"])
def test_palette_image_with_transparency_loads_without_warning(tmp_path,
                                                               transparency):
    """A PNG-8 whose palette has alpha (pngquant, TinyPNG) printed Pillow's
    "Palette images with Transparency expressed in bytes should be
    converted to RGBA images" on every load, and on the command line."""
    import warnings

    p = Image.fromarray(_rgb(16, 20)).quantize(colors=64)
    # alpha per palette entry (a tRNS chunk), or one transparent entry
    p.info["transparency"] = (bytes([0] * 4 + [128] * 4 + [255] * 56)
                              if transparency == "bytes" else 3)
    path = tmp_path / "web.png"
    p.save(path)
    with Image.open(path) as im:
        assert im.mode == "P" and "transparency" in im.info
        expected = np.asarray(im.convert("RGBA"))[:, :, :3]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = load_image(path)
        with Image.open(path) as im:
            out_pil = load_image(im)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(out_pil, expected)


def test_float_tiff_out_of_range_is_refused_not_clipped(tmp_path):
    """A 32-bit float image (PIL mode "F", e.g. a TIFF of mean-subtracted or
    elevation data) with negative values, or values above 65535, was
    clipped without a word (its negative half black), where the same
    values in an array are refused."""
    ramp = np.linspace(0.0, 1.0, 12 * 10, dtype=np.float32).reshape(12, 10)
    for scale in (1.0, 255.0, 65535.0):  # the three ranges: read as before
        path = tmp_path / f"ok{int(scale)}.tif"
        Image.fromarray(ramp * scale).save(path)
        expected = np.round(ramp.astype(np.float64) * 255.0).astype(np.uint8)
        np.testing.assert_array_equal(load_image(path)[..., 0], expected)
    for bad, shown in ((ramp - 0.5, r"\[-0.5, 0.5\]"), (ramp * 1e6, r"1e\+06")):
        path = tmp_path / "bad.tif"
        Image.fromarray(bad).save(path)
        with pytest.raises(ValueError, match=r"Floating-point image '.*bad.tif' "
                                             r"has values in .*" + shown):
            load_image(path)
        with Image.open(path) as im:
            with pytest.raises(ValueError, match="Floating-point PIL image"):
                load_image(im)
        with pytest.raises(ValueError, match="Floating-point image array"):
            load_image(bad)


def test_a_video_decoders_hwc_frames_are_read():
    """torchvision.io.read_video gives (T, H, W, C) uint8 tensors: each frame
    (H, W, C) was refused ("A 3-D tensor must have shape (C, H, W)"), so
    segment_video could not take a decoded video as it comes."""
    torch = pytest.importorskip("torch")
    from sklearn_falcon import ImageSegmenter

    a = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    np.testing.assert_array_equal(load_image(torch.from_numpy(a)), a)
    np.testing.assert_array_equal(load_image(torch.from_numpy(a).permute(2, 0, 1)), a)
    video = torch.from_numpy(np.stack([a, a[::-1]]))  # (T, H, W, C)
    maps = list(ImageSegmenter(n_segments=2, refine=None).segment_video(video))
    assert [m.shape for m in maps] == [(20, 30)] * 2
    with pytest.raises(ValueError, match=r"\(C, H, W\) or \(H, W, C\)"):
        load_image(torch.zeros(5, 6, 7))


def test_the_shape_error_lists_grey_and_alpha():
    # (H, W, 2) grey + alpha arrays are read, but the message (and the
    # docstring) listed (H, W), (H, W, 1), (H, W, 3) and (H, W, 4) only
    with pytest.raises(ValueError, match=r"of shape \(H, W\), \(H, W, 1\), "
                       r"\(H, W, 2\), \(H, W, 3\) or \(H, W, 4\); got shape "
                       r"\(2, 2, 5\)"):
        load_image(np.zeros((2, 2, 5), np.uint8))
    assert "(H, W, 2)" in load_image.__doc__


def test_a_decompression_bomb_names_the_file(tmp_path, monkeypatch):
    # PIL's "Image size (2500 pixels) exceeds limit of 2000 pixels, could be
    # decompression bomb DOS attack." (a warning, twice over an error) named
    # no file: which of a folder's images was it?
    from PIL import Image

    path = tmp_path / "pano.png"
    Image.fromarray(np.zeros((50, 50, 3), np.uint8)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 2000)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_image(path).shape == (50, 50, 3)
    [w] = [w for w in caught if issubclass(w.category, Image.DecompressionBombWarning)]
    assert f"'{path}'" in str(w.message) and "2500 pixels" in str(w.message)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(ValueError, match="exceeds limit") as info:
        load_image(path)
    assert f"Cannot read image '{path}'" in str(info.value)


def test_a_dark_16_bit_pgm_is_read_as_16_bit(tmp_path):
    # Pillow opens a PGM of maxval 65535 in mode "I" (int32): one of values
    # up to 199 was read as 8-bit, 257 times too bright (199, not 1)
    grey = (np.arange(48 * 64).reshape(48, 64) % 200).astype(">u2")
    path = tmp_path / "dark.pgm"
    path.write_bytes(b"P5\n64 48\n65535\n" + grey.tobytes())
    expected = np.round(grey.astype(np.float64) / 257).astype(np.uint8)
    assert Image.open(path).mode == "I"
    np.testing.assert_array_equal(load_image(path)[..., 0], expected)
    with Image.open(path) as img:  # the PIL image of the file too
        np.testing.assert_array_equal(load_image(img)[..., 1], expected)
    # an int32 image of no such file is read by its values, as documented
    assert load_image(Image.fromarray(grey.astype(np.int32))).max() == 199
