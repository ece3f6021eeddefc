"""hub/values.yaml, the course's part of a Zero to JupyterHub configuration, as helm renders it:
merged over the chart's default values (helm's coalescing: maps merged key by key, a null
deleting the default's key, anything else replacing it), then checked against the chart's own
values schema, unmodified (its `required` lists kept), for the chart version the values name.
Both are chart 4.4.0's (tests/data/; BSD 3-Clause, tests/data/z2jh-LICENSE): jupyterhub/values.yaml
at tag 4.4.0, as in the repository (packaging writes the release's image tags where it says
"set-by-chartpress"; strings either way), and values.schema.json as the chart ships it, made from
values.schema.yaml by the chart's own tools/generate-json-schema.py, which drops the descriptions.
`helm template` itself is not run: no helm binary comes from the registries this machine
reaches (PyPI, npm, Debian 12's packages).

Then the values against the course: the image's JupyterHub version, the exchange the image's
nbgrader configuration reads, the settings the one-server hub gives each server, and the
instructor's half (hub/formgrader.yaml). No cluster runs them here."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

import jsonschema
import pytest
import yaml

from grader.trusted.exchange_feedback import OWN_FEEDBACK
from support.course_copy import ROOT

VALUES = ROOT / "hub" / "values.yaml"
SCHEMA = ROOT / "tests" / "data" / "z2jh-4.4.0-values.schema.json"
CHART_DEFAULTS = ROOT / "tests" / "data" / "z2jh-4.4.0-values.yaml"


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def coalesced(defaults: dict, values: dict) -> dict:
    """``values`` over ``defaults`` as helm merges a release's values with its chart's: a map
    into a map key by key, a null deleting the key, anything else (lists too) replacing it."""
    merged = dict(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesced(merged[key], value)
        else:
            merged[key] = value
    return merged


def _errors(values: dict) -> list[str]:
    """What the chart's schema finds wrong in ``values`` as helm would render them."""
    schema = json.loads(SCHEMA.read_text())
    rendered = coalesced(yaml.safe_load(CHART_DEFAULTS.read_text()), values)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
            for e in jsonschema.Draft7Validator(schema).iter_errors(rendered)]


def test_values_fit_the_charts_schema(values):
    assert _errors(values) == []


def test_the_schema_is_the_charts_own_with_what_it_requires(values):
    """Its required keys kept: the values alone, not merged with the chart's defaults, lack
    what the chart requires; so does a rendering whose required key a null deleted."""
    schema = json.loads(SCHEMA.read_text())
    assert "hub" in schema["required"] and "baseUrl" in schema["properties"]["hub"]["required"]
    alone = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(values)]
    assert "'proxy' is a required property" in alone
    deleted = copy.deepcopy(values)
    deleted["hub"]["baseUrl"] = None
    assert "hub: 'baseUrl' is a required property" in _errors(deleted)


def test_rendering_merges_as_helm_does():
    defaults = {"a": {"b": 1, "c": [1, 2], "d": {"e": 1}}, "f": 1}
    assert coalesced(defaults, {"a": {"c": [3], "d": None}, "g": 2}) == \
        {"a": {"b": 1, "c": [3]}, "f": 1, "g": 2}
    assert defaults == {"a": {"b": 1, "c": [1, 2], "d": {"e": 1}}, "f": 1}  # left as it was


def test_the_schema_check_refuses_what_the_chart_would(values):
    wrong = copy.deepcopy(values)
    wrong["singleuser"]["memory"]["gurantee"] = "1G"  # a misspelt key
    wrong["singleuser"]["uid"] = "1000"  # a string where the chart takes a number
    errors = _errors(wrong)
    assert any("gurantee" in e for e in errors) and any(e.startswith("singleuser.uid") for e in
                                                         errors), errors


def test_values_name_the_chart_version_of_the_schema_and_its_jupyterhub(values):
    header = VALUES.read_text().split("\n\n")[0]
    assert "chart version 4.4.0 (JupyterHub 5.5.0" in header
    assert "--version 4.4.0" in header and "--build-arg JUPYTERHUB=5.5.0" in header
    assert "4.4.0" in SCHEMA.name and "4.4.0" in CHART_DEFAULTS.name
    image = values["singleuser"]["image"]
    assert image["tag"] == "5.5.0"
    for init in values["singleuser"]["initContainers"]:
        assert init["image"] == f"{image['name']}:{image['tag']}"


