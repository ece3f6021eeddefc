"""Where a score is decided: the instructor's notebook, run in a trusted kernel with the student's
answers as stand-ins, and nothing else of the student's.

For each submission the scoring kernel (one per worker, never sandboxed because it never runs
student code) runs a notebook made from ``solutions/`` (hidden tests included):

- a first cell that takes the submission (:func:`grader.trusted.scoring_kernel.begin`): what
  the grading rule (:mod:`commlab.cells`) takes of it (its answer cells and its own cells, to be
  defined in the ranks from their definitions only), read here from the sanitized notebook as
  text, never run here;
- every test cell, as the instructor wrote it, after a cell that names it (the answers it sees
  are those the cells above it in the student's notebook define);
- for each answer cell, the solution cell's imports and a stand-in for each name it defines
  (:mod:`grader.trusted.stand_ins`): the student's code runs only in the ranks, in the sandbox;
- from every other code cell, only its top-level imports, ``def``s, ``class``es and assignments
  that call nothing: what tests and answers use, without re-running the chapter's examples.

The student's other cells never run here. What the ranks send back is data (:mod:`grader.wire`);
the test cells' checks, comparisons and byte counts run in this kernel, and nbgrader's own rule
(an error or anything on stderr is 0) scores its test cells' outputs.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import json
from pathlib import Path

import nbformat
from nbgrader.utils import is_grade, is_solution

from commlab import cells
from commlab.cells import defined_names, definitions, imports

from .. import course
from ..sandboxed import namespaces
from .execute import Execution, run_in
from .kernels import copy_font_list

# the kernel's name for grader.trusted.scoring_kernel (the seed skips names with "_")
SCORER = "__scorer__"

def is_test(cell) -> bool:
    """A test cell: graded, and not itself an answer (a manually graded answer is one)."""
    return cell.cell_type == "code" and is_grade(cell) and not is_solution(cell)


def is_answer(cell) -> bool:
    return cell.cell_type == "code" and is_solution(cell) and not is_grade(cell)


def _grade_id(cell) -> str:
    return cell.metadata["nbgrader"]["grade_id"]


def submission_data(submitted, plan: namespaces.Plan | None, chapter: str | None = None) -> dict:
    """What the scoring kernel takes of a submission, as the grading rule (:mod:`commlab.cells`)
    takes it: the answer cells and the student's own cells (grade id, source), how many of them
    lie above each test, the rank host's namespaces, and the names of the chapter's own
    definitions an answer may use. Text only."""
    release = release_cells(chapter) if chapter else []
    found, cuts = cells.pieces(submitted.cells, cells.given_sources(release))
    return {"pieces": [dataclasses.astuple(piece) for piece in found], "cuts": cuts,
            "plan": None if plan is None else namespaces.plan_data(plan),
            "shared": sorted(shared_names(chapter)) if chapter else []}


@functools.cache
def release_cells(chapter: str) -> list:
    """The code cells of the chapter's student notebook, as the course releases it."""
    release = nbformat.read(course.NOTEBOOKS / chapter / f"{chapter}.ipynb", as_version=4)
    return [cell for cell in release.cells if cell.cell_type == "code"]


@functools.cache
def shared_names(chapter: str) -> frozenset[str]:
    """What the chapter's own cells give the answers (see :func:`commlab.cells.shared_names`),
    read from the notebook the students received."""
    return frozenset(cells.shared_names(release_cells(chapter)))


def scoring_notebook(chapter: str, submission_file: Path):
    """The notebook the scoring kernel runs for one submission of ``chapter``."""
    source = nbformat.read(course.SOLUTIONS / chapter / f"{chapter}.ipynb", as_version=4)
    new = nbformat.v4.new_code_cell
    steps = [new(f"import grader.trusted.scoring_kernel as {SCORER}\n"
                 f"{SCORER}.begin({str(submission_file)!r})")]
    first_test = True
    for cell in source.cells:
        if cell.cell_type != "code":
            continue
        if is_test(cell):
            if first_test:  # the answers, defined once before any test (stand_ins)
                steps.append(new(f"{SCORER}.answers_defined()"))
                first_test = False
            # the answers as the cells above this test define them, in the student's notebook
            steps.append(new(f"{SCORER}.testing({_grade_id(cell)!r})"))
            test = copy.deepcopy(cell)
            test.outputs, test.execution_count = [], None
            steps.append(test)
        elif is_answer(cell):
            stand_ins = [*imports(cell.source)] + [
                f"{name} = {SCORER}.answer({_grade_id(cell)!r}, {name!r})"
                for name in defined_names(cell.source)]
            steps.append(new("\n".join(stand_ins)))
        elif code := definitions(cell.source):
            steps.append(new(code))
    steps.append(new(f"{SCORER}.end()"))
    notebook = nbformat.v4.new_notebook(cells=steps, metadata=source.metadata)
    return notebook


@dataclasses.dataclass
class Scored:
    """The scoring run of one submission: its notebook (test cells with their outputs) and how
    the run ended."""

    notebook: object
    execution: Execution

    def stopped(self) -> tuple[str, str] | None:
        """(error name, message) when defining the answers stopped the submission before its
        first test (see :func:`grader.trusted.stand_ins.define_first`)."""
        for cell in self.notebook.cells:
            if cell.cell_type == "code" and cell.source == f"{SCORER}.answers_defined()":
                for output in cell.get("outputs", []):
                    if output.get("ename") in ("AnswersEndedTheirProcess",
                                               "AnswersDidNotFinish"):
                        return output["ename"], output.get("evalue", "")
        return None

    def tests(self) -> dict[str, object]:
        """grade id -> the executed test cell."""
        return {_grade_id(c): c for c in self.notebook.cells if is_test(c)}


async def score(chapter: str, submitted, kernel, config, limit: float, folder: Path,
                plan: namespaces.Plan | None) -> Scored:
    """Run the scoring notebook of ``submitted`` (the sanitized notebook) on the scoring
    ``kernel``; ``folder`` receives the submission's data, ``plan`` is the rank host's sandbox."""
    folder.mkdir(parents=True, exist_ok=True)
    if plan is not None:
        plan.workdir.mkdir(parents=True, exist_ok=True)
        copy_font_list(plan.workdir)  # the ranks' MPLCONFIGDIR
    data = folder / "submission.json"
    data.write_text(json.dumps(submission_data(submitted, plan, chapter)))
    notebook = scoring_notebook(chapter, data)
    done = await run_in(notebook, kernel, config, limit,
                        phase=lambda cell: "tests" if is_test(cell) else "scoring set-up")
    if not done.died:  # a cell stopped at the limit may leave the host running: stop it
        try:
            await asyncio.wait_for(kernel.kc.execute_interactive(
                f"{SCORER}.end()", silent=True, store_history=False, timeout=30,
                output_hook=lambda _: None), timeout=40)
        except Exception:  # noqa: BLE001 - the kernel is restarted when it cannot answer
            done.died = True
    return Scored(notebook, done)
