"""The instructor's commands (``make grade|generate|validate`` run them):

    python -m grader grade SUBMISSIONS OUT [--jobs N] [--limit S] [--cell-timeout S]
                                           [--no-sandbox] [--keep] [--shard K/N]
                                           [--fresh-outputs]
                                           [--lms {auto,exchange,canvas,moodle,blackboard,folders}]
                                           [--roster FILE] [--due TIME] [--take on-time|newest]
    python -m grader merge OUT SHARD_OUT... [--partial]   # combine the outputs of --shard runs
    python -m grader export --lms {canvas,moodle,blackboard} OUT [--missing empty|zero]
    python -m grader lti post OUT [--dry-run] [--missing empty|zero] [--config FILE]
    python -m grader lti roster [--config FILE] > roster.csv   # the LMS's class list (NRPS)
    python -m grader lti jwk [--config FILE]   # the tool's public key, for the LMS
    python -m grader collect DEST [--exchange DIR] [--course ID]   # nbgrader's inbound -> DEST
    python -m grader release-feedback OUT [--exchange DIR] [--course ID]  # pages -> students
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

# Written by `make bench-grade`: "JOBS CPUS", the number of jobs that graded fastest with that
# many CPUs.
JOBS_FILE = course.ROOT / ".venv" / "grader-jobs"
# What one job holds at its peak: a student's kernel, a scoring kernel and their ranks, each
# with torch (measured: about 1.5 GB for a chapter's 4-rank tests, and some to spare).
MEMORY_PER_JOB = 2 * 2**30


def usable_cpus() -> int:
    """The CPUs this process may use: its affinity, and under Slurm the task's allocation."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cpus = os.cpu_count() or 1
    allocated = os.environ.get("SLURM_CPUS_PER_TASK")
    if allocated and allocated.isdigit():
        cpus = min(cpus, int(allocated))
    return max(1, cpus)


def usable_memory() -> int:
    """Bytes this process may fill: what is free, and under Slurm the job's allocation."""
    import psutil

    free = psutil.virtual_memory().available
    per_node = os.environ.get("SLURM_MEM_PER_NODE")
    per_cpu = os.environ.get("SLURM_MEM_PER_CPU")
    if per_node and per_node.isdigit():
        free = min(free, int(per_node) * 2**20)
    elif per_cpu and per_cpu.isdigit():
        free = min(free, int(per_cpu) * 2**20 * usable_cpus())
    return free


