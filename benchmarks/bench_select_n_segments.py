"""Time of :func:`~sklearn_falcon.image.select_n_segments` against the
number of input segments K (a superpixel over-segmentation of ~1,000).

    python -m benchmarks.bench_select_n_segments            # K = 100, 300, 1000
    python -m benchmarks.bench_select_n_segments 100 300    # chosen K

The graph: a 4-neighbour grid of ``4 K`` tokens with random weights, cut
into K square-ish segments (the layout of superpixels).  Prints the seconds
of one call (the best of ``--repeat``) for each K, after an untimed call on
a small graph (the compiled kernels are loaded before any clock).
"""

import argparse
import time

import numpy as np
import scipy.sparse as sp


def superpixel_graph(k, seed=0):
    """``(W, labels)``: a grid of about ``4 k`` tokens in ``k`` blocks."""
    rng = np.random.default_rng(seed)
    side = int(np.ceil(np.sqrt(k)))
    gh, gw = 2 * side, 2 * side
    idx = np.arange(gh * gw).reshape(gh, gw)
    rows = np.r_[idx[:, :-1].ravel(), idx[:-1].ravel()]
    cols = np.r_[idx[:, 1:].ravel(), idx[1:].ravel()]
    w = rng.random(rows.size)
    W = sp.coo_matrix((w, (rows, cols)), shape=(gh * gw,) * 2)
    W = (W + W.T).tocsr()
    blocks = (np.arange(gh)[:, None] // 2) * side + np.arange(gw)[None, :] // 2
    labels = np.unique(blocks.ravel(), return_inverse=True)[1] % k
    return W, labels


def main(argv=None):
    from sklearn_falcon.image import select_n_segments

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ks", nargs="*", type=int, default=[100, 300, 1000])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    select_n_segments(*superpixel_graph(16))  # warm-up, untimed
    for k in args.ks:
        W, labels = superpixel_graph(k)
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            n_seg = select_n_segments(W, labels)[0]
            times.append(time.perf_counter() - t0)
        print(f"K={k:5d}  tokens={W.shape[0]:6d}  chosen={n_seg:4d}  "
              f"{min(times):8.3f} s")


if __name__ == "__main__":
    main()
