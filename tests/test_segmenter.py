import os
import re
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest
from sklearn.base import clone

from sklearn_falcon import ImageSegmenter
from sklearn_falcon._miou import miou
from sklearn_falcon.image import select_n_segments
from sklearn_falcon.image._auto import conductance_sweep, grid_conductance


def _quadrants(h=48, w=64, seed=0):
    """Four flat-coloured quadrants with mild noise, and their mask."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((h, w), np.int64)
    mask[: h // 2, w // 2:] = 1
    mask[h // 2:, : w // 2] = 2
    mask[h // 2:, w // 2:] = 3
    colours = np.array([[200, 40, 40], [40, 180, 60], [40, 60, 200], [230, 220, 60]])
    img = colours[mask] + rng.normal(0, 6, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8), mask


@pytest.mark.parametrize("refine", [None, "pamr"])
def test_segment_recovers_quadrants(refine):
    img, mask = _quadrants()
    lab = ImageSegmenter(n_segments=4, refine=refine).segment(img)
    assert lab.shape == img.shape[:2] and lab.dtype == np.int64
    assert miou(lab, mask) > 0.95


@pytest.mark.parametrize("shape", [(40, 40), (37, 71), (90, 33)])
def test_label_map_at_input_resolution(shape):
    img = np.random.default_rng(1).integers(0, 256, shape + (3,), dtype=np.uint8)
    lab = ImageSegmenter(n_segments=3, refine=None).segment(img)
    assert lab.shape == shape
    assert set(np.unique(lab)) <= {0, 1, 2}


def test_fit_predict_clone_and_params():
    seg = ImageSegmenter(n_segments=2, refine=None, power=5.0)
    assert clone(seg).get_params() == seg.get_params()
    params = seg.get_params()
    for name in ("model", "n_segments", "pretrained", "checkpoint_path", "layer", "feature",
                 "power", "refine", "random_state"):
        assert name in params
    imgs = [_quadrants(seed=s)[0] for s in range(2)]
    out = seg.fit_predict(imgs)
    assert isinstance(out, list) and len(out) == 2
    assert seg.n_segments_ == [2, 2]
    np.testing.assert_array_equal(out[0], seg.segment(imgs[0]))  # deterministic


@pytest.mark.parametrize("init", ["kmeans", "multilevel"])
def test_init_kmeans_with_auto_n_segments_and_on_a_knn_token_graph(monkeypatch,
                                                                   init):
    """``init="kmeans"`` (k-means on the token features) failed on the CPU
    with ``n_segments="auto"`` -- "init='kmeans' needs features, but
    affinity='precomputed'", an affinity the user never chose: the sweep
    clustered one precomputed ``W``.  It now clusters the features there.
    On the kNN token graph of more than 16,384 tokens, which has no
    features, the error names ``init`` and ``max_tokens``."""
    from sklearn_falcon.image import _budget

    img, mask = _quadrants()
    lab = ImageSegmenter(n_segments="auto", init=init, refine=None).segment(img)
    assert miou(lab, mask) > 0.95
    monkeypatch.setattr(_budget, "DENSE_MAX_TOKENS", 20)
    seg = ImageSegmenter(n_segments=4, init=init, refine=None)
    if init == "multilevel":
        assert miou(seg.segment(img), mask) > 0.95
        return
    for call in (seg.segment, lambda im: list(seg.segment_video([im]))):
        with pytest.raises(ValueError, match=r"init='kmeans' needs the token "
                           r"features.*48 tokens.*max_tokens \(now 4096\)"):
            call(img)


def test_init_kmeans_on_a_knn_token_graph_refused_before_extraction(monkeypatch):
    """``init="kmeans"`` on the kNN token graph (more than 16,384 tokens)
    was refused only after the features were extracted: 100 s of a ViT's
    forward pass on a large image, for an error known from the plan."""
    from sklearn_falcon.image import ColorTextureFeatures, _budget

    def extract(self, rgb):
        raise AssertionError("features extracted")

    monkeypatch.setattr(_budget, "DENSE_MAX_TOKENS", 20)
    monkeypatch.setattr(ColorTextureFeatures, "extract", extract)
    img, _ = _quadrants()
    seg = ImageSegmenter(n_segments=4, init="kmeans", refine=None)
    for call in (seg.segment, lambda im: list(seg.segment_video([im]))):
        with pytest.raises(ValueError, match=r"init='kmeans' needs the token "
                           r"features.*48 tokens"):
            call(img)


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "mps", "meta"])
def test_device_refused_before_the_vit_is_built(monkeypatch, device):
    """With a ViT, a device that Falcon cannot run on (``"mps"``, or
    ``"cuda"`` without CUDA) was refused only once the ViT was built and
    moved there, with torch's "Found no NVIDIA driver on your system" or
    "not linked with support for mps devices"; ``"meta"`` passed the ViT
    and was refused by Falcon's backend.  The offline models said at once
    "device must be 'auto', 'cpu', 'cuda' or 'cuda:N'"; so does a ViT."""
    timm = pytest.importorskip("timm")
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        pytest.skip("CUDA is available")
    built, create = [], timm.create_model
    monkeypatch.setattr(timm, "create_model",
                        lambda *a, **k: built.append(a) or create(*a, **k))
    seg = ImageSegmenter("vit_tiny_patch16_224", n_segments=2, device=device)
    with pytest.raises(ValueError, match=f"device={device!r}"):
        seg.fit([_quadrants()[0]])
    assert built == []


def test_pamr_does_not_increase_segments_in_pipeline():
    img = np.random.default_rng(3).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    raw = ImageSegmenter(n_segments=5, refine=None).segment(img)
    refined = ImageSegmenter(n_segments=5, refine="pamr").segment(img)
    assert len(np.unique(refined)) <= len(np.unique(raw))


def test_auto_n_segments():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_segmentation import make_textured_image

    img, mask = make_textured_image(160, 4, random_state=3)
    seg = ImageSegmenter(n_segments="auto", auto_range=(2, 8), refine=None)
    lab = seg.segment(img)
    assert 2 <= len(np.unique(lab)) <= 8
    assert miou(lab, mask) > 0.85
    # a stricter threshold keeps fewer segments
    few = ImageSegmenter(n_segments="auto", auto_threshold=0.05).segment(img)
    assert len(np.unique(few)) <= len(np.unique(lab))


def test_auto_range_above_the_tokens_is_refused():
    """``n_segments="auto"`` with ``auto_range[0]`` above the image's
    tokens returned one segment per token (48 on a 48-token image for
    ``auto_range=(60, 100)``), outside the range searched, where an
    integer ``n_segments=60`` is refused; it is refused in the same words."""
    img, _ = _quadrants()
    seg = ImageSegmenter(n_segments="auto", auto_range=(60, 100), refine=None)
    with pytest.raises(ValueError, match=r"yields only 48 patch tokens, fewer "
                       r"than auto_range\[0\]=60"):
        seg.segment(img)
    lab = ImageSegmenter(n_segments="auto", auto_range=(2, 100)).segment(img)
    assert 2 <= np.unique(lab).size <= 48


def test_grid_conductance():
    halves = np.repeat([[0, 0, 0, 1, 1, 1]], 4, axis=0).ravel()     # 4 x 6 grid
    stripes = np.tile([0, 1], 12)
    # each half: 38 pair ends (18 vertical, 20 horizontal), 4 of them crossing
    assert np.allclose(grid_conductance(halves, (4, 6), 2), 4 / 38)
    # alternating columns: every horizontal pair crosses (20 of 38)
    assert np.allclose(grid_conductance(stripes, (4, 6), 2), 20 / 38)
    # an absent cluster, a one-row grid
    assert grid_conductance(np.zeros(6, int), (1, 6), 3).tolist() == [0.0, 0.0, 0.0]


def _stripe_case():
    """An 8 x 8 token grid, left and right halves (the true K = 2).  Inside
    the left half, tokens of the same column parity are more alike (1.0)
    than across parity (0.6): K = 3 splitting the left half into stripes
    has a feature conductance of about 0.38 but is not a region."""
    cols = np.tile(np.arange(8), 8)
    half = (cols >= 4).astype(np.int64)
    W = np.where(half[:, None] == half[None, :], 1.0, 0.01)
    left = half == 0
    W[np.ix_(left, left)] = np.where(
        (cols[left][:, None] % 2) == (cols[left][None, :] % 2), 1.0, 0.6)
    stripes = np.where(left, cols % 2, 2)
    return W, half, stripes


def test_conductance_sweep_rejects_stripes():
    from types import SimpleNamespace

    from sklearn_falcon._stats import cluster_pair_weights

    W, half, stripes = _stripe_case()
    fitted = []

    def fit(k):
        lab = {2: half, 3: stripes}[k]
        C = cluster_pair_weights(W, lab, k)
        fitted.append(k)
        return SimpleNamespace(labels_=lab, cluster_volumes_=C.sum(1),
                               cluster_associations_=np.diag(C))

    # the feature conductance alone keeps the stripes (K = 3 > true K) ...
    assert conductance_sweep(fit, 64, (2, 3), 0.45) is stripes
    # ... the grid test rejects them and keeps the two halves
    out = conductance_sweep(fit, 64, (2, 3), 0.45, grid_shape=(8, 8),
                            grid_threshold=0.25)
    assert out is half and fitted == [3, 3, 2]
    # no K passes: the lowest one is returned
    assert conductance_sweep(fit, 64, (2, 3), 0.01, grid_shape=(8, 8),
                             grid_threshold=0.25) is half
    with pytest.raises(ValueError, match=r"grid_shape=\(8, 7\) does not hold the 64"):
        conductance_sweep(fit, 64, (2, 3), 0.45, grid_shape=(8, 7), grid_threshold=0.25)


def test_auto_grid_threshold_in_segmenter():
    W, half, _ = _stripe_case()
    lab = ImageSegmenter(n_segments="auto", auto_range=(2, 2)).cluster_tokens(
        W, grid_shape=(8, 8))
    assert miou(lab[None], half[None]) == 1.0
    with pytest.raises(ValueError, match="does not hold the 64 tokens"):
        ImageSegmenter(n_segments="auto").cluster_tokens(W, grid_shape=(4, 4))
    for bad in (0, 1.5, "x"):
        with pytest.raises(ValueError, match="auto_grid_threshold"):
            ImageSegmenter(n_segments="auto", auto_grid_threshold=bad).cluster_tokens(W)


def test_cluster_tokens_names_w_in_its_refusals_and_warns_once():
    """``cluster_tokens(W)`` passed ``W`` to the fit unchecked: a bool,
    complex, negative or NaN ``W`` was refused as ``X`` (a name the caller
    never gave), and an asymmetric one warned "The affinity X is not
    symmetric" once per K of ``n_segments="auto"``.  It is checked as
    ``W``, its symmetric part taken once; the labels are unchanged."""
    W, half, _ = _stripe_case()
    asym = np.triu(W) + 0.5 * np.tril(W, -1)
    sym = (asym + asym.T) / 2
    for n_segments in (2, "auto"):
        seg = ImageSegmenter(n_segments=n_segments, auto_range=(2, 4), random_state=0)
        for bad, err, match in ((W > 0.5, TypeError, "W has dtype=bool"),
                                (W + 0j, ValueError, "W has dtype=complex"),
                                (W - 1, ValueError, "the affinity W: it must be"),
                                (np.where(W > 0.5, np.nan, W), ValueError,
                                 "Input W contains NaN")):
            with pytest.raises(err, match=match):
                seg.cluster_tokens(bad)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            lab = seg.cluster_tokens(asym)
        assert [str(w.message)[:35] for w in record] == [
            "The affinity W is not symmetric (ma"]
        assert record[0].filename == __file__
        np.testing.assert_array_equal(lab, seg.cluster_tokens(sym))


def test_cluster_tokens_checks_grid_shape_by_name():
    """``grid_shape`` of ``n_segments="auto"`` was checked only by its
    product: ``(2, 4, 8)`` ran the grid test on a 3-D grid, silently, and
    ``(64,)``, ``(8.0, 8.0)`` and ``(-8, -8)`` raised NumPy's IndexError,
    TypeError and "can only specify one unknown dimension".  Each is
    refused by name; integers of any type are taken."""
    W, half, _ = _stripe_case()
    seg = ImageSegmenter(n_segments="auto", auto_range=(2, 2))
    for bad in ((2, 4, 8), (64,), 64, (8.0, 8.0), (-8, -8), (True, 64), "88"):
        with pytest.raises(ValueError, match=r"grid_shape must be a pair of positive"):
            seg.cluster_tokens(W, grid_shape=bad)
    for good in (np.array([8, 8]), [np.int8(8), np.uint64(8)]):
        assert miou(seg.cluster_tokens(W, grid_shape=good)[None], half[None]) == 1.0


def test_cluster_tokens_checks_grid_shape_whatever_n_segments():
    """With an integer ``n_segments`` a wrong ``grid_shape`` (``(5, 5)`` of
    64 tokens, ``"88"``, three entries) was taken without a word, and
    refused by name with ``n_segments="auto"``; it is refused with either
    (it is read only by ``"auto"``), and a right one still works."""
    W, half, _ = _stripe_case()
    seg = ImageSegmenter(n_segments=2)
    with pytest.raises(ValueError, match=r"grid_shape=\(5, 5\) does not hold the 64"):
        seg.cluster_tokens(W, grid_shape=(5, 5))
    for bad in ((2, 4, 8), "88", (8.0, 8.0)):
        with pytest.raises(ValueError, match=r"grid_shape must be a pair of positive"):
            seg.cluster_tokens(W, grid_shape=bad)
    np.testing.assert_array_equal(seg.cluster_tokens(W, grid_shape=(8, 8)),
                                  seg.cluster_tokens(W))


def test_auto_picks_true_k_on_coarse_stripes():
    """Image 3 of the synthetic benchmark (seed 0): 3 regions, one of coarse
    stripes.  The feature conductance alone splits the stripes (4 segments);
    with the grid test (the default) the true K = 3 is kept."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_segmentation import make_dataset

    img, mask, k = make_dataset(4, 160, random_state=0)[3]
    assert k == 3
    lab = ImageSegmenter(n_segments="auto", refine=None).segment(img)
    assert len(np.unique(lab)) == 3 and miou(lab, mask) > 0.9
    old = ImageSegmenter(n_segments="auto", refine=None, auto_grid_threshold=None)
    assert len(np.unique(old.segment(img))) == 4


