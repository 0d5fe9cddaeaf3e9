"""Mosaic benchmark: segmenting mosaics of real photographs and textures.

Data: :func:`benchmarks.mosaics.make_mosaics` (3 to 6 Voronoi regions per
256 x 256 image, each region a crop of a different scikit-image photograph or
texture). Every method gets the true number of regions K, except
``cut_normalized``, which picks its own through ``thresh``.

Methods (rows of the table):

- ``ImageSegmenter(n_segments=K)``, the offline default, end to end (image
  -> features -> Falcon -> prototype upsampling -> PAMR);
- for every registered token feature extractor (:data:`FEATURES`), the same
  pipeline on its tokens with each registered token clusterer
  (:data:`CLUSTERERS`: Falcon, and SpectralClustering with scikit-learn's
  defaults on the *same* affinity);
- superpixel tokens: SLIC superpixels described by the offline default's
  word histograms, a cosine-power affinity kept on adjacent superpixels
  (region adjacency), Falcon (the alternative the default was measured
  against);
- scikit-image's SLIC superpixels + mean-colour RAG + ``cut_normalized``
  (its gallery example's settings) at a few thresholds.

Scores are mIoU with per-image Hungarian matching
(:func:`sklearn_falcon.metrics.miou`); times are wall-clock seconds per image
of the whole method, image in, label map out (methods are interleaved image
by image, so the shared machine's noise falls on all of them alike).

Extending: another feature extractor is one call,

>>> from benchmarks import bench_mosaics as B
>>> B.register_features("my-vit", lambda: my_extractor)  # doctest: +SKIP

where ``my_extractor.extract(rgb uint8 HxWx3) -> (gh, gw, C)`` float tokens
and an optional ``default_power`` attribute (the affinity exponent; 10 when
absent). It then gets a Falcon row and a SpectralClustering row; run it with
``--features color,my-vit``. A clusterer is added to :data:`CLUSTERERS` the
same way (``fn(W, k, seed) -> token labels``).

Run ``python -m benchmarks.bench_mosaics [--quick]``; the table goes to
``benchmarks/results/mosaics.md``.
"""

import argparse
import os
import platform
import shlex
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_segmentation import _skimage_ncut  # noqa: E402
from benchmarks.mosaics import make_mosaics  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------- registries
def _color_features():
    from sklearn_falcon.image import make_extractor

    return make_extractor("color")


def _color_position_features():
    from sklearn_falcon.image import make_extractor

    return make_extractor("color-position")


#: name -> factory returning an extractor (``extract(rgb) -> (gh, gw, C)``);
#: ``color`` is the offline default, ``color-position`` the earlier one.
FEATURES = {"color": _color_features, "color-position": _color_position_features}


def register_features(name, factory):
    """Add a token feature extractor to the benchmark.

    Parameters
    ----------
    name : str
        Name used in the table and in ``--features``.
    factory : callable
        ``factory()`` returns an object with ``extract(rgb) -> (gh, gw, C)``
        and optionally ``default_power`` (the affinity exponent; 10 if
        absent). It is called once per run, before any timing.
    """
    FEATURES[name] = factory


def _falcon_tokens(W, k, seed):
    from sklearn_falcon import FalconNCut

    return FalconNCut(n_clusters=k, affinity="precomputed",
                      random_state=seed).fit(W).labels_


def _spectral_tokens(W, k, seed):
    from sklearn.cluster import SpectralClustering

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SpectralClustering(n_clusters=k, affinity="precomputed",
                                  random_state=seed).fit(W).labels_


#: name -> ``fn(W, k, seed) -> token labels`` on a dense token affinity.
CLUSTERERS = {"Falcon": _falcon_tokens,
              "SpectralClustering (sklearn defaults)": _spectral_tokens}

CUT_THRESHOLDS = (0.001, 0.01, 0.05)
QUICK_N_IMAGES, QUICK_THRESHOLDS = 6, (0.01,)  # what --quick runs by default
DEFAULT = "ImageSegmenter(n_segments=K), offline default"


