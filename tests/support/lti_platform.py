"""An LTI 1.3 platform for the tests: the ``lti1p3platform`` package's platform (its OIDC
login initiation and signed launches, the access token grant that checks the tool's signed
JWT, the services' token checks, AGS and NRPS), served over HTTP by FastAPI and uvicorn on a
free 127.0.0.1 port, with the storage that the package leaves to its user: line items, scores
(every one posted is kept) and the members.

    with LtiPlatform(members=[...], tool_jwk=...) as platform:
        platform.settings(key_file)   # the grader's COMMLAB_LTI_* for this platform
        platform.register_tool(hub)   # then GET /launch?user=ID&chapter=NN_name starts a launch
"""

from __future__ import annotations

import socket
import threading
import time
import typing as t
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from lti1p3platform.exceptions import LineItemNotFoundException, LtiException
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.membership import Context
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request
from lti1p3platform.score import UpdateScoreStatus
from lti1p3platform.service_connector import (
    AssignmentsGradesService,
    NamesRoleProvisioningService,
)

ISSUER = "https://lms.example.edu"
CLIENT_ID = "commlab-tool-client-8f3a1c"
DEPLOYMENT_ID = "deployment-1"
LEARNER = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
INSTRUCTOR = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
TA = "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"


def new_key() -> tuple[str, str]:
    """(private PEM, public PEM) of a fresh 2048-bit RSA key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public.decode()


def member(user_id: str, name: str, role: str = LEARNER, email: str = "") -> dict:
    return {"user_id": user_id, "name": name, "roles": [role], "status": "Active",
            "email": email or f"{name.split()[0].lower()}@example.edu"}


@dataclass
class Storage:
    """What the platform keeps: its gradebook."""

    line_items: dict[str, dict] = field(default_factory=dict)
    scores: list[tuple[str, dict]] = field(default_factory=list)  # (line item id, score)
    members: list[dict] = field(default_factory=list)
    tool_jwks: dict = field(default_factory=dict)

    def results(self, item_id: str) -> dict[str, dict]:
        """user id -> the latest score posted to that line item."""
        latest = {}
        for posted_to, score in self.scores:
            if posted_to == item_id:
                latest[str(score["userId"])] = score
        return latest


class PlatformConf(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, **kwargs: t.Any) -> None:
        self.keys = kwargs["keys"]
        self.storage = kwargs["storage"]
        self.base = kwargs["base"]

    def get_registration_by_params(self, **kwargs: t.Any) -> Registration:
        private, public = self.keys
        return (Registration().set_iss(ISSUER).set_client_id(CLIENT_ID)
                .set_deployment_id(DEPLOYMENT_ID).set_platform_private_key(private)
                .set_platform_public_key(public).set_tool_key_set(self.storage.tool_jwks)
                .set_launch_url(kwargs.get("launch_url") or "http://127.0.0.1/"))


class PlainRequest(Request):
    """A request as lti1p3platform reads it, from what the HTTP glue gathered."""

    def build_metadata(self, request: t.Any) -> t.Any:
        return request


class Grades(AssignmentsGradesService):
    """AGS on :class:`Storage`."""

    def __init__(self, request, conf: PlatformConf, storage: Storage, **kwargs):
        super().__init__(request, conf, f"{conf.base}/lineitems", **kwargs)
        self.storage = storage

    def find_lineitems(self, page=1, limit=None, line_item_id=None, resource_link_id=None,
                       resource_id=None, tag=None):
        items = [i for i in self.storage.line_items.values()
                 if (resource_id is None or i.get("resourceId") == resource_id)
                 and (tag is None or i.get("tag") == tag)]
        return {"content": items, "has_next": False, "next": None}

    def find_lineitem(self, line_item_id):
        try:
            return self.storage.line_items[line_item_id]
        except KeyError:
            raise LineItemNotFoundException() from None

    def create_lineitem(self, creation_data):
        number = len(self.storage.line_items) + 1
        item = {**creation_data, "id": f"{self.platform_config.base}/lineitems/{number}"}
        self.storage.line_items[str(number)] = item
        return item

    def update_lineitem(self, update_data):
        raise LineItemNotFoundException()

    def delete_lineitem(self, line_item_id):
        raise LineItemNotFoundException()

    def update_score(self, line_item_id, score):
        item = self.find_lineitem(line_item_id)
        self.storage.scores.append((item["id"], score))
        return UpdateScoreStatus.SUCCESS

    def get_results(self, line_item_id, page=1, limit=None, user_id=None):
        item = self.find_lineitem(line_item_id)
        content = [{"id": f"{item['id']}/results/{user}", "scoreOf": item["id"],
                    "userId": user, "resultScore": s.get("scoreGiven"),
                    "resultMaximum": s.get("scoreMaximum")}
                   for user, s in self.storage.results(item["id"]).items()]
        return {"content": content, "has_next": False, "next": None}


class Members(NamesRoleProvisioningService):
    """NRPS on :class:`Storage`."""

    def __init__(self, request, conf: PlatformConf, storage: Storage):
        super().__init__(request, conf, f"{conf.base}/memberships")
        self.storage = storage

    def get_member_data_page(self, page=1, limit=None, role=None, since=None):
        return {"content": [dict(m) for m in self.storage.members], "has_next": False}

    def get_context_by_id(self):
        return Context(id="course-1", label="COMMLAB", title="Collective communication")


class Login(OIDCLoginAbstract):
    """The OIDC login initiation: the browser sent to the tool's login URL."""

    def set_lti_message_hint(self, **kwargs: t.Any) -> None:
        self._lti_message_hint = kwargs["hint"]

    def get_redirect(self, url: str) -> RedirectResponse:
        return RedirectResponse(url, status_code=302)


