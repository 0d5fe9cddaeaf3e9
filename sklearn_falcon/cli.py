"""The ``sklearn-falcon`` command (also ``python -m sklearn_falcon``).

Examples
--------
::

    sklearn-falcon --version
    sklearn-falcon demo                      # the default command
    sklearn-falcon segment photo.jpg --segments 6 --out results/
    sklearn-falcon segment a.png b.png --segments auto --model vit_small_patch8_224.dino \\
        --checkpoint dino_vits8.pth --refine pamr --out results/

``demo`` clusters scikit-learn's bundled handwritten digits with FalconNCut
and, on the same graph, with SpectralClustering, and prints NCut, ARI and
time.  ``segment`` writes, for each input ``NAME.ext``, two PNGs to
``DIR``: ``NAME_labels.png`` (the label map; 8-bit greyscale when there are
at most 256 segments, else 16-bit) and ``NAME_overlay.png`` (the image
blended with one colour per segment, boundaries drawn in white).  Files are
written to a temporary name in ``DIR`` and renamed, so a symbolic link
planted at an output name is replaced, never followed; an output name
that is one of the input images is refused before anything is written.

Every failure while a command runs ends it with a one-line
``sklearn-falcon: error:`` message on stderr and exit status 1 (130 on
Ctrl-C); a warning is one ``sklearn-falcon: warning:`` line, once.  An
output whose reader has gone (``sklearn-falcon demo | head -1``) ends the
command quietly, with status 1.  A
command line that cannot be parsed (a missing ``--out``, an unknown
option, ``--segments foo``) prints the usage and an ``error:`` line and
exits with status 2, as argparse does.
"""

import argparse
import glob
import os
import re
import secrets
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from . import __version__
from .plotting import overlay

__all__ = ["build_parser", "main", "save_label_png"]

COMMANDS = ("demo", "segment")
DEFAULT_COMMAND = "demo"


def _import_pillow():
    from .image._io import import_pillow

    return import_pillow("Reading and writing image files needs Pillow")


def _write_replacing(path, write):
    """Call ``write(tmp_path)`` on a new file in ``path``'s directory, then
    rename it to ``path``: a symbolic link (or any file) at ``path`` is
    replaced, its target never written."""
    path = Path(path)
    while True:  # not mkstemp, whose file is 0600: no one else could read it
        # the name cut short: a name that fits did not with 18 more characters
        tmp = path.parent / f".{path.name[:32]}.{secrets.token_hex(6)}.tmp"
        try:  # a new file, with the permissions of any (the umask's)
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            break
        except FileExistsError:
            continue
        except OSError as exc:  # it named the hidden temporary file
            if exc.errno is None:
                raise
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_label_png(labels, path):
    """Write a label map as an 8-bit (<= 256 labels) or 16-bit greyscale PNG.

    The file is written under a temporary name and renamed to ``path``, so a
    symbolic link at ``path`` is replaced, not followed.

    Parameters
    ----------
    labels : ndarray of shape (H, W), int
        Segment ids in ``0..65535``.
    path : str or path-like
        The PNG to write.
    """
    Image = _import_pillow()
    labels = np.asarray(labels)
    if labels.ndim != 2:
        raise ValueError(
            f"labels must be a 2-D label map (H, W); got shape {labels.shape}.")
    if labels.dtype.kind not in "biu":  # whole floats pass; 1.7 was saved as 1
        whole = (labels.dtype.kind == "f" and np.all(np.isfinite(labels))
                 and np.all(labels == np.round(labels)))
        if not whole:
            raise ValueError(
                f"Label ids must be integers; got labels of dtype {labels.dtype} "
                "with values that are not whole numbers.")
    if labels.min(initial=0) < 0 or labels.max(initial=0) > 65535:
        raise ValueError("Label ids must lie in 0..65535 to be saved as PNG.")
    dtype = np.uint8 if labels.max(initial=0) <= 255 else np.uint16
    img = Image.fromarray(labels.astype(dtype))
    _write_replacing(path, lambda tmp: img.save(tmp, format="PNG"))


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


