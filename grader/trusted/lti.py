"""The course as an LTI 1.3 tool talking to the LMS's services: its settings, the access token
(OAuth2's client-credentials grant with a JWT signed by the tool's private key), Assignment
and Grade Services (line items, results, scores) and Names and Role Provisioning Services (the
class list).

The settings come from a TOML file (``--config``, default ``grader/lti.toml``) and the
environment, which wins (``COMMLAB_LTI_<KEY>``, e.g. ``COMMLAB_LTI_TOKEN_URL``):

    issuer           the platform's issuer (its ``iss``: https://canvas.instructure.com, a
                     Moodle's own address)
    client_id        the client id the LMS gave the tool (or client_id_file: a file holding it)
    deployment_id    the deployment id (kept for the record; the services do not need it)
    token_url        the LMS's access token URL
    audience         the token request's ``aud`` (default token_url; Moodle and Canvas take it)
    lineitems_url    the course's line items (AGS), as a launch's AGS claim names it
    memberships_url  the course's members (NRPS), as a launch's NRPS claim names it
    key_file         the tool's private RSA key, PEM (the LMS holds its public key)
    key_id           the key's ``kid`` (default its RFC 7638 thumbprint, as ``lti jwk`` prints)
    tag              the line items' tag (default ``commlab``)
    username_claim   the launch claim the hub names students by (default ``sub``): see
                     docs/lms.md

The client id and the key are secrets: no message here holds them, and none of the LMS's
answers is repeated with them in it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import course

DEFAULT_CONFIG = course.ROOT / "grader" / "lti.toml"
KEYS = ("issuer", "client_id", "client_id_file", "deployment_id", "token_url", "audience",
        "lineitems_url", "memberships_url", "key_file", "key_id", "tag", "username_claim")
SCOPES = {
    "lineitem": "https://purl.imsglobal.org/spec/lti-ags/scope/lineitem",
    "result": "https://purl.imsglobal.org/spec/lti-ags/scope/result.readonly",
    "score": "https://purl.imsglobal.org/spec/lti-ags/scope/score",
    "members": "https://purl.imsglobal.org/spec/lti-nrps/scope/contextmembership.readonly",
}
LINEITEM = "application/vnd.ims.lis.v2.lineitem+json"
LINEITEMS = "application/vnd.ims.lis.v2.lineitemcontainer+json"
RESULTS = "application/vnd.ims.lis.v2.resultcontainer+json"
SCORE = "application/vnd.ims.lis.v1.score+json"
MEMBERS = "application/vnd.ims.lti-nrps.v2.membershipcontainer+json"


class LtiError(RuntimeError):
    """The LMS could not be reached, refused, or the settings are incomplete: the message says
    what to check."""


@dataclass
class Settings:
    values: dict[str, str] = field(default_factory=dict)
    source: str = ""  # where they were read: for the messages

    def get(self, key: str, default: str = "") -> str:
        return self.values.get(key, default)

    def need(self, *keys: str) -> None:
        missing = [k for k in keys if not self.get(k)]
        if missing:
            raise LtiError(
                "the LTI settings lack " + ", ".join(missing) + f" ({self.source}): set them "
                "in grader/lti.toml or as " + ", ".join(f"COMMLAB_LTI_{k.upper()}"
                                                       for k in missing)
                + " (docs/lms.md, \"Grades back through LTI\")")

    @property
    def tag(self) -> str:
        return self.get("tag", "commlab")


def read_settings(config: Path | None = None) -> Settings:
    """The settings of ``config`` (default grader/lti.toml, where it exists), then the
    environment's ``COMMLAB_LTI_*``; the client id read from ``client_id_file`` if given."""
    path = config or DEFAULT_CONFIG
    values: dict[str, str] = {}
    sources = []
    if config is not None or path.exists():
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise LtiError(f"cannot read the LTI settings {path} ({exc.strerror})") from exc
        except tomllib.TOMLDecodeError as exc:
            raise LtiError(f"the LTI settings {path} are not TOML ({exc})") from exc
        values.update({k: str(v) for k, v in data.get("lti", data).items() if k in KEYS})
        sources.append(str(path))
    for key in KEYS:
        if os.environ.get(f"COMMLAB_LTI_{key.upper()}"):
            values[key] = os.environ[f"COMMLAB_LTI_{key.upper()}"]
            sources.append(f"COMMLAB_LTI_{key.upper()}")
    if values.get("client_id_file") and not values.get("client_id"):
        try:
            values["client_id"] = Path(values["client_id_file"]).read_text().strip()
        except OSError as exc:
            raise LtiError(f"cannot read the client id file {values['client_id_file']} "
                           f"({exc.strerror})") from exc
    return Settings(values, ", ".join(sources) or "no grader/lti.toml, no COMMLAB_LTI_*")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def private_key(settings: Settings):
    """The tool's private key, from ``key_file``."""
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    settings.need("key_file")
    path = Path(settings.get("key_file"))
    try:
        return load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise LtiError(
            f"cannot read the tool's private key {path} ({exc.strerror}): make one with "
            f"openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out {path}, and "
            "give the LMS its public key (python -m grader lti jwk)") from exc
    except (ValueError, TypeError) as exc:
        raise LtiError(f"{path} holds no unencrypted PEM private key: give the RSA key "
                       "whose public key the LMS holds") from exc


