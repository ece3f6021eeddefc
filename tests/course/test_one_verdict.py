"""One verdict before and after handing in: for notebooks written the ways students write them,
real `nbgrader validate` (with the student Lab's configuration, as the Validate button runs it),
`make check` and `make grade` give every visible test the same verdict, and a syntax error in an
answer is named as a SyntaxError with its cell by all three."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from support.class_factory import _answers, cell_index, release
from support.course_copy import ROOT, VENV, make

pytestmark = pytest.mark.slow

CHAPTER = "01_broadcast"
FIRST, SECOND = "01-my-broadcast", "01-share-initial-weights"
TESTS = [f"{FIRST}-test", f"{SECOND}-test"]

# my_broadcast's body, leaning on a helper defined elsewhere
CALLS_HELPER = ('def my_broadcast(tensor, src):\n'
                '    """Copy rank src\'s tensor into tensor on every rank."""\n'
                '    send_to_all_or_receive(tensor, src)\n')
HELPER = ("def send_to_all_or_receive(tensor, src):\n"
          "    rank, world_size = dist.get_rank(), dist.get_world_size()\n"
          "    if rank == src:\n"
          "        for peer in range(world_size):\n"
          "            if peer != src:\n"
          "                dist.send(tensor, peer)\n"
          "    else:\n"
          "        dist.recv(tensor, src)\n")
SENDS_NOTHING = "def my_broadcast(tensor, src):\n    pass\n"


def _solution(grade_id: str) -> str:
    return re.sub(r"\s*### (BEGIN|END) SOLUTION", "", _answers(CHAPTER)[grade_id])


def _notebook(first: str, second: str, cells: list[tuple[str, str, str]]):
    """The chapter with these two answers, and extra cells (where, grade id, source): "before"
    or "after" that answer or test cell."""
    nb = release(CHAPTER)
    nb.cells[cell_index(nb, FIRST)].source = first
    nb.cells[cell_index(nb, SECOND)].source = second
    for where, grade_id, source in cells:
        index = cell_index(nb, grade_id) + (where == "after")
        nb.cells.insert(index, nbformat.v4.new_code_cell(source))
    return nb


def _students() -> dict[str, tuple[object, dict[str, bool]]]:
    """student -> (notebook, the verdict each visible test must get)."""
    right = _solution(SECOND)
    calls_broadcast_each = ("def share_initial_weights(model_state, src=0):\n"
                            "    broadcast_each(model_state.values(), src)\n")
    imports_in_helper = ("import torch.distributed as d\n\n"
                         "def broadcast_each(tensors, src):\n"
                         "    for t in tensors:\n"
                         "        d.broadcast(t, src=src)\n")
    uses_computed = ("def share_initial_weights(model_state, src=0):\n"
                     "    for t in model_state.values():\n"
                     "        dist.broadcast(t, src=SOURCES[0])\n")
    runs_example = right + ("\ndef try_it(rank, world_size):\n"
                            "    state = {'w': torch.full((2,), float(rank))}\n"
                            "    share_initial_weights(state, src=1)\n"
                            "    return state['w']\n\n"
                            "print(commlab.run(try_it, 2).returns)\n")
    # the right weights, sent with send/recv instead of the broadcast the exercise asks for
    sends_instead = ("def share_initial_weights(model_state, src=0):\n"
                     "    for tensor in model_state.values():\n"
                     "        if dist.get_rank() == src:\n"
                     "            for rank in range(dist.get_world_size()):\n"
                     "                if rank != src:\n"
                     "                    dist.send(tensor, rank)\n"
                     "        else:\n"
                     "            dist.recv(tensor, src)\n")
    broken = _solution(FIRST).replace("dist.get_world_size()", "dist.get_world_size(")
    calls_broadcast_all = ("def share_initial_weights(model_state, src=0):\n"
                           "    broadcast_all(model_state, src)\n")
    broadcast_all = ("def broadcast_all(state, src):\n"
                     "    for name in sorted(state):\n"
                     "        dist.broadcast(state[name], src=src)\n")
    return {
        # a helper in a cell of its own, above the answer; an import in a helper cell
        "helper_cell": (
            _notebook(CALLS_HELPER, calls_broadcast_each,
                      [("before", FIRST, HELPER), ("before", SECOND, imports_in_helper)]),
            {TESTS[0]: True, TESTS[1]: True}),
        # the answer defined again in a later cell, above its test (the later one counts);
        # a name that only a statement which computes sets (grading never runs it)
        "redefined_and_computed": (
            _notebook(SENDS_NOTHING, uses_computed,
                      [("before", TESTS[0], _solution(FIRST)),
                       ("before", SECOND, "SOURCES = list(range(1))\n")]),
            {TESTS[0]: True, TESTS[1]: False}),
        # the right answer only below its test; an answer cell that runs its own example
        "redefined_below_and_example": (
            _notebook(SENDS_NOTHING, runs_example, [("after", TESTS[0], _solution(FIRST))]),
            {TESTS[0]: False, TESTS[1]: True}),
        # a syntax error in one answer; a helper below its answer cell but above its test (a
        # cell run out of order in Lab), using the chapter's own names (dist)
        "syntax_error_and_out_of_order": (
            _notebook(broken, calls_broadcast_all, [("after", SECOND, broadcast_all)]),
            {TESTS[0]: False, TESTS[1]: True}),
        # a helper defined only below the test that needs it; the right weights sent without
        # the collective the exercise asks for
        "helper_below_test_and_sends": (
            _notebook(CALLS_HELPER, sends_instead, [("after", TESTS[0], HELPER)]),
            {TESTS[0]: False, TESTS[1]: False}),
    }


