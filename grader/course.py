"""The instructor's commands: generate the student notebooks, and validate them honestly.

    python grader/course.py generate            # solutions/ -> notebooks/, every chapter
    python grader/course.py validate            # solutions pass every test, stubs pass none

``nbgrader validate`` exits 0 even when validation fails; ``validate`` here exits 1 then, and
says which test cell of which chapter went wrong.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

GRADER = Path(__file__).resolve().parent
ROOT = GRADER.parent
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"


def chapters() -> list[str]:
    """Chapter names (``00_launching_ranks``, ...), from the folders of ``solutions/``."""
    return sorted(p.name for p in SOLUTIONS.iterdir()
                  if p.is_dir() and (p / f"{p.name}.ipynb").exists())


def generate(names: list[str] | None = None, root: Path = ROOT, db: Path | None = None,
             release: Path | None = None) -> None:
    """Run ``nbgrader generate_assignment`` for each chapter of the course at ``root``.

    Without ``db`` the gradebook nbgrader insists on is kept in a temporary folder: generating
    the student notebooks must not depend on, or change, any instructor's gradebook. ``release``
    sends the student notebooks elsewhere than ``notebooks/`` (when only the gradebook is
    wanted).
    """
    with tempfile.TemporaryDirectory() as scratch:
        options = [f"--CourseDirectory.root={root}",
                   f"--CourseDirectory.db_url=sqlite:///{db or Path(scratch) / 'gradebook.db'}"]
        if release is not None:
            options.append(f"--CourseDirectory.release_directory={release}")
        for name in names or chapters():
            subprocess.run(
                [sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force",
                 *options, "--log-level=WARN"],
                cwd=GRADER, check=True, env=nbgrader_environment())


def nbgrader_environment() -> dict[str, str]:
    """nbgrader runs helper programs (alembic) by name: find them beside this Python."""
    bin_dir = os.path.dirname(sys.executable)
    return dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))


def generate_into(folder: Path, names: list[str] | None = None) -> Path:
    """Generate the student notebooks of a copy of ``solutions/`` made in ``folder``; return the
    release folder (for comparing with ``notebooks/``)."""
    shutil.copytree(SOLUTIONS, folder / "solutions")
    generate(names, root=folder)
    return folder / "notebooks"


def validate(path: Path, invert: bool = False) -> list[str]:
    """Execute the notebook at ``path`` as nbgrader would; return what went wrong.

    Without ``invert``: every test cell must pass. With ``invert`` (a student notebook with
    stubs): no test cell may pass.
    """
    from nbgrader.validator import Validator
    from traitlets.config import Config

    config = Config()
    config.Execute.timeout = 30
    validator = Validator(config=config, invert=invert)
    results = validator.validate(str(path))
    problems = []
    for kind in ("type_changed", "changed", "failed", "passed"):
        for cell in results.get(kind, []):
            first_line = cell["source"].strip().splitlines()[0] if cell["source"].strip() else ""
            detail = cell.get("raw_error", "").strip().splitlines()[-1:] if kind == "failed" \
                else []
            problems.append(f"{path.name}: test cell {kind}: {first_line} {' '.join(detail)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["generate", "validate"])
    parser.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    args = parser.parse_args(argv)
    names = args.chapters or chapters()
    if args.command == "generate":
        generate(names)
        print(f"generated {len(names)} student notebooks in {NOTEBOOKS.relative_to(ROOT)}/")
        return 0
    problems = []
    for name in names:
        problems += validate(SOLUTIONS / name / f"{name}.ipynb")
        problems += validate(NOTEBOOKS / name / f"{name}.ipynb", invert=True)
    for problem in problems:
        print(problem)
    print(f"validated {len(names)} chapters: "
          f"{'all solutions pass and no stub passes' if not problems else 'PROBLEMS above'}")
    return 1 if problems else 0


if __name__ == "__main__":
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    sys.exit(main())