def default_jobs(measured: Path = JOBS_FILE) -> int:
    """Jobs for the CPUs this process may use: as many per CPU as the bench found fastest here,
    else one per CPU and one more (what it finds on 2 cores: a submission leaves its CPUs
    idle while its kernel starts, its ranks meet and its feedback page is written, so one job
    per CPU leaves them idle too); no more than the memory holds, at least one."""
    cpus = usable_cpus()
    jobs = cpus + 1
    try:
        fastest, cpus_then = (int(x) for x in measured.read_text().split()[:2])
        jobs = round(cpus * fastest / cpus_then)
    except (OSError, ValueError, ZeroDivisionError):
        pass
    return max(1, min(jobs, usable_memory() // MEMORY_PER_JOB))


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
                       help="submissions graded at once (default: for the CPUs this process "
                            "may use, as many per CPU as `make bench-grade` found fastest, else "
                            "one per CPU and one more, within the memory)")
    grade.add_argument("--limit", type=float, default=300,
                       help="seconds one submission may take in all (default 300)")
    grade.add_argument("--cell-timeout", type=int, default=course.GRADING_CELL_TIMEOUT,
                       help=f"seconds one cell may run (default {course.GRADING_CELL_TIMEOUT})")
    grade.add_argument("--no-sandbox", action="store_true",
                       help="run student code without namespaces (e.g. inside a container "
                            "already started with --network none)")
    grade.add_argument("--keep", action="store_true",
                       help="keep each submission's grading log in OUT/kept/")
    grade.add_argument("--fresh-outputs", action="store_true",
                       help="run each student's notebook again (sandboxed, without its test "
                            "cells) for fresh outputs on the feedback pages: twice the work "
                            "(default: the pages show the outputs the notebooks were handed in "
                            "with)")
    grade.add_argument("--shard", type=_shard, default=(1, 1), metavar="K/N",
                       help="grade only the K-th of N slices (then `merge` the N outputs)")
    grade.add_argument("--lms", default="auto",
                       choices=["auto", "exchange", "canvas", "moodle", "blackboard", "folders"])
    grade.add_argument("--roster", type=Path, help="students, one a line: those without a "
                       "submission get `missing`; those not on it are named")
    grade.add_argument("--due", metavar="TIME",
                       help="the due date of every chapter graded (ISO 8601 with its time zone, "
                            "2026-12-01T23:59:00+01:00): submissions through nbgrader's exchange "
                            "handed in later are marked late (default: grader/course.toml's "
                            "[due])")
    grade.add_argument("--take", choices=["on-time", "newest"], default="on-time",
                       help="of a student's submissions of a chapter through the exchange: "
                            "the newest on time (default), or the newest")
    grade.add_argument("--gradebook", type=Path, default=course.INSTRUCTOR_DB,
                       help="the instructor's gradebook (default grader/gradebook.db)")


def _lti_parser(verbs) -> None:
    lti = verbs.add_parser("lti", help="grades back and the class list through LTI 1.3 "
                           "(docs/lms.md)")
    what = lti.add_subparsers(dest="lti_verb", required=True)
    post = what.add_parser("post", help="post a graded class's scores to the LMS's gradebook")
    post.add_argument("out", type=Path, help="a grading run's (or a merge's) OUT")
    post.add_argument("--dry-run", action="store_true",
                      help="say what would be posted and created, change nothing")
    post.add_argument("--missing", choices=["empty", "zero"], default="empty",
                      help="a roster student who handed nothing in: nothing posted (default) "
                           "or 0")
    roster = what.add_parser("roster", help="the LMS's learners as a --roster file, on stdout")
    jwk = what.add_parser("jwk", help="the tool's public key as the JWK the LMS asks for")
    for sub in (post, roster, jwk):
        sub.add_argument("--config", type=Path, default=None,
                         help="the LTI settings (default grader/lti.toml, then the "
                              "environment's COMMLAB_LTI_*)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__.split("\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    _grade_parser(verbs)
    merge = verbs.add_parser("merge", help="combine --shard outputs into one OUT")
    merge.add_argument("out", type=Path)
    merge.add_argument("parts", type=Path, nargs="*", help="the shards' OUT folders "
                       "(default: OUT itself, to record its results in the gradebook again)")
    merge.add_argument("--gradebook", type=Path, default=course.INSTRUCTOR_DB)
    merge.add_argument("--partial", action="store_true",
                       help="merge what is there even if slices are missing, doubled, "
                            "unfinished or of another grading (each is named)")
    export = verbs.add_parser("export", help="the LMS's import file of a graded class's scores")
    export.add_argument("out", type=Path, help="a grading run's (or a merge's) OUT")
    export.add_argument("--lms", required=True, choices=["canvas", "moodle", "blackboard"])
    export.add_argument("--missing", choices=["empty", "zero"], default="empty",
                        help="a roster student who handed nothing in: an empty cell (the LMS "
                             "keeps what it has) or 0 (default: empty)")
    export.add_argument("--to", type=Path, help="the file to write (default: "
                        "OUT/<lms>-grades.csv)")
    _lti_parser(verbs)
    for verb in ("generate", "validate"):
        sub = verbs.add_parser(verb)
        sub.add_argument("chapters", nargs="*", help="chapter names (default: all)")
    for verb, what in (("collect", "copy what nbgrader's exchange received into DEST"),
                       ("release-feedback", "the feedback pages of OUT back through nbgrader's "
                                            "exchange, each to the student who handed it in")):
        sub = verbs.add_parser(verb, help=what)
        sub.add_argument("folder", type=Path, metavar="DEST" if verb == "collect" else "OUT")
        sub.add_argument("--exchange", type=Path,
                         default=Path(os.environ.get("NBGRADER_EXCHANGE",
                                                     "/srv/nbgrader/exchange")),
                         help="the exchange's folder (default: $NBGRADER_EXCHANGE, else "
                              "/srv/nbgrader/exchange)")
        sub.add_argument("--course", default=os.environ.get("COMMLAB_COURSE_ID", "commlab"),
                         help="nbgrader's course id (default: $COMMLAB_COURSE_ID, else commlab)")
    return parser


def collect_submissions(args) -> int:
    from .intake import IntakeError
    from .intake.exchange import copy_inbound

    try:
        done = copy_inbound(args.exchange, args.course, args.folder)
    except IntakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.folder}: {done.copied} new submission{'s' if done.copied != 1 else ''} "
          f"from {args.exchange / args.course / 'inbound'}, {done.kept} already there; grade "
          f"them with make grade SUBMISSIONS={args.folder} OUT=...")
    for rel in done.changed:
        print(f"  changed in the exchange after it was collected, kept as collected: {rel}")
    return 0


