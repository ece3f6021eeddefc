"""JupyterLab in a real browser, as a student meets it: a chapter of a fresh workspace opened,
its cells run up to the first exercise, each rank's output under its label in rank order, the
picture of the data movement, answers typed into the exercise cells and the notebook's
**Validate** button passing them, then a wrong answer and the test's own message.

Once with `make lab` of this checkout, once with the student image's Lab (started with the
command of docs/docker.md) where tests/system/test_image.py's images can be built. Chromium is
Debian's, driven by Playwright's Python package (tests/support/chromium.py). Screenshots of each
step are saved in build/browser-screenshots/<lab>/, where a failing run leaves them for a person
to look at.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from support import class_factory
from support.containers import LabContainer, step
from support.course_copy import ROOT
from support.labs import MadeLab

pytestmark = pytest.mark.browser

CHAPTER = "01_broadcast"
SHOTS = ROOT / "build" / "browser-screenshots"
OPEN_NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the tab in front: Lumino hides the rest
WRONG_ANSWER = ("def my_broadcast(tensor, src):\n"
                "    dist.broadcast(tensor, src)\n")
# what the exercise's visible test says to that answer (commlab.checks.expect_only)
WRONG_ANSWER_MESSAGE = "your code called dist.broadcast; this exercise allows only"

# --- the two Labs ------------------------------------------------------------------------------

class LocalLab(MadeLab):
    """`make lab` of this checkout on a fresh workspace, as a student starts it."""

    def __init__(self, folder: Path):
        self.work = folder / "work"
        super().__init__(["lab", f"WORK={self.work}"], folder)


@pytest.fixture(params=["local", pytest.param("image", marks=pytest.mark.image)])
def lab(request, tmp_path):
    """(the Lab, the student's folder of chapters on this machine)"""
    if request.param == "local":
        started = LocalLab(tmp_path)
        work = started.work
    else:
        images = request.getfixturevalue("course_images")
        subprocess.run(["bash", "-c", "mkdir -p commlab-work"], cwd=tmp_path, check=True)
        started = LabContainer(images.engine, images.commands["run"], tmp_path)
        work = tmp_path / "commlab-work"
    with step(f"browser, {request.param} Lab: starts"):
        started.start()
    yield request.param, started, work
    started.stop()


# --- what the student sees -----------------------------------------------------------------

def _exercises() -> list[tuple[int, str]]:
    """(cell index in the student notebook, the answer a student would type) per exercise."""
    release = class_factory.release(CHAPTER)
    answers = class_factory._answers(CHAPTER)
    found = []
    for index, cell in enumerate(release.cells):
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            answer = "\n".join(line for line in answers[grade_id].splitlines()
                               if "### BEGIN SOLUTION" not in line
                               and "### END SOLUTION" not in line)
            found.append((index, answer + "\n"))
    return found


def _cell_index(cell_id: str) -> int:
    return next(i for i, c in enumerate(class_factory.release(CHAPTER).cells)
                if c.get("id") == cell_id)


class Student:
    """One browser page on the chapter, with a screenshot of every step."""

    def __init__(self, page, shots: Path):
        self.page = page
        self.shots = shots
        self.taken = 0

    def shot(self, what: str, locator=None) -> None:
        self.taken += 1
        path = self.shots / f"{self.taken:02d}-{what}.png"
        (locator or self.page).screenshot(path=str(path))

    @property
    def cells(self):
        return self.page.locator(f"{OPEN_NOTEBOOK} .jp-Notebook .jp-Cell")

    def open_chapter(self, started, chapter: str) -> None:
        """The chapter's notebook alone in Lab (``reset``: no tab of an earlier visit restored
        beside it), every cell drawn, no spinner over it, its kernel idle."""
        self.page.goto(f"{started.base_url}/lab/tree/{chapter}/{chapter}.ipynb"
                       f"?reset&token={started.token}")
        count = len(class_factory.release(chapter).cells)
        self.page.wait_for_function(
            """([panel, count]) => [...document.querySelectorAll(panel)].some(p =>
                   p.querySelectorAll('.jp-Notebook .jp-Cell').length === count
                   && !p.querySelector('.jp-Spinner'))""",
            arg=[OPEN_NOTEBOOK, count], timeout=120_000)
        self.page.locator("#jp-main-statusbar").get_by_text("| Idle").wait_for(timeout=120_000)

    def wait_until_run(self, count: int, timeout: float = 240) -> None:
        """Every code cell among the first ``count`` has an execution number."""
        self.page.wait_for_function(
            """(count) => {
                const cells = [...document.querySelectorAll(
                    '.jp-NotebookPanel .jp-Notebook .jp-Cell')].slice(0, count);
                return cells.length === count && cells
                    .filter(c => c.classList.contains('jp-CodeCell'))
                    .every(c => /\\[\\d+\\]/.test(
                        c.querySelector('.jp-InputPrompt').textContent));
            }""", arg=count, timeout=timeout * 1000)

    def type_answer(self, index: int, answer: str) -> None:
        """Replace the cell's code with ``answer``, as typed (or pasted) by the student."""
        editor = self.cells.nth(index).locator(".cm-content")
        editor.scroll_into_view_if_needed()
        editor.click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.press("Delete")
        self.page.keyboard.insert_text(answer)

    def validate(self, timeout: float = 300) -> tuple[str, str]:
        """Click Validate; (the result's class, its text); close the dialog."""
        # the open notebook's button: the tabs behind it keep theirs, hidden
        self.page.locator(f"{OPEN_NOTEBOOK} .validate-button").click()
        message = self.page.locator("#validation-message")
        message.wait_for(timeout=timeout * 1000)
        kind = message.get_attribute("class") or ""
        text = message.inner_text()
        return kind, text

    def close_dialog(self) -> None:
        self.page.locator(".jp-Dialog .jp-mod-accept").click()
        self.page.locator(".jp-Dialog").wait_for(state="detached")


def _saved_source(work: Path, index: int) -> str:
    nb = nbformat.read(work / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    return nb.cells[index].source


@contextlib.contextmanager
def _in_the_browser(browser, name: str, what: str):
    """A page of ``browser`` and the person who drives it, with a screenshot of each step in
    SHOTS/``name``: on a failure, a last one and the folder in the error; the page closed
    either way."""
    shots = SHOTS / name
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir(parents=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    person = Student(page, shots)
    try:
        yield person
    except Exception as error:
        with contextlib.suppress(Exception):
            person.shot("failed")
        raise AssertionError(f"{what}, in the browser: {error}\n"
                             f"Screenshots of each step: {shots}/") from error
    finally:
        page.close()


def test_student_runs_a_chapter_and_validates_in_the_browser(browser, lab):
    which, started, work = lab
    with _in_the_browser(browser, which, f"{which} Lab") as student:
        _student_session(student, which, started, work)


def _student_session(student: Student, which: str, started, work: Path) -> None:
    page = student.page
    exercises = _exercises()
    first_exercise = exercises[0][0]
    with step(f"browser, {which} Lab: chapter opened, kernel idle"):
        student.open_chapter(started, CHAPTER)
    # the course's Lab settings (helpers/jupyter/overrides.json): no question about Jupyter's
    # news for every student
    assert page.get_by_text("official Jupyter news").count() == 0
    student.shot("opened")

    with step(f"browser, {which} Lab: cells run up to the first exercise"):
        student.cells.nth(0).click()
        page.keyboard.press("Escape")  # command mode: Shift+Enter runs and moves down
        for _ in range(first_exercise):
            page.keyboard.press("Shift+Enter")
        student.wait_until_run(first_exercise)

    ranks = student.cells.nth(_cell_index("01-06"))
    ranks.locator(".jp-OutputArea").scroll_into_view_if_needed()
    student.shot("ranks")
    # commlab's display: one block per rank, its label on top, its output below
    blocks = ranks.locator(".jp-OutputArea").evaluate(
        """area => [...area.querySelectorAll('div[style*="border-left"]')].map(
            block => [block.firstElementChild.textContent,
                      block.querySelector('pre').textContent])""")
    assert [label for label, _ in blocks] == [f"rank {r}" for r in range(4)], blocks
    for rank, (_, output) in enumerate(blocks):
        assert f"Rank {rank} after broadcast" in output, (rank, output)
        assert all(f"Rank {other} " not in output for other in range(4) if other != rank)

    picture = student.cells.nth(_cell_index("01-08"))
    picture.scroll_into_view_if_needed()
    image = picture.locator(".jp-OutputArea img")
    image.wait_for()
    assert image.evaluate("img => img.complete && img.naturalWidth > 300"), \
        "the picture of the broadcast is drawn"
    student.shot("picture", picture)

    with step(f"browser, {which} Lab: answers typed, Validate"):
        for index, answer in exercises:
            student.type_answer(index, answer)
            page.keyboard.press("Shift+Enter")
        student.shot("answers-typed")
        kind, text = student.validate()
    student.shot("validate-passes")
    assert "validation-success" in kind, text[:3000]
    assert "Success! Your notebook passes all the tests." in text
    for index, answer in exercises:  # saved as typed
        assert _saved_source(work, index).rstrip("\n") == answer.rstrip("\n"), "saved as typed"
    student.close_dialog()

    with step(f"browser, {which} Lab: a wrong answer, Validate"):
        student.type_answer(first_exercise, WRONG_ANSWER)
        kind, text = student.validate()
    page.locator(".jp-Dialog-body").evaluate("body => body.scrollTop = body.scrollHeight")
    student.shot("validate-fails")
    assert "validation-failed" in kind, text[:3000]
    test_source = class_factory.release(CHAPTER).cells[first_exercise + 1].source
    assert "The following cell failed:" in text
    assert test_source.splitlines()[0] in text, "the failing test is shown"
    assert WRONG_ANSWER_MESSAGE in text, text[:3000]
    # the reason right after the test's source (a few lines: tests/course/test_notebooks.py
    # keeps every chapter's that short), with no frame of the course's check code before it
    lines = [line for line in text.splitlines() if line.strip()]
    failed = next(i for i, line in enumerate(lines) if "The following cell failed:" in line)
    shown = len([line for line in test_source.splitlines() if line.strip()])
    reason = lines[failed + 1 + shown:failed + 3 + shown]
    assert any(WRONG_ANSWER_MESSAGE in line for line in reason), "\n".join(lines[:30])
    assert 'File "' not in "\n".join(lines[:failed + 3 + shown]), "\n".join(lines[:30])
    student.close_dialog()


# --- what the instructor sees after `make grade` -------------------------------------------------

class FormgraderLab(MadeLab):
    """`make formgrader` in a copy of the course, after `make grade` of a small class."""

    def __init__(self, folder: Path, course: Path):
        super().__init__(["formgrader"], folder, cwd=course)


@pytest.fixture
def formgrader(tmp_path):
    from support.course_copy import VENV, make, tracked_copy

    course = tracked_copy(tmp_path / "course")
    (course / ".venv").symlink_to(VENV, target_is_directory=True)
    class_factory.write(course / "class", "ann", class_factory.correct(CHAPTER), CHAPTER)
    class_factory.write(course / "class", "ben", class_factory.release(CHAPTER), CHAPTER)
    with step("browser, Formgrader: make grade of two students"):
        graded = make("grade", "SUBMISSIONS=class", "OUT=grades", cwd=course, timeout=900)
    assert graded.returncode == 0, graded.stdout[-2000:] + graded.stderr[-2000:]
    started = FormgraderLab(tmp_path, course)
    with step("browser, Formgrader: make formgrader starts"):
        started.start()
    yield started
    started.stop()


def test_instructor_sees_every_graded_submission_in_formgrader(browser, formgrader):
    with _in_the_browser(browser, "formgrader", "Formgrader") as instructor:
        page = instructor.page
        with step("browser, Formgrader: the chapter's submissions listed"):
            # the token logs the browser in (a cookie), which Formgrader's own requests need
            page.goto(f"{formgrader.base_url}/lab?token={formgrader.token}")
            page.goto(f"{formgrader.base_url}/formgrader/manage_submissions/{CHAPTER}")
            rows = page.locator("table tbody tr")
            page.wait_for_function(
                "() => document.querySelectorAll('table tbody tr td a').length >= 2",
                timeout=60_000)
        instructor.shot("submissions")
        listed = rows.evaluate_all("rows => rows.map(r => r.innerText)")
        assert any("ann" in row and "4 / 4" in row for row in listed), listed
        assert any("ben" in row and "0 / 4" in row for row in listed), listed
        test_line = class_factory.release(CHAPTER).cells[_exercises()[0][0] + 1] \
            .source.splitlines()[0].strip('"')
        seen = []
        with step("browser, Formgrader: each submission opens with its tests' results"):
            page.goto(f"{formgrader.base_url}/formgrader/gradebook/{CHAPTER}/{CHAPTER}")
            page.locator("table tbody tr td a").first.wait_for(timeout=60_000)
            page.locator("table tbody tr td a").first.click()
            for number in (1, 2):
                page.get_by_text(f"Submission {number} / 2").wait_for(timeout=60_000)
                page.get_by_text(test_line[:40]).first.scroll_into_view_if_needed()
                instructor.shot(f"submission-{number}")
                seen.append(page.inner_text("body"))
                if number == 1:
                    page.get_by_text("Next →").click()
        assert all(test_line[:40] in text for text in seen), seen[0][:3000]
        # the unanswered submission shows its test failing, as the scoring kernel ran it
        assert sum("NotImplementedError" in text for text in seen) == 1, seen
