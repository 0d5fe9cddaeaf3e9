import os

os.environ["HF_HUB_OFFLINE"] = "1"

import subprocess
import sys

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
        (["GOOD", "--model", "no_such_vit_model"], "Unknown timm model"),
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
               "--out", str(out), "-q"])
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
