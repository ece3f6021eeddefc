"""The student's feedback page: the graded notebook with each test cell's score, without the
hidden tests' source or the tracebacks that would quote it, rendered with nbgrader's feedback
template."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import nbgrader
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.utils import is_grade, is_solution, is_task

from .verdict import Outcome

# The hidden-test blocks, with the delimiters nbgrader itself clears from the student notebooks.
_BEGIN = ClearHiddenTests.begin_test_delimeter.default_value
_END = ClearHiddenTests.end_test_delimeter.default_value
HIDDEN_TESTS = re.compile(rf"### {re.escape(_BEGIN)}.*?### {re.escape(_END)}\n?", re.S)

# A stream longer than this is cut: nbgrader's LimitOutput counts lines, and one 3 MB line
# passes it.
FEEDBACK_OUTPUT_CHARS = 20_000

_TEMPLATES = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"


def strip_hidden(notebook) -> None:
    """Remove hidden tests' source and test cells' tracebacks (their frames quote the hidden
    lines), keeping each error's name and message; cut long streams."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        test = is_grade(cell)
        if test:
            cell.source = HIDDEN_TESTS.sub("# (hidden tests)\n", cell.source)
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and test:
                output["traceback"] = [f"{output.get('ename')}: {output.get('evalue')}"]
            text = output.get("text", "")
            if output.get("output_type") == "stream" and len(text) > FEEDBACK_OUTPUT_CHARS:
                output["text"] = (text[:FEEDBACK_OUTPUT_CHARS]
                                  + f"\n[... {len(text)} characters, cut]\n")


def _with_scores(notebook, outcome: Outcome) -> None:
    """What nbgrader's GetGrades puts in the notebook, from the outcome instead of a gradebook."""
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if is_solution(cell) or is_task(cell):
            unanswered = meta.get("checksum") and meta.get("checksum") == _checksum(cell)
            meta["comment"] = "No response." if unanswered and not is_task(cell) else None
        if is_grade(cell) or is_task(cell):
            grade_id = meta.get("grade_id")
            meta["score"] = outcome.manual.get(grade_id, outcome.cells.get(grade_id))
            meta["points"] = float(meta.get("points", 0))


def _checksum(cell) -> str:
    from nbgrader.utils import compute_checksum

    return compute_checksum(cell)


def render(notebook, outcome: Outcome) -> str:
    """The feedback page's HTML, as ``nbgrader generate_feedback`` would write it."""
    from nbconvert.exporters import HTMLExporter
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from traitlets.config import Config

    notebook = copy.deepcopy(notebook)
    strip_hidden(notebook)
    _with_scores(notebook, outcome)
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    config.HTMLExporter.extra_template_basedirs = [str(_TEMPLATES / "templates")]
    config.HTMLExporter.extra_template_paths = [
        str(_TEMPLATES / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    exporter = HTMLExporter(config=config)
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor(config=config), enabled=True)
    info = {"nbgrader": {"notebook": outcome.chapter, "assignment": outcome.chapter,
                         "student": outcome.student, "score": outcome.score,
                         "max_score": outcome.max_score, "late_penalty": 0}}
    html, _ = exporter.from_notebook_node(notebook, resources=info)
    return html


def with_test_outputs(notebook, tests: dict[str, object]) -> None:
    """Put in ``notebook`` (the student's, whose test cells did not run there) each test
    cell's outputs as the scoring kernel produced them (``tests``, by grade id)."""
    for cell in notebook.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if is_grade(cell) and not is_solution(cell) and grade_id in tests:
            cell.outputs = copy.deepcopy(tests[grade_id].get("outputs", []))
            cell.execution_count = tests[grade_id].get("execution_count")


def write(notebook, outcome: Outcome, out: Path) -> Path:
    """Write the feedback page to ``out/feedback/<student>/<chapter>.html``."""
    page = out / "feedback" / outcome.student / f"{outcome.chapter}.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(notebook, outcome), encoding="utf-8")
    os.chmod(page, 0o644)
    return page


def rewrite(outcome: Outcome, out: Path) -> None:
    """The feedback page again, from the graded notebook in OUT, with the final scores (an
    instructor's manual scores included)."""
    import nbformat

    graded = out / "autograded" / outcome.student / outcome.chapter / f"{outcome.chapter}.ipynb"
    if outcome.feedback is not None and graded.exists():
        outcome.feedback = write(nbformat.read(graded, as_version=4), outcome, out)
