import os

os.environ["HF_HUB_OFFLINE"] = "1"

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

from sklearn_falcon.cli import main


def _write(tmp_path, name="img.png", shape=(40, 56)):
    img = np.zeros(shape + (3,), np.uint8)
    img[:, 32:] = (220, 50, 50)  # region borders on the 8-pixel cell grid
    img[:24, :32] = (40, 200, 90)
    path = tmp_path / name
    Image.fromarray(img).save(path)
    return path, img


def test_cli_writes_label_and_overlay_pngs(tmp_path, capsys):
    path, img = _write(tmp_path)
    grey = tmp_path / "grey.png"
    Image.fromarray(img[..., 0]).save(grey)
    out = tmp_path / "out"
    rc = main(["segment", str(path), str(grey), "--segments", "3", "--out", str(out)])
    assert rc == 0
    labels = np.asarray(Image.open(out / "img_labels.png"))
    assert labels.shape == (40, 56) and labels.dtype == np.uint8
    assert len(np.unique(labels)) == 3
    # the three flat regions are three segments
    for region in (labels[:24, :32], labels[24:, :32], labels[:, 32:]):
        assert len(np.unique(region)) == 1
    ov = Image.open(out / "img_overlay.png")
    assert ov.mode == "RGB" and ov.size == (56, 40)
    assert (out / "grey_labels.png").exists() and (out / "grey_overlay.png").exists()
    assert "3 segments" in capsys.readouterr().out


def test_cli_refine_none_and_auto(tmp_path):
    path, _ = _write(tmp_path)
    rc = main(["segment", str(path), "-k", "auto", "--refine", "none", "-o", str(tmp_path), "-q"])
    assert rc == 0
    assert np.asarray(Image.open(tmp_path / "img_labels.png")).shape == (40, 56)