def test_select_n_segments_block_graph():
    W = np.kron(np.eye(4), np.ones((5, 5))) + 1e-3
    over = np.repeat(np.arange(8), [3, 2, 3, 2, 3, 2, 3, 2])
    k, merged, rho = select_n_segments(W, over, min_segments=2, threshold=0.2)
    assert k == 4
    assert miou(merged[None], np.repeat(np.arange(4), 5)[None]) == 1.0
    assert set(rho) == set(range(2, 9))
    # labels that are not one per row of W (a (gh, gw) grid, a short array)
    # were read past their end by the kernel: a segmentation fault
    for bad_W, bad in ((W, over.reshape(4, 5)), (W, over[:7]), (W[:, :7], over)):
        with pytest.raises(ValueError, match="do not match; expected"):
            select_n_segments(bad_W, bad)
    assert select_n_segments(W.tolist(), over.tolist(), threshold=0.2)[0] == 4



def test_select_n_segments_of_any_real_dtype():
    """A float16, big-endian or object ``W`` reached the kernel as it was:
    Numba's "NotImplementedError: float16" or "TypingError: non-precise
    type"; each gives the float64 result (a ``W`` of text a ValueError)."""
    W = np.kron(np.eye(4), np.ones((5, 5))) + 1e-3
    over = np.repeat(np.arange(8), [3, 2, 3, 2, 3, 2, 3, 2])
    ref = select_n_segments(W, over, threshold=0.2)
    for other in (W.astype(np.float16), W.astype(">f8"), W.astype(object)):
        k, merged, _ = select_n_segments(other, over, threshold=0.2)
        assert k == ref[0] and np.array_equal(merged, ref[1])
    with pytest.raises(ValueError, match="W must hold real numbers"):
        select_n_segments(np.full((20, 20), "a"), over)


