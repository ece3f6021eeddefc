"""Build the course's website (`make site`): a home page, a page per chapter and the pages of
docs/ written for students and instructors, as static files in build/site/html.

The pages are made at every build from what the course already has, never copied by hand:

- a chapter page is the student notebook (notebooks/NN_name/NN_name.ipynb), exercises and
  visible tests as the student gets them, with the stored outputs of the solution notebook
  (solutions/) on every other cell: the worked examples' output and the pictures drawn from
  the run, each picture with words for what it shows (pictures.py). Answer and test cells show
  no output (theirs would give results away). Nothing else is taken from solutions/;
- the home page is the README, its chapter table linked to the chapter pages, with a section
  on getting the course: the clone command and the repository (REPO), and the student edition
  as a zip (the course without solutions/, grader/ and tests/, as `make student-edition`
  exports it), which holds the `commlab` package every chapter needs;
- each page of docs/ that SITE_DOCS names is a page of the site, read whole by file. The
  maintainers' pages (how it works, tests, this site) stay in the repository: a link to them,
  or to any other file the site has no page for, becomes its text.

Sphinx (with myst-nb, which reads notebooks without running them) then writes the HTML. Every
warning stops the build: a broken link or a missing picture is a fault of the site.

    build/site-venv/bin/python helpers/site/build.py [--out build/site] [--hub URL] [--repo URL]
        [--branch NAME]
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import posixpath
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the chapters are the folders of solutions/, as every tool of the course reads them
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
from pictures import picture_alt  # noqa: E402

from grader.course import NOTEBOOKS, SOLUTIONS, chapters  # noqa: E402

# The pages of docs/ that the site has, under their caption in the navigation, after the
# chapters. The README is the home page.
SITE_DOCS = {
    "For students": ("students", "commlab", "docker"),
    "For instructors": ("instructors", "security", "hub", "lms"),
}
HOME = "index"
# The student edition, zipped: in the site's root, its files in one folder of this name
EDITION_FOLDER = "commlab-course"
EDITION_ZIP = f"{EDITION_FOLDER}.zip"
# Files copied as they are to the site's root (conf.py's html_extra_path)
EXTRA = "_extra"
CHAPTER_TABLE_HEADER = re.compile(r"^\|\s*chapter\s*\|\s*what it teaches\s*\|")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target): the text may hold one level of brackets
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*([^)\s]+)\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


class SiteError(Exception):
    """Something in the course keeps the site from being built; the message says what to do."""


# --- settings ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Links:
    """Where the pages send a learner: the class's JupyterHub and the course's repository."""

    hub: str = ""
    repo: str = ""
    branch: str = "main"

    @property
    def folder(self) -> str:
        """The folder `git clone REPO` makes."""
        return self.repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")

    def hub_link(self, chapter: str) -> str:
        """The nbgitpuller link that clones or updates the course on the hub and opens the
        chapter's notebook in JupyterLab, or "" when no hub is set."""
        if not self.hub:
            return ""
        query = urllib.parse.urlencode({
            "repo": self.repo,
            "urlpath": f"lab/tree/{self.folder}/notebooks/{chapter}/{chapter}.ipynb",
            "branch": self.branch,
        })
        return f"{self.hub.rstrip('/')}/hub/user-redirect/git-pull?{query}"


def load_links(config: Path, hub: str | None, repo: str | None, branch: str | None) -> Links:
    """helpers/site/site.toml, with what was given on the command line in its place."""
    settings = tomllib.loads(config.read_text(encoding="utf-8")) if config.exists() else {}
    given = {"hub": hub, "repo": repo, "branch": branch}
    values = {key: (given[key] if given[key] else str(settings.get(key, "") or "")).strip()
              for key in given}
    values["branch"] = values["branch"] or "main"
    for key in ("hub", "repo"):
        parts = urllib.parse.urlsplit(values[key])
        if values[key] and (parts.scheme not in ("http", "https") or not parts.netloc):
            raise SiteError(f"{key.upper()}={values[key]!r} is not an http(s) address: give the "
                            f"whole address, e.g. {key.upper()}=https://hub.example.edu")
    if values["hub"] and not values["repo"]:
        raise SiteError("HUB is set but REPO is not: the hub needs the course's git repository "
                        "to clone, e.g. make site HUB=... REPO=https://github.com/you/course")
    return Links(**values)


