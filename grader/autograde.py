"""Autograde a class: ``make grade SUBMISSIONS=<folder or zip> OUT=<folder>``.

    python grader/autograde.py SUBMISSIONS OUT [--jobs N] [--limit SECONDS] [--no-sandbox]

SUBMISSIONS is a folder laid out as ``<student>/<chapter>/<chapter>.ipynb``, or a zip of such a
folder, or an LMS zip of notebooks named ``<student>_..._<chapter>.ipynb``. OUT receives
``grades.csv`` (student, chapter, score, max_score, status) and
``feedback/<student>/<chapter>.html``.

Why not plain ``nbgrader autograde``: it grades one submission at a time, its SQLite gradebook is
not safe for concurrent writers, a kernel that dies or hangs drops the notebook with a silent 0,
and student code runs with the grader's rights. Here every submission is graded by nbgrader in a
course folder of its own (its own gradebook), several at once, each inside Linux namespaces
without network (loopback stays up for gloo) and without sight of solutions/, the instructor's
gradebook or other students' files, under a wall-clock limit. The results then go, one by one,
into the instructor's gradebook (grader/gradebook.db) and into grades.csv.

Statuses: ``graded``; ``timed out`` (a cell or a rank hung, or the submission passed --limit);
``kernel died``; ``tests tampered with`` (test cells edited, deleted or duplicated: they are
restored from the source and the submission is graded on them); ``missing``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from course import GRADER, SOLUTIONS, chapters, generate, nbgrader_environment
from course import NOTEBOOKS as RELEASE

INSTRUCTOR_DB = GRADER / "gradebook.db"

# Outputs longer than this are cut in the graded notebook, so that a submission printing
# megabytes does not make a feedback page of megabytes.
OUTPUT_LIMIT = 20_000

JOB_CONFIG = '''\
import os
c = get_config()
root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = root
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(root, "gradebook.db")
c.Execute.timeout = {cell_timeout}
c.OverwriteCells.add_missing_cells = True
'''


@dataclass
class Outcome:
    student: str
    chapter: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "missing"
    notes: list[str] = field(default_factory=list)
    autograded: Path | None = None  # the graded notebook, in the job's folder


# --- finding the submissions ---------------------------------------------------------------------

def collect(source: Path, scratch: Path) -> dict[tuple[str, str], Path]:
    """(student, chapter) -> notebook, from a folder or a zip (see the module docstring)."""
    known = chapters()
    if zipfile.is_zipfile(source):
        target = scratch / "unzipped"
        with zipfile.ZipFile(source) as archive:
            for member in archive.infolist():
                name = Path(member.filename)
                if member.is_dir() or name.is_absolute() or ".." in name.parts:
                    continue  # never write outside the scratch folder
                archive.extract(member, target)
        source = target
    if not source.is_dir():
        raise SystemExit(f"SUBMISSIONS must be a folder or a zip file: {source}")
    found: dict[tuple[str, str], Path] = {}
    for notebook in sorted(source.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in notebook.parts or notebook.name.startswith("._"):
            continue
        rel = notebook.relative_to(source)
        chapter = next((c for c in known if notebook.stem.endswith(c)), None)
        if chapter is None:
            continue
        if len(rel.parts) >= 3 and rel.parts[-2] == chapter:
            student = rel.parts[-3]                       # <student>/<chapter>/<chapter>.ipynb
        else:
            prefix = notebook.stem[: -len(chapter)].strip("_- ")
            student = (prefix.split("_")[0] if prefix else "") or (
                rel.parts[-2] if len(rel.parts) >= 2 else "")
        student = re.sub(r"[^A-Za-z0-9._-]", "_", student)
        if student:
            found[(student, chapter)] = notebook
    return found


# --- tampering ------------------------------------------------------------------------------------

def _grade_cells(nb) -> list:
    return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")
            or c.get("metadata", {}).get("nbgrader", {}).get("locked")]


def clean_submission(notebook: Path, chapter: str, dest: Path) -> list[str]:
    """Copy a submission to ``dest``, dropping duplicated graded cells (which would make nbgrader
    drop the whole notebook); return what was tampered with."""
    nb = nbformat.read(notebook, as_version=4)
    release = nbformat.read(RELEASE / chapter / f"{chapter}.ipynb", as_version=4)
    original = {c.metadata.nbgrader.grade_id: c.source for c in _grade_cells(release)}
    notes, seen, kept = [], set(), []
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in original:
            if grade_id in seen:
                notes.append(f"duplicated {grade_id}")
                continue
            seen.add(grade_id)
            if cell.source.strip() != original[grade_id].strip():
                notes.append(f"edited {grade_id}")
        kept.append(cell)
    notes += [f"deleted {g}" for g in original if g not in seen]
    nb.cells = kept
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return notes


# --- the sandbox ------------------------------------------------------------------------------

def sandbox_available() -> bool:
    """Whether this machine lets an unprivileged user make network, mount and pid namespaces."""
    probe = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child",
             "--map-root-user", "sh", "-c", "ip link set lo up"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def sandboxed(command: list[str], job: Path, hidden: list[Path], mount_point: Path) -> list[str]:
    """``command`` inside new namespaces: no network but loopback, the job's folder visible at
    ``mount_point``, every path in ``hidden`` covered by an empty tmpfs, and all processes gone
    when the namespace's first process ends."""
    steps = ["ip link set lo up", f"mount --bind {_q(job)} {_q(mount_point)}"]
    steps += [f"mount -t tmpfs tmpfs {_q(p)}" for p in hidden if p.is_dir()]
    # the instructor's gradebook: grader/ itself holds only code the job needs
    steps += [f"mount --bind /dev/null {_q(p)}" for p in hidden if p.is_file()]
    steps += [f"cd {_q(mount_point)}", "exec " + " ".join(_q(a) for a in command)]
    return ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
            "--map-root-user", "sh", "-c", " && ".join(steps)]