def test_select_n_segments_of_any_sparse_format():
    """A DOK ``W`` (``scipy.sparse.dok_array``, which ``normalized_cut``
    and ``FalconNCut`` take) raised "'dok_array' object has no attribute
    'data'"; every SciPy format, of floats or integers, gives the dense
    result."""
    import scipy.sparse as sp

    W = np.kron(np.eye(4), np.ones((5, 5))) + 1e-3
    over = np.repeat(np.arange(8), [3, 2, 3, 2, 3, 2, 3, 2])
    ref = select_n_segments(W, over, threshold=0.2)
    for fmt in ("dok", "lil", "dia", "bsr", "coo", "csc", "csr"):
        for other in (sp.dok_matrix(W).asformat(fmt), sp.dok_array(W).asformat(fmt),
                      sp.dok_array((W * 1000).astype(np.int64)).asformat(fmt)):
            k, merged, _ = select_n_segments(other, over, threshold=0.2)
            assert k == ref[0] and np.array_equal(merged, ref[1]), fmt


def test_select_n_segments_of_torch_tensors():
    """``W`` and ``labels`` as torch tensors, which ``normalized_cut`` takes:
    one that requires grad raised torch's "Can't call numpy() on Tensor
    that requires grad", a sparse one scikit-learn's check_array error (and
    a CUDA one "can't convert cuda:0 device type tensor")."""
    torch = pytest.importorskip("torch")
    W = np.kron(np.eye(3), np.ones((4, 4))) + 0.01
    lab = np.repeat(np.arange(6), 2)
    ref = select_n_segments(W, lab)
    for tW in (torch.tensor(W, requires_grad=True), torch.tensor(W).to_sparse()):
        k, merged, _ = select_n_segments(tW, torch.tensor(lab))
        assert k == ref[0] and np.array_equal(merged, ref[1])


def test_select_n_segments_validates_its_inputs_by_name():
    """``select_n_segments`` trusted ``W`` and its parameters: a negative,
    NaN or infinite weight, a bool or complex ``W``, NaN or fractional labels,
    a ``threshold`` of NaN, -1 or 2 and a ``min_segments`` of 0, -3 or 2.5
    gave a K and a partition (garbage, or a thousand RuntimeWarnings), a
    text threshold numpy's UFuncTypeError.  Each is refused by name, as
    ``normalized_cut`` refuses them; an asymmetric ``W`` is symmetrized with
    a warning, as there."""
    W = np.kron(np.eye(3), np.ones((4, 4))) + 0.01
    lab = np.repeat(np.arange(6), 2)
    for value, match in ((-5.0, "must be nonnegative"),
                         (np.nan, "NaN"), (np.inf, "infinity")):
        bad = W.copy()
        bad[0, 5] = bad[5, 0] = value
        with pytest.raises(ValueError, match=match):
            select_n_segments(bad, lab)
    with pytest.raises(TypeError, match="W has dtype=bool"):
        select_n_segments(W > 0.5, lab)
    with pytest.raises(ValueError, match="Complex data not supported: W"):
        select_n_segments(W + 0j, lab)
    for bad in (lab + 0.5, np.r_[np.nan, lab[1:]]):
        with pytest.raises(ValueError, match="labels must be integers or strings"):
            select_n_segments(W, bad)
    for threshold in (np.nan, -1.0, 0.0, 2.0, "a"):
        with pytest.raises(ValueError, match="'threshold' parameter"):
            select_n_segments(W, lab, threshold=threshold)
    for min_segments in (0, -3, 2.5, "2"):
        with pytest.raises(ValueError, match="'min_segments' parameter"):
            select_n_segments(W, lab, min_segments=min_segments)
    asym = W.copy()
    asym[0, 5] = 0.5
    with pytest.warns(UserWarning, match="affinity W is not symmetric"):
        k, merged, _ = select_n_segments(asym, lab)
    assert k == 3
    k, merged, _ = select_n_segments(W, lab.astype(str))  # strings are ids
    assert k == 3 and merged.tolist() == np.repeat(np.arange(3), 4).tolist()