# --- the chapters ------------------------------------------------------------------------------

def read_notebook(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        raise SiteError(f"{shown} is missing: run `make generate`, which makes notebooks/ from "
                        "solutions/") from None


def _nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_graded(cell: dict) -> bool:
    """An answer cell, a test cell or a task: what the student's notebook has its own of."""
    grading = _nbgrader(cell)
    return bool(grading.get("solution") or grading.get("grade") or grading.get("task"))


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def chapter_title(notebook: dict, chapter: str) -> str:
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            for line in _source(cell).splitlines():
                found = HEADING.match(line)
                if found and len(found.group(1)) == 1:
                    return found.group(2)
    return chapter


def chapter_summary(notebook: dict) -> str:
    """The first paragraph of the chapter after its title (what you will be able to do)."""
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for paragraph in re.split(r"\n\s*\n", _source(cell)):
            text = [line for line in paragraph.splitlines() if not HEADING.match(line)]
            if "".join(text).strip():
                return " ".join(" ".join(text).split())
    return ""


def chapter_page(chapter: str, links: Links) -> dict:
    """The chapter's page as a notebook: the student's cells, the solution's outputs on every
    cell that is neither an answer nor a test, each picture with its alt text and a link to
    its full size, and how to run the chapter after the title."""
    solution = read_notebook(SOLUTIONS / chapter / f"{chapter}.ipynb")
    student = read_notebook(NOTEBOOKS / chapter / f"{chapter}.ipynb")
    stale = (f"notebooks/{chapter} does not match solutions/{chapter} ({{}}): run `make "
             "generate` to make the student notebooks again, then build the site")
    if len(solution["cells"]) != len(student["cells"]):
        raise SiteError(stale.format(f"{len(student['cells'])} cells, not "
                                     f"{len(solution['cells'])}"))
    # the pictures' words come from the student's cells: the picture cells are the same in
    # both, and the answers the student's notebook lacks are never read
    code_sources = [_source(cell) for cell in student["cells"] if cell["cell_type"] == "code"]
    cells = []
    code_index = -1
    for index, (ours, theirs) in enumerate(zip(solution["cells"], student["cells"], strict=True)):
        where = f"cell {index}"
        if (ours["cell_type"] != theirs["cell_type"]
                or _nbgrader(ours).get("grade_id") != _nbgrader(theirs).get("grade_id")):
            raise SiteError(stale.format(where))
        graded = is_graded(ours) or is_graded(theirs)
        if not graded and _source(ours) != _source(theirs):
            raise SiteError(stale.format(where))
        cell = {"cell_type": theirs["cell_type"], "id": theirs.get("id", f"cell-{index}"),
                "metadata": {}, "source": _source(theirs)}
        tags = list(theirs.get("metadata", {}).get("tags", []))
        if _nbgrader(theirs).get("solution"):
            tags.append("exercise-answer")
        elif _nbgrader(theirs).get("grade"):
            tags.append("exercise-test")
        if tags:
            cell["metadata"]["tags"] = tags
        if cell["cell_type"] == "code":
            code_index += 1
            # an answer's or a test's output would show what the solution gives
            cell["outputs"] = [] if graded else copy.deepcopy(ours.get("outputs", []))
            cell["execution_count"] = None if graded else ours.get("execution_count")
            describe_pictures(cell, code_sources, code_index)
        cells.append(cell)
    cells.insert(1 if cells else 0, {"cell_type": "markdown", "id": "run-this-chapter",
                                     "metadata": {}, "source": run_box(chapter, links)})
    metadata = {key: student["metadata"][key] for key in ("kernelspec", "language_info")
                if key in student.get("metadata", {})}
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def describe_pictures(cell: dict, sources: list[str], index: int) -> None:
    """A cell that shows a picture gets words for it, for a screen reader (myst-nb's image
    ``alt``, a cell's option), and a width, which makes Sphinx link the picture to its
    full-size file: the pictures are wider than the page, and their labels are small once
    shrunk to it."""
    pictures = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
    if any(mime in output.get("data", {}) for output in cell["outputs"] for mime in pictures):
        cell["metadata"]["mystnb"] = {"image": {"alt": picture_alt(sources, index),
                                                "width": "100%"}}


def run_box(chapter: str, links: Links) -> str:
    """The box under a chapter's title: how to get the course and run the chapter on your
    machine, in Docker, on the class's hub (when the site has its address)."""
    notebook = f"`{chapter}/{chapter}.ipynb`"
    edition = "the [student edition](../index.md#get-the-course)"
    get = f"`git clone {links.repo}` or download {edition}" if links.repo else \
        f"download {edition}"
    lines = [
        "```{admonition} Run this chapter",
        ":class: tip",
        "",
        f"- **On your computer**: {get}, then `make lab` in the course's folder ([how to "
        f"start](../index.md#start)). JupyterLab opens on `work/`, your own copy of the "
        f"chapters: open {notebook}. `make check CHAPTER={chapter}` says which of its visible "
        "tests your notebook passes.",
        "- **In Docker**: build and start the course's image ([how](../docker.md)); its "
        f"JupyterLab opens on your copy of the chapters: open {notebook}.",
    ]
    if links.hub:
        host = urllib.parse.urlsplit(links.hub).netloc
        lines.append(f"- **On your class's JupyterHub**: [open this chapter on {host}]"
                     f"({links.hub_link(chapter)}). The hub copies the course into your home "
                     "folder, or brings your copy up to date and keeps your changes, and opens "
                     "the chapter.")
    lines += [
        f"- **The notebook alone**: {{download}}`{chapter}.ipynb </_notebooks/{chapter}.ipynb>`,"
        " as a student starts from it (no outputs, exercises to fill in). It runs in the "
        "course's folder, whose `commlab` package it needs.",
        "```",
    ]
    return "\n".join(lines)


# --- the README's and docs/'s pages ------------------------------------------------------------

def site_pages() -> dict[str, str]:
    """{file of the course: its page on the site}: the README is the home page, and each page
    of docs/ that SITE_DOCS names a page of the same name."""
    pages = {"README.md": HOME}
    for names in SITE_DOCS.values():
        pages.update({f"docs/{name}.md": name for name in names})
    return pages


def read_page(source: str) -> str:
    path = ROOT / source
    if not path.is_file():
        raise SiteError(f"{source} is missing, and the site has a page made from it: put it "
                        "back, or take it out of SITE_DOCS in helpers/site/build.py")
    return path.read_text(encoding="utf-8")


def rewrite_links(text: str, source: str, pages: dict[str, str]) -> str:
    """``source``'s links to other files of the course, pointed at their pages on the site;
    a link to a file the site has no page for becomes its text. Code, fenced or inline, is
    left as it is."""
    here = pages[source]

    def relink(found: re.Match, code: list[tuple[int, int]]) -> str:
        image, text, target = found.groups()
        if (image or SCHEME.match(target) or target.startswith("#")
                or any(start <= found.start() < end for start, end in code)):
            return found.group(0)
        path, hashmark, anchor = target.partition("#")
        linked = posixpath.normpath(posixpath.join(posixpath.dirname(source),
                                                   urllib.parse.unquote(path)))
        page = pages.get(linked)
        if page is None:
            return text
        if page == here:
            return f"[{text}](#{anchor})" if anchor else text
        return f"[{text}]({page}.md{hashmark}{anchor})"

    out = []
    for fenced, part in blocks(text):
        if not fenced:
            code = [found.span() for found in CODE_SPAN.finditer(part)]
            part = LINK.sub(lambda found, code=code: relink(found, code), part)
        out.append(part)
    return "".join(out).rstrip("\n") + "\n"


def blocks(text: str) -> list[tuple[bool, str]]:
    """The text in runs of lines: (True, a fenced code block) or (False, the prose between),
    lines ends kept, so that joining them gives the text back. A link may span lines of prose."""
    runs: list[tuple[bool, list[str]]] = []
    fenced = False
    for line in text.splitlines(keepends=True):
        opens = FENCE.match(line) is not None and not fenced
        closes = FENCE.match(line) is not None and fenced
        inside = fenced or opens
        if not runs or runs[-1][0] != inside:
            runs.append((inside, []))
        runs[-1][1].append(line)
        fenced = (fenced or opens) and not closes
    return [(inside, "".join(lines)) for inside, lines in runs]


def chapter_table(text: str, rows: list[tuple[str, str, str]]) -> str:
    """The README's chapter table, made again from the chapters that exist: each name a link
    to its page; what it teaches from the README's row, else from the chapter's first lines."""
    lines = text.splitlines()
    start = next((index for index, line in enumerate(lines)
                  if CHAPTER_TABLE_HEADER.match(line)), None)
    if start is None:
        raise SiteError("the README has no chapter table (a table whose header is `| chapter | "
                        "what it teaches |`), from which the home page links to the chapters: "
                        "put it back")
    end = start
    described: dict[str, str] = {}
    while end < len(lines) and lines[end].startswith("|"):
        cells = [cell.strip() for cell in lines[end].strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].startswith("`"):
            described[cells[0].strip("`")] = cells[1]
        end += 1
    table = ["| chapter | what it teaches |", "|---|---|"]
    for chapter, title, summary in rows:
        text = described.get(chapter) or summary.replace("|", "\\|")
        table.append(f"| [{title}](chapters/{chapter}.ipynb) | {text} |")
    return "\n".join(lines[:start] + table + lines[end:]) + "\n"


def get_the_course(links: Links) -> list[str]:
    """The home page's section on getting the course, which every page's header links to."""
    lines = ["## Get the course", ""]
    if links.repo:
        lines += [f"With git, from the course's repository (<{links.repo}>):", "",
                  "```bash", f"git clone {links.repo}", f"cd {links.folder}", "```", "",
                  "Or as a download: the student edition,"]
    else:
        lines += ["As a download: the student edition,"]
    lines += [f'<a href="{EDITION_ZIP}" download>{EDITION_ZIP}</a> (the chapters with their '
              "exercises, the course's `commlab` package that they need, the Makefile and the "
              "pins, without the solutions); unzip it and go into its folder, "
              f"`{EDITION_FOLDER}`. Then [start](#start)."]
    if links.hub:
        lines += ["", "On your class's JupyterHub, each chapter's page has a link that opens "
                  "the chapter there."]
    return lines + [""]


def home_page(readme: str, links: Links, rows: list[tuple[str, str, str]]) -> str:
    """The README with its chapter table linked, "Get the course" before its first section,
    and the site's navigation."""
    lines = chapter_table(readme, rows).splitlines()
    fenced, first = False, len(lines)
    for index, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        found = None if fenced else HEADING.match(line)
        if found and len(found.group(1)) == 2:
            first = index
            break
    lines[first:first] = get_the_course(links)
    return "\n".join(lines + navigation(rows)) + "\n"


def navigation(rows: list[tuple[str, str, str]]) -> list[str]:
    """The site's navigation, from the home page: the chapters, then docs/'s pages."""
    tocs = [("Chapters", [f"chapters/{chapter}" for chapter, _, _ in rows])]
    tocs += [(caption, list(names)) for caption, names in SITE_DOCS.items()]
    out = []
    for caption, entries in tocs:
        out += ["", "```{toctree}", ":hidden:", f":caption: {caption}", "", *entries, "```"]
    return out


def student_edition_zip() -> bytes:
    """The student edition, as `make student-edition` exports it, zipped in one folder; the
    same files give the same bytes (fixed dates, sorted names), so that a build with nothing
    changed leaves the zip as it was."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / EDITION_FOLDER
        done = subprocess.run([sys.executable, str(ROOT / "helpers/scripts/student_edition.py"),
                               str(folder)], capture_output=True, text=True)
        if done.returncode:
            raise SiteError("the student edition could not be exported (make "
                            f"student-edition):\n{done.stdout}{done.stderr}")
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                info = zipfile.ZipInfo(f"{EDITION_FOLDER}/{path.relative_to(folder).as_posix()}",
                                       date_time=(1980, 1, 1, 0, 0, 0))
                info.external_attr = (0o755 if path.stat().st_mode & 0o111 else 0o644) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.read_bytes())
        return buffer.getvalue()


# --- the build ---------------------------------------------------------------------------------

def page_sources(links: Links) -> dict[str, bytes]:
    """Every file of the site's source folder, by its path in that folder."""
    names = chapters()
    if not names:
        raise SiteError("solutions/ has no chapters (NN_name/NN_name.ipynb)")
    rows = []
    for chapter in names:
        student = read_notebook(NOTEBOOKS / chapter / f"{chapter}.ipynb")
        rows.append((chapter, chapter_title(student, chapter), chapter_summary(student)))
    pages = site_pages()
    files = {}
    for source, page in pages.items():
        text = rewrite_links(read_page(source), source, pages)
        if page == HOME:
            text = home_page(text, links, rows)
        files[f"{page}.md"] = text.encode()
    for chapter in names:
        page = chapter_page(chapter, links)
        files[f"chapters/{chapter}.ipynb"] = (json.dumps(page, indent=1, ensure_ascii=False)
                                             + "\n").encode()
        files[f"_notebooks/{chapter}.ipynb"] = (
            NOTEBOOKS / chapter / f"{chapter}.ipynb").read_bytes()
    files[f"{EXTRA}/{EDITION_ZIP}"] = student_edition_zip()
    return files


def sync(folder: Path, files: dict[str, bytes]) -> None:
    """Make ``folder`` hold exactly ``files``, leaving unchanged files untouched so that Sphinx
    rebuilds only the pages whose source changed."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in sorted(folder.rglob("*"), reverse=True):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and name not in files:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    for name, data in files.items():
        path = folder / name
        if not path.exists() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)


def build(out: Path, links: Links) -> Path:
    """Write the page sources into OUT/src and the site into OUT/html; return OUT/html."""
    from sphinx.cmd.build import build_main

    source, html = out / "src", out / "html"
    sync(source, page_sources(links))
    # Sphinx never removes what an earlier build wrote (a chapter since removed, a picture
    # drawn again): the site is written afresh, from the pages it keeps read in doctrees/
    shutil.rmtree(html, ignore_errors=True)
    # -A: what the pages' templates show on every page (helpers/site/templates/)
    status = build_main(["-b", "html", "-c", str(HERE), "-d", str(out / "doctrees"), "-q",
                         "-W", "--keep-going", "-A", f"course_repo={links.repo}",
                         "-A", f"course_zip={EDITION_ZIP}", str(source), str(html)])
    if status:
        raise SiteError("Sphinx stopped on the warnings above (a broken link, a missing "
                        "picture, Markdown it could not read): fix them in the README, the page "
                        "of docs/ or the chapter it names")
    return html


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site",
                        help="the build folder; the site is its html/ (default: build/site)")
    parser.add_argument("--config", type=Path, default=HERE / "site.toml",
                        help="hub, repository and branch (default: helpers/site/site.toml)")
    parser.add_argument("--hub", help="your class's JupyterHub, e.g. https://hub.example.edu")
    parser.add_argument("--repo", help="the course's git repository, as learners clone it")
    parser.add_argument("--branch", help="its branch (default: main)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        links = load_links(args.config, args.hub, args.repo, args.branch)
        html = build(args.out.resolve(), links)
    except SiteError as err:
        print(f"make site: {err}", file=sys.stderr)
        return 1
    shown = html.relative_to(Path.cwd()) if html.is_relative_to(Path.cwd()) else html
    print(f"The site is in {shown}/ ({time.monotonic() - start:.1f} s). Preview it with "
          f"`python3 -m http.server -d {shown}` and open http://localhost:8000/; publish the "
          "folder on any static host.")
    if not links.repo:
        print("No repository address: the pages offer the student edition's zip, but no "
              "`git clone` and no link to the repository (REPO=..., docs/site.md).")
    if not links.hub:
        print("No JupyterHub address: the chapter pages link to no hub (HUB=..., docs/site.md).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
