"""Build the course's website (`make site`): a home page, a page per chapter, the cheat sheet,
the commlab helper and the instructor's guide, as static files in build/site/html.

The pages are made at every build from what the course already has, never copied by hand:

- a chapter page is the student notebook (notebooks/NN_name/NN_name.ipynb), exercises and
  visible tests as the student gets them, with the stored outputs of the solution notebook
  (solutions/) on every other cell: the worked examples' output and the pictures drawn from
  the run. Answer and test cells show no output (theirs would give results away). Nothing
  else is taken from solutions/;
- the home page, the cheat sheet, the helper's page and the instructor's guide are the README's
  sections, the chapter table made from the folders of solutions/.

Sphinx (with myst-nb, which reads notebooks without running them) then writes the HTML. Every
warning stops the build: a broken link or a missing picture is a fault of the site.

    build/site-venv/bin/python helpers/site/build.py [--out build/site] [--hub URL] [--repo URL]
        [--branch NAME]
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shutil
import sys
import time
import tomllib
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the chapters are the folders of solutions/, as every tool of the course reads them
sys.path.insert(0, str(ROOT))
from grader.course import NOTEBOOKS, SOLUTIONS, chapters  # noqa: E402

# The README's level-2 sections that start a page of their own; each later section goes on the
# page of the one before it, so "For instructors" and everything after it is the instructor's
# guide. What comes before the first of them is the home page.
PAGE_STARTS = {"cheat-sheet": "cheatsheet", "the-helper-commlab": "commlab",
               "for-instructors": "instructors"}
HOME = "index"
CHAPTER_TABLE_SECTION = "the-chapters"
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


class SiteError(Exception):
    """Something in the course keeps the site from being built; the message says what to do."""


# --- settings ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Links:
    """Where a chapter page sends a learner: the class's JupyterHub and the course's repository."""

    hub: str = ""
    repo: str = ""
    branch: str = "main"

    def hub_link(self, chapter: str) -> str:
        """The nbgitpuller link that clones or updates the course on the hub and opens the
        chapter's notebook in JupyterLab, or "" when no hub is set."""
        if not self.hub:
            return ""
        folder = self.repo.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
        query = urllib.parse.urlencode({
            "repo": self.repo,
            "urlpath": f"lab/tree/{folder}/notebooks/{chapter}/{chapter}.ipynb",
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


def chapter_page(chapter: str, links: Links, anchors: dict[str, str]) -> dict:
    """The chapter's page as a notebook: the student's cells, the solution's outputs on every
    cell that is neither an answer nor a test, and how to run the chapter after the title."""
    solution = read_notebook(SOLUTIONS / chapter / f"{chapter}.ipynb")
    student = read_notebook(NOTEBOOKS / chapter / f"{chapter}.ipynb")
    stale = (f"notebooks/{chapter} does not match solutions/{chapter} ({{}}): run `make "
             "generate` to make the student notebooks again, then build the site")
    if len(solution["cells"]) != len(student["cells"]):
        raise SiteError(stale.format(f"{len(student['cells'])} cells, not "
                                     f"{len(solution['cells'])}"))
    cells = []
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
            # an answer's or a test's output would show what the solution gives
            cell["outputs"] = [] if graded else copy.deepcopy(ours.get("outputs", []))
            cell["execution_count"] = None if graded else ours.get("execution_count")
        cells.append(cell)
    cells.insert(1 if cells else 0, {"cell_type": "markdown", "id": "run-this-chapter",
                                     "metadata": {}, "source": run_box(chapter, links, anchors)})
    metadata = {key: student["metadata"][key] for key in ("kernelspec", "language_info")
                if key in student.get("metadata", {})}
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def run_box(chapter: str, links: Links, anchors: dict[str, str]) -> str:
    """The box under a chapter's title: how to run it on your machine, in Docker, on a hub."""
    notebook = f"`{chapter}/{chapter}.ipynb`"
    clone = f"`git clone {links.repo}`, then " if links.repo else ""
    start = page_link("start", anchors, "how to start")
    docker = page_link("docker", anchors, "how")
    if links.hub:
        host = urllib.parse.urlsplit(links.hub).netloc
        hub = (f"[open this chapter on {host}]({links.hub_link(chapter)}). The hub copies the "
               "course into your home folder, or brings your copy up to date and keeps your "
               "changes, and opens the chapter.")
    else:
        how = page_link("the-course-on-the-web", anchors, "how")
        hub = ("this site was built without a hub address, so it has no link to one. "
               "Instructors: build it with `make site HUB=https://your-hub.example.edu "
               "REPO=<the course's git address>`, or set both in `helpers/site/site.toml` "
               f"({how}).")
    return "\n".join([
        "```{admonition} Run this chapter",
        ":class: tip",
        "",
        f"- **On your computer**: {clone}`make lab` in the course's folder ({start}). "
        f"JupyterLab opens on `work/`, your own copy of the chapters: open {notebook}. "
        f"`make check CHAPTER={chapter}` says which of its visible tests your notebook passes.",
        f"- **In Docker**: build and start the course's image ({docker}); its JupyterLab opens "
        f"on your copy of the chapters: open {notebook}.",
        f"- **On your class's JupyterHub**: {hub}",
        f"- **The notebook alone**: {{download}}`{chapter}.ipynb </_notebooks/{chapter}.ipynb>`, "
        "as a student starts from it (no outputs, exercises to fill in; it needs the course's "
        "`commlab` package).",
        "```",
    ])


# --- the README's pages ------------------------------------------------------------------------

def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST make it: `## The helper: \\`commlab\\`` is
    the-helper-commlab."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@dataclass
class Section:
    """A level-2 section of the README: its heading and its lines, heading included."""

    heading: str
    lines: list[str]

    @property
    def slug(self) -> str:
        return slug(self.heading)


def split_readme(text: str) -> tuple[list[str], list[Section]]:
    """(the lines before the first level-2 heading, the level-2 sections), code blocks kept
    whole."""
    preamble: list[str] = []
    sections: list[Section] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        found = None if fenced else HEADING.match(line)
        if found and len(found.group(1)) == 2:
            sections.append(Section(found.group(2), [line]))
        elif sections:
            sections[-1].lines.append(line)
        else:
            preamble.append(line)
    return preamble, sections


def assign_pages(sections: list[Section]) -> dict[str, list[Section]]:
    pages: dict[str, list[Section]] = {HOME: []}
    page = HOME
    for section in sections:
        page = PAGE_STARTS.get(section.slug, page)
        pages.setdefault(page, []).append(section)
    missing = [name for key, name in PAGE_STARTS.items() if name not in pages]
    if missing:
        raise SiteError(f"the README has no section for the site's page(s) {', '.join(missing)} "
                        f"(level-2 headings whose anchors are {', '.join(PAGE_STARTS)}): put "
                        "them back, or change PAGE_STARTS in helpers/site/build.py")
    return pages


def heading_anchors(pages: dict[str, list[Section]], preamble: list[str]) -> dict[str, str]:
    """Every heading's anchor -> the page it is on."""
    anchors: dict[str, str] = {}
    for page, sections in pages.items():
        lines = [line for section in sections for line in section.lines]
        if page == HOME:
            lines = preamble + lines
        fenced = False
        for line in lines:
            if FENCE.match(line):
                fenced = not fenced
            found = None if fenced else HEADING.match(line)
            if found:
                anchors.setdefault(slug(found.group(2)), page)
    return anchors


def page_link(anchor: str, anchors: dict[str, str], text: str) -> str:
    """A Markdown link, from a chapter page, to a README heading on whichever page holds it."""
    if anchor not in anchors:
        raise SiteError(f"the README has no heading with the anchor #{anchor}, which the "
                        "chapter pages link to: put it back, or change helpers/site/build.py")
    return f"[{text}](../{anchors[anchor]}.md#{anchor})"


def rewrite_links(lines: list[str], page: str, anchors: dict[str, str]) -> list[str]:
    """The README's links to its own sections, pointed at the page that holds each; links to
    files of the repository become their text (the site has no copy of them)."""
    def to_section(found: re.Match) -> str:
        anchor = found.group(2)
        target = anchors.get(anchor)
        if target is None or target == page:
            return found.group(0)
        return f"[{found.group(1)}]({target}.md#{anchor})"

    def to_file(found: re.Match) -> str:
        return found.group(1)

    out, fenced = [], False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
        if not fenced:
            line = re.sub(r"\[([^\]]*)\]\((?![a-z][a-z0-9+.-]*:|#)[^)\s]+\)", to_file, line)
            line = re.sub(r"\[([^\]]*)\]\(#([^)\s]+)\)", to_section, line)
        out.append(line)
    return out


def promote(lines: list[str]) -> list[str]:
    """A section that opens a page becomes its title: every heading one level up."""
    out, fenced = [], False
    for line in lines:
        if FENCE.match(line):
            fenced = not fenced
        found = None if fenced else HEADING.match(line)
        out.append(line[1:] if found and len(found.group(1)) > 1 else line)
    return out


def chapter_table(lines: list[str], rows: list[tuple[str, str, str]]) -> list[str]:
    """The section's chapter table, made again from the chapters that exist: each name a link
    to its page; what it teaches from the README's row, else from the chapter's first lines."""
    described: dict[str, str] = {}
    start = end = None
    for index, line in enumerate(lines):
        if line.startswith("|"):
            start = index if start is None else start
            end = index + 1
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) >= 2 and cells[0].startswith("`"):
                described[cells[0].strip("`")] = cells[1]
        elif start is not None:
            break
    table = ["| chapter | what it teaches |", "|---|---|"]
    for chapter, title, summary in rows:
        text = described.get(chapter) or summary.replace("|", "\\|")
        table.append(f"| [{title}](chapters/{chapter}.ipynb) | {text} |")
    if start is None:
        return lines + [""] + table
    return lines[:start] + table + lines[end:]


def readme_pages(readme: str, rows: list[tuple[str, str, str]]
                 ) -> tuple[dict[str, str], dict[str, str]]:
    """({page name: MyST Markdown}, {anchor: page}) from the README."""
    preamble, sections = split_readme(readme)
    pages = assign_pages(sections)
    anchors = heading_anchors(pages, preamble)
    out = {}
    for page, page_sections in pages.items():
        lines = rewrite_links(preamble, page, anchors) if page == HOME else []
        for number, section in enumerate(page_sections):
            body = rewrite_links(section.lines, page, anchors)
            if section.slug == CHAPTER_TABLE_SECTION:
                body = chapter_table(body, rows)
            if page != HOME and number == 0:
                body = promote(body)
            lines += body
        if page == HOME:
            lines += home_contents(rows, list(pages))
        out[page] = "\n".join(lines) + "\n"
    return out, anchors


def home_contents(rows: list[tuple[str, str, str]], pages: list[str]) -> list[str]:
    """The site's navigation, from the home page: the chapters, then the README's other pages."""
    chapter_entries = [f"chapters/{chapter}" for chapter, _, _ in rows]
    others = [page for page in pages if page != HOME]
    return ["", "```{toctree}", ":hidden:", ":caption: Chapters", "", *chapter_entries, "```",
            "", "```{toctree}", ":hidden:", ":caption: Reference", "", *others, "```"]


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
    pages, anchors = readme_pages((ROOT / "README.md").read_text(encoding="utf-8"), rows)
    files = {f"{page}.md": text.encode() for page, text in pages.items()}
    for chapter in names:
        page = chapter_page(chapter, links, anchors)
        files[f"chapters/{chapter}.ipynb"] = (json.dumps(page, indent=1, ensure_ascii=False)
                                             + "\n").encode()
        files[f"_notebooks/{chapter}.ipynb"] = (
            NOTEBOOKS / chapter / f"{chapter}.ipynb").read_bytes()
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
    status = build_main(["-b", "html", "-c", str(HERE), "-d", str(out / "doctrees"), "-q",
                         "-W", "--keep-going", str(source), str(html)])
    if status:
        raise SiteError("Sphinx stopped on the warnings above (a broken link, a missing "
                        "picture, Markdown it could not read): fix them in the README or the "
                        "chapter it names")
    return html


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site",
                        help="the build folder; the site is its html/ (default: build/site)")
    parser.add_argument("--config", type=Path, default=HERE / "site.toml",
                        help="hub, repository and branch (default: helpers/site/site.toml)")
    parser.add_argument("--hub", help="your class's JupyterHub, e.g. https://hub.example.edu")
    parser.add_argument("--repo", help="the course's git repository, as the hub clones it")
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
    if not links.hub:
        print("No JupyterHub address: the chapter pages say how to set one (HUB=...).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
