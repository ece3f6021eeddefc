"""The student's workspace: work/ is filled from notebooks/ without overwriting, git ignores it,
and the maintainers' `make test` never reads it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

from support.course_copy import ROOT, VENV, make, tracked_copy

_SPEC = importlib.util.spec_from_file_location("workspace",
                                               ROOT / "helpers" / "scripts" / "workspace.py")
workspace = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(workspace)

RELEASE = ROOT / "notebooks"
CHAPTER = "00_launching_ranks"


def _save_a_students_notebook(work: Path) -> Path:
    """A chapter-00 notebook as a student leaves it: an answer typed in, outputs saved."""
    path = work / CHAPTER / f"{CHAPTER}.ipynb"
    notebook = json.loads((RELEASE / CHAPTER / f"{CHAPTER}.ipynb").read_text())
    answer = next(c for c in notebook["cells"]
                  if c["metadata"].get("nbgrader", {}).get("solution"))
    answer["source"] = "def whoami():\n    return {'rank': 0}\n"
    answer["outputs"] = [{"name": "stdout", "output_type": "stream", "text": "saved\n"}]
    answer["execution_count"] = 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook))
    return path


def test_an_empty_workspace_gets_every_file_of_the_release(tmp_path):
    workspace.fill(RELEASE, tmp_path / "work")
    released = workspace.release_files(RELEASE)
    assert released and workspace.release_files(tmp_path / "work") == released
    for relative in released:
        assert (tmp_path / "work" / relative).read_bytes() == (RELEASE / relative).read_bytes()


def test_filling_again_keeps_the_students_notebook_and_restores_a_deleted_one(tmp_path):
    work = tmp_path / "work"
    workspace.fill(RELEASE, work)
    edited = _save_a_students_notebook(work)
    mine = edited.read_bytes()
    deleted = work / "01_broadcast" / "01_broadcast.ipynb"
    deleted.unlink()
    assert workspace.fill(RELEASE, work) == [deleted.relative_to(work)]
    assert edited.read_bytes() == mine
    assert deleted.read_bytes() == (RELEASE / "01_broadcast" / "01_broadcast.ipynb").read_bytes()


def test_git_ignores_the_workspace():
    notebook = f"work/{CHAPTER}/{CHAPTER}.ipynb"
    done = subprocess.run(["git", "check-ignore", "--no-index", notebook], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.stdout.strip() == notebook


def test_make_test_collects_nothing_from_the_workspace(tmp_path):
    course = tracked_copy(tmp_path / "course")
    _save_a_students_notebook(course / "work")
    done = make("test", f"VENV={VENV}", "TEST_WORKERS=0", "PYTEST_ARGS=--collect-only",
                cwd=course)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert any(line.startswith("solutions/") for line in collected)  # nbval did collect
    assert [line for line in collected if "work/" in line] == []


def test_notebook_tests_pass_while_a_student_has_saved_work(tmp_path):
    # these three failed as soon as a student saved a notebook in notebooks/
    course = tracked_copy(tmp_path / "course")
    _save_a_students_notebook(course / "work")
    chosen = "exactly_what_nbgrader_generates or leaks_no_answer or every_chapter_has"
    done = make("test", f"VENV={VENV}", "TEST_WORKERS=0",  # in this worker, which says deselected
                f"PYTEST_ARGS=tests/course/test_notebooks.py -k '{chosen}'",
                cwd=course)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "deselected" in done.stdout
