"""Every relative link of the README and of docs/*.md leads somewhere: the file exists in the
course, and its ``#anchor``, if any, is a heading of that file as GitHub names headings. Plain
Python, no network: links to other sites are not followed."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target "title"): the text may hold one level of brackets ([`a[0]`](x))
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def documents(root: Path = ROOT) -> list[Path]:
    """The README and every page of docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text with fenced code blocks and inline code blanked out (spaces, line breaks kept),
    so that what is left of a link is a link, and offsets still give line numbers."""
    lines, fenced = [], False
    for line in text.splitlines(keepends=True):
        fence = FENCE.match(line) is not None
        blank = fenced or fence
        fenced = fenced != fence
        lines.append(re.sub(r"[^\n]", " ", line) if blank else line)
    kept = "".join(lines)
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), kept)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link of the text; a link's text may span
    lines."""
    kept = prose(text)
    return [(kept.count("\n", 0, found.start()) + 1, found.group(1))
            for found in LINK.finditer(kept)]


def github_anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: the text as shown (links' text, no code or
    emphasis marks), lower case, every character but letters, digits, ``_``, ``-`` and spaces
    dropped, spaces made ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading's anchor in a Markdown file; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        heading = None if fenced else HEADING.match(line)
        if heading:
            anchor = github_anchor(heading.group(2))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def broken_links(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line: target: what is wrong`` for each relative link of ``paths`` that leads
    nowhere: a file that does not exist, a path out of the course, or an anchor that is no
    heading of its file."""
    broken = []
    for path in paths:
        for number, target in links(path.read_text(encoding="utf-8")):
            if SCHEME.match(target):
                continue  # another site (https:, mailto:): not followed here
            where = f"{path.relative_to(root)}:{number}: {target}"
            file_part, _, fragment = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.is_relative_to(root.resolve()):
                broken.append(f"{where}: leads out of the course")
            elif not linked.exists():
                broken.append(f"{where}: no such file")
            elif fragment:
                if linked.suffix != ".md":
                    broken.append(f"{where}: an anchor into a file that is not Markdown")
                elif urllib.parse.unquote(fragment) not in anchors(
                        linked.read_text(encoding="utf-8")):
                    broken.append(f"{where}: no heading #{fragment} in {linked.name}")
    return broken


def test_every_relative_link_of_the_readme_and_docs_resolves():
    paths = documents()
    assert len(paths) > 5, f"only {[p.name for p in paths]}: where did docs/ go?"
    broken = broken_links(paths)
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_the_docs_link_to_each_other_and_the_readme_to_every_page():
    """The README is the door to docs/: each page is linked from it, so none is lost."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = {target.partition("#")[0] for _, target in links(readme)}
    unlinked = [path.name for path in documents()[1:] if f"docs/{path.name}" not in targets]
    assert not unlinked, f"docs/ pages the README never links to: {unlinked}"


def test_a_missing_file_or_heading_is_reported(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "# Course\n\n## Start here\n\n[ok](docs/page.md#a-heading) [ok too](#start-here)\n"
        "[gone](docs/missing.md) [no such heading](docs/page.md#nowhere)\n"
        "[escapes](../outside.md) [web](https://example.org/x#y) [a link\n"
        "over two lines](gone.md)\n"
        "`[in code](docs/missing.md)`\n\n```\n[in a block](docs/missing.md)\n```\n")
    (tmp_path / "docs" / "page.md").write_text(
        "# Page\n\n## A heading\n\n[back](../README.md#start-here) [self](#nothing-here)\n")
    broken = broken_links(documents(tmp_path), tmp_path)
    assert [line.split(": ", 1)[1] for line in broken] == [
        "docs/missing.md: no such file",
        "docs/page.md#nowhere: no heading #nowhere in page.md",
        "../outside.md: leads out of the course",
        "gone.md: no such file",
        "#nothing-here: no heading #nothing-here in page.md",
    ], broken
    assert broken[3].startswith("README.md:7: "), broken  # where the link starts


def test_anchors_are_made_as_github_makes_them():
    text = ("# The helper: `commlab`\n## What it costs: the α–β model\n## Step 1 (of 2)\n"
            "## Step 1 (of 2)\n## [Linked](x.md) *words*\n```\n## not a heading\n```\n")
    assert anchors(text) == {"the-helper-commlab", "what-it-costs-the-αβ-model",
                             "step-1-of-2", "step-1-of-2-1", "linked-words"}
