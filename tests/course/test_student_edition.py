"""The student edition (`make student-edition`, the Docker image's student target): the course
without answers, hidden tests or gradebook, and still complete for a student."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.course_copy import ROOT, make

SECRETS = ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS")


@pytest.fixture(scope="module")
def edition(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("edition") / "course"
    done = make("student-edition", f"DEST={dest}")
    assert done.returncode == 0, done.stdout + done.stderr
    return dest


def _files(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())


def test_student_edition_holds_no_solution_hidden_test_or_gradebook(edition):
    files = _files(edition)
    assert files
    assert [f for f in files if {"solutions", "grader", "tests"} & set(f.parts)] == []
    assert [f for f in files if "gradebook" in f.name] == []
    assert not (edition / "requirements-dev.txt").exists()  # the maintainers' test tools
    leaks = [(str(f), secret) for f in files for secret in SECRETS
             if secret in (edition / f).read_text(errors="replace")]
    assert leaks == []


def test_student_edition_has_every_chapter_the_helper_and_the_students_commands(edition):
    chapters = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    assert sorted(p.name for p in (edition / "notebooks").iterdir()) == chapters
    for chapter in chapters:
        released = ROOT / "notebooks" / chapter / f"{chapter}.ipynb"
        assert (edition / "notebooks" / chapter / f"{chapter}.ipynb").read_bytes() == \
            released.read_bytes()
    for needed in ("Makefile", "requirements.txt", "pyproject.toml", "helpers/commlab/__init__.py",
                   "helpers/scripts/install_requirements.sh", "helpers/scripts/workspace.py",
                   "helpers/scripts/check_notebook.py"):
        assert (edition / needed).is_file(), needed


def test_make_test_in_the_student_edition_points_to_make_check(edition):
    done = make("test", cwd=edition)
    assert done.returncode != 0
    assert "make check CHAPTER=" in done.stdout + done.stderr
