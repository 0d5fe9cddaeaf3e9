"""The core must import and work with torch and timm absent."""

import subprocess
import sys
import textwrap

import pytest

BLOCK = """
import sys
class _Blocker:
    # make `import torch` / `import timm` fail as if they were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "timm", "torchvision"):
            raise ImportError(f"No module named {name!r} (blocked by the test)")
        return None
sys.meta_path.insert(0, _Blocker())
"""


# the same, with Dask blocked too
BLOCK_DASK = BLOCK.replace('("torch", "timm", "torchvision")',
                           '("torch", "timm", "torchvision", "dask", "distributed")')


def _run(code, block=BLOCK):
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(block) + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_core_works_without_torch():
    out = _run("""
        import numpy as np
        from sklearn.datasets import make_blobs
        import sklearn_falcon
        from sklearn_falcon import FalconNCut, normalized_cut
        X, _ = make_blobs(200, centers=3, random_state=0)
        est = FalconNCut(3, random_state=0).fit(X)
        assert est.backend_ == "numba"
        assert "torch" not in sys.modules
        print("ok", round(est.ncut_, 6))
    """)
    assert out.startswith("ok")


def test_backend_torch_without_torch_raises_clear_importerror():
    out = _run("""
        import numpy as np
        from sklearn_falcon import FalconNCut
        X = np.random.default_rng(0).random((50, 2))
        try:
            FalconNCut(2, backend="torch").fit(X)
        except ImportError as exc:
            msg = str(exc)
            assert "backend='torch' requires PyTorch" in msg, msg
            # quoted: unquoted brackets are a glob in zsh ("no matches found")
            assert "pip install 'sklearn-falcon[torch]'" in msg, msg
            print("raised")
    """)
    assert out.strip() == "raised"



def test_cuda_device_without_torch_names_the_cpu_as_the_alternative():
    # device='cuda' without torch advised "use backend='numba'", which runs
    # on the CPU only (a second error), and ImageSegmenter has no backend
    out = _run("""
        import numpy as np
        from sklearn_falcon import FalconNCut, ImageSegmenter, falcon_batch
        X = np.random.default_rng(0).random((50, 2))
        img = np.random.default_rng(0).integers(0, 255, (32, 32, 3), np.uint8)
        calls = [lambda: FalconNCut(2, device="cuda").fit(X),
                 lambda: FalconNCut(2, backend="torch", device="cuda:1").fit(X),
                 lambda: falcon_batch([X], 2, device="cuda"),
                 lambda: ImageSegmenter(n_segments=2, device="cuda").segment(img)]
        for call in calls:
            try:
                call()
            except ImportError as exc:
                msg = str(exc)
                assert "device='cuda" in msg and "requires PyTorch" in msg, msg
                assert "sklearn-falcon[torch]" in msg, msg
                assert "use device='cpu'" in msg and "backend='numba'" not in msg, msg
                print("raised")
    """)
    assert out.split() == ["raised"] * 4


def test_offline_image_segmenter_without_torch():
    pytest.importorskip("PIL")
    out = _run("""
        import numpy as np
        from sklearn_falcon import ImageSegmenter
        rng = np.random.default_rng(0)
        img = np.zeros((64, 96, 3), dtype=np.uint8)
        img[:, 48:] = 200
        img = (img + rng.integers(0, 20, img.shape)).astype(np.uint8)
        labels = ImageSegmenter(n_segments=2, random_state=0).segment(img)
        assert labels.shape == (64, 96)
        assert "torch" not in sys.modules
        print("ok")
    """)
    assert out.strip() == "ok"


def test_core_works_without_dask():
    out = _run("""
        import numpy as np
        from sklearn.datasets import make_blobs
        from sklearn_falcon import FalconNCut
        from sklearn_falcon._backends import BACKENDS, resolve_backend
        X, _ = make_blobs(200, centers=3, random_state=0)
        est = FalconNCut(3, random_state=0).fit(X)
        assert est.backend_ == "numba"
        assert not BACKENDS["dask"].is_available()
        assert resolve_backend("auto", "cpu") == ("numba", "cpu")
        assert "dask" not in sys.modules
        print("ok")
    """, block=BLOCK_DASK)
    assert out.startswith("ok")


def test_backend_dask_without_dask_raises_clear_importerror():
    out = _run("""
        import numpy as np
        from sklearn_falcon import FalconNCut
        W = np.ones((20, 20))
        try:
            FalconNCut(2, affinity="precomputed", backend="dask").fit(W)
        except ImportError as exc:
            msg = str(exc)
            assert "backend='dask' requires Dask" in msg, msg
            assert "pip install 'sklearn-falcon[dask]'" in msg, msg
            print("raised")
    """, block=BLOCK_DASK)
    assert out.strip() == "raised"


# torch and dask installed, but their import fails (a CUDA library missing)
BROKEN = """
import importlib.abc, importlib.machinery, sys
class _Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name in ("torch", "dask"):
            return importlib.machinery.ModuleSpec(name, self)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise ImportError("libcudnn.so.9: cannot open shared object file",
                          name=module.__name__ + "._C")
sys.meta_path.insert(0, _Broken())
"""


