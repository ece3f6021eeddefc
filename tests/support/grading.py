"""A class graded as `make grade` grades it, in this process: a folder of submissions (or an LMS's
download) graded into OUT, with a scratch folder of its own; and grades.csv read back."""

from __future__ import annotations

import csv
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.trusted import batch


@dataclass
class Graded:
    """What grading a class gave: the batch, its OUT folder and its scratch folder."""

    batch: batch.Batch
    out: Path
    scratch: Path  # removed after grading, unless kept

    @property
    def rows(self) -> dict[str, dict[str, str]]:
        """grades.csv's rows, by student."""
        return read_grades(self.out)


def graded_class(submissions: Path, out: Path, keep_scratch: bool = False,
                 **settings) -> Graded:
    """Grade ``submissions`` into ``out`` with :class:`batch.Settings` ``settings``, in a scratch
    folder of a short path (the kernels' sockets live there). The scratch folder is removed
    after grading, which fails if grading left anything in it; ``keep_scratch`` leaves that to
    the caller."""
    scratch = Path(tempfile.mkdtemp(prefix="grading-test-"))
    done = batch.grade_class(submissions, out, batch.Settings(scratch_parent=scratch, **settings))
    if not keep_scratch:
        scratch.rmdir()
    return Graded(done, out, scratch)


def read_grades(out: Path) -> dict[str, dict[str, str]]:
    """The rows of ``out``'s grades.csv, by student."""
    with open(out / "grades.csv") as sheet:
        return {row["student"]: row for row in csv.DictReader(sheet)}