# ------------------------------------------------------------------ methods
def _default_method(seed):
    from sklearn_falcon import ImageSegmenter

    seg = ImageSegmenter(random_state=seed)

    def run(img, k):
        return seg.set_params(n_segments=k).segment(img)
    return run


def _token_method(extractor, cluster, seed):
    from sklearn_falcon.image import cosine_power_affinity, pamr, prototype_upsample

    power = float(getattr(extractor, "default_power", 10.0))

    def run(img, k):
        F = np.asarray(extractor.extract(img), dtype=np.float32)
        W = cosine_power_affinity(F, power)
        tok = np.asarray(cluster(W, k, seed)).reshape(F.shape[:2])
        lab = prototype_upsample(F, tok, img.shape[:2])
        return pamr(img, lab)
    return run


def _skimage_method(thresh, seed):
    def run(img, k):
        # scikit-image's gallery settings: 400 SLIC superpixels, compactness 30
        return _skimage_ncut(img, 400, thresh, seed, compactness=30)[0]
    return run


def _superpixel_method(seed, n_superpixels=400, power=6.0):
    """Superpixel tokens with a region-adjacency affinity: SLIC superpixels
    described by the histograms of the offline default's colour and texture
    words over each superpixel (Hellinger embedding) plus the weak position
    term; ``W`` is their cosine-power affinity kept on adjacent superpixels
    only; Falcon; each pixel takes its superpixel's label, then PAMR."""
    import scipy.sparse as sp
    from skimage import segmentation

    from sklearn_falcon import FalconNCut
    from sklearn_falcon.image import ColorTextureFeatures, pamr
    from sklearn_falcon.image._affinity import cosine_power_affinity
    from sklearn_falcon.image._position import position_features

    fe = ColorTextureFeatures()

    def run(img, k):
        spx = segmentation.slic(img, n_segments=n_superpixels, compactness=10,
                                start_label=0)
        n = int(spx.max()) + 1
        feats = []
        for words, nw in zip(fe.word_maps(img), (fe.n_texture_words, fe.n_color_words)):
            h = np.bincount(spx.ravel() * nw + words.ravel(),
                            minlength=n * nw).reshape(n, nw).astype(np.float64)
            feats.append(np.sqrt(h / np.maximum(h.sum(1, keepdims=True), 1)))
        z = np.concatenate(feats, 1) / np.sqrt(2.0)
        yy, xx = np.mgrid[0:img.shape[0], 0:img.shape[1]]
        cnt = np.bincount(spx.ravel(), minlength=n)
        pos = np.stack([np.bincount(spx.ravel(), weights=a.ravel(), minlength=n) / cnt
                        for a in (yy, xx)], 1) / max(img.shape[:2])
        pz = position_features(pos, fe._basis, fe.position_weight, fe.position_scale)
        z = np.concatenate([z, pz], 1)
        W = cosine_power_affinity(z, power)
        a = np.concatenate([spx[:, 1:].ravel(), spx[1:, :].ravel()])
        b = np.concatenate([spx[:, :-1].ravel(), spx[:-1, :].ravel()])
        keep = a != b
        A = sp.csr_matrix((np.ones(keep.sum()), (a[keep], b[keep])), shape=(n, n))
        A = ((A + A.T) > 0).astype(np.float64)
        Wr = sp.csr_matrix(A.multiply(W)) + sp.identity(n)  # self-affinity 1
        tok = FalconNCut(k, affinity="precomputed", random_state=seed).fit(Wr).labels_
        return pamr(img, tok[spx])
    return run


