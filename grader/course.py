"""The course as nbgrader sees it: the chapters, the one nbgrader configuration, generate and
validate (``python -m grader generate|validate``).

``nbgrader validate`` exits 0 even when validation fails; ``validate`` here returns what went
wrong, so that the command can exit 1 and say which test cell of which chapter failed.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

GRADER = Path(__file__).resolve().parent
ROOT = GRADER.parent
SOLUTIONS = ROOT / "solutions"
NOTEBOOKS = ROOT / "notebooks"
INSTRUCTOR_DB = GRADER / "gradebook.db"
# The course's own settings for grading (the chapters' due dates)
COURSE_CONFIG = GRADER / "course.toml"

# Seconds one cell may run before it is interrupted, in Validate and make check (nbgrader's own
# default). Every commlab run in a test cell stops within commlab.checks.GRADING_TIMEOUT (8 s),
# so a hung cell is cut by commlab first; this is the backstop.
CELL_TIMEOUT = 30
# The same backstop when grading, where a test cell also runs the hidden cases (chapter 17's
# FullyShardedModule test: 7 runs, 29.6 s for a correct answer at the default --jobs on 2
# cores, where 30 s cut honest work): above what a cell's runs may take by their own limits
# (tests/chapters/test_solutions.py checks every chapter's cells against it). A submission's
# cells together stay within batch.Settings.limit.
GRADING_CELL_TIMEOUT = 120


# What `make setup` installs from, and the stamp it leaves in the environment when done.
PINS = ("requirements.txt", "requirements-dev.txt", "pyproject.toml")
STAMP = ".installed"


def environment_problem(prefix: Path | None = None) -> str | None:
    """Why this Python environment may not be the one the course's pins ask for, or None.

    `make grade` installs first when the pins are newer than the environment; a command run
    directly (a Slurm array task) must never install, since many tasks share one environment:
    it says what to run first instead. An environment without the stamp (the Docker image,
    conda) is taken as it is.
    """
    stamp = Path(prefix or sys.prefix) / STAMP
    if not stamp.exists():
        return None
    newer = [name for name in PINS if (ROOT / name).exists()
             and (ROOT / name).stat().st_mtime > stamp.stat().st_mtime]
    if not newer:
        return None
    return (f"The course's environment ({Path(prefix or sys.prefix)}) is older than "
            f"{', '.join(newer)}: run `make setup` once, on one machine, then grade again. "
            "(Grading never installs: on a cluster, every task shares the environment.)")


def chapters() -> list[str]:
    """Chapter names (``00_launching_ranks``, ...), from the folders of ``solutions/``."""
    return sorted(p.name for p in SOLUTIONS.iterdir()
                  if p.is_dir() and (p / f"{p.name}.ipynb").exists())


def nbgrader_config(root: Path = ROOT, db: Path | None = None, source: str = "solutions",
                    release: Path | str = "notebooks"):
    """The course's nbgrader configuration (grader/nbgrader_config.py, the one file instructors
    edit), pointed at another course root, gradebook or release folder when asked."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(GRADER)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.source_directory = source
    config.CourseDirectory.release_directory = str(release)
    if db is not None:
        config.CourseDirectory.db_url = f"sqlite:///{db}"
    config.Execute.timeout = CELL_TIMEOUT
    return config


def use_nbgrader_environment() -> None:
    """nbgrader runs a helper program (alembic) by name when it creates a gradebook: find it
    beside this Python. torch's C++ warnings on stderr would zero a passing test cell."""
    bin_dir = os.path.dirname(sys.executable)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def generate(names: list[str] | None = None, root: Path = ROOT, db: Path | None = None,
             release: Path | str = "notebooks", source: str = "solutions") -> None:
    """Run nbgrader's generate_assignment, in this process, for each chapter of the course at
    ``root``.

    Without ``db`` the gradebook nbgrader insists on is kept in a temporary folder: generating
    the student notebooks must not depend on, or change, any instructor's gradebook. Raises
    RuntimeError with nbgrader's log when a chapter cannot be generated.
    """
    from nbgrader.converters import GenerateAssignment
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    use_nbgrader_environment()
    with tempfile.TemporaryDirectory() as scratch:
        config = nbgrader_config(root, db or Path(scratch) / "gradebook.db", source, release)
        config.Application.log_level = "WARN"
        for name in names or chapters():
            coursedir = CourseDirectory(config=config)
            coursedir.assignment_id = name
            converter = GenerateAssignment(coursedir=coursedir, config=config)
            converter.force = True
            done = capture_log(converter)
            if not done["success"]:
                raise RuntimeError(f"nbgrader could not generate {name}:\n"
                                   f"{done.get('log', '')}{done.get('error', '')}")


def generate_into(folder: Path, names: list[str] | None = None) -> Path:
    """Generate the student notebooks of a copy of ``solutions/`` made in ``folder``; return the
    release folder (tests compare it with ``notebooks/``)."""
    import shutil

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

    from commlab.answers import prepare_notebook

    config = Config()
    config.Execute.timeout = CELL_TIMEOUT
    # the answers of each test as grading defines them (commlab.cells), as Validate does
    config.Execute.on_notebook_start = prepare_notebook
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