class Launch(LTIAdvantageMessageLaunchAbstract):
    """The launch: the id_token signed by the platform, in a form the browser posts to the
    tool. With ``forged`` set, signed by another key than the platform's."""

    forged: str | None = None

    def render_launch_form(self, launch_data: dict, **kwargs: t.Any) -> HTMLResponse:
        fields = "".join(f'<input type="hidden" name="{k}" value="{launch_data[k]}">'
                         for k in ("id_token", "state"))
        return HTMLResponse(f'<form method="post" action="{launch_data["launch_url"]}">'
                            f"{fields}</form>")

    def generate_launch_request(self):
        data = super().generate_launch_request()
        if self.forged:
            import jwt

            claims = jwt.decode(data["id_token"], options={"verify_signature": False})
            header = jwt.get_unverified_header(data["id_token"])
            data["id_token"] = jwt.encode(claims, self.forged, algorithm="RS256",
                                          headers={"kid": header.get("kid")})
        return data


def _launches(app, platform: LtiPlatform) -> None:
    @app.get("/launch")
    def launch(user: str, chapter: str = "", link: str = ""):
        """A launch of ``user``; ``chapter``: as a custom parameter, ``link``: the resource
        link's own target link URI (Canvas's assignment URL)."""
        login = Login(None, platform.conf)
        login.set_lti_message_hint(hint=f"{user}|{chapter}|{link}")
        if link:
            login.set_launch_url(link)
        return login.initiate_login(user)

    @app.get("/authorize")
    def authorize(request: HttpRequest):
        query = dict(request.query_params)
        user, chapter, link = query.get("lti_message_hint", "||").split("|", 2)
        person = next(m for m in platform.storage.members if m["user_id"] == user)
        launch = Launch(PlainRequest({"get_data": query, "form_data": {}}), platform.conf)
        launch.forged = platform.forged_key
        if link:
            launch.set_launch_url(link)
        launch.set_user_data(user, person["roles"], person["name"], person["email"])
        launch.set_resource_link_claim(f"link-{chapter or 'course'}")
        launch.set_launch_context_claim("course-1", context_label="COMMLAB",
                                        context_title="Collective communication")
        if chapter:
            launch.set_custom_parameters_claim({"chapter": chapter})
        launch.set_nrps(f"{platform.base}/memberships")
        return launch.lti_launch()


def _app(platform: LtiPlatform) -> FastAPI:
    app = FastAPI()
    _launches(app, platform)
    _services(app, platform)
    return app


