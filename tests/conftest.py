"""Shared fixtures: a real Jupyter kernel that runs cells as a student's notebook would, the
course's images (built once per session for test_image.py and test_browser.py), and Chromium
(test_browser.py, test_site.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.chromium import browser  # noqa: F401  (a module fixture)
from support.containers import MEASURED, SIZES, STEPS
from support.image_fixtures import course_images, hub_image  # noqa: F401  (session fixtures)
from support.kernel import Kernel


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    warm = k.execute("import torch, torch.distributed as dist, commlab")
    assert warm.status == "ok", warm.error
    yield k
    k.shutdown()


def pytest_terminal_summary(terminalreporter):
    """Each image and browser step's seconds, the images' sizes and the hub's sizing figures
    (docs/testing.md and docs/hub.md say what they are)."""
    if not STEPS:
        return
    write = terminalreporter.write_line
    terminalreporter.section("images and browser: seconds per step")
    for name, seconds in STEPS:
        write(f"{seconds:8.1f} s  {name}")
    write(f"{sum(s for _, s in STEPS):8.1f} s  in all")
    for image, size in SIZES.items():
        write(f"{size / 1e9:8.2f} GB  {image}")
    for name, value in MEASURED.items():
        write(f"{value:8.1f}     {name}")


# --- on several workers (make test runs pytest-xdist with --dist loadgroup) ----------------------

ROOT = Path(__file__).resolve().parents[1]
# Modules whose tests of one chapter need nothing of another chapter's (no module fixture that
# does every chapter's work at once): their chapters can run on different workers.
BY_CHAPTER = {"tests/chapters/test_exercise_feedback.py", "tests/course/test_notebooks.py",
              "tests/course/test_nccl_path.py"}


def pytest_collection_modifyitems(config, items):
    """Which tests must run on one worker: a module's (they share its module fixtures), or in
    the modules of BY_CHAPTER a chapter's; a notebook's cells (nbval runs them in order, in one
    kernel); and every test of tests/system/, which share the images, the browser, the hub's and
    the site's environments and the Slurm cluster, and would only slow each other down."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))


def _group(item) -> str:
    path = Path(str(item.fspath)).resolve().relative_to(ROOT).as_posix()
    if path.startswith("tests/system/"):
        return "tests/system"
    if path in BY_CHAPTER:
        chapter = _chapter(item)
        if chapter is not None:
            return f"{path}::{chapter}"
    return path


def _chapter(item) -> str | None:
    """The chapter a parametrized test is about, from its parameters (a chapter's name, or an
    answer file's chapter)."""
    for value in getattr(getattr(item, "callspec", None), "params", {}).values():
        chapter = getattr(value, "chapter", value)
        if isinstance(chapter, str) and (ROOT / "solutions" / chapter).is_dir():
            return chapter
    return None
