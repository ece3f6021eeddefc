"""A real Jupyter kernel per chapter, in which the chapter's answer files are judged by its own
test cells (tests/chapters/README.md)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from support.chapter_kernel import ChapterKernel


@pytest.fixture(scope="module")
def chapter_kernel():
    """The kernel of a chapter, started on first use and defined afresh for every answer."""
    started: dict[str, ChapterKernel] = {}

    def kernel_of(chapter: str) -> ChapterKernel:
        if chapter not in started:
            started[chapter] = ChapterKernel(chapter)
        started[chapter].define()
        return started[chapter]

    yield kernel_of
    # at once: each kernel spends seconds stopping its ranks and forkserver, mostly waiting
    with ThreadPoolExecutor(max(len(started), 1)) as pool:
        list(pool.map(lambda k: k.kernel.shutdown(), started.values()))