def test_values_give_the_image_what_it_reads(values):
    user = values["singleuser"]
    assert (user["uid"], user["fsGid"]) == (1000, 100)
    assert user["cmd"] == "lab"  # the image's start (helpers/scripts/image_start.sh)
    env = user["extraEnv"]
    image_config = (ROOT / "helpers" / "jupyter" / "nbgrader_config.py").read_text()
    assert f'"NBGRADER_EXCHANGE", "{env["NBGRADER_EXCHANGE"]}"' in image_config
    mounts = {m["mountPath"]: m for m in user["storage"]["extraVolumeMounts"]}
    assert mounts["/dev/shm"]["name"] == "shm"
    course = f"{env['NBGRADER_EXCHANGE']}/{env['COMMLAB_COURSE_ID']}"
    assert mounts[f"{course}/outbound"]["readOnly"] and mounts[f"{course}/feedback"]["readOnly"]
    own = mounts[f"{course}/inbound"]
    assert own["subPath"] == f"{env['COMMLAB_COURSE_ID']}/inbound/{{unescaped_username}}"
    assert not own.get("readOnly")
    # her feedback is her own pages' folder, where make release-feedback files them
    assert mounts[f"{course}/feedback"]["subPath"] == \
        f"{env['COMMLAB_COURSE_ID']}/{OWN_FEEDBACK}/{{unescaped_username}}"
    # the same limits as the one-server hub gives each server
    config = (ROOT / "hub" / "jupyterhub_config.py").read_text()
    assert re.search(rf'HUB_MEM_LIMIT", "{user["memory"]["limit"]}"', config)
    assert re.search(rf'HUB_CPU_LIMIT", "{user["cpu"]["limit"]}"', config)
    gpus = [p for p in user["profileList"] if "kubespawner_override" in p]
    assert gpus[0]["kubespawner_override"]["extra_resource_limits"] == {"nvidia.com/gpu": "4"}


@pytest.mark.parametrize("login", ["eve`touch${IFS}PWNED`", "eve$(touch PWNED)",
                                   'eve"; touch PWNED; "', "alice"])
def test_init_containers_take_the_login_as_data(values, tmp_path, login):
    """Each init container's command as KubeSpawner renders it (the login put for
    {unescaped_username}) and as the container runtime runs it (no shell, one argument a
    word): a login with a command in it makes a folder of that name and runs nothing."""
    exchange, cwd = tmp_path / "exchange", tmp_path / "cwd"
    for folder in ("inbound", OWN_FEEDBACK):
        (exchange / "commlab" / folder).mkdir(parents=True)
    cwd.mkdir()
    for init, folder, mode in zip(values["singleuser"]["initContainers"],
                                  ("inbound", OWN_FEEDBACK), (0o733, 0o711), strict=True):
        mount = init["volumeMounts"][0]["mountPath"]
        command = [word.replace("{unescaped_username}", login).replace(mount, str(exchange))
                   for word in init["command"]]
        subprocess.run(command, cwd=cwd, check=True, timeout=30)
        made = exchange / "commlab" / folder / login
        assert made.is_dir() and (made.stat().st_mode & 0o777) == mode, folder
    assert [p.name for p in tmp_path.rglob("PWNED")] == []


# --- the exchange on Kubernetes: its volume, its layout, who makes what -------------------------

EXCHANGE_VOLUME = ROOT / "hub" / "exchange-volume.yaml"


@pytest.fixture(scope="module")
def exchange_volume() -> dict:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(EXCHANGE_VOLUME.read_text())}


def test_the_exchange_volume_is_the_one_the_values_mount_and_the_course_owns_it(
        values, exchange_volume):
    claim, job = exchange_volume["PersistentVolumeClaim"], exchange_volume["Job"]
    mounted = {v["name"]: v for v in values["singleuser"]["storage"]["extraVolumes"]}
    assert mounted["exchange"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] \
        == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    # the Job and the init container are the course's account: not root (NFS's root_squash),
    # not the students' uid (who would own the exchange)
    layout = job["spec"]["template"]["spec"]["securityContext"]
    assert layout["runAsUser"] not in (0, values["singleuser"]["uid"]) and layout["runAsNonRoot"]
    for init in values["singleuser"]["initContainers"]:
        context = init["securityContext"]
        assert context["runAsUser"] == layout["runAsUser"] and context["runAsNonRoot"]
        assert not context["allowPrivilegeEscalation"] and context["capabilities"]["drop"] == \
            ["ALL"]