def _services(app, platform: LtiPlatform) -> None:
    """The token grant, AGS and NRPS, each call handled by lti1p3platform's service."""

    async def _gathered(request: HttpRequest) -> PlainRequest:
        body = await request.body()
        json_data = await request.json() if body and "json" in request.headers.get(
            "content-type", "") else None
        return PlainRequest({"method": request.method, "form_data": {},
                             "get_data": dict(request.query_params),
                             "headers": request.headers, "path": request.url.path,
                             "content_type": request.headers.get("content-type"),
                             "json": json_data})

    def _answer(response) -> JSONResponse:
        result = response.result
        if isinstance(result, dict) and "content" in result:
            result = result["content"]
        if response.code >= 400:
            result = {"error": response.message}
        return JSONResponse(result, status_code=response.code, media_type=response.media_type)

    @app.get("/jwks")
    def jwks():
        return platform.conf.get_jwks()

    @app.post("/token")
    async def token(request: HttpRequest):
        form = dict(await request.form())
        platform.token_requests += 1
        try:
            return platform.conf.get_access_token(form)
        except (LtiException, Exception) as exc:  # noqa: BLE001 - the platform's refusal
            return JSONResponse({"error": "invalid_client", "what": type(exc).__name__},
                                status_code=400)

    @app.api_route("/lineitems", methods=["GET", "POST"])
    async def lineitems(request: HttpRequest):
        service = Grades(await _gathered(request), platform.conf, platform.storage)
        handler = (service.handle_get_lineitems if request.method == "GET"
                   else service.handle_create_lineitem)
        return _answer(service.handle_resp(handler))

    @app.post("/lineitems/{number}/scores")
    async def scores(number: str, request: HttpRequest):
        service = Grades(await _gathered(request), platform.conf, platform.storage)
        return _answer(service.handle_resp(service.handle_update_score, line_item_id=number))

    @app.get("/lineitems/{number}/results")
    async def results(number: str, request: HttpRequest):
        service = Grades(await _gathered(request), platform.conf, platform.storage)
        return _answer(service.handle_resp(service.handle_get_results, line_item_id=number))

    @app.get("/memberships")
    async def memberships(request: HttpRequest):
        service = Members(await _gathered(request), platform.conf, platform.storage)
        return _answer(service.handle_resp(service.handle_get_members))


class LtiPlatform:
    """The platform, served in a thread of this process while the ``with`` lasts."""

    def __init__(self, members: list[dict], tool_jwk: dict | None = None):
        self.storage = Storage(members=members,
                               tool_jwks={"keys": [tool_jwk] if tool_jwk else []})
        self.keys = new_key()
        self.token_requests = 0
        self.forged_key: str | None = None  # launches signed with it instead, when set
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        self.conf = PlatformConf(keys=self.keys, storage=self.storage, base=self.base)
        self.conf.get_registration()

    def settings(self, key_file: Path) -> dict[str, str]:
        """The grader's environment for this platform."""
        return {"COMMLAB_LTI_ISSUER": ISSUER, "COMMLAB_LTI_CLIENT_ID": CLIENT_ID,
                "COMMLAB_LTI_DEPLOYMENT_ID": DEPLOYMENT_ID,
                "COMMLAB_LTI_TOKEN_URL": f"{self.base}/token",
                "COMMLAB_LTI_LINEITEMS_URL": f"{self.base}/lineitems",
                "COMMLAB_LTI_MEMBERSHIPS_URL": f"{self.base}/memberships",
                "COMMLAB_LTI_KEY_FILE": str(key_file)}

    def register_tool(self, hub: str) -> None:
        """The hub as the tool: its login initiation URL and its launch URL."""
        registration = self.conf.get_registration()
        registration.set_oidc_login_url(f"{hub}/hub/lti13/oauth_login")
        registration.set_launch_url(f"{hub}/hub")

    def hub_settings(self) -> dict[str, str]:
        """The hub's HUB_LTI_* for this platform."""
        return {"HUB_LTI_ISSUER": ISSUER, "HUB_LTI_CLIENT_ID": CLIENT_ID,
                "HUB_LTI_AUTHORIZE_URL": f"{self.base}/authorize",
                "HUB_LTI_JWKS_URL": f"{self.base}/jwks"}

    def __enter__(self) -> LtiPlatform:
        import uvicorn

        config = uvicorn.Config(_app(self), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._socket]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            assert self._thread.is_alive() and time.monotonic() < deadline, \
                "the LTI platform did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()
