"""Sphinx's configuration for the course's website (`make site`). helpers/site/build.py writes
the pages into build/site/src and runs Sphinx with this folder as its configuration.

Everything the pages load comes from the site itself: the theme's assets are in its package,
and MathJax is copied from sphinx-mathjax-offline's package, so that the site builds without a
network and reads without one. The templates in templates/ put the way to the course on every
page (its header and its foot) and leave out the theme's largest script.
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

# githubpages: a .nojekyll file, so that GitHub Pages serves the _static/ folders as they are;
# copybutton: a button that copies a code block (the prompt's "$ " and outputs left out)
extensions = ["myst_nb", "sphinx.ext.githubpages", "sphinx_copybutton"]
# code a reader types or pastes: the page's code blocks and cells, not the cells' outputs
copybutton_selector = "div:not(.output) > div.highlight pre"
copybutton_exclude = ".linenos, .gp, .go"
# the pages are the chapters as stored, outputs and pictures from real runs: nothing is run
nb_execution_mode = "off"
# no widget manager fetched from a CDN (the chapters have no widgets)
nb_ipywidgets_js = {}
myst_enable_extensions = ["dollarmath"]
# the README's and docs/'s links to sections (#start, docker.md#gpus) keep working on the pages
# made from them: headings get GitHub's anchors
myst_heading_anchors = 3
# the student notebooks, offered for download from each chapter page, are not pages themselves;
# _extra/ (the student edition's zip) is copied to the site's root as it is
exclude_patterns = ["_notebooks", "_extra"]

html_theme = "sphinx_book_theme"
html_theme_options = {
    # the theme's download button would offer the page's own notebook, which is not the one a
    # student starts from: each chapter page links to the student notebook instead
    "use_download_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    # every page's header: the sidebar's toggle, then the way to the course (templates/door.html)
    "article_header_start": ["toggle-primary-sidebar.html", "door.html"],
    # every page's foot: the clone command and the student edition (templates/door-footer.html)
    "footer_content_items": ["door-footer.html", "copyright.html"],
}
templates_path = [str(HERE / "templates")]
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


# A table with this many columns or more is as wide as the page's text and its right margin
WIDE_TABLE_COLUMNS = 6


def widen_tables(app, doctree, docname) -> None:
    """Wide tables (the cheat sheet) in the theme's full-width frame: on a wide screen it takes
    the right margin, whose table of contents the theme hides while the table is in sight, so
    that no column is cut off."""
    from docutils import nodes

    for table in list(doctree.findall(nodes.table)):
        groups = list(table.findall(nodes.tgroup))
        if groups and int(groups[0].get("cols", 0)) >= WIDE_TABLE_COLUMNS:
            frame = nodes.container(classes=["full-width"])
            table.replace_self(frame)
            frame.append(table)


def drop_unused_assets(app, exception) -> None:
    """The theme's .map files (several MB) serve a browser's developer tools only, and no page
    loads its fontawesome.js (templates/layout.html)."""
    if exception is None and app.builder.format == "html":
        static = Path(app.outdir) / "_static"
        for unused in [*static.rglob("*.map"), static / "scripts" / "fontawesome.js"]:
            unused.unlink(missing_ok=True)


def add_extra_files(app, config) -> None:
    """The source folder's _extra/ (build.py writes the student edition's zip there), copied
    to the site's root."""
    extra = Path(app.srcdir) / "_extra"
    if extra.is_dir():
        config.html_extra_path = [*config.html_extra_path, str(extra)]


def setup(app):
    app.connect("config-inited", add_extra_files)
    app.connect("doctree-resolved", widen_tables)
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", drop_unused_assets)
