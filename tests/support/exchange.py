"""nbgrader's exchange as a class on a hub uses it, driven through nbgrader's own exchange code
in this process: a chapter released, students submitting from their work folders into an
inbound folder of their own (as hub/jupyterhub_config.py mounts it into each server), and
fetching their feedback from a folder of their own pages. Each student has a home of her own
(her work folder and nbgrader's cache, which holds each submission's secret) and her own view
of the exchange."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.trusted.exchange_feedback import OWN_FEEDBACK
from support.course_copy import ROOT

COURSE_ID = "commlab"


def _config(root: Path, home: Path, student: str, timezone: str = "UTC"):
    from traitlets.config import Config

    config = Config()
    config.Exchange.timezone = timezone
    config.Exchange.root = str(root)
    config.Exchange.cache = str(home / "nbgrader_cache")
    config.Exchange.assignment_dir = str(home / "work")
    config.CourseDirectory.course_id = COURSE_ID
    config.CourseDirectory.student_id = student
    return config


@dataclass
class Exchange:
    root: Path  # the exchange on the server (HUB_EXCHANGE)
    homes: Path  # one home per student

    def release(self, chapter: str) -> None:
        """The chapter's student notebook into the exchange's outbound (Formgrader's Release)."""
        outbound = self.root / COURSE_ID / "outbound" / chapter
        for folder, mode in (("", 0o755), ("outbound", 0o755), ("inbound", 0o733),
                             ("feedback", 0o711)):
            (self.root / COURSE_ID / folder).mkdir(parents=True, exist_ok=True)
            (self.root / COURSE_ID / folder).chmod(mode)
        shutil.copytree(ROOT / "notebooks" / chapter, outbound, dirs_exist_ok=True)

    def view(self, login: str) -> Path:
        """The exchange as ``login``'s server sees it: released chapters, her own feedback
        pages' folder as the feedback, and the inbound folder of her own."""
        view = self.homes / login / "exchange"
        course = view / COURSE_ID
        if not course.exists():
            course.mkdir(parents=True)
            mine = self.root / COURSE_ID / "inbound" / login
            mine.mkdir(exist_ok=True)
            pages = self.root / COURSE_ID / OWN_FEEDBACK / login
            pages.mkdir(parents=True, exist_ok=True)
            for name, target in (("outbound", self.root / COURSE_ID / "outbound"),
                                 ("feedback", pages), ("inbound", mine)):
                (course / name).symlink_to(target)
        return view

    def submit(self, login: str, chapter: str, notebook, claimed: str | None = None,
               timezone: str = "UTC") -> str:
        """``login`` saves ``notebook`` in her work folder and submits it (nbgrader's own
        submit, under the name ``claimed``, by default her login, its time written in
        ``timezone``, nbgrader's Exchange.timezone); return its timestamp."""
        from nbgrader.auth import Authenticator
        from nbgrader.coursedir import CourseDirectory
        from nbgrader.exchange.default.submit import ExchangeSubmit

        home = self.homes / login
        work = home / "work" / chapter
        work.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, work / f"{chapter}.ipynb")
        config = _config(self.view(login), home, claimed or login, timezone)
        coursedir = CourseDirectory(config=config)
        coursedir.assignment_id = chapter
        submit = ExchangeSubmit(coursedir=coursedir, authenticator=Authenticator(config=config),
                                config=config)
        submit.start()
        return submit.timestamp

    def fetch_feedback(self, login: str, chapter: str) -> list[Path]:
        """nbgrader's fetch_feedback from ``login``'s server; the pages she now has."""
        from nbgrader.auth import Authenticator
        from nbgrader.coursedir import CourseDirectory
        from nbgrader.exchange.default.fetch_feedback import ExchangeFetchFeedback

        home = self.homes / login
        config = _config(self.view(login), home, login)
        coursedir = CourseDirectory(config=config)
        coursedir.assignment_id = chapter
        ExchangeFetchFeedback(coursedir=coursedir, authenticator=Authenticator(config=config),
                              config=config).start()
        return sorted((home / "work" / chapter / "feedback").glob("*/*.html"))
