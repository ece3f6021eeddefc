"""`make check CHAPTER=...`: a student's saved notebook, run by nbgrader's Validator in a real
kernel, with one line per visible test."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from support.course_copy import ROOT, VENV, make

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


def test_check_exits_0_when_every_visible_test_passes(tmp_path):
    # chapter 01: chapter 00's join_group test can print gloo's connection errors under load
    chapter = "01_broadcast"
    _students_work(tmp_path / "work", chapter,
                   answered=["01-my-broadcast", "01-share-initial-weights"])
    done = subprocess.run([str(VENV / "bin" / "python"), "helpers/scripts/check_notebook.py",
                           str(tmp_path / "work"), chapter],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 of 2 visible tests pass (4 of 4 points)" in done.stdout


def test_check_names_the_chapters_when_it_cannot_tell_which_one(tmp_path):
    _students_work(tmp_path / "work", CHAPTER, answered=[])
    done = make("check", "CHAPTER=01", f"WORK={tmp_path / 'work'}")
    assert done.returncode != 0
    assert f"Which chapter is '01'? Use one of: {CHAPTER}" in done.stdout + done.stderr


# Whether an answer may lean on other cells, and the same verdict as Validate and the grade:
# tests/course/test_one_verdict.py.


def test_a_failing_test_shows_its_message_not_the_checks_source(tmp_path):
    # the right weights, sent with send/recv instead of the broadcast the exercise asks for
    wrong = ("def share_initial_weights(model_state, src=0):\n"
             "    for tensor in model_state.values():\n"
             "        if dist.get_rank() == src:\n"
             "            for rank in range(dist.get_world_size()):\n"
             "                if rank != src:\n"
             "                    dist.send(tensor, rank)\n"
             "        else:\n"
             "            dist.recv(tensor, src)\n")
    chapter = "01_broadcast"
    _students_work(tmp_path / "work", chapter, answered=["01-my-broadcast"],
                   wrong={"01-share-initial-weights": wrong})
    done = subprocess.run([str(VENV / "bin" / "python"), "helpers/scripts/check_notebook.py",
                           str(tmp_path / "work"), chapter],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    failing = next(i for i, line in enumerate(lines) if line.startswith("  FAIL  "))
    assert lines[failing].startswith("  FAIL  01-share-initial-weights-test"), done.stdout
    assert lines[failing + 1] == (
        "        CheckFailed: On rank 0 (world_size=4, src=0, sizes=(4, 3)), your code should "
        "call dist.broadcast, but it made: send."), done.stdout
    assert "checks.py" not in done.stdout and "raise CheckFailed" not in done.stdout
