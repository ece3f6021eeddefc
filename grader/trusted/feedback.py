"""The student's feedback page: the notebook as handed in, with each test cell's result from the
scoring kernel and its score, rendered with nbgrader's feedback template.

Nothing on the page can run in a reader's browser, and nothing of the hidden tests shows:

- the student's own outputs come from the notebook as they handed it in (the grader does not
  run it again), kept only as text and as PNG, JPEG or GIF pictures: HTML, JavaScript, SVG,
  Markdown and widget outputs become their plain-text form, or a line saying what was left out;
- the student's Markdown cells are shown as text: a tag in one is printed, never rendered;
- a test cell shows the scoring kernel's outputs, with hidden tests' source removed and
  tracebacks cut to the error's name and message; when the error came from a hidden test, the
  message too is replaced by a line that says a hidden case failed (its cases, and what the
  ranks printed in them, are not shown); what a test cell with hidden tests printed is dropped.
"""

from __future__ import annotations

import copy
import html
import os
import re
from pathlib import Path

import nbgrader
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.utils import is_grade, is_locked, is_solution, is_task

from .verdict import Outcome

# The hidden-test blocks, with the delimiters nbgrader itself clears from the student notebooks.
_BEGIN = ClearHiddenTests.begin_test_delimeter.default_value
_END = ClearHiddenTests.end_test_delimeter.default_value
HIDDEN_TESTS = re.compile(rf"### {re.escape(_BEGIN)}.*?### {re.escape(_END)}\n?", re.S)

# A stream longer than this is cut: nbgrader's LimitOutput counts lines, and one 3 MB line
# passes it.
FEEDBACK_OUTPUT_CHARS = 20_000
# Output types a page may show as they are; every other one is replaced by its text/plain.
SAFE_TYPES = ("text/plain", "image/png", "image/jpeg", "image/gif")
HIDDEN_FAILURE = ("A hidden test case failed. Hidden cases check what the visible ones do, on "
                  "other world sizes, roots, shapes and dtypes; their details are not shown. "
                  "Run your answer on more cases than the visible test's to find it.")

_TEMPLATES = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# where a test cell's error came from: IPython's frame header, or the line a check's failure
# names (commlab.checks.CheckFailed shows its reason without the frames)
_CELL_LINE = re.compile(r"Cell In\[\d+\], line (\d+)|\(this test cell, line (\d+)\)")


def _hidden_lines(source: str) -> set[int]:
    """The (1-based) line numbers of a test cell's hidden blocks."""
    lines = set()
    for block in HIDDEN_TESTS.finditer(source):
        first = source.count("\n", 0, block.start()) + 1
        lines.update(range(first, first + block.group(0).count("\n") + 1))
    return lines


def _from_hidden_test(output: dict, hidden: set[int]) -> bool:
    """Whether an error came from a hidden test: the line of the test cell it was raised from
    (the traceback's first frame in the cell) lies in a hidden block."""
    text = _ANSI.sub("", "\n".join(output.get("traceback", [])))
    found = _CELL_LINE.search(text)
    return found is not None and int(found.group(1) or found.group(2)) in hidden


def strip_hidden(notebook) -> None:
    """Remove hidden tests' source, and every trace of what they did, from the test cells;
    cut tracebacks to the error's name and message and long streams to their start."""
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        test = is_grade(cell) and not is_solution(cell)
        hidden = _hidden_lines(cell.source) if test else set()
        if test:
            cell.source = HIDDEN_TESTS.sub("# (hidden tests)\n", cell.source)
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error" and test:
                if _from_hidden_test(output, hidden):
                    output["evalue"] = HIDDEN_FAILURE
                output["traceback"] = [f"{output.get('ename')}: {output.get('evalue')}"]
            elif hidden and output.get("output_type") != "error":
                continue  # a hidden test may have printed its cases
            text = output.get("text", "")
            if output.get("output_type") == "stream" and len(text) > FEEDBACK_OUTPUT_CHARS:
                output["text"] = (text[:FEEDBACK_OUTPUT_CHARS]
                                  + f"\n[... {len(text)} characters, cut]\n")
            kept.append(output)
        cell.outputs = kept


def safe_outputs(outputs: list) -> list:
    """``outputs`` with only :data:`SAFE_TYPES` left in rich ones (others fall back to their
    text/plain, or to a line naming what was left out)."""
    safe = []
    for output in outputs:
        output = copy.deepcopy(output)
        if output.get("output_type") in ("display_data", "execute_result"):
            data = output.get("data", {})
            kept = {kind: value for kind, value in data.items() if kind in SAFE_TYPES}
            if not kept:
                left_out = ", ".join(sorted(data)) or "nothing"
                kept = {"text/plain": f"[an output of type {left_out}, not shown here]"}
            output["data"] = kept
            output["metadata"] = {}
        safe.append(output)
    return safe


def with_handed_in_outputs(notebook, handed_in) -> None:
    """Put in ``notebook`` (sanitized for grading: outputs cleared, test cells restored) the
    outputs the student's notebook held when handed in, on every cell but the test cells."""
    by_id = {c.get("id"): c for c in handed_in.cells if c.get("id")}
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or (is_grade(cell) and not is_solution(cell)):
            continue
        original = by_id.get(cell.get("id"))
        if original is None and index < len(handed_in.cells):
            candidate = handed_in.cells[index]
            original = candidate if candidate.get("source") == cell.get("source") else None
        cell.outputs = copy.deepcopy(original.get("outputs", [])) if original else []
        cell.execution_count = original.get("execution_count") if original else None


def made_safe(notebook) -> None:
    """The student's outputs kept only as text and pictures (:func:`safe_outputs`), and the
    student's own Markdown cells as text: what a reader's browser shows of them cannot run.
    (The test cells' outputs are the scoring kernel's, and stay.)"""
    for cell in notebook.cells:
        if cell.cell_type == "markdown" and not is_locked(cell):
            cell.source = html.escape(cell.source, quote=False)
        elif cell.cell_type == "code" and not (is_grade(cell) and not is_solution(cell)):
            cell.outputs = safe_outputs(cell.get("outputs", []))


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
    for cell in notebook.cells:  # whatever reached the notebook, the page shows no markup
        if cell.cell_type == "code":
            cell.outputs = safe_outputs(cell.get("outputs", []))
    _with_scores(notebook, outcome)
    config = Config()
    config.HTMLExporter.template_name = "feedback"
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.extra_template_basedirs = [str(_TEMPLATES / "templates")]
    config.HTMLExporter.extra_template_paths = [
        str(_TEMPLATES / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
    exporter = HTMLExporter(config=config)
    exporter.register_preprocessor(CSSHTMLHeaderPreprocessor(config=config), enabled=True)
    info = {"nbgrader": {"notebook": outcome.chapter, "assignment": outcome.chapter,
                         "student": outcome.student, "score": outcome.score,
                         "max_score": outcome.max_score, "late_penalty": 0}}
    page, _ = exporter.from_notebook_node(notebook, resources=info)
    return page


def with_test_outputs(notebook, tests: dict[str, object]) -> None:
    """Put in ``notebook`` each test cell's outputs as the scoring kernel produced them
    (``tests``, by grade id)."""
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
