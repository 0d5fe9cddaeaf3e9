"""The plotting helpers: colours and overlays, their inputs checked by name."""

import numpy as np
import pytest

from sklearn_falcon.plotting import label_colors, overlay


def _scene():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
    labels = np.repeat(np.arange(4), 12).reshape(6, 8)
    return image, labels


def test_overlay_blends_and_marks_boundaries():
    image, labels = _scene()
    out = overlay(image, labels, alpha=0.5)
    assert out.shape == (6, 8, 3) and out.dtype == np.uint8
    inner = (slice(0, 1), slice(0, 3))  # inside segment 0, off its boundary
    expected = np.round(0.5 * image[inner] + 0.5 * label_colors(1)[0])
    np.testing.assert_array_equal(out[inner], expected)
    assert np.all(out[1, 3] == 255)  # the boundary between segments 0 and 1
    np.testing.assert_array_equal(overlay(image, labels, alpha=0.0)[0, :3], image[0, :3])


def test_overlay_takes_grey_and_rgba_images():
    """A grey image (as ImageSegmenter accepts) is shown in grey, and an
    alpha channel is ignored; both raised NumPy's broadcast error."""
    image, labels = _scene()
    grey = image[:, :, 0]
    rgb_of_grey = np.repeat(grey[:, :, None], 3, axis=2)
    np.testing.assert_array_equal(overlay(grey, labels), overlay(rgb_of_grey, labels))
    np.testing.assert_array_equal(overlay(grey[:, :, None], labels),
                                  overlay(rgb_of_grey, labels))
    rgba = np.concatenate([image, np.full((6, 8, 1), 7, np.uint8)], axis=2)
    np.testing.assert_array_equal(overlay(rgba, labels), overlay(image, labels))
    # grey and alpha, (H, W, 2), which load_image and ImageSegmenter take
    # (np.asarray of an "LA" PNG), was refused: "image must have shape ..."
    grey_alpha = np.stack([grey, np.full_like(grey, 7)], axis=2)
    np.testing.assert_array_equal(overlay(grey_alpha, labels),
                                  overlay(rgb_of_grey, labels))
    assert overlay(np.zeros((0, 0, 3), np.uint8), np.zeros((0, 0), int)).shape == (
        0, 0, 3)


def test_overlay_names_what_is_wrong():
    image, labels = _scene()
    with pytest.raises(ValueError, match=r"labels must have the image's shape "
                       r"\(6, 8\); got \(5, 8\)"):
        overlay(image, labels[:5])
    with pytest.raises(ValueError, match=r"image must have shape .*got shape "
                       r"\(6, 8, 5\)"):
        overlay(np.concatenate([image, image[:, :, :2]], axis=2), labels)
    with pytest.raises(TypeError, match="image must be uint8 RGB; got "
                       "dtype=float64.*load_image"):
        overlay(image / 255.0, labels)
    with pytest.raises(ValueError, match="alpha must be in"):
        overlay(image, labels, alpha=1.5)
    # alpha=None or "0.5" raised "'<=' not supported between instances of
    # 'float' and 'NoneType'", naming no parameter
    for alpha in (None, "0.5"):
        with pytest.raises(ValueError, match=f"alpha must be in .*{alpha!r}"):
            overlay(image, labels, alpha=alpha)


def test_overlay_refuses_nan_labels_by_name():
    """Float labels with NaN (a mask with missing values) were drawn with
    every NaN pixel a boundary (NaN != NaN): a white area, no error.  NaN is
    refused, as ``check_label_values`` refuses it; whole floats still work."""
    image, labels = _scene()
    for dtype in (np.float64, np.float32, np.float16):
        bad = labels.astype(dtype)
        bad[:2, :3] = np.nan
        with pytest.raises(ValueError, match="labels must be integers or strings; "
                           r"got the value nan of dtype=float.*\(6 pixels\)"):
            overlay(image, bad)
    np.testing.assert_array_equal(overlay(image, labels.astype(float)),
                                  overlay(image, labels))


def test_overlay_refuses_complex_labels_by_name():
    """Complex labels were drawn (coloured in the order of their values),
    where ``normalized_cut``, ``select_n_segments`` and ``miou`` refuse them
    by name; they are refused as ``check_label_values`` refuses them."""
    image, labels = _scene()
    for dtype in (np.complex64, np.complex128):
        with pytest.raises(ValueError, match="labels must be integers or strings; "
                           f"got dtype={np.dtype(dtype).name}"):
            overlay(image, labels.astype(dtype))
    assert overlay(image, labels.astype(str)).shape == image.shape


def test_label_colors_refuses_a_negative_or_fractional_count():
    """``label_colors(-1)`` returned 19 colours (a slice ``[:-1]`` of the
    palette) and ``label_colors(2.5)`` two; both are refused by name.
    NumPy integers (a label map's ``max() + 1``) are counts."""
    with pytest.raises(ValueError, match="n_labels must be >= 0; got n_labels=-1"):
        label_colors(-1)
    with pytest.raises(TypeError, match="n_labels must be an integer; got "
                       "n_labels=2.5"):
        label_colors(2.5)
    assert label_colors(np.int64(3)).shape == (3, 3)
    assert label_colors(np.array(25)).shape == (25, 3)
    assert label_colors(0).shape == (0, 3)


def test_an_id_has_the_same_colour_in_every_map():
    """The colours followed the rank of the ids present, not the ids: in the
    frames of segment_video, whose ids are kept across frames, segment 3
    took segment 2's colour in a frame without a segment 2."""
    image = np.zeros((1, 8, 3), np.uint8)
    colors = label_colors(40)
    for labels in ([0, 0, 1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5, 5, 5],
                   [3, 3, 3, 3, 30, 30, 30, 30]):
        out = overlay(image, np.array([labels]), alpha=1.0)
        inner = [i for i in range(1, 7) if labels[i - 1] == labels[i] == labels[i + 1]]
        for i in inner:
            np.testing.assert_array_equal(out[0, i], colors[labels[i]])
    # ids outside 0..65535 (negative, huge, floats) are coloured by rank
    for labels in ([-1, -1, -1, 7, 7, 7], [0, 0, 0, 10**9, 10**9, 10**9]):
        out = overlay(np.zeros((1, 6, 3), np.uint8), np.array([labels]), alpha=1.0)
        np.testing.assert_array_equal(out[0, [1, 4]], colors[:2])


@pytest.mark.parametrize("mode", ["P", "CMYK", "YCbCr", "1", "LA"])
def test_overlay_shows_a_pil_image_in_its_colours(mode):
    """NumPy reads a palette image as its indices, a CMYK one as four inks:
    overlay(Image.open(path), labels) showed the indices as grey levels and
    the inks as red, green, blue and (dropped) alpha."""
    Image = pytest.importorskip("PIL.Image")
    image, labels = _scene()
    pil = Image.fromarray(image).convert(mode)
    expected = overlay(np.asarray(pil.convert("RGB")), labels)
    np.testing.assert_array_equal(overlay(pil, labels), expected)


def test_overlay_of_a_path_says_to_read_it():
    # a file name, which segment takes: "image must have shape (H, W), ...;
    # got shape ()"
    from pathlib import Path

    for path in ("photo.jpg", Path("photo.jpg")):
        with pytest.raises(TypeError, match=r"got the path .*photo\.jpg.*load_image"):
            overlay(path, np.zeros((4, 4), int))