def test_a_broken_torch_or_dask_is_not_said_to_be_missing():
    """An installed torch whose import fails (a CUDA library missing) was
    reported as "requires PyTorch, which is not installed. Install it with
    pip install ...", without the import's error (the command line prints
    the message alone); Dask likewise."""
    out = _run("""
        import numpy as np
        from sklearn_falcon import FalconNCut
        X = np.random.default_rng(0).random((20, 2))
        for backend, X in (("torch", X), ("dask", np.ones((20, 20)))):
            try:
                FalconNCut(2, affinity="precomputed", backend=backend).fit(X)
            except ImportError as exc:
                msg = str(exc)
                assert "not installed" not in msg, msg
                assert "installed but cannot be imported" in msg, msg
                assert "libcudnn.so.9" in msg, msg
                print("raised")
    """, block=BROKEN)
    assert out.split() == ["raised", "raised"]


def test_dir_lists_the_lazily_imported_image_segmenter():
    """``ImageSegmenter`` is imported on first use (a module ``__getattr__``)
    but was missing from ``dir(sklearn_falcon)``, so IPython's completion
    and ``help`` did not offer it; listing it imports nothing."""
    out = _run("""
        import sklearn_falcon
        names = dir(sklearn_falcon)
        assert set(sklearn_falcon.__all__) <= set(names), names
        assert "sklearn_falcon.image" not in sys.modules
        assert names == sorted(names)
        print("ok")
    """)
    assert out.startswith("ok")


# Pillow blocked (the core install: no [cli] or [image] extra)
BLOCK_PIL = BLOCK.replace('("torch", "timm", "torchvision")',
                          '("torch", "timm", "torchvision", "PIL")')


def test_offline_segmenter_resizing_without_pillow_names_the_extra():
    """An image larger than the token budget is resized with Pillow: without
    it, ``segment`` raised a bare "No module named 'PIL'" (a smaller image,
    which is not resized, works with the core alone)."""
    out = _run("""
        import numpy as np
        from sklearn_falcon import ImageSegmenter
        img = np.zeros((64, 96, 3), dtype=np.uint8)
        img[:, 48:] = 200
        seg = ImageSegmenter(n_segments=2, random_state=0)
        assert seg.segment(img).shape == (64, 96)  # not resized: no Pillow needed
        try:
            ImageSegmenter(n_segments=2, max_tokens=16, random_state=0).segment(img)
        except ImportError as exc:
            msg = str(exc)
            assert "pip install 'sklearn-falcon[cli]'" in msg, msg
            assert "max_tokens" in msg, msg
            print("raised")
    """, block=BLOCK_PIL)
    assert out.strip() == "raised"


def test_a_broken_pillow_is_not_said_to_be_missing(tmp_path):
    """An installed Pillow whose import fails (its C extension, a missing
    libjpeg) was reported as "needs Pillow, which is not installed: pip
    install ...", without the import's error, where torch and Dask say
    theirs; reading a file, resizing and the command line alike."""
    np = pytest.importorskip("numpy")
    Image = pytest.importorskip("PIL.Image")

    path = tmp_path / "img.png"
    Image.fromarray(np.zeros((64, 96, 3), np.uint8)).save(path)
    block = BROKEN.replace('("torch", "dask")', '("PIL",)').replace(
        "libcudnn.so.9", "libjpeg.so.8")
    out = _run(f"""
        import contextlib, io
        import numpy as np
        from sklearn_falcon import ImageSegmenter
        from sklearn_falcon.cli import main
        from sklearn_falcon.image import load_image
        img = np.zeros((64, 96, 3), dtype=np.uint8)
        for call in (lambda: load_image({str(path)!r}),
                     lambda: ImageSegmenter(n_segments=2, max_tokens=16).segment(img)):
            try:
                call()
            except ImportError as exc:
                msg = str(exc)
                assert "not installed" not in msg, msg
                assert "installed but cannot be imported" in msg, msg
                assert "libjpeg.so.8" in msg, msg
                print("raised")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["segment", {str(path)!r}, "--out", {str(tmp_path)!r}])
        assert rc == 1 and "libjpeg.so.8" in err.getvalue(), err.getvalue()
        assert "not installed" not in err.getvalue(), err.getvalue()
        print("raised")
    """, block=block)
    assert out.split() == ["raised"] * 3


def test_timm_features_says_whether_torch_is_missing_or_broken():
    """An installed torch whose import fails (a CUDA library missing) made
    ``TimmFeatures`` say "requires torch and timm, which are not installed",
    where the torch backend says "installed but cannot be imported"; both
    go through one mechanism, as Pillow's message does, which said "which
    is not installed: pip install ..." in words of its own."""
    out = _run("""
        from sklearn_falcon.image import TimmFeatures
        try:
            TimmFeatures("vit_tiny_patch16_224")
        except ImportError as exc:
            msg = str(exc)
            assert "not installed" not in msg, msg
            assert msg.startswith("TimmFeatures(model='vit_tiny_patch16_224') "
                                  "requires PyTorch, which is installed but "
                                  "cannot be imported (ImportError: libcudnn"), msg
            print("raised")
    """, block=BROKEN)
    assert out.split() == ["raised"]
    out = _run("""
        from sklearn_falcon.image import TimmFeatures
        from sklearn_falcon.image._io import import_pillow
        for call in (lambda: TimmFeatures("vit_tiny_patch16_224"),
                     lambda: import_pillow("Reading image files needs Pillow")):
            try:
                call()
            except ImportError as exc:
                msg = str(exc)
                assert (", which is not installed. Install it with `pip install "
                        "'sklearn-falcon[") in msg, msg
                print("raised")
    """, block=BLOCK.replace('"torchvision")', '"torchvision", "PIL")'))
    assert out.split() == ["raised"] * 2
