"""Command line interface: ``sklearn-falcon segment IMAGE... --out DIR``.

Examples
--------
::

    sklearn-falcon segment photo.jpg --segments 6 --out results/
    sklearn-falcon segment a.png b.png --segments auto --model vit_small_patch8_224.dino \\
        --checkpoint dino_vits8.pth --refine pamr --out results/

For each input ``NAME.ext`` two PNGs are written to ``DIR``:
``NAME_labels.png`` (the label map; 8-bit greyscale when there are at most 256
segments, else 16-bit) and ``NAME_overlay.png`` (the image blended with one
colour per segment, boundaries drawn in white).
"""

import argparse
import sys
from pathlib import Path

import numpy as np

__all__ = ["main", "build_parser", "overlay", "save_label_png"]

_PALETTE = np.array(
    [
        [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
        [245, 130, 48], [145, 30, 180], [70, 240, 240], [240, 50, 230],
        [210, 245, 60], [250, 190, 212], [0, 128, 128], [220, 190, 255],
        [170, 110, 40], [255, 250, 200], [128, 0, 0], [170, 255, 195],
        [128, 128, 0], [255, 215, 180], [0, 0, 128], [128, 128, 128],
    ],
    dtype=np.float64,
)


def overlay(image, labels, *, alpha=0.5):
    """Blend ``image`` with one colour per segment and mark boundaries.

    Parameters
    ----------
    image : ndarray of shape (H, W, 3), uint8
        The image.
    labels : ndarray of shape (H, W), int
        Segment ids.
    alpha : float, default=0.5
        Weight of the segment colours.

    Returns
    -------
    out : ndarray of shape (H, W, 3), uint8

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_falcon.cli import overlay
    >>> overlay(np.zeros((2, 2, 3), np.uint8), np.array([[0, 1], [0, 1]])).shape
    (2, 2, 3)
    """
    labels = np.asarray(labels)
    ids = np.unique(labels, return_inverse=True)[1].reshape(labels.shape)
    rng = np.random.default_rng(0)
    extra = rng.integers(0, 256, (max(0, ids.max() + 1 - len(_PALETTE)), 3))
    palette = np.concatenate([_PALETTE, extra.astype(np.float64)])
    out = (1 - alpha) * image.astype(np.float64) + alpha * palette[ids]
    edge = np.zeros(labels.shape, bool)
    edge[:-1] |= labels[:-1] != labels[1:]
    edge[:, :-1] |= labels[:, :-1] != labels[:, 1:]
    out[edge] = 255.0
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def save_label_png(labels, path):
    """Write a label map as an 8-bit (<= 256 labels) or 16-bit greyscale PNG."""
    from PIL import Image

    labels = np.asarray(labels)
    if labels.min(initial=0) < 0 or labels.max(initial=0) > 65535:
        raise ValueError("Label ids must lie in 0..65535 to be saved as PNG.")
    if labels.max(initial=0) <= 255:
        Image.fromarray(labels.astype(np.uint8)).save(path)
    else:
        Image.fromarray(labels.astype(np.uint16)).save(path)


def _segments_arg(value):
    if value == "auto":
        return value
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer or 'auto', got {value!r}"
        ) from None
    if k < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer or 'auto', got {k}")
    return k


