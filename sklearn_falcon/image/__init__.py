"""Unsupervised image segmentation with Falcon normalized cuts.

Pipeline: patch features (a timm ViT, or the offline colour + texture
extractor) -> cosine + power affinity -> :class:`~sklearn_falcon.FalconNCut`
-> prototype reassignment at pixel resolution -> optional PAMR refinement.

Importing this package needs only numpy and scipy; Pillow is imported to read
image files and to resize an image larger than the token budget, torch and
timm when a ViT extractor is built.
"""

from ._affinity import cosine_power_affinity, knn_cosine_power_affinity
from ._auto import select_n_segments
from ._extractors import make_extractor
from ._features import ColorPositionFeatures, TimmFeatures, rgb_to_lab
from ._io import check_image_size, load_image
from ._pamr import pamr
from ._segmenter import ImageSegmenter
from ._texture import ColorTextureFeatures
from ._upsample import bilinear_matrix, prototype_upsample, upsample_labels

__all__ = [
    "ColorPositionFeatures",
    "ColorTextureFeatures",
    "ImageSegmenter",
    "TimmFeatures",
    "bilinear_matrix",
    "check_image_size",
    "cosine_power_affinity",
    "knn_cosine_power_affinity",
    "load_image",
    "make_extractor",
    "pamr",
    "prototype_upsample",
    "rgb_to_lab",
    "select_n_segments",
    "upsample_labels",
]
