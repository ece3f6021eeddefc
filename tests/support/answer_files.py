"""Each chapter's answer files, found by walking tests/chapters/ (its README says how one is
written): a file is one answer cell, and its docstring says which cell it stands in for and how
the chapter's test cells must judge it.

    tests/chapters/NN_name/wrong_answers/*.py   the test cell fails, saying what the file says
    tests/chapters/NN_name/right_answers/*.py   the test cell passes
    tests/chapters/NN_name/attacks/*.py         graded in a student's notebook: 0 on its test

A module beside those folders (tests/chapters/NN_name/<module>.py) holds code that several
answers of the chapter share (tests/chapters/shared/<module>.py: answers of several chapters); an
answer imports it (``from <module> import ...``), and the cell holds the module's code in place of
that import line, so that the kernel or the grader gets a cell with everything it needs.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "tests" / "chapters"
SHARED = CHAPTERS / "shared"  # what answers of several chapters share
KINDS = ("wrong_answers", "right_answers", "attacks")
# "Label: value", a value going on over the lines indented by four spaces below it
FIELD = re.compile(
    r"^(Answer cell|Test cell|Says|Or says|In a kernel, says|Finds nothing): (.*)$")
INDENT = "    "


@dataclass(frozen=True)
class AnswerFile:
    """One answer cell of a chapter, and what its test cells must make of it."""

    path: Path
    chapter: str
    kind: str
    answer_cell: str  # the grade id of the solution cell this answer stands in for
    test_cells: tuple[str, ...]  # the test cells that judge it, each the same way
    says: tuple[str, ...]  # the failure's message holds one of these (none: nothing checked)
    says_in_a_kernel: tuple[str, ...]  # an attack that is also a wrong answer in a kernel
    # an attack whose answer is right and whose harm is elsewhere: it keeps its points, and no
    # message of its test cell holds this mark (what it would find if the harm worked)
    finds_nothing: str | None
    cell: str  # the text the kernel or the grader gets as the answer cell

    @property
    def name(self) -> str:
        return self.path.stem

    def __repr__(self) -> str:  # the id of a test that takes it
        return f"{self.chapter}/{self.name}"


def answer_files(kind: str) -> list[AnswerFile]:
    """Every answer file of ``kind`` (wrong_answers, right_answers or attacks), chapter by
    chapter, by name."""
    assert kind in KINDS, kind
    return [read(path) for path in sorted(CHAPTERS.glob(f"*/{kind}/*.py"))]


def read(path: Path) -> AnswerFile:
    """The answer file at ``path``: what its docstring says, and its cell."""
    path = path.resolve()
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring, f"{path} has no docstring saying what it is"
    fields = fields_of(docstring)
    where = path.relative_to(ROOT)
    for needed in ("Answer cell", "Test cell"):
        assert fields.get(needed), f"{where}: its docstring has no line '{needed}: ...'"
    return AnswerFile(
        path=path, chapter=path.parents[1].name, kind=path.parent.name,
        answer_cell=fields["Answer cell"][0],
        test_cells=tuple(t.strip() for t in fields["Test cell"][0].split(",")),
        says=tuple(fields.get("Says", []) + fields.get("Or says", [])),
        says_in_a_kernel=tuple(fields.get("In a kernel, says", [])),
        finds_nothing=(fields.get("Finds nothing") or [None])[0],
        cell=cell_text(path))


def fields_of(docstring: str) -> dict[str, list[str]]:
    """The "Label: value" lines of a docstring, each label's values in order. A value goes on
    over the lines below it that are indented by four spaces (without them, each is a line of
    the value); a line that ends in a backslash goes on, without a line break, on the next."""
    fields: dict[str, list[str]] = {}
    label, value = None, []
    for line in docstring.splitlines() + [""]:
        if label and line.startswith(INDENT):
            value.append(line[len(INDENT):])
            continue
        if label:
            fields.setdefault(label, []).append(re.sub(r"\\\n", "", "\n".join(value)))
            label = None
        if found := FIELD.match(line):
            label, value = found.group(1), [found.group(2)]
    return fields


def cell_text(path: Path, shared: set[Path] | None = None) -> str:
    """The answer cell that ``path`` stands for: its code without the docstring, and in place
    of an import of a shared module of its chapter, that module's code (once)."""
    shared = set() if shared is None else shared
    source = path.read_text()
    tree = ast.parse(source)
    edits = []  # (first line, line after the last, the lines that stand there instead)
    for node in tree.body:
        span = (node.lineno - 1, node.end_lineno)
        if node is tree.body[0] and ast.get_docstring(tree) is not None:
            edits.append((*span, []))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            module = _shared_module(path, node)
            if module is not None and module not in shared:
                shared.add(module)
                edits.append((*span, cell_text(module, shared).splitlines()))
            elif module is not None:
                edits.append((*span, []))
    lines = source.splitlines()
    for first, end, instead in reversed(edits):
        lines[first:end] = instead
    return re.sub(r"\n{3,}", "\n\n\n", "\n".join(lines)).strip("\n") + "\n"


def _shared_module(path: Path, node: ast.Import | ast.ImportFrom) -> Path | None:
    """The shared module that ``node`` imports, if it imports one: the chapter's, or one that
    answers of several chapters share (tests/chapters/shared/)."""
    names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
    chapter = CHAPTERS / path.resolve().relative_to(CHAPTERS).parts[0]
    found = [folder / f"{name}.py" for name in names if name for folder in (chapter, SHARED)]
    return next((module for module in found if module.is_file()), None)