@pytest.mark.parametrize(
    "args,msg",
    [
        (["missing.png"], "not found"),
        (["BAD"], "Cannot read image"),
        # (the option named, as of the other refusals of a value)
        (["GOOD", "--model", "no_such_vit_model"],
         "error: --model: Unknown timm model name 'no_such_vit_model'"),
    ],
)
def test_cli_errors_one_line(tmp_path, capsys, args, msg):
    pytest.importorskip("timm") if "--model" in args else None
    good, _ = _write(tmp_path)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG not really")
    args = [str(good) if a == "GOOD" else str(bad) if a == "BAD" else
            str(tmp_path / a) if a.endswith(".png") else a for a in args]
    rc = main(["segment", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc != 0
    assert msg in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_model_path_hint_names_the_options(tmp_path, capsys):
    # a checkpoint file or a folder given as --model: the hint of where it
    # goes said "as model and the file as checkpoint_path (e.g. model='...',
    # checkpoint_path='...')", the Python names: the --model prefix skipped
    # the renaming of the rest of the message
    pytest.importorskip("timm")
    good, _ = _write(tmp_path)
    (ckpt := tmp_path / "w.pth").write_bytes(b"")
    (folder := tmp_path / "saved").mkdir()
    for model, text in ((ckpt, f"--checkpoint '{ckpt}'"),
                        (folder, f"--model 'local-dir:{folder}'")):
        rc = main(["segment", str(good), "--model", str(model),
                   "--out", str(tmp_path / "o")])
        err = capsys.readouterr().err
        assert rc != 0 and f"error: --model: Unknown timm model name '{model}'" in err
        assert text in err
        assert "checkpoint_path" not in err and "model=" not in err


def test_cli_module_entry_point(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "sklearn_falcon.cli", "segment", str(tmp_path / "nope.jpg"),
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 1
    assert res.stderr.strip().startswith("sklearn-falcon: error:")
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["segment", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--segments", "--model", "--checkpoint", "--refine", "--out"):
        assert flag in out
    # each default said once, and no "(default: None)" (issue 18)
    flat = " ".join(out.split())
    assert "(default: None)" not in flat and "(default: False)" not in flat
    assert flat.count("(default:") == len(re.findall(r"\(default: [^)]*\)", flat))
    assert not re.search(r"\(default: [^)]*\) \(default:", flat)
    assert "(default: 6)" in flat and "(default: pamr)" in flat
    # --device takes a GPU's index (and 'cpu:N'), as ImageSegmenter does
    assert "torch device: cpu, cuda, cuda:N or auto" in flat


def test_cli_vit_with_checkpoint(tmp_path, capsys):
    pytest.importorskip("timm")
    import timm
    import torch

    path, _ = _write(tmp_path)
    ckpt = tmp_path / "vit.pth"
    torch.save(timm.create_model("vit_tiny_patch16_224", pretrained=False).state_dict(), ckpt)
    out = tmp_path / "out"
    rc = main(["segment", str(path), "--model", "vit_tiny_patch16_224", "--checkpoint",
               str(ckpt), "--resolution", "32", "--segments", "2", "--feature", "key",
               "--smoothing", "1", "--out", str(out), "-q"])
    assert rc == 0, capsys.readouterr().err
    assert np.asarray(Image.open(out / "img_labels.png")).shape == (40, 56)
    assert np.asarray(Image.open(out / "img_overlay.png")).shape == (40, 56, 3)
    # a checkpoint of another architecture: one-line error, non-zero exit
    bad = tmp_path / "bad.pth"
    torch.save({"blocks.0.attn.qkv.weight": torch.zeros(3, 3)}, bad)
    rc = main(["segment", str(path), "--model", "vit_tiny_patch16_224", "--checkpoint",
               str(bad), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "does not match" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ issue 18
def _segment(tmp_path, *extra):
    path, _ = _write(tmp_path)
    return main(["segment", str(path), "--segments", "2", "--out",
                 str(tmp_path / "out"), "-q", *extra])


def _one_error_line(err):
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("sklearn-falcon: error: ")
    return lines[0]


def test_cli_decompression_bomb_is_one_line(tmp_path, capsys, monkeypatch):
    # defect 3: PIL's DecompressionBombError (a 196-megapixel PNG) came out as
    # a traceback; the limit is lowered here so that a small image trips it
    from PIL import Image as PILImage

    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 100)
    rc = _segment(tmp_path)
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and "exceeds limit" in line


def test_cli_garbage_safetensors_is_one_line(tmp_path, capsys):
    # defect 3: SafetensorError from a garbage .safetensors checkpoint
    pytest.importorskip("timm")
    pytest.importorskip("safetensors")
    ckpt = tmp_path / "garbage.safetensors"
    ckpt.write_bytes(b"\x00" * 64 + b"not a safetensors file")
    rc = _segment(tmp_path, "--model", "vit_tiny_patch16_224", "--checkpoint",
                  str(ckpt))
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and "Cannot read checkpoint" in line and "garbage" in line


@pytest.mark.parametrize("exc, expected", [
    (MemoryError(), "out of memory segmenting"),
    (MemoryError("Unable to allocate 3.2 GiB"), "Unable to allocate 3.2 GiB"),
    (KeyError("surprise"), "KeyError: 'surprise'"),
    (AssertionError(), "AssertionError"),
])
def test_cli_any_failure_is_one_line(tmp_path, capsys, monkeypatch, exc, expected):
    # defect 3: MemoryError on a 12 MP photo, and every other failure
    from sklearn_falcon.image import ImageSegmenter

    def fail(self, image):
        raise exc

    monkeypatch.setattr(ImageSegmenter, "segment", fail)
    rc = _segment(tmp_path)
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and expected in line
    if isinstance(exc, MemoryError):
        assert "--resolution" in line


def test_cli_interrupt_exits_130(tmp_path, capsys, monkeypatch):
    from sklearn_falcon.image import ImageSegmenter

    def interrupt(self, image):
        raise KeyboardInterrupt

    monkeypatch.setattr(ImageSegmenter, "segment", interrupt)
    assert _segment(tmp_path) == 130


@pytest.mark.skipif(not hasattr(__import__("os"), "symlink"), reason="no symlinks")
def test_cli_does_not_write_through_symlinks(tmp_path):
    # defect 5: links planted at the output names were followed and their
    # targets overwritten; the outputs now replace the links
    out = tmp_path / "out"
    out.mkdir()
    victims = {}
    for name in ("img_labels.png", "img_overlay.png"):
        victim = tmp_path / f"victim_{name}.txt"
        victim.write_text("precious")
        (out / name).symlink_to(victim)
        victims[name] = victim
    assert _segment(tmp_path) == 0
    for name, victim in victims.items():
        assert victim.read_text() == "precious"
        assert not (out / name).is_symlink()
        assert np.asarray(Image.open(out / name)).shape[:2] == (40, 56)
    assert sorted(p.name for p in out.iterdir()) == ["img_labels.png",
                                                     "img_overlay.png"]


def test_cli_version(capsys):
    import sklearn_falcon

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    version = capsys.readouterr().out.strip()
    assert version == f"sklearn-falcon {sklearn_falcon.__version__}"


def test_cli_pretrained_offline_names_the_model_and_suggests_checkpoint(tmp_path):
    pytest.importorskip("timm")
    path, _ = _write(tmp_path)
    env = dict(__import__("os").environ, HF_HUB_OFFLINE="1",
               HF_HUB_CACHE=str(tmp_path / "empty_cache"),
               HF_HOME=str(tmp_path / "empty_home"))
    res = subprocess.run(
        [sys.executable, "-m", "sklearn_falcon", "segment", str(path), "--model",
         "vit_tiny_patch16_224.augreg_in21k", "--pretrained", "--out",
         str(tmp_path / "o")],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert res.returncode == 1
    line = _one_error_line(res.stderr)
    assert "'vit_tiny_patch16_224.augreg_in21k'" in line
    assert "--checkpoint PATH" in line


def _strip_times(text):
    return [re.sub(r"\s+\d+\.\d+$", "", ln.split("(first fit")[0].rstrip())
            for ln in text.strip().splitlines()]


def test_python_m_and_the_command_are_the_same_program(capsys):
    # `python -m sklearn_falcon` runs the CLI, whose default command is demo
    res = subprocess.run([sys.executable, "-m", "sklearn_falcon", "--no-spectral"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert main(["demo", "--no-spectral"]) == 0
    demo = capsys.readouterr().out
    assert _strip_times(res.stdout) == _strip_times(demo)
    assert "FalconNCut (backend=numba)" in demo
    res = subprocess.run([sys.executable, "-m", "sklearn_falcon", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert "demo" in res.stdout and "segment" in res.stdout


BLOCK_PIL = """
import sys
class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "PIL":
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, _Blocker())
"""


def test_cli_without_pillow_says_what_to_install(tmp_path):
    # after a core install, `segment` failed with "No module named 'PIL'"
    path, _ = _write(tmp_path)
    code = textwrap.dedent(BLOCK_PIL) + textwrap.dedent(f"""
        from sklearn_falcon.cli import main
        raise SystemExit(main(["segment", {str(path)!r}, "--out", {str(tmp_path)!r}]))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1
    line = _one_error_line(res.stderr)
    assert "pip install 'sklearn-falcon[cli]'" in line
    code = textwrap.dedent(BLOCK_PIL) + textwrap.dedent(f"""
        from sklearn_falcon.image import load_image
        try:
            load_image({str(path)!r})
        except ImportError as exc:
            print(exc)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert "pip install 'sklearn-falcon[cli]'" in res.stdout


def test_cli_smoothing(tmp_path, capsys, monkeypatch):
    from sklearn_falcon.image import ImageSegmenter

    seen = []
    segment = ImageSegmenter.segment

    def spy(self, image):
        seen.append(self.smoothing)
        return segment(self, image)

    monkeypatch.setattr(ImageSegmenter, "segment", spy)
    assert _segment(tmp_path) == 0
    assert seen == [0.0]
    # the offline features have no tokens to smooth: one line naming it
    # by the options typed and their values ("smoothing applies to ViT
    # tokens only; ... (got --smoothing 1.0)" named neither --model nor
    # the parameter at the start of its sentence)
    for model in ("color", "color-position"):
        rc = _segment(tmp_path, "--smoothing", "1", "--model", model)
        line = _one_error_line(capsys.readouterr().err)
        assert rc == 1 and line == (
            "sklearn-falcon: error: --smoothing 1.0 applies to ViT tokens only; "
            f"--model '{model}' is an offline extractor, which takes none.")


def test_cli_patch_size_of_a_vit_names_the_option_and_value(tmp_path, capsys):
    # "--patch-size only applies to the offline models ...": which value?
    rc = _segment(tmp_path, "--model", "vit_tiny_patch16_224", "--patch-size", "8")
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and line.startswith(
        "sklearn-falcon: error: --patch-size 8 only applies to the offline models")


@pytest.mark.parametrize("extra, given", [
    (["--pretrained"], "--pretrained"),
    (["--checkpoint", "w.pt"], "--checkpoint 'w.pt'"),
    (["--pretrained", "--checkpoint", "w.pt"], "--pretrained, --checkpoint 'w.pt'"),
])
def test_cli_weights_of_an_offline_model_name_the_options(tmp_path, capsys, extra,
                                                          given):
    # "it takes no pretrained weights or --checkpoint.": --pretrained was
    # not named, nor the checkpoint given
    rc = _segment(tmp_path, *extra)
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and line == (
        "sklearn-falcon: error: --model 'color' is a non-learned offline "
        "extractor; it takes no pretrained weights or --checkpoint (got "
        f"{given}).")


def test_cli_position_weight(tmp_path, capsys, monkeypatch):
    from sklearn_falcon.image import ImageSegmenter

    seen = []
    segment = ImageSegmenter.segment

    def spy(self, image):
        seen.append(self.position_weight)
        return segment(self, image)

    monkeypatch.setattr(ImageSegmenter, "segment", spy)
    assert _segment(tmp_path, "--position-weight", "0.25") == 0
    assert _segment(tmp_path) == 0
    assert seen == [0.25, None]
    rc = _segment(tmp_path, "--position-weight", "-1")
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and "position_weight" in line


def test_cli_decodes_one_image_at_a_time(tmp_path, monkeypatch):
    """Every image was decoded before the first was segmented: a folder of
    500 12-megapixel photos (36 MB each) held 18 GB at once.  Unreadable
    files are still refused before any is segmented (their header only)."""
    from sklearn_falcon import image as image_module
    from sklearn_falcon.image import ImageSegmenter

    paths = [_write(tmp_path, f"img{i}.png")[0] for i in range(3)]
    events = []
    real_load, real_segment = image_module.load_image, ImageSegmenter.segment
    monkeypatch.setattr(image_module, "load_image",
                        lambda p: events.append("load") or real_load(p))
    monkeypatch.setattr(ImageSegmenter, "segment",
                        lambda self, im: events.append("segment")
                        or real_segment(self, im))
    rc = main(["segment", *map(str, paths), "-k", "3", "-q",
               "--out", str(tmp_path / "o")])
    assert rc == 0 and events == ["load", "segment"] * 3
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG not really")
    events.clear()
    rc = main(["segment", str(paths[0]), str(bad), "--out", str(tmp_path / "o2")])
    assert rc == 1 and events == [] and not (tmp_path / "o2").exists()


def test_cli_names_in_another_script_on_a_narrow_console(tmp_path, monkeypatch):
    """A file name in another script, printed to a console or log of a
    narrow code page (Windows' cp1252 when redirected, PYTHONIOENCODING=
    ascii), raised UnicodeEncodeError after the first image was segmented
    and stopped the run with exit status 1."""
    import io

    paths = [_write(tmp_path, name)[0] for name in ("фото.png", "写真.png")]
    for stream in ("stdout", "stderr"):
        narrow = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
        monkeypatch.setattr(sys, stream, narrow)
    rc = main(["segment", *map(str, paths), "-k", "3", "--out", str(tmp_path / "o")])
    sys.stdout.seek(0)
    out = sys.stdout.buffer.read().decode("ascii")
    assert rc == 0 and out.count("3 segments") == 2
    assert "\\u0444\\u043e\\u0442\\u043e.png" in out  # фото, escaped
    assert (tmp_path / "o" / "写真_labels.png").exists()


def test_cli_refuses_an_output_that_is_an_input(tmp_path, capsys):
    # `segment a.png a_labels.png -o DIR` wrote a.png's label map over the
    # user's a_labels.png, then segmented that label map as the second image
    a, _ = _write(tmp_path, "a.png")
    other, _ = _write(tmp_path, "a_labels.png", shape=(32, 48))
    before = other.read_bytes()
    for order in ([a, other], [other, a]):
        rc = main(["segment", *map(str, order), "-o", str(tmp_path), "-q"])
        err = capsys.readouterr().err
        assert rc == 1 and "would overwrite the input image" in err
        assert "a_labels.png" in err and len(err.strip().splitlines()) == 1
        assert other.read_bytes() == before
        assert not (tmp_path / "a_overlay.png").exists()
    # the same folder reached by another spelling of its path
    rc = main(["segment", str(a), str(other), "-o", str(tmp_path / "." / "x" / ".."),
               "-q"])
    assert rc == 1 and other.read_bytes() == before
    # no collision: both images are segmented into that folder
    rc = main(["segment", str(a), "-o", str(tmp_path), "-q"])
    assert rc == 0 and (tmp_path / "a_labels.png").read_bytes() != before


@pytest.mark.parametrize("sub", ["", "sub"])
def test_cli_out_that_is_a_file_is_one_clear_line(tmp_path, capsys, monkeypatch,
                                                  sub):
    # --out naming a file said "[Errno 17] File exists: '...'" (or "[Errno 20]
    # Not a directory"), and only after the model was built
    from sklearn_falcon.image import ImageSegmenter

    path, _ = _write(tmp_path)
    target = tmp_path / "result.png"
    target.write_bytes(b"precious")
    built = []
    monkeypatch.setattr(ImageSegmenter, "_get_extractor",
                        lambda self: built.append(1))
    rc = main(["segment", str(path), "-o", str(target / sub)])
    err = capsys.readouterr().err
    assert rc == 1 and built == [] and target.read_bytes() == b"precious"
    assert "is a file, not a directory" in err and "--out" in err
    assert "Errno" not in err and len(err.strip().splitlines()) == 1


def test_cli_names_that_differ_in_case_get_distinct_outputs(tmp_path, capsys):
    # IMG_1.JPG and img_1.png (a camera's and an edited copy) both wrote
    # img_1_labels.png on a case-insensitive file system (Windows, macOS):
    # the second image's outputs replaced the first's without a word
    (tmp_path / "a").mkdir()
    first, _ = _write(tmp_path / "a", "IMG_1.png")
    second, _ = _write(tmp_path, "img_1.png", shape=(32, 48))
    out = tmp_path / "out"
    assert main(["segment", str(first), str(second), "-o", str(out), "-k", "2"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert len({n.casefold() for n in names}) == 4, names
    printed = capsys.readouterr().out
    assert "IMG_1_labels.png" in printed and "img_1__labels.png" in printed


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_cli_outputs_have_the_permissions_of_any_new_file(tmp_path):
    # the outputs were written to a mkstemp file and renamed: mode 0600, so
    # a web server or a colleague could not read them (a new file is 0644
    # under the usual umask 022)
    from sklearn_falcon.cli import save_label_png

    old = os.umask(0o022)
    try:
        assert _segment(tmp_path) == 0
        save_label_png(np.zeros((2, 3), int), tmp_path / "own.png")
    finally:
        os.umask(old)
    out = tmp_path / "out"
    for path in (out / "img_labels.png", out / "img_overlay.png", tmp_path / "own.png"):
        assert path.stat().st_mode & 0o777 == 0o644, path
    assert sorted(p.name for p in out.iterdir()) == ["img_labels.png",
                                                     "img_overlay.png"]


def test_cli_vit_without_weights_warns(tmp_path, capsys):
    # --model vit_small_patch8_224.dino alone segmented with timm's random
    # initialization, without a word: the name says DINO, the weights were not
    pytest.importorskip("timm")
    rc = _segment(tmp_path, "--model", "vit_tiny_patch16_224", "--resolution", "32")
    err = capsys.readouterr().err
    assert rc == 0, err
    line, = [x for x in err.splitlines() if "warning" in x]  # (and a JIT notice)
    assert line.startswith("sklearn-falcon: warning: --model vit_tiny_patch16_224")
    assert "random" in line and "--pretrained" in line and "--checkpoint" in line
    assert _segment(tmp_path) == 0 and "warning" not in capsys.readouterr().err


def test_save_label_png_refuses_what_is_no_label_map(tmp_path):
    # float ids were truncated without a word (1.7 saved as 1, NaN as 0), and
    # an (H, W, 1) map said Pillow's "Cannot handle this data type"
    from sklearn_falcon.cli import save_label_png

    path = tmp_path / "l.png"
    for labels in (np.array([[0.5, 1.7]]), np.array([[np.nan, 1.0]])):
        with pytest.raises(ValueError, match="must be integers; got labels of dtype"):
            save_label_png(labels, path)
    with pytest.raises(ValueError, match=r"2-D label map \(H, W\); got shape"):
        save_label_png(np.zeros((2, 2, 1), int), path)
    assert not path.exists()
    save_label_png(np.array([[0.0, 3.0]]), path)  # whole numbers are ids
    assert np.asarray(Image.open(path)).tolist() == [[0, 3]]


def test_cli_demo_with_one_cluster(capsys):
    # `sklearn-falcon demo --n-clusters 1` printed FalconNCut's line, then
    # "sklearn-falcon: error: ValueError" (scikit-learn's lobpcg spectral
    # embedding raises a bare ValueError for one component) and exit 1
    assert main(["demo", "--n-clusters", "1"]) == 0
    captured = capsys.readouterr()
    assert "FalconNCut" in captured.out and "error" not in captured.err
    assert "SpectralClustering: skipped" in captured.out


def test_cli_expands_a_wildcard_the_shell_left(tmp_path, capsys):
    # cmd and PowerShell pass `photos\*.png` as it is (as bash does a pattern
    # that matches nothing): "Image file not found: 'photos/*.png'", so a
    # folder could not be segmented on Windows without a loop
    photos = tmp_path / "photos"
    photos.mkdir()
    _write(photos, "b.png")
    _write(photos, "a.png", shape=(32, 48))
    (photos / "sub.png").mkdir()  # a folder the pattern matches is no image
    out = tmp_path / "out"
    assert main(["segment", str(photos / "*.png"), "-k", "2", "-o", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in printed] == [
        str(photos / "a.png"), str(photos / "b.png")]
    assert sorted(p.name for p in out.iterdir()) == [
        "a_labels.png", "a_overlay.png", "b_labels.png", "b_overlay.png"]
    rc = main(["segment", str(photos / "*.jpg"), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "No image file matches" in err and "*.jpg" in err


def test_cli_a_folder_is_refused_with_the_wildcard_to_pass(tmp_path, capsys):
    """A folder said "Not a file: 'photos'"; it names the wildcard to pass,
    whose expansion leaves out hidden files (macOS's ``._a.png`` and
    ``.DS_Store``, a ``.thumbnails`` folder), as the shells' does."""
    photos = tmp_path / "photos"
    (photos / ".thumbnails").mkdir(parents=True)
    _write(photos, "a.png")
    _write(photos / ".thumbnails", "a.png")
    (photos / "._a.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")
    (photos / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    out = tmp_path / "out"
    rc = main(["segment", str(photos), "-o", str(out)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and f"'{photos}' is a directory" in line, line
    assert str(photos / "*.jpg") in line, line
    assert main(["segment", str(photos / "*"), "-k", "2", "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["a_labels.png", "a_overlay.png"]


def test_cli_unreadable_checkpoint_does_not_advise_weights_only_false(tmp_path, capsys):
    # torch's message for a file it cannot read with weights_only=True
    # advised "Re-running torch.load with weights_only set to False", which
    # the loader never does (it would run the file's code)
    torch = pytest.importorskip("torch")
    pytest.importorskip("timm")
    garbage, pickled = tmp_path / "garbage.pth", tmp_path / "pickled.pth"
    garbage.write_bytes(b"not a checkpoint")
    torch.save({"model": {}, "args": object}, pickled)  # a training checkpoint
    for ckpt in (garbage, pickled):
        rc = _segment(tmp_path, "--model", "vit_tiny_patch16_224", "--checkpoint",
                      str(ckpt))
        line = _one_error_line(capsys.readouterr().err)
        assert rc == 1 and "Cannot read checkpoint" in line, line
        assert "Re-running" not in line and "state dict alone" in line, line


@pytest.mark.parametrize("args,option", [
    (["--max-tokens", "0"], "--max-tokens"), (["--seed", "-1"], "--seed"),
    (["--power", "-1"], "--power"), (["--device", "bogus"], "device"),
])
def test_cli_checks_the_options_before_any_work(tmp_path, capsys, monkeypatch,
                                                args, option):
    # --max-tokens 0 or --seed -1 were refused at the first image, after a
    # ViT was built and --out made, by a message naming max_tokens and
    # random_state, which are no options of the command
    from sklearn_falcon.image import ImageSegmenter

    path, _ = _write(tmp_path)
    built = []
    monkeypatch.setattr(ImageSegmenter, "_get_extractor",
                        lambda self: built.append(1))
    rc = main(["segment", str(path), "-o", str(tmp_path / "out"), *args])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and built == [] and not (tmp_path / "out").exists()
    assert option in line


@pytest.mark.parametrize("args,said", [
    (["segment", "IMG", "--device", "bogus"], "got --device 'bogus'"),
    (["segment", "IMG", "--segments", "500"], "fewer than --segments 500"),
    (["segment", "IMG", "--patch-size", "200"], "a smaller --patch-size"),
    (["segment", "IMG", "--layer", "3"], "--layer 3 is a ViT parameter; "
     "--model 'color'"),
    (["segment", "IMG", "--max-tokens", "2"], "resized for --max-tokens 2"),
    (["demo", "--n-clusters", "5000"], "--n-clusters 5000 must be <="),
])
def test_cli_messages_name_the_options(tmp_path, capsys, args, said):
    """The messages named the estimator's parameters, which are no options
    of the command: "got device='bogus'", "fewer than n_segments=500", "a
    smaller patch_size", "n_clusters=5000 must be <= n_samples=1797"."""
    path, _ = _write(tmp_path)
    args = [str(path) if a == "IMG" else a for a in args]
    rc = main([*args, "-o", str(tmp_path / "out")] if args[0] == "segment" else args)
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and said in line, line
    for name in ("device=", "n_segments", "patch_size", "layer=", "model=",
                 "max_tokens", "n_clusters"):
        assert name not in line, line


def test_cli_messages_leave_a_file_name_as_it_is(tmp_path, capsys):
    # "my max_tokens.png" is no parameter: it was shown as "my --max-tokens.png"
    missing = tmp_path / "my max_tokens.png"
    assert main(["segment", str(missing), "-o", str(tmp_path / "out")]) == 1
    assert str(missing) in _one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("args,option", [
    (["--n-clusters", "0"], "--n-clusters"), (["--n-neighbors", "0"], "--n-neighbors"),
    (["--random-state", "-1"], "--random-state"),
])
def test_cli_demo_names_the_option_it_refuses(capsys, monkeypatch, args, option):
    # `demo --random-state -1` printed the digits' line, then "The
    # 'random_state' parameter of FalconNCut must be ...": a parameter of no
    # option of the command, as segment's messages did before
    from sklearn_falcon import FalconNCut

    fits = []
    monkeypatch.setattr(FalconNCut, "fit", lambda self, X: fits.append(1))
    rc = main(["demo", "--no-spectral", *args])
    captured = capsys.readouterr()
    line = _one_error_line(captured.err)
    assert rc == 1 and fits == [] and captured.out == ""
    assert line.startswith(f"sklearn-falcon: error: {option}: "), line


@pytest.mark.parametrize("sub", ["", "sub"])
def test_cli_unwritable_out_is_refused_before_any_work(tmp_path, capsys,
                                                       monkeypatch, sub):
    # an --out that cannot be written (a read-only directory or file system)
    # failed after the first image was segmented, with "[Errno 13] Permission
    # denied: 'out/.img_labels.png.3f2a9c0d1e4b.tmp'", a file never asked for
    from sklearn_falcon.image import ImageSegmenter

    path, _ = _write(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: (
        False if os.path.samefile(p, locked) else access(p, mode, **kw)))
    built = []
    monkeypatch.setattr(ImageSegmenter, "_get_extractor",
                        lambda self: built.append(1))
    rc = main(["segment", str(path), "-o", str(locked / sub)])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and built == [] and list(locked.iterdir()) == []
    assert "--out" in line and "not writable" in line and ".tmp" not in line


def test_save_label_png_names_the_file_it_cannot_write(tmp_path):
    # a missing (or read-only) folder said "[Errno 2] No such file or
    # directory: '.../.labels.png.3f2a9c0d1e4b.tmp'", a file never named
    from sklearn_falcon.cli import save_label_png

    target = tmp_path / "missing" / "labels.png"
    with pytest.raises(FileNotFoundError) as exc:
        save_label_png(np.zeros((2, 2), int), target)
    assert exc.value.filename == str(target) and ".tmp" not in str(exc.value)


def test_cli_warnings_are_one_line_each(capsys, monkeypatch):
    # the demo's kNN graph with one neighbour warned twice (one per fit) as
    # "<frozen runpy>:88: UserWarning: The affinity graph is not fully
    # connected..." followed by the source line, under python -m
    import warnings

    def warn_twice(args):
        for _ in range(2):
            warnings.warn("The affinity graph is\n not fully connected.",
                          UserWarning, stacklevel=2)

    from sklearn_falcon import cli

    monkeypatch.setattr(cli, "_run_demo", warn_twice)
    assert main(["--no-spectral"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "sklearn-falcon: warning: The affinity graph is not fully connected."]


@pytest.mark.parametrize("buffering", ["line_buffering=True", "line_buffering=False"])
def test_cli_a_closed_output_pipe_ends_it_quietly(tmp_path, buffering):
    # `sklearn-falcon segment ... | head -1` said "error: [Errno 32] Broken
    # pipe" (or "Exception ignored ... BrokenPipeError") when head had gone
    paths = [str(_write(tmp_path, f"im{i}.png")[0]) for i in range(3)]
    code = textwrap.dedent(f"""
        import sys
        from sklearn_falcon.cli import main
        sys.stdout.reconfigure({buffering})
        raise SystemExit(main(["segment", *{paths!r}, "--refine", "none",
                               "--out", {str(tmp_path / "out")!r}]))
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    proc.stderr.close()
    rc = proc.wait(timeout=300)
    assert rc == 1
    assert "Broken pipe" not in err and "BrokenPipeError" not in err, err
    assert "error" not in err, err


def test_cli_a_size_refusal_names_the_file(tmp_path, capsys):
    # "Image of size 4x40 (HxW) is smaller than one 8x8 patch": which file?
    good, _ = _write(tmp_path)
    small, _ = _write(tmp_path, "strip.png", shape=(4, 40))
    rc = main(["segment", str(good), str(small), "-k", "3", "-o", str(tmp_path / "o")])
    line = _one_error_line(capsys.readouterr().err)
    assert rc == 1 and f"'{small}'" in line and "smaller than one 8x8" in line, line
    few, _ = _write(tmp_path, "few.png", shape=(8, 16))
    assert main(["segment", str(few), "-k", "3", "-o", str(tmp_path / "o")]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert f"'{few}'" in line and "fewer than --segments 3" in line, line


def test_cli_counts_of_one_are_singular(tmp_path, capsys):
    # "img.png: 1 segments -> ...", "yields only 1 patch tokens"
    path, _ = _write(tmp_path, shape=(8, 8))
    assert main(["segment", str(path), "-k", "1", "-o", str(tmp_path / "o")]) == 0
    assert ": 1 segment -> " in capsys.readouterr().out
    assert main(["segment", str(path), "-k", "2", "-o", str(tmp_path / "o")]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "yields only 1 patch token, fewer than --segments 2" in line, line


def test_cli_writes_a_long_output_name_that_fits(tmp_path, capsys):
    # "[Errno 36] File name too long" of a 247-character output name: its
    # temporary name was 265 (".NAME.3f2a9c0d1e4b.tmp"), over 255
    try:
        os.close(os.open(tmp_path / ("q" * 247), os.O_CREAT | os.O_WRONLY))
    except OSError:  # a file system of shorter names (eCryptfs: 143)
        pytest.skip("the file system takes no 247-character name")
    path, _ = _write(tmp_path, "p" * 236 + ".png")
    out = tmp_path / "o"
    assert main(["segment", str(path), "-k", "2", "-o", str(out)]) == 0, \
        capsys.readouterr().err
    assert sorted(len(f.name) for f in out.iterdir()) == [247, 248]


def test_cli_a_directory_at_an_output_name_is_refused_before_any_work(
        tmp_path, capsys, monkeypatch):
    # "[Errno 21] Is a directory: 'o/.img_labels.png.3f2a9c0d1e4b.tmp' ->
    # 'o/img_labels.png'", after the image was segmented
    from sklearn_falcon.image import ImageSegmenter

    path, _ = _write(tmp_path)
    (tmp_path / "o" / "img_labels.png").mkdir(parents=True)
    monkeypatch.setattr(ImageSegmenter, "segment", lambda *a: pytest.fail("work"))
    assert main(["segment", str(path), "-o", str(tmp_path / "o")]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert f"'{tmp_path / 'o' / 'img_labels.png'}'" in line and "is a directory" in line
    assert ".tmp" not in line


def test_cli_an_output_name_too_long_is_refused_before_any_work(
        tmp_path, capsys, monkeypatch):
    # "[Errno 36] File name too long" of NAME_overlay.png (256 characters),
    # after the image was segmented and NAME_labels.png written
    from sklearn_falcon.image import ImageSegmenter

    if not hasattr(os, "pathconf") or os.pathconf(tmp_path, "PC_NAME_MAX") != 255:
        pytest.skip("a file system of another name limit")
    path, _ = _write(tmp_path, "p" * 244 + ".png")
    monkeypatch.setattr(ImageSegmenter, "segment", lambda *a: pytest.fail("work"))
    assert main(["segment", str(path), "-o", str(tmp_path / "o")]) == 1
    line = _one_error_line(capsys.readouterr().err)
    assert "p" * 244 + "_overlay.png' of" in line and "255 bytes" in line, line
    assert not (tmp_path / "o").exists()
