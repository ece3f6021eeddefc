"""The course teaches before it asks: read in order, no exercise's solution calls a
`torch.distributed` function that no earlier cell (text or code, this chapter or an earlier one)
has introduced.

A name counts as introduced once a markdown cell mentions it (`dist.send`, or
`torch.distributed.send`) or a code cell that is neither a solution nor a test uses it. A
chapter's opening (its title and "what you will learn", the markdown before its first code cell)
announces and teaches nothing yet. An
exercise's own prompt (from its `## Exercise` / `### Exercise` heading to its solution cell)
introduces nothing in its text: "use `dist.send`" asks for a call, it does not teach it. Solution
cells and test cells never introduce anything either: a student sees the first as an empty stub
and the second mostly hidden.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "grader"))
import course  # noqa: E402

MENTION = re.compile(r"\b(?:dist|torch\.distributed)\.([A-Za-z_]\w*)")
EXERCISE_HEADING = re.compile(r"^#{2,3} Exercise \d", re.M)


def _source(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def _names_in_code(source: str) -> set[str]:
    """Every `dist.X` / `torch.distributed.X` the code refers to (called or passed, as
    `dist.P2POp(dist.isend, ...)` passes `dist.isend`)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:                   # cell magics and the like: fall back to the text
        return set(MENTION.findall(source))
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id == "dist":
            names.add(node.attr)
        elif (isinstance(owner, ast.Attribute) and owner.attr == "distributed"
              and isinstance(owner.value, ast.Name) and owner.value.id == "torch"):
            names.add(node.attr)
    return names


def _role(cell: dict) -> str:
    grading = cell.get("metadata", {}).get("nbgrader", {})
    if grading.get("solution"):
        return "solution"
    if grading.get("grade"):
        return "test"
    return cell["cell_type"]


def order_violations(chapters: list[tuple[str, list[dict]]]) -> list[str]:
    """Walk ``(chapter name, cells)`` in order; one line per solution cell that uses a
    `torch.distributed` name nothing before it introduced."""
    introduced: set[str] = set()
    violations = []
    for name, cells in chapters:
        in_prompt, opening = False, True
        for index, cell in enumerate(cells):
            role, source = _role(cell), _source(cell)
            opening = opening and role == "markdown"
            if role == "markdown":
                in_prompt = in_prompt or bool(EXERCISE_HEADING.search(source))
                if not in_prompt and not opening:
                    introduced |= set(MENTION.findall(source))
            elif role == "code":
                introduced |= _names_in_code(source)
            elif role == "solution":
                in_prompt = False
                missing = sorted(_names_in_code(source) - introduced)
                if missing:
                    grade_id = cell["metadata"]["nbgrader"].get("grade_id")
                    violations.append(
                        f"{name} cell {index} ({grade_id}) uses "
                        f"{', '.join('dist.' + m for m in missing)} before the course "
                        "introduces it")
    return violations


def _course() -> list[tuple[str, list[dict]]]:
    chapters = []
    for name in course.chapters():
        path = ROOT / "solutions" / name / f"{name}.ipynb"
        chapters.append((name, json.loads(path.read_text())["cells"]))
    return chapters


def _markdown(text: str) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text: str, grading: dict | None = None) -> dict:
    return {"cell_type": "code", "metadata": {"nbgrader": grading} if grading else {},
            "source": text}


def _solution(text: str) -> dict:
    return _code(text, {"solution": True, "grade": False, "grade_id": "x-answer"})


def test_no_exercise_needs_a_call_the_course_has_not_taught_yet():
    assert order_violations(_course()) == []


def test_a_solution_that_uses_send_before_any_chapter_teaches_it_is_reported():
    # chapter 01 asks for send/recv, but only chapter 02 teaches them
    bad = [("01_x", [_markdown("# 01\n\nYou will build it from `dist.send` and `dist.recv`."),
                     _solution("def f(t):\n    dist.send(t, dst=1)\n    dist.recv(t, src=0)\n")]),
           ("02_y", [_markdown("`dist.send(tensor, dst)` and `dist.recv(tensor, src)`.")])]
    assert order_violations(bad) == [
        "01_x cell 1 (x-answer) uses dist.recv, dist.send before the course introduces it"]


def test_a_name_passed_as_a_value_counts_and_a_test_cell_introduces_nothing():
    cells = [_code("dist.P2POp", {"grade": True, "solution": False}),
             _solution("ops = [dist.P2POp(dist.isend, t, 1)]\n")]
    assert order_violations([("00_z", cells)]) == [
        "00_z cell 1 (x-answer) uses dist.P2POp, dist.isend before the course introduces it"]


def test_an_exercise_prompt_that_names_a_call_does_not_teach_it():
    cells = [_markdown("### Exercise 1 · Broadcast\n\nUse only `dist.send` and `dist.recv`."),
             _solution("def f(t):\n    dist.send(t, dst=1)\n    dist.recv(t, src=0)\n"),
             _markdown("Afterwards, `dist.send` is explained."),
             _solution("def g(t):\n    dist.send(t, dst=1)\n")]
    assert order_violations([("01_c", cells)]) == [
        "01_c cell 1 (x-answer) uses dist.recv, dist.send before the course introduces it"]


def test_names_taught_in_an_earlier_chapter_or_an_example_cell_are_allowed():
    good = [("00_a", [_code("import torch"), _markdown("`torch.distributed.send` sends")]),
            ("01_b", [_code("def g(t):\n    dist.recv(t, src=0)\n"),
                      _solution("def f(t):\n    dist.send(t, dst=1)\n    dist.recv(t, src=0)\n")])]
    assert order_violations(good) == []
