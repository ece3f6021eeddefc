"""Grading a class: plain serial nbgrader against ``make grade``'s code path, in one run.

Usage: ``make bench-grade`` (runs with PYTHONPATH=.:tests). Both grade the same submissions, one
correct submission of every chapter. Plain nbgrader is what an instructor runs by hand:
``nbgrader generate_assignment`` and ``nbgrader autograde`` for each chapter, one after the
other. ``make grade``'s path runs with each --jobs count in BENCH_JOBS (default: 1, one per two
cores, one per core and one more); the fastest is written to .venv/grader-jobs, where
``make grade`` takes its default --jobs from. Timings on a shared machine are noisy: read the
ratio, measured in one run.

The batch's fixed cost (what a batch pays whatever its size: the course template, the first
kernels' start, the bookkeeping, the last feedback pages) comes from two batch sizes at the
fastest --jobs: the class, then the class twice over (a second student with the same
submissions). With ``T(n) = fixed + n x per_submission``, ``fixed = 2 T(n) - T(2n)``. A
worker writes one submission's feedback while it scores the next, so no sum of per-submission
phases gives it.

The CPU one submission costs is the machine's busy time while each grader runs (``/proc/stat``:
every process counts, the kernels and ranks each grader starts included, so run the bench on a
quiet machine), divided by the submissions it graded.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader import cli, course
from grader.trusted import batch
from support.class_factory import correct, write

STUDENT = "student"


def plain_nbgrader(submissions: Path, course_dir: Path,
                   chapters: list[str]) -> tuple[float, dict[str, float]]:
    """generate_assignment + autograde per chapter, serially; return seconds and scores."""
    from nbgrader.api import Gradebook

    shutil.copytree(course.SOLUTIONS, course_dir / "source")
    shutil.copytree(submissions, course_dir / "submitted")
    (course_dir / "nbgrader_config.py").write_text(
        "c = get_config()\nc.OverwriteCells.add_missing_cells = True\n")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               TORCH_CPP_LOG_LEVEL="ERROR")
    began = time.perf_counter()
    for chapter in chapters:
        for step in (["generate_assignment", chapter], ["autograde", chapter]):
            subprocess.run([sys.executable, "-m", "nbgrader", *step, "--force",
                            "--log-level=ERROR"], cwd=course_dir, env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - began
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        scores = {c: gb.find_submission(c, STUDENT).score for c in chapters}
    return seconds, scores


def busy_seconds() -> float:
    """CPU seconds the machine has been busy since it started (all processes, all cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def ours(submissions: Path, scratch: Path, jobs: int) -> batch.Batch:
    settings = batch.Settings(jobs=jobs, db=scratch / f"gradebook-{jobs}.db")
    began = busy_seconds()
    result = batch.grade_class(submissions, scratch / f"out-{jobs}", settings)
    result.seconds["cpu"] = busy_seconds() - began
    return result


# Each submission's phases: waiting for the worker's scoring kernel, reading the notebook,
# taking the submission and the chapter's definitions, the test cells, the feedback page.
PHASES = ["scoring wait", "sanitize", "scoring set-up", "tests", "feedback"]


def report(result: batch.Batch, jobs: int) -> None:
    """Print each submission's phases."""
    names = PHASES
    print(f"\n  make grade, --jobs {jobs}: phases per submission (seconds)")
    print("    chapter                  status     score  " + "  ".join(f"{n:>14}" for n in names))
    for o in result.outcomes:
        print(f"    {o.chapter:<24} {o.status.value:<10} {o.score:g}/{o.max_score:g}  "
              + "  ".join(f"{o.phases.get(n, 0):14.2f}" for n in names))
    print(f"    batch: {result.seconds['total']:.1f} s; template "
          f"{result.seconds['template']:.1f} s, bookkeeping "
          f"{result.seconds['bookkeeping']:.1f} s")


def main() -> int:
    cores = cli.usable_cpus()
    candidates = sorted({1, max(1, cores // 2), cores, cores + 1})
    if os.environ.get("BENCH_JOBS"):
        candidates = [int(j) for j in os.environ["BENCH_JOBS"].split()]
    chapters = course.chapters()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for chapter in chapters:
            write(scratch / "class", STUDENT, correct(chapter), chapter)
        began = busy_seconds()
        plain, plain_scores = plain_nbgrader(scratch / "class", scratch / "plain", chapters)
        plain_cpu = busy_seconds() - began
        runs = {jobs: ours(scratch / "class", scratch, jobs) for jobs in candidates}
        best = min(runs, key=lambda j: runs[j].seconds["total"])
        for chapter in chapters:
            for student in (STUDENT, f"{STUDENT}-2"):
                write(scratch / "twice", student, correct(chapter), chapter)
        (scratch / "twice-run").mkdir()
        twice = ours(scratch / "twice", scratch / "twice-run", best)
    print(f"{len(chapters)} chapters, one correct submission each, {cores} cores")
    print(f"  plain nbgrader, serial: {plain:.1f} s; scores "
          + ", ".join(f"{c[:2]} {s:g}" for c, s in plain_scores.items()))
    for jobs, result in runs.items():
        report(result, jobs)
    cli.JOBS_FILE.write_text(f"{best} {cli.usable_cpus()}\n")
    result = runs[best]
    graded = result.outcomes + twice.outcomes
    full = all(o.score == o.max_score and o.status.value == "graded" for o in graded)
    single, double = result.seconds["total"], twice.seconds["total"]
    fixed = 2 * single - double
    per_submission = (double - single) / len(chapters)
    submissions = 100 * len(chapters)
    # the fixed cost once, then every further submission on 16 / cores as many cores
    projected = fixed + submissions * per_submission * cores / 16
    print(f"\n  fastest --jobs here: {best} (written to {cli.JOBS_FILE})")
    print(f"  every correct submission at full marks: {'yes' if full else 'NO'}")
    print(f"  the class twice over ({2 * len(chapters)} submissions), --jobs {best}: "
          f"{double:.1f} s")
    print(f"  fixed cost of the batch: {fixed:.1f} s (2 x {single:.1f} s - {double:.1f} s); "
          f"each further submission: {per_submission:.2f} s")
    print(f"  projected, 100 students x {len(chapters)} chapters on 16 cores: "
          f"{projected / 60:.1f} min (fixed cost + {submissions} x each further submission"
          f" x {cores} / 16)")
    for jobs, run in runs.items():
        print(f"  make grade --jobs {jobs}: {run.seconds['total']:.1f} s")
    ours_cpu = result.seconds["cpu"] / len(chapters)
    print(f"  CPU seconds per submission: make grade {ours_cpu:.2f} s, plain nbgrader "
          f"{plain_cpu / len(chapters):.2f} s ({plain_cpu / result.seconds['cpu']:.2f}x less)")
    print(f"plain nbgrader / make grade (--jobs {best}, seconds): "
          f"{plain / result.seconds['total']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
