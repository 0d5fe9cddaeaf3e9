import os

os.environ["HF_HUB_OFFLINE"] = "1"

import warnings

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
    # a fraction was truncated (1.5 as 1), silently; a string, a NaN or a
    # boolean gave a message of NumPy's or passed
    for bad in ((0,), (1.5,), (2, 4.5), ("a",), (np.nan,), (True,), ()):
        with pytest.raises(ValueError, match="dilations must be positive integers"):
            pamr(img, np.zeros((8, 8), int), dilations=bad)
    lab = np.zeros((8, 8), int)
    lab[:, 3:] = 1
    np.testing.assert_array_equal(pamr(img, lab, dilations=(1.0, 2.0)),
                                  pamr(img, lab, dilations=np.array([1, 2])))
    # NaN colours gave NaN weights and every pixel the first label, silently
    lab = np.zeros((8, 8), int)
    lab[:, 4:] = 1
    img[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        pamr(img, lab)
    # an image of no channel gave 0 / 0 weights: every pixel the first label
    with pytest.raises(ValueError, match="has no colour channel"):
        pamr(np.zeros((8, 8, 0)), lab)


@pytest.mark.parametrize("device", [None, "cpu"])
def test_pamr_of_a_greyscale_image(device):
    """A greyscale ``(H, W)`` image (as load_image takes) was refused with
    "image of shape (8, 8) and labels of shape (8, 8) do not match"; it is
    the ``(H, W, 1)`` image."""
    if device is not None:
        pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    grey = np.zeros((16, 16), np.uint8)
    grey[:, 8:] = 200
    grey += rng.integers(0, 20, grey.shape, dtype=np.uint8)
    lab = np.zeros((16, 16), int)
    lab[:, 6:] = 1
    ref = pamr(grey[:, :, None], lab, device=device)
    np.testing.assert_array_equal(pamr(grey, lab, device=device), ref)
    assert ref[0].tolist() == [0] * 8 + [1] * 8


def test_pamr_refuses_an_image_of_complex_or_text_values():
    """A complex image was reduced to its real part with NumPy's
    ComplexWarning, and an image of text parsed as numbers, silently;
    both are refused by name, as ``upsample_labels`` refuses them.  Booleans
    and object arrays of numbers keep giving the float result."""
    img = np.zeros((8, 8, 3))
    img[:, 4:] = 1
    lab = np.zeros((8, 8), int)
    lab[:, 3:] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for bad in (img + 1j, img.astype(str)):
            with pytest.raises(ValueError, match="image must hold real colour "
                               f"values; got dtype={bad.dtype}"):
                pamr(bad, lab)
        ref = pamr(img, lab)
        for other in (img > 0.5, img.astype(object), img.astype(np.float16)):
            np.testing.assert_array_equal(pamr(other, lab), ref)

def test_pamr_refuses_complex_labels_by_name():
    """Complex labels were refined and returned complex, where ``overlay``,
    ``miou`` and ``upsample_labels`` refuse them; they are refused by name.
    Text labels are still refined."""
    img = np.zeros((8, 8, 3), np.uint8)
    img[:, 4:] = 255
    lab = np.zeros((8, 8), int)
    lab[:, 3:] = 1
    with pytest.raises(ValueError, match="labels must be integers or strings; "
                       "got dtype=complex128"):
        pamr(img, lab + 0j)
    ref = pamr(img, lab)
    np.testing.assert_array_equal(pamr(img, lab.astype(str)), ref.astype(str))


@pytest.mark.parametrize("scale", [1e-300, 1e-12, 1e200, 1e300])
def test_pamr_of_an_image_at_any_scale(scale):
    """"Only colour differences relative to the local spread matter, so the
    scale is irrelevant": but the squares of colours past 1e153 overflowed
    (NaN weights: every pixel took the first label), and below 1e-9 the
    spread drowned in the weights' 1e-8 floor (uniform weights: a blur).
    Both gave other labels than the same image in [0, 255], silently."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (20, 24, 3)).astype(float)
    img[:, 12:] += 300
    lab = np.zeros((20, 24), int)
    lab[:, 9:] = 1
    ref = pamr(img, lab)
    assert (ref[:, 9:12] == 0).mean() > 0.8  # the band labelled 1 moves to 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(pamr(img * scale, lab), ref)
        try:
            import torch  # noqa: F401
        except ImportError:
            return
        np.testing.assert_array_equal(pamr(img * scale, lab, device="cpu"), ref)

def test_pamr_refuses_a_mask_per_label_that_cannot_fit(monkeypatch):
    """PAMR holds three float32 masks per label: a superpixel map of
    thousands of labels on a large image allocated tens of GiB (the process
    killed for memory); it is refused before allocating, as a too large
    affinity is."""
    from sklearn_falcon import _memory

    img = np.zeros((64, 64, 3))
    lab = np.arange(64 * 64).reshape(64, 64) % 200
    monkeypatch.setattr(_memory, "available_memory", lambda: 4 << 20)
    with pytest.raises(MemoryError, match="pamr of 200 labels on a 64x64 image"):
        pamr(img, lab)
    assert pamr(img, lab % 2, dilations=(1,)).shape == (64, 64)  # 0.6 MiB


def test_pamr_on_the_torch_cpu_device_refuses_masks_that_cannot_fit(monkeypatch):
    """The torch path holds the masks too (an int64 one-hot, then float32
    masks, their padded copy and the next step's), but only the Numba path
    checked the memory: ``pamr(device="cpu")`` of thousands of labels on a
    large image got the process killed.  It is refused before allocating."""
    pytest.importorskip("torch")
    from sklearn_falcon import _memory

    img = np.zeros((64, 64, 3))
    lab = np.arange(64 * 64).reshape(64, 64) % 200
    monkeypatch.setattr(_memory, "available_memory", lambda: 4 << 20)
    with pytest.raises(MemoryError, match="pamr of 200 labels on a 64x64 image"):
        pamr(img, lab, device="cpu")
    assert pamr(img, lab % 2, dilations=(1,), device="cpu").shape == (64, 64)

def _reference_pamr(img, lab, n_iter, dilations):
    """PAMR written from its definition with NumPy, in float64."""
    img = np.asarray(img, dtype=np.float64)
    h, w, _ = img.shape
    offs = [(dy, dx) for d in dilations for dy in (-d, 0, d) for dx in (-d, 0, d)
            if dy or dx]
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]

    def shifted(a, dy, dx):  # a(y + dy, x + dx), clamped to the border
        return a[np.clip(rows + dy, 0, h - 1), np.clip(cols + dx, 0, w - 1)]

    nb = np.stack([shifted(img, dy, dx) for dy, dx in offs])  # (P, H, W, C)
    spread = np.concatenate([nb, np.repeat(img[None], len(dilations), axis=0)])
    std = spread.std(axis=0, ddof=1)
    logits = -(np.abs(nb - img) / (1e-8 + 0.1 * std)).mean(axis=-1)
    aff = np.exp(logits - logits.max(axis=0))
    aff /= aff.sum(axis=0)
    uniq, inv = np.unique(lab, return_inverse=True)
    m = np.eye(len(uniq))[inv.reshape(h, w)]
    for _ in range(n_iter):
        m = sum(a[..., None] * shifted(m, dy, dx) for a, (dy, dx) in zip(aff, offs))
    return aff, m, uniq


def _kernel_inputs(img, lab, dilations):
    """Channel-first image, offsets, Numba weights and one-hot ``(K, H, W)`` masks."""
    from sklearn_falcon.image._pamr import _affinities, _offsets

    planes = np.ascontiguousarray(np.moveaxis(img, 2, 0), dtype=np.float64)
    offs = _offsets(dilations)
    aff = _affinities(planes, offs, np.asarray(dilations, dtype=np.int64))
    uniq = np.unique(lab)
    mask = np.ascontiguousarray(np.moveaxis(np.eye(len(uniq), dtype=np.float32)[
        np.searchsorted(uniq, lab)], 2, 0))
    return planes, offs, aff, mask


@pytest.mark.parametrize("shape, dilations", [
    ((23, 31), (1, 2, 4)), ((9, 40), (1, 3, 12)), ((1, 7), (1,)), ((30, 5), (2, 8, 24)),
])
def test_pamr_matches_numpy_reference(shape, dilations):
    from sklearn_falcon.image._pamr import _propagate

    rng = np.random.default_rng(sum(shape))
    img = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
    lab = rng.integers(0, 4, shape)
    ref_aff, ref_m, uniq = _reference_pamr(img, lab, 4, dilations)
    _, offs, aff, mask = _kernel_inputs(img, lab, dilations)
    np.testing.assert_allclose(aff, ref_aff, rtol=1e-5, atol=1e-7)
    m = _propagate(mask, aff, offs, 4)
    np.testing.assert_allclose(np.moveaxis(m, 0, 2), ref_m, rtol=1e-4, atol=1e-6)
    # labels agree wherever the reference's top two scores are not a near-tie
    out = pamr(img, lab, n_iter=4, dilations=dilations)
    top2 = np.sort(ref_m, axis=2)[..., -2:]
    clear = top2[..., 1] - top2[..., 0] > 1e-4
    np.testing.assert_array_equal(out[clear], uniq[ref_m.argmax(axis=2)][clear])


def test_pamr_same_result_on_any_thread_count():
    import numba

    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (57, 43, 3), dtype=np.uint8)
    lab = rng.integers(0, 5, (57, 43))
    many = pamr(img, lab)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = pamr(img, lab)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one, many)


@pytest.mark.parametrize("shape, dilations",
                         [((23, 31), (1, 2, 4)), ((40, 9), (1, 3, 12))])
def test_torch_kernels_match_numba(shape, dilations):
    torch = pytest.importorskip("torch")
    from sklearn_falcon.image import _pamr_torch as pk
    from sklearn_falcon.image._pamr import _propagate

    rng = np.random.default_rng(sum(shape))
    img = rng.integers(0, 256, shape + (3,), dtype=np.uint8)
    lab = rng.integers(0, 4, shape)
    planes, offs, aff, mask = _kernel_inputs(img, lab, dilations)
    offs_list = [tuple(map(int, o)) for o in offs]
    aff_t = pk._affinities(torch.from_numpy(planes), offs_list, len(dilations))
    assert aff_t.dtype == torch.float32 and aff_t.shape == aff.shape
    np.testing.assert_allclose(aff_t.numpy(), aff, rtol=1e-5, atol=1e-7)
    ref = _propagate(mask, aff, offs, 5)
    out = pk._propagate(torch.from_numpy(mask), torch.from_numpy(aff), offs_list, 5)
    # the same kernel arithmetic on the same weights: equal to the last bit or so
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6, atol=1e-7)


def test_pamr_on_a_torch_device_matches_numba():
    pytest.importorskip("torch")
    img = np.zeros((24, 30, 3), np.uint8)
    img[:, 15:] = (250, 240, 10)
    img[12:, :8] = (20, 20, 200)
    lab = np.zeros((24, 30), np.int64)
    lab[:, 12:] = 5  # boundary three pixels too far left
    lab[14:, :6] = 9
    out = pamr(img, lab, device="cpu")
    np.testing.assert_array_equal(out, pamr(img, lab))
    assert out.dtype == lab.dtype and set(np.unique(out)) <= {0, 5, 9}
    assert (out[:, 15:] == 5).all()
    with pytest.raises(ValueError, match="device"):
        pamr(img, lab, device="gpu")


def test_pamr_on_a_torch_device_with_a_dilation_past_the_image():
    """The torch kernels pad the image and the masks by the largest
    dilation: ``dilations=(1, 100_000)`` on an 8x8 image asked for a
    terabyte (the Numba path clamps to the border and needs nothing more).
    A shift past the image is the shift to its border: the same labels."""
    pytest.importorskip("torch")
    img = np.zeros((8, 8, 3), np.uint8)
    img[:, 4:] = 255
    lab = np.zeros((8, 8), int)
    lab[:, 3:] = 1
    for dil in ((1, 100_000), (2, 7, 8, 10**12)):
        np.testing.assert_array_equal(pamr(img, lab, dilations=dil, device="cpu"),
                                      pamr(img, lab, dilations=dil))

def test_pamr_of_a_dilation_past_int64_or_infinite():
    """``dilations=(np.inf,)`` (or 1e20, 2**63) overflowed the cast to
    int64: "Python int too large to convert to C long", with NumPy's
    RuntimeWarning.  An infinite one is refused by name; a finite shift
    past the image reads its border, as one of its size does."""
    import warnings

    img = np.zeros((8, 8, 3), np.uint8)
    img[:, 4:] = 255
    lab = np.zeros((8, 8), int)
    lab[:, 3:] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for bad in ((np.inf,), (1, -np.inf)):
            with pytest.raises(ValueError, match="dilations must be positive "
                               "integers"):
                pamr(img, lab, dilations=bad)
        ref = pamr(img, lab, dilations=(1, 8))
        for dil in ((1, 1e20), (1, 2**63), (1, np.uint64(2**64 - 1))):
            np.testing.assert_array_equal(pamr(img, lab, dilations=dil), ref)


def test_pamr_device_without_torch_is_a_clear_error(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    img = np.zeros((8, 8, 3), np.uint8)
    lab = np.zeros((8, 8), int)
    lab[4:] = 1
    with pytest.raises(ImportError, match=r"pamr\(device='cuda'\) requires PyTorch"):
        pamr(img, lab, device="cuda")


def test_pamr_on_cuda_matches_numba():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    from sklearn_falcon.image import _pamr_torch as pk
    from sklearn_falcon.image._pamr import _propagate

    rng = np.random.default_rng(7)
    img = rng.integers(0, 256, (37, 45, 3), dtype=np.uint8)
    lab = rng.integers(0, 4, (37, 45))
    dil = (1, 2, 4, 8)
    planes, offs, aff, mask = _kernel_inputs(img, lab, dil)
    offs_list = [tuple(map(int, o)) for o in offs]
    aff_t = pk._affinities(torch.from_numpy(planes).cuda(), offs_list, len(dil))
    np.testing.assert_allclose(aff_t.cpu().numpy(), aff, rtol=1e-5, atol=1e-7)
    out = pk._propagate(torch.from_numpy(mask).cuda(), aff_t, offs_list, 5)
    np.testing.assert_allclose(out.cpu().numpy(), _propagate(mask, aff, offs, 5),
                               rtol=1e-4, atol=1e-6)
    clean = np.zeros((24, 30, 3), np.uint8)
    clean[:, 15:] = (250, 240, 10)
    lab2 = np.zeros((24, 30), np.int64)
    lab2[:, 12:] = 1
    np.testing.assert_array_equal(pamr(clean, lab2, device="cuda"), pamr(clean, lab2))


def test_pamr_checks_its_device_whatever_the_labels():
    # one label or n_iter=0 returned a copy before the device was looked at:
    # device="banana" was accepted for them, and refused for other maps
    pytest.importorskip("torch")
    img = np.zeros((8, 8, 3), np.uint8)
    lab = np.zeros((8, 8), int)
    for labels, n_iter in ((lab, 10), (lab + (np.arange(8) > 3), 0)):
        with pytest.raises(ValueError, match="device='banana'"):
            pamr(img, labels, n_iter=n_iter, device="banana")
        np.testing.assert_array_equal(
            pamr(img, labels, n_iter=n_iter, device="cpu"), labels)