def build_parser(prog="sklearn-falcon"):
    """The ``argparse`` parser of the ``sklearn-falcon`` command."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Discrete normalized-cut tools built on the Falcon solver. "
                    f"Without a command, runs '{DEFAULT_COMMAND}'.",
    )
    parser.add_argument("--version", action="version",
                        version=f"sklearn-falcon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser(
        "demo",
        help="cluster the bundled digits dataset (the default command)",
        description="Cluster scikit-learn's bundled handwritten digits (1,797 "
                    "samples, 10 classes) on their kNN graph with FalconNCut and, on "
                    "the same affinity matrix, with SpectralClustering; print NCut "
                    "(lower is better), ARI against the digit classes and time.",
    )
    demo.add_argument("--n-clusters", type=int, default=10, metavar="K",
                      help="number of clusters (default: %(default)s)")
    demo.add_argument("--n-neighbors", type=int, default=10, metavar="N",
                      help="neighbours of the kNN graph (default: %(default)s)")
    demo.add_argument("--random-state", type=int, default=0, metavar="SEED",
                      help="random seed (default: %(default)s)")
    demo.add_argument("--no-spectral", action="store_true",
                      help="skip the SpectralClustering reference runs")
    seg = sub.add_parser(
        "segment",
        help="segment images into regions (label map + colour overlay PNGs)",
        description=(
            "Segment images without supervision: patch features (offline colour "
            "features, or a timm ViT) -> cosine affinity -> Falcon normalized cut -> "
            "pixel-resolution masks. Writes NAME_labels.png (label ids as greyscale) "
            "and NAME_overlay.png into --out. Needs Pillow: "
            "pip install 'sklearn-falcon[cli]'; ViT models need "
            "pip install 'sklearn-falcon[image]'."
        ),
    )
    seg.add_argument("images", nargs="+", metavar="IMAGE",
                     help="input image files; a wildcard such as 'photos/*.jpg' "
                          "is expanded where the shell does not (cmd, PowerShell), "
                          "leaving out hidden files (names starting with '.')")
    seg.add_argument("--segments", "-k", type=_segments_arg, default=6, metavar="K",
                     help="number of segments, or 'auto' to choose it per image "
                          "(default: %(default)s)")
    seg.add_argument("--model", "-m", default="color", metavar="NAME",
                     help="'color' (offline, no weights) or a timm ViT name, e.g. "
                          "vit_small_patch8_224.dino (default: %(default)s)")
    seg.add_argument("--checkpoint", default=None, metavar="PATH",
                     help="local ViT weights (state dict, .safetensors or timm "
                          "checkpoint)")
    seg.add_argument("--pretrained", action="store_true",
                     help="load timm's pretrained weights (from the local cache, or "
                          "downloaded when online)")
    seg.add_argument("--refine", choices=("pamr", "none"), default="pamr",
                     help="pixel-level refinement of the masks (default: %(default)s)")
    seg.add_argument("--feature", choices=("token", "key"), default="token",
                     help="ViT patch tokens or attention keys of block --layer "
                          "(default: %(default)s)")
    seg.add_argument("--layer", type=int, default=-1,
                     help="ViT block to read features from (default: %(default)s)")
    seg.add_argument("--resolution", type=int, default=None, metavar="PX",
                     help="ViT input shorter side (default: the model's pretrained "
                          "size)")
    seg.add_argument("--patch-size", type=int, default=None, metavar="PX",
                     help="cell size of the 'color' features (default: 8)")
    seg.add_argument("--max-tokens", type=int, default=4096, metavar="N",
                     help="token budget: larger images are segmented at a working "
                          "resolution with N tokens and upsampled, so that memory "
                          "stays flat (default: %(default)s)")
    seg.add_argument("--power", type=float, default=None,
                     help="affinity sharpening exponent (default: 10 for ViTs, 6 for "
                          "'color')")
    seg.add_argument("--position-weight", type=float, default=None, metavar="W",
                     help="weight of the position term of the token features, which "
                          "favours compact segments (default: 0.3 for 'color', 0 for "
                          "ViTs)")
    seg.add_argument("--smoothing", type=float, default=0.0, metavar="S",
                     help="ViTs only: Gaussian filter of the tokens over their grid, "
                          "standard deviation in tokens; favours coherent regions, "
                          "can merge small objects (default: %(default)s)")
    seg.add_argument("--device", default="cpu",
                     help="torch device: cpu, cuda, cuda:N or auto (default: "
                          "%(default)s)")
    seg.add_argument("--seed", type=int, default=0,
                     help="random seed of the solver (default: %(default)s)")
    seg.add_argument("--out", "-o", required=True, metavar="DIR",
                     help="output directory (created if missing)")
    seg.add_argument("--quiet", "-q", action="store_true",
                     help="do not print output paths")
    return parser


def _run_demo(args):
    from sklearn.cluster import SpectralClustering
    from sklearn.datasets import load_digits
    from sklearn.metrics import adjusted_rand_score

    from . import FalconNCut, normalized_cut

    est = FalconNCut(n_clusters=args.n_clusters, n_neighbors=args.n_neighbors,
                     random_state=args.random_state)
    # before the digits' line (main names the option in the message)
    est._validate_params()
    X, y = load_digits(return_X_y=True)
    print(f"sklearn-falcon {__version__}: digits, n={X.shape[0]}, "
          f"K={args.n_clusters}, kNN graph with k={args.n_neighbors}")
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
    if args.no_spectral:
        return
    if args.n_clusters < 2:  # scikit-learn's lobpcg embedding: a bare ValueError
        print("SpectralClustering: skipped (its lobpcg solver needs n_clusters >= 2)")
        return
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


def _weights_unavailable(args, exc):
    """The message for ``--pretrained`` weights that cannot be loaded."""
    detail = " ".join(str(exc).split()) or type(exc).__name__
    return (
        f"--pretrained: the pretrained weights of {args.model!r} are not in the "
        "local cache and could not be downloaded (offline, or no network). Run once "
        "with network access to cache them, or pass local weights with "
        f"--checkpoint PATH. ({type(exc).__name__}: {detail})"
    )


def _say(text, file=None):
    """``print``, with what the stream's encoding cannot write escaped: a
    file name in another script on a console or log of a narrow code page
    (``cp1252``, ``ascii``) raised UnicodeEncodeError after the image was
    segmented, and stopped the run."""
    stream = sys.stdout if file is None else file
    encoding = getattr(stream, "encoding", None) or "utf-8"
    print(text.encode(encoding, "backslashreplace").decode(encoding), file=stream)


def _to_devnull(stream):
    """Point ``stream``'s file descriptor at the null device."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no descriptor (captured)
        pass