def test_select_n_segments_with_an_isolated_cluster_ignores_the_ids():
    # a cluster of zero volume gave 0 / 0 merge gains (RuntimeWarnings): it
    # merged first when its id came first, else never (K = 3 or 4 for one
    # partition, by its ids)
    W = np.kron(np.eye(3), np.ones((4, 4))) + 0.01
    W[0, :] = W[:, 0] = 0
    lab = np.array([0, 1, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for ids in (np.arange(5), np.array([4, 1, 2, 3, 0])):
            k, merged, _ = select_n_segments(W, ids[lab], threshold=0.3)
            assert k == 3  # the isolated token 0 joins any segment, at no cost
            assert miou(merged[None, 1:], np.repeat(np.arange(3), 4)[None, 1:]) == 1.0


def _select_n_segments_reference(W, labels, min_segments, threshold):
    """The merging of ``select_n_segments`` before it was made fast: a scan
    of every pair per merge, O(K^3) in Python (200 segments 2.8 s)."""
    from sklearn_falcon._stats import cluster_pair_weights

    uniq, lab = np.unique(labels, return_inverse=True)
    k = len(uniq)
    C = cluster_pair_weights(W, lab, k)
    vol = C.sum(axis=1).copy()
    groups = [[i] for i in range(k)]
    alive = list(range(k))

    def rho_now():
        return max((vol[a] - C[a, a]) / vol[a] if vol[a] > 0 else 0.0 for a in alive)

    def labels_now():
        out = np.empty(len(lab), dtype=np.int64)
        for new, a in enumerate(alive):
            out[np.isin(lab, groups[a])] = new
        return out

    history = {len(alive): rho_now()}
    best_k = None
    if history[len(alive)] <= threshold:
        best_k, best_labels = len(alive), labels_now()
    while len(alive) > max(min_segments, 1):
        best = None
        for i, a in enumerate(alive):
            for b in alive[i + 1:]:
                va, vb = vol[a], vol[b]
                if not (va > 0 and vb > 0):
                    gain = np.inf
                else:
                    old = (va - C[a, a]) / va + (vb - C[b, b]) / vb
                    v = va + vb
                    new = (v - C[a, a] - C[b, b] - 2 * C[a, b]) / v
                    gain = old - new
                if best is None or gain > best[0]:
                    best = (gain, a, b)
        _, a, b = best
        C[a, :] += C[b, :]
        C[:, a] += C[:, b]
        vol[a] += vol[b]
        groups[a] += groups[b]
        alive.remove(b)
        history[len(alive)] = rho_now()
        if best_k is None and history[len(alive)] <= threshold:
            best_k, best_labels = len(alive), labels_now()
    if best_k is None:
        best_k, best_labels = len(alive), labels_now()
    return best_k, best_labels, history


@pytest.mark.parametrize("seed", range(30))
def test_select_n_segments_merges_as_the_pair_scan(seed):
    """The merging scanned every pair of clusters at each merge in Python,
    O(K^3): 200 input segments took 2.8 s, a superpixel over-segmentation
    of 1,000 minutes.  It now updates the gains of the merged cluster only,
    and gives the scan's hierarchy exactly: the same merge order (ties: the
    first pair), K, labels and rho, on graphs of integer weights (many
    ties), isolated tokens (clusters of no volume) and block structure."""
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 61))
    n = k + int(rng.integers(0, 2 * k))
    lab = np.r_[np.arange(k), rng.integers(0, k, n - k)]
    if seed % 3 == 0:  # integer weights: ties everywhere
        W = rng.integers(0, 3 if seed % 2 else 2, (n, n)).astype(float)
    elif seed % 3 == 1:  # blocks of segments, weak links between them
        blocks = rng.integers(0, max(1, k // 5), k)[lab]
        W = (blocks[:, None] == blocks[None, :]) * rng.random((n, n))
        W += 0.01 * rng.integers(0, 2, (n, n))
    else:
        W = rng.random((n, n)) ** 4
    W = np.triu(W) + np.triu(W, 1).T
    if seed % 4 == 0:  # isolated tokens: some clusters of no volume
        iso = rng.choice(n, size=min(n, 1 + seed % 5), replace=False)
        W[iso, :] = W[:, iso] = 0
    min_segments = int(rng.integers(1, k + 1))
    threshold = float(rng.choice([0.05, 0.3, 0.6, 0.95]))
    ids = rng.permutation(k) * 7 - 3  # ids that are not 0..K-1
    got = select_n_segments(W, ids[lab], min_segments=min_segments,
                            threshold=threshold)
    ref = _select_n_segments_reference(W, ids[lab], min_segments, threshold)
    assert got[0] == ref[0]
    assert np.array_equal(got[1], ref[1]) and got[1].dtype == np.int64
    assert got[2] == ref[2]


def test_select_n_segments_of_a_superpixel_over_segmentation_is_fast():
    """625 input segments (a SLIC-like over-segmentation) took 25-140 s,
    the pairs of clusters scanned in Python at every merge; about 0.1-1 s
    now.  The bound guards the complexity, far from either time (the
    figures: ``benchmarks/bench_select_n_segments.py``)."""
    import time

    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    side = 50  # a 50 x 50 token grid in 625 segments of 2 x 2 tokens
    idx = np.arange(side * side).reshape(side, side)
    rows = np.r_[idx[:, :-1].ravel(), idx[:-1].ravel()]
    cols = np.r_[idx[:, 1:].ravel(), idx[1:].ravel()]
    W = sp.coo_matrix((rng.random(rows.size), (rows, cols)), shape=(side**2,) * 2)
    W = (W + W.T).tocsr()
    lab = (idx // side // 2 * 25 + idx % side // 2).ravel()
    t0 = time.perf_counter()
    k, merged, rho = select_n_segments(W, lab)
    assert time.perf_counter() - t0 < 20.0
    assert len(rho) == 624 and len(np.unique(merged)) == k



def test_select_n_segments_holds_two_k_by_k_arrays():
    """The gains of all pairs of clusters were computed at once, about five
    ``(K, K)`` float64 temporaries beside the weights between clusters and
    the gains (1.2 GB at K = 5,000); they come in row blocks, the same
    values bit for bit (clusters of no volume: ``inf`` gains, too)."""
    import tracemalloc

    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    k = 700
    n = 4 * k
    r, c = rng.integers(0, n, (2, 8 * n))
    W = sp.csr_matrix((rng.random(r.size), (r, c)), shape=(n, n))
    W = (W + W.T).tocsr()
    lab = rng.permutation(np.arange(n) % k)
    select_n_segments(W, lab, min_segments=k - 1)  # (compiles)
    tracemalloc.start()
    try:
        select_n_segments(W, lab, min_segments=k - 5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * k * k * 8
    from sklearn_falcon.image._auto import _all_pair_gains, _pair_gains

    C = rng.random((k, k))
    C += C.T
    C[:, 5] = C[5] = 0.0  # no volume
    vol = C.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = _pair_gains(C, vol)
    want[np.tril_indices(k)] = -np.inf
    G, fast = _all_pair_gains(C, vol)
    np.testing.assert_array_equal(G, want)
    assert fast


def test_errors():
    img = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(ValueError, match="n_segments"):
        ImageSegmenter(n_segments=0).segment(img)
    with pytest.raises(ValueError, match="refine"):
        ImageSegmenter(refine="crf").segment(img)
    with pytest.raises(ValueError, match="fewer than n_segments=20. Use a larger "
                       "image, a smaller patch_size"):
        ImageSegmenter(n_segments=20).segment(img)  # 4x4 tokens
    # an image not resized: max_tokens is named only where it is below K
    # (3,000 segments of a 4,096-token budget advised a larger max_tokens)
    with pytest.raises(ValueError, match="n_segments=3000. Use a larger image, a "
                       "smaller patch_size or fewer"):
        ImageSegmenter(n_segments=3000).segment(img)
    with pytest.raises(ValueError, match=r"n_segments=5000. Use a larger image, a "
                       r"larger max_tokens \(now 4096\), a smaller patch_size"):
        ImageSegmenter(n_segments=5000).segment(img)
    # a token budget below the segments asked is named; a resized image's
    # tokens are set by max_tokens alone (a larger image or a smaller
    # patch_size, which the message advised, change nothing)
    with pytest.raises(ValueError, match=r"resized for max_tokens=4, yields only 2 "
                       r"patch tokens, fewer than n_segments=3. Use a larger "
                       r"max_tokens \(now 4\) or fewer segments\.$"):
        ImageSegmenter(n_segments=3, max_tokens=4).segment(
            np.zeros((96, 128, 3), np.uint8))
    with pytest.raises(ValueError, match="resized for max_tokens=4,"):
        ImageSegmenter(n_segments=3, max_tokens=4, patch_size=2).segment(
            np.zeros((96, 128, 3), np.uint8))
    with pytest.raises(ValueError, match="smaller than one 8x8 patch"):
        ImageSegmenter(n_segments=2).segment(np.zeros((4, 4, 3), np.uint8))


def test_grey_rgba_16bit_inputs():
    img, _ = _quadrants(32, 32)
    grey = img.mean(axis=2).astype(np.uint16) * 257
    rgba = np.dstack([img, np.full(img.shape[:2], 255, np.uint8)])
    seg = ImageSegmenter(n_segments=2, refine=None)
    for x in (grey, rgba, img.astype(np.uint16) * 257):
        assert seg.segment(x).shape == (32, 32)
    np.testing.assert_array_equal(seg.segment(rgba), seg.segment(img))


def test_vit_model_pipeline(tmp_path):
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
                            num_classes=0, dynamic_img_size=True)
    path = tmp_path / "vit.pth"
    torch.save(vit.state_dict(), path)
    img, _ = _quadrants(40, 56)
    seg = ImageSegmenter(model=vit, n_segments=3, resolution=40, refine="pamr",
                         feature="key")
    lab = seg.segment(img)
    assert lab.shape == (40, 56)
    assert 1 <= len(np.unique(lab)) <= 3
    seg2 = ImageSegmenter(model=vit, checkpoint_path=path, n_segments=2, resolution=(32, 48),
                          refine=None)
    assert seg2.segment(img).shape == (40, 56)


def test_a_checkpoint_saved_again_is_read_again(tmp_path):
    """The extractor was kept by the checkpoint's name: a checkpoint saved
    again under it (a training loop's last epoch) was never read again by
    the same segmenter, which went on with the first weights, silently."""
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2,
                            num_heads=2, num_classes=0, dynamic_img_size=True)
    img = _quadrants(40, 56)[0]
    path = tmp_path / "last.pth"
    torch.save(vit.state_dict(), path)
    seg = ImageSegmenter(model=vit, checkpoint_path=path, resolution=40)
    before = seg.extract_features(img)
    torch.save({k: v * -1.5 + 0.01 for k, v in vit.state_dict().items()}, path)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    fresh = ImageSegmenter(model=vit, checkpoint_path=path, resolution=40)
    np.testing.assert_array_equal(seg.extract_features(img),
                                  fresh.extract_features(img))
    assert not np.allclose(seg.extract_features(img), before)


def test_vit_size_errors_advise_what_a_vit_can_change():
    # a ViT's patch size is its model's (patch_size is refused with one):
    # the messages advised "a smaller patch_size"
    pytest.importorskip("timm")
    import torch
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2,
                            num_heads=2, num_classes=0, dynamic_img_size=True)
    img = _quadrants(40, 56)[0]
    with pytest.raises(ValueError, match=r"fewer than n_segments=40. Use a larger "
                       r"resolution \(now 32\), or fewer segments\.$"):
        ImageSegmenter(model=vit, n_segments=40, resolution=32).segment(img)
    with pytest.raises(ValueError, match=r"smaller than one 8x8 patch; it cannot be "
                       r"segmented. Use a larger image: a ViT's patch size"):
        ImageSegmenter(model=vit, n_segments=2).segment(img[:4, :4])


def test_fit_predict_accepts_tensor_batch_and_single_image():
    torch = pytest.importorskip("torch")
    imgs = np.stack([_quadrants(32, 32, seed=s)[0] for s in range(3)])
    batch = torch.from_numpy(imgs).permute(0, 3, 1, 2)
    seg = ImageSegmenter(n_segments=2, refine=None)
    out = seg.fit_predict(batch)
    assert len(out) == 3 and all(o.shape == (32, 32) for o in out)
    assert len(seg.fit_predict(batch[0])) == 1
    assert len(seg.fit_predict(imgs[0])) == 1
    np.testing.assert_array_equal(out[1], seg.segment(imgs[1]))


def test_init_parameter_is_used_and_validated():
    import numpy as np
    import pytest

    from sklearn_falcon import ImageSegmenter

    rng = np.random.default_rng(0)
    img = np.zeros((48, 64, 3), dtype=np.uint8)
    img[:, 32:] = 220
    img = (img + rng.integers(0, 25, img.shape)).astype(np.uint8)
    from sklearn_falcon._inits import INITS

    for init in INITS:  # every init of the registry, k-means on the tokens
        seg = ImageSegmenter(n_segments=2, init=init, refine=None)
        labels = seg.segment(img)
        assert labels.shape == (48, 64)
        assert len(np.unique(labels)) == 2
    with pytest.raises(ValueError, match="'init' parameter of ImageSegmenter"):
        ImageSegmenter(n_segments=2, init="bogus").segment(img)
    # cluster_tokens takes W as an array-like, and speaks of W, not an image
    seg = ImageSegmenter(n_segments=2)
    assert seg.cluster_tokens([[1.0, 0.9, 0.05], [0.9, 1.0, 0.05],
                               [0.05, 0.05, 1.0]]).tolist() in ([0, 0, 1], [1, 1, 0])
    with pytest.raises(ValueError, match=r"W holds only 4 tokens, fewer than "
                       "n_segments=5"):
        ImageSegmenter(n_segments=5).cluster_tokens(np.eye(4))
    # n_segments="auto" said "The image yields only 4 patch tokens, fewer
    # than auto_range[0]=5. Use a larger image, a smaller patch_size ..."
    with pytest.raises(ValueError, match=r"^W holds only 4 tokens, fewer than "
                       r"auto_range\[0\]=5\.$"):
        ImageSegmenter(n_segments="auto", auto_range=(5, 9)).cluster_tokens(np.eye(4))
    for bad in (np.ones((3, 4)), np.eye(4)[None]):
        for k in (1, 2):
            with pytest.raises(ValueError, match="W must be a square"):
                ImageSegmenter(n_segments=k).cluster_tokens(bad)
    # a precomputed token affinity has no features to run k-means on
    W = np.ones((6, 6))
    with pytest.raises(ValueError, match="init='kmeans' needs features"):
        ImageSegmenter(n_segments=2, init="kmeans").cluster_tokens(W)


def test_cuda_segment():
    """The whole pipeline on CUDA: the ViT and Falcon's torch backend."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("timm")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    from timm.models.vision_transformer import VisionTransformer

    img, mask = _quadrants(64, 96)
    colour = ImageSegmenter(n_segments=4, device="cuda").segment(img)
    assert miou(colour, mask) > 0.95
    cpu = ImageSegmenter(n_segments=4).segment(img)
    assert miou(colour, cpu) > 0.99  # as on the CPU
    torch.manual_seed(0)
    vit = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2,
                            num_heads=2, num_classes=0, dynamic_img_size=True)
    seg = ImageSegmenter(model=vit, n_segments=3, resolution=(48, 64), device="cuda")
    lab = seg.segment(img)
    assert next(vit.parameters()).device.type == "cpu"  # the caller's module stays
    assert lab.shape == (64, 96) and 1 <= len(np.unique(lab)) <= 3
    assert seg.fit_predict([img, img])[1].shape == (64, 96)


def test_caller_module_is_not_modified(tmp_path):
    """Checkpoint loading, eval mode and device moves happen on a copy."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("timm")
    from timm.models.vision_transformer import VisionTransformer

    def vit():
        return VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2,
                                 num_heads=2, num_classes=0, dynamic_img_size=True)

    torch.manual_seed(0)
    other = vit()
    path = tmp_path / "other.pth"
    torch.save(other.state_dict(), path)
    torch.manual_seed(1)
    mine = vit()  # in training mode, weights unlike the checkpoint's
    before = {k: v.clone() for k, v in mine.state_dict().items()}
    img, _ = _quadrants(40, 56)
    seg = ImageSegmenter(model=mine, checkpoint_path=path, n_segments=2, refine=None,
                         resolution=(32, 48), feature="key")
    with_ckpt = seg.segment(img)
    assert mine.training
    for k, v in mine.state_dict().items():
        assert torch.equal(v, before[k]), k
    # the checkpoint was used: the same labels as the checkpoint's own module
    np.testing.assert_array_equal(
        with_ckpt, ImageSegmenter(model=other.eval(), n_segments=2, refine=None,
                                  resolution=(32, 48), feature="key").segment(img))
    # a module already in eval mode on the device is used without a copy
    from sklearn_falcon.image import TimmFeatures

    assert TimmFeatures(other, resolution=32).model is other
    assert TimmFeatures(mine, resolution=32).model is not mine



