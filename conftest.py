"""pytest's collection of the package's doctests (``--doctest-modules`` in
setup.cfg) where torch or timm is not installed (the core and its tests run
without them): the modules that import them at their top are left out, and
the examples that run a torch problem are skipped."""

import importlib.util
from pathlib import Path

import pytest

_PACKAGE = Path(__file__).resolve().parent / "sklearn_falcon"
_MISSING = [name for name in ("torch", "timm")
            if importlib.util.find_spec(name) is None]
# examples in modules that do not import torch themselves
_EXAMPLES_NEEDING_TORCH = {"sklearn_falcon._backends.make_problem_from_features"}

collect_ignore = []
for _name in _MISSING:
    for _path in sorted(_PACKAGE.rglob("*.py")):
        _text = _path.read_text(encoding="utf-8")
        if f"\nimport {_name}\n" in _text or f"\nfrom {_name} import" in _text:
            collect_ignore.append(str(_path))


def pytest_collection_modifyitems(config, items):
    if "torch" not in _MISSING:
        return
    skip = pytest.mark.skip(reason="the example needs torch, which is not installed")
    for item in items:
        if item.name in _EXAMPLES_NEEDING_TORCH:
            item.add_marker(skip)
