"""The course's notebooks: generated exactly by nbgrader, graded honestly both ways, no leaks.

(The solutions' stored outputs are checked by nbval: `pytest --nbval solutions/`, part of
`make test`.)
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from grader import course

ROOT = Path(__file__).resolve().parents[2]

CHAPTERS = course.chapters()


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def test_every_chapter_has_a_student_notebook_and_nothing_else_is_there():
    released = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir())
    assert released == CHAPTERS
    assert CHAPTERS, "no chapters found in solutions/"


def test_student_notebooks_are_exactly_what_nbgrader_generates(tmp_path):
    generated = course.generate_into(tmp_path)
    for name in CHAPTERS:
        # the notebook and the chapter's test helpers (checks.py), which nbgrader copies
        files = sorted(p.name for p in (generated / name).iterdir())
        assert files == [f"{name}.ipynb", "checks.py"], files
        assert sorted(p.name for p in (ROOT / "notebooks" / name).iterdir()) == files
        for file in files:
            assert (ROOT / "notebooks" / name / file).read_bytes() == (
                generated / name / file).read_bytes(), (
                f"notebooks/{name}/{file} differs from what nbgrader generates: "
                "run `make generate`")


@pytest.mark.parametrize("name", CHAPTERS)
def test_student_notebook_leaks_no_answer_or_hidden_test_and_has_no_outputs(name):
    solution_cells = _cells(ROOT / "solutions" / name / f"{name}.ipynb")
    notebook_text = (ROOT / "notebooks" / name / f"{name}.ipynb").read_text()
    checks_text = (ROOT / "notebooks" / name / "checks.py").read_text()  # the test helpers
    secret: dict[str, list[str]] = {"HIDDEN TESTS": [], "SOLUTION": []}
    visible = []
    block = re.compile(r"### BEGIN (HIDDEN TESTS|SOLUTION)\n(.*?)### END \1", re.S)
    for cell in solution_cells:
        source = "".join(cell["source"])
        for kind, text in block.findall(source):
            secret[kind] += [ln.strip() for ln in text.splitlines() if len(ln.strip()) > 12]
        visible.append(block.sub("", source))
    assert "### BEGIN" not in notebook_text + checks_text
    # a line that also stands in a visible part of the chapter gives nothing away: its cells,
    # and, for an answer's line, its test helpers (which build what the answers build)
    cells_text = "\n".join(visible)
    leaked = [line for line in secret["SOLUTION"] + secret["HIDDEN TESTS"]
              if line not in cells_text + checks_text and json.dumps(line)[1:-1] in notebook_text]
    leaked += [line for line in secret["HIDDEN TESTS"]
               if line not in cells_text and line in checks_text]
    assert leaked == []
    student_cells = _cells(ROOT / "notebooks" / name / f"{name}.ipynb")
    assert all(not cell.get("outputs") for cell in student_cells if cell["cell_type"] == "code")


def _runs_something(statement: ast.stmt) -> bool:
    """Whether a top-level statement calls anything when it runs (a lambda's body runs later)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import,
                              ast.ImportFrom)):
        return False
    lambdas = {id(node) for lam in ast.walk(statement) if isinstance(lam, ast.Lambda)
               for node in ast.walk(lam.body)}
    return any(isinstance(node, ast.Call) and id(node) not in lambdas
               for node in ast.walk(statement))


@pytest.mark.parametrize("name", CHAPTERS)
def test_a_chapters_test_helpers_only_define(name):
    # every test cell of the chapter runs the whole of checks.py: a case run there would run
    # in every test (and a broken answer would fail tests that do not check it)
    path = ROOT / "solutions" / name / "checks.py"
    running = [f"line {s.lineno}: {ast.unparse(s)[:60]}" for s in ast.parse(path.read_text()).body
               if _runs_something(s)]
    assert running == [], f"{path} runs code, which belongs in its test cell: {running}"


def test_validate_passes_a_solution_and_fails_when_a_test_cell_fails(tmp_path):
    # every solution's test cells also run under nbval (any error or stderr fails it there), and
    # every chapter's stubs against its test cells in tests/chapters/test_exercise_feedback.py;
    # this checks that the instructor's validate command tells a pass from a failure, both ways,
    # on a chapter that runs in a few seconds (chapter 00 spawns processes that import torch)
    name = "05_reduce"
    solution = ROOT / "solutions" / name / f"{name}.ipynb"
    assert course.validate(solution) == []
    broken = json.loads(solution.read_text())
    answer = next(c for c in broken["cells"]
                  if c["metadata"].get("nbgrader", {}).get("solution"))
    # dst keeps its own tensor: every send arrives, nothing is combined
    combining = "tensor.copy_(combine(tensor, incoming))"
    assert combining in "".join(answer["source"])
    answer["source"] = "".join(answer["source"]).replace(combining, "pass")
    (tmp_path / f"{name}.ipynb").write_text(json.dumps(broken))
    problems = course.validate(tmp_path / f"{name}.ipynb")
    assert problems and all("test cell failed" in p for p in problems)
    # inverted (make validate on a student notebook): no test cell may pass with the stubs
    assert course.validate(ROOT / "notebooks" / name / f"{name}.ipynb", invert=True) == []


# Validate shows a failing test cell's source before the reason, in its dialog (the browser test
# checks that layout with chapter 01): a test cell this short keeps the reason on the first
# screen, where a cell of helpers once pushed it 110 lines down.
VISIBLE_TEST_LINES = 12


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_visible_test_cell_is_a_few_lines_so_validate_shows_the_reason_first(name):
    for cell in _cells(ROOT / "notebooks" / name / f"{name}.ipynb"):
        meta = cell["metadata"].get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            lines = [line for line in "".join(cell["source"]).splitlines() if line.strip()]
            assert len(lines) <= VISIBLE_TEST_LINES, \
                f"{meta['grade_id']}: {len(lines)} lines; helpers belong in the chapter's checks.py"


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_has_graded_exercises_with_hidden_tests_that_vary_world_size(name):
    cells = _cells(ROOT / "solutions" / name / f"{name}.ipynb")
    graded = [c for c in cells if c["metadata"].get("nbgrader", {}).get("grade")]
    assert len(graded) >= (1 if name.startswith("00") else 2)
    for cell in graded:
        source = "".join(cell["source"])
        assert source.startswith('"""'), "a test cell opens with a docstring saying what it checks"
        assert "### BEGIN HIDDEN TESTS" in source