def _as(uid: int, command: list[str], **kwargs) -> subprocess.CompletedProcess:
    def become():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return subprocess.run(command, preexec_fn=become, capture_output=True, text=True,
                          timeout=30, **kwargs)


@pytest.mark.skipif(os.geteuid() != 0, reason="takes the course's and a student's uids (root)")
def test_the_exchange_laid_out_and_each_inbound_made_by_the_course_account(values,
                                                                            exchange_volume):
    """The Job's and the init container's commands, run as their uid on a folder that uid may
    write (an NFS export of its own): a student (uid 1000) hands in into her folder, cannot
    list the inbound, another's folder, the feedback or her own feedback folder (her server
    finds a page by its name); the course's account lists hers."""
    job = exchange_volume["Job"]["spec"]["template"]["spec"]
    course_uid, student_uid = job["securityContext"]["runAsUser"], values["singleuser"]["uid"]
    top = Path(tempfile.mkdtemp(prefix="exchange-"))
    try:
        top.chmod(0o755)
        os.chown(top, course_uid, course_uid)
        layout = [w.replace("/exchange", str(top)) for w in job["containers"][0]["command"]]
        assert _as(course_uid, layout).returncode == 0
        for login in ("alice", "bob"):
            for init in values["singleuser"]["initContainers"]:
                made = [w.replace("{unescaped_username}", login).replace("/exchange", str(top))
                        for w in init["command"]]
                done = _as(course_uid, made)
                assert done.returncode == 0, done.stderr
        inbound = top / "commlab" / "inbound"
        entry = inbound / "alice" / "alice+01_broadcast+2026-12-01 10:00:00.0 UTC+r1"
        assert _as(student_uid, ["mkdir", str(entry)]).returncode == 0
        pages = top / "commlab" / OWN_FEEDBACK
        for folder in (inbound, inbound / "bob", top / "commlab" / "feedback", pages,
                       pages / "alice"):
            refused = _as(student_uid, ["ls", str(folder)])
            assert refused.returncode != 0 and "Permission denied" in refused.stderr, folder
        listed = _as(course_uid, ["ls", str(inbound / "alice")])
        assert listed.stdout.strip() == entry.name
    finally:
        shutil.rmtree(top)


def test_the_gpu_profile_is_offered_to_its_group_only(values):
    """hub.extraConfig's hook, run as the chart runs it (after the chart set the profiles)."""
    from traitlets.config import Config

    config = Config()
    config.KubeSpawner.profile_list = values["singleuser"]["profileList"]
    for code in values["hub"]["extraConfig"].values():
        exec(code, {"c": config})
    offer = config.KubeSpawner.profile_list

    def spawner(*groups):
        user = types.SimpleNamespace(groups=[types.SimpleNamespace(name=g) for g in groups])
        return types.SimpleNamespace(user=user)

    def names(profiles):
        return [p["display_name"].split(":")[0] for p in profiles]

    assert names(offer(spawner())) == ["CPU"]
    assert names(offer(spawner("formgrade-commlab"))) == ["CPU"]
    assert names(offer(spawner("commlab-gpu"))) == ["CPU", "4 GPUs"]


# --- the instructor's half on Kubernetes: Formgrader as a hub service ---------------------------

FORMGRADER = ROOT / "hub" / "formgrader.yaml"


@pytest.fixture(scope="module")
def formgrader() -> dict:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(FORMGRADER.read_text())}


