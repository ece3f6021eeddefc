"""Grade a class: the course template made once, a few workers, then grades.csv, the feedback
pages and the instructor's gradebook.

Each worker has a scoring kernel of its own (trusted, for every submission it grades: see
grader/trusted/scoring_notebook.py), which runs each submission's tests once and decides the
score; the feedback page shows the notebook as it was handed in, with the tests' results. With
``fresh_outputs`` a warm student's kernel (sandboxed, fresh for each) first runs the notebook
again, without its test cells, for fresh outputs on the page.

Tests and the bench call ``grade_class``; ``python -m grader grade`` is its command line.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .. import course, intake
from ..intake import deadlines
from ..sandboxed import namespaces
from . import feedback, gradebook, kernels, scoring_notebook, scratch
from .execute import Execution, limit_outputs, resources, run_cells, sanitize
from .tamper import check_tampering
from .verdict import Outcome, judge, max_score


@dataclass
class Settings:
    """How to grade: the command's flags."""

    jobs: int = 2
    limit: float = 300.0  # seconds one submission may take in all
    cell_timeout: int = course.GRADING_CELL_TIMEOUT
    sandbox: bool | None = None  # None: wherever the machine allows it
    db: Path = course.INSTRUCTOR_DB
    keep: bool = False  # keep each submission's grading log under OUT/kept
    shard: tuple[int, int] = (1, 1)  # grade the K-th of N slices
    lms: str = "auto"
    roster: Path | None = None
    due: str | None = None  # one due date for every chapter (else grader/course.toml's [due])
    take: str = "on-time"  # of a student's timed submissions: the newest on time, or newest
    scratch_parent: Path | None = None  # where the run's scratch folder goes (default TMPDIR)
    on_done: Callable[[Outcome], None] | None = None
    # run each student's notebook again, sandboxed, for fresh outputs on the feedback page
    # (twice the work); by default the page shows the outputs the notebook was handed in with
    fresh_outputs: bool = False


@dataclass
class Batch:
    """What a run produced, and where its time went."""

    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[intake.Skipped] = field(default_factory=list)
    sandboxed: bool = True
    gradebook_error: str | None = None
    kernel_error: str | None = None  # a kernel that could not start stopped the batch
    students: dict[str, dict[str, str]] = field(default_factory=dict)  # LMS identities
    unlisted: list[str] = field(default_factory=list)  # handed in, on no row of the roster
    seconds: dict[str, float] = field(default_factory=dict)


def shard_of(keys: list[tuple[str, str]], shard: tuple[int, int]) -> list[tuple[str, str]]:
    """The K-th of N slices of ``keys`` (sorted): every N-th submission from the K-th, so that
    each slice holds about as many of each chapter."""
    k, n = shard
    if not 1 <= k <= n:
        raise ValueError(f"--shard {k}/{n}: K must be between 1 and N")
    return sorted(keys)[k - 1::n]


def longest_first(todo: list[intake.Submission]) -> list[intake.Submission]:
    """The submissions in the order they are graded: the later chapters first, whose tests take
    longest (chapter 17's about 30 s, chapter 00's 2 s), so that the batch ends on short ones
    rather than one worker alone on a long one; each chapter's students in their order."""
    return sorted(todo, key=lambda sub: sub.chapter, reverse=True)  # stable: students kept


def _grid(found: intake.Intake) -> list[tuple[str, str]]:
    """Every (student, chapter) this batch answers for: each student known (from a submission
    or the roster) with each chapter submitted by anyone."""
    students = {s.student for s in found.submissions} | set(found.roster or [])
    chapters = {s.chapter for s in found.submissions}
    return sorted((s, c) for s in students for c in chapters)


