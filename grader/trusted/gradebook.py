"""The gradebooks: the course template's (made once per run, in process) and the instructor's
(grader/gradebook.db), which receives a batch's scores after grades.csv and the feedback are
written, so that a gradebook that cannot take them costs no grading."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import shutil
import warnings
from pathlib import Path

from .. import course
from ..intake.names import display
from .verdict import Outcome, Status

COLUMNS = ["student", "chapter", "score", "max_score", "status", "submitted", "late",
           "notes"]
NUMBERS = {"score", "max_score"}

_scratch_roots: list[str] = []


def quick_scratch_gradebooks(scratch: Path) -> None:
    """Make gradebooks under ``scratch`` cheap to create: nbgrader starts a new Python
    (``alembic heads``) to learn a constant every time it creates one, and SQLite waits for the
    disk on every commit, which a throwaway gradebook does not need. The instructor's gradebook
    keeps both."""
    import nbgrader.api
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not _scratch_roots:
        head = alembic_head()
        if head:
            nbgrader.api.get_alembic_version = lambda: head

        @event.listens_for(Engine, "connect")
        def _no_sync(connection, _record) -> None:
            path = _database_path(connection)
            if path and any(path.startswith(root) for root in _scratch_roots):
                connection.execute("PRAGMA synchronous = OFF")
    _scratch_roots.append(str(scratch))


def _database_path(connection) -> str:
    try:
        return connection.execute("PRAGMA database_list").fetchone()[2] or ""
    except Exception:  # noqa: BLE001 - not SQLite
        return ""


def alembic_head() -> str | None:
    """The gradebook schema's version, asked of alembic in this process."""
    try:
        from alembic.config import Config
        from alembic.script import ScriptDirectory
        from nbgrader.dbutil import ALEMBIC_DIR  # its scripts: nbgrader.alembic has no __file__

        config = Config()
        config.set_main_option("script_location", ALEMBIC_DIR)
        return ScriptDirectory.from_config(config).get_current_head()
    except Exception:  # noqa: BLE001 - nbgrader then asks alembic its own way
        return None


def make_template(chapters: list[str], folder: Path) -> Path:
    """A gradebook that knows ``chapters`` (their test cells, the source of every locked cell),
    made by nbgrader's generate_assignment in this process; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "gradebook.db"
    course.generate(chapters, db=db, release=folder / "release")
    return db


class GradebookNotUpdated(RuntimeError):
    """The instructor's gradebook could not take the batch (grades.csv is written)."""


def _shape(gb, chapter: str) -> tuple | None:
    from nbgrader.api import MissingEntry

    try:
        notebook = gb.find_notebook(chapter, chapter)
    except MissingEntry:
        return None
    return (sorted((c.name, c.max_score) for c in notebook.grade_cells),
            sorted(c.name for c in notebook.solution_cells),
            sorted((c.name, c.checksum) for c in notebook.source_cells))


def _test_sources(gb, chapter: str) -> dict[str, str]:
    """grade id -> checksum of each graded cell's source, of a chapter in a gradebook."""
    from nbgrader.api import MissingEntry

    try:
        notebook = gb.find_notebook(chapter, chapter)
    except MissingEntry:
        return {}
    graded = {cell.name for cell in notebook.grade_cells}
    return {cell.name: cell.checksum for cell in notebook.source_cells if cell.name in graded}


