"""The course's images, built once per test session with the documented commands and shared by
tests/system/test_image.py, tests/system/test_browser.py and tests/system/test_hub.py (conftest
imports the fixtures): the student's and the instructor's, built as the host user, and the image
a class's JupyterHub starts, built with the default ids (uid 1000, jovyan)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from support.containers import (
    SCRATCH,
    SIZES,
    Engine,
    PipForBuild,
    base_image,
    build_argv,
    documented_commands,
    find_engine,
    step,
)


@dataclass
class CourseImages:
    engine: Engine
    commands: dict[str, str]  # the docs' lines (support.containers.documented_commands)
    flags: list[str]  # what the test adds to each build line: secrets, network, torch, base
    base: str  # the image the Dockerfile started from
    about: list[str]  # how they were built, for failure messages
    student: str = "commlab-course"
    instructor: str = "commlab-instructor"
    hub: str = "commlab-hub"

    def build(self, which: str, ids: tuple[int, int] | None = None,
              rename: dict[str, str] | None = None, label: str = "") -> None:
        """Run the documented ``which`` build line ("build" or "instructor build")."""
        argv = build_argv(self.commands[which], self.flags, ids, rename)
        with step(f"{which}{label}"):
            self.engine.run(*argv, timeout=2400, low_priority=True)


@pytest.fixture(scope="session")
def course_images() -> CourseImages:
    """The student and instructor images, built as docs/docker.md and docs/security.md say, by
    the host user."""
    engine = find_engine()
    if isinstance(engine, str):
        pytest.skip(engine)
    with step("base image"):
        base, about = base_image(engine)
    pip = PipForBuild(SCRATCH / "pip").start()
    flags = pip.flags + (["--build-arg", f"PYTHON_IMAGE={base}"] if base else [])
    images = CourseImages(engine, documented_commands(), flags,
                          base or _official(), [f"engine: {engine.name}", f"base: {about}",
                                                *pip.said])
    try:
        images.build("build")
        images.build("instructor build")
        for name in (images.student, images.instructor):
            SIZES[name] = engine.size(name)
        yield images
    finally:
        pip.stop()
        # earlier builds' layers that nothing uses any more; this session's stay as the cache
        # of the next run
        engine.run("image", "prune", "--force", check=False, timeout=600)


def _official() -> str:
    from support.containers import _reference, dockerfile_base

    return _reference(dockerfile_base())


@pytest.fixture(scope="session")
def hub_image(course_images) -> CourseImages:
    """docs/hub.md's hub build line: the student target with the default ids, which shares every
    layer up to the user with the images above."""
    course_images.build("hub build")
    SIZES[course_images.hub] = course_images.engine.size(course_images.hub)
    return course_images
