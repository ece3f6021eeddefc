"""Students' names as the grader files them: folder-safe, comparable, in either order."""

from __future__ import annotations

import re
import unicodedata


def _ascii(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()


def _safe(name: str) -> str:
    """A folder name made of [A-Za-z0-9._-] that still reads as the student's name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", _ascii(name).strip()).strip("._-")


def _person(name: str, lms_id: str) -> str:
    """The LMS's name and id: ``smithjane_1234``, ``Jane_Doe_4242`` (the id alone if the name
    has no Latin letters)."""
    return "_".join(filter(None, (_safe(name), lms_id)))


def _norm(name: str) -> str:
    """A name to compare: "Smith, Jane" and "smithjane" both give "smithjane"."""
    return re.sub(r"[^a-z0-9]", "", _ascii(name).lower())


def _name_forms(*words: str) -> tuple[str, ...]:
    """A name in either order: "Jane Doe" and "Doe Jane", "Mary Ann Smith" and "Smith Mary Ann"."""
    parts = [w for w in re.split(r"[\s,]+", " ".join(words)) if w]
    return tuple({_norm("".join(parts[i:] + parts[:i])) for i in range(len(parts))})