def _learn_chapters(db: Path, template: Path, chapters: list[str],
                    scratch: Path) -> dict[str, set[str]]:
    """Make the instructor's gradebook know each chapter as the template does; return, per
    chapter, the test cells whose source changed since the gradebook last learned it."""
    from nbgrader.api import Gradebook

    if not db.exists():  # the template knows every chapter already: start from a copy
        shutil.copyfile(template, db)
        return {}
    with Gradebook(f"sqlite:///{template}") as theirs, Gradebook(f"sqlite:///{db}") as ours:
        stale = [c for c in chapters if _shape(ours, c) != _shape(theirs, c)]
        before = {c: _test_sources(ours, c) for c in stale}
        now = {c: _test_sources(theirs, c) for c in stale}
    changed = {c: {name for name, checksum in now[c].items()
                   if before[c].get(name) not in (None, checksum)} for c in stale}
    if stale:
        try:
            course.generate(stale, db=db, release=scratch / "release-for-gradebook")
        except RuntimeError as exc:
            raise GradebookNotUpdated(
                f"The gradebook {db} was not updated: it holds submissions of "
                f"{', '.join(stale)} graded with other test cells than the chapter has now "
                f"({str(exc).strip().splitlines()[-1]}). grades.csv and the feedback are "
                "written. To record this batch, move the gradebook aside (or remove those "
                "chapters' submissions from it with `nbgrader db assignment remove`), then run "
                "`.venv/bin/python -m grader merge OUT` to record OUT/results.json without "
                "grading again.") from exc
    return changed


def _manual_work(gb, chapter: str, student: str) -> tuple[dict, dict]:
    """What an instructor gave a submission by hand (in Formgrader): grade id -> (manual
    score, extra credit), and comment name -> comment."""
    from nbgrader.api import MissingEntry

    try:
        notebook = gb.find_submission_notebook(chapter, chapter, student)
    except MissingEntry:
        return {}, {}
    grades = {g.name: (g.manual_score, g.extra_credit) for g in notebook.grades
              if g.manual_score is not None or g.extra_credit}
    comments = {c.name: c.manual_comment for c in notebook.comments if c.manual_comment}
    return grades, comments


def record(outcomes: list[Outcome], db: Path, template: Path, scratch: Path,
           out: Path | None = None, students: dict[str, dict[str, str]] | None = None) -> None:
    """Write every graded submission's cell scores into the instructor's gradebook, keeping the
    manual scores, extra credit and comments an instructor gave (unless that cell's test
    changed); set each outcome's final score from them. With ``out`` (a grading run's OUT),
    also put the submissions where Formgrader finds them (see :func:`formgrader_folder`)."""
    from nbgrader.api import Gradebook

    chapters = sorted({o.chapter for o in outcomes})
    changed = _learn_chapters(db, template, chapters, scratch)
    with Gradebook(f"sqlite:///{db}") as gb, warnings.catch_warnings():
        # nbgrader's own add_submission trips a harmless SQLAlchemy autoflush warning
        warnings.simplefilter("ignore")
        # the due dates, where Formgrader shows them and tells late submissions by
        for chapter, due in sorted({(o.chapter, o.due) for o in outcomes if o.due}):
            gb.update_or_create_assignment(chapter, duedate=due)
        for outcome in outcomes:
            if outcome.cells:
                gb.update_or_create_student(outcome.student, **_names(
                    outcome.student, (students or {}).get(outcome.student, {})))
                _record_one(gb, outcome, changed.get(outcome.chapter, set()))
    if out is not None:
        place_for_formgrader([o for o in outcomes if o.cells], out, formgrader_folder(db), db)


def _names(student: str, who: dict[str, str]) -> dict[str, str]:
    """First and last name for Formgrader's lists, from what the LMS said of the student (the
    student's id as the last name when it said nothing), as :func:`_shown` makes them."""
    first, last = who.get("first name", ""), who.get("last name", "")
    full = who.get("student") or who.get("full name") or ""
    if not (first or last) and "," in full:  # Canvas: "Smith, Jane"
        last, first = (part.strip() for part in full.split(",", 1))
    elif not (first or last) and " " in full.strip():  # "Jane Doe"
        first, last = full.strip().rsplit(" ", 1)
    return {"first_name": _shown(first), "last_name": _shown(last or full or student)}


def _shown(name: str) -> str:
    """A name as the gradebook keeps it for Formgrader, which writes it into the page of a
    submission without escaping it (nbgrader 0.9's formgrade template, rendered by nbconvert,
    which does not autoescape): ``<`` and ``>`` as the look-alikes ``‹`` and ``›``, so that no
    name is markup there; and, for ``nbgrader export``'s CSV, one line no spreadsheet
    evaluates."""
    return display(name.replace("<", "\u2039").replace(">", "\u203a"))