class _Run:
    """One batch's state: the template gradebook, the settings, the kernels' scratch."""

    def __init__(self, folder: Path, out: Path, settings: Settings, db: Path,
                 submissions: Path, sandboxed: bool):
        self.folder, self.out, self.settings, self.db = folder, out, settings, db
        self.sandboxed = sandboxed
        self.config = course.nbgrader_config(db=db)
        self.config.Execute.timeout = settings.cell_timeout
        # TORCH_DIST_INIT_BARRIER: init_process_group returns once every rank is connected, so
        # that a rank that goes on to destroy the group at once cannot fail a slower peer still
        # connecting ("Connection closed by peer"), which a busy machine makes likely
        self.env = dict(os.environ, NBGRADER_EXECUTION="autograde", TORCH_DIST_INIT_BARRIER="1")
        self.hidden = namespaces.hidden_paths([out, submissions] if submissions.is_dir() else [out])
        self.count = 0
        self.max_scores: dict[str, float] = {}
        self.error: str | None = None  # set when a kernel could not start: no new submission
        self.chapters: list[str] | None = None  # those of the submissions to grade

    def plan(self, workdir: Path) -> namespaces.Plan | None:
        """What student code sees from ``workdir`` (None: no sandbox)."""
        return namespaces.plan(workdir, self.hidden, [self.settings.db]) if self.sandboxed \
            else None

    def _wrap(self, folder: Path):
        plan = self.plan(folder)
        if plan is None:
            return lambda argv: [*namespaces.dies_with_parent(), *argv]
        return lambda argv: namespaces.kernel_command(plan, argv)

    def start_kernel(self) -> asyncio.Task:
        self.count += 1
        folder = self.folder / f"k{self.count}"  # short: it holds the kernel's sockets
        return asyncio.ensure_future(kernels.start(folder, self._wrap, self.env))

    def start_scorer(self) -> asyncio.Task:
        """A scoring kernel: trusted (not sandboxed: it never runs student code), with the
        grader importable, warmed up with a run through a sandboxed rank host."""
        self.count += 1
        folder = self.folder / f"s{self.count}"
        warm = folder / "warm"
        env = dict(self.env, PYTHONPATH=os.pathsep.join(
            filter(None, [str(course.ROOT), self.env.get("PYTHONPATH")])))
        plan = self.plan(warm)
        data = None if plan is None else scoring_notebook.submission_data(
            nbformat.v4.new_notebook(), plan)["plan"]
        # the garbage collector off while torch and the grader import, then what they made
        # frozen out of its sight (as a new forkserver does, commlab.preload_start): it walked
        # those objects again and again as they grew, and again at every full collection while
        # grading (no name is bound in the kernel's namespace)
        code = ("__import__('gc').disable()\n"
                "__import__('grader.trusted.scoring_kernel')\n"
                "__import__('gc').freeze()\n"
                "__import__('gc').enable()\n"
                f"__import__('grader.trusted.scoring_kernel').trusted.scoring_kernel"
                f".warm_up({data!r}, {self.chapters!r})")
        return asyncio.ensure_future(kernels.start(
            folder, lambda f: lambda argv: [*namespaces.dies_with_parent(), *argv], env,
            warm_up=code, what="the scoring kernel", before_warm_up=warm.mkdir))

    async def grade(self, sub: intake.Submission, kernel: kernels.Kernel | None,
                    scorer: _Scorer, waited: float, released: asyncio.Event) -> Outcome:
        """Grade ``sub``: its tests on the worker's ``scorer``; with ``kernel`` (fresh outputs
        only; the worker ``waited`` seconds for it) its own notebook first, for the feedback.
        Set ``released`` once the worker may start its next submission (the kernel, or else the
        scorer, is no longer needed)."""
        outcome = Outcome(sub.student, sub.chapter, max_score=self.max_scores[sub.chapter],
                          submitted=handed_in(sub), timestamped=sub.submitted_at is not None,
                          due=sub.due and sub.due.strftime(TIMESTAMP), late=sub.late,
                          intake=list(sub.notes))
        if kernel is not None:
            outcome.phases["kernel start"] = waited
        began = time.perf_counter()
        try:
            submitted = nbformat.read(sub.path, as_version=4)
            notebook = copy.deepcopy(submitted)
            tampered = check_tampering(notebook, course.NOTEBOOKS / sub.chapter /
                                       f"{sub.chapter}.ipynb")
            info = resources(sub.chapter, sub.student, f"sqlite:///{self.db}")
            notebook = await asyncio.to_thread(sanitize, notebook, self.config, info)
        except Exception as exc:  # noqa: BLE001 - not a notebook nbgrader can read
            released.set()
            if kernel is not None:
                await kernel.stop()
            outcome.notes = [f"unreadable notebook: {str(exc).splitlines()[0][:200]}"]
            return outcome
        outcome.phases["sanitize"] = time.perf_counter() - began
        done = Execution()
        if kernel is not None:
            # the kernel's folder gets the notebook as submitted: the sanitized one holds the
            # restored test cells, hidden tests included, which never run on the student's kernel
            shutil.copyfile(sub.path, kernel.folder / f"{sub.chapter}.ipynb")
            done = await run_cells(notebook, kernel, self.config, self.settings.limit,
                                   released, skip=scoring_notebook.is_test)
            outcome.phases.update(done.seconds)
        try:
            scored = await scorer.score(sub, notebook, self)
        finally:
            released.set()
        outcome.phases.update(scored.execution.seconds)
        began = time.perf_counter()
        judge(outcome, notebook, scored, student=done, tampered=tampered)
        if kernel is None:
            feedback.with_handed_in_outputs(notebook, submitted)
        feedback.with_test_outputs(notebook, scored.tests())
        feedback.made_safe(notebook)  # Formgrader shows it too, in an instructor's browser
        if not done.died and not done.over_limit:
            notebook = limit_outputs(notebook, self.config, info)
            outcome.feedback = await asyncio.to_thread(feedback.write, notebook, outcome,
                                                       self.out)
        gradebook.keep_for_formgrader(self.out, outcome, sub.path, notebook, sub.folder)
        outcome.phases["feedback"] = time.perf_counter() - began
        if self.settings.keep:
            self.keep(outcome, kernel)
        return outcome

    def keep(self, outcome: Outcome, kernel: kernels.Kernel | None) -> None:
        """The submission's grading log under OUT/kept/<student>/ (its graded notebook is in
        OUT/autograded/)."""
        folder = self.out / "kept" / outcome.student
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"status: {outcome.status.value}; score {outcome.score:g} of "
                 f"{outcome.max_score:g}", *outcome.notes,
                 "seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in outcome.phases.items())]
        log = kernel.folder / "kernel.log" if kernel is not None else None
        if log is not None and log.exists():
            lines += ["kernel output:", log.read_text(errors="replace")]
        (folder / f"{outcome.chapter}.log").write_text("\n".join(lines))


