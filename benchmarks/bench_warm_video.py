"""Warm starts and video: FalconNCut(warm_start=True), ImageSegmenter.segment_video.

1. **Warm start.** For each graph, FalconNCut is fitted, the graph's weights
   are multiplied by independent ``U(0.9, 1.1)`` factors (symmetrically), and
   the perturbed graph is fitted again, cold (the default ``init``, a fresh
   estimator) and warm (the same estimator with ``warm_start=True``, starting
   from the first fit's labels).  Reported: the median time of each over
   ``--repeat`` interleaved runs, their ratio, the share of labels the warm
   fit keeps from the first fit, and both NCuts.
2. **Video.** :func:`benchmarks.videos.make_moving_shapes` (textured shapes
   moving over a textured background, region maps known) is segmented with
   ``segment_video`` and, as a reference, frame by frame with ``segment``.
   Reported: the share of the pixels that did not move between consecutive
   frames (same region, same colour) that keep their segment id, mIoU, and
   the time per frame.

Run ``python -m benchmarks.bench_warm_video [--quick]``; the tables go to
``benchmarks/results/warm_video.md``.
"""

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import graphs as G  # noqa: E402
from benchmarks.videos import make_moving_shapes, static_pixels  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def perturb(W, seed):
    """``W`` with each weight times an independent ``U(0.9, 1.1)``, symmetric."""
    rng = np.random.default_rng(seed)
    if sp.issparse(W):
        U = sp.triu(W, k=1).tocoo()
        U.data = U.data * rng.uniform(0.9, 1.1, U.nnz)
        D = sp.diags(W.diagonal() * rng.uniform(0.9, 1.1, W.shape[0]))
        return (U + U.T + D).tocsr()
    F = np.triu(rng.uniform(0.9, 1.1, W.shape))
    F = F + np.triu(F, 1).T
    return np.ascontiguousarray(W * F.astype(W.dtype))


def warm_graphs(quick):
    """``[(name, W, K)]`` of the warm-start rows."""
    n = 4000 if quick else 20000
    out = []
    W, _ = G.sbm_graph(n, 8, avg_degree=12, p_in_ratio=0.8, seed=0)
    out.append((f"SBM, {n:,} nodes, K=8", W.astype(np.float64), 8))
    W, _, _ = G.blobs_graph(n=n // 2, n_clusters=6, seed=0)
    out.append((f"kNN graph of blobs, {n // 2:,} nodes, K=6", W, 6))
    F, _ = G.token_features(n_tokens=1024 if quick else 4096, n_groups=8, seed=0)
    W = G.cosine_power_affinity(F, 10.0)
    out.append((f"dense token graph, {W.shape[0]:,} tokens, K=8", W, 8))
    return out


def run_warm(quick, repeat):
    from sklearn_falcon import FalconNCut

    rows = []
    for name, W, K in warm_graphs(quick):
        W2 = perturb(W, seed=1)
        FalconNCut(K, affinity="precomputed", random_state=0).fit(W2)  # warm-up
        cold_t, warm_t = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            cold = FalconNCut(K, affinity="precomputed", random_state=0).fit(W2)
            cold_t.append(time.perf_counter() - t0)
            est = FalconNCut(K, affinity="precomputed", warm_start=True,
                             random_state=0).fit(W)
            first = est.labels_.copy()
            t0 = time.perf_counter()
            est.fit(W2)
            warm_t.append(time.perf_counter() - t0)
        rows.append(dict(graph=name, cold=float(np.median(cold_t)),
                         warm=float(np.median(warm_t)),
                         kept=float(np.mean(est.labels_ == first)),
                         ncut_cold=cold.ncut_, ncut_warm=est.ncut_,
                         iters=est.n_iter_))
        print(rows[-1], flush=True)
    return rows


def run_video(quick, seed):
    from sklearn_falcon import ImageSegmenter
    from sklearn_falcon.metrics import miou

    n_frames, size = (5, 128) if quick else (12, 256)
    frames, truths = make_moving_shapes(n_frames, size=size, seed=seed)
    seg = ImageSegmenter(n_segments=3, random_state=0)
    seg.segment(frames[0])  # warm-up
    rows = []
    for name, fn in (("segment_video (warm start + id matching)",
                      lambda: list(seg.segment_video(frames))),
                     ("segment, frame by frame (reference)",
                      lambda: [seg.segment(f) for f in frames])):
        t0 = time.perf_counter()
        maps = fn()
        dt = (time.perf_counter() - t0) / n_frames
        kept = [np.mean((maps[t] == maps[t - 1])[static_pixels(frames, truths, t)])
                for t in range(1, n_frames)]
        rows.append(dict(method=name, kept=float(np.mean(kept)),
                         kept_min=float(np.min(kept)), miou=float(miou(maps, truths)),
                         time=dt))
        print(rows[-1], flush=True)
    return rows, (n_frames, size)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small graphs and video")
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed runs of each warm-start row (median)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the video")
    ap.add_argument("--out", default=None, help="markdown file to write")
    args = ap.parse_args(argv)
    warm = run_warm(args.quick, args.repeat)
    video, (n_frames, size) = run_video(args.quick, args.seed)
    cmd = ("python -m benchmarks.bench_warm_video" + (" --quick" if args.quick else "")
           + (f" --repeat {args.repeat}" if args.repeat != 3 else "")
           + (f" --seed {args.seed}" if args.seed != 0 else "")
           + (f" --out {args.out}" if args.out else ""))
    lines = [
        "# Warm starts and video" + (" (quick)" if args.quick else ""),
        "",
        f"Machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs (shared with other jobs; read ratios, not absolutes). "
        f"Command: `{cmd}`",
        "",
        "## Refitting a perturbed graph (weights x U(0.9, 1.1))",
        "",
        f"Cold: a fresh `FalconNCut` (default `init`); warm: `warm_start=True` from "
        f"the fit of the unperturbed graph. Median of {args.repeat} interleaved runs.",
        "",
        "| graph | cold fit (s) | warm fit (s) | warm / cold | labels kept | NCut cold "
        "| NCut warm | warm iterations |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in warm:
        lines.append(f"| {r['graph']} | {r['cold']:.4f} | {r['warm']:.4f} | "
                     f"{r['warm'] / r['cold']:.3f} | {r['kept']:.4f} | "
                     f"{r['ncut_cold']:.4f} | {r['ncut_warm']:.4f} | {r['iters']} |")
    lines += [
        "",
        f"## Video: {n_frames} frames of {size}x{size}, moving textured shapes",
        "",
        "`benchmarks/videos.py` (seed "
        f"{args.seed}); `ImageSegmenter(n_segments=3)`. *Static pixels kept*: among "
        "the pixels that did not move between two consecutive frames (same region, "
        "same colour), the share whose segment id is the same in both output maps "
        "(mean and worst pair of frames). Frame by frame, ids are whatever each "
        "frame's clustering gives.",
        "",
        "| method | static pixels kept (mean) | worst pair | mIoU | time / frame (s) |",
        "|---|---|---|---|---|",
    ]
    for r in video:
        lines.append(f"| {r['method']} | {r['kept']:.4f} | {r['kept_min']:.4f} | "
                     f"{r['miou']:.4f} | {r['time']:.3f} |")
    lines.append("")
    out = Path(args.out) if args.out else RESULTS / (
        "warm_video_quick.md" if args.quick else "warm_video.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