def test_a_module_changed_in_place_is_read_again():
    """The segmenter's extractor, built once, worked on a copy of a module in
    training mode: after the module's weights changed in place (a
    fine-tuning step, ``load_state_dict``), the same segmenter kept
    segmenting with the old weights, while a new one used the new (a module
    in eval mode, used without a copy, was read again).  It is rebuilt when
    the module's weights, buffers or mode change."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("timm")
    from timm.models.vision_transformer import VisionTransformer

    def vit(seed):
        torch.manual_seed(seed)
        return VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=2,
                                 num_heads=2, num_classes=0, dynamic_img_size=True)

    img, _ = _quadrants(40, 56)
    for eval_mode in (False, True):
        mine = vit(0).train(not eval_mode)
        seg = ImageSegmenter(model=mine, n_segments=2, refine=None,
                             resolution=(32, 48))
        before = seg.extract_features(img)
        mine.load_state_dict(vit(1).state_dict())
        after = seg.extract_features(img)
        fresh = ImageSegmenter(model=mine, n_segments=2, refine=None,
                               resolution=(32, 48)).extract_features(img)
        assert not np.allclose(before, fresh)
        np.testing.assert_array_equal(after, fresh)
        ext = seg._get_extractor()
        assert seg._get_extractor() is ext  # unchanged: not rebuilt


def test_pamr_runs_where_falcon_runs():
    assert ImageSegmenter(device="cpu")._torch_device() is None  # Numba
    torch = pytest.importorskip("torch")
    expected = "cuda" if torch.cuda.is_available() else None
    assert ImageSegmenter(device="auto")._torch_device() == expected


def test_fit_of_no_images_is_refused():
    """``fit([])`` (a glob that matched no file) returned empty ``labels_``
    without a word, and without checking the parameters."""
    with pytest.raises(ValueError, match="images is empty"):
        ImageSegmenter(n_segments=2).fit([])
    with pytest.raises(ValueError, match="n_segments"):
        ImageSegmenter(n_segments=-3).fit([])


def _square_on_halves(t=0):
    img = np.empty((96, 96, 3))
    img[:] = (60, 90, 200)
    img[:, 48:] = (70, 180, 60)
    img[20 + 3 * t:48 + 3 * t, 16 + 4 * t:44 + 4 * t] = (220, 200, 40)
    img += np.random.default_rng(0).normal(0, 5, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def test_a_random_state_instance_gives_maps_independent_of_n_jobs():
    """A RandomState instance (accepted, as scikit-learn's estimators
    accept one) was pickled to each joblib worker, so each task started
    from its state: ``segment_dataset`` gave other maps with ``n_jobs=2``
    than with ``n_jobs=1``.  One seed per image is drawn from it, in the
    images' order, by ``segment_dataset`` and ``fit`` alike."""
    from joblib import parallel_config

    images = [_square_on_halves(t) for t in range(4)]

    def segmenter():
        return ImageSegmenter(n_segments=4, refine=None,
                              random_state=np.random.RandomState(0))

    one = segmenter().segment_dataset(images, n_jobs=1, batch_size=1,
                                      progress=False)
    fit = segmenter().fit_predict(images)
    with parallel_config(backend="loky", inner_max_num_threads=1):
        two = segmenter().segment_dataset(images, n_jobs=2, batch_size=1,
                                          progress=False)
    for a, b, c in zip(one, two, fit):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


