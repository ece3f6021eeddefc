"""`make check CHAPTER=...`: a student's saved notebook, run by nbgrader's Validator in a real
kernel, with one line per visible test."""

from __future__ import annotations

import json
import re
from pathlib import Path

from support.course_copy import ROOT, make

CHAPTER = "00_launching_ranks"  # two exercises, and the fastest chapter to run


def _answer(chapter: str, exercise: str) -> str:
    """The solution's code for an exercise (a grade_id), without nbgrader's markers."""
    solution = json.loads((ROOT / "solutions" / chapter / f"{chapter}.ipynb").read_text())
    cell = next(c for c in solution["cells"]
                if c["metadata"].get("nbgrader", {}).get("grade_id") == exercise)
    return re.sub(r"\s*### (BEGIN|END) SOLUTION", "", "".join(cell["source"]))


def _students_work(work: Path, chapter: str, answered: list[str],
                   wrong: dict[str, str] | None = None) -> Path:
    """``work/`` holding ``chapter`` with the exercises in ``answered`` solved, those in ``wrong``
    given that code instead, the rest left as stubs."""
    notebook = json.loads((ROOT / "notebooks" / chapter / f"{chapter}.ipynb").read_text())
    for cell in notebook["cells"]:
        exercise = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if exercise in answered:
            cell["source"] = _answer(chapter, exercise)
        elif exercise in (wrong or {}):
            cell["source"] = wrong[exercise]
    path = work / chapter / f"{chapter}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(notebook))
    return path


def test_check_reports_the_passing_and_the_failing_exercise(tmp_path):
    # join_group() answered, but wrongly: it never initialises a process group
    wrong = "def join_group():\n    return 0\n"
    _students_work(tmp_path / "work", CHAPTER, answered=["00-whoami"],
                   wrong={"00-join-group": wrong})
    done = make("check", "CHAPTER=00", f"WORK={tmp_path / 'work'}", timeout=300)
    lines = done.stdout.splitlines()
    assert any(line.startswith("  PASS  00-whoami-test (1 point): whoami() reports")
               for line in lines), done.stdout
    failing = next(i for i, line in enumerate(lines) if line.startswith("  FAIL  "))
    assert lines[failing].startswith("  FAIL  00-join-group-test (1 point): join_group()")
    # under the failing test: the test's message, then what the student's code raised, where
    assert lines[failing + 1] == "        CheckFailed: Your code failed when run on 4 ranks.", \
        done.stdout
    assert lines[failing + 2] == "        RankError: Ranks 0-3 raised:", done.stdout
    assert "ValueError: Default process group has not been initialized" in done.stdout
    assert "1 of 2 visible tests pass (1 of 2 points)" in done.stdout
    # make stops with status 2 whenever a command fails; the check's own status is 1
    assert done.returncode == 2 and "check] Error 1" in done.stderr


def test_check_names_the_chapters_when_it_cannot_tell_which_one(tmp_path):
    _students_work(tmp_path / "work", CHAPTER, answered=[])
    done = make("check", "CHAPTER=01", f"WORK={tmp_path / 'work'}")
    assert done.returncode != 0
    assert f"Which chapter is '01'? Use one of: {CHAPTER}" in done.stdout + done.stderr


# Whether an answer may lean on other cells, the same verdict as Validate and the grade, the
# status and the summary line when every test passes, and a failing test's message without the
# checks' source: tests/course/test_one_verdict.py (chapter 01, five students' notebooks).
