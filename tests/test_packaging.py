"""The package is ready to publish: ``python -m build`` gives an sdist and a
wheel that hold the LICENSE, with no warnings, and ``twine check`` passes.

Needs ``build`` and ``twine`` (the ``[test]`` extra); the build runs without
isolation on a copy of the sources, so it needs no network.
"""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["pyproject.toml", "setup.cfg", "README.rst", "LICENSE", "CHANGELOG.rst",
           "CITATION.cff", "MANIFEST.in", "conftest.py", "sklearn_falcon", "tests",
           "benchmarks"]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    pytest.importorskip("build")
    pytest.importorskip("twine")
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.nbi", "*.nbc", "*.pyc", ".hypothesis", "_raw"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("dist")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    res = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
         str(src)], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out, res.stdout + res.stderr


def test_build_has_no_warnings(dist):
    _, log = dist
    warnings = [ln for ln in log.splitlines()
                if "warning" in ln.lower() or "deprecat" in ln.lower()]
    assert not warnings, "\n".join(warnings)


def test_sdist_and_wheel_ship_the_license(dist):
    out, _ = dist
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"LICENSE", "CHANGELOG.rst", "CITATION.cff",
            "sklearn_falcon/py.typed"} <= names
    assert not [n for n in names if n.endswith((".nbi", ".nbc", ".pyc"))]
    with zipfile.ZipFile(wheel) as zf:
        wnames = set(zf.namelist())
        meta = zf.read(next(n for n in wnames if n.endswith("dist-info/METADATA")))
    assert any(n.endswith("dist-info/licenses/LICENSE") for n in wnames)
    assert "sklearn_falcon/py.typed" in wnames
    meta = meta.decode()
    assert "License-Expression: BSD-3-Clause" in meta
    assert "Project-URL: Documentation" in meta
    assert "Provides-Extra: cli" in meta
    assert "BSD 3-Clause License" in (ROOT / "LICENSE").read_text()


def test_sdist_holds_what_its_tests_need(dist):
    """The sdist's tests run from it: setuptools packs only ``tests/test*.py``,
    so their helpers (``shared.py``, ``behaviour_cases.py``), ``conftest.py``
    files, the pinned results (``tests/data/*.json``) and the planted graphs
    they import from ``benchmarks/`` were left out and pytest stopped at
    collection (``No module named 'shared'``, then ``'benchmarks'``)."""
    out, _ = dist
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    needed = {"conftest.py"} | {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("*")
        if p.is_file() and p.suffix in (".py", ".json")
        and "__pycache__" not in p.parts}
    needed |= {p.relative_to(ROOT).as_posix()
               for p in (ROOT / "benchmarks").glob("*.py")}
    needed.add("benchmarks/data/dinov2_onnx_reference.npz")
    assert not needed - names, sorted(needed - names)
    assert not [n for n in names if "__pycache__" in n or ".hypothesis" in n
                or n.startswith("benchmarks/results/")]
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:  # the wheel holds the package only
        top = {n.split("/", 1)[0] for n in zf.namelist()}
    assert all(t == "sklearn_falcon" or t.endswith(".dist-info") for t in top), top


def test_twine_check_passes(dist):
    out, _ = dist
    res = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                          *map(str, sorted(out.iterdir()))],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("PASSED") == 2


def test_readme_links_are_absolute():
    # relative links (``docs/``) are broken on PyPI, which shows the README
    text = (ROOT / "README.rst").read_text(encoding="utf-8")
    targets = re.findall(r"<([^<>]+)>`_", text)
    assert all(t.startswith(("https://", "http://")) for t in targets), targets
    assert "https://sklearn-falcon.readthedocs.io" in text
    assert "--index-url https://download.pytorch.org/whl/cpu" in text  # CPU torch


def test_readme_test_command_is_the_one_ci_runs():
    ci = ROOT / ".ci" / "run"
    if not ci.exists():
        pytest.skip("no .ci/run (not a clone of the repository)")
    readme = (ROOT / "README.rst").read_text(encoding="utf-8")
    command = 'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[all]"'
    assert command + " && python -m pytest" in readme
    assert command + " && python -m pytest" in ci.read_text(encoding="utf-8")
    assert "pip install -e . && python -m sklearn_falcon" in readme


def test_ci_oldest_versions_are_pyprojects_lower_bounds():
    """``.ci/run`` tests the core on ``.ci/oldest.txt``: the lower bounds of
    pyproject.toml's dependencies, each pinned, and no other package."""
    if not (ROOT / ".ci" / "oldest.txt").exists():
        pytest.skip("no .ci/oldest.txt (not a clone of the repository)")
    text = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies = \[(.*?)\]", text, re.S | re.M).group(1)
    bounds = dict(re.findall(r'"([A-Za-z0-9_.-]+)>=([0-9.]+)"', deps))
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==([0-9.]+)$",
                           (ROOT / ".ci" / "oldest.txt").read_text(), re.M))
    assert len(bounds) == deps.count('"') // 2  # every dependency has one
    assert pins.keys() == bounds.keys()
    for name, low in bounds.items():
        # the oldest release of the bound's series: 1.24 admits 1.24.0, and
        # the pin may be its latest patch, never a later minor version
        assert pins[name].split(".")[:len(low.split("."))] == low.split("."), name
    python = re.search(r'^requires-python = ">=([0-9.]+)"', text, re.M).group(1)
    assert f"python{python}" in (ROOT / ".ci" / "run").read_text()