def _entry(path):
    """``path``'s directory entry: its folder resolved, its name kept (an
    output replaces a link there, it does not follow it)."""
    path = Path(path)
    return os.path.normcase(os.path.join(os.path.realpath(path.parent), path.name))


def _expand(arg):
    """The files of an IMAGE argument: itself, or where no file has that
    name and it holds a wildcard, the files it matches, sorted (cmd and
    PowerShell pass ``photos\\*.jpg`` as it is: "Image file not found")."""
    if os.path.lexists(arg) or not any(c in arg for c in "*?["):
        return [Path(arg)]
    matches = sorted(m for m in glob.glob(arg) if os.path.isfile(m))
    if not matches:
        raise FileNotFoundError(f"No image file matches '{arg}'.")
    return [Path(m) for m in matches]


def _check_out(out):
    """Refuse an ``--out`` that is, or lies under, a file, or that cannot
    be written, before any work (it failed after the model was built, with
    "[Errno 17] File exists", or after the first image was segmented, with
    "[Errno 13] Permission denied" naming a hidden temporary file)."""
    for d in (out, *out.parents):
        if d.exists():
            if not d.is_dir():
                what = "is" if d == out else f"lies under '{d}', which is"
                raise ValueError(
                    f"--out '{out}' {what} a file, not a directory; name a "
                    "directory for the output PNGs.")
            if not os.access(d, os.W_OK | os.X_OK):  # a read-only file system too
                what = "is" if d == out else f"cannot be created in '{d}', which is"
                raise PermissionError(
                    f"--out '{out}' {what} not writable; name a directory you "
                    "can write to.")
            return


def _name_max(out):
    """The longest file name (bytes) of ``out``'s file system, or None."""
    for d in (out, *out.parents):
        if d.exists():
            try:
                return os.pathconf(d, "PC_NAME_MAX")
            except (AttributeError, OSError, ValueError):  # Windows: no pathconf
                return None
    return None