def public_jwk(key, key_id: str = "") -> dict[str, str]:
    """The public JWK of ``key`` (an RSA private key), with its ``kid``: ``key_id`` or the
    RFC 7638 thumbprint."""
    numbers = key.public_key().public_numbers()

    def b64int(n: int) -> str:
        return _b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))

    jwk = {"e": b64int(numbers.e), "kty": "RSA", "n": b64int(numbers.n)}
    thumbprint = _b64(hashlib.sha256(json.dumps(jwk, separators=(",", ":"),
                                                sort_keys=True).encode()).digest())
    return {**jwk, "alg": "RS256", "use": "sig", "kid": key_id or thumbprint}


class Client:
    """The LMS's services, with one access token per set of scopes."""

    def __init__(self, settings: Settings):
        settings.need("client_id", "token_url", "key_file")
        self.settings = settings
        self._key = private_key(settings)
        self._tokens: dict[str, str] = {}

    def _assertion(self) -> str:
        import jwt

        client_id = self.settings.get("client_id")
        now = int(time.time())
        claims = {"iss": client_id, "sub": client_id, "iat": now, "exp": now + 300,
                  "jti": uuid.uuid4().hex,
                  "aud": self.settings.get("audience") or self.settings.get("token_url")}
        kid = public_jwk(self._key, self.settings.get("key_id"))["kid"]
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": kid})

    def token(self, *scopes: str) -> str:
        wanted = " ".join(SCOPES[s] for s in scopes)
        if wanted not in self._tokens:
            form = {"grant_type": "client_credentials",
                    "client_assertion_type":
                        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                    "client_assertion": self._assertion(), "scope": wanted}
            answer, _ = self._call("POST", self.settings.get("token_url"), form=form,
                                   what="an access token")
            if not isinstance(answer, dict) or not answer.get("access_token"):
                raise LtiError("the LMS's token URL answered without an access token: check "
                               "token_url and that the tool's services are turned on")
            self._tokens[wanted] = answer["access_token"]
        return self._tokens[wanted]

    def call(self, method: str, url: str, scopes: tuple[str, ...], *, accept: str,
             body: dict | None = None, content_type: str = "", what: str = ""):
        """The LMS's JSON answer to ``method url`` and its headers."""
        return self._call(method, url, token=self.token(*scopes), accept=accept, body=body,
                          content_type=content_type, what=what)

    def _redact(self, text: str) -> str:
        client_id = self.settings.get("client_id")
        return text.replace(client_id, "<client id>") if client_id else text

    def _call(self, method: str, url: str, *, token: str = "", accept: str = "",
              body: dict | None = None, content_type: str = "", form: dict | None = None,
              what: str = ""):
        headers = {"Accept": accept or "application/json"}
        data = None
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                text = answer.read().decode("utf-8", errors="replace")
                found = dict(answer.headers)
        except urllib.error.HTTPError as exc:
            said = self._redact(exc.read().decode("utf-8", errors="replace")[:300])
            raise LtiError(f"the LMS refused {what or method + ' ' + url} ({exc.code} "
                           f"{exc.reason}: {said.strip()}): check the tool's settings in the "
                           "LMS (its services, its public key) and grader/lti.toml") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise LtiError(f"cannot reach the LMS at {url} ({reason}): check the address "
                           "and the network") from None
        try:
            return (json.loads(text) if text.strip() else None), found
        except json.JSONDecodeError:
            raise LtiError(f"the LMS answered {what or url} with something other than JSON: "
                           "check the address") from None

    def pages(self, url: str, scopes: tuple[str, ...], accept: str, key: str | None):
        """Every item of a paged container: ``key`` of each page's object (or each page, a
        list), following the ``Link: <...>; rel="next"`` header or a ``next`` field."""
        items, seen = [], set()
        while url and url not in seen:
            seen.add(url)
            page, headers = self.call("GET", url, scopes, accept=accept)
            items += (page.get(key, []) if key and isinstance(page, dict) else page or [])
            url = _next_link(headers.get("Link") or headers.get("link") or "")
            if not url and isinstance(page, dict):
                url = page.get("next") or ""
        return items