class _Scorer:
    """A worker's scoring kernel, one submission at a time; started again if it stops."""

    def __init__(self, run: _Run):
        self.run, self.task, self.turn = run, run.start_scorer(), asyncio.Lock()

    async def score(self, sub: intake.Submission, notebook, run: _Run) -> scoring_notebook.Scored:
        began = time.perf_counter()
        async with self.turn:
            waited = time.perf_counter() - began
            kernel = await self.task
            run.count += 1
            folder = run.folder / f"r{run.count}"  # the submission's data, the rank host's folder
            scored = await scoring_notebook.score(sub.chapter, notebook, kernel, run.config,
                                         run.settings.limit, folder, run.plan(folder / "w"))
            if scored.execution.died or scored.execution.over_limit:
                await kernel.stop()
                self.task = run.start_scorer()
        scored.execution.seconds["scoring wait"] = waited
        return scored

    async def stop(self) -> None:
        await _drop(self.task)


async def _worker(run: _Run, queue: asyncio.Queue, ready: asyncio.Task | None,
                  scorer: _Scorer, outcomes: list[Outcome]) -> None:
    """Grade submissions from ``queue``: once one's tests are scored (or, with fresh outputs,
    once its cells have run on its kernel while the next student's kernel warms), the next one
    starts while its feedback is written. A kernel that cannot start stops the worker, and the
    batch takes no new submission."""
    finishing: list[asyncio.Task] = []
    try:
        while not queue.empty() and run.error is None:
            sub = queue.get_nowait()
            kernel, waited = None, 0.0
            if run.settings.fresh_outputs:
                waited = time.perf_counter()
                try:
                    kernel = await ready
                except kernels.KernelStartError as exc:
                    ready, run.error = None, run.error or str(exc)
                    break
                waited = time.perf_counter() - waited
                ready = run.start_kernel() if not queue.empty() else None
            released = asyncio.Event()
            finishing.append(asyncio.ensure_future(
                _graded(run, sub, kernel, scorer, waited, released, outcomes)))
            await asyncio.wait([finishing[-1], asyncio.ensure_future(released.wait())],
                               return_when=asyncio.FIRST_COMPLETED)
    finally:
        await asyncio.gather(*finishing)
        await _drop(ready)
        await scorer.stop()


