"""Synthetic segmentation benchmark: Falcon vs spectral clustering vs skimage.

Piecewise-textured images with known masks are generated here: a random
Voronoi partition, each region with its own colour and texture (flat,
stripes of random orientation and frequency, checkerboard, blobs or
high-frequency noise; some regions share a mean colour and differ only in
texture) plus Gaussian pixel noise.

On the SAME offline patch features (the ImageSegmenter default,
``model="color"``) and the SAME cosine + power affinity, the benchmark
compares

- ``FalconNCut(affinity="precomputed")`` (the ImageSegmenter pipeline);
- ``sklearn.cluster.SpectralClustering(affinity="precomputed")`` with the
  eigen solvers and label-assignment strategies listed in ``SC_CONFIGS``;
- ``skimage.graph.cut_normalized`` on a SLIC region adjacency graph with
  mean-colour similarity (its standard usage; it picks its own number of
  segments through ``thresh``).

Token labels are brought to pixels by the same prototype reassignment (and,
for the "+PAMR" rows, the same PAMR refinement). Scores are mIoU with
per-image Hungarian matching (:func:`sklearn_falcon.metrics.miou`); times
are wall-clock seconds per image of the clustering step (features and
affinity are shared and timed separately).

Run ``python -m benchmarks.bench_segmentation [--quick]``; the table is
written to ``benchmarks/results/segmentation.md``.
"""

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "segmentation.md"


# --------------------------------------------------------------------- data
def voronoi_regions(size, n_regions, rng, warp):
    """A ``size x size`` map of ``n_regions`` well-spread Voronoi cells with
    curved boundaries (distances warped by sines of amplitude ``warp`` px).

    The seeds are drawn by rejection sampling with a minimum distance that
    shrinks until ``n_regions`` fit; ``rng`` (a NumPy Generator) is advanced.
    """
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    seeds = []
    min_d = size / (1.6 * np.sqrt(n_regions))
    while len(seeds) < n_regions:
        p = rng.uniform(0, size, 2)
        if all(np.hypot(*(p - q)) >= min_d for q in seeds):
            seeds.append(p)
        else:
            min_d *= 0.995
    warp_y = warp * np.sin(xx / size * 2 * np.pi * rng.uniform(0.5, 2)
                           + rng.uniform(0, 6))
    warp_x = warp * np.sin(yy / size * 2 * np.pi * rng.uniform(0.5, 2)
                           + rng.uniform(0, 6))
    d = np.stack([np.hypot(yy + warp_y - s[0], xx + warp_x - s[1]) for s in seeds])
    return np.argmin(d, axis=0)


