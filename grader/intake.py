"""Finding the submissions: a folder laid out as ``<student>/<chapter>/<chapter>.ipynb``, a zip
of one, or an LMS zip of notebooks named ``<student>_..._<chapter>.ipynb``; and the roster.

Every rule about where submissions come from lives in this file.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


class IntakeError(ValueError):
    """SUBMISSIONS or the roster cannot be read; the message says what to do."""


@dataclass
class Submission:
    student: str
    chapter: str
    path: Path
    origin: str  # the file name as submitted


@dataclass
class Skipped:
    name: str
    why: str


@dataclass
class Intake:
    submissions: list[Submission] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    layout: str = "folders"  # "folders", "canvas", "moodle", "blackboard", "flat"
    roster: list[str] | None = None


def _unzip(source: Path, scratch: Path) -> Path:
    target = scratch / "unzipped"
    try:
        with zipfile.ZipFile(source) as archive:
            for member in archive.infolist():
                name = Path(member.filename)
                if member.is_dir() or name.is_absolute() or ".." in name.parts:
                    continue  # never write outside the scratch folder
                archive.extract(member, target)
    except (zipfile.BadZipFile, OSError) as exc:
        raise IntakeError(f"cannot read the zip {source}: {exc}; download it again") from exc
    return target


def _read_roster(roster: Path) -> list[str]:
    try:
        lines = roster.read_text().splitlines()
    except OSError as exc:
        raise IntakeError(f"cannot read the roster {roster}: {exc}") from exc
    names = [line.split(",")[0].strip() for line in lines]
    return [n for n in names if n and not n.startswith("#") and n != "student"]


def collect(source: Path, scratch: Path, chapters: list[str], *, lms: str = "auto",
            roster: Path | None = None) -> Intake:
    """Every (student, chapter) notebook under ``source``, and the files not used."""
    if zipfile.is_zipfile(source):
        source = _unzip(source, scratch)
    if not source.is_dir():
        raise IntakeError(f"SUBMISSIONS must be a folder or a zip file: {source}")
    intake = Intake(roster=_read_roster(roster) if roster else None)
    found: dict[tuple[str, str], Submission] = {}
    for notebook in sorted(source.rglob("*.ipynb")):
        if ".ipynb_checkpoints" in notebook.parts or notebook.name.startswith("._"):
            continue
        rel = notebook.relative_to(source)
        chapter = next((c for c in chapters if notebook.stem.endswith(c)), None)
        if chapter is None:
            intake.skipped.append(Skipped(str(rel), "no chapter's name at the end"))
            continue
        if len(rel.parts) >= 3 and rel.parts[-2] == chapter:
            student = rel.parts[-3]                       # <student>/<chapter>/<chapter>.ipynb
        else:
            intake.layout = "flat"
            prefix = notebook.stem[: -len(chapter)].strip("_- ")
            student = (prefix.split("_")[0] if prefix else "") or (
                rel.parts[-2] if len(rel.parts) >= 2 else "")
        student = re.sub(r"[^A-Za-z0-9._-]", "_", student)
        if not student:
            intake.skipped.append(Skipped(str(rel), "no student's name"))
            continue
        if (student, chapter) in found:
            intake.skipped.append(Skipped(found[(student, chapter)].origin, "another file "
                                          f"for {student}/{chapter} comes later"))
        found[(student, chapter)] = Submission(student, chapter, notebook, str(rel))
    intake.submissions = [found[k] for k in sorted(found)]
    return intake