def release_feedback(args) -> int:
    from .trusted.exchange_feedback import ReleaseError, release

    if not (args.folder / "results.json").exists():
        print(f"error: {args.folder} holds no results.json: give the OUT of `make grade`",
              file=sys.stderr)
        return 2
    course.use_nbgrader_environment()
    try:
        done = release(args.folder, args.exchange, args.course)
    except ReleaseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in done.not_released:
        print(f"not released: {line}", file=sys.stderr)
    students = len({student for student, _ in done.pages})
    print(f"released {len(done.pages)} feedback page{'s' if len(done.pages) != 1 else ''} "
          f"to {students} student{'s' if students != 1 else ''} through "
          f"{args.exchange / args.course / 'feedback'}: each fetches her own in the "
          "Assignments panel (Fetch Feedback)")
    return 0


def grade(args) -> int:
    from tqdm import tqdm

    from .intake import IntakeError
    from .sandboxed.namespaces import available, not_available_message
    from .trusted.batch import NotWritable, Settings, grade_class

    problem = course.environment_problem()
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
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
                        roster=args.roster, on_done=done, fresh_outputs=args.fresh_outputs,
                        due=args.due, take=args.take)
    try:
        batch = grade_class(args.submissions, args.out, settings)
    except (IntakeError, NotWritable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.close()
    for skipped in batch.skipped:
        print(f"skipped {skipped.name}: {skipped.why}", file=sys.stderr)
    if batch.unlisted:
        from .intake.downloads import unlisted_warning

        print(f"warning: {unlisted_warning(batch.unlisted)}", file=sys.stderr)
    code = _summary(batch.outcomes, args.out, batch.gradebook_error)
    if batch.kernel_error:
        print(f"error: {batch.kernel_error}", file=sys.stderr)
        return 1
    return code


def _summary(outcomes, out: Path, gradebook_error: str | None) -> int:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status.value] = counts.get(o.status.value, 0) + 1
    late = sum(1 for o in outcomes if o.late)
    print(f"graded {len(outcomes)} submissions: "
          + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
          + (f" ({late} handed in late)" if late else "")
          + f"; see {out / 'grades.csv'}")
    if gradebook_error:
        print(f"error: {gradebook_error}", file=sys.stderr)
        return 1
    return 0


def _read_parts(paths: list[Path]):
    """(part folder, slice, notes, outcomes, students) of each shard's OUT, and what is wrong
    with them."""
    from .trusted import gradebook
    from .trusted.batch import UNFINISHED

    parts, problems, seen = [], [], {}
    for path in paths:
        if path.resolve() in seen:
            problems.append(f"{path} is given twice.")
            continue
        seen[path.resolve()] = path
        if (path / UNFINISHED).exists():
            problems.append(f"{path}: its grading run was stopped before it finished; grade "
                            "that slice again.")
        elif not (path / "results.json").exists():
            problems.append(f"{path}: there is no results.json, so no grading run finished "
                            "there (a task that never ran, or was stopped); grade that slice "
                            "again.")
        else:
            results = gradebook.read_results(path)
            part = results.part
            graded = {(o.student, o.chapter) for o in results.outcomes}
            if set(part.keys) - graded:
                problems.append(f"{path}: slice {part.k}/{part.n} graded {len(graded)} of its "
                                f"{len(part.keys)} submissions (its run stopped early); grade "
                                "that slice again.")
            parts.append((path, part, results.notes, results.outcomes, results.students))
    return parts, problems


def _slices_problems(parts) -> list[str]:
    """Slices that are missing, given twice or from another class."""
    if not parts:
        return []
    problems = []
    first = parts[0][1]
    for path, part, *_ in parts[1:]:
        if (part.n, part.fingerprint) != (first.n, first.fingerprint):
            problems.append(f"{path} is slice {part.k}/{part.n} of another grading (another "
                            f"class, or another number of slices) than {parts[0][0]} "
                            f"({first.k}/{first.n}).")
    by_k: dict[int, list[Path]] = {}
    for path, part, *_ in parts:
        by_k.setdefault(part.k, []).append(path)
    problems += [f"Slice {k}/{first.n} is given twice: {' and '.join(map(str, paths))}."
                 for k, paths in sorted(by_k.items()) if len(paths) > 1]
    missing = sorted(set(range(1, first.n + 1)) - set(by_k))
    if missing:
        problems.append(f"Slice{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(str(k) for k in missing)} of {first.n} "
                        f"{'are' if len(missing) > 1 else 'is'} missing.")
    return problems


