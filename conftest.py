"""pytest's collection of the package's doctests (``--doctest-modules`` in
setup.cfg) where torch or timm is not installed (the core and its tests run
without them): the modules that import them at their top are left out, and
the examples that run a torch problem or build a timm model are skipped."""

import importlib.util
from pathlib import Path

import pytest

_PACKAGE = Path(__file__).resolve().parent / "sklearn_falcon"
_MISSING = [name for name in ("torch", "timm")
            if importlib.util.find_spec(name) is None]
# examples in modules that do not import what they need at their top
_EXAMPLES_NEEDING = {
    "sklearn_falcon._backends.make_problem_from_features": ("torch",),
    "sklearn_falcon.image._timm.TimmFeatures": ("torch", "timm"),
}

collect_ignore = []
for _name in _MISSING:
    for _path in sorted(_PACKAGE.rglob("*.py")):
        _text = _path.read_text(encoding="utf-8")
        if f"\nimport {_name}\n" in _text or f"\nfrom {_name} import" in _text:
            collect_ignore.append(str(_path))


def pytest_collection_modifyitems(config, items):
    for item in items:
        missing = [name for name in _EXAMPLES_NEEDING.get(item.name, ())
                   if name in _MISSING]
        if missing:
            item.add_marker(pytest.mark.skip(reason=(
                f"the example needs {' and '.join(missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not installed")))
