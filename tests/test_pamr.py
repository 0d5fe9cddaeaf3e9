import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest

from sklearn_falcon.image import pamr


def test_pamr_fixes_shifted_boundary():
    img = np.zeros((16, 16, 3), np.uint8)
    img[:, 8:] = (250, 240, 10)
    lab = np.zeros((16, 16), np.int64)
    lab[:, 6:] = 1  # boundary two pixels too far left
    out = pamr(img, lab)
    expected = np.zeros((16, 16), np.int64)
    expected[:, 8:] = 1
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pamr_never_adds_segments(seed):
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    lab = rng.choice([3, 9, 11], size=(20, 24))
    lab[:5] = 42
    before = set(np.unique(lab))
    out = pamr(img, lab, n_iter=5)
    assert set(np.unique(out)) <= before
    assert len(np.unique(out)) <= len(before)
    assert out.dtype == lab.dtype and out.shape == lab.shape


def test_pamr_does_not_mutate_and_trivial_cases():
    img = np.random.default_rng(0).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    lab = np.zeros((8, 8), int)
    lab[4:] = 1
    img0, lab0 = img.copy(), lab.copy()
    pamr(img, lab)
    np.testing.assert_array_equal(img, img0)
    np.testing.assert_array_equal(lab, lab0)
    np.testing.assert_array_equal(pamr(img, lab, n_iter=0), lab)
    np.testing.assert_array_equal(pamr(img, np.zeros((8, 8), int)), 0)


def test_pamr_validation():
    img = np.zeros((8, 8, 3))
    with pytest.raises(ValueError, match="do not match"):
        pamr(img, np.zeros((8, 7), int))
    with pytest.raises(ValueError, match="n_iter"):
        pamr(img, np.zeros((8, 8), int), n_iter=-1)
    with pytest.raises(ValueError, match="dilations"):
        pamr(img, np.zeros((8, 8), int), dilations=(0,))
