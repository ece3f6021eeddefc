"""Run solution notebooks top to bottom in a fresh kernel and store their outputs, then
regenerate their student notebooks: what a maintainer does after editing a chapter.

Usage: ``make execute CHAPTER=13_capstone_training`` (or several names, or a number prefix).
Strict nbval compares every stored output, so a chapter is executed here exactly as nbval runs
it: a fresh ``python3`` kernel started in the chapter's folder. Cell execution timestamps are
dropped (they would change on every run); execution counts are kept.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import course  # noqa: E402


def execute(chapter: str, timeout: int = 600) -> float:
    """Execute solutions/<chapter>/<chapter>.ipynb in place; return the seconds it took."""
    path = course.SOLUTIONS / chapter / f"{chapter}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    began = time.perf_counter()
    client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(notebook, path)
    return time.perf_counter() - began


def main(names: list[str]) -> int:
    chapters = course.chapters()
    chosen = [c for c in chapters if any(c == n or c.startswith(n) for n in names)]
    if not names or not chosen:
        print(f"usage: make execute CHAPTER=<name or number>; chapters: {', '.join(chapters)}")
        return 2
    # the test cells read the course's copy of each chapter's checks.py, in notebooks/: first
    # generate, so that the run uses the checks.py just edited, not the copy of the last run
    course.generate(chosen)
    for chapter in chosen:
        print(f"{chapter}: executed in {execute(chapter):.1f} s")
    course.generate(chosen)
    print(f"regenerated notebooks/ for {', '.join(chosen)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
