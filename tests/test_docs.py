"""Tests of the documentation.

* Every public class and function has the numpydoc sections a user expects
  (Parameters, Returns or Attributes, Examples with a doctest).
* The code of the narrative pages (getting started, user guide) runs.
* When the HTML documentation has been built (``make -C docs html``), the API
  page lists every public name and links to a page documenting it, and every
  gallery example has its page, a thumbnail and at least one figure.  These
  checks are skipped when ``docs/_build/html`` does not exist.
"""

import ast
import doctest
import inspect
import textwrap
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

numpydoc_docscrape = pytest.importorskip("numpydoc.docscrape")

import sklearn_falcon  # noqa: E402
import sklearn_falcon.image  # noqa: E402
import sklearn_falcon.metrics  # noqa: E402
import sklearn_falcon.plotting  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"
EXAMPLES = ROOT / "examples"
PUBLIC_MODULES = (sklearn_falcon, sklearn_falcon.metrics, sklearn_falcon.image,
                  sklearn_falcon.plotting)


def public_names():
    """``(module name, name, object)`` for every public name."""
    out = []
    for mod in PUBLIC_MODULES:
        for name in mod.__all__:
            if name.startswith("__"):  # __version__
                continue
            out.append((mod.__name__, name, getattr(mod, name)))
    return out


def public_objects():
    """Each public class or function once, with its public names."""
    seen = {}
    for modname, name, obj in public_names():
        seen.setdefault(id(obj), (obj, []))[1].append(f"{modname}.{name}")
    return [(names[0], obj) for obj, names in seen.values()]


def test_public_names_are_importable():
    names = public_names()
    assert names, "no public names found"
    for modname, name, obj in names:
        assert inspect.isclass(obj) or inspect.isfunction(obj), (
            f"{modname}.{name} is neither a class nor a function"
        )


# --------------------------------------------------------- numpydoc sections
def _has_parameters(obj):
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):  # pragma: no cover - builtins
        return False
    return any(p.name not in ("self", "cls") for p in sig.parameters.values())


