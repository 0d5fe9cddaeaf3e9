"""Sphinx configuration of the sklearn-falcon documentation.

Build with ``make -C docs html`` (``sphinx-build -W -b html docs
docs/_build/html``).  The gallery scripts in ``examples/`` are executed by
sphinx-gallery on every build; they need only a CPU and no network.
"""

import os
import sys
import warnings
from pathlib import Path

# Never try to reach the Hugging Face hub: the build must work offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))  # sg_sorting

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import sklearn_falcon  # noqa: E402

# -- Project -----------------------------------------------------------------
project = "sklearn-falcon"
author = "The sklearn-falcon developers"
copyright = "2026, The sklearn-falcon developers"
version = sklearn_falcon.__version__
release = sklearn_falcon.__version__

# -- General -----------------------------------------------------------------
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

# MathJax from a local copy, so that the formulas render without network
# access (pip package sphinx-mathjax-offline, in the [docs] extra); without it
# the pages load MathJax from its CDN.
try:
    import importlib.util

    if importlib.util.find_spec("sphinx-mathjax-offline") is not None:
        extensions.append("sphinx-mathjax-offline")
except (ImportError, ValueError):  # pragma: no cover
    pass

templates_path = ["_templates"]
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext"}
root_doc = "index"
default_role = "literal"

# -- autodoc / autosummary / numpydoc ------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

# -- sphinx-gallery ----------------------------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": "/plot_",
    "ignore_pattern": r"__init__\.py",
    "image_scrapers": ("matplotlib",),
    "download_all_examples": False,
    "within_subsection_order": "sg_sorting.GalleryOrder",
    "doc_module": ("sklearn_falcon",),
    "backreferences_dir": "gen_modules/backreferences",
    "reference_url": {"sklearn_falcon": None},
    "remove_config_comments": True,
    "show_memory": False,
    "abort_on_example_error": True,
    "plot_gallery": "True",
    "matplotlib_animations": False,
}

# Warnings raised by the examples must not turn into build warnings.
warnings.filterwarnings("ignore", category=UserWarning,
                        message="Matplotlib is currently using agg")

# -- HTML --------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"sklearn-falcon {release}"
html_static_path = ["_static"]
html_theme_options = {
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "header_links_before_dropdown": 7,
    "secondary_sidebar_items": {
        "comparison": [],
        "index": [],
        "auto_examples/*": [],  # the code needs the width
    },
}
html_css_files = ["custom.css"]
html_sidebars = {
    # single pages: no section navigation to show
    "index": [], "getting_started": [], "user_guide": [], "comparison": [],
    "benchmarks": [],
}
html_show_sourcelink = True
html_last_updated_fmt = None


# -- Benchmark numbers for the comparison page ---------------------------------
# The comparison page quotes the benchmark tables exactly as the benchmark
# scripts recorded them in benchmarks/results/*.md: they are converted to
# reStructuredText here, at every build, so that the page never drifts from
# the recorded results and no number is ever typed by hand.
import re  # noqa: E402

RESULTS_DIR = HERE.parent / "benchmarks" / "results"
GENERATED = HERE / "generated"


def _md_inline(text):
    """Translate the inline markdown of the result files to reST."""
    text = re.sub(r"!\[([^\]]*)\]\(([^)]+)\)", r"\1", text)  # images: alt text
    text = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"`\1 <\2>`__", text)
    text = re.sub(r"(?<!`)`([^`]+)`(?!`)", r"``\1``", text)
    return text


def _cell(text):
    text = _md_inline(text.strip())
    # a cell that would parse as a list marker or be empty
    if re.fullmatch(r"[-*+]|\d+[.)]", text):
        text = "\\" + text
    return text


def _md_to_rst(md, source):
    """Headings, paragraphs and pipe tables of a result file, as reST."""
    out, table = [], []

    def flush_table():
        if not table:
            return
        rows = [[_cell(c) for c in r.strip().strip("|").split("|")] for r in table
                if not re.fullmatch(r"\|?[\s:|-]+\|?", r.strip())]
        table.clear()
        if not rows:
            return
        width = max(len(r) for r in rows)
        out.extend([".. list-table::", "   :header-rows: 1", ""])
        for r in rows:
            r = r + [""] * (width - len(r))
            out.append(f"   * - {r[0]}")
            out.extend(f"     - {c}" for c in r[1:])
        out.append("")

    depths = [len(m.group(1)) for m in re.finditer(r"^(#+)\s", md, flags=re.M)]
    top = min(depths, default=1)
    for line in md.splitlines():
        if line.lstrip().startswith("|"):
            table.append(line)
            continue
        flush_table()
        m = re.match(r"^(#+)\s+(.*)$", line)
        if m:
            title = _md_inline(m.group(2).strip())
            char = "-~^"[min(len(m.group(1)) - top, 2)]
            out.extend([title, char * max(len(title), 3), ""])
        else:
            out.append(_md_inline(line))
    flush_table()
    out.extend(["", f"*Source:* ``benchmarks/results/{source}``.", ""])
    return "\n".join(out)


