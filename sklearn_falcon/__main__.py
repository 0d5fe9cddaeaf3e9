"""``python -m sklearn_falcon``: the ``sklearn-falcon`` command.

The same program as the ``sklearn-falcon`` script (:mod:`sklearn_falcon.cli`),
whose default command is ``demo``: ``python -m sklearn_falcon`` clusters
scikit-learn's bundled handwritten digits (1,797 samples, 64 features, 10
classes) on their 10-nearest-neighbour graph with FalconNCut and, on the same
affinity matrix, with SpectralClustering for reference, and prints NCut
(lower is better), ARI against the digit classes and wall time.
``python -m sklearn_falcon segment IMAGE --out DIR`` segments images, as
``sklearn-falcon segment`` does.
"""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m sklearn_falcon"))