def test_a_random_state_instance_builds_the_extractor_once(monkeypatch):
    """With a RandomState instance, ``fit`` and each task of
    ``segment_dataset`` segmented each image with a copy of the segmenter
    that built its own extractor (a ViT's weights loaded once per image),
    where each task builds it once."""
    from sklearn_falcon.image import _extractors

    built, make = [], _extractors.make_extractor
    monkeypatch.setattr(_extractors, "make_extractor",
                        lambda *a, **k: built.append(1) or make(*a, **k))
    images = [_square_on_halves(t) for t in range(3)]
    for run in (lambda seg: seg.fit(images),
                lambda seg: seg.segment_dataset(images, n_jobs=1, batch_size=3,
                                                progress=False)):
        built.clear()
        run(ImageSegmenter(n_segments=2, refine=None,
                           random_state=np.random.RandomState(0)))
        assert len(built) == 1


def test_an_error_of_an_array_of_a_dataset_names_its_index():
    """``segment_dataset`` and ``fit`` of a list of arrays refused one with
    "Image of size 4x4 (HxW) is smaller than one 8x8 patch" (or "image must
    be a file path, ...; got NoneType"): not which of the list's arrays (a
    file is named by its path); its index in the list is named."""
    seg = ImageSegmenter(n_segments=2, refine=None)
    for bad, kind, text in ((np.zeros((4, 4, 3), np.uint8), ValueError, "4x4"),
                            (None, TypeError, "NoneType")):
        images = [_square_on_halves(t) for t in range(3)] + [bad]
        for run in (lambda: seg.segment_dataset(images, n_jobs=1, batch_size=2,
                                                progress=False),
                    lambda: seg.fit(images)):
            with pytest.raises(kind, match=rf"^Cannot segment images\[3\]: .*{text}"):
                run()

def test_an_error_of_an_array_on_a_device_names_its_index(monkeypatch):
    """The batched device path of ``segment_dataset`` (a CUDA device) did not
    name which array it refused ("Image of size 4x4 (HxW) is smaller than
    one 8x8 patch"), where the CPU path names ``images[i]``."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(ImageSegmenter, "_torch_device",
                        lambda self: torch.device("cpu"))
    seg = ImageSegmenter(n_segments=2, refine=None)
    for bad, kind, text in ((np.zeros((4, 4, 3), np.uint8), ValueError, "4x4"),
                            (np.zeros((8, 8, 3), np.uint8), ValueError,
                             "only 1 patch token"),
                            (None, TypeError, "NoneType")):
        images = [_square_on_halves(t) for t in range(3)] + [bad]
        with pytest.raises(kind, match=rf"^Cannot segment images\[3\]: .*{text}"):
            seg.segment_dataset(images, batch_size=2, progress=False)

def test_warnings_of_worker_processes_reach_the_caller():
    """``segment_dataset(n_jobs=2)``: a warning of a loky worker went to the
    worker's stderr, attributed to ``multiprocessing/process.py``, past the
    caller's filters and ``catch_warnings`` (none recorded); it is issued in
    the caller's process, at the caller's line, as with ``n_jobs=1``."""
    images = [np.zeros((64, 64, 3), np.uint8)] * 2  # black: W all ones
    seg = ImageSegmenter(n_segments=3, refine=None, position_weight=0.0)
    for n_jobs in (1, 2):
        with pytest.warns(UserWarning, match="Every cosine similarity") as rec:
            seg.segment_dataset(images, n_jobs=n_jobs, batch_size=1, progress=False)
        assert {w.filename for w in rec} == {__file__}, n_jobs


def test_warnings_of_worker_threads_are_given_once_at_the_callers_line():
    """joblib's threading backend (or a Dask worker's threads) ran the tasks
    in other threads, where the caller's "once per call" did not hold and
    the user's line was not on the stack: each image warned again, at
    ``concurrent/futures/thread.py``.  They are given as a worker process's
    are: once, at the caller's line."""
    from joblib import parallel_config

    images = [np.zeros((64, 64, 3), np.uint8)] * 4  # black: W all ones
    seg = ImageSegmenter(n_segments=3, refine=None, position_weight=0.0)
    with parallel_config(backend="threading"), \
            warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        seg.segment_dataset(images, n_jobs=2, batch_size=1, progress=False)
    assert [(w.category, w.filename) for w in rec] == [(UserWarning, __file__)]
    assert "Every cosine similarity" in str(rec[0].message)


