"""Students' names as the grader files them, compares them and writes them out.

A name comes from the LMS, and on most LMSs the student chose it: it may hold a formula, markup,
line breaks, any script, right-to-left marks, or run to hundreds of characters. So:

- a student's folder name (under OUT, and nbgrader's student id) is made of ``[A-Za-z0-9._-]``
  only, at most 64 characters of the name, with the LMS's id when it has one; a name without an
  id that lost anything on the way (accents, other scripts, punctuation, length) gets 6
  characters of its SHA-256 (:func:`folder_key`), so two names never share a folder;
- names are compared by letters and digits of any script, without case
  (:func:`comparable_name`);
- a name written for a person to read (a CSV an instructor opens, the gradebook Formgrader
  shows) is one line that no spreadsheet evaluates (:func:`display`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

LONGEST = 64  # characters of a name kept in a folder name: paths stay far below 255 bytes

# What makes a spreadsheet read a cell as a formula (OWASP, "CSV Injection"), and line breaks
# (a cell that starts with one is read as a formula by some, and trimmed to one by others).
FORMULA_START = frozenset("=+-@\t\r\n")


def ascii_only(text: str) -> str:
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()


def _safe(name: str) -> str:
    """A folder name made of [A-Za-z0-9._-] that still reads as the student's name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_only(name).strip()).strip("._-")
    return safe[:LONGEST].rstrip("._-")


def name_digest(text: str) -> str:
    return hashlib.sha256(unicodedata.normalize("NFC", text).encode()).hexdigest()[:6]


def person_folder(name: str, lms_id: str) -> str:
    """The LMS's name and id: ``smithjane_1234``, ``Jane_Doe_4242`` (the id alone if the name
    has no Latin letters). The id keeps two students apart, whatever their names."""
    return "_".join(filter(None, (_safe(name), lms_id)))


def folder_key(name: str) -> str:
    """The folder name of a student the LMS names without an id (a Blackboard username, a
    folder's name): the name itself when it is made of ``[A-Za-z0-9._-]`` and spaces (a space
    becomes ``_``), else what is left of it and 6 characters of its SHA-256: ``José`` and
    ``Jose`` are ``Jose_24c2ab`` and ``Jose``, ``张伟`` is ``student_a3a0ba``, in every run."""
    name = unicodedata.normalize("NFC", name.strip())
    safe = _safe(name)
    if safe and safe == name.replace(" ", "_"):
        return safe
    return f"{safe or 'student'}_{name_digest(name)}"


def _fold(text: str, accents: bool) -> str:
    text = unicodedata.normalize("NFKD", text.casefold())
    kept = (c for c in text if c.isalnum() or (accents and unicodedata.combining(c)))
    return unicodedata.normalize("NFC", "".join(kept))


def comparable_name(name: str, accents: bool = False) -> str:
    """A name to compare: "Smith, Jane" and "smithjane" both give "smithjane"; letters of any
    script count, right-to-left marks and punctuation do not; "José" gives "jose" (with
    ``accents``, "josé")."""
    return _fold(name, accents)


def name_forms(*words: str, accents: bool = False) -> tuple[str, ...]:
    """A name in either order: "Jane Doe" and "Doe Jane", "Mary Ann Smith" and "Smith Mary Ann";
    none for a name without a letter or digit."""
    parts = [w for w in re.split(r"[\s,]+", " ".join(words)) if w]
    forms = {comparable_name("".join(parts[i:] + parts[:i]), accents) for i in range(len(parts))}
    return tuple(sorted(f for f in forms if f))


def one_line(text: str) -> str:
    """``text`` with every control character and line or paragraph separator made a space: one
    cell, one row, in whatever reads it."""
    return "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text)


def evaluated(text: str) -> bool:
    """Whether a spreadsheet may read ``text`` as a formula: its first character, after any
    spaces and invisible marks (a right-to-left mark, a zero-width space; LibreOffice may trim
    spaces), is ``=``, ``+``, ``-``, ``@`` (or their full-width forms), a tab or a line
    break."""
    for char in text:
        if char in FORMULA_START or unicodedata.normalize("NFKC", char) in FORMULA_START:
            return True
        if not (char.isspace() or unicodedata.category(char) == "Cf"):
            return False
    return False


def inert(text: str) -> str:
    """``text`` as a cell no spreadsheet evaluates: a ``'`` before it when it would be read as
    a formula (OWASP's advice: the spreadsheet then reads the cell as text)."""
    return "'" + text if evaluated(text) else text


def display(text: str) -> str:
    """A name as a person reads it in a file they may open in a spreadsheet: one line, inert."""
    return inert(one_line(text))
