"""The course as a website (`make site`, docs/site.md).

Built once for the module, from a copy of this checkout as a fresh clone has it, with the
network cut (``unshare --net``) where this machine allows it; the site's environment is
build/site-venv of this checkout, made online first (it installs only when its pins changed).
Then checked: a page per chapter with the exercises as the student gets them and no output on
answer or test cells, every picture the solutions draw on its chapter's page, linked to its
full size, and no picture anywhere whose alt text is a file name; every internal link and
anchor resolving, the links to run each chapter, the pages made from the README and docs/ by
file, every page saying where to get the course (the repository, the clone command, the
student edition's zip, which is the student edition); no line of a solution or of a hidden
test in any file the build wrote; and, in Debian's Chromium, the home page and every chapter
page with their pictures and formulas rendered from the site's own files alone, a copy button
on every code block of every page, and at 375 px wide no page wider than the screen.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import gzip
import hashlib
import html
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
import zipfile
import zlib
from dataclasses import dataclass
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from grader.course import chapters
from support.containers import step
from support.course_copy import ROOT, make, tracked_copy

SITE_VENV = ROOT / "build" / "site-venv"
SHOTS = ROOT / "build" / "browser-screenshots" / "site"
HUB = "https://hub.example.edu"
REPO = "https://git.example.edu/teaching/commlab-course.git"
BRANCH = "fall-term"
# The shortest solution or hidden-test line the scan looks for (see
# test_no_solution_or_hidden_test_in_any_built_file)
SHORTEST_SECRET = 12


# --- the build ---------------------------------------------------------------------------------

@dataclass
class Site:
    course: Path  # the copy it was built from
    out: Path  # everything the build wrote (html/ is the site)
    offline: bool  # built with no network but loopback
    interfaces: list[str]  # the network interfaces the build saw

    @property
    def html(self) -> Path:
        return self.out / "html"


def _without_network() -> list[str]:
    """The command prefix that runs a command in a network namespace of its own (no network),
    or [] where this machine allows none (no unshare, or user namespaces refused)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return []
    for flags in (["--net"], ["--net", "--map-root-user"]):
        if subprocess.run([unshare, *flags, "true"], capture_output=True).returncode == 0:
            return [unshare, *flags]
    return []


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Site:
    with step("site: make site-venv (installs the site's pins when they changed)"):
        venv = make("site-venv", f"SITE_VENV={SITE_VENV}", timeout=900)
    assert venv.returncode == 0, f"make site-venv failed:\n{venv.stdout}\n{venv.stderr}"
    course = tracked_copy(tmp_path_factory.mktemp("site") / "course")
    # the copy's pins are the environment's: make must not install again, offline
    stamp = (SITE_VENV / ".installed").stat().st_mtime
    os.utime(course / "helpers/site/requirements.txt", (stamp - 1, stamp - 1))
    cut = _without_network()
    seen = subprocess.run([*cut, str(SITE_VENV / "bin/python"), "-c",
                           "import socket; print(' '.join(n for _, n in socket.if_nameindex()))"],
                          capture_output=True, text=True, check=True).stdout.split()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    with step("site: make site on a fresh copy" + (", without network" if cut else "")):
        built = subprocess.run(
            [*cut, "make", "--no-print-directory", "site", f"SITE_VENV={SITE_VENV}",
             f"HUB={HUB}", f"REPO={REPO}", f"BRANCH={BRANCH}"],
            cwd=course, env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, f"make site failed:\n{built.stdout}\n{built.stderr}"
    return Site(course, course / "build" / "site", bool(cut), seen)


# --- reading what was built --------------------------------------------------------------------

class Page(HTMLParser):
    """What the tests read from one HTML file: links, ids, pictures, cells and text."""

    def __init__(self, path: Path):
        super().__init__(convert_charrefs=True)
        self.path = path
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.images: list[str] = []  # the src of each <img> in a cell's output, in order
        # every <img> of the page: (src, alt, the href of the link around it or None)
        self.pictures: list[tuple[str, str | None, str | None]] = []
        self._links: list[str | None] = []  # the open <a>s' hrefs
        self.header_links: list[str] = []  # the links of the header's way to the course
        self.cells: list[dict] = []  # each notebook cell: its tags, whether it has an output
        self.text: list[str] = []
        self._hidden = 0  # inside <script> or <style>, whose text a reader never sees
        # the open <div>s: the cell dict for a cell's own, "output" for a cell's output, or None
        self._divs: list[dict | str | None] = []
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        for name in ("id", "name"):
            if attrs.get(name):
                self.ids.add(attrs[name])
        for name in ("href", "src"):
            if attrs.get(name):
                self.links.append(attrs[name])
        if tag in ("script", "style"):
            self._hidden += 1
        cells = [div for div in self._divs if isinstance(div, dict)]
        if tag == "div":
            opened = None
            if "cell" in classes:
                opened = {"tags": [c[4:] for c in classes if c.startswith("tag_")],
                          "output": False}
                self.cells.append(opened)
            elif "cell_output" in classes and cells:
                cells[-1]["output"] = True
                opened = "output"
            elif "course-door" in classes:
                opened = "door"
            self._divs.append(opened)
        elif tag == "img":
            if "output" in self._divs:
                self.images.append(attrs.get("src", ""))
            around = next((href for href in reversed(self._links) if href), None)
            self.pictures.append((attrs.get("src", ""), attrs.get("alt"), around))
        if tag == "a":
            self._links.append(attrs.get("href"))
            if "door" in self._divs and attrs.get("href"):
                self.header_links.append(attrs["href"])

    def handle_endtag(self, tag):
        if tag == "a" and self._links:
            self._links.pop()
        if tag == "div" and self._divs:
            self._divs.pop()
        if tag in ("script", "style") and self._hidden:
            self._hidden -= 1

    def handle_data(self, data):
        if not self._hidden:
            self.text.append(data)

    @functools.cached_property
    def plain(self) -> str:
        """The text a reader sees, whitespace squashed."""
        return squash("".join(self.text))


@functools.cache
def page(path: Path) -> Page:
    return Page(path)


def squash(text: str) -> str:
    """Whitespace runs made one space: code reads the same highlighted, escaped or wrapped."""
    return " ".join(text.split())


def notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def grading(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def graded(cell: dict) -> bool:
    marks = grading(cell)
    return bool(marks.get("solution") or marks.get("grade") or marks.get("task"))


def source(cell: dict) -> str:
    text = cell.get("source", "")
    return "".join(text) if isinstance(text, list) else text


def drawn_pictures(solution: dict) -> list[bytes]:
    """The PNG outputs of a solution notebook outside answer and test cells, in order."""
    return [base64.b64decode(output["data"]["image/png"])
            for cell in solution["cells"] if cell["cell_type"] == "code" and not graded(cell)
            for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]


def chapter_files(site: Site, chapter: str) -> tuple[dict, dict, Path]:
    """(the solution notebook, the student notebook, the chapter's page) in the built copy."""
    return (notebook(site.course / "solutions" / chapter / f"{chapter}.ipynb"),
            notebook(site.course / "notebooks" / chapter / f"{chapter}.ipynb"),
            site.html / "chapters" / f"{chapter}.html")


def built_files(site: Site) -> list[Path]:
    return sorted(path for path in site.out.rglob("*") if path.is_file())


# --- the build and the pages -------------------------------------------------------------------

def test_site_builds_without_network(site):
    """The build ran in a network namespace of its own: loopback alone, nothing to fetch from."""
    if not site.offline:
        pytest.skip("this machine allows no network namespace (unshare --net): the site was "
                    "built with the network, so its offline build was not proven here")
    assert site.interfaces == ["lo"], f"the build saw network interfaces {site.interfaces}"


def test_every_chapter_has_a_page_with_its_exercises_as_the_student_sees_them(site):
    home = page(site.html / "index.html")
    for chapter in chapters():
        solution, student, path = chapter_files(site, chapter)
        assert path.exists(), f"no page for chapter {chapter} (looked for {path})"
        assert f"chapters/{chapter}.html" in home.links, f"the home page does not link {chapter}"
        shown = page(path)
        for cell in student["cells"]:
            if graded(cell) and cell["cell_type"] == "code":
                assert squash(source(cell)) in shown.plain, (
                    f"{chapter}: the student's cell {grading(cell)['grade_id']} is not on the page")
        kinds = [tag for cell in shown.cells for tag in cell["tags"]
                 if tag in ("exercise-answer", "exercise-test")]
        expected = ["exercise-answer" if grading(cell).get("solution") else "exercise-test"
                    for cell in student["cells"]
                    if grading(cell).get("solution") or grading(cell).get("grade")]
        assert kinds == expected, f"{chapter}: the page's exercise cells are {kinds}"
        with_output = [cell["tags"] for cell in shown.cells if cell["output"]
                       and {"exercise-answer", "exercise-test"} & set(cell["tags"])]
        assert not with_output, f"{chapter}: an answer or test cell shows an output"


def test_every_picture_the_solutions_draw_is_on_its_page(site):
    for chapter in chapters():
        solution, _, path = chapter_files(site, chapter)
        expected = [hashlib.sha256(png).hexdigest() for png in drawn_pictures(solution)]
        shown = []
        for src in page(path).images:
            target = (path.parent / urllib.parse.unquote(src.split("#")[0])).resolve()
            assert target.is_file(), f"{chapter}: picture {src} is not in the site"
            shown.append(hashlib.sha256(target.read_bytes()).hexdigest())
        assert shown == expected, (f"{chapter}: the page shows {len(shown)} pictures, the "
                                   f"solution draws {len(expected)} (or they differ)")


def _resolve(site: Site, origin: Path, link: str) -> str | None:
    """What is wrong with an internal link of ``origin``, or None."""
    parts = urllib.parse.urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith("#") and len(link) == 1:
        return None
    target = origin if not parts.path else (origin.parent / urllib.parse.unquote(parts.path))
    target = target.resolve()
    if not target.is_relative_to(site.html.resolve()):
        return f"{link} leads out of the site"
    if target.is_dir():
        target = target / "index.html"
    if not target.is_file():
        return f"{link}: no such file"
    if parts.fragment and target.suffix == ".html":
        if urllib.parse.unquote(parts.fragment) not in page(target).ids:
            return f"{link}: no #{parts.fragment} on {target.name}"
    return None


def pages(site: Site) -> list[Path]:
    """The site's pages (_static/ holds the theme's files, template fragments among them)."""
    return [path for path in sorted(site.html.rglob("*.html"))
            if not path.relative_to(site.html).parts[0] == "_static"]


def test_internal_links_resolve(site):
    """Every href and src of every page names a file of the site, and its #anchor is there."""
    broken = []
    for path in pages(site):
        for link in page(path).links:
            wrong = _resolve(site, path, link)
            if wrong:
                broken.append(f"{path.relative_to(site.html)}: {wrong}")
    assert not broken, "broken links:\n" + "\n".join(sorted(set(broken))[:40])


def test_pages_load_nothing_from_elsewhere(site):
    """Scripts, styles, fonts and pictures come from the site itself (it reads offline)."""
    remote = []
    for path in pages(site):
        text = path.read_text(encoding="utf-8")
        remote += [f"{path.name}: {found}" for found in re.findall(
            r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=\"(?:https?:)?//[^\"]*\"", text)]
    assert not remote, "\n".join(remote[:20])


def test_chapter_pages_link_to_running_them(site):
    for chapter in chapters():
        _, _, path = chapter_files(site, chapter)
        shown = page(path)
        assert "make lab" in shown.plain and f"make check CHAPTER={chapter}" in shown.plain
        assert f"git clone {REPO}" in shown.plain, chapter
        assert any(link.endswith("docker.html") for link in shown.links), chapter
        assert "Instructors" not in shown.plain and "make site" not in shown.plain, chapter
        pull = [urllib.parse.urlsplit(link) for link in shown.links
                if link.startswith(f"{HUB}/hub/user-redirect/git-pull?")]
        assert len(pull) == 1, f"{chapter}: {len(pull)} nbgitpuller links"
        assert urllib.parse.parse_qs(pull[0].query) == {
            "repo": [REPO], "branch": [BRANCH],
            "urlpath": [f"lab/tree/commlab-course/notebooks/{chapter}/{chapter}.ipynb"]}
        downloads = [link for link in shown.links if link.endswith(f"/{chapter}.ipynb")
                     and "_downloads/" in link]
        assert len(downloads) == 1, f"{chapter}: {downloads}"
        offered = (path.parent / downloads[0]).resolve().read_bytes()
        student = (site.course / "notebooks" / chapter / f"{chapter}.ipynb").read_bytes()
        assert offered == student, f"{chapter}: the download is not the student notebook"


def test_every_page_says_where_to_get_the_course(site):
    """Every page: the repository and the home page's "Get the course" in its header, the clone
    command and the student edition's zip at its foot; the zip is the student edition, as
    `make student-edition` exports it from the same course, in one folder."""
    zips = set()
    for path in pages(site):
        shown = page(path)
        where = path.relative_to(site.html)
        assert REPO in shown.header_links, f"{where}: no link to the repository in the header"
        assert any(link.endswith("#get-the-course") for link in shown.header_links), where
        assert f"git clone {REPO}" in shown.plain, f"{where}: no clone command"
        offered = [link for link in shown.links if link.endswith("commlab-course.zip")]
        assert offered, f"{where}: no link to the student edition"
        zips |= {(path.parent / link).resolve() for link in offered}
    assert zips == {(site.html / "commlab-course.zip").resolve()}, zips
    edition = site.course.parent / "edition"
    exported = subprocess.run([sys.executable, "helpers/scripts/student_edition.py", str(edition)],
                              cwd=site.course, capture_output=True, text=True)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    expected = {f"commlab-course/{path.relative_to(edition).as_posix()}": path.read_bytes()
                for path in edition.rglob("*") if path.is_file()}
    with zipfile.ZipFile(site.html / "commlab-course.zip") as archive:
        zipped = {name: archive.read(name) for name in archive.namelist()}
    assert zipped.keys() == expected.keys()
    assert zipped == expected, "the zip's files differ from the student edition's"
    assert "commlab-course/helpers/commlab/__init__.py" in zipped
    assert not any(name.startswith(("commlab-course/solutions/", "commlab-course/grader/"))
                   for name in zipped)


def test_every_picture_has_words_and_links_to_its_full_size(site):
    """No picture's alt text is empty or a file name (a screen reader would read the hash);
    every picture of a chapter links to its own file, at full size."""
    for path in pages(site):
        for src, alt, _ in page(path).pictures:
            where = f"{path.relative_to(site.html)}: {src}"
            assert alt and alt.strip(), f"{where}: no alt text"
            name = urllib.parse.unquote(src).rsplit("/", 1)[-1]
            assert alt.strip() != name and not re.search(
                r"\.(png|jpe?g|gif|svg|webp)\s*$", alt, re.I) and "_images/" not in alt, (
                f"{where}: the alt text is a file name: {alt!r}")
    for chapter in chapters():
        _, _, path = chapter_files(site, chapter)
        shown = page(path)
        outputs = [(src, around) for src, _, around in shown.pictures if src in shown.images]
        assert len(outputs) == len(shown.images)
        for src, around in outputs:
            assert around == src, f"{chapter}: {src} links to {around}, not to itself"
    ring = page(chapter_files(site, "10_composing_and_cost")[2]).pictures
    assert any("ring all-reduce" in (alt or "") for _, alt, _ in ring), ring


def _build_module():
    spec = importlib.util.spec_from_file_location("site_build", ROOT / "helpers/site/build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_without_a_hub_or_a_repository_the_box_gives_the_student_edition(tmp_path):
    """Built without a hub, a chapter's box has no hub link, and says nothing to instructors
    (docs/site.md does); without a repository, no clone command either: the student edition."""
    build = _build_module()
    box = build.run_box("01_broadcast", build.Links())
    assert "git-pull" not in box and "JupyterHub" not in box
    assert "Instructors" not in box and "make site" not in box and "git clone" not in box
    assert "[student edition](../index.md#get-the-course)" in box
    assert "(../index.md#start)" in box and "(../docker.md)" in box
    with_repo = build.run_box("01_broadcast", build.Links(repo=REPO))
    assert f"`git clone {REPO}`" in with_repo
    door = "\n".join(build.get_the_course(build.Links()))
    assert "git clone" not in door and build.EDITION_ZIP in door
    config = tmp_path / "site.toml"
    config.write_text('hub = "https://hub.example.edu"\nrepo = ""\n')
    with pytest.raises(build.SiteError, match="REPO is not"):
        build.load_links(config, None, None, None)
    with pytest.raises(build.SiteError, match="not an http"):
        build.load_links(config, "hub.example.edu", REPO, None)
    links = build.load_links(config, None, REPO, None)
    assert (links.hub, links.repo, links.branch) == ("https://hub.example.edu", REPO, "main")


def test_a_chapter_page_takes_only_the_students_cells_and_the_examples_outputs(tmp_path,
                                                                              monkeypatch):
    """Outputs stored on an answer or a test cell stay out of the page (today's chapters have
    none there, a later one may); every other cell keeps the solution's outputs, and a cell
    that shows a picture gets its alt text and width; a student notebook that no longer
    matches its solution stops the build."""
    build = _build_module()
    chapter = "01_broadcast"
    solution = notebook(ROOT / "solutions" / chapter / f"{chapter}.ipynb")
    student = notebook(ROOT / "notebooks" / chapter / f"{chapter}.ipynb")
    revealing = {"output_type": "stream", "name": "stdout", "text": "the answer's result\n"}
    for cell in solution["cells"]:
        if graded(cell) and cell["cell_type"] == "code":
            cell["outputs"] = [revealing]
    for folder, content in (("solutions", solution), ("notebooks", student)):
        (tmp_path / folder / chapter).mkdir(parents=True)
        (tmp_path / folder / chapter / f"{chapter}.ipynb").write_text(json.dumps(content))
    monkeypatch.setattr(build, "SOLUTIONS", tmp_path / "solutions")
    monkeypatch.setattr(build, "NOTEBOOKS", tmp_path / "notebooks")

    made = build.chapter_page(chapter, build.Links())["cells"]
    assert made[1]["id"] == "run-this-chapter"
    made = made[:1] + made[2:]
    assert len(made) == len(student["cells"])
    described = []
    for ours, theirs, cell in zip(solution["cells"], student["cells"], made, strict=True):
        assert cell["source"] == source(theirs)
        if cell["cell_type"] == "code":
            assert cell["outputs"] == ([] if graded(theirs) else ours["outputs"])
            if "mystnb" in cell["metadata"]:
                described.append(cell["metadata"]["mystnb"]["image"])
    assert [options["alt"].split(":")[0] for options in described] == [
        "dist.broadcast on 4 ranks"], described
    assert all(options["width"] == "100%" for options in described)

    student["cells"][5]["source"] = "an edit made in notebooks/ alone"
    (tmp_path / "notebooks" / chapter / f"{chapter}.ipynb").write_text(json.dumps(student))
    with pytest.raises(build.SiteError, match="run `make generate`"):
        build.chapter_page(chapter, build.Links())


def test_the_pages_are_the_readme_and_docs_pages_by_file(site):
    """The home page is the README, each student's and instructor's page of docs/ a page of
    its own with every heading of its file; the maintainers' pages are not on the site; the
    student's pages (Docker, when something goes wrong) sit under "For students"."""
    build = _build_module()
    sources = {"README.md": "index"}
    for names in build.SITE_DOCS.values():
        sources.update({f"docs/{name}.md": name for name in names})
    assert {"students", "docker", "instructors"} <= set(sources.values())
    for source_file, name in sources.items():
        text = (site.course / source_file).read_text(encoding="utf-8")
        shown = page(site.html / f"{name}.html")
        headings = [found.group(1) for found in re.finditer(r"(?m)^#{1,3} (.+)$", text)
                    if not found.group(1).startswith("!")]
        for heading in headings:
            words = squash(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", ""))
            assert words in shown.plain, f"{name}.html lacks the heading {heading!r}"
    for maintainers in ("how-it-works", "testing", "site"):
        assert (site.course / "docs" / f"{maintainers}.md").exists()
        assert not (site.html / f"{maintainers}.html").exists(), maintainers
    home = page(site.html / "index.html")
    assert {"start", "when-something-goes-wrong", "cheat-sheet", "get-the-course"} <= home.ids
    assert "busbw factor" in home.plain
    navigation = (site.html / "index.html").read_text(encoding="utf-8")
    students = re.search(r"For students</span>.*?</ul>", navigation, re.S).group(0)
    assert "docker.html" in students and "students.html" in students
    assert "instructors.html" not in students
    assert "When something goes wrong" not in page(site.html / "instructors.html").plain


def test_no_page_loads_the_themes_icon_script(site):
    """The theme's fontawesome.js (most of a page's bytes) stays out: the icons come from
    the theme's stylesheet and web font."""
    loading = [str(path.relative_to(site.html)) for path in pages(site)
               if "fontawesome.js" in path.read_text(encoding="utf-8")]
    assert not loading, loading


# --- no solution anywhere ----------------------------------------------------------------------

def _marked_lines(text: str, begin: str, end: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if line.strip().startswith(begin):
            inside = True
        elif line.strip().startswith(end):
            inside = False
        elif inside and line.strip():
            lines.append(squash(line))
    return lines


def secret_lines(course: Path) -> dict[str, str]:
    """{line: where it comes from} for the lines of solution and hidden-test code that the
    site must not hold (the rule is in test_no_solution_or_hidden_test_in_any_built_file)."""
    published = []
    for path in sorted((course / "notebooks").glob("*/*.ipynb")):
        published += [source(cell) for cell in notebook(path)["cells"]]
    # what every student gets with the chapters (the student edition): each chapter's visible
    # test helpers (notebooks/NN_name/checks.py) and the commlab package
    published += [path.read_text(encoding="utf-8")
                  for path in [*sorted((course / "notebooks").glob("*/*.py")),
                               *sorted((course / "helpers" / "commlab").rglob("*.py"))]]
    public = squash("\n".join(published))
    secrets = {}
    for path in sorted((course / "solutions").glob("*/*.ipynb")):
        for cell in notebook(path)["cells"]:
            where = f"{path.stem}, {grading(cell).get('grade_id', 'a cell')}"
            lines = (_marked_lines(source(cell), "### BEGIN SOLUTION", "### END SOLUTION")
                     + _marked_lines(source(cell), "### BEGIN HIDDEN TESTS",
                                     "### END HIDDEN TESTS"))
            for line in lines:
                if len(line) >= SHORTEST_SECRET and line not in public:
                    secrets.setdefault(line, where)
    return secrets


def readable(data: bytes) -> str:
    """A file's text as a reader or a program would get it back: as stored (Sphinx's
    objects.inv and gzip files decompressed, a zip's files each read so), with JSON's string
    escapes undone (notebooks, search index), and with HTML's tags and entities undone
    (highlighted code is split into spans), whitespace squashed."""
    if data.startswith(b"PK\x03\x04"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "\n\0\n".join(readable(archive.read(name)) for name in archive.namelist())
    if data.startswith(b"# Sphinx inventory"):
        header, _, packed = data.partition(b"zlib.\n")
        data = header + zlib.decompress(packed)
    elif data.startswith(b"\x1f\x8b"):
        data = gzip.decompress(data)
    text = data.decode("utf-8", errors="replace")
    unescaped = re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
    unescaped = (unescaped.replace("\\n", "\n").replace("\\t", "\t").replace('\\"', '"')
                 .replace("\\'", "'").replace("\\/", "/").replace("\\\\", "\\"))
    variants = [text, unescaped]
    for variant in (text, unescaped):
        if "<" in variant:
            variants.append(html.unescape(re.sub(r"<[^>]*>", "", variant)))
    return "\n\0\n".join(squash(variant) for variant in variants)


def _hash24(numbers: np.ndarray) -> np.ndarray:
    """24 bits of each 64-bit number, mixed (Knuth's multiplicative hash)."""
    return (numbers * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # JSON's escapes may leave halves


@functools.cache
def _starts(lines: tuple[str, ...]) -> tuple[dict[int, list[tuple[bytes, str]]], np.ndarray]:
    """The lines by their first eight bytes (as one number), and a table of 2**24 marks, one per
    hash of those numbers: made once for the whole scan."""
    starts: dict[int, list[tuple[bytes, str]]] = {}
    for line in lines:
        encoded = _utf8(line)
        starts.setdefault(int.from_bytes(encoded[:8], "little"), []).append((encoded, line))
    table = np.zeros(1 << 24, dtype=bool)
    table[_hash24(np.array(list(starts), dtype="<u8"))] = True
    return starts, table


def found_secrets(data: bytes, secrets: dict[str, str]) -> list[str]:
    """The secret lines that are in the file ``data``, read as :func:`readable` reads it.

    The site's files read so come to about a hundred million characters and there are hundreds
    of lines to look for: a search for each line would read all of it hundreds of times. Every line
    is longer than eight bytes, so the places where one may start are found first, at once, as
    the places where eight bytes are a line's first eight; the lines are looked for there."""
    text = _utf8(readable(data))
    if len(text) < 8:
        return []
    starts, table = _starts(tuple(secrets))
    # the eight bytes from each position of the text as one number (overlapping windows)
    windows = np.ndarray((len(text) - 7,), dtype="<u8", buffer=text, strides=(1,))
    found = set()
    for position in np.nonzero(table[_hash24(windows)])[0].tolist():
        found.update(line for encoded, line in starts.get(int(windows[position]), ())
                     if text.startswith(encoded, position))
    return [line for line in secrets if line in found]


def test_no_solution_or_hidden_test_in_any_built_file(site):
    """No line of a solution or of a hidden test is in any file the build wrote: the site, and
    the build's own folders beside it (page sources, Sphinx's doctrees, myst-nb's copies), and
    the student edition's zip, file by file.

    The lines looked for: every line between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
    and between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS`` of every solution
    notebook, stripped, whitespace squashed, of at least SHORTEST_SECRET (12) characters, and
    not handed to every student already: a line found (as a substring) in the source of any
    cell of any student notebook, or in what comes with them (each chapter's `checks.py`, the
    `commlab` package), is not a secret (`rank, world_size = dist.get_rank(),
    dist.get_world_size()` opens many answers and many worked examples; `if rank == src:` is in
    stubs and prose; `if rank > 0:` is in commlab's pipeline). Shorter lines (`else:`, `return`,
    `ops = []`) say nothing of an answer. The README and docs/, whose pages are pages of the
    site, get no such pass.
    Each file is read as stored, with JSON's escapes undone and with HTML's tags and entities
    undone, so that highlighted, escaped or JSON-quoted code is found as well.
    """
    secrets = secret_lines(site.course)
    assert len(secrets) > 100, f"only {len(secrets)} lines to look for: is the rule too strict?"
    leaks = {}
    with step("site: every built file scanned for solutions and hidden tests"):
        for path in built_files(site):
            found = found_secrets(path.read_bytes(), secrets)
            if found:
                leaks[str(path.relative_to(site.out))] = found
    assert not leaks, "solution or hidden-test lines in the built site:\n" + "\n".join(
        f"{name}: {secrets[line]}: {line}" for name, lines in leaks.items() for line in lines[:5])


def test_the_scan_finds_solutions_where_they_are():
    """The scan itself: every secret line of a chapter is found in its solution notebook, in
    that notebook's JSON, and in the solution cells highlighted as HTML the way the pages are."""
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    secrets = secret_lines(ROOT)
    path = ROOT / "solutions" / "01_broadcast" / "01_broadcast.ipynb"
    mine = {line: where for line, where in secrets.items() if where.startswith("01_broadcast")}
    assert mine
    assert set(found_secrets(path.read_bytes(), mine)) == set(mine)
    code = "\n".join(source(cell) for cell in notebook(path)["cells"] if graded(cell))
    highlighted = highlight(code, PythonLexer(), HtmlFormatter()).encode()
    assert set(found_secrets(highlighted, mine)) == set(mine)
    assert not found_secrets((ROOT / "notebooks/01_broadcast/01_broadcast.ipynb").read_bytes(),
                             mine)
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("course/notebooks/x.ipynb", path.read_bytes())
    assert set(found_secrets(packed.getvalue(), mine)) == set(mine)


# --- in a browser ------------------------------------------------------------------------------

@contextlib.contextmanager
def served(folder: Path):
    """The folder on a local HTTP server, as a static host serves it; its address."""
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
def test_pages_and_pictures_render_in_a_browser(site, browser):
    """Chromium opens the home page and every chapter page from a local server, loading
    nothing from anywhere else; each chapter's pictures load (naturalWidth > 0), as many as its
    solution draws, and its formulas are typeset by the site's MathJax."""
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    elsewhere: list[str] = []
    with served(site.html) as base, step("site: home page and chapter pages in Chromium"):
        context = browser.new_context(viewport={"width": 1400, "height": 1000})

        def local_only(route):
            if route.request.url.startswith(base):
                route.continue_()
            else:
                elsewhere.append(route.request.url)
                route.abort()

        context.route("**/*", local_only)
        view = context.new_page()
        try:
            view.goto(f"{base}/index.html", wait_until="load")
            view.screenshot(path=SHOTS / "index.png")
            assert view.locator("h1").first.inner_text().startswith("Collective communication")
            listed = view.locator("table a[href^='chapters/']").count()
            assert listed == len(chapters()), f"the home page's table lists {listed} chapters"
            for chapter in chapters():
                solution, _, _ = chapter_files(site, chapter)
                view.goto(f"{base}/chapters/{chapter}.html", wait_until="load")
                pictures = view.locator(".cell_output img")
                sizes = pictures.evaluate_all("images => images.map(i => i.complete ? "
                                              "i.naturalWidth : 0)")
                assert len(sizes) == len(drawn_pictures(solution)), (
                    f"{chapter}: {len(sizes)} pictures in the browser")
                assert all(sizes), f"{chapter}: a picture did not load ({sizes})"
                if view.locator("div.math").count():
                    view.locator("mjx-container").first.wait_for(timeout=15_000)
                if len(sizes) == max(len(drawn_pictures(chapter_files(site, name)[0]))
                                     for name in chapters()):
                    pictures.first.scroll_into_view_if_needed()
                    view.screenshot(path=SHOTS / f"{chapter}.png")
        finally:
            context.close()
    assert not elsewhere, f"the pages asked for files from elsewhere: {elsewhere[:10]}"


# the code blocks a reader copies (conf.py's copybutton_selector): not the cells' outputs
COPYABLE = "div:not(.output) > div.highlight pre"


@pytest.mark.browser
def test_every_page_has_copy_buttons_fits_a_phone_and_shows_whole_tables(site, browser):
    """Every page of the site in Chromium: each code block has its copy button (which copies
    the block's text); at 1400 px wide every table is whole, no column cut off behind a scroll
    bar; at 375 px (a phone) the page is no wider than the screen, long inline code included."""
    problems: list[str] = []
    with served(site.html) as base, step("site: every page at 1400 px and at 375 px"):
        for width in (1400, 375):
            context = browser.new_context(viewport={"width": width, "height": 900})
            view = context.new_page()
            try:
                for path in pages(site):
                    name = path.relative_to(site.html).as_posix()
                    view.goto(f"{base}/{name}", wait_until="load")
                    if width == 1400:
                        blocks = view.locator(COPYABLE).count()
                        buttons = view.locator(f"{COPYABLE} + button.copybtn, "
                                               f"{COPYABLE} ~ button.copybtn").count()
                        if blocks != buttons:
                            problems.append(f"{name}: {blocks} code blocks, {buttons} copy "
                                            "buttons")
                        cut = view.locator(".pst-scrollable-table-container").evaluate_all(
                            "frames => frames.filter(f => f.scrollWidth > f.clientWidth + 1)"
                            ".map(f => f.querySelector('th, td').textContent.trim())")
                        if cut:
                            problems.append(f"{name}: tables cut off at 1400 px: {cut}")
                    else:
                        wide = view.evaluate("document.documentElement.scrollWidth")
                        if wide > width:
                            problems.append(f"{name}: {wide} px wide at {width} px")
            finally:
                context.close()
    assert not problems, "\n".join(problems)


@pytest.mark.browser
def test_a_copy_button_copies_the_code(site, browser):
    """The home page's first code block, copied with its button, is on the clipboard as
    written (the make commands), its comments included."""
    with served(site.html) as base:
        context = browser.new_context(viewport={"width": 1400, "height": 900},
                                      permissions=["clipboard-read", "clipboard-write"])
        view = context.new_page()
        try:
            view.goto(f"{base}/index.html", wait_until="load")
            block = view.locator("#start " + COPYABLE).first
            block.hover()
            view.locator("#start button.copybtn").first.click()
            copied = view.evaluate("navigator.clipboard.readText()")
        finally:
            context.close()
    assert copied.strip() == block_text(site, "make lab"), copied


def block_text(site: Site, first: str) -> str:
    """The README's fenced code block that starts with ``first``, as written."""
    readme = (site.course / "README.md").read_text(encoding="utf-8")
    return next(block for block in re.findall(r"```\w*\n(.*?)```", readme, re.S)
                if block.startswith(first)).strip()