def _record_one(gb, outcome: Outcome, changed: set[str]) -> None:
    from nbgrader.api import MissingEntry

    grades, comments = _manual_work(gb, outcome.chapter, outcome.student)
    try:
        gb.remove_submission(outcome.chapter, outcome.student)
    except MissingEntry:
        pass
    timestamp = {"timestamp": outcome.submitted} if outcome.submitted else {}
    gb.add_submission(outcome.chapter, outcome.student, **timestamp)
    outcome.manual = {}
    for grade_id, score in outcome.cells.items():
        grade = gb.find_grade(grade_id, outcome.chapter, outcome.chapter, outcome.student)
        grade.auto_score = score
        manual, extra = grades.get(grade_id, (None, None)) if grade_id not in changed \
            else (None, None)
        grade.manual_score, grade.extra_credit = manual, extra
        grade.needs_manual_grade = score is None or manual is not None
        if manual is not None:
            outcome.manual[grade_id] = manual
    notebook = gb.find_submission_notebook(outcome.chapter, outcome.chapter, outcome.student)
    for comment in notebook.comments:
        if comment.name in comments:
            comment.manual_comment = comments[comment.name]
    gb.db.commit()
    outcome.score = gb.find_submission(outcome.chapter, outcome.student).score


# --- where Formgrader looks ---------------------------------------------------------------------

def formgrader_folder(db: Path) -> Path:
    """The course folder Formgrader reads with this gradebook: the course's root for the
    course's own gradebook (grader/nbgrader_config.py says so), else the gradebook's folder,
    which gets an nbgrader_config.py of its own."""
    return course.ROOT if db.resolve() == course.INSTRUCTOR_DB.resolve() else db.parent


SUBMITTED, AUTOGRADED = "submitted", "autograded"


def _timestamp(outcome: Outcome) -> str:
    return outcome.submitted or "1970-01-01 00:00:00 UTC"


# what nbgrader's exchange keeps beside a submission for its feedback (release-feedback)
SECRET = "submission_secret.txt"


def keep_for_formgrader(out: Path, outcome: Outcome, submitted: Path, graded,
                        exchange_folder: Path | None = None) -> None:
    """OUT/submitted and OUT/autograded, in nbgrader's own layout: the notebook as handed in,
    and as graded (the test cells' outputs from the scoring kernel). A submission through
    nbgrader's exchange keeps its submission_secret.txt beside it, for its feedback."""
    import nbformat

    for step, write in ((SUBMITTED, lambda path: shutil.copyfile(submitted, path)),
                        (AUTOGRADED, lambda path: nbformat.write(graded, path))):
        folder = out / step / outcome.student / outcome.chapter
        folder.mkdir(parents=True, exist_ok=True)
        write(folder / f"{outcome.chapter}.ipynb")
        (folder / "timestamp.txt").write_text(_timestamp(outcome))
    secret = exchange_folder / SECRET if exchange_folder else None
    kept = out / SUBMITTED / outcome.student / outcome.chapter / SECRET
    if secret is not None and secret.is_file():
        shutil.copyfile(secret, kept)
    else:
        kept.unlink(missing_ok=True)


def place_for_formgrader(outcomes: list[Outcome], out: Path, folder: Path, db: Path) -> None:
    """Copy OUT's submitted and autograded notebooks where Formgrader finds them, next to the
    gradebook that knows them."""
    for outcome in outcomes:
        for step in (SUBMITTED, AUTOGRADED):
            source = out / step / outcome.student / outcome.chapter
            if source.is_dir() and source.resolve() != (folder / step / outcome.student /
                                                         outcome.chapter).resolve():
                shutil.copytree(source, folder / step / outcome.student / outcome.chapter,
                                dirs_exist_ok=True)
    if folder != course.ROOT:
        (folder / "nbgrader_config.py").write_text(_config_for(folder, db))


