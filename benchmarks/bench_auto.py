"""``n_segments="auto"`` against the true K, on the sets it was not tuned on.

    python -m benchmarks.bench_auto            # ~15 min on 2 shared cores
    python -m benchmarks.bench_auto --quick    # smoke

``ImageSegmenter(n_segments=..., random_state=seed)``, the offline default
end to end (image -> features -> Falcon -> prototype upsampling -> PAMR),
with

- the true number of regions K;
- ``"auto"`` with ``auto_grid_threshold=None``: the feature conductance test
  alone (the rule before the grid test);
- ``"auto"`` with its defaults (feature conductance <= 0.45 and grid
  conductance <= 0.25);

on the synthetic piecewise-textured images of
:mod:`benchmarks.bench_segmentation` (160 px, 400 tokens, and 256 px, 1,024
tokens; seed 0 is the set the thresholds were chosen on, the other seeds are
held out), on the mosaics of real photographs and textures
(:mod:`benchmarks.mosaics`, 24 images of 256 px per seed, held out), and on
objects on a background (:mod:`benchmarks.objects`, 16 images per size,
held out: objects of 2 % of the image are the small segments a spatial
test could reject).

Reported: mean mIoU (per-image Hungarian matching, after PAMR, as
:meth:`ImageSegmenter.segment` returns it), the mean number of segments, the
share of images where auto finds the true K, and the mean time per image of
each auto variant (measured side by side, image by image).
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_segmentation import make_dataset  # noqa: E402
from benchmarks.mosaics import make_mosaics  # noqa: E402
from benchmarks.objects import make_objects  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SYNTHETIC = ((160, 0), (160, 1), (160, 2), (256, 0), (256, 1), (256, 2))
MOSAIC_SEEDS = (0, 1, 2)
OBJECTS = ((160, 0), (256, 0))
VARIANTS = {"true K": None, "auto, conductance only": {"auto_grid_threshold": None},
            "auto (default)": {}}


def image_sets(quick=False, only=None):
    """``{name: (seed, [(image, truth), ...])}``; ``only``: keep the sets
    whose name contains it."""
    n_syn, n_mos = (3, 3) if quick else (16, 24)
    sets = {}
    for size, seed in SYNTHETIC:
        if only and only not in f"synthetic {size} px, seed {seed}":
            continue
        tag = " (tuning set)" if (size, seed) == (160, 0) else ""
        data = make_dataset(n_syn, size, random_state=seed)
        sets[f"synthetic {size} px, seed {seed}{tag}"] = (
            seed, [(img, gt) for img, gt, _ in data])
    for seed in MOSAIC_SEEDS:
        if only and only not in f"mosaics, seed {seed}":
            continue
        sets[f"mosaics, seed {seed}"] = (seed, make_mosaics(n_mos, size=256, seed=seed))
    for size, seed in OBJECTS:
        name = f"objects on a background {size} px, seed {seed}"
        if only and only not in name:
            continue
        sets[name] = (seed, make_objects(n_syn, size=size, seed=seed))
    return sets


def run(quick=False, only=None):
    """Mean mIoU, segments, true-K hits and time per set and variant.

    Returns
    -------
    rows : list of dict
        One per set: ``set``, ``n_images``, ``true_k`` (mean), and per
        variant ``{name: {"miou", "segments", "hits", "time_s"}}``.
    """
    from sklearn_falcon import ImageSegmenter
    from sklearn_falcon.metrics import miou

    warm = make_dataset(1, 64, random_state=99)[0][0]
    ImageSegmenter(n_segments="auto").segment(warm)  # Numba compilation
    rows = []
    for name, (seed, data) in image_sets(quick, only).items():
        res = {v: {"pred": [], "time": []} for v in VARIANTS}
        ks = []
        for img, gt in data:
            k = int(gt.max()) + 1
            ks.append(k)
            for v, extra in VARIANTS.items():
                params = ({"n_segments": k} if extra is None
                          else {"n_segments": "auto", **extra})
                seg = ImageSegmenter(random_state=seed, **params)
                t0 = time.perf_counter()
                res[v]["pred"].append(seg.segment(img))
                res[v]["time"].append(time.perf_counter() - t0)
        gts = [gt for _, gt in data]
        row = {"set": name, "n_images": len(data), "true_k": float(np.mean(ks))}
        for v in VARIANTS:
            segs = [len(np.unique(p)) for p in res[v]["pred"]]
            row[v] = {"miou": miou(res[v]["pred"], gts),
                      "segments": float(np.mean(segs)),
                      "hits": float(np.mean([s == k for s, k in zip(segs, ks)])),
                      "time_s": float(np.mean(res[v]["time"]))}
        rows.append(row)
        print(name, "  ".join(f"{v}: {row[v]['miou']:.4f}" for v in VARIANTS), flush=True)
    return rows


def _out_flag(path):
    """`` --out PATH`` for a file other than the default, relative to the
    repository when inside it (so that the recorded command writes it)."""
    path = Path(path).resolve()
    if path.name in ("auto_k.md", "auto_k_quick.md") and path.parent == RESULTS:
        return ""
    try:
        path = path.relative_to(ROOT)
    except ValueError:
        pass
    return f" --out {path}"


def write(rows, quick=False, out=None, only=None):
    """Write the markdown table (``results/auto_k[_quick].md``)."""
    path = Path(out) if out else RESULTS / f"auto_k{'_quick' if quick else ''}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(VARIANTS)
    lines = [
        "# n_segments='auto' against the true K" + (" (quick)" if quick else ""),
        "",
        "`ImageSegmenter` with its defaults end to end (offline `ColorTextureFeatures`, "
        "Falcon, prototype upsampling, PAMR); `n_segments` = the true K, or 'auto' "
        "(K in [2, 10]) with `auto_grid_threshold=None` (feature conductance <= 0.45 "
        "only, the earlier rule) or with its default 0.25 (the grid test added). "
        "mIoU: mean over images of the per-image Hungarian mIoU. 'hits': images where "
        "auto finds the true K. Time: mean seconds per image of the whole `segment` "
        "call (auto runs Falcon for K = 10, 9, ... until a K passes). The thresholds "
        "were chosen on 'synthetic 160 px, seed 0'; every other set is held out.",
        "",
        f"Machine: {platform.machine()}, {platform.python_version()}, {os.cpu_count()} "
        "CPUs (shared; read ratios, not absolutes). Command: "
        f"`python -m benchmarks.bench_auto{' --quick' if quick else ''}"
        + (f" --only '{only}'" if only else "") + _out_flag(path) + "`",
        "",
        "| set | images | true K (mean) | " + " | ".join(f"mIoU, {n}" for n in names)
        + " | gap of the default | segments (conductance only / default) "
        "| hits (conductance only / default) | s / image (true K / conductance only "
        "/ default) |",
        "|---|---|---|" + "---|" * len(names) + "---|---|---|---|",
    ]
    for r in rows:
        a, b = r[names[1]], r[names[2]]
        lines.append(
            f"| {r['set']} | {r['n_images']} | {r['true_k']:.1f} | "
            + " | ".join(f"{r[n]['miou']:.4f}" for n in names)
            + f" | {round(r[names[0]]['miou'] - b['miou'], 4) + 0.0:.4f} | {a['segments']:.1f} / "
            f"{b['segments']:.1f} | {a['hits']:.0%} / {b['hits']:.0%} | "
            + " / ".join(f"{r[n]['time_s']:.3f}" for n in names) + " |")
    lines.append("")
    path.write_text("\n".join(lines))
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 images per set (smoke)")
    ap.add_argument("--out", default=None, help="output markdown path")
    ap.add_argument("--only", default=None,
                    help="run the sets whose name contains this (e.g. 'mosaics')")
    args = ap.parse_args(argv)
    rows = run(quick=args.quick, only=args.only)
    if not rows:  # never an empty table over the recorded one
        ap.error(f"--only {args.only!r} matches no image set")
    print(write(rows, quick=args.quick, out=args.out, only=args.only))


if __name__ == "__main__":
    main()