def test_worker_warnings_of_other_libraries_keep_their_origin(monkeypatch):
    """A worker process's warning of another library (a DeprecationWarning
    of torch, say) was issued at the caller's line: the caller's filters
    that name its module (``filterwarnings("ignore", module="torch")``) and
    Python's default ignoring of library DeprecationWarnings no longer
    applied, as with ``n_jobs=1``; it is issued at its own origin, the
    package's warnings at the caller's line."""
    import sys
    import types

    from sklearn_falcon.image import _dataset

    lib = types.ModuleType("fakelib")
    lib.__file__ = os.path.join(os.path.dirname(__file__), "fakelib.py")
    exec(compile("import warnings\ndef old():\n    warnings.warn('fakelib.old is "
                 "deprecated', DeprecationWarning)\n", lib.__file__, "exec"),
         lib.__dict__)
    monkeypatch.setitem(sys.modules, "fakelib", lib)
    each, batch = _dataset.segment_each, _dataset._segment_batch

    def segment_each(*args):
        lib.old()
        return each(*args)

    monkeypatch.setattr(_dataset, "segment_each", segment_each)
    # each task as in a loky worker (another process's main thread)
    monkeypatch.setattr(_dataset, "_segment_batch",
                        lambda *args: batch(*args[:-1], (-1, -1)))
    images = [np.zeros((64, 64, 3), np.uint8)] * 2  # black: W all ones
    seg = ImageSegmenter(n_segments=3, refine=None, position_weight=0.0)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", module="fakelib")
        seg.segment_dataset(images, batch_size=1, progress=False)
    assert [(w.category, w.filename) for w in rec] == [(UserWarning, __file__)]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        seg.segment_dataset(images, batch_size=1, progress=False)
    old = [w for w in rec if w.category is DeprecationWarning]
    assert len(old) == 2 and {w.filename for w in old} == {lib.__file__}


def test_a_worker_warning_raised_as_an_error_leaves_no_joblib_notice():
    """A worker's warning is given in the caller's loop over joblib's
    generator of results: raised there as an error (``-W error``), it left
    the generator to the garbage collector, whose joblib warned "3 tasks
    which were still being processed by the workers have been cancelled.
    You could benefit from adjusting the input task iterator" ("Exception
    ignored in" under ``-W error``).  The generator is closed first."""
    import gc

    images = [np.zeros((64, 64, 3), np.uint8)] * 4  # black: W all ones
    seg = ImageSegmenter(n_segments=3, refine=None, position_weight=0.0)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", message="Every cosine similarity")
        try:
            seg.segment_dataset(images, n_jobs=2, batch_size=1, progress=False)
        except UserWarning as exc:
            assert "Every cosine similarity" in str(exc)
        else:
            pytest.fail("the warning was not raised as an error")
        gc.collect()
    assert [str(w.message) for w in rec] == []


def test_labels_do_not_depend_on_blas_threads():
    """``segment_dataset(n_jobs=2)`` gave other maps than ``n_jobs=1`` with
    ``random_state=0`` (against "identical whatever the backend and the
    number of workers"): a joblib worker runs BLAS on ``cpu_count //
    n_jobs`` threads, and FalconNCut formed the tokens' cosine ``W`` before
    its one-BLAS-thread block, so its rounding (21 of 144 token labels here,
    on 2 CPUs) followed the thread count.  The clustering runs on one BLAS
    thread."""
    from threadpoolctl import threadpool_limits

    img = _square_on_halves()
    seg = ImageSegmenter(n_segments=4, refine=None, random_state=0)
    labels = seg.segment(img)
    with threadpool_limits(limits=1, user_api="blas"):  # as in a worker
        np.testing.assert_array_equal(seg.segment(img), labels)


@pytest.mark.parametrize("n_jobs", [0, 1.5, "2"])
def test_segment_dataset_refuses_a_bad_n_jobs_by_its_name(n_jobs):
    """``n_jobs=0`` said "n_jobs == 0 in Parallel has no meaning" (joblib's,
    naming a class the user never called), ``n_jobs="2"`` ran on 2 workers
    and ``1.5`` on 1; on a CUDA device ``n_jobs`` was not read at all."""
    img, _ = _quadrants(16, 16)
    seg = ImageSegmenter(n_segments=2, refine=None)
    with pytest.raises(ValueError, match=r"The 'n_jobs' parameter of "
                       r"ImageSegmenter.segment_dataset must be .*Got "
                       + repr(n_jobs).replace(".", r"\.") + " instead"):
        seg.segment_dataset([img], n_jobs=n_jobs, progress=False)


@pytest.mark.parametrize("name, value", [
    ("progress", "no"), ("progress", None), ("batch_size", 0), ("batch_size", 2.0)])
def test_segment_dataset_refuses_a_bad_progress_or_batch_size(name, value):
    """``progress="no"`` showed the bar (any truthy value did), and
    ``batch_size`` was refused in words apart from ``n_jobs``'s; both are
    checked as ``n_jobs`` is, by name."""
    img, _ = _quadrants(16, 16)
    seg = ImageSegmenter(n_segments=2, refine=None)
    kwargs = {"progress": False, name: value}
    with pytest.raises(ValueError, match=rf"The '{name}' parameter of "
                       r"ImageSegmenter.segment_dataset must be .*Got "
                       + re.escape(repr(value)) + " instead"):
        seg.segment_dataset([img], **kwargs)
    assert len(seg.segment_dataset([img], progress=np.bool_(False))) == 1


def test_auto_n_segments_warns_once_of_its_graph():
    """n_segments="auto" fits one token graph for each K of auto_range: a
    disconnected graph warned "The affinity graph is not fully connected"
    once per K (three lines for one image, three per frame of a video)."""
    rng = np.random.default_rng(0)
    B = rng.random((10, 10)) + 0.5
    W = np.kron(np.eye(2), (B + B.T) / 2)  # two components
    seg = ImageSegmenter(n_segments="auto", auto_range=(2, 4))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        labels = seg.cluster_tokens(W)
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 1 and "not fully connected" in msgs[0], msgs
    assert rec[0].filename == __file__
    assert np.unique(labels).size == 2


