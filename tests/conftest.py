"""Shared fixtures: a real Jupyter kernel that runs cells as a student's notebook would, the
course's images (built once per session for test_image.py and test_browser.py), and Chromium
(test_browser.py, test_site.py)."""

from __future__ import annotations

import gc
import json
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


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """No garbage collection while the test modules import (torch, nbformat, the grader: some
    580,000 objects), then what they made frozen out of the collector's sight: the collector
    walked them again and again as they grew, and at every full collection of a worker after,
    a third of the workers' own CPU in the fast lane. (On make test's controller, which
    collects nothing, this does nothing.)"""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


def pytest_sessionfinish(session):
    """On a worker of make test: hand the figures below to the controller, which prints them."""
    sent = getattr(session.config, "workeroutput", None)
    if sent is not None:
        sent["figures"] = json.dumps({"steps": STEPS, "sizes": SIZES, "measured": MEASURED})


@pytest.hookimpl(optionalhook=True)  # known only where pytest-xdist is loaded
def pytest_testnodedown(node, error):
    figures = json.loads(getattr(node, "workeroutput", {}).get("figures", "{}"))
    STEPS.extend(tuple(step) for step in figures.get("steps", []))
    SIZES.update(figures.get("sizes", {}))
    MEASURED.update(figures.get("measured", {}))


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


# --- on several workers (make test runs pytest-xdist) ---------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_NAMES = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
# Modules whose tests of one chapter need nothing of another chapter's (no module fixture that
# does every chapter's work at once): their chapters can run on different workers.
BY_CHAPTER = {"tests/chapters/test_exercise_feedback.py", "tests/course/test_notebooks.py",
              "tests/course/test_nccl_path.py"}
# The groups that take longest (minutes each), longest first.
LONGEST_FIRST = ["tests/system", "tests/course/test_one_verdict.py",
                 "tests/grader/test_autograde.py", "tests/chapters/test_attacks.py",
                 "tests/chapters/test_solutions.py", "tests/grader/trusted/test_batch.py"]


# The modules of tests/system/ that build or run the images: one worker builds them once, in
# order. The others there (Slurm, the website, a term's grading, Formgrader's pod) need none.
WITH_IMAGES = {"tests/system/test_image.py", "tests/system/test_browser.py",
               "tests/system/test_hub.py"}


def group(nodeid: str) -> str:
    """The tests that must run on one worker: a module's (they share its module fixtures), or in
    the modules of BY_CHAPTER a chapter's (named in the test's id); a notebook's cells
    (nbval runs them in order, in one kernel); the tests of tests/system/ that share the images
    (their builds would only slow each other down); and the other tests of tests/system/, which
    share the browser's, the hub's and the site's environments and the Slurm cluster, beside
    them: the image builds alone take a worker for most of the run."""
    path, _, rest = nodeid.partition("::")
    if path.startswith("tests/system/"):
        return "tests/system" if path in WITH_IMAGES else "tests/system (no images)"
    if path in BY_CHAPTER:
        # a test's parameters, or the notebook test_nccl_path.py collects cells of
        chapter = next((name for name in CHAPTER_NAMES if name in rest), None)
        if chapter is not None:
            return f"{path}::{chapter}"
    return path


def pytest_collection_modifyitems(config, items):
    """Workers are handed groups in the order collected: the longest first, so that none is left
    to run alone at the end (within a group, a notebook's cells, the order stays)."""
    items.sort(key=lambda item: next((i for i, path in enumerate(LONGEST_FIRST)
                                      if group(item.nodeid).startswith(path)),
                                     len(LONGEST_FIRST)))


@pytest.hookimpl(optionalhook=True)  # known only where pytest-xdist is loaded
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduler by scope, with :func:`group` as the scope (its own loadgroup
    reads marks that pytest 9 no longer lets it put into a test's id)."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group(nodeid)

    return ByGroup(config, log)
