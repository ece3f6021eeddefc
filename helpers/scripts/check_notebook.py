"""Check your work on a chapter: run your saved notebook from the top, as the grader will, and
say which of the visible tests pass.

    make check CHAPTER=01_broadcast             # or CHAPTER=01
    python helpers/scripts/check_notebook.py work 01_broadcast

The exit status is 0 only when every visible test passes. Each test sees your answers as the
grader defines them (commlab.cells: from your answer cells and the definitions of every cell
above the test), so a test passes here exactly when it passes for the grader. The grader also
runs hidden tests, so passing here is necessary, not sufficient. Inside JupyterLab, nbgrader's
Validate button does the same check on the open notebook.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# nbgrader counts anything on stderr as a failed test: keep torch's C++ warnings off it.
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The first line of an exception: "AssertionError: ...", "commlab.RankError: ...", "KeyError",
# "CheckFailed: ...". A traceback's frame headers ("File ...", "Cell In[3], line 2") and the
# source lines under them (indented, or "--> 12 ...") never look like that.
EXCEPTION = re.compile(r"[A-Za-z_][\w.]*(: |:?$)")


@dataclass
class TestCell:
    grade_id: str
    points: float
    what: str  # what the test checks, in the test's own words
    source: str


def find_notebook(work: Path, chapter: str) -> Path:
    """The notebook of ``chapter`` (a full name or its number) in ``work``; SystemExit if none."""
    chapters = sorted(p.name for p in work.iterdir() if p.is_dir()) if work.is_dir() else []
    if not chapters:
        raise SystemExit(f"No chapters in {work}/: run `make lab` once, it copies them there.")
    matches = [c for c in chapters if c == chapter] or \
        [c for c in chapters if c.startswith(chapter)]
    if len(matches) != 1:
        raise SystemExit(f"Which chapter is {chapter!r}? Use one of: {', '.join(chapters)}")
    notebook = work / matches[0] / f"{matches[0]}.ipynb"
    if not notebook.exists():
        raise SystemExit(f"{notebook} is missing; `make lab` copies a fresh one from the course.")
    return notebook


def test_cells(notebook: Path) -> list[TestCell]:
    """The notebook's graded test cells, in order."""
    cells = []
    for cell in json.loads(notebook.read_text())["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] != "code" or not meta.get("grade"):
            continue
        source = "".join(cell["source"]).strip()
        docstring = re.match(r'"""(.*?)"""', source, re.S)
        what = " ".join(docstring.group(1).split()) if docstring else "(no description)"
        cells.append(TestCell(meta["grade_id"], meta.get("points", 0), what, source))
    return cells


def run_tests(notebook: Path) -> dict:
    """Execute the notebook in a fresh kernel with nbgrader's Validator; its results."""
    from nbgrader.validator import Validator
    from traitlets.config import Config

    from commlab.answers import prepare_notebook

    config = Config()
    config.Execute.timeout = 30  # as in grading (grader/nbgrader_config.py)
    # each test sees the answers as the grader defines them (commlab.cells' rule), as Validate
    # does in Lab (helpers/jupyter/student/nbgrader_config.py)
    config.Execute.on_notebook_start = prepare_notebook
    # The kernel and the processes the chapter starts (its mp.spawn demo fails on purpose)
    # write to the terminal they inherit; what a cell prints is in its outputs, which the
    # Validator reads. Keep the terminal for the report.
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        return Validator(config=config).validate(str(notebook))
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def why(raw_error: str, most_lines: int = 15) -> str:
    """What went wrong in a failed test: the exception that ends its traceback, message and all,
    or what it printed on stderr."""
    lines = ANSI.sub("", raw_error).strip().splitlines() or ["the test failed"]
    frames = [i for i, line in enumerate(lines) if line.lstrip().startswith(("File ", "Cell In["))]
    # A check's failure shows its reason first (CheckFailed._render_traceback_), and the frames in
    # it are the ranks' own, part of the reason; any other error comes after the frames above it.
    if frames and not EXCEPTION.match(lines[0]):
        # the exception's first line follows the last frame's source lines
        after = frames[-1] + 1
        lines = lines[next((i for i in range(after, len(lines)) if EXCEPTION.fullmatch(lines[i])
                            or EXCEPTION.match(lines[i]) and ": " in lines[i]), after):]
    if any(line.startswith("NotImplementedError") for line in lines):
        return "not answered yet (the exercise still raises NotImplementedError)"
    if len(lines) > most_lines:
        lines = lines[:most_lines] + ["..."]
    return "\n        ".join(lines)


def report(notebook: Path, cells: list[TestCell], results: dict) -> tuple[list[str], bool]:
    """Lines telling the student what passed, and whether everything did."""
    if results.get("type_changed") or results.get("changed"):
        edited = results.get("type_changed", []) + results.get("changed", [])
        names = [c.grade_id for c in cells if any(e["source"] == c.source for e in edited)]
        return [f"You changed a test cell or a cell's type ({', '.join(names) or 'a graded cell'})"
                ". The grader puts the original back, so restore it: copy the cell from "
                f"notebooks/{notebook.parent.name}/ or start the chapter again from there."], False
    failed = {cell["source"]: cell.get("raw_error", "") for cell in results.get("failed", [])}
    lines, passed_points = [], 0.0
    for cell in cells:
        plural = "" if cell.points == 1 else "s"
        head = f"{cell.grade_id} ({cell.points:g} point{plural}): {cell.what}"
        if cell.source in failed:
            lines += [f"  FAIL  {head}", f"        {why(failed[cell.source])}"]
        else:
            lines.append(f"  PASS  {head}")
            passed_points += cell.points
    passed = sum(cell.source not in failed for cell in cells)
    total_points = sum(cell.points for cell in cells)
    lines.append(f"{passed} of {len(cells)} visible tests pass ({passed_points:g} of "
                 f"{total_points:g} points). Hidden tests run only when your work is graded.")
    return lines, passed == len(cells)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1]:
        print("usage: make check CHAPTER=<chapter>   (e.g. CHAPTER=01_broadcast or CHAPTER=01)")
        return 2
    notebook = find_notebook(Path(argv[0]), argv[1])
    print(f"Checking {notebook} as saved (save it first), running every cell from the top...")
    cells = test_cells(notebook)
    lines, all_passed = report(notebook, cells, run_tests(notebook))
    print("\n".join(lines))
    return 0 if all_passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
