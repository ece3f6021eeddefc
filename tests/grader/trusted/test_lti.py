"""The LTI client against a real platform (lti1p3platform over HTTP): the access token needs a
JWT signed with the key the LMS holds, the class list is read through NRPS, the settings come
from grader/lti.toml or the environment, and every refusal is said without the client id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from grader.trusted import lti
from support.lti_platform import CLIENT_ID, INSTRUCTOR, LtiPlatform, member, new_key

ROOT = Path(__file__).resolve().parents[3]


def _key(folder: Path, name: str = "tool.pem") -> tuple[Path, dict]:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    private, _ = new_key()
    (folder / name).write_text(private)
    return folder / name, lti.public_jwk(load_pem_private_key(private.encode(), None))


def _grader(*args: str, env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COMMLAB_LTI_")}
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=120, env={**clean, **env})


def test_the_roster_reads_the_learners_with_a_token_the_tool_signed(tmp_path):
    key_file, jwk = _key(tmp_path)
    members = [member("U-1", "Ann Lee"), member("u-2", "Tia Teach", INSTRUCTOR)]
    with LtiPlatform(members, jwk) as platform:
        done = _grader("lti", "roster", env=platform.settings(key_file))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Username,Full name,Email address,LTI user id",
                                        "u-1,Ann Lee,ann@example.edu,U-1"]
    assert platform.token_requests == 1


def test_a_key_the_lms_does_not_hold_gets_no_token(tmp_path):
    _, jwk = _key(tmp_path)
    other, _ = _key(tmp_path, "other.pem")
    with LtiPlatform([member("u-1", "Ann Lee")], jwk) as platform:
        done = _grader("lti", "roster", env=platform.settings(other))
    assert done.returncode == 2
    assert "error: the LMS refused an access token (400" in done.stderr
    assert "its public key" in done.stderr
    assert CLIENT_ID not in done.stdout + done.stderr


def test_missing_settings_are_named_with_where_to_set_them(tmp_path):
    done = _grader("lti", "roster", "--config", str(tmp_path / "none.toml"), env={})
    assert done.returncode == 2
    assert "cannot read the LTI settings" in done.stderr
    (tmp_path / "lti.toml").write_text('[lti]\ntoken_url = "http://127.0.0.1:9/token"\n')
    done = _grader("lti", "roster", "--config", str(tmp_path / "lti.toml"), env={})
    assert "the LTI settings lack client_id, key_file" in done.stderr
    assert "COMMLAB_LTI_CLIENT_ID, COMMLAB_LTI_KEY_FILE" in done.stderr


def test_jwk_prints_the_public_key_the_platform_checks_the_token_with(tmp_path):
    key_file, jwk = _key(tmp_path)
    done = _grader("lti", "jwk", env={"COMMLAB_LTI_KEY_FILE": str(key_file)})
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed == jwk and printed["kid"] and "d" not in printed
    assert "PRIVATE" not in done.stdout


def test_service_urls_keep_moodles_query():
    assert lti.service_url("https://m.edu/mod/lti/services.php/2/lineitems/7/lineitem?type_id=3",
                           "scores") == \
        "https://m.edu/mod/lti/services.php/2/lineitems/7/lineitem/scores?type_id=3"
