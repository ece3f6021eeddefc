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

Each page is also filed under its student's hub login, ``feedback-of/<login>/`` beside
nbgrader's ``feedback/``: a hub mounts that folder alone as her feedback (hub/
jupyterhub_config.py, hub/values.yaml), so her server holds her pages and no one else's,
whatever uid it runs as.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .gradebook import SECRET, SUBMITTED, read_results

STAGE = "exchange-feedback"
# each student's pages, by hub login, in the exchange's course folder (what a hub mounts as hers)
OWN_FEEDBACK = "feedback-of"


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
    secrets: dict[tuple[str, str], str] = {}  # (student, chapter) -> its submission's secret
    results = read_results(out)
    for outcome in results.outcomes:
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
        for source, name in ((page, f"{outcome.chapter}.html"), (kept / SECRET, SECRET)):
            shutil.copyfile(source, target / name)
            (target / name).chmod(0o644)
        # nbgrader's release reads the time for its log only; a submission may have none
        stamp = kept / "timestamp.txt"
        (target / "timestamp.txt").write_text(stamp.read_text(errors="replace")
                                              if stamp.is_file() else outcome.submitted or "")
        chapters.add(outcome.chapter)
        done.pages.append((outcome.student, outcome.chapter))
        secrets[(outcome.student, outcome.chapter)] = (kept / SECRET).read_text()
    for chapter in sorted(chapters):
        _release_chapter(out, exchange, course_id, chapter)
    for student, chapter in done.pages:
        login = results.students.get(student, {}).get("username", student)
        if login in ("", ".", "..") or "/" in login:  # no hub login names such a folder
            continue
        _file_under_login(exchange / course_id, login, chapter, secrets[(student, chapter)])
    return done


def _file_under_login(course: Path, login: str, chapter: str, secret: str) -> None:
    """Copy the page nbgrader released for the submission of ``secret`` into ``login``'s own
    feedback folder (no listing, as nbgrader's own: her server finds a page by its name)."""
    from nbgrader.utils import notebook_hash

    name = f"{notebook_hash(secret=secret, notebook_id=chapter)}.html"
    mine = course / OWN_FEEDBACK / login
    for folder in (mine.parent, mine):
        if not folder.is_dir():  # else the hub made it, with these modes
            folder.mkdir()
            folder.chmod(0o711)
    partial = mine / f".{name}.copying"
    shutil.copyfile(course / "feedback" / name, partial)
    partial.chmod(0o644)
    partial.replace(mine / name)


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