def build_parser():
    """The ``argparse`` parser of the ``sklearn-falcon`` command."""
    parser = argparse.ArgumentParser(
        prog="sklearn-falcon",
        description="Discrete normalized-cut tools built on the Falcon solver.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    seg = sub.add_parser(
        "segment",
        help="segment images into regions (label map + colour overlay PNGs)",
        description=(
            "Segment images without supervision: patch features (offline colour "
            "features, or a timm ViT) -> cosine affinity -> Falcon normalized cut -> "
            "pixel-resolution masks. Writes NAME_labels.png (label ids as greyscale) "
            "and NAME_overlay.png into --out."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    seg.add_argument("images", nargs="+", metavar="IMAGE", help="input image files")
    seg.add_argument("--segments", "-k", type=_segments_arg, default=6, metavar="K",
                     help="number of segments, or 'auto' to choose it per image")
    seg.add_argument("--model", "-m", default="color", metavar="NAME",
                     help="'color' (offline, no weights) or a timm ViT name, e.g. "
                          "vit_small_patch8_224.dino")
    seg.add_argument("--checkpoint", default=None, metavar="PATH",
                     help="local ViT weights (state dict, .safetensors or timm checkpoint)")
    seg.add_argument("--pretrained", action="store_true",
                     help="load the timm pretrained weights (needs them cached or online)")
    seg.add_argument("--refine", choices=("pamr", "none"), default="pamr",
                     help="pixel-level refinement of the masks")
    seg.add_argument("--feature", choices=("token", "key"), default="token",
                     help="ViT patch tokens or last-block attention keys")
    seg.add_argument("--layer", type=int, default=-1, help="ViT block to read features from")
    seg.add_argument("--resolution", type=int, default=None, metavar="PX",
                     help="ViT input shorter side (default: the model's pretrained size)")
    seg.add_argument("--patch-size", type=int, default=None, metavar="PX",
                     help="cell size of the 'color' features (default 8)")
    seg.add_argument("--max-tokens", type=int, default=4096, metavar="N",
                     help="token budget: larger images are segmented at a working "
                          "resolution with N tokens and upsampled (memory stays flat)")
    seg.add_argument("--power", type=float, default=None,
                     help="affinity sharpening exponent (default: 10 for ViTs, 6 for 'color')")
    seg.add_argument("--device", default="cpu", help="torch device: cpu, cuda, auto")
    seg.add_argument("--seed", type=int, default=0, help="random seed of the solver")
    seg.add_argument("--out", "-o", required=True, metavar="DIR",
                     help="output directory (created if missing)")
    seg.add_argument("--quiet", "-q", action="store_true", help="do not print output paths")
    return parser


def _run_segment(args):
    from .image import ImageSegmenter, load_image

    paths = [Path(p) for p in args.images]
    for p in paths:  # fail fast, before any model is built
        if not p.exists():
            raise FileNotFoundError(f"Image file not found: '{p}'.")
        if not p.is_file():
            raise ValueError(f"Not a file: '{p}'.")
    images = [load_image(p) for p in paths]
    seg = ImageSegmenter(
        model=args.model,
        n_segments=args.segments,
        pretrained=args.pretrained,
        checkpoint_path=args.checkpoint,
        layer=args.layer,
        feature=args.feature,
        resolution=args.resolution,
        patch_size=args.patch_size,
        max_tokens=args.max_tokens,
        power=args.power,
        refine=None if args.refine == "none" else args.refine,
        device=args.device,
        random_state=args.seed,
    )
    seg._get_extractor()  # validate the model (name, checkpoint) up front
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from PIL import Image

    used = set()
    for p, rgb in zip(paths, images):
        labels = seg.segment(rgb)
        stem = p.stem
        while stem in used:
            stem += "_"
        used.add(stem)
        lab_path = out / f"{stem}_labels.png"
        ov_path = out / f"{stem}_overlay.png"
        save_label_png(labels, lab_path)
        Image.fromarray(overlay(rgb, labels)).save(ov_path)
        if not args.quiet:
            print(f"{p}: {int(labels.max()) + 1} segments -> {lab_path}, {ov_path}")


def main(argv=None):
    """Entry point of the ``sklearn-falcon`` command; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "segment":
            _run_segment(args)
    except KeyboardInterrupt:
        print("sklearn-falcon: interrupted", file=sys.stderr)
        return 130
    except (FileNotFoundError, ValueError, TypeError, ImportError, RuntimeError,
            OSError, MemoryError) as exc:
        msg = " ".join(str(exc).split()) or type(exc).__name__
        print(f"sklearn-falcon: error: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - python -m sklearn_falcon.cli
    sys.exit(main())
