"""Test cells edited, deleted or duplicated in a submission, compared with the release."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbgrader.utils import is_grade, is_locked


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def check_tampering(submitted, release_path: Path) -> list[str]:
    """What was done to the release's graded and locked cells in ``submitted`` (a notebook),
    which is changed in place: a duplicated graded cell is dropped (nbgrader would drop the whole
    notebook for it; its DeduplicateIds keeps the last copy, the student's, where the first is
    the one in place). Edited and deleted cells are restored later by nbgrader's OverwriteCells."""
    release = nbformat.read(release_path, as_version=4)
    original = {_grade_id(c): c.source for c in release.cells if is_grade(c) or is_locked(c)}
    notes, seen, kept = [], set(), []
    for cell in submitted.cells:
        grade_id = _grade_id(cell)
        if grade_id in original:
            if grade_id in seen:
                notes.append(f"duplicated {grade_id}")
                continue
            seen.add(grade_id)
            if cell.source.strip() != original[grade_id].strip():
                notes.append(f"edited {grade_id}")
        kept.append(cell)
    notes += [f"deleted {g}" for g in original if g not in seen]
    submitted.cells = kept
    return notes
