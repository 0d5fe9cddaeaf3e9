"""The position term of the offline features: which weight, on which images.

    python -m benchmarks.bench_position            # ~3 min on 2 cores
    python -m benchmarks.bench_position --quick    # smoke

``ImageSegmenter(n_segments=K, position_weight=w, random_state=seed)``, the
offline default with the weight of its position term changed, on three
kinds of image, the true number of regions given:

- the **mosaics** of real photographs and textures
  (:mod:`benchmarks.bench_mosaics`), 3 to 6 Voronoi regions of similar
  size, seeds 0 (the benchmark's set), 1 and 2;
- the **synthetic** piecewise-textured images of
  :mod:`benchmarks.bench_segmentation` (Voronoi regions too);
- **small objects on a large background**: the frames of the moving-shapes
  video (:func:`benchmarks.videos.make_moving_shapes`: a disc and a square
  over grass), each frame segmented on its own, three videos;
- **objects on a background** (:mod:`benchmarks.objects`): one to three
  discs, ellipses or rectangles of 2 % to 25 % of the image each, cut from
  other sources, on a photograph or texture, seeds 0 and 1 (30 images each).

Reported: mean mIoU (per-image Hungarian matching) per set and weight.  The
position term favours segments of similar size and compact shape, which the
Voronoi sets reward and small objects pay for; the table is the record of
that trade-off, from which the default weight was chosen.
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
from benchmarks.videos import make_moving_shapes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
WEIGHTS = (0.0, 0.15, 0.3, 0.45, 0.6, 0.8, 1.0)
MOSAIC_SEEDS = (0, 1, 2)


def image_sets(quick=False, mosaic_seeds=MOSAIC_SEEDS, only=None):
    """``{name: (seed, [(image, truth), ...])}``; ``only``: keep the sets whose
    name contains it."""
    n_mos, n_syn, n_frames, n_obj = (3, 3, 2, 3) if quick else (None, 16, 6, 30)
    sets = {}
    for seed in mosaic_seeds:
        n = 16 if seed == 1 else 24  # seed 1: the 16 held-out mosaics of bench_dinov2
        sets[f"mosaics, seed {seed}"] = (seed, make_mosaics(n_mos or n, size=256,
                                                            seed=seed))
    sets["synthetic (bench_segmentation)"] = (0, [
        (img, mask) for img, mask, _ in make_dataset(n_syn, 160, random_state=0)])
    frames = []
    for seed in (0, 1, 2):
        f, t = make_moving_shapes(n_frames, seed=seed)
        frames += list(zip(f, t))
    sets["small objects (video frames)"] = (0, frames)
    for seed in (0, 1):
        sets[f"objects on a background, seed {seed}"] = (
            seed, make_objects(n_obj, size=256, seed=seed))
    return {k: v for k, v in sets.items() if only is None or only in k}


def mean_miou(segmenter, data):
    """Mean mIoU of an ImageSegmenter over ``(image, truth)`` pairs, each
    segmented with the true number of regions."""
    from sklearn_falcon.metrics import miou

    return float(np.mean([
        miou(segmenter.set_params(n_segments=int(gt.max()) + 1).segment(img), gt)
        for img, gt in data]))


def run(weights=WEIGHTS, quick=False, mosaic_seeds=MOSAIC_SEEDS, only=None):
    """``{(set name, weight): mean mIoU}``."""
    from sklearn_falcon import ImageSegmenter

    out = {}
    for name, (seed, data) in image_sets(quick, mosaic_seeds, only).items():
        for w in weights:
            out[(name, w)] = mean_miou(
                ImageSegmenter(position_weight=w, random_state=seed), data)
            print(f"{name:32s} w={w:<5g} {out[(name, w)]:.4f}", flush=True)
    return out


def write(scores, weights, out, quick, seconds, command=None):
    from sklearn_falcon.image import ColorTextureFeatures

    default = ColorTextureFeatures().position_weight
    names = list(dict.fromkeys(n for n, _ in scores))
    cols = [f"{w:g}" + (" (default)" if w == default else "") for w in weights]
    lines = [
        "# The position term of the offline features" + (" (quick)" if quick else ""),
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs. Command: `python -m benchmarks.bench_position"
        f"{command if command is not None else (' --quick' if quick else '')}` "
        f"({seconds:.0f} s).",
        "",
        "`ImageSegmenter(n_segments=K, position_weight=w)` (the offline default "
        "with another weight of its position term; PAMR on), K the true number of "
        "regions; mean mIoU, per-image Hungarian matching. Small objects: the "
        "frames of three moving-shapes videos, each segmented on its own.",
        "",
        "| images | " + " | ".join(f"w = {c}" for c in cols) + " |",
        "|---|" + "---:|" * len(weights),
    ]
    for n in names:
        best = max(scores[(n, w)] for w in weights)
        cells = [(f"**{scores[(n, w)]:.3f}**" if scores[(n, w)] == best
                  else f"{scores[(n, w)]:.3f}") for w in weights]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few images per set")
    ap.add_argument("--out", default=None, help="markdown file to write")
    ap.add_argument("--weights", default=None,
                    help="comma-separated weights (default: the table's seven)")
    ap.add_argument("--mosaic-seeds", default=None,
                    help="comma-separated seeds of the mosaic sets (default 0,1,2; "
                         "24 mosaics each, 16 for seed 1)")
    ap.add_argument("--only", default=None,
                    help="run only the sets whose name contains this (e.g. mosaics)")
    args = ap.parse_args(argv if argv is not None else sys.argv[1:])
    weights = (0.0, 0.3, 0.6) if args.quick else WEIGHTS
    if args.weights:
        weights = tuple(float(w) for w in args.weights.split(","))
    seeds = MOSAIC_SEEDS if args.mosaic_seeds is None else tuple(
        int(s) for s in args.mosaic_seeds.split(","))
    t0 = time.perf_counter()
    scores = run(weights, quick=args.quick, mosaic_seeds=seeds, only=args.only)
    if not scores:  # never an empty table over the recorded one
        ap.error(f"--only {args.only!r} matches no image set")
    out = Path(args.out) if args.out else RESULTS / (
        "position_quick.md" if args.quick else "position.md")
    command = "".join(f" {a}" for a in (argv if argv is not None else sys.argv[1:])
                      if not a.startswith("--out") and a != str(args.out))
    write(scores, weights, out, args.quick, time.perf_counter() - t0, command)
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