def _output_paths(paths, out):
    """``(NAME_labels.png, NAME_overlay.png)`` in ``out`` for each input (a
    repeated NAME takes a ``_``; names that differ only in case are the
    same file on Windows and macOS), refused where one is an input: it was
    overwritten, and the image later read from it was an earlier output."""
    inputs = {_entry(p): p for p in paths}
    used, outputs, limit = set(), [], _name_max(out)
    for p in paths:
        stem = p.stem
        while stem.casefold() in used:
            stem += "_"
        used.add(stem.casefold())
        pair = (out / f"{stem}_labels.png", out / f"{stem}_overlay.png")
        for o in pair:
            if o.is_dir() and not o.is_symlink():  # (a link is replaced)
                # the rename failed after the work: "[Errno 21] Is a
                # directory: 'out/.NAME_labels.png.3f2a9c0d1e4b.tmp' -> ..."
                raise ValueError(
                    f"The output '{o}' of '{p}' is a directory; remove it or "
                    "choose another --out directory.")
            if limit and len(os.fsencode(o.name)) > limit:  # after the work
                raise ValueError(
                    f"The output name '{o.name}' of '{p}' is longer than the "
                    f"{limit} bytes the file system takes; rename the image.")
            if _entry(o) in inputs:
                raise ValueError(
                    f"The output '{o}' of '{p}' would overwrite the input image "
                    f"'{inputs[_entry(o)]}'; choose another --out directory.")
        outputs.append(pair)
    return outputs


# the options of each command that set an estimator's parameter (segment:
# ImageSegmenter's, demo: FalconNCut's), by the parameter's name
_OPTIONS = {
    "segment": {"n_segments": "--segments", "checkpoint_path": "--checkpoint",
                "random_state": "--seed", **{name: "--" + name.replace("_", "-")
                                             for name in (
                    "model", "pretrained", "layer", "feature", "resolution",
                    "patch_size", "max_tokens", "power", "position_weight",
                    "smoothing", "refine", "device")}},
    "demo": {"n_clusters": "--n-clusters", "n_neighbors": "--n-neighbors",
             "random_state": "--random-state"},
}


def _in_options(msg, command):
    """``msg`` with the parameters it names named by the options that set
    them: ``device='cuda'`` -> ``--device 'cuda'``, ``max_tokens`` ->
    ``--max-tokens`` (a parameter with no underscore is a word where no
    ``=`` or ``must`` follows: "a larger resolution"); what is quoted (a
    file's name, a value) is left as it is."""
    options = _OPTIONS.get(command, {})
    if not options:
        return msg
    name = re.match(r"The '(\w+)' parameter of \w+ ", msg)
    if name and name.group(1) in options:  # scikit-learn's validation
        return f"{options[name.group(1)]}: {msg}"
    said = ""  # (a name, not model=: no option said; its hint renamed below)
    if msg.startswith("Unknown timm model name") and "model" in options:
        said = "--model: "
    names = "|".join(sorted(options, key=len, reverse=True))
    bare = "|".join(n for n in options if "_" in n)

    def rename(text):  # (not in a path, a name or an option already)
        text = re.sub(rf"(?<![\w./\\-])({names})(=| must\b)", lambda m: options[
            m.group(1)] + (" " if m.group(2) == "=" else m.group(2)), text)
        return re.sub(rf"(?<![\w./\\-])({bare})(?!\w)",
                      lambda m: options[m.group(1)], text)

    # what is quoted (a file's name, a value) is left as it is
    parts = re.split(r"('[^']*')", msg)
    msg = "".join(p if i % 2 else rename(p) for i, p in enumerate(parts))
    return said + msg.replace("--pretrained True", "--pretrained")  # (a flag)


def _check_segmenter(seg):
    """Check ``seg``'s parameters before ``--out`` is made and a model is
    built (``--max-tokens 0``, ``--seed -1``, ``--device cuda`` without
    CUDA were refused at the first image, after a ViT was loaded and
    ``--out`` made); :func:`main` names the options in the message."""
    seg._check_params()


