"""Where a grade is computed: one submission's score and status, from the test cells as the
scoring kernel ran them (see grader/trusted/scoring_notebook.py: no student code runs there)
and from how the student's own notebook ran; never from a file the student's code could write."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.utils import determine_grade, is_grade, is_solution


class Status(enum.StrEnum):
    """What happened to a submission, as grades.csv writes it.

    graded: every test ran; timed out: a test or a rank hung (interrupted at --cell-timeout, or
    commlab's CollectiveTimeout), the answer cells never finished when the grader defined them,
    or the submission passed --limit; kernel died: a kernel ended before the last test, or the
    answer cells ended the process that defined them (scored 0); tests tampered with: test cells
    were edited, deleted or duplicated (restored from the source, and graded on them); missing:
    no readable notebook.
    """

    GRADED = "graded"
    TIMED_OUT = "timed out"
    KERNEL_DIED = "kernel died"
    TAMPERED = "tests tampered with"
    MISSING = "missing"


@dataclass
class Outcome:
    """One row of grades.csv, with what the instructor's gradebook and the notes need."""

    student: str
    chapter: str
    score: float = 0.0  # the final score: automatic, with an instructor's manual scores
    max_score: float = 0.0
    status: Status = Status.MISSING
    notes: list[str] = field(default_factory=list)
    cells: dict[str, float | None] = field(default_factory=dict)  # grade_id -> auto score
    manual: dict[str, float] = field(default_factory=dict)  # grade_id -> manual score
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    feedback: Path | None = None
    submitted: str | None = None  # when the student handed it in (UTC, nbgrader's format)
    # whether ``submitted`` is nbgrader's record of it (the exchange's timestamp.txt), not the
    # file's time
    timestamped: bool = False
    due: str | None = None  # the chapter's due date (UTC), where one was given
    late: bool | None = None  # handed in after it; None: no due date or no time to tell by
    intake: list[str] = field(default_factory=list)  # which attempt was graded, and why

    def row(self) -> dict[str, str]:
        manual = "; ".join(f"manual score {score:g} on {grade_id} (automatic "
                           f"{self.cells.get(grade_id) or 0:g})"
                           for grade_id, score in sorted(self.manual.items()))
        return {"student": self.student, "chapter": self.chapter, "score": f"{self.score:g}",
                "max_score": f"{self.max_score:g}", "status": self.status.value,
                "submitted": self.submitted if self.timestamped and self.submitted else "",
                "late": {True: "late", False: "on time", None: ""}[self.late],
                "notes": "; ".join(filter(None, [*self.intake, manual]))}


def max_score(notebook) -> float:
    """The points of a notebook's graded cells."""
    return sum(float(c["metadata"]["nbgrader"].get("points", 0)) for c in notebook.cells
               if is_grade(c))


def cell_scores(notebook, tests: dict[str, object]) -> dict[str, float | None]:
    """Each graded cell's automatic score, by nbgrader's own rule (an error or anything on
    stderr is 0, else the points; None when a person must grade it): a test cell as the scoring
    kernel ran it (``tests``, by grade id), never as the student's kernel did."""
    scores = {}
    for cell in notebook.cells:
        if not is_grade(cell):
            continue
        grade_id = cell["metadata"]["nbgrader"]["grade_id"]
        scored = tests.get(grade_id, cell) if not is_solution(cell) else cell
        scores[grade_id] = determine_grade(scored)[0]
    return scores


def hung_cells(notebook, interrupted: set[int]) -> list[str]:
    """The first line of each cell that was interrupted at the cell limit, or in which commlab
    reported a collective that never completed."""
    hung = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code":
            continue
        errors = " ".join(f"{o.get('ename')} {o.get('evalue')}" for o in cell.get("outputs", [])
                          if o.get("output_type") == "error")
        # commlab.checks reports a hang as an AssertionError that names CollectiveTimeout
        if index in interrupted or "CollectiveTimeout" in errors or "CellTimeoutError" in errors:
            hung.append(cell.source.strip().splitlines()[0][:60] if cell.source.strip() else "")
    return hung


def judge(outcome: Outcome, notebook, scored, *, student, tampered: list[str]) -> Outcome:
    """Fill ``outcome`` from the student's executed ``notebook`` and how its run (``student``,
    an Execution) ended, and from the scoring run ``scored`` (a scoring.Scored)."""
    scoring = scored.execution
    outcome.notes += tampered + student.notes + scoring.notes
    outcome.cells = cell_scores(notebook, scored.tests())
    stopped = scored.stopped()
    if stopped is not None:  # the answers ended their process, or never finished, when defined
        outcome.notes.append(stopped[1])
    # cells that never ran (a kernel died, or the limit came) have no error output, which
    # nbgrader would count as a pass: such a submission scores 0, as nbgrader drops it
    died = student.died or scoring.died or (stopped is not None
                                            and stopped[0] == "AnswersEndedTheirProcess")
    over_limit = student.over_limit or scoring.over_limit
    if died or over_limit:
        outcome.cells = dict.fromkeys(outcome.cells, 0.0)
    outcome.score = sum(s or 0.0 for s in outcome.cells.values())
    hung = hung_cells(notebook, student.interrupted) + hung_cells(scored.notebook,
                                                                  scoring.interrupted)
    outcome.notes += [f"timed out in the cell starting {line!r}" for line in hung]
    if scoring.died:
        outcome.notes.append("the scoring kernel stopped before the last test")
    if over_limit:
        outcome.notes.append("the whole submission passed --limit")
        outcome.status = Status.TIMED_OUT
    elif died:
        outcome.status = Status.KERNEL_DIED
    elif hung or (stopped is not None and stopped[0] == "AnswersDidNotFinish"):
        outcome.status = Status.TIMED_OUT
    else:
        outcome.status = Status.TAMPERED if tampered else Status.GRADED
    return outcome
