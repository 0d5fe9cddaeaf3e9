"""The structure of the package: imports run one way, no module is too long.

The layers below are those of ``docs/architecture.rst``, from the bottom up.
A module may import modules of its own room (a subpackage, or itself) and of
lower layers only, lazily (inside a function) or not; and no set of modules
imports itself in a circle.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sklearn_falcon"

LAYERS = [
    {"_jit", "_miou", "_memory", "_log", "_structure"},
    {"_threads"},
    {"_backends", "_affinity"},
    {"_solver", "_stats"},
    {"_inits", "metrics", "plotting"},
    {"_sharded", "_graph"},
    {"_falcon", "_batch"},
    {"image"},
    {"__init__", "cli", "prebuild"},
    {"__main__"},
]
LAYER = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}
MAX_LINES = 600


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        yield ".".join(parts), path


def _imports(name, path):
    """Dotted names (inside the package) that the module imports."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    base = name.split(".") if is_pkg else name.split(".")[:-1]
    if name == "__init__":
        base = []
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                up = node.level - 1
                anchor = base[: len(base) - up] if up else base
                mod = anchor + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("sklearn_falcon"):
                mod = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                out.add(".".join(mod + [alias.name]))
                out.add(".".join(mod))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sklearn_falcon."):
                    out.add(".".join(alias.name.split(".")[1:]))
    return {m for m in out if m}


def _room(dotted):
    return dotted.split(".")[0]


MODULES = dict(_modules())


def _resolve(dotted):
    """The module a dotted import name refers to (a name imported from a
    module resolves to the module)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted


def test_every_room_has_a_layer():
    assert {_room(m) for m in MODULES} <= set(LAYER)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_run_one_way(name):
    here = LAYER[_room(name)]
    for dotted in _imports(name, MODULES[name]):
        target = _resolve(dotted)
        if not target or _room(target) == _room(name):
            continue
        assert LAYER[_room(target)] < here, (
            f"{name} (layer {here}) imports {target} "
            f"(layer {LAYER[_room(target)]})")


def test_no_import_cycles():
    graph = {name: {_resolve(d) for d in _imports(name, path)} - {"", name}
             for name, path in MODULES.items()}
    # a package's __init__ re-exports its modules; an import of the package
    # by one of them is an import of the re-exported names, not a cycle
    state = {}

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph.get(node, ()):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue
            if state.get(nxt) == "open":
                raise AssertionError(f"import cycle: {' -> '.join(stack + [nxt])}")
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_600_lines(name):
    n = len(MODULES[name].read_text().splitlines())
    assert n <= MAX_LINES, f"{name}: {n} lines"
