"""sklearn-falcon: discrete K-way normalized-cut clustering with Falcon.

Falcon (ICLR 2026) optimizes the discrete K-way normalized cut directly with
a monotone proximal-gradient method: no spectral relaxation and no recursive
2-way splits.
"""

from ._batch import BatchResult, falcon_batch
from ._falcon import FalconNCut
from .metrics import normalized_cut

__version__ = "0.1.0"

__all__ = [
    "FalconNCut",
    "ImageSegmenter",
    "normalized_cut",
    "falcon_batch",
    "BatchResult",
    "__version__",
]


def __getattr__(name):
    # The image module is imported on first use: it is heavier, and its
    # optional parts (torch, timm) must not load with the core.
    if name == "ImageSegmenter":
        from .image import ImageSegmenter

        return ImageSegmenter
    raise AttributeError(f"module 'sklearn_falcon' has no attribute {name!r}")


def __dir__():
    # the lazy name too (IPython's completion and help() read dir())
    return sorted(set(globals()) | {"ImageSegmenter"})