def merge(args) -> int:
    """grades.csv, notes.json, results.json and the feedback of several shards in one OUT,
    then their scores in the instructor's gradebook. Refuses, unless --partial, slices that are
    missing, doubled, unfinished or of another grading."""
    import tempfile

    from .trusted import gradebook
    from .trusted.batch import with_manual_scores

    parts, problems = _read_parts(args.parts or [args.out])
    problems += _slices_problems(parts)
    if problems:
        for problem in problems:
            print(f"{'warning' if args.partial else 'error'}: {problem}", file=sys.stderr)
        if not args.partial:
            print("Nothing was merged. Grade the slices named above again, or merge what is "
                  "there with --partial.", file=sys.stderr)
            return 2
    merged, notes, students = {}, [], {}
    for path, _, part_notes, part_outcomes, part_students in parts:
        notes += [n for n in part_notes if n not in notes]
        students.update(part_students)
        for outcome in part_outcomes:  # a slice given twice (--partial) counts once
            merged[outcome.student, outcome.chapter] = _moved_feedback(outcome, path, args.out)
    outcomes = list(merged.values())
    gradebook.write_sheets(args.out, outcomes, notes, students=students)
    course.use_nbgrader_environment()
    with tempfile.TemporaryDirectory() as scratch:
        template = gradebook.make_template(sorted({o.chapter for o in outcomes}), Path(scratch))
        try:
            gradebook.record(outcomes, args.gradebook, template, Path(scratch), args.out,
                             students)
        except gradebook.GradebookNotUpdated as exc:
            return _summary(outcomes, args.out, str(exc))
    with_manual_scores(outcomes, args.out, notes, students=students)
    return _summary(outcomes, args.out, None)


def _moved_feedback(outcome, part: Path, out: Path):
    """The outcome, its feedback page and graded notebooks copied from the part into OUT (OUT
    stands on its own once the parts are removed)."""
    if part.resolve() == out.resolve():
        return outcome
    for step in ("submitted", "autograded"):
        source = part / step / outcome.student / outcome.chapter
        if source.is_dir():
            shutil.copytree(source, out / step / outcome.student / outcome.chapter,
                            dirs_exist_ok=True)
    if outcome.feedback is None:
        return outcome
    page = out / "feedback" / outcome.student / f"{outcome.chapter}.html"
    source = part / "feedback" / outcome.student / f"{outcome.chapter}.html"
    if source.exists():
        page.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, page)
        outcome.feedback = page
    return outcome


def export_grades(args) -> int:
    from .trusted.export import export

    if not (args.out / "results.json").exists():
        print(f"error: {args.out} holds no results.json: give the OUT of `make grade` or of "
              "`python -m grader merge`", file=sys.stderr)
        return 2
    written, unmatched = export(args.out, args.lms, args.missing, args.to)
    for line in unmatched:
        print(f"warning: {line}", file=sys.stderr)
    print(f"wrote {written}: import it into {args.lms.capitalize()}'s gradebook "
          "(docs/instructors.md, \"Grades back to the LMS\")")
    return 0


def lti_command(args) -> int:
    """``lti post|roster|jwk``: every failure said in one line, no secret in any."""
    import json

    from .trusted import lti, lti_post

    try:
        settings = lti.read_settings(args.config)
        if args.lti_verb == "jwk":
            print(json.dumps(lti.public_jwk(lti.private_key(settings),
                                            settings.get("key_id")), indent=2))
            return 0
        client = lti.Client(settings)
        if args.lti_verb == "roster":
            count = lti_post.write_roster(client, sys.stdout)
            print(f"{count} learner{'s' if count != 1 else ''} from the LMS", file=sys.stderr)
            return 0
        if not (args.out / "results.json").exists():
            print(f"error: {args.out} holds no results.json: give the OUT of `make grade` or "
                  "of `python -m grader merge`", file=sys.stderr)
            return 2
        done = lti_post.plan(client, args.out, args.missing)
        if not args.dry_run:
            lti_post.carry_out(client, done)
    except lti.LtiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(lti_post.describe(done, args.dry_run), end="")
    for line in lti_post.unknown_lines(done):
        print(f"warning: {line}", file=sys.stderr)
    return 1 if done.unknown else 0


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
    if args.verb == "export":
        return export_grades(args)
    if args.verb == "lti":
        return lti_command(args)
    if args.verb == "collect":
        return collect_submissions(args)
    if args.verb == "release-feedback":
        return release_feedback(args)
    return generate_or_validate(args)