def _next_link(header: str) -> str:
    for part in header.split(","):
        if 'rel="next"' in part or "rel=next" in part:
            return part.split(";")[0].strip().strip("<>")
    return ""


def service_url(url: str, tail: str, query: dict[str, str] | None = None) -> str:
    """``url`` with ``/tail`` added to its path (a Moodle line item's ``?type_id=`` kept) and
    ``query`` to its query."""
    parts = urllib.parse.urlsplit(url)
    path = parts.path.rstrip("/") + (f"/{tail}" if tail else "")
    pairs = urllib.parse.parse_qsl(parts.query) + list((query or {}).items())
    return urllib.parse.urlunsplit(parts._replace(path=path,
                                                  query=urllib.parse.urlencode(pairs)))


def members(client: Client) -> list[dict]:
    """The course's members as NRPS lists them."""
    client.settings.need("memberships_url")
    return client.pages(client.settings.get("memberships_url"), ("members",), MEMBERS,
                        "members")


def line_items(client: Client) -> list[dict]:
    """The course's line items that carry the course's tag."""
    client.settings.need("lineitems_url")
    url = service_url(client.settings.get("lineitems_url"), "", {"tag": client.settings.tag})
    items = client.pages(url, ("lineitem",), LINEITEMS, None)
    return [item for item in items if item.get("tag") == client.settings.tag]


def create_line_item(client: Client, chapter: str, maximum: float) -> dict:
    body = {"label": chapter, "scoreMaximum": maximum, "resourceId": chapter,
            "tag": client.settings.tag}
    item, _ = client.call("POST", client.settings.get("lineitems_url"), ("lineitem",),
                          accept=LINEITEM, body=body, content_type=LINEITEM,
                          what=f"a new line item for {chapter}")
    return item


def results(client: Client, item: dict) -> dict[str, dict]:
    """user id -> the line item's result of that user."""
    found = client.pages(service_url(item["id"], "results"), ("result",), RESULTS, None)
    return {str(r.get("userId")): r for r in found}


def post_score(client: Client, item: dict, score: dict) -> None:
    client.call("POST", service_url(item["id"], "scores"), ("score",), accept="application/json",
                body=score, content_type=SCORE, what=f"a score for {item.get('label')}")