def _validate(notebook: Path) -> tuple[dict[str, bool], str]:
    """Real `nbgrader validate`, configured as a student's Lab is (its Validate button)."""
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "helpers" / "jupyter" / "student")}
    done = subprocess.run([str(VENV / "bin" / "nbgrader"), "validate", str(notebook)],
                          capture_output=True, text=True, timeout=600, env=env,
                          cwd=notebook.parent)
    text = done.stdout
    failed = text.split("The following cell failed:")[1:]
    docstrings = _test_docstrings()
    verdicts = {grade_id: not any(doc in part for part in failed)
                for grade_id, doc in docstrings.items()}
    assert ("Success!" in text) == all(verdicts.values()), text
    return verdicts, text


def _test_docstrings() -> dict[str, str]:
    """grade id -> the first line of its test cell's docstring, as the validator prints it."""
    nb = release(CHAPTER)
    return {grade_id: nb.cells[cell_index(nb, grade_id)].source.splitlines()[0][3:60]
            for grade_id in TESTS}


def _check(work: Path) -> tuple[dict[str, bool], str]:
    done = make("check", f"CHAPTER={CHAPTER}", f"WORK={work}", timeout=600)
    verdicts = {}
    for line in done.stdout.splitlines():
        found = re.match(r"  (PASS|FAIL)  (\S+) ", line)
        if found:
            verdicts[found.group(2)] = found.group(1) == "PASS"
    assert set(verdicts) == set(TESTS), done.stdout + done.stderr
    # make stops with status 2 whenever a command fails; the check's own status is 1
    assert done.returncode == (0 if all(verdicts.values()) else 2), done.stdout + done.stderr
    passed = sum(verdicts.values())
    assert f"{passed} of {len(TESTS)} visible tests pass" in done.stdout, done.stdout
    # a failing test shows its message, never the source of the checks that raised it
    assert "raise CheckFailed" not in done.stdout, done.stdout
    return verdicts, done.stdout


@pytest.fixture(scope="module")
def handed_in(tmp_path_factory):
    """Every student's notebook in a class folder, graded by the real grader, checked by `make
    check` and validated, all at once (each waits on its own processes)."""
    folder = tmp_path_factory.mktemp("class")
    students = _students()
    for student, (nb, _) in students.items():
        path = folder / student / CHAPTER / f"{CHAPTER}.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    out = Path(tmp_path_factory.mktemp("graded", numbered=True)) / "out"
    with ThreadPoolExecutor(max_workers=3) as pool:
        grading = pool.submit(_grade, folder, out)
        checked = {s: pool.submit(_check, folder / s) for s in students}
        validated = {s: pool.submit(_validate, folder / s / CHAPTER / f"{CHAPTER}.ipynb")
                     for s in students}
        graded, feedback = grading.result()
        return Handed({s: expected for s, (_, expected) in students.items()}, graded, feedback,
                      {s: f.result() for s, f in checked.items()},
                      {s: f.result() for s, f in validated.items()})


@dataclass
class Handed:
    """student -> what each visible test must get, and what each of the three said."""

    expected: dict[str, dict[str, bool]]
    graded: dict[str, dict[str, bool]]
    feedback: dict[str, str]
    checked: dict[str, tuple[dict[str, bool], str]]
    validated: dict[str, tuple[dict[str, bool], str]]


def _grade(folder: Path, out: Path) -> tuple[dict, dict]:
    done = subprocess.run([str(VENV / "bin" / "python"), "-m", "grader", "grade", str(folder),
                           str(out), "--jobs", "1"], cwd=ROOT, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((out / "results.json").read_text())
    graded = {o["student"]: {g: s == 2 for g, s in o["cells"].items()}
              for o in results["outcomes"]}
    feedback = {o["student"]: _text(Path(o["feedback"]).read_text())
                for o in results["outcomes"]}
    return graded, feedback


def _text(page: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", page))


@pytest.mark.parametrize("student", list(_students()))
def test_validate_make_check_and_the_grade_agree(handed_in, student):
    expected = handed_in.expected[student]
    assert handed_in.graded[student] == expected, f"make grade: {handed_in.graded[student]}"
    verdicts, text = handed_in.checked[student]
    assert verdicts == expected, text
    verdicts, text = handed_in.validated[student]
    assert verdicts == expected, text


@pytest.mark.parametrize("student, words", [
    ("syntax_error_and_out_of_order",
     "SyntaxError: '(' was never closed (your answer cell 01-my-broadcast, line"),
    ("redefined_and_computed", "`SOURCES` is set in your cell"),
])
def test_what_went_wrong_in_an_answer_is_named_by_all_three(handed_in, student, words):
    assert words in handed_in.checked[student][1]
    assert words in handed_in.validated[student][1]
    assert words in handed_in.feedback[student]


def test_a_failed_expectation_is_its_message_alone_in_make_check_and_the_feedback(handed_in):
    lines = handed_in.checked["helper_below_test_and_sends"][1].splitlines()
    failing = next(i for i, line in enumerate(lines)
                   if line.startswith(f"  FAIL  {TESTS[1]} "))
    said = lines[failing + 1:next(i for i in range(failing + 1, len(lines))
                                  if not lines[i].startswith("      "))]
    assert said == [
        "        CheckFailed: On rank 0 (world_size=4, src=0, sizes=(4, 3)), your code should "
        "call dist.broadcast, but it made: send.", "        (this test cell, line 7)"], \
        "\n".join(lines)
    # the graded feedback says the same (Validate shows the start of that line)
    assert "your code should call dist.broadcast, but it made: send" in \
        handed_in.feedback["helper_below_test_and_sends"]