def build_methods(features=("color",), seed=0, thresholds=CUT_THRESHOLDS):
    """``{row name: fn(image, k) -> label map}`` for the requested features."""
    methods = {DEFAULT: _default_method(seed)}
    for fname in features:
        if fname not in FEATURES:
            raise ValueError(f"unknown feature set {fname!r}; registered: {sorted(FEATURES)}")
        ext = FEATURES[fname]()
        for cname, cluster in CLUSTERERS.items():
            methods[f"{cname} on '{fname}' tokens"] = _token_method(ext, cluster, seed)
    methods["Falcon on SLIC superpixel tokens, region-adjacency affinity"] = \
        _superpixel_method(seed)
    for th in thresholds:
        methods[f"skimage SLIC + RAG + cut_normalized (thresh={th})"] = _skimage_method(th, seed)
    return methods


def run(n_images=24, size=256, seed=0, features=("color",), thresholds=CUT_THRESHOLDS,
        out=None, quick=False, command=None):
    """Evaluate every method on the mosaics and write the markdown table
    (it records ``command``, by default the ``bench_mosaics`` command of
    these arguments: a caller that registered features names its own).

    Returns
    -------
    rows : list of dict
        ``method``, ``miou``, ``time_s`` (mean per image), ``n_segments``
        (mean number of predicted segments), ``n_images``.
    """
    from sklearn_falcon.metrics import miou

    data = make_mosaics(n_images, size=size, seed=seed)
    methods = build_methods(features, seed, thresholds)
    # warm-up: Numba compilation and lazy imports are not part of the timings
    img0, gt0 = make_mosaics(1, size=size, seed=seed + 10_000)[0]
    for fn in methods.values():
        try:
            fn(img0, int(gt0.max()) + 1)
        except Exception:  # noqa: BLE001 - counted below, image by image
            pass
    preds = {name: [] for name in methods}
    times = {name: [] for name in methods}
    failures = dict.fromkeys(methods, 0)
    for img, gt in data:
        k = int(gt.max()) + 1
        for name, fn in methods.items():
            t0 = time.perf_counter()
            try:
                lab = fn(img, k)
            except Exception:  # noqa: BLE001 - a failure is counted and shown,
                # as in bench_segmentation: one segment, left out of the time
                lab, failures[name] = np.zeros(gt.shape, np.int64), failures[name] + 1
                times[name].append(np.nan)
            else:
                times[name].append(time.perf_counter() - t0)
            preds[name].append(np.asarray(lab))
    gts = [gt for _, gt in data]
    rows = [dict(method=name, miou=float(miou(preds[name], gts)),
                 per_image=[float(miou(p, g)) for p, g in zip(preds[name], gts)],
                 time_s=(float(np.nanmean(times[name]))
                         if np.isfinite(times[name]).any() else np.nan),
                 n_segments=float(np.mean([len(np.unique(p)) for p in preds[name]])),
                 failures=failures[name], n_images=len(data))
            for name in methods]
    true_k = float(np.mean([g.max() + 1 for g in gts]))
    path = _write(rows, n_images=n_images, size=size, seed=seed, features=features,
                  thresholds=thresholds, true_k=true_k, out=out, quick=quick,
                  command=command)
    return rows, path


