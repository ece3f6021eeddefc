"""The instructor's commands (``make grade|generate|validate`` run them):

    python -m grader grade SUBMISSIONS OUT [--jobs N] [--limit S] [--cell-timeout S]
                                           [--no-sandbox] [--keep] [--shard K/N]
                                           [--lms {auto,canvas,moodle,blackboard,folders}]
                                           [--roster FILE]
    python -m grader merge OUT SHARD_OUT...   # combine the outputs of --shard runs
    python -m grader generate [CHAPTER...]    # solutions/ -> notebooks/
    python -m grader validate [CHAPTER...]    # solutions pass every test, stubs pass none
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from . import course

# Written by `make bench-grade`: the number of jobs that graded fastest on this machine.
JOBS_FILE = course.ROOT / ".venv" / "grader-jobs"


def default_jobs(measured: Path = JOBS_FILE) -> int:
    """What the bench found fastest here; else one job per two cores (each submission's
    ranks keep about two cores busy), at least one."""
    try:
        return max(1, int(measured.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return max(1, (os.cpu_count() or 2) // 2)


def _shard(text: str) -> tuple[int, int]:
    try:
        k, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError("--shard takes K/N, e.g. 3/8") from None
    if not 1 <= k <= n:
        raise argparse.ArgumentTypeError(f"--shard {text}: K must be between 1 and N")
    return k, n


def _grade_parser(verbs) -> None:
    grade = verbs.add_parser("grade", help="autograde a class")
    grade.add_argument("submissions", type=Path)
    grade.add_argument("out", type=Path)
    grade.add_argument("--jobs", type=int, default=None,
                       help="submissions graded at once (default: what `make bench-grade` "
                            "found fastest here, else one per two cores)")
    grade.add_argument("--limit", type=float, default=300,
                       help="seconds one submission may take in all (default 300)")
    grade.add_argument("--cell-timeout", type=int, default=course.CELL_TIMEOUT,
                       help=f"seconds one cell may run (default {course.CELL_TIMEOUT})")
    grade.add_argument("--no-sandbox", action="store_true",
                       help="run student code without namespaces (e.g. inside a container "
                            "already started with --network none)")
    grade.add_argument("--keep", action="store_true",
                       help="keep each submission's log and graded notebook in OUT/kept/")
    grade.add_argument("--shard", type=_shard, default=(1, 1), metavar="K/N",
                       help="grade only the K-th of N slices (then `merge` the N outputs)")
    grade.add_argument("--lms", default="auto",
                       choices=["auto", "canvas", "moodle", "blackboard", "folders"])
    grade.add_argument("--roster", type=Path, help="students, one a line: those without a "
                       "submission get `missing`")
    grade.add_argument("--gradebook", type=Path, default=course.INSTRUCTOR_DB,
                       help="the instructor's gradebook (default grader/gradebook.db)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__.split("\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    _grade_parser(verbs)
    merge = verbs.add_parser("merge", help="combine --shard outputs into one OUT")
    merge.add_argument("out", type=Path)
    merge.add_argument("parts", type=Path, nargs="*", help="the shards' OUT folders "
                       "(default: OUT itself, to record its results in the gradebook again)")
    merge.add_argument("--gradebook", type=Path, default=course.INSTRUCTOR_DB)
    for verb in ("generate", "validate"):
        sub = verbs.add_parser(verb)
        sub.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    return parser


def grade(args) -> int:
    from tqdm import tqdm

    from .batch import NotWritable, Settings, grade_class
    from .intake import IntakeError
    from .sandbox import available, not_available_message

    use_sandbox = False if args.no_sandbox else available()
    if not args.no_sandbox and not use_sandbox:
        print(f"warning: {not_available_message()}", file=sys.stderr)
    bar = tqdm(unit="submission", desc="grading", file=sys.stderr)

    def done(outcome) -> None:
        bar.update()
        bar.set_postfix_str(f"{outcome.student}/{outcome.chapter}: {outcome.status.value}")

    settings = Settings(jobs=args.jobs or default_jobs(), limit=args.limit,
                        cell_timeout=args.cell_timeout, sandbox=use_sandbox,
                        db=args.gradebook, keep=args.keep, shard=args.shard, lms=args.lms,
                        roster=args.roster, on_done=done)
    try:
        batch = grade_class(args.submissions, args.out, settings)
    except (IntakeError, NotWritable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.close()
    for skipped in batch.skipped:
        print(f"skipped {skipped.name}: {skipped.why}", file=sys.stderr)
    code = _summary(batch.outcomes, args.out, batch.gradebook_error)
    if batch.kernel_error:
        print(f"error: {batch.kernel_error}", file=sys.stderr)
        return 1
    return code


def _summary(outcomes, out: Path, gradebook_error: str | None) -> int:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status.value] = counts.get(o.status.value, 0) + 1
    print(f"graded {len(outcomes)} submissions: "
          + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
          + f"; see {out / 'grades.csv'}")
    if gradebook_error:
        print(f"error: {gradebook_error}", file=sys.stderr)
        return 1
    return 0


def merge(args) -> int:
    """grades.csv, notes.json, results.json and the feedback of several shards in one OUT,
    then their scores in the instructor's gradebook."""
    import tempfile

    from . import gradebook

    parts = args.parts or [args.out]
    outcomes, notes, shards = [], [], set()
    for part in parts:
        shard, part_notes, part_outcomes = gradebook.read_results(part)
        shards.add(shard)
        outcomes += part_outcomes
        notes += [n for n in part_notes if n not in notes]
        if part.resolve() != args.out.resolve() and (part / "feedback").is_dir():
            shutil.copytree(part / "feedback", args.out / "feedback", dirs_exist_ok=True)
    total = {int(s.split("/")[1]) for s in shards}
    if len(total) != 1 or len(shards) != total.pop():
        print(f"warning: the parts are shards {sorted(shards)}: some shard is missing or "
              "counted twice", file=sys.stderr)
    gradebook.write_sheets(args.out, outcomes, notes)
    course.use_nbgrader_environment()
    with tempfile.TemporaryDirectory() as scratch:
        template = gradebook.make_template(sorted({o.chapter for o in outcomes}), Path(scratch))
        try:
            gradebook.record(outcomes, args.gradebook, template, Path(scratch))
        except gradebook.GradebookNotUpdated as exc:
            return _summary(outcomes, args.out, str(exc))
    return _summary(outcomes, args.out, None)


def generate_or_validate(args) -> int:
    names = args.chapters or course.chapters()
    if args.verb == "generate":
        course.generate(names)
        print(f"generated {len(names)} student notebooks in "
              f"{course.NOTEBOOKS.relative_to(course.ROOT)}/")
        return 0
    problems = []
    for name in names:
        problems += course.validate(course.SOLUTIONS / name / f"{name}.ipynb")
        problems += course.validate(course.NOTEBOOKS / name / f"{name}.ipynb", invert=True)
    for problem in problems:
        print(problem)
    print(f"validated {len(names)} chapters: "
          f"{'all solutions pass and no stub passes' if not problems else 'PROBLEMS above'}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    args = _parser().parse_args(argv)
    if args.verb == "grade":
        return grade(args)
    if args.verb == "merge":
        return merge(args)
    return generate_or_validate(args)