def _config_for(folder: Path, db: Path) -> str:
    return (
        "# Formgrader's view of the submissions graded into this gradebook (written by\n"
        "# `python -m grader`): start JupyterLab in this folder to open it.\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(folder.resolve())!r}\n"
        f"c.CourseDirectory.source_directory = {str(course.SOLUTIONS)!r}\n"
        f"c.CourseDirectory.release_directory = {str(course.NOTEBOOKS)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(db.resolve())!r}\n")


@dataclasses.dataclass
class Slice:
    """Which part of which class a grading run graded: slice ``k`` of ``n``, of the class whose
    (student, chapter) pairs hash to ``fingerprint``; ``keys`` are this slice's pairs."""

    k: int = 1
    n: int = 1
    fingerprint: str = ""
    keys: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    @staticmethod
    def of(grid: list[tuple[str, str]], keys: list[tuple[str, str]], k: int, n: int) -> Slice:
        digest = hashlib.sha256(json.dumps([n, sorted(grid)]).encode()).hexdigest()[:16]
        return Slice(k, n, digest, sorted(keys))


def write_sheets(out: Path, outcomes: list[Outcome], batch_notes: list[str],
                 part: Slice | None = None,
                 students: dict[str, dict[str, str]] | None = None) -> None:
    """``grades.csv`` (the columns instructors' scripts read), ``notes.json`` (what was tampered
    with, which cell hung, how the batch ran) and ``results.json`` (everything, for ``merge``
    and for recording in a gradebook later)."""
    out.mkdir(parents=True, exist_ok=True)
    outcomes = sorted(outcomes, key=lambda o: (o.student, o.chapter))
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as sheet:
        writer = csv.DictWriter(sheet, fieldnames=COLUMNS)
        writer.writeheader()
        # the student is a folder name and the notes are the grader's own words: no text cell
        # a spreadsheet evaluates now, and none should either change; scores stay numbers
        writer.writerows({column: cell if column in NUMBERS else display(cell)
                          for column, cell in o.row().items()} for o in outcomes)
    notes = {f"{o.student}/{o.chapter}": o.notes for o in outcomes if o.notes}
    if batch_notes:
        notes["batch"] = batch_notes
    (out / "notes.json").write_text(json.dumps(notes, indent=1))
    part = part or Slice(keys=[(o.student, o.chapter) for o in outcomes])
    graded = {o.student for o in outcomes}
    results = {"shard": f"{part.k}/{part.n}", "slice": dataclasses.asdict(part),
               "notes": batch_notes, "outcomes": [_as_json(o) for o in outcomes],
               # what the LMS knows of each student (intake), for sending grades back
               "students": {s: i for s, i in sorted((students or {}).items()) if s in graded}}
    (out / "results.json").write_text(json.dumps(results, indent=1))


def _as_json(outcome: Outcome) -> dict:
    data = dataclasses.asdict(outcome)
    data["status"] = outcome.status.value
    data["feedback"] = str(outcome.feedback) if outcome.feedback else None
    return data


@dataclasses.dataclass
class Results:
    """What a grading run (or a merge) wrote in OUT/results.json."""

    part: Slice
    notes: list[str]
    outcomes: list[Outcome]
    students: dict[str, dict[str, str]]


def read_results(folder: Path) -> Results:
    """The slice, batch notes, outcomes and students' LMS identities a grading run wrote in
    ``folder``."""
    results = json.loads((folder / "results.json").read_text())
    outcomes = []
    for data in results["outcomes"]:
        data["status"] = Status(data["status"])
        data["feedback"] = Path(data["feedback"]) if data["feedback"] else None
        outcomes.append(Outcome(**data))
    if "slice" in results:
        part = Slice(**{**results["slice"],
                        "keys": [tuple(k) for k in results["slice"]["keys"]]})
    else:  # written before slices were recorded: its shard only
        k, n = (int(x) for x in results["shard"].split("/"))
        part = Slice(k, n, "", [(o.student, o.chapter) for o in outcomes])
    return Results(part, results["notes"], outcomes, results.get("students", {}))