def _run_segment(args):
    Image = _import_pillow()
    from .image import ImageSegmenter, load_image
    from .image._extractors import OFFLINE_MODELS
    from .image._io import naming_file, opened_image

    paths = [p for arg in args.images for p in _expand(arg)]
    for p in paths:  # fail fast, before any model is built
        if not p.exists():
            raise FileNotFoundError(f"Image file not found: '{p}'.")
        if p.is_dir():  # "Not a file" said what it is not, not what to pass
            raise ValueError(
                f"'{p}' is a directory; name its images, e.g. "
                f"'{p / '*.jpg'}' (files whose name starts with '.' are left out).")
        if not p.is_file():
            raise ValueError(f"Not a file: '{p}'.")
        with opened_image(p):  # its header only: the pixels when its turn comes
            pass
    out = Path(args.out)
    _check_out(out)
    outputs = _output_paths(paths, out)
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
        position_weight=args.position_weight,
        smoothing=args.smoothing,
        refine=None if args.refine == "none" else args.refine,
        device=args.device,
        random_state=args.seed,
    )
    _check_segmenter(seg)
    try:
        seg._get_extractor()  # validate the model (name, checkpoint) up front
    except (ValueError, TypeError, ImportError, MemoryError):
        raise
    except Exception as exc:
        if args.pretrained and args.checkpoint is None:
            raise RuntimeError(_weights_unavailable(args, exc)) from exc
        raise
    if args.model not in OFFLINE_MODELS and not (args.pretrained or args.checkpoint):
        # it segmented with untrained features without a word
        _say(f"sklearn-falcon: warning: --model {args.model} without --pretrained "
             "or --checkpoint: its weights are timm's random initialization, "
             "whose tokens carry little meaning; pass --pretrained or "
             "--checkpoint PATH for the learned features.", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)

    for p, (lab_path, ov_path) in zip(paths, outputs):
        # one image decoded at a time: a folder of photos fits
        rgb = load_image(p)
        try:
            with naming_file(p):  # "Image of size 2x2 (HxW) is ...": which one?
                labels = seg.segment(rgb)
        except MemoryError as exc:
            raise MemoryError(
                f"out of memory segmenting '{p}' ({rgb.shape[1]}x{rgb.shape[0]} "
                "pixels): try a smaller --max-tokens, a smaller --resolution (ViTs), "
                f"a larger --patch-size ('color'), or --refine none. {exc}"
            ) from exc
        save_label_png(labels, lab_path)
        ov = Image.fromarray(overlay(rgb, labels))
        _write_replacing(ov_path, lambda tmp: ov.save(tmp, format="PNG"))
        if not args.quiet:
            n = int(labels.max()) + 1  # (not "1 segments")
            _say(f"{p}: {n} segment{'s' * (n != 1)} -> {lab_path}, {ov_path}")


# the errors whose message is meaningful on its own; any other error is
# reported with its type
_PLAIN = (OSError, ValueError, TypeError, ImportError, RuntimeError, MemoryError)


def _one_line(exc):
    msg = " ".join(str(exc).split())
    if not isinstance(exc, _PLAIN) or not msg:
        msg = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    if isinstance(exc, MemoryError) and "memory" not in msg.lower():
        msg = f"out of memory: {msg}"
    return msg


def main(argv=None, *, prog="sklearn-falcon"):
    """Entry point of the ``sklearn-falcon`` command; returns the exit status.

    Without a command (or with only options, e.g. ``--no-spectral``) it runs
    ``demo``, so ``python -m sklearn_falcon`` and ``sklearn-falcon`` are the
    same program.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if a in COMMANDS or not a.startswith("-")), None)
    if first not in COMMANDS and not {"-h", "--help", "--version"} & set(argv):
        argv.insert(0, DEFAULT_COMMAND)
    args = build_parser(prog).parse_args(argv)
    shown = set()

    def show_warning(message, category, *_args, **_kwargs):
        # a warning of a fit came as "<frozen runpy>:88: UserWarning: ...",
        # once per fit of the demo
        message = _in_options(" ".join(str(message).split()), args.command)
        line = f"sklearn-falcon: warning: {message}"
        if line not in shown:
            shown.add(line)
            _say(line, file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            if args.command == "segment":
                _run_segment(args)
            else:
                _run_demo(args)
            sys.stdout.flush()  # a closed pipe is met here, not at exit
    except BrokenPipeError:
        # the reader went away (``| head -1``): stop quietly, as Python's
        # documentation advises, stdout pointed at devnull so that the flush
        # at exit does not fail again
        _to_devnull(sys.stdout)
        return 1
    except KeyboardInterrupt:
        print("sklearn-falcon: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # every failure: one line and a non-zero exit
        msg = _in_options(_one_line(exc), args.command)
        _say(f"sklearn-falcon: error: {msg}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - python -m sklearn_falcon.cli
    sys.exit(main())
