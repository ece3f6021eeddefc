"""The feedback pages of a graded class back through nbgrader's exchange
(``python -m grader release-feedback OUT``), where each student's Assignments panel (nbgrader's
``fetch_feedback``) finds her own.

nbgrader files a page under a name made from the submission's ``submission_secret.txt``, which
only that student's server holds besides the exchange: she fetches the page of each submission
she handed in, and no one else's. So only submissions handed in through the exchange, whose
secret ``make grade`` kept (``OUT/submitted/<student>/<chapter>/``), get their page released;
the rest are named.

The pages are the grader's (hidden tests removed, ``OUT/feedback/<student>/<chapter>.html``),
laid out as nbgrader's ``release_feedback`` reads them, in ``OUT/exchange-feedback/<student>/
<chapter>/`` (the page, the submission's ``timestamp.txt`` and ``submission_secret.txt``), then
released by nbgrader's own exchange code. Releasing again (a regraded class, a late
submission graded a week later) replaces a page of the same submission and adds the new ones.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .gradebook import SECRET, SUBMITTED, read_results

STAGE = "exchange-feedback"


@dataclass
class Released:
    pages: list[tuple[str, str]] = field(default_factory=list)  # (student, chapter)
    not_released: list[str] = field(default_factory=list)  # why, one line each


class ReleaseError(RuntimeError):
    """The exchange refused the pages; the message says what to do."""


def release(out: Path, exchange: Path, course_id: str) -> Released:
    """Stage every graded submission's page of ``out`` in nbgrader's layout and release them
    to ``exchange`` for ``course_id``."""
    done = Released()
    stage = out / STAGE
    chapters = set()
    for outcome in read_results(out).outcomes:
        where = f"{outcome.student}/{outcome.chapter}"
        if outcome.feedback is None:
            if outcome.cells or outcome.status.value != "missing":
                done.not_released.append(f"{where}: no feedback page ({outcome.status.value})")
            continue
        kept = out / SUBMITTED / outcome.student / outcome.chapter
        page = out / "feedback" / outcome.student / f"{outcome.chapter}.html"
        if not (kept / SECRET).is_file():
            done.not_released.append(
                f"{where}: not handed in through nbgrader's exchange (no {SECRET}); send "
                f"{page} another way")
            continue
        if not page.is_file():
            done.not_released.append(f"{where}: {page} is missing")
            continue
        target = stage / outcome.student / outcome.chapter
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        # readable by every student's server: the exchange's feedback folder hides the names
        for source, name in ((page, f"{outcome.chapter}.html"), (kept / SECRET, SECRET),
                             (kept / "timestamp.txt", "timestamp.txt")):
            shutil.copyfile(source, target / name)
            (target / name).chmod(0o644)
        chapters.add(outcome.chapter)
        done.pages.append((outcome.student, outcome.chapter))
    for chapter in sorted(chapters):
        _release_chapter(out, exchange, course_id, chapter)
    return done


def _release_chapter(out: Path, exchange: Path, course_id: str, chapter: str) -> None:
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeError
    from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback
    from traitlets.config import Config

    config = Config()
    config.CourseDirectory.root = str(out)
    config.CourseDirectory.feedback_directory = STAGE
    config.CourseDirectory.course_id = course_id
    config.Exchange.root = str(exchange)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = chapter
    releaser = ExchangeReleaseFeedback(coursedir=coursedir,
                                       authenticator=Authenticator(config=config),
                                       config=config)
    if not (exchange / course_id).is_dir():
        raise ReleaseError(f"{exchange / course_id} does not exist: give the exchange's folder "
                           "(--exchange, the hub's HUB_EXCHANGE) and the course id (--course); "
                           "no chapter was released there yet?")
    try:
        releaser.start()
    except (ExchangeError, OSError) as exc:
        raise ReleaseError(f"the exchange refused the feedback of {chapter}: {exc}. Release "
                           "as the account that owns the exchange's course folder (the hub's "
                           "HUB_COURSE_USER)") from exc