def test_formgrader_is_the_values_service_at_the_manifests_address(values, formgrader):
    (key, service), = values["hub"]["services"].items()
    port = formgrader["Service"]["spec"]["ports"][0]
    assert service["url"] == f"http://{formgrader['Service']['metadata']['name']}:{port['port']}"
    pod = formgrader["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert f"--ServerApp.port={named[port['targetPort']]}" in container["command"]
    assert formgrader["Service"]["spec"]["selector"].items() <= \
        formgrader["Deployment"]["spec"]["template"]["metadata"]["labels"].items()
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JUPYTERHUB_SERVICE_NAME"] == key
    assert env["JUPYTERHUB_SERVICE_PREFIX"] == f"/services/{key}/"
    assert env["JUPYTERHUB_CLIENT_ID"] == f"service-{key}"
    assert json.loads(env["JUPYTERHUB_OAUTH_ACCESS_SCOPES"]) == [f"access:services!service={key}"]
    token = next(e for e in container["env"] if e["name"] == "JUPYTERHUB_API_TOKEN")
    # the chart's Secret and key for a service's token (templates/hub/secret.yaml)
    assert token["valueFrom"]["secretKeyRef"] == {"name": "hub",
                                                  "key": f"hub.services.{key}.apiToken"}
    assert "apiToken" not in service and "api_token" not in service  # nothing secret here


def test_formgraders_group_may_open_it_and_nothing_more(values):
    (service,) = values["hub"]["services"]
    (name, role), = values["hub"]["loadRoles"].items()
    assert role["scopes"] == [f"access:services!service={service}"]
    assert role["groups"] == [name] and set(role) == {"groups", "scopes"}
    # graders are not the GPU group, nor admins (the values make no one an admin)
    assert name != "commlab-gpu" and "admin_users" not in values["hub"]["config"]["Authenticator"]


def test_formgraders_pod_is_the_course_account_with_the_exchange_whole(values, formgrader,
                                                                        exchange_volume):
    template = formgrader["Deployment"]["spec"]["template"]
    pod = template["spec"]
    layout = exchange_volume["Job"]["spec"]["template"]["spec"]["securityContext"]
    assert pod["securityContext"]["runAsUser"] == layout["runAsUser"] != values["singleuser"]["uid"]
    assert pod["securityContext"]["runAsNonRoot"]
    for container in (*pod["initContainers"], *pod["containers"]):
        assert not container["securityContext"]["allowPrivilegeEscalation"]
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # the chart's network policy admits pods with this label to the hub's API
    assert template["metadata"]["labels"]["hub.jupyter.org/network-access-hub"] == "true"
    claims = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in
              pod["volumes"]}
    container = pod["containers"][0]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    student = values["singleuser"]["extraEnv"]
    assert claims["exchange"] == exchange_volume["PersistentVolumeClaim"]["metadata"]["name"]
    assert mounts["exchange"]["mountPath"] == env["NBGRADER_EXCHANGE"] == \
        student["NBGRADER_EXCHANGE"]
    assert "subPath" not in mounts["exchange"] and not mounts["exchange"].get("readOnly")
    assert env["COMMLAB_COURSE_ID"] == student["COMMLAB_COURSE_ID"]
    # the course on its own volume, one pod at a time (SQLite, ReadWriteOnce)
    assert claims["grading"] == formgrader["PersistentVolumeClaim"]["metadata"]["name"]
    assert formgrader["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert formgrader["Deployment"]["spec"]["strategy"]["type"] == "Recreate"
    course = container["workingDir"]
    assert course.startswith(mounts["grading"]["mountPath"] + "/")
    assert env["JUPYTER_CONFIG_PATH"] == f"{course}/grader"
    assert f"--ServerApp.root_dir={course}" in container["command"]
    assert "--ServerApp.default_url=/formgrader" in container["command"]


def test_formgraders_image_is_the_instructors_built_for_its_uid(values, formgrader):
    pod = formgrader["Deployment"]["spec"]["template"]["spec"]
    student = values["singleuser"]["image"]
    images = {c["image"] for c in (*pod["initContainers"], *pod["containers"])}
    (image,) = images
    assert image.endswith(f"/commlab-instructor:{student['tag']}")
    header = FORMGRADER.read_text().split("\napiVersion")[0]
    uid = pod["securityContext"]["runAsUser"]
    assert f"--target instructor --build-arg UID={uid} --build-arg GID={uid}" in header
    assert f"--build-arg JUPYTERHUB={student['tag']} -t {image} ." in \
        re.sub(r"\\\n#\s*", "", header)
