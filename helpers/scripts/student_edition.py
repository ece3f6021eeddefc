"""Export the student edition: the course as students get it, without the answers.

    python helpers/scripts/student_edition.py DEST          # make student-edition DEST=...

``EDITION`` is the one list of what a student gets, ``LEFT_OUT`` of what a student does not,
each with the reason. The Docker image's ``student`` target is built from this export (its
/opt/course), and the export builds that image again: it holds the Dockerfile and everything
the Dockerfile copies. tests/course/test_student_edition.py scans it: no ``solutions/`` (answers
and hidden tests), no ``grader/`` (gradebook), no maintainers' tests, and every file of the
course that its README names.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

EDITION = (
    "README.md",
    "docs",  # the course's documentation by reader, which the README links to
    "LICENSE",  # the code's licence (MIT), which asks to travel with every copy
    "LICENSE-CHAPTERS",  # the chapters' (CC BY 4.0), likewise
    "CITATION.cff",
    "Makefile",
    "requirements.txt",
    "pyproject.toml",
    "environment.yml",
    ".gitignore",
    "Dockerfile",  # the student's image, built from this edition as from the whole course
    ".dockerignore",  # keeps .venv and the student's work (work/, commlab-work/) out of it
    "helpers/scripts/install_requirements.sh",  # make setup, and the image's environment
    "helpers/scripts/torch_build.sh",  # make setup: which torch build
    "helpers/scripts/workspace.py",  # make lab
    "helpers/scripts/check_notebook.py",  # make check
    "helpers/scripts/image_user.sh",  # the image's user
    "helpers/scripts/image_start.sh",  # the image's start: work folder, Lab or a hub's server
    "helpers/scripts/student_edition.py",  # the image's edition stage exports it again
    "helpers/jupyter",  # Lab's and nbgrader's settings for a student's server
    "helpers/commlab",  # the course's helper package
    "notebooks",  # the chapters with exercises to fill in (nbgrader's release)
)

# What the whole course has besides: the instructor's and the maintainers' (the edition's
# Makefile says so when make test or make site is asked for).
LEFT_OUT = {
    "solutions": "the answers and hidden tests (nbgrader's source)",
    "grader": "the autograder and its gradebook",
    "tests": "the maintainers' tests",
    "tools": "the maintainers' tools (make execute, make baselines, CI's test tools)",
    "requirements-dev.txt": "the maintainers' test tools",
    "bench": "the maintainers' benchmarks",
    ".ci": "the maintainers' continuous integration",
    "hub": "a class's JupyterHub, which the instructor runs",
    "helpers/site": "the course's website, built from solutions/",
}

# Build and editor leftovers a checkout may hold inside the listed folders.
LEFTOVERS = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".ipynb_checkpoints")


def export(dest: Path, root: Path = ROOT) -> list[Path]:
    """Copy the student edition of the course at ``root`` into ``dest``; return its files."""
    if dest.exists() and any(dest.iterdir()):
        raise SystemExit(f"{dest} is not empty: give a new folder")
    for name in EDITION:
        source, target = root / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=LEFTOVERS)
        else:
            shutil.copy2(source, target)
    return sorted(p.relative_to(dest) for p in dest.rglob("*") if p.is_file())


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python helpers/scripts/student_edition.py DEST")
        return 2
    files = export(Path(argv[0]))
    print(f"student edition: {len(files)} files in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
