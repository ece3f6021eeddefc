"""The student edition (`make student-edition`, the Docker image's student target): the course
without answers, hidden tests or gradebook, and still complete for a student: the licences and
how to cite, every file its README names, and all it takes to build the student's image
again."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.course_copy import ROOT, make

sys.path.insert(0, str(ROOT / "helpers" / "scripts"))
from student_edition import EDITION, LEFT_OUT  # noqa: E402

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
                   "helpers/scripts/check_notebook.py", "helpers/scripts/torch_build.sh",
                   "helpers/jupyter/student/labconfig/page_config.json"):
        assert (edition / needed).is_file(), needed


def test_student_edition_carries_the_licences_and_how_to_cite(edition):
    # MIT and CC BY 4.0 both ask that the notice travel with every copy
    for name in ("LICENSE", "LICENSE-CHAPTERS", "CITATION.cff"):
        assert (edition / name).read_bytes() == (ROOT / name).read_bytes(), name


def _tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    return listed.splitlines()


def _under(path: str, folders) -> bool:
    return any(path == f or path.startswith(f"{f}/") for f in folders)


def test_every_file_of_the_course_is_in_the_edition_or_left_out_for_a_reason():
    unplaced = [p for p in _tracked() if not _under(p, EDITION) and not _under(p, LEFT_OUT)]
    assert unplaced == [], "add each to EDITION or LEFT_OUT in helpers/scripts/student_edition.py"
    assert not set(EDITION) & set(LEFT_OUT)


def test_every_file_of_the_course_the_readme_names_is_in_the_edition(edition):
    """What the README names in `code` (LICENSE, the Dockerfile, helpers/...), the edition
    holds, unless it is one of the instructor's or maintainers' parts the edition leaves out."""
    tracked = set(_tracked())
    folders = {str(Path(p).parent) for p in tracked}
    named = set()
    for code in re.findall(r"`([^`\n]+)`", (edition / "README.md").read_text()):
        for word in re.split(r"[\s=,;:()\"']+", code):
            path = word.strip().rstrip(".").removeprefix("./").rstrip("/")
            if path in tracked or path in folders:
                named.add(path)
    assert {"LICENSE", "LICENSE-CHAPTERS", "CITATION.cff", "requirements.txt"} <= named
    missing = sorted(p for p in named if not _under(p, LEFT_OUT) and not (edition / p).exists())
    assert missing == []


def _dockerfile_paths() -> list[str]:
    """What the Dockerfile copies from the build's folder, and the course's files its steps
    name (helpers/...)."""
    text = re.sub(r"\\\n", " ", (ROOT / "Dockerfile").read_text())
    paths = []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            paths += [w for w in words[1:-1] if not w.startswith("--")]
    paths += re.findall(r"(?<![\w/])(?:/opt/course/)?(helpers/[\w/.-]+\w)", text)
    return sorted(set(paths))


def test_the_edition_holds_all_that_builds_the_students_image(edition, tmp_path):
    named = _dockerfile_paths()
    assert {".", "requirements.txt", "helpers/scripts/image_start.sh"} <= set(named), named
    # a pattern (requirements*.txt) names what the edition has of it, at least one file
    assert [p for p in named
            if not (any(edition.glob(p)) if "*" in p else (edition / p).exists())] == []
    assert (edition / "Dockerfile").read_bytes() == (ROOT / "Dockerfile").read_bytes()
    # the image's edition stage runs make student-edition on what it was given: the edition
    # exports itself again, whole
    again = tmp_path / "again"
    done = make("student-edition", f"DEST={again}", cwd=edition)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _files(again) == _files(edition)


def test_a_students_work_folders_stay_out_of_git_and_of_docker_builds(edition):
    """work/ (make lab's) and commlab-work/ (the README's docker run's) hold a student's
    answers: a git repository of the edition ignores them, and so does a docker build of it."""
    subprocess.run(["git", "init", "-q", str(edition)], check=True)
    for folder in ("work", "commlab-work"):
        (edition / folder / "01_broadcast").mkdir(parents=True)
        (edition / folder / "01_broadcast" / "01_broadcast.ipynb").write_text("{}")
    try:
        ignored = subprocess.run(
            ["git", "check-ignore", "work/01_broadcast/01_broadcast.ipynb",
             "commlab-work/01_broadcast/01_broadcast.ipynb", "notebooks/01_broadcast"],
            cwd=edition, capture_output=True, text=True).stdout.split()
        assert ignored == ["work/01_broadcast/01_broadcast.ipynb",
                           "commlab-work/01_broadcast/01_broadcast.ipynb"]
    finally:
        for folder in ("work", "commlab-work", ".git"):
            subprocess.run(["rm", "-rf", str(edition / folder)], check=True)
    # a bare name in .dockerignore leaves out that folder of the build's context
    dockerignore = (edition / ".dockerignore").read_text().split()
    assert {"work", "commlab-work", ".venv"} <= set(dockerignore)


def test_make_test_in_the_student_edition_points_to_make_check(edition):
    done = make("test", cwd=edition)
    assert done.returncode != 0
    assert "make check CHAPTER=" in done.stdout + done.stderr