def _returns_value(func):
    """Whether ``func`` returns (or yields) a value somewhere in its body."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):  # pragma: no cover - no source
        return True
    body = tree.body[0]
    stack = list(body.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                             ast.ClassDef)):
            continue  # nested scopes return for themselves
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None
        ):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


@pytest.mark.parametrize(
    "qualname, obj", public_objects(), ids=[q for q, _ in public_objects()]
)
def test_numpydoc_sections(qualname, obj):
    doc = inspect.getdoc(obj)
    assert doc, f"{qualname} has no docstring"
    if inspect.isclass(obj):
        parsed = numpydoc_docscrape.ClassDoc(obj, config={"show_class_members": False})
    else:
        parsed = numpydoc_docscrape.FunctionDoc(obj)
    missing = []
    if not parsed["Summary"]:
        missing.append("a one-line summary")
    if _has_parameters(obj) and not parsed["Parameters"]:
        missing.append("Parameters")
    if inspect.isclass(obj):
        if hasattr(obj, "fit") and not parsed["Attributes"]:
            missing.append("Attributes (fitted attributes of an estimator)")
    elif _returns_value(obj) and not (parsed["Returns"] or parsed["Yields"]):
        missing.append("Returns")
    examples = "\n".join(parsed["Examples"])
    if ">>>" not in examples:
        missing.append("Examples with a doctest (>>>)")
    assert not missing, f"{qualname}: the docstring lacks {', '.join(missing)}"


def _documented(parsed):
    """``{name: type line}`` of a numpydoc Parameters section (a line may
    document several names, ``a, b : int``)."""
    out = {}
    for param in parsed["Parameters"]:
        for name in param.name.split(","):
            out[name.strip().lstrip("*")] = param.type
    return out


def _callables(qualname, obj):
    """``(name, function, parsed docstring)``: a function, or a class's
    ``__init__`` (documented on the class) and its own public methods."""
    if not inspect.isclass(obj):
        yield qualname, obj, numpydoc_docscrape.FunctionDoc(obj)
        return
    yield qualname, obj.__init__, numpydoc_docscrape.ClassDoc(
        obj, config={"show_class_members": False})
    for name, meth in inspect.getmembers(obj, inspect.isfunction):
        if not name.startswith("_") and meth.__qualname__.split(".")[0] == obj.__name__:
            yield f"{qualname}.{name}", meth, numpydoc_docscrape.FunctionDoc(meth)


def _same_default(stated, value):
    stated = stated.strip().strip("`").strip("'\"")
    if stated in (repr(value).strip("'\""), str(value)):
        return True
    try:  # 1e-6 for 1e-06
        return float(stated) == float(value)
    except (TypeError, ValueError):
        return False


@pytest.mark.parametrize(
    "qualname, obj", public_objects(), ids=[q for q, _ in public_objects()]
)
def test_every_parameter_is_documented_with_its_default(qualname, obj):
    # the signature and the Parameters section name the same parameters, and
    # a stated default is the signature's (public methods included)
    wrong = []
    for name, func, parsed in _callables(qualname, obj):
        try:
            params = inspect.signature(func).parameters
        except (TypeError, ValueError):  # pragma: no cover - builtins
            continue
        documented = _documented(parsed)
        named = {p.name: p for p in params.values() if p.name not in ("self", "cls")
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
        for pname, p in named.items():
            if pname not in documented:
                wrong.append(f"{name}: {pname} is not documented")
                continue
            stated = re.search(r"default\s*[=:]\s*(.+)$", documented[pname])
            if (stated and p.default is not p.empty
                    and not _same_default(stated.group(1), p.default)):
                wrong.append(f"{name}: {pname} documented with default="
                             f"{stated.group(1)}, but it is {p.default!r}")
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            wrong += [f"{name}: {d} is documented but not a parameter"
                      for d in documented if d not in named]
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------ narrative doctests
@pytest.mark.parametrize("page", ["getting_started.rst", "user_guide.rst",
                                  "dask.rst"])
def test_narrative_pages_run(page):
    path = DOCS / page
    if not path.exists():
        pytest.skip(f"docs/{page} does not exist")
    if page == "dask.rst":
        pytest.importorskip("distributed")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    result = doctest.testfile(
        str(path), module_relative=False, verbose=False, report=True,
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS,
    )
    assert result.attempted > 0, f"docs/{page} has no doctest"
    assert result.failed == 0, f"{result.failed} doctest(s) of docs/{page} failed"


# ------------------------------------------------------------- built HTML
class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.srcs, self.ids, self.text = [], [], set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "href" in attrs:
            self.hrefs.append(attrs["href"])
        if tag == "img" and "src" in attrs:
            self.srcs.append(attrs["src"])
        if "id" in attrs:
            self.ids.add(attrs["id"])

    def handle_data(self, data):
        self.text.append(data)


def _parse(path):
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.text = " ".join(parser.text)
    return parser


needs_html = pytest.mark.skipif(
    not (HTML / "index.html").exists(),
    reason="docs not built (run `make -C docs html`)",
)


@needs_html
def test_api_page_lists_every_public_name():
    api = HTML / "api.html"
    assert api.exists(), "docs/_build/html/api.html is missing"
    page = _parse(api)
    linked = {h.split("#")[0] for h in page.hrefs}
    documented = {}  # id(obj) -> the generated page that documents it
    for modname, name, obj in public_names():
        documented.setdefault(id(obj), set()).add(f"{modname}.{name}")
    problems = []
    for modname, name, obj in public_names():
        candidates = sorted(documented[id(obj)])
        pages = [c for c in candidates if (HTML / "generated" / f"{c}.html").exists()]
        if not pages:
            problems.append(f"{modname}.{name}: no generated page (tried {candidates})")
            continue
        target = pages[0]
        if f"generated/{target}.html" not in linked:
            problems.append(f"{modname}.{name}: api.html does not link to {target}")
        if name not in page.text:
            problems.append(f"{modname}.{name}: api.html does not show the name")
        ids = _parse(HTML / "generated" / f"{target}.html").ids
        if target not in ids:
            problems.append(f"{modname}.{name}: {target}.html does not document it")
    assert not problems, "\n".join(problems)


@needs_html
def test_gallery_pages_thumbnails_and_figures():
    scripts = sorted(EXAMPLES.glob("plot_*.py"))
    assert scripts, "no gallery example in examples/"
    gallery = HTML / "auto_examples" / "index.html"
    assert gallery.exists(), "the gallery index was not built"
    index = _parse(gallery)
    problems = []
    for script in scripts:
        stem = script.stem
        thumbs = [s for s in index.srcs if f"sphx_glr_{stem}_thumb" in s]
        if not thumbs:
            problems.append(f"{stem}: no thumbnail on the gallery index")
        elif not (gallery.parent / thumbs[0]).is_file():
            problems.append(f"{stem}: thumbnail file {thumbs[0]} is missing")
        page = HTML / "auto_examples" / f"{stem}.html"
        if not page.exists():
            problems.append(f"{stem}: no example page")
            continue
        figures = [s for s in _parse(page).srcs
                   if re.search(rf"sphx_glr_{stem}_\d+\.png$", s)]
        if not figures:
            problems.append(f"{stem}: the example page has no figure")
        for src in figures:
            if not (page.parent / src).is_file():
                problems.append(f"{stem}: figure {src} is missing")
    assert not problems, "\n".join(problems)


@needs_html
def test_gallery_outputs_show_no_warning():
    # the toy datasets' page printed FalconNCut's "not fully connected"
    # warning twice, with the build machine's path to the script, beside a
    # text that explains those graphs; an example catches what it expects
    problems = []
    for script in sorted(EXAMPLES.glob("plot_*.py")):
        page = HTML / "auto_examples" / f"{script.stem}.html"
        if page.exists():
            for hit in re.findall(r"\b\w*Warning: [^\n<]{0,80}", page.read_text()):
                problems.append(f"{script.stem}: {hit}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------ formulas and imports
def _docstrings():
    for qualname, obj in public_objects():
        yield qualname, inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            for name, member in vars(obj).items():
                if callable(member) and not name.startswith("_") and member.__doc__:
                    yield f"{qualname}.{name}", inspect.getdoc(member)


def test_docstrings_have_no_control_characters():
    # a formula whose backslashes were not escaped (\f, \t, \b) would come
    # out as control characters (a "\frac" in a plain string is "\x0crac")
    bad = [name for name, doc in _docstrings()
           if re.search(r"[\x00-\x08\x0b-\x1f]", doc)]
    assert not bad, bad


@pytest.mark.parametrize("obj", [sklearn_falcon.FalconNCut,
                                 sklearn_falcon.FalconNCut.predict,
                                 sklearn_falcon.metrics.normalized_cut,
                                 sklearn_falcon.metrics.normalized_association,
                                 sklearn_falcon.image.ImageSegmenter,
                                 sklearn_falcon.image.ColorPositionFeatures,
                                 sklearn_falcon.image.cosine_power_affinity,
                                 sklearn_falcon.image.select_n_segments])
def test_formulas_are_rendered_as_math(obj):
    doc = inspect.getdoc(obj)
    assert ".. math::" in doc or ":math:`" in doc


def test_public_examples_are_not_skipped():
    # the API page promises a doctested example for every public name: one
    # marked +SKIP is never run (TimmFeatures' needs no download; conftest.py
    # skips an example whose optional library is not installed)
    bad = [name for name, doc in _docstrings() if "doctest: +SKIP" in doc]
    assert not bad, bad


def test_no_plain_text_formula_in_a_public_docstring():
    # formulas outside :math: (examples aside) were written as code literals
    # such as ``W = minmax(cosine(tokens)) ** power``
    bad = []
    for name, doc in _docstrings():
        prose = re.sub(r":math:`[^`]*`", "", doc.split("Examples\n--------")[0])
        bad += [(name, plain) for plain in ("sum_k", "argmax_k", "max_k", " ** ",
                                            "sqrt(", "exp(") if plain in prose]
    assert not bad, bad


def test_gallery_imports_no_private_or_cli_helpers():
    for script in sorted(EXAMPLES.glob("plot_*.py")):
        tree = ast.parse(script.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module
                assert not (mod.startswith("sklearn_falcon") and (
                    mod == "sklearn_falcon.cli" or "._" in mod or mod.split(".")[-1]
                    .startswith("_"))), f"{script.name} imports from {mod}"


@needs_html
def test_source_pages_docs_links_resolve():
    # viewcode's [docs] links on the highlighted-source pages lead back to
    # the documentation of each object; the top-level aliases
    # (sklearn_falcon.ImageSegmenter, .normalized_cut) made them point at
    # anchors that do not exist
    modules = HTML / "_modules"
    assert modules.is_dir(), "no highlighted source pages were built"
    cache, broken = {}, []
    for page in sorted(modules.rglob("*.html")):
        for href in _parse(page).hrefs:
            if href.startswith(("http:", "https:", "mailto:", "#")):
                continue
            path, _, frag = href.partition("#")
            target = (page.parent / path).resolve()
            if target.suffix != ".html":
                continue
            if not target.exists():
                broken.append(f"{page.relative_to(HTML)} -> {href} (no page)")
                continue
            if frag:
                if target not in cache:
                    cache[target] = _parse(target).ids
                if frag not in cache[target]:
                    broken.append(f"{page.relative_to(HTML)} -> {href}")
    assert not broken, "\n".join(broken)


def test_every_module_has_a_source_page():
    # Sphinx's viewcode parses each module to build its highlighted source
    # page; a module it cannot parse (a ``**`` inside a decorator's dict, in
    # _batch) has no page, and the module index links to nothing
    pycode = pytest.importorskip("sphinx.pycode")
    failed = []
    for path in sorted((ROOT / "sklearn_falcon").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            pycode.ModuleAnalyzer.for_module(name).find_tags()
        except Exception as exc:  # noqa: BLE001 - report every failure
            failed.append(f"{name}: {exc}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("obj", [sklearn_falcon.FalconNCut, sklearn_falcon.falcon_batch,
                                 sklearn_falcon.metrics.normalized_cut,
                                 sklearn_falcon.metrics.normalized_association])
def test_clustering_examples_run_without_warnings(obj):
    # the class's example, the first a user copies, warned that its kNN graph
    # was not connected (make_blobs with cluster_std=0.5)
    import warnings

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for test in finder.find(obj, obj.__name__, globs={}):
            runner.run(test, out=lambda s: None)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{obj.__name__}'s example failed or warned"


@pytest.mark.parametrize("page", ["README.rst", "docs/index.rst"])
def test_first_example_of_a_page_runs_without_warnings(page):
    # the first code a user copies: the README's blobs (random_state=0) and
    # the home page's moons (noise=0.05) made kNN graphs of two components,
    # so the fits and the grid search warned; the README's grid search
    # searched FalconNCut(n_clusters=3) on 5 blobs beside an unused pipeline
    import warnings

    if not (ROOT / page).exists():  # an sdist holds the README, not docs/
        pytest.skip(f"{page} does not exist")
    text = (ROOT / page).read_text()
    block = re.search(r"\.\. code-block:: python\n\n(.*?)\n\S", text, re.S).group(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        namespace = {"print": lambda *args: None}
        exec(compile(textwrap.dedent(block), page, "exec"), namespace)
    if "gs" in namespace:
        assert namespace["gs"].best_estimator_[-1].n_clusters == 5


def test_readme_examples_need_only_the_core_and_the_cli_extra():
    # the README's image example imported skimage.data, which no extra of a
    # user's install provides (scikit-image is in [test] and [bench])
    if not (ROOT / "README.rst").exists():
        pytest.skip("README.rst does not exist")
    text = (ROOT / "README.rst").read_text()
    blocks = re.findall(r"\.\. code-block:: python\n\n(.*?)(?=\n\S|\Z)", text, re.S)
    allowed = {"numpy", "scipy", "sklearn", "numba", "sklearn_falcon", "PIL"}
    for block in blocks:
        tree = ast.parse(textwrap.dedent(block))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] in allowed, (
                    f"the README's example imports {name}, which neither the "
                    "core nor the [cli] extra installs")
        exec(compile(textwrap.dedent(block), "README.rst", "exec"),
             {"print": lambda *args: None})


def test_user_guide_quotes_falcon_batch_messages():
    # the batch section quotes the zero-degree warning and the progress
    # section the record that starts each graph's iterations; neither page
    # said so before, and the quotes must stay what the code says
    import logging
    import warnings

    import numpy as np

    guide = " ".join((DOCS / "user_guide.rst").read_text().split())
    rng = np.random.default_rng(0)
    graphs = []
    for isolated in (0, 2, 0, 1, 0):
        W = rng.random((12, 12))
        W = (W + W.T) / 2
        np.fill_diagonal(W, 0)
        W[:isolated] = 0
        W[:, :isolated] = 0
        graphs.append(W)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("sklearn_falcon")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sklearn_falcon.falcon_batch(graphs, 2, affinity="precomputed",
                                        backend="numba", verbose=1)
    finally:
        logger.removeHandler(handler)
    quote = ("3 node(s) of zero degree in 2 of the 5 graphs (graphs[1]: 2, "
             "graphs[3]: 1)")
    assert f'``"{quote}"``' in guide
    assert any(str(w.message).startswith(quote) for w in caught)
    assert '``"solve: graph 2 of 5"``' in guide
    assert "solve: graph 2 of 5" in [r.getMessage() for r in records]


def test_the_result_of_falcon_batch_is_public():
    """``falcon_batch`` returns a ``BatchResult``, which was importable only
    from the private ``sklearn_falcon._batch`` and absent from the API
    reference: a user who annotates types or looks up its fields could not."""
    import numpy as np

    from sklearn_falcon import BatchResult, falcon_batch

    assert "BatchResult" in sklearn_falcon.__all__
    X = np.random.default_rng(0).random((12, 2))
    res = falcon_batch([X], 2, affinity="rbf", backend="numba", random_state=0)
    assert isinstance(res, BatchResult)
    api = (DOCS / "api.rst").read_text(encoding="utf-8")
    assert re.search(r"^\s+BatchResult$", api, re.M), "api.rst does not list it"
    assert ":class:`BatchResult`" in inspect.getdoc(falcon_batch)
