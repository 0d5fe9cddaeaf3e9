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
    "within_subsection_order": "FileNameSortKey",
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
    "secondary_sidebar_items": ["page-toc", "sourcelink"],
}
html_sidebars = {"index": [], "getting_started": [], "comparison": []}
html_show_sourcelink = True
html_last_updated_fmt = None
