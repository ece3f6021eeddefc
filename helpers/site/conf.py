"""Sphinx's configuration for the course's website (`make site`). helpers/site/build.py writes
the pages into build/site/src and runs Sphinx with this folder as its configuration.

Everything the pages load comes from the site itself: the theme's assets are in its package,
and MathJax is copied from sphinx-mathjax-offline's package, so that the site builds without a
network and reads without one.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

project = ROOT.joinpath("README.md").read_text(encoding="utf-8").splitlines()[0].lstrip("# ")
html_title = project
# the chapters' text and figures (LICENSE-CHAPTERS)
copyright = "the course's authors, CC BY 4.0"

# githubpages: a .nojekyll file, so that GitHub Pages serves the _static/ folders as they are
extensions = ["myst_nb", "sphinx.ext.githubpages"]
# the pages are the chapters as stored, outputs and pictures from real runs: nothing is run
nb_execution_mode = "off"
# no widget manager fetched from a CDN (the chapters have no widgets)
nb_ipywidgets_js = {}
myst_enable_extensions = ["dollarmath"]
# the README's links to its own sections (#docker) keep working on the pages made from it
myst_heading_anchors = 3
# the student notebooks, offered for download from each chapter page, are not pages themselves
exclude_patterns = ["_notebooks"]

html_theme = "sphinx_book_theme"
html_theme_options = {
    # the theme's download button would offer the page's own notebook, which is not the one a
    # student starts from: each chapter page links to the student notebook instead
    "use_download_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
}
html_static_path = [str(HERE / "static")]
html_css_files = ["site.css"]
# no copy of the page sources beside the pages ("view source"): the downloads are the student
# notebooks, and nothing else
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None

# MathJax from the site's own _static/ (Sphinx's default loads it from a CDN)
mathjax_path = "mathjax/tex-chtml.js"
# what tex-chtml.js loads: its TeX extensions on demand, the CHTML fonts, the menu and its
# accessibility parts (the package's other builds and its speech engine are left out)
MATHJAX_PARTS = ("tex-chtml.js", "input", "output/chtml", "ui", "a11y", "adaptors")


def copy_mathjax(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("sphinx-mathjax-offline is missing from the site's environment: "
                           "remove build/site-venv and run make site again")
    source = Path(spec.origin).parent / "static" / "mathjax"
    target = Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        if (source / part).is_dir():
            shutil.copytree(source / part, target / part, dirs_exist_ok=True)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / part, target / part)


def setup(app):
    app.connect("build-finished", copy_mathjax)