def _q(value: object) -> str:
    return "'" + str(value).replace("'", "'\"'\"'") + "'"


def _run_limited(command: list[str], cwd: Path, limit: float, log: Path) -> str:
    """Run ``command`` with a wall-clock limit; return "ok", "failed" or "timed out"."""
    with open(log, "ab") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   env=_environment(cwd))
        try:
            return "ok" if process.wait(timeout=limit) == 0 else "failed"
        except subprocess.TimeoutExpired:
            _kill_tree(process)
            return "timed out"


def _kill_tree(process: subprocess.Popen) -> None:
    import psutil

    try:
        family = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        family = []
    for member in [process, *family]:
        try:
            os.kill(member.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    process.wait()


def _environment(job: Path) -> dict[str, str]:
    env = nbgrader_environment()
    env["JUPYTER_RUNTIME_DIR"] = str(job / ".runtime")
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    return env


# --- grading one submission ----------------------------------------------------------------------

class Grader:
    def __init__(self, submissions: Path, out: Path, limit: float, use_sandbox: bool,
                 cell_timeout: int = 30, db: Path = INSTRUCTOR_DB):
        self.out = out
        self.cell_timeout = cell_timeout
        self.limit = limit
        self.use_sandbox = use_sandbox
        self.scratch = Path(tempfile.mkdtemp(prefix="commlab-grading-"))
        self.submissions = submissions
        hidden = [SOLUTIONS, self.scratch, out.resolve()]
        if submissions.is_dir():
            hidden.append(submissions.resolve())
        # never cover the Python that runs the grading (a SUBMISSIONS folder above .venv...)
        self.hidden = [p for p in hidden if not Path(sys.prefix).resolve().is_relative_to(p)]
        self.hidden.append(db)  # the instructor's gradebook
        self.template = self.scratch / "template"

    def prepare(self, needed: list[str]) -> None:
        """A course folder with the chapters' sources and a gradebook that knows them."""
        (self.template / "source").mkdir(parents=True)
        for chapter in needed:
            shutil.copytree(SOLUTIONS / chapter, self.template / "source" / chapter)
        (self.template / "nbgrader_config.py").write_text(
            JOB_CONFIG.format(cell_timeout=self.cell_timeout))
        for chapter in needed:
            subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter,
                            "--force", "--log-level=ERROR"], cwd=self.template, check=True,
                           env=_environment(self.template), stdout=subprocess.DEVNULL)

    def max_score(self, chapter: str) -> float:
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.template / 'gradebook.db'}") as gb:
            return gb.find_assignment(chapter).max_score

    def grade(self, student: str, chapter: str, notebook: Path) -> Outcome:
        outcome = Outcome(student, chapter, max_score=self.max_score(chapter))
        job = self.scratch / "jobs" / f"{student}__{chapter}"
        shutil.copytree(self.template, job, ignore=shutil.ignore_patterns("release"))
        submitted = job / "submitted" / student / chapter / f"{chapter}.ipynb"
        try:
            tampered = clean_submission(notebook, chapter, submitted)
        except Exception as exc:  # noqa: BLE001 - not a notebook nbformat can read
            outcome.status, outcome.notes = "missing", [f"unreadable notebook: {exc}"]
            return outcome
        log = job / "grading.log"
        command = [sys.executable, str(GRADER / "grade_job.py"), chapter, student,
                   str(self.cell_timeout)]
        if self.use_sandbox:
            mount_point = Path(tempfile.mkdtemp(prefix="commlab-job-"))
            command = sandboxed(command, job, self.hidden, mount_point)
        else:
            mount_point = None
        try:
            ran = _run_limited(command, job, self.limit, log)
        finally:
            if mount_point is not None:
                mount_point.rmdir()
        autograded = job / "autograded" / student / chapter / f"{chapter}.ipynb"
        text = log.read_text(errors="replace")
        outcome.score = self._score(job, student, chapter) if autograded.exists() else 0.0
        outcome.autograded = autograded if autograded.exists() else None
        outcome.notes = list(tampered)
        outcome.status = self._status(ran, text, autograded, tampered, outcome.notes)
        return outcome

    @staticmethod
    def _score(job: Path, student: str, chapter: str) -> float:
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{job / 'gradebook.db'}") as gb:
            return gb.find_submission(chapter, student).score

    @staticmethod
    def _status(ran: str, log: str, autograded: Path, tampered: list[str],
                notes: list[str]) -> str:
        if ran == "timed out":
            notes.append("the whole submission passed --limit")
            return "timed out"
        if "DeadKernelError" in log or "Kernel died" in log or "kernel died" in log:
            return "kernel died"
        if not autograded.exists():
            return "kernel died" if ran == "failed" else "timed out"
        hung = []
        for cell in nbformat.read(autograded, as_version=4).cells:
            for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
                text = f"{output.get('ename', '')} {output.get('evalue', '')}"
                if output.get("output_type") == "error" and (
                        "CellTimeoutError" in text or "CollectiveTimeout" in text
                        or output.get("ename") == "KeyboardInterrupt"):
                    hung.append(cell.source.strip().splitlines()[0][:60] if cell.source else "")
        if "Timeout waiting for execute reply" in log or hung:
            notes += [f"timed out in the cell starting {line!r}" for line in hung]
            return "timed out"
        return "tests tampered with" if tampered else "graded"

    def feedback(self, outcome: Outcome) -> None:
        """Copy the job's feedback page (hidden tests removed by grade_job.py) to OUT."""
        if outcome.autograded is None:
            return
        job = outcome.autograded.parents[3]  # job/autograded/<student>/<chapter>/<nb>
        page = job / "feedback" / outcome.student / outcome.chapter / f"{outcome.chapter}.html"
        if page.exists():
            target = self.out / "feedback" / outcome.student / f"{outcome.chapter}.html"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(page, target)

    def close(self) -> None:
        if os.environ.get("COMMLAB_KEEP_GRADING"):
            print(f"kept the grading folder {self.scratch}", file=sys.stderr)
            return
        shutil.rmtree(self.scratch, ignore_errors=True)


HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)


def strip_for_feedback(path: Path) -> None:
    """Remove hidden tests' source from the graded notebook, and the tracebacks of test cells
    (their frames quote the hidden lines); keep each error's name and message, which say what
    was expected. Cut outputs longer than OUTPUT_LIMIT."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        is_test = cell.get("metadata", {}).get("nbgrader", {}).get("grade", False)
        if is_test:
            cell.source = HIDDEN.sub("# (hidden tests)\n", cell.source)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and is_test:
                output["traceback"] = [f"{output.get('ename')}: {output.get('evalue')}"]
            if output.get("output_type") == "stream" and len(output.get("text", "")) > OUTPUT_LIMIT:
                size = len(output["text"])
                output["text"] = output["text"][:OUTPUT_LIMIT] + f"\n[... {size} characters, cut]\n"
    nbformat.write(nb, path)


# --- the instructor's gradebook ----------------------------------------------------------------

def record_in_gradebook(outcomes: list[Outcome], needed: list[str], db: Path) -> None:
    """Write every graded submission's scores into the instructor's gradebook, one at a time."""
    from nbgrader.api import Gradebook, MissingEntry

    with tempfile.TemporaryDirectory() as release:
        generate(needed, db=db, release=Path(release))  # the gradebook must know the chapters
    with Gradebook(f"sqlite:///{db}") as gb, warnings.catch_warnings():
        # nbgrader's own add_submission trips a harmless SQLAlchemy autoflush warning
        warnings.simplefilter("ignore")
        for outcome in outcomes:
            if outcome.autograded is None:
                continue
            job_db = outcome.autograded.parents[3] / "gradebook.db"
            gb.update_or_create_student(outcome.student)
            try:
                gb.remove_submission(outcome.chapter, outcome.student)
            except MissingEntry:
                pass
            gb.add_submission(outcome.chapter, outcome.student)
            with Gradebook(f"sqlite:///{job_db}") as job:
                graded = job.find_submission(outcome.chapter, outcome.student)
                for notebook in graded.notebooks:
                    for grade in notebook.grades:
                        mine = gb.find_grade(grade.name, notebook.name, outcome.chapter,
                                             outcome.student)
                        mine.auto_score = grade.auto_score
                        mine.manual_score = grade.manual_score
                        mine.needs_manual_grade = grade.needs_manual_grade
            gb.db.commit()


# --- the command ------------------------------------------------------------------------------

class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int):
        self.total, self.done, self.start = total, 0, time.monotonic()
        self.lock = threading.Lock()

    def step(self, label: str) -> None:
        with self.lock:
            self.done += 1
            filled = int(30 * self.done / max(self.total, 1))
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} "
                             f"{time.monotonic() - self.start:5.0f}s  {label[:40]:<40}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def grade_class(submissions: Path, out: Path, jobs: int, limit: float,
                use_sandbox: bool | None = None, db: Path = INSTRUCTOR_DB,
                cell_timeout: int = 30) -> list[Outcome]:
    out.mkdir(parents=True, exist_ok=True)
    if use_sandbox is None:
        use_sandbox = sandbox_available()
        if not use_sandbox:
            print("warning: Linux namespaces are not available here, so student code runs "
                  "with network access and your rights; grade inside the Docker image with "
                  "--network none (see README).", file=sys.stderr)
    grader = Grader(submissions, out, limit, use_sandbox, cell_timeout, db)
    try:
        found = collect(submissions, grader.scratch)
        students = sorted({s for s, _ in found})
        needed = sorted({c for _, c in found})
        if not found:
            raise SystemExit(f"no chapter notebooks found in {submissions}")
        grader.prepare(needed)
        progress = Progress(len(found))
        outcomes: list[Outcome] = []

        def one(key: tuple[str, str]) -> Outcome:
            outcome = grader.grade(*key, found[key])
            grader.feedback(outcome)
            progress.step(f"{key[0]}/{key[1]}: {outcome.status}")
            return outcome

        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            outcomes = list(pool.map(one, sorted(found)))
        for student in students:
            for chapter in needed:
                if (student, chapter) not in found:
                    outcomes.append(Outcome(student, chapter, max_score=grader.max_score(chapter)))
        outcomes.sort(key=lambda o: (o.student, o.chapter))
        record_in_gradebook(outcomes, needed, db)
        with open(out / "grades.csv", "w", newline="") as sheet:
            writer = csv.writer(sheet)
            writer.writerow(["student", "chapter", "score", "max_score", "status"])
            for o in outcomes:
                writer.writerow([o.student, o.chapter, f"{o.score:g}", f"{o.max_score:g}",
                                 o.status])
        (out / "notes.json").write_text(json.dumps(
            {f"{o.student}/{o.chapter}": o.notes for o in outcomes if o.notes}, indent=1))
        return outcomes
    finally:
        grader.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("submissions", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                        help="submissions graded at once (default: one per core)")
    parser.add_argument("--limit", type=float, default=300,
                        help="seconds one submission may take in all (default 300)")
    parser.add_argument("--cell-timeout", type=int, default=30,
                        help="seconds one cell may run before it is interrupted (default 30, "
                             "as nbgrader)")
    parser.add_argument("--no-sandbox", action="store_true",
                        help="run student code without namespaces (e.g. inside a container "
                             "already started with --network none)")
    args = parser.parse_args(argv)
    outcomes = grade_class(args.submissions, args.out, args.jobs, args.limit,
                           use_sandbox=False if args.no_sandbox else None,
                           cell_timeout=args.cell_timeout)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    print(f"graded {len(outcomes)} submissions: "
          + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
          + f"; see {args.out / 'grades.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