def test_a_warning_every_frame_shares_is_given_once(monkeypatch):
    """Every frame of a video (every image of segment_dataset) is one fit:
    a warning that they all share ("The affinity graph is not fully
    connected" of a kNN token graph) was printed once per frame, even
    under Python's "default" filter: 1000 identical lines for 1000
    frames."""
    import scipy.sparse as sp

    from sklearn_falcon.image import _budget, _segmenter

    real = _segmenter.knn_cosine_power_affinity

    def split(X, *args, **kwargs):  # the token graph in two components
        W = sp.csr_matrix(real(X, *args, **kwargs))
        half = np.arange(W.shape[0]) < W.shape[0] // 2
        return sp.csr_matrix(W.multiply(half[:, None] == half[None, :]))

    monkeypatch.setattr(_budget, "DENSE_MAX_TOKENS", 20)  # the kNN graph
    monkeypatch.setattr(_segmenter, "knn_cosine_power_affinity", split)
    img, _ = _quadrants()  # 48 tokens
    seg = ImageSegmenter(n_segments=2, refine=None)
    # fit and fit_predict too: they repeated it once per image
    for run in (lambda: list(seg.segment_video([img] * 3)),
                lambda: seg.segment_dataset([img] * 3, batch_size=1,
                                            progress=False),
                lambda: seg.fit([img] * 3).labels_,
                lambda: seg.fit_predict([img] * 3)):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("default")
            assert len(run()) == 3
        msgs = [str(w.message) for w in rec]
        assert len(msgs) == 1 and "not fully connected" in msgs[0], msgs


@pytest.mark.parametrize("how", ["segment", "fit", "segment_dataset", "device"])
def test_a_size_refusal_names_the_file(tmp_path, monkeypatch, how):
    """"Image of size 4x40 (HxW) is smaller than one 8x8 patch" (and "The
    image yields only 2 patch tokens") did not say which of a folder's
    images it was."""
    from PIL import Image

    good, small = tmp_path / "good.png", tmp_path / "thin strip.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(good)
    Image.fromarray(np.zeros((4, 40, 3), np.uint8)).save(small)
    seg = ImageSegmenter(n_segments=2, refine=None, random_state=0)
    if how == "device":  # the batched solve of a torch device, on the CPU
        torch = pytest.importorskip("torch")
        monkeypatch.setattr(ImageSegmenter, "_torch_device",
                            lambda self: torch.device("cpu"))
    call = {"segment": lambda: seg.segment(str(small)),
            "fit": lambda: seg.fit([good, small]),
            "segment_dataset": lambda: seg.segment_dataset([good, small]),
            "device": lambda: seg.segment_dataset([good, small])}[how]
    with pytest.raises(ValueError, match="smaller than one 8x8 patch") as info:
        call()
    assert f"'{small}'" in str(info.value)
    Image.fromarray(np.zeros((8, 16, 3), np.uint8)).save(small)  # 2 tokens
    with pytest.raises(ValueError, match="yields only 2 patch tokens") as info:
        ImageSegmenter(n_segments=3, refine=None).segment(small)
    assert f"'{small}'" in str(info.value)
    # an array has no name: its message is as it was
    with pytest.raises(ValueError, match="^Image of size 4x40"):
        seg.segment(np.zeros((4, 40, 3), np.uint8))


def test_too_few_vit_tokens_names_the_resolution_in_use():
    # "Use a larger resolution (now None)": resolution=None is the model's
    pytest.importorskip("timm")
    seg = ImageSegmenter(model="vit_tiny_patch16_224", max_tokens=3, n_segments=6)
    with pytest.raises(ValueError, match="yields only 2 patch tokens") as info:
        seg.segment(np.zeros((48, 64, 3), np.uint8))
    assert "resolution (now 224)" in str(info.value), info.value
    seg.set_params(resolution=112)
    with pytest.raises(ValueError, match=r"resolution \(now 112\)"):
        seg.segment(np.zeros((48, 64, 3), np.uint8))


def test_segment_video_names_the_frame_file_it_refuses(tmp_path):
    # a frame file too small for a patch: "Image of size 4x40 (HxW) ...", of
    # which of the video's frames?
    from PIL import Image

    good, small = tmp_path / "f0001.png", tmp_path / "f0002.png"
    Image.fromarray(np.zeros((32, 40, 3), np.uint8)).save(good)
    Image.fromarray(np.zeros((4, 40, 3), np.uint8)).save(small)
    frames = ImageSegmenter(n_segments=2, refine=None).segment_video([good, small])
    assert next(frames).shape == (32, 40)
    with pytest.raises(ValueError, match="smaller than one 8x8 patch") as info:
        next(frames)
    assert f"'{small}'" in str(info.value)


def test_a_model_error_is_not_blamed_on_the_image_file(tmp_path):
    # "Cannot segment image 'photo.png': Unknown timm model name ..."
    pytest.importorskip("timm")
    from PIL import Image

    path = tmp_path / "photo.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path)
    for method in ("segment", "extract_features"):
        with pytest.raises(ValueError, match="^Unknown timm model name 'no_such_vit'"):
            getattr(ImageSegmenter(model="no_such_vit"), method)(path)


def test_batched_device_path_refuses_too_few_tokens_as_segment(tmp_path,
                                                                monkeypatch):
    # segment_dataset's batched solve (a CUDA device) said "An image yields
    # only 30 patch tokens, fewer than n_segments=50.": which one, and what
    # to change? The message of segment, naming the file
    torch = pytest.importorskip("torch")
    from PIL import Image

    good, small = tmp_path / "good.png", tmp_path / "small.png"
    Image.fromarray(np.zeros((80, 96, 3), np.uint8)).save(good)
    Image.fromarray(np.zeros((40, 48, 3), np.uint8)).save(small)
    seg = ImageSegmenter(n_segments=50, refine=None)
    with pytest.raises(ValueError) as on_cpu:
        seg.segment(small)
    monkeypatch.setattr(ImageSegmenter, "_torch_device",
                        lambda self: torch.device("cpu"))
    with pytest.raises(ValueError) as batched:
        seg.segment_dataset([good, small], progress=False)
    assert str(on_cpu.value).startswith(f"Cannot segment image '{small}': ")
    assert str(batched.value) == str(on_cpu.value)


def test_extract_features_names_the_file_it_refuses(tmp_path):
    # "Image of size 4x40 (HxW) is smaller than one 8x8 patch": of which
    # file? (segment and the command line name it)
    from PIL import Image

    small = tmp_path / "small.png"
    Image.fromarray(np.zeros((4, 40, 3), np.uint8)).save(small)
    for path in (small, str(small)):
        with pytest.raises(ValueError, match=r"^Cannot extract the features of image "
                           rf"'{re.escape(str(small))}': Image of size 4x40 \(HxW\)"):
            ImageSegmenter().extract_features(path)
    with pytest.raises(ValueError, match=r"^Image of size 4x40 \(HxW\)"):  # no file
        ImageSegmenter().extract_features(np.zeros((4, 40, 3), np.uint8))


@pytest.mark.parametrize("how", ["segment_video", "device"])
def test_a_model_error_is_not_blamed_on_a_frame_or_batch_file(tmp_path, monkeypatch,
                                                               how):
    torch = pytest.importorskip("torch")
    pytest.importorskip("timm")
    from PIL import Image

    path = tmp_path / "f0001.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(path)
    seg = ImageSegmenter(model="no_such_vit", n_segments=2)
    if how == "device":  # the batched solve of a torch device, on the CPU
        monkeypatch.setattr(ImageSegmenter, "_torch_device",
                            lambda self: torch.device("cpu"))
    with pytest.raises(ValueError, match="^Unknown timm model name 'no_such_vit'"):
        if how == "device":
            seg.segment_dataset([path])
        else:
            next(seg.segment_video([path]))
