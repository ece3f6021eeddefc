"""Grading a class: plain serial ``nbgrader autograde`` against ``make grade``, in one run.

Usage: ``make bench-grade`` (or ``.venv/bin/python bench/grade_bench.py [STUDENTS]``).
Both grade the same chapter-00 submissions (half correct, half untouched); the script prints
seconds per submission for each and the ratio. Timings on a shared machine are noisy: the ratio,
measured in one run, is what to read.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "grader"), str(ROOT / "tests")]
import autograde  # noqa: E402

from support.class_factory import CHAPTER, _release, correct  # noqa: E402


def make_submissions(folder: Path, students: int) -> None:
    for i in range(students):
        nb = correct() if i % 2 == 0 else _release()
        path = folder / f"student{i:02d}" / CHAPTER / f"{CHAPTER}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)


def plain_nbgrader(submissions: Path, course: Path) -> None:
    """What an instructor would run by hand: one course folder, nbgrader autograde, serially."""
    shutil.copytree(ROOT / "solutions" / CHAPTER, course / "source" / CHAPTER)
    shutil.copytree(submissions, course / "submitted")
    (course / "nbgrader_config.py").write_text(
        autograde.JOB_CONFIG.format(cell_timeout=30))
    env = autograde._environment(course)
    for step in (["generate_assignment", CHAPTER, "--force"], ["autograde", CHAPTER, "--force"]):
        subprocess.run([sys.executable, "-m", "nbgrader", *step, "--log-level=ERROR"],
                       cwd=course, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def main() -> int:
    students = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        make_submissions(scratch / "class", students)
        start = time.perf_counter()
        plain_nbgrader(scratch / "class", scratch / "plain")
        plain = time.perf_counter() - start
        start = time.perf_counter()
        outcomes = autograde.grade_class(scratch / "class", scratch / "out", jobs=2, limit=300,
                                         db=scratch / "gradebook.db")
        ours = time.perf_counter() - start
    statuses = sorted({o.status for o in outcomes})
    print(f"{students} chapter-00 submissions ({', '.join(statuses)})")
    print(f"  nbgrader autograde, serial       : {plain / students:6.1f} s per submission")
    print(f"  make grade (2 jobs, sandboxed,   : {ours / students:6.1f} s per submission"
          f"   {plain / ours:.2f}x the speed")
    print("             with feedback and gradebook)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
