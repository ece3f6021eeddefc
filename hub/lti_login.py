"""The class's hub behind the LMS: LTI 1.3 launches through jupyterhub-ltiauthenticator's
LTI13Authenticator (OIDC login initiation, the platform's keys, the state and the nonce),
with the course's rules on top (hub/jupyterhub_config.py turns it on when HUB_LTI_ISSUER is
set; docs/lms.md says how to register the hub in Canvas and Moodle):

- a student's hub name is a claim of the launch, ``sub`` by default (HUB_LTI_USERNAME_KEY): the
  LMS's own id of the person, which stays the same when she changes her name or email, and the
  id ``python -m grader lti`` posts her scores to;
- instructors (the LTI role Instructor, or Administrator) are hub admins; teaching assistants
  (the TeachingAssistant role) join the graders' group, which may open Formgrader; both join it;
- a launch that names a chapter (the custom parameter ``chapter=01_broadcast``, or
  ``?chapter=01_broadcast`` on the launch's target link) opens that chapter's notebook in the
  student's ``work/``;
- a launch that fails a check gets a page that says which check, and what to do.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import jupyterhub.log
from jupyterhub import orm
from jupyterhub.utils import url_path_join
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.handlers import LTI13CallbackHandler
from tornado.web import HTTPError
from traitlets import Set, Unicode

ROLES = "https://purl.imsglobal.org/spec/lti/claim/roles"
CUSTOM = "https://purl.imsglobal.org/spec/lti/claim/custom"
TARGET = "https://purl.imsglobal.org/spec/lti/claim/target_link_uri"
CHAPTER = re.compile(r"^\d\d_\w+\Z")
AGAIN = ("Open it again from the LMS (each launch can be used once); if this page comes back, "
         "show it to your instructor.")
# the library's words for a failed check -> what the page says
CHECKS = [
    ("nonce", "its nonce is not the one this browser asked for: the launch was replayed, or "
              "sent twice"),
    ("state", "its state is not the one this browser asked for: a launch from another tab or "
              "window, or a browser that blocks the hub's cookies"),
    ("signature", "its signature does not match the LMS's keys (the hub's HUB_LTI_JWKS_URL)"),
    ("signing key", "its signature does not match the LMS's keys (the hub's HUB_LTI_JWKS_URL)"),
    ("audience", "it was meant for another tool (the hub's HUB_LTI_CLIENT_ID)"),
    ("azp", "it was meant for another tool (the hub's HUB_LTI_CLIENT_ID)"),
    ("issuer", "it comes from another LMS than the hub's (HUB_LTI_ISSUER)"),
    ("expired", "it has expired"),
    ("too long ago", "it has expired"),
]


# the client id travels in a launch's URLs: the hub's request log writes it as [secret], as it
# writes the state
if "client_id" not in jupyterhub.log.SCRUB_PARAM_KEYS:
    jupyterhub.log.SCRUB_PARAM_KEYS = (*jupyterhub.log.SCRUB_PARAM_KEYS, "client_id")


def refusal(said: str) -> str:
    """The page's words for a launch the library refused with ``said``."""
    why = next((what for key, what in CHECKS if key in said.lower()), said)
    return f"This launch from the LMS was refused: {why}. {AGAIN}"


def chapter_of(token: dict) -> str:
    """The chapter a launch names: the custom parameter, else the target link's query."""
    chapter = (token.get(CUSTOM) or {}).get("chapter", "")
    if not chapter:
        query = parse_qs(urlsplit(token.get(TARGET, "")).query)
        chapter = (query.get("chapter") or [""])[0]
    return chapter


def staff_role(token: dict) -> str:
    """``ta``, ``instructor`` or ``""`` (a learner), from the launch's LTI roles."""
    roles = [str(r) for r in token.get(ROLES, [])]
    if any(r.endswith("#TeachingAssistant") for r in roles):
        return "ta"
    if any(r.endswith(("membership#Instructor", "#Administrator")) for r in roles):
        return "instructor"
    return ""


class CourseCallbackHandler(LTI13CallbackHandler):
    """The library's launch, its refusals said as :func:`refusal` says them, then the
    graders' group and the chapter."""

    def decode_and_validate_launch_request(self):
        self._token = super().decode_and_validate_launch_request()
        return self._token

    async def post(self):
        try:
            await super().post()
        except HTTPError as exc:
            if getattr(exc, "course_said", False):
                raise
            # no arguments: tornado shows the message as it is, a % included
            raise HTTPError(exc.status_code,
                            refusal(exc.get_message() or exc.reason or "")) from None

    async def redirect_to_next_url(self, user):
        token = getattr(self, "_token", {})
        self._graders_group(user, staff_role(token))
        chapter = chapter_of(token)
        if chapter and chapter not in self.authenticator.chapters:
            refused = HTTPError(404, f"The LMS asked for the chapter {chapter!r}, which this "
                                "course does not have: ask your instructor to check the "
                                "assignment's chapter parameter (a chapter folder's name, "
                                "such as 01_broadcast).")
            refused.course_said = True
            raise refused
        if chapter:
            self.redirect(url_path_join(self.hub.base_url, "user-redirect", "lab", "tree",
                                        "work", chapter, f"{chapter}.ipynb"))
            return
        await super().redirect_to_next_url(user)

    def _graders_group(self, user, role: str) -> None:
        group = orm.Group.find(self.db, self.authenticator.graders_group)
        if group is None:
            return
        staff = role in ("ta", "instructor") or user.name in self.authenticator.graders
        if staff and user.orm_user not in group.users:
            group.users.append(user.orm_user)
        elif not staff and user.orm_user in group.users:
            group.users.remove(user.orm_user)
        self.db.commit()


class CourseLTI13Authenticator(LTI13Authenticator):
    """LTI13Authenticator with the course's names, roles and chapters."""

    callback_handler = CourseCallbackHandler
    graders_group = Unicode("", config=True, help="the group that may open Formgrader")
    graders = Set(Unicode(), config=True, help="hub names in that group whatever their role")
    chapters = Set(Unicode(), config=True, help="the chapters a launch may open")

    async def authenticate(self, handler, data=None):
        model = await super().authenticate(handler, data)
        model["admin"] = (staff_role(data or {}) == "instructor"
                          or model["name"].lower() in self.admin_users)
        return model
