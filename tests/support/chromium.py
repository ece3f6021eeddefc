"""Debian's Chromium driven by Playwright's Python package (``executable_path``: Playwright's
own browser download is not used), shared by the tests that open pages in a real browser:
JupyterLab and Formgrader (tests/system/test_browser.py) and the course's website
(tests/system/test_site.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("COMMLAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# headless as root needs --no-sandbox; the rest keep Chromium off the network (a closed one
# refuses its background connections, many at a time)
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module's tests; skips them where Chromium is not installed."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: it is pinned in requirements-dev.txt (make setup)")
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (Debian, as root: apt-get install chromium, "
                    "or tools/install_test_tools.sh)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()
