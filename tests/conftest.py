"""Shared fixtures: a real Jupyter kernel that runs cells as a student's notebook would, the
course's images (built once per session for test_image.py and test_browser.py), and Chromium
(test_browser.py, test_site.py)."""

from __future__ import annotations

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
