"""``python -m sklearn_falcon``: cluster a bundled dataset and print the result.

Clusters scikit-learn's bundled handwritten digits (1,797 samples, 64
features, 10 classes) on their 10-nearest-neighbour graph with FalconNCut,
and, on the same affinity matrix, with SpectralClustering for reference.
Prints NCut (lower is better), ARI against the digit classes and wall time.
"""

import argparse
import time
import warnings


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m sklearn_falcon",
        description="Cluster the bundled digits dataset with FalconNCut.",
    )
    parser.add_argument("--n-clusters", type=int, default=10)
    parser.add_argument("--n-neighbors", type=int, default=10)
    parser.add_argument("--random-state", type=int, default=0)
    parser.add_argument("--no-spectral", action="store_true",
                        help="skip the SpectralClustering reference run")
    args = parser.parse_args(argv)

    from sklearn.cluster import SpectralClustering
    from sklearn.datasets import load_digits
    from sklearn.metrics import adjusted_rand_score

    from sklearn_falcon import FalconNCut, __version__, normalized_cut

    X, y = load_digits(return_X_y=True)
    print(f"sklearn-falcon {__version__}: digits, n={X.shape[0]}, "
          f"K={args.n_clusters}, kNN graph with k={args.n_neighbors}")
    est = FalconNCut(n_clusters=args.n_clusters, n_neighbors=args.n_neighbors,
                     random_state=args.random_state)
    t0 = time.perf_counter()
    est.fit(X)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    est.fit(X)
    t_fit = time.perf_counter() - t0
    ari = adjusted_rand_score(y, est.labels_)
    print(f"{'method':38s} {'NCut':>8s} {'ARI':>7s} {'time (s)':>9s}")
    print(f"{'FalconNCut (backend=' + est.backend_ + ')':38s} {est.ncut_:8.4f} "
          f"{ari:7.3f} {t_fit:9.3f}   (first fit, incl. JIT load: {t_first:.2f} s)")
    if not args.no_spectral:
        W = est.affinity_matrix_
        for assign in ("kmeans", "cluster_qr"):
            sc = SpectralClustering(n_clusters=args.n_clusters, affinity="precomputed",
                                    eigen_solver="lobpcg", assign_labels=assign,
                                    random_state=args.random_state)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                labels = sc.fit_predict(W)
            t = time.perf_counter() - t0
            print(f"{'SpectralClustering lobpcg/' + assign:38s} "
                  f"{normalized_cut(W, labels):8.4f} "
                  f"{adjusted_rand_score(y, labels):7.3f} {t:9.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