def make_textured_image(size=160, n_regions=5, *, noise=10.0, random_state=None):
    """One piecewise-textured RGB image and its ground-truth region map.

    Parameters
    ----------
    size : int
        Image side in pixels.
    n_regions : int
        Number of Voronoi regions.
    noise : float
        Standard deviation of the additive Gaussian pixel noise (0..255 scale).
    random_state : int or None
        Seed.

    Returns
    -------
    image : ndarray of shape (size, size, 3), uint8
    mask : ndarray of shape (size, size), int64
    """
    rng = np.random.default_rng(random_state)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    mask = voronoi_regions(size, n_regions, rng, warp=6.0)
    img = np.zeros((size, size, 3))
    colours = []
    for r in range(n_regions):
        if colours and rng.random() < 0.3:  # same colour as an earlier region
            base = colours[rng.integers(len(colours))] + rng.normal(0, 6, 3)
        else:
            base = rng.uniform(40, 215, 3)
        colours.append(base)
        kind = rng.integers(5)
        amp = rng.uniform(25, 50)
        if kind == 0:  # flat
            tex = np.zeros((size, size))
        elif kind == 1:  # stripes
            th = rng.uniform(0, np.pi)
            f = rng.uniform(0.15, 0.5)
            tex = amp * np.sign(np.sin(f * (np.cos(th) * xx + np.sin(th) * yy)))
        elif kind == 2:  # checkerboard
            s = rng.integers(3, 7)
            tex = amp * (((yy // s + xx // s) % 2) * 2 - 1)
        elif kind == 3:  # smooth blobs
            f1, f2 = rng.uniform(0.08, 0.2, 2)
            tex = amp * np.sin(f1 * xx + rng.uniform(0, 6)) * np.sin(f2 * yy + rng.uniform(0, 6))
        else:  # high-frequency noise
            tex = rng.normal(0, amp * 0.8, (size, size))
        tint = rng.uniform(0.6, 1.0, 3)
        sel = mask == r
        img[sel] = base + tex[sel, None] * tint
    img += rng.normal(0, noise, img.shape)
    return np.clip(np.round(img), 0, 255).astype(np.uint8), mask.astype(np.int64)


def make_dataset(n_images, size, *, random_state=0):
    """``n_images`` synthetic images with 3 to 6 regions each."""
    rng = np.random.default_rng(random_state)
    out = []
    for i in range(n_images):
        k = int(rng.integers(3, 7))
        img, mask = make_textured_image(size, k, random_state=int(rng.integers(2**31)))
        out.append((img, mask, k))
    return out


# ------------------------------------------------------------------ methods
SC_CONFIGS = [
    (solver, assign)
    for solver in ("arpack", "lobpcg", "amg")
    for assign in ("kmeans", "discretize", "cluster_qr")
]
SC_CONFIGS_QUICK = [("lobpcg", "cluster_qr"), ("amg", "cluster_qr"), ("arpack", "kmeans")]
CUT_THRESHOLDS = (0.001, 0.01, 0.05, 0.2)


def _falcon(W, k, seed, init="multilevel"):
    from sklearn_falcon import FalconNCut

    est = FalconNCut(n_clusters=k, affinity="precomputed", init=init, random_state=seed)
    return est.fit(W).labels_


def _falcon_auto(W, seed, grid_shape):
    from sklearn_falcon import ImageSegmenter

    return ImageSegmenter(n_segments="auto", random_state=seed).cluster_tokens(
        W, grid_shape=grid_shape)


def _spectral(W, k, seed, solver, assign):
    from sklearn.cluster import SpectralClustering

    sc = SpectralClustering(
        n_clusters=k, affinity="precomputed", eigen_solver=solver,
        assign_labels=assign, random_state=seed,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sc.fit(W).labels_


def _sc_configs(quick):
    """The SpectralClustering configurations of a run (``amg`` only when
    pyamg is installed, as in :func:`benchmarks.peers.get_peers`)."""
    from importlib.util import find_spec

    configs = SC_CONFIGS_QUICK if quick else SC_CONFIGS
    if find_spec("pyamg") is None:
        configs = [c for c in configs if c[0] != "amg"]
    return configs


def _skimage_ncut(img, n_superpixels, thresh, seed, compactness=10):
    from skimage import graph, segmentation

    sp = segmentation.slic(img, n_segments=n_superpixels, compactness=compactness,
                           start_label=0)
    rag = graph.rag_mean_color(img, sp, mode="similarity")
    for attempt in range(3):  # ARPACK inside cut_normalized sometimes fails to converge
        try:
            rng = np.random.default_rng(seed + attempt)
            return graph.cut_normalized(sp, rag.copy(), thresh=thresh, rng=rng), 0
        except Exception:  # noqa: BLE001 - scipy's ArpackError and friends
            continue
    return np.zeros_like(sp), 1  # counted as a failure (one segment)


def _timed(fn, *args, repeat=1):
    """``(output, seconds)``: the fastest of ``repeat`` runs (each method is
    deterministic for a fixed seed, so every run returns the same output)."""
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return out, best


def run(quick=False, out_dir=None, seed=0, size=None, n_images=None, repeat=3):
    """Run the benchmark and write the markdown table.

    Parameters
    ----------
    quick : bool, default=False
        8 images of 128 px and 3 spectral configurations (< 2 min) instead
        of 16 images of 160 px and all 9 configurations.
    out_dir : path-like, default=None
        Where to write ``segmentation.md`` (``benchmarks/results/`` by
        default; the quick run writes ``segmentation_quick.md`` there).
    seed : int, default=0
        Seed of the data and of every method.
    size, n_images : int, default=None
        Override the image side and the number of images (the table then goes
        to ``segmentation_<size>px[_quick].md``).
    repeat : int, default=3
        Each Falcon and SpectralClustering fit is timed as the fastest of
        ``repeat`` runs on the same image (the machine is shared and noisy);
        skimage, 10-40x slower, is run once.

    Returns
    -------
    rows : list of dict
        One row per method: ``method``, ``miou``, ``miou_pamr``, ``ncut``,
        ``time_s`` (mean clustering time per image), ``n_images``.
    """
    from sklearn_falcon.image import (
        cosine_power_affinity, make_extractor, pamr, prototype_upsample,
    )
    from sklearn_falcon.metrics import miou, normalized_cut

    custom = size is not None or n_images is not None
    n_images = n_images or (8 if quick else 16)
    size = size or (128 if quick else 160)
    sc_configs = _sc_configs(quick)
    thresholds = (0.001, 0.05) if quick else CUT_THRESHOLDS
    data = make_dataset(n_images, size, random_state=seed)
    fe = make_extractor("color")  # the ImageSegmenter default
    power = fe.default_power

    falcon_inits = {"Falcon (FalconNCut)": "multilevel",
                    "Falcon (FalconNCut, init='spectral')": "spectral"}
    # warm-up (Numba compilation is not part of the timings)
    img0, _, k0 = data[0]
    F0 = fe.extract(img0)
    for init in falcon_inits.values():
        _falcon(cosine_power_affinity(F0, power), k0, seed, init)
    pamr(img0, np.zeros(img0.shape[:2], int) + (np.arange(img0.shape[1]) > 50), n_iter=1)

    auto_name = "Falcon, n_segments='auto' (K chosen per image, eigen-free)"
    methods = {name: [] for name in falcon_inits}
    methods[auto_name] = []
    for solver, assign in sc_configs:
        methods[f"SpectralClustering ({solver}, {assign})"] = []
    for th in thresholds:
        methods[f"skimage cut_normalized (SLIC RAG, thresh={th})"] = []
    gts = []
    feat_time = 0.0
    for idx, (img, mask, k) in enumerate(data):
        gts.append(mask)
        (F, W), t_feat = _timed(
            lambda im: (lambda f: (f, cosine_power_affinity(f, power)))(fe.extract(im)), img
        )
        feat_time += t_feat
        grid = F.shape[:2]

        def finish(name, tok, t, failed=0):
            lab = prototype_upsample(F, tok.reshape(grid), img.shape[:2])
            methods[name].append(dict(
                pred=lab, pred_pamr=pamr(img, lab), time=t, failed=failed,
                ncut=(normalized_cut(W, tok) if tok.size == W.shape[0] and not failed
                      else np.nan),
            ))

        for name, init in falcon_inits.items():
            tok, t = _timed(_falcon, W, k, seed, init, repeat=repeat)
            finish(name, tok, t)
        tok, t = _timed(_falcon_auto, W, seed, grid, repeat=repeat)
        finish(auto_name, tok, t)
        for solver, assign in sc_configs:
            try:
                tok, t = _timed(_spectral, W, k, seed, solver, assign, repeat=repeat)
                failed = 0
            except Exception:  # noqa: BLE001 - a failure is counted, as skimage's
                tok, t, failed = np.zeros(W.shape[0], dtype=np.int64), np.nan, 1
            finish(f"SpectralClustering ({solver}, {assign})", tok, t, failed)
        for th in thresholds:
            (lab, failed), t = _timed(_skimage_ncut, img, grid[0] * grid[1], th, seed)
            methods[f"skimage cut_normalized (SLIC RAG, thresh={th})"].append(dict(
                pred=lab, pred_pamr=pamr(img, lab), time=t, ncut=np.nan, failed=failed,
            ))
    rows = []
    for name, res in methods.items():
        times = np.array([r["time"] for r in res], dtype=np.float64)
        ncuts = np.array([r["ncut"] for r in res], dtype=np.float64)
        rows.append(dict(
            method=name,
            miou=miou([r["pred"] for r in res], gts),
            miou_pamr=miou([r["pred_pamr"] for r in res], gts),
            ncut=(None if "skimage" in name else float(np.nanmean(ncuts))
                  if np.isfinite(ncuts).any() else np.nan),
            time_s=(float(np.nanmean(times)) if np.isfinite(times).any()
                    else np.nan),
            n_segments=float(np.mean([len(np.unique(r["pred"])) for r in res])),
            failures=int(sum(r.get("failed", 0) for r in res)),
            n_images=len(res),
        ))
    _write(rows, quick=quick, out_dir=out_dir, n_images=n_images, size=size,
           n_tokens=F0.shape[0] * F0.shape[1], feat_time=feat_time / n_images,
           extractor=type(fe).__name__, power=power,
           true_k=float(np.mean([d[2] for d in data])), custom=custom, repeat=repeat,
           seed=seed)
    return rows


def _write(rows, *, quick, out_dir, n_images, size, n_tokens, feat_time, true_k,
           repeat, seed, extractor, power, custom=False):
    import platform

    out_dir = Path(out_dir) if out_dir is not None else RESULTS.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    default_dir = out_dir.resolve() == RESULTS.parent.resolve()
    out_flag = ""  # --out-dir in the recorded command, relative to the repository
    if not default_dir:
        where, root = out_dir.resolve(), RESULTS.parents[2]
        if where.is_relative_to(root):
            where = where.relative_to(root)
        out_flag = f" --out-dir {where}"
    if custom:
        name = f"segmentation_{size}px{'_quick' if quick else ''}.md"
    elif quick and default_dir:
        name = "segmentation_quick.md"
    else:
        name = "segmentation.md"
    path = out_dir / name
    best = max((r for r in rows if r["method"].startswith("Spectral")), key=lambda r: r["miou"])
    best_sk = max((r for r in rows if r["method"].startswith("skimage")), key=lambda r: r["miou"])
    fastest = min((r for r in rows if r["method"].startswith("Spectral")),
                  key=lambda r: r["time_s"] if np.isfinite(r["time_s"]) else np.inf)
    falcon = max((r for r in rows if r["method"].startswith("Falcon (")),
                 key=lambda r: r["miou"])
    default = next(r for r in rows if r["method"] == "Falcon (FalconNCut)")
    lines = [
        f"# Synthetic segmentation benchmark, {n_tokens} tokens"
        + (" (quick)" if quick else ""),
        "",
        f"{n_images} piecewise-textured {size}x{size} images (3-6 Voronoi regions, colour + "
        f"texture + noise; mean {true_k:.1f} regions), {n_tokens} patch tokens each "
        f"(the offline default `{extractor}`, 8 px cells), affinity "
        f"`cosine_power_affinity(power={power:g})` shared by Falcon and "
        "SpectralClustering. K = true number of regions (except the 'auto' row, which "
        "chooses K in [2, 10] itself). Token labels -> pixels by the same prototype "
        "reassignment; '+PAMR' adds the same PAMR refinement. mIoU: per-image Hungarian "
        "matching (`sklearn_falcon.metrics.miou`). Time: mean seconds per image of the "
        f"clustering step only, each fit the fastest of {repeat} runs for Falcon and "
        "SpectralClustering (one run for skimage: SLIC + RAG + cut); features + affinity take "
        f"{feat_time:.3f} s per image for the token methods. Numba is warmed up first.",
        "",
        f"Machine: {platform.machine()}, {platform.python_version()}, "
        f"{__import__('os').cpu_count()} CPUs (shared; read ratios, not absolutes). "
        "Command: `python -m benchmarks.bench_segmentation" + (" --quick" if quick else "")
        + (f" --size {size} --n-images {n_images}" if custom else "")
        + (f" --repeat {repeat}" if repeat != 3 else "")
        + (f" --seed {seed}" if seed != 0 else "") + out_flag + "`",
        "",
        "| method | mIoU | mIoU +PAMR | NCut | segments | time / image (s) | failures |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ncut = f"{r['ncut']:.4f}" if r["ncut"] is not None else "-"
        lines.append(
            f"| {r['method']} | {r['miou']:.4f} | {r['miou_pamr']:.4f} | {ncut} | "
            f"{r['n_segments']:.1f} | {r['time_s']:.4f} | {r['failures']} |"
        )
    lines += [
        "",
        f"Best SpectralClustering: {best['method']} (mIoU {best['miou']:.4f}, "
        f"{best['time_s']:.4f} s). Best Falcon: {falcon['method']} (mIoU "
        f"{falcon['miou']:.4f}, {falcon['time_s']:.4f} s, "
        f"{best['time_s'] / max(falcon['time_s'], 1e-12):.2f}x the speed of that "
        "SpectralClustering configuration).",
        f"Fastest SpectralClustering: {fastest['method']} (mIoU {fastest['miou']:.4f}, "
        f"{fastest['time_s']:.4f} s). Falcon with its defaults: mIoU {default['miou']:.4f}, "
        f"{default['time_s']:.4f} s, {fastest['time_s'] / max(default['time_s'], 1e-12):.2f}x "
        "the speed of the fastest SpectralClustering configuration.",
        f"Best skimage: {best_sk['method']} (mIoU {best_sk['miou']:.4f}, "
        f"{best_sk['time_s']:.4f} s). 'failures': images where `cut_normalized` raised "
        "(ARPACK did not converge in 3 tries) or where a SpectralClustering "
        "configuration raised; they count as one segment (and a failed "
        "SpectralClustering run is left out of its mean time).",
        "",
    ]
    from importlib.util import find_spec

    if find_spec("pyamg") is None:  # _sc_configs left them out
        lines[-1:-1] = ["SpectralClustering with `eigen_solver='amg'` not run: "
                        "pyamg is not installed (`pip install -e '.[bench]'`)."]
    path.write_text("\n".join(lines))
    return path


def main(argv=None):
    """Command-line entry point: ``python -m benchmarks.bench_segmentation``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small run (< 2 min)")
    parser.add_argument("--out-dir", default=None, help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=None, help="image side in pixels")
    parser.add_argument("--n-images", type=int, default=None, help="number of images")
    parser.add_argument("--repeat", type=int, default=3,
                        help="time each token fit as the fastest of this many runs")
    args = parser.parse_args(argv)
    rows = run(quick=args.quick, out_dir=args.out_dir, seed=args.seed, size=args.size,
               n_images=args.n_images, repeat=args.repeat)
    for r in rows:
        print(f"{r['method']:<55} mIoU {r['miou']:.4f}  +PAMR {r['miou_pamr']:.4f}  "
              f"time {r['time_s']:.4f}s")


if __name__ == "__main__":
    main()