def _write(rows, *, n_images, size, seed, features, thresholds, true_k, out, quick,
           command=None):
    if out is None:
        out = RESULTS / ("mosaics_quick.md" if quick else "mosaics.md")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    default = next(r for r in rows if r["method"] == DEFAULT)
    sk = [r for r in rows if r["method"].startswith("skimage")]
    best_sk = max(sk, key=lambda r: r["miou"]) if sk else None
    # the command that reproduces the table: every value that differs from
    # the default of the mode (--quick: 6 images, threshold 0.01)
    cmd = "python -m benchmarks.bench_mosaics" + (" --quick" if quick else "")
    if n_images != (QUICK_N_IMAGES if quick else 24):
        cmd += f" --n-images {n_images}"
    if size != 256:
        cmd += f" --size {size}"
    if seed != 0:
        cmd += f" --seed {seed}"
    if tuple(features) != ("color",):
        cmd += f" --features {shlex.quote(','.join(features))}"
    if tuple(thresholds) != (QUICK_THRESHOLDS if quick else CUT_THRESHOLDS):
        cmd += f" --thresholds {','.join(map(str, thresholds))}"
    cmd = command or cmd
    lines = [
        "# Mosaics of real photographs and textures" + (" (quick)" if quick else ""),
        "",
        f"{n_images} mosaics of {size}x{size} pixels (`benchmarks/mosaics.py`, seed {seed}: "
        f"3-6 Voronoi regions, mean {true_k:.2f}, each a crop of a different scikit-image "
        "photograph or texture). K = true number of regions for every method but "
        "`cut_normalized`, which picks its own through `thresh` (scikit-image's gallery "
        "settings: 400 SLIC superpixels, compactness 30, mean-colour RAG). "
        "Token rows: features -> `cosine_power_affinity` (the extractor's "
        "`default_power`) -> clusterer -> `prototype_upsample` -> PAMR, the ImageSegmenter "
        "pipeline. mIoU: per-image Hungarian matching (`sklearn_falcon.metrics.miou`). "
        "Time: mean wall-clock seconds per image of the whole method, image in, label map "
        "out; methods interleaved image by image after a warm-up image.",
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (shared with other jobs; read ratios, not absolutes). "
        f"Command: `{cmd}`",
        "",
        "| method | mIoU | segments | time / image (s) | time / default's | failures |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['method']} | {r['miou']:.4f} | {r['n_segments']:.2f} | "
                     f"{r['time_s']:.4f} | {r['time_s'] / default['time_s']:.2f} | "
                     f"{r.get('failures', 0)} |")
    lines.append("")
    lines.append("'failures': images where the method raised; they count as one "
                 "segment (mIoU) and are left out of its mean time.")
    if best_sk is not None:
        lines.append(
            f"Offline default against the best `cut_normalized` row ({best_sk['method']}): "
            f"mIoU {default['miou']:.4f} vs {best_sk['miou']:.4f} "
            f"({default['miou'] - best_sk['miou']:+.4f}), "
            f"{best_sk['time_s'] / default['time_s']:.1f}x faster.")
    for r in rows:
        if r["method"].startswith("SpectralClustering"):
            lines.append(f"Against {r['method']}: mIoU {default['miou'] - r['miou']:+.4f}, "
                         f"{r['time_s'] / default['time_s']:.1f}x faster.")
    lines.append("")
    out.write_text("\n".join(lines))
    return out


def main(argv=None):
    """Command-line entry point: ``python -m benchmarks.bench_mosaics``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="6 images and one threshold unless given")
    parser.add_argument("--n-images", type=int, default=None,
                        help="number of mosaics (default 24; 6 with --quick)")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--features", default="color",
                        help=f"comma-separated feature sets ({', '.join(sorted(FEATURES))})")
    parser.add_argument("--thresholds", default=None,
                        help="comma-separated cut_normalized thresholds (default "
                        f"{','.join(map(str, CUT_THRESHOLDS))}; the slowest rows)")
    parser.add_argument("--out", default=None, help="markdown file to write")
    args = parser.parse_args(argv)
    features = tuple(f for f in args.features.split(",") if f)
    kwargs = dict(size=args.size, seed=args.seed, features=features, out=args.out)
    if args.quick:
        kwargs.update(n_images=args.n_images or QUICK_N_IMAGES,
                      thresholds=QUICK_THRESHOLDS, quick=True)
    else:
        kwargs.update(n_images=args.n_images or 24)
    if args.thresholds is not None:
        kwargs["thresholds"] = tuple(float(t) for t in args.thresholds.split(",") if t)
    rows, path = run(**kwargs)
    for r in rows:
        print(f"{r['method']:<62} mIoU {r['miou']:.4f}  time {r['time_s']:.4f}s")
    print(f"written: {path}")


if __name__ == "__main__":
    main()
