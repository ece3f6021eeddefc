"""A real Jupyter kernel with a chapter's set-up and definition cells run, as the test cells of
tests/chapters/ find it; and the cells of the chapter's solution notebook."""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path

from grader.course import SOLUTIONS
from support.kernel import Kernel

DEFINING = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)


def code_cells(chapter: str, folder: Path = SOLUTIONS) -> list[dict]:
    """The code cells of the chapter's notebook in ``folder`` (its solution by default), in
    order."""
    path = folder / chapter / f"{chapter}.ipynb"
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def grade_id(cell: dict) -> str | None:
    return cell["metadata"].get("nbgrader", {}).get("grade_id")


def source_of(chapter: str, cell_id: str) -> str:
    """The source of the chapter's cell ``cell_id`` (a grade id), as the notebook has it."""
    for cell in code_cells(chapter):
        if grade_id(cell) == cell_id:
            return "".join(cell["source"])
    raise LookupError(f"{chapter} has no cell {cell_id}")


def _defines_only(source: str) -> bool:
    """A cell that only imports and defines (no run, no picture): cheap to replay. Constants
    count as definitions when computing them calls nothing (``HIDDEN = 4``), as for the grader."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return False
    return bool(body) and all(
        isinstance(node, DEFINING) or (isinstance(node, ast.Assign) and not any(
            isinstance(inner, ast.Call) for inner in ast.walk(node.value)))
        for node in body)


class ChapterKernel:
    """A kernel with the chapter's set-up and definition cells run, solutions included."""

    def __init__(self, chapter: str):
        self.chapter = chapter
        self.settled = False
        # in the chapter's folder, as a student's notebook is: its forkserver preloads what the
        # chapter's ranks need (commlab.processes.DYNAMO_CHAPTERS)
        self.kernel = Kernel(cwd=str(SOLUTIONS / chapter))
        # a failing test cell is the point here: the kernel must not drop the next request, as
        # it does for a short while after an error when asked to stop on errors
        self.kernel.client.execute = functools.partial(self.kernel.client.execute,
                                                       stop_on_error=False)
        self.definitions = [
            "".join(cell["source"]) for cell in code_cells(chapter)
            if not cell["metadata"].get("nbgrader", {}).get("grade")
            and _defines_only("".join(cell["source"]))]

    def define(self) -> None:
        """Run the chapter's definitions (again): what an earlier answer defined is gone."""
        for source in self.definitions:
            ran = self.kernel.execute(source, timeout=120)
            assert ran.error is None, (self.chapter, source[:80], ran.error)
        if not self.settled:
            # A test cell comes cells after the import cell in a student's kernel, whose
            # forkserver has by then preloaded torch._dynamo where they need it; here it comes
            # at once, and would find the import cell's first ranks (commlab.kernel_forkserver).
            ran = self.kernel.execute("from commlab import kernel_forkserver\n"
                                      "print(kernel_forkserver.preloaded(timeout=120))",
                                      timeout=180)
            assert ran.stdout.strip() == "True", (self.chapter, ran.stdout, ran.error)
            self.settled = True

    def execute(self, source: str, timeout: float):
        return self.kernel.execute(source, timeout=timeout)