# The comparison page shows the head-to-head results; every other table (and
# the machine details) is on the benchmarks page.  Files in this order, with a
# title for the files that have none; inside a file with subsections, the
# introduction and the subsections whose title matches HEADLINE are kept.
COMPARISON_FILES = {
    "defaults_vs_spectral.md": "Falcon defaults against SpectralClustering",
    "quality.md": None,
    "speed.md": None,
    "tokens.md": None,
    "segmentation.md": None,
}
HEADLINE = re.compile(r"target|against|methods on", re.IGNORECASE)


def _headline_sections(md):
    """The introduction and the headline subsections of a result file."""
    blocks, current = [], []
    for line in md.splitlines():
        if re.match(r"^#{2,}\s", line) and current:
            blocks.append(current)
            current = []
        current.append(line)
    blocks.append(current)
    heads = [b for b in blocks if b and re.match(r"^#+\s", b[0])]
    if len(heads) <= 1:  # no subsections: keep the whole file
        return md
    depth = min(len(b[0].split()[0]) for b in heads)
    kept = []
    for b in blocks:
        title = b[0] if b and b[0].startswith("#") else ""
        level = len(title.split()[0]) if title else 0
        if not title or level == depth or HEADLINE.search(title):
            kept.extend(b)
    return "\n".join(kept)


def write_benchmark_summary(results_dir=RESULTS_DIR, out_dir=GENERATED):
    results_dir = Path(results_dir)
    available = sorted(results_dir.glob("*.md")) if results_dir.is_dir() else []
    chosen = [results_dir / name for name in COMPARISON_FILES
              if (results_dir / name).exists()]
    files = chosen or available  # unknown file names: show them all
    parts = []
    for f in files:
        md = f.read_text(encoding="utf-8")
        title = COMPARISON_FILES.get(f.name)
        if title and not re.match(r"^\s*#", md):
            md = f"# {title}\n\n{md}"
        parts.append(_md_to_rst(_headline_sections(md), f.name))
    if (HERE / "benchmarks.rst").exists():
        parts.append("The :doc:`benchmarks` page has every table, with the plots, "
                     "the machine details and the methodology.\n")
    if not files:
        parts.append(
            "No benchmark results are recorded yet.  ``python -m benchmarks.run`` "
            "writes them to ``benchmarks/results/`` (``--quick`` for a shorter "
            "run), and the next documentation build shows them here.\n")
    Path(out_dir).mkdir(exist_ok=True)
    target = Path(out_dir) / "comparison_results.inc"
    text = "\n".join(parts)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


write_benchmark_summary()


# -- Table of contents of the front page ---------------------------------------
# docs/benchmarks.rst is written by ``python -m benchmarks.run --write-docs``;
# it joins the navigation as soon as it exists (a toctree entry for a missing
# page would be a build warning).
def write_index_toc(out_dir=GENERATED):
    pages = ["getting_started", "user_guide", "dask", "auto_examples/index",
             "comparison"]
    lines = []
    if (HERE / "benchmarks.rst").exists():
        pages.append("benchmarks")
        lines += [":doc:`benchmarks`",
                  "    Measured quality (NCut, ARI, mIoU) and speed against those",
                  "    methods, with the commands that produced them.", ""]
    pages += ["architecture", "api", "changelog"]
    lines += [":doc:`architecture`",
              "    How the package is built, and where to add an affinity, an",
              "    initialization or a backend.", ""]
    lines += [":ref:`api_ref`", "    Every public class and function.", "",
              ":doc:`changelog`", "    What changed in each release.", "",
              ".. toctree::", "   :maxdepth: 2", "   :hidden:", ""]
    lines += [f"   {p}" for p in pages] + [""]
    Path(out_dir).mkdir(exist_ok=True)
    target = Path(out_dir) / "index_toc.inc"
    text = "\n".join(lines)
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


write_index_toc()


# -- viewcode: the top-level aliases ------------------------------------------
# api.rst declares ``sklearn_falcon.ImageSegmenter`` and
# ``sklearn_falcon.normalized_cut`` as aliases of the objects documented in
# their own modules.  viewcode would follow them to the defining module and
# take the alias's module name for every "[docs]" link of that source page,
# whose anchors then do not exist; so the aliases are not followed (their
# source links come from the real entries).
VIEWCODE_ALIASES = {("sklearn_falcon", "ImageSegmenter"),
                    ("sklearn_falcon", "normalized_cut")}


def _viewcode_follow_imported(app, modname, fullname):
    if (modname, fullname) in VIEWCODE_ALIASES:
        return modname  # the package itself, which does not define them
    return None


def setup(app):
    app.connect("viewcode-follow-imported", _viewcode_follow_imported)
