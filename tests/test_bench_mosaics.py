"""The mosaic benchmark dataset and its runner (tiny sizes)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_mosaics as B  # noqa: E402
from benchmarks.mosaics import SOURCES, load_source, make_mosaic, make_mosaics  # noqa: E402


def check_image_set(make, size, n_regions):
    """``make(n, size=, seed=)`` is deterministic, seed-dependent and gives
    (uint8 image, int64 truth) pairs whose ids ``0..k-1`` are all present,
    ``k`` in ``n_regions``; returns the pairs of seed 5."""
    a = make(4, size=size, seed=5)
    b = make(4, size=size, seed=5)
    c = make(4, size=size, seed=6)
    assert len(a) == 4
    for (ia, ta), (ib, tb) in zip(a, b):
        assert ia.shape == (size, size, 3) and ia.dtype == np.uint8
        assert ta.shape == (size, size) and ta.dtype == np.int64
        k = ta.max() + 1
        assert k in n_regions
        assert np.array_equal(np.unique(ta), np.arange(k))  # every id present
        assert np.array_equal(ia, ib) and np.array_equal(ta, tb)
    assert any(not np.array_equal(x[0], y[0]) for x, y in zip(a, c))
    return a


def test_mosaics_are_deterministic_and_well_formed():
    check_image_set(make_mosaics, 48, range(3, 7))


def test_mosaic_regions_come_from_different_sources():
    img, truth = make_mosaic(5, 64, seed=1)
    means = [img[truth == r].reshape(-1, 3).mean(0) for r in range(5)]
    # five different crops: no two regions have the same mean colour
    d = [np.abs(means[i] - means[j]).sum() for i in range(5) for j in range(i + 1, 5)]
    assert min(d) > 0


def test_mosaic_sources_are_bundled_rgb():
    for name in SOURCES:
        src = load_source(name)
        assert src.ndim == 3 and src.shape[2] == 3 and src.dtype == np.uint8
        assert not src.flags.writeable


def test_mosaic_bad_parameters():
    with pytest.raises(ValueError, match="n_regions"):
        make_mosaic(len(SOURCES) + 1, 32)
    with pytest.raises(ValueError, match="min_regions"):
        make_mosaics(1, 32, min_regions=4, max_regions=3)
    with pytest.raises(ValueError, match="name"):
        load_source("nope")


def test_bench_mosaics_runs_and_is_extensible(tmp_path):
    from sklearn_falcon.image import ColorPositionFeatures

    B.register_features("coarse", lambda: ColorPositionFeatures(16))
    try:
        rows, path = B.run(n_images=2, size=64, features=("color", "coarse"),
                           thresholds=(0.01,), out=tmp_path / "m.md")
    finally:
        del B.FEATURES["coarse"]
    names = [r["method"] for r in rows]
    assert names[0] == B.DEFAULT
    assert "Falcon on 'coarse' tokens" in names
    assert "SpectralClustering (sklearn defaults) on 'coarse' tokens" in names
    for r in rows:
        assert 0.0 <= r["miou"] <= 1.0 and r["time_s"] > 0
    text = path.read_text()
    assert "| method | mIoU |" in text and "coarse" in text
    assert "--thresholds 0.01`" in text  # the command that reproduces the table
    with pytest.raises(ValueError, match="unknown feature set"):
        B.build_methods(("nope",))


def test_bench_mosaics_counts_a_failing_method_and_goes_on(tmp_path, monkeypatch):
    # a method that raises on one image is a counted failure (one segment,
    # out of the mean time), not the end of the run with no table
    calls = []

    def flaky(img, k):
        calls.append(k)
        if len(calls) == 2:  # the first image after the warm-up
            raise RuntimeError("ARPACK did not converge")
        return np.zeros(img.shape[:2], np.int64)

    def fine(img, k):
        return np.zeros(img.shape[:2], np.int64)

    monkeypatch.setattr(B, "build_methods",
                        lambda *a, **k: {B.DEFAULT: fine, "flaky": flaky})
    rows, path = B.run(n_images=2, size=32, thresholds=(), out=tmp_path / "m.md")
    row = {r["method"]: r for r in rows}
    assert row["flaky"]["failures"] == 1 and row[B.DEFAULT]["failures"] == 0
    assert np.isfinite(row["flaky"]["time_s"])  # the other image's time
    assert "| failures |" in path.read_text()


def test_bench_mosaics_command_line_takes_the_thresholds(tmp_path, monkeypatch):
    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        return [], tmp_path / "m.md"

    monkeypatch.setattr(B, "run", fake_run)
    B.main(["--n-images", "2", "--seed", "2", "--thresholds", "0.001,0.05"])
    assert seen["thresholds"] == (0.001, 0.05) and seen["seed"] == 2
    seen.clear()
    B.main(["--n-images", "2"])
    assert "thresholds" not in seen  # run()'s default: every threshold


def test_bench_position_quick(tmp_path):
    from benchmarks import bench_position as P

    sets = P.image_sets(quick=True)
    assert len(sets) == 7 and all(len(data) >= 3 for _, data in sets.values())
    scores = P.run(weights=(0.0, 0.3), quick=True)
    assert len(scores) == 14 and all(0.0 <= v <= 1.0 for v in scores.values())
    text = P.write(scores, (0.0, 0.3), tmp_path / "p.md", True, 1.0).read_text()
    assert "w = 0.3 (default)" in text and "small objects" in text
    assert "objects on a background, seed 1" in text


def test_bench_position_options(tmp_path):
    from benchmarks import bench_position as P

    sets = P.image_sets(quick=True, mosaic_seeds=(3, 4), only="mosaics")
    assert list(sets) == ["mosaics, seed 3", "mosaics, seed 4"]
    out = tmp_path / "p.md"
    assert P.main(["--quick", "--only", "synthetic", "--weights", "0,0.3",
                   "--out", str(out)]) == 0
    text = out.read_text()
    assert "--only synthetic --weights 0,0.3`" in text and str(out) not in text
    assert "| synthetic (bench_segmentation) |" in text and "mosaics" not in text.split(
        "|---|")[-1]


def test_objects_are_deterministic_and_well_formed():
    from benchmarks.objects import make_objects

    for _, truth in check_image_set(make_objects, 64, range(2, 5)):
        counts = np.bincount(truth.ravel())
        assert counts[0] == counts.max()  # the background is the largest region


def test_object_fractions_are_respected():
    from benchmarks.objects import make_objects

    for _, truth in make_objects(6, size=128, seed=0, max_objects=1,
                                 min_fraction=0.1, max_fraction=0.12):
        frac = (truth == 1).mean()
        assert 0.08 <= frac <= 0.14, frac


def test_bench_auto_smoke(tmp_path):
    from benchmarks import bench_auto as A

    names = list(A.image_sets(quick=True))
    assert len(names) == 11 and sum(n.startswith("objects") for n in names) == 2
    out = tmp_path / "a.md"
    A.main(["--quick", "--only", "synthetic 160 px, seed 0", "--out", str(out)])
    text = out.read_text()
    assert f"--quick --only 'synthetic 160 px, seed 0' --out {out}`" in text
    rows = [line for line in text.splitlines() if line.startswith("| synthetic")]
    assert len(rows) == 1 and "(tuning set) | 3 |" in rows[0]


def test_bench_mosaics_quick_keeps_the_options_and_records_them(tmp_path,
                                                               monkeypatch):
    # --quick dropped --n-images (6 images whatever was asked), and its
    # recorded command dropped --size and --thresholds: the table said
    # `python -m benchmarks.bench_mosaics --quick` for another run
    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        return [], tmp_path / "m.md"

    monkeypatch.setattr(B, "run", fake_run)
    B.main(["--quick", "--n-images", "3", "--size", "128"])
    assert seen["n_images"] == 3 and seen["size"] == 128 and seen["quick"]
    seen.clear()
    B.main(["--quick"])
    assert seen["n_images"] == 6 and seen["thresholds"] == (0.01,)
    row = dict(method=B.DEFAULT, miou=0.5, time_s=1.0, n_segments=3.0)
    common = dict(seed=0, features=("color",), true_k=4.0)
    path = B._write([row], n_images=3, size=128, thresholds=(0.05,),
                    out=tmp_path / "q.md", quick=True, **common)
    assert ("`python -m benchmarks.bench_mosaics --quick --n-images 3 --size 128 "
            "--thresholds 0.05`") in path.read_text()
    path = B._write([row], n_images=6, size=256, thresholds=(0.01,),
                    out=tmp_path / "q.md", quick=True, **common)
    assert "`python -m benchmarks.bench_mosaics --quick`" in path.read_text()


def test_bench_warm_video_records_its_options(tmp_path, monkeypatch):
    # the table recorded `python -m benchmarks.bench_warm_video` whatever
    # --repeat and --seed were
    from benchmarks import bench_warm_video as V

    monkeypatch.setattr(V, "run_warm", lambda quick, repeat: [])
    monkeypatch.setattr(V, "run_video", lambda quick, seed: ([], (2, 32)))
    out = tmp_path / "w.md"
    V.main(["--quick", "--repeat", "5", "--seed", "2", "--out", str(out)])
    assert (f"`python -m benchmarks.bench_warm_video --quick --repeat 5 --seed 2 "
            f"--out {out}`") in out.read_text()
