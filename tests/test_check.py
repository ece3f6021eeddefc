"""`make check CHAPTER=...`: a student's saved notebook, run by nbgrader's Validator in a real
kernel, with one line per visible test."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from support.course_copy import ROOT, VENV, make

CHAPTER = "00_launching_ranks"  # two exercises, and the fastest chapter to run


def _answer(exercise: str) -> str:
    """The solution's code for an exercise (a grade_id), without nbgrader's markers."""
    solution = json.loads((ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    cell = next(c for c in solution["cells"]
                if c["metadata"].get("nbgrader", {}).get("grade_id") == exercise)
    return re.sub(r"\s*### (BEGIN|END) SOLUTION", "", "".join(cell["source"]))


def _students_work(work: Path, answered: list[str], wrong: dict[str, str] | None = None) -> Path:
    """``work/`` holding chapter 00 with the exercises in ``answered`` solved, those in ``wrong``
    given that code instead, the rest left as stubs."""
    notebook = json.loads((ROOT / "notebooks" / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    for cell in notebook["cells"]:
        exercise = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if exercise in answered:
            cell["source"] = _answer(exercise)
        elif exercise in (wrong or {}):
            cell["source"] = wrong[exercise]
    path = work / CHAPTER / f"{CHAPTER}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(notebook))
    return path


def test_check_reports_the_passing_and_the_failing_exercise(tmp_path):
    incomplete = "def whoami():\n    return {'rank': dist.get_rank()}\n"
    _students_work(tmp_path / "work", answered=["00-join-group"],
                   wrong={"00-whoami": incomplete})
    done = make("check", "CHAPTER=00", f"WORK={tmp_path / 'work'}", timeout=300)
    lines = done.stdout.splitlines()
    failing = next(i for i, line in enumerate(lines) if line.startswith("  FAIL  "))
    assert lines[failing].startswith("  FAIL  00-whoami-test (1 point): whoami() reports")
    assert lines[failing + 1] == "        AssertionError: On rank 0 (world_size=4), whoami() " \
        "should be", done.stdout
    assert any(line.startswith("  PASS  00-join-group-test (1 point)") for line in lines)
    assert "1 of 2 visible tests pass (1 of 2 points)" in done.stdout
    # make stops with status 2 whenever a command fails; the check's own status is 1
    assert done.returncode == 2 and "check] Error 1" in done.stderr


def test_check_exits_0_when_every_visible_test_passes(tmp_path):
    _students_work(tmp_path / "work", answered=["00-whoami", "00-join-group"])
    done = subprocess.run([str(VENV / "bin" / "python"), "bin/check_notebook.py",
                           str(tmp_path / "work"), CHAPTER],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 of 2 visible tests pass (2 of 2 points)" in done.stdout


def test_check_names_the_chapters_when_it_cannot_tell_which_one(tmp_path):
    _students_work(tmp_path / "work", answered=[])
    done = make("check", "CHAPTER=01", f"WORK={tmp_path / 'work'}")
    assert done.returncode != 0
    assert f"Which chapter is '01'? Use one of: {CHAPTER}" in done.stdout + done.stderr