async def _graded(run: _Run, sub, kernel, scorer: _Scorer, waited: float,
                  released: asyncio.Event, outcomes: list[Outcome]) -> None:
    try:
        outcome = await run.grade(sub, kernel, scorer, waited, released)
    except kernels.KernelStartError as exc:  # the scoring kernel: nothing can be scored
        released.set()
        run.error = run.error or str(exc)
        return
    outcomes.append(outcome)
    if run.settings.on_done:
        run.settings.on_done(outcome)


async def _drop(ready: asyncio.Task | None) -> None:
    """Stop a kernel that was warming for a submission that never came."""
    if ready is None:
        return
    if not ready.done():
        ready.cancel()
    try:
        await (await ready).stop()
    except BaseException:  # noqa: BLE001 - a kernel that never came up has nothing to stop
        pass


async def _grade_all(run: _Run, todo: list[intake.Submission], chapters: list[str],
                     seconds: dict[str, float]) -> list[Outcome]:
    began = time.perf_counter()
    workers = min(run.settings.jobs, len(todo))
    run.chapters = sorted({sub.chapter for sub in todo})
    # the kernels warm while the template is made
    scorers = [_Scorer(run) for _ in range(workers)]
    first = [run.start_kernel() if run.settings.fresh_outputs else None for _ in scorers]
    try:
        template = await asyncio.to_thread(gradebook.make_template, chapters,
                                           run.folder / "course")
        run.db = template
        run.config.CourseDirectory.db_url = f"sqlite:///{template}"
    except BaseException:
        for task in first:
            if task is not None:
                task.cancel()
        await asyncio.gather(*filter(None, first), return_exceptions=True)
        await asyncio.gather(*(scorer.stop() for scorer in scorers), return_exceptions=True)
        raise
    seconds["template"] = time.perf_counter() - began
    queue: asyncio.Queue = asyncio.Queue()
    for sub in todo:
        queue.put_nowait(sub)
    outcomes: list[Outcome] = []
    await asyncio.gather(*(_worker(run, queue, task, scorer, outcomes)
                           for task, scorer in zip(first, scorers)))
    return outcomes


def grade_class(submissions: Path, out: Path, settings: Settings | None = None) -> Batch:
    """Grade every submission in ``submissions`` (this run's shard of them); write OUT."""
    settings = settings or Settings()
    course.use_nbgrader_environment()
    began = time.perf_counter()
    batch = Batch()
    scratch.remove_stale(settings.scratch_parent)
    folder = scratch.make_run_folder(settings.scratch_parent)
    try:
        batch.sandboxed = namespaces.available() if settings.sandbox is None else settings.sandbox
        if not batch.sandboxed:
            batch.notes.append("graded without the sandbox: student code ran with the "
                               "grader's rights and network access")
        gradebook.quick_scratch_gradebooks(folder)
        due = deadlines.due_dates(course.chapters(), settings.due, course.COURSE_CONFIG)
        found = intake.collect(submissions, folder / "intake", course.chapters(),
                               lms=settings.lms, roster=settings.roster, due=due,
                               take=settings.take)
        batch.skipped = found.skipped
        batch.unlisted = found.unlisted
        if not found.submissions:
            raise intake.IntakeError(f"no chapter notebooks found in {submissions}")
        grid = _grid(found)
        keys = shard_of(grid, settings.shard)
        by_key = {(s.student, s.chapter): s for s in found.submissions}
        todo = longest_first([by_key[k] for k in keys if k in by_key])
        chapters = sorted({c for _, c in keys})
        check_writable(out, "OUT")
        if settings.shard[1] == 1:
            check_writable(settings.db.parent, "the gradebook's folder")
        # there until the results are written: `merge` refuses an OUT whose run was stopped
        (out / UNFINISHED).write_text(f"grading started by process {os.getpid()}\n")
        run = _Run(folder, out, settings, folder / "course" / "gradebook.db",
                   submissions, batch.sandboxed)
        run.max_scores = {c: max_score(nbformat.read(course.NOTEBOOKS / c / f"{c}.ipynb", 4))
                          for c in chapters}
        if todo:
            batch.outcomes = asyncio.run(_grade_all(run, todo, chapters, batch.seconds))
        if run.error:
            left = len(todo) - len(batch.outcomes)
            batch.kernel_error = (f"{run.error}\nGraded and written to {out / 'grades.csv'}: "
                                  f"{len(batch.outcomes)} submission(s); not graded: {left}.")
        batch.outcomes += [Outcome(s, c, max_score=run.max_scores.get(c, 0.0),
                                   due=c in due and due[c].strftime(TIMESTAMP) or None)
                           for s, c in keys if (s, c) not in by_key]
        for outcome in batch.outcomes:
            if outcome.student in found.unlisted:
                outcome.intake.append("not on the roster")
        batch.outcomes.sort(key=lambda o: (o.student, o.chapter))
        batch.students = found.identities
        _finish(batch, out, settings, run, folder,
                gradebook.Slice.of(grid, keys, *settings.shard))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    batch.seconds["total"] = time.perf_counter() - began
    return batch


