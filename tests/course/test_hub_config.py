"""hub/jupyterhub_config.py, the one-server hub's configuration, loaded as JupyterHub loads it
(a ``get_config`` that gives a traitlets Config): the logins it takes are data (the pattern
JupyterHub's own Authenticator checks, the same as hub/values.yaml's), and it refuses a course
account that shares the students' uid (who would then own the exchange's feedback folder)."""

from __future__ import annotations

import configparser
import os
import re
import runpy

import pytest
import yaml
from traitlets.config import Config

from support.course_copy import ROOT

CONFIG = ROOT / "hub" / "jupyterhub_config.py"
# logins that would run a command if a shell ever saw them, or escape a folder, or clash with
# nbgrader's names for submissions
HOSTILE = ["eve`touch${IFS}PWNED`", "eve$(touch PWNED)", 'eve"; touch PWNED; "', "eve touch",
           "../eve", "alice+ml@uni.edu", "eve*", "-rf", ".eve", "eve\n", "eve'"]
FINE = ["alice", "jose.garcia@uni.es", "josé.garcía", "张伟", "s1234567", "a_b-c"]


def _load(tmp_path, monkeypatch, roster: str, **settings: str) -> Config:
    (tmp_path / "roster.txt").write_text(roster)
    env = {"HUB_STUDENTS": str(tmp_path / "roster.txt"), "HUB_INSTRUCTORS": "ines",
           "HUB_PASSWORD": "a-workshop", "HUB_ADMIN_PASSWORD": "x" * 32,
           "HUB_EXCHANGE": str(tmp_path / "exchange"), "HUB_DATA": str(tmp_path / "data"),
           **settings}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = Config()
    runpy.run_path(str(CONFIG), init_globals={"get_config": lambda: config,
                                              "load_subconfig": lambda path: None})
    return config


def test_the_hub_takes_the_logins_of_its_pattern_only(tmp_path, monkeypatch):
    from jupyterhub.auth import Authenticator

    config = _load(tmp_path, monkeypatch, "alice\n# a comment\nbob\n")
    pattern = config.Authenticator.username_pattern
    values = yaml.safe_load((ROOT / "hub" / "values.yaml").read_text())
    assert values["hub"]["config"]["Authenticator"]["username_pattern"] == pattern
    authenticator = Authenticator(username_pattern=pattern)
    assert [n for n in HOSTILE if authenticator.validate_username(n)] == []
    assert [n for n in FINE if not authenticator.validate_username(n)] == []


def test_a_roster_line_outside_the_pattern_is_named_before_the_hub_starts(tmp_path,
                                                                           monkeypatch):
    with pytest.raises(SystemExit, match=r"'alice\+ml@uni.edu', 'eve`id`': a login holds "
                                         "letters, digits"):
        _load(tmp_path, monkeypatch, "bob\nalice+ml@uni.edu\neve`id`\n")


def test_graders_open_formgrader_without_being_admins(tmp_path, monkeypatch):
    config = _load(tmp_path, monkeypatch, "alice\n", HUB_PASSWORD="", HUB_ADMIN_PASSWORD="",
                   HUB_CONFIG=str(tmp_path / "institution.py"), HUB_GRADERS="tara, Tom")
    assert config.Authenticator.admin_users == {"ines"}
    assert config.Authenticator.allowed_users == {"alice", "ines", "tara", "tom"}
    (group, members), = config.JupyterHub.load_groups.items()
    assert members == {"users": ["ines", "tara", "tom"]}
    (role,) = [r for r in config.JupyterHub.load_roles if r["name"] == group]
    formgrader = config.JupyterHub.services[0]["name"]
    assert role["groups"] == [group] and role["scopes"] == [
        f"access:services!service={formgrader}"]


def test_graders_are_refused_with_the_students_shared_password(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match="any student who knows it could log in as a grader"):
        _load(tmp_path, monkeypatch, "alice\n", HUB_GRADERS="tara")


def test_the_course_account_is_never_the_students_uid(tmp_path, monkeypatch):
    """The hub run as root here: root's uid made the students' (HUB_STUDENT_UID=0) is refused,
    by HUB_COURSE_USER and as the hub's own user; the default (1000) is not root's."""
    with pytest.raises(SystemExit, match="HUB_COURSE_USER=root has uid 0, the students' own"):
        _load(tmp_path, monkeypatch, "alice\n", HUB_COURSE_USER="root", HUB_STUDENT_UID="0")
    monkeypatch.delenv("HUB_COURSE_USER")
    if os.geteuid() == 0:
        with pytest.raises(SystemExit, match="the hub's own user has uid 0"):
            _load(tmp_path, monkeypatch, "alice\n", HUB_STUDENT_UID="0")
    with pytest.raises(SystemExit, match="HUB_COURSE_USER=nobody-here: no such user"):
        _load(tmp_path, monkeypatch, "alice\n", HUB_COURSE_USER="nobody-here")
    monkeypatch.delenv("HUB_COURSE_USER")
    config = _load(tmp_path, monkeypatch, "alice\n", HUB_STUDENT_UID="1000")
    assert config.Authenticator.allowed_users == {"alice", "ines"}


def test_the_systemd_unit_runs_make_hub_in_the_course_with_the_settings_the_docs_name():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # systemd's keys are case-sensitive
    unit.read_string((ROOT / "hub" / "commlab-hub.service").read_text())
    service = unit["Service"]
    assert service["ExecStart"] == "/usr/bin/make hub"
    assert (service["WorkingDirectory"], service["EnvironmentFile"]) == (
        "/opt/commlab", "/etc/commlab-hub.env")
    assert service["Restart"] == "on-failure"
    assert "docker.service" in unit["Unit"]["Requires"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    docs = (ROOT / "docs" / "hub.md").read_text()
    assert "hub/commlab-hub.service" in docs and "/etc/commlab-hub.env" in docs
    # every setting the unit's comment names is one hub/jupyterhub_config.py reads
    named = set(re.findall(r"HUB_[A-Z_]+", (ROOT / "hub" / "commlab-hub.service").read_text()))
    config = (ROOT / "hub" / "jupyterhub_config.py").read_text()
    assert named and all(f'"{name}"' in config for name in named), named


def test_launches_from_the_lms_need_no_roster_and_no_shared_password(tmp_path, monkeypatch):
    lti = {"HUB_LTI_ISSUER": "https://lms.example.edu", "HUB_LTI_CLIENT_ID": "10000000000042",
           "HUB_LTI_AUTHORIZE_URL": "https://lms.example.edu/api/lti/authorize_redirect",
           "HUB_LTI_JWKS_URL": "https://lms.example.edu/api/lti/security/jwks"}
    with pytest.raises(SystemExit, match="choose one way to log in"):
        _load(tmp_path, monkeypatch, "alice\n", **lti)
    config = _load(tmp_path, monkeypatch, "", HUB_STUDENTS="", HUB_INSTRUCTORS="",
                   HUB_PASSWORD="", HUB_ADMIN_PASSWORD="", **lti)
    assert config.JupyterHub.authenticator_class.__name__ == "CourseLTI13Authenticator"
    assert config.Authenticator.allow_all is True
    settings = config.CourseLTI13Authenticator
    assert (settings.username_key, settings.client_id) == ("sub", {"10000000000042"})
    assert "01_broadcast" in settings.chapters
