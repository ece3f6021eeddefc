"""The tests of the course as a whole: its notebooks and their order, the student's commands and
workspace, the student edition, the set-up and the environments; and of the tools under
helpers/ that are not the commlab package.

The modules below are tested here or elsewhere (tests/test_layout.py reads these lines)."""

# helpers/scripts/check_notebook.py: tested through test_make_check.py and test_one_verdict.py
#   (make check)
# helpers/scripts/student_edition.py: tested through test_student_edition.py (make
#   student-edition)
# helpers/scripts/workspace.py: tested through test_workspace.py (make lab's work/ folder)
# helpers/jupyter/nbgrader_config.py: tested through tests/system/test_browser.py (the student's
#   Validate button) and tests/system/test_image.py
# helpers/jupyter/student/nbgrader_config.py: tested through test_student_lab.py (a student's
#   make lab: Validate, no instructor's panel) and test_one_verdict.py (nbgrader validate with it)
# helpers/site/build.py: tested through tests/system/test_site.py (make site)
# helpers/site/conf.py: tested through tests/system/test_site.py (make site)
# helpers/site/pictures.py: tested through tests/system/test_site.py (every picture's alt text)

from __future__ import annotations

import os
from contextlib import contextmanager

import pytest
from nbval.plugin import IPyNbFile

from grader import course
from support.nccl_branch import chapters_beyond_the_plain_calls

# the solution notebooks again (test_nccl_path.py), commlab believing four GPUs exist
PRETEND_GPUS = {"COMMLAB_PRETEND_GPUS": "4"}


@contextmanager
def _environment(values: dict[str, str]):
    had = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in had.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


class NotebookOnTheNcclBranch(IPyNbFile):
    """A solution notebook under strict nbval (the suite's own options), its kernel started with
    ``COMMLAB_PRETEND_GPUS``: the kernel's process keeps it, this one does not."""

    def setup(self):
        with _environment(PRETEND_GPUS):
            super().setup()

    def collect(self):
        for item in super().collect():
            item.add_marker(pytest.mark.slow)
            yield item


class NotebooksOnTheNcclBranch(pytest.File):
    """test_nccl_path.py's items: the solution notebook of each chapter that uses more of
    torch.distributed than the plain calls tests/commlab/test_backend.py makes on both branches
    (support/nccl_branch.py), on the NCCL branch."""

    def collect(self):
        for chapter in chapters_beyond_the_plain_calls():
            yield NotebookOnTheNcclBranch.from_parent(
                self, path=course.SOLUTIONS / chapter / f"{chapter}.ipynb", name=chapter,
                nodeid=f"{self.nodeid}::{chapter}")


def pytest_collect_file(file_path, parent):
    if file_path.name == "test_nccl_path.py" and file_path.parent.name == "course":
        return NotebooksOnTheNcclBranch.from_parent(parent, path=file_path)