# In OUT while a grading run writes it (see cli.merge).
UNFINISHED = ".grading-unfinished"


# nbgrader's way of writing a time (timestamp.txt, the gradebook)
TIMESTAMP = "%Y-%m-%d %H:%M:%S.%f UTC"


def handed_in(sub: intake.Submission) -> str:
    """When a submission was handed in: nbgrader's record of it, else its file's time."""
    when = sub.submitted_at or datetime.datetime.fromtimestamp(sub.path.stat().st_mtime,
                                                               datetime.UTC)
    return when.strftime(TIMESTAMP)


def with_manual_scores(outcomes: list[Outcome], out: Path, notes: list[str],
                       part: gradebook.Slice | None = None,
                       students: dict[str, dict[str, str]] | None = None) -> None:
    """Once the gradebook gave the final scores: the feedback pages of submissions an
    instructor scored by hand, and the sheets, again."""
    touched = [o for o in outcomes if o.manual]
    for outcome in touched:
        feedback.rewrite(outcome, out)
    if touched:
        gradebook.write_sheets(out, outcomes, notes, part, students)


class NotWritable(OSError):
    """OUT or the gradebook's folder cannot be written: nothing is graded."""


def check_writable(folder: Path, what: str) -> None:
    """Create ``folder`` if needed and write a file in it, before any kernel starts: a batch
    that cannot write its results must not grade first and fail after."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".grader-can-write-"):
            pass
    except OSError as exc:
        raise NotWritable(
            f"Cannot write to {what}, {folder}: {exc.strerror or exc}. Nothing was graded. Give "
            f"the user running the grader (uid {os.getuid()}) write access to it, or choose "
            "another folder. In Docker, build the instructor image with --build-arg "
            "UID=\"$(id -u)\" --build-arg GID=\"$(id -g)\" so that the container's user is you "
            "(docs/security.md, \"Grading without namespaces\").") from None


def _finish(batch: Batch, out: Path, settings: Settings, run: _Run, folder: Path,
            part: gradebook.Slice) -> None:
    """grades.csv and the notes first; then the instructor's gradebook, which may refuse."""
    began = time.perf_counter()
    n = settings.shard[1]
    gradebook.write_sheets(out, batch.outcomes, batch.notes, part, batch.students)
    (out / UNFINISHED).unlink(missing_ok=True)
    if n == 1 and any(o.cells for o in batch.outcomes):
        try:
            gradebook.record(batch.outcomes, settings.db, run.db, folder, out, batch.students)
        except gradebook.GradebookNotUpdated as exc:
            batch.gradebook_error = str(exc)
        else:
            with_manual_scores(batch.outcomes, out, batch.notes, part, batch.students)
    batch.seconds["bookkeeping"] = time.perf_counter() - began
