"""
Segmenting a video with ids kept across frames
==============================================

:meth:`~sklearn_falcon.ImageSegmenter.segment_video` segments the frames of
a video one after the other. Falcon keeps one estimator with
``warm_start=True``, so every frame starts from the previous frame's token
labels instead of a fresh initialization (after a cut, a blank frame or a
jump of the NCut the frame is also fitted afresh, and the lower NCut is
kept), and the segments of each frame are matched to the previous frame's
by maximal overlap (Hungarian algorithm): a segment keeps its id from frame
to frame.

The video here is synthetic: a disc cut from scikit-image's ``coffee`` and a
square cut from ``immunohistochemistry`` move over a ``grass`` texture.
"""

# %%
# Build the frames: the two shapes move a few pixels per frame.
import time

import matplotlib.pyplot as plt
import numpy as np
from skimage import data
from skimage.transform import resize

from sklearn_falcon import ImageSegmenter
from sklearn_falcon.plotting import overlay

size, r, n_frames = 192, 32, 6


def texture(image, side):
    return (resize(image[: min(image.shape[:2])], (side, side), anti_aliasing=True)
            * 255).astype(np.uint8)


grass = texture(np.repeat(data.grass()[..., None], 3, axis=2), size)
disc = texture(data.coffee()[100:400, 200:500], 2 * r)
square = texture(data.immunohistochemistry(), 2 * r)
yy, xx = np.mgrid[0:2 * r, 0:2 * r]
inside = (yy - r + 0.5) ** 2 + (xx - r + 0.5) ** 2 <= r * r
frames, truths = [], []
for t in range(n_frames):
    img, truth = grass.copy(), np.zeros((size, size), int)
    for (y, x), tex, mask, rid in (((40 + 6 * t, 30 + 8 * t), square, None, 2),
                                   ((110 - 4 * t, 120 - 6 * t), disc, inside, 1)):
        m = np.ones((2 * r, 2 * r), bool) if mask is None else mask
        img[y:y + 2 * r, x:x + 2 * r][m] = tex[m]
        truth[y:y + 2 * r, x:x + 2 * r][m] = rid
    frames.append(img)
    truths.append(truth)

# %%
# Segment the video, and count the pixels that did not move (same region and
# colour in two consecutive frames) and kept their segment id.
segmenter = ImageSegmenter(n_segments=4, random_state=0)
t0 = time.perf_counter()
maps = list(segmenter.segment_video(frames))
print(f"{n_frames} frames in {time.perf_counter() - t0:.1f} s")
for t in range(1, n_frames):
    still = (truths[t] == truths[t - 1]) & np.all(frames[t] == frames[t - 1], axis=-1)
    kept = np.mean((maps[t] == maps[t - 1])[still])
    print(f"frames {t - 1} -> {t}: {kept:.1%} of the static pixels keep their id")

# %%
# The same colour means the same segment id in every frame. Four segments
# are asked for: the grass and the square take one each, and the disc two
# (the cup of coffee, and the saucer and table beside it).
fig, axes = plt.subplots(2, n_frames // 2, figsize=(10, 6.5))
for ax, img, lab, t in zip(axes.ravel(), frames, maps, range(n_frames)):
    ax.imshow(overlay(img, lab))
    ax.set_title(f"frame {t}: ids {sorted(np.unique(lab).tolist())}")
    ax.set_axis_off()
fig.tight_layout()
plt.show()
