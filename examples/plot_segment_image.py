"""
Unsupervised segmentation of a photograph
=========================================

:class:`~sklearn_falcon.ImageSegmenter` cuts an image into regions without
any training data. It describes every 12x12 pixel cell by its colour, texture
and position (the offline ``model="color"`` features: no network, no
weights), links the cells by a sharpened cosine affinity, finds the
discrete normalized cut with :class:`~sklearn_falcon.FalconNCut`, and brings
the labels back to pixel resolution by prototype reassignment followed by
PAMR refinement on the image colours.

With a timm Vision Transformer (for example
``ImageSegmenter(model="vit_small_patch8_224.dino", pretrained=True)``) the
same pipeline produces semantic segments; the offline features used here
group regions of similar appearance.
"""

# %%
# Segment scikit-image's astronaut picture into 6 regions.
import tempfile
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from skimage import data

from sklearn_falcon import ImageSegmenter
from sklearn_falcon.plotting import overlay

image = data.astronaut()
segmenter = ImageSegmenter(model="color", patch_size=12, n_segments=6, refine="pamr",
                           random_state=0)
t0 = time.perf_counter()
labels = segmenter.segment(image)
print(f"{image.shape[1]}x{image.shape[0]} pixels -> {labels.max() + 1} segments "
      f"in {time.perf_counter() - t0:.1f} s")

# %%
# The label map has the image's resolution; the overlay blends one colour per
# segment with the photograph and draws the boundaries.
fig, axes = plt.subplots(1, 3, figsize=(12, 4.3))
axes[0].imshow(image)
axes[0].set_title("image")
axes[1].imshow(labels, cmap="tab10", interpolation="nearest")
axes[1].set_title("segments (Falcon + PAMR)")
axes[2].imshow(overlay(image, labels))
axes[2].set_title("overlay")
for ax in axes:
    ax.set_axis_off()
fig.tight_layout()
fig.savefig(Path(tempfile.gettempdir()) / "plot_segment_image.png", dpi=80)
plt.show()

# %%
# Segment sizes, in percent of the image:
sizes = np.bincount(labels.ravel()) / labels.size * 100
print(np.round(sizes, 1))
