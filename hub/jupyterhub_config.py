"""A JupyterHub for a class taking the course, on one server with Docker or podman (docs/hub.md,
"Teaching a class on a JupyterHub"). `make hub` starts it with this file; every setting comes
from the environment (make's variables of the same names):

HUB_URL             where students open the hub (default http://:8000: every address, port 8000;
                    put a TLS proxy in front of it, or see JupyterHub's ssl_cert/ssl_key)
HUB_STUDENTS        the roster: one login name a line (`#` comments), the same file `make grade`
                    takes as --roster; only they and HUB_INSTRUCTORS may log in
HUB_INSTRUCTORS     login names of the instructors and graders, comma-separated: hub admins, and
                    the group that may open the course's Formgrader
HUB_GRADERS         login names of graders who are not admins (teaching assistants), comma-
                    separated: they may open the course's Formgrader and nothing more. Only
                    with your institution's login (HUB_CONFIG): under HUB_PASSWORD any student
                    could log in as one
HUB_PASSWORD        a password shared by the students (8 characters or more), and
HUB_ADMIN_PASSWORD  the instructors' own (32 or more): JupyterHub's shared-password login, for
                    a workshop. For a term, log in through your institution instead: HUB_CONFIG
HUB_CONFIG          a configuration file of your own, read last (an authenticator, limits)
HUB_LTI_ISSUER      log in through the LMS, LTI 1.3 (docs/lms.md; hub/lti_login.py): the
                    platform's issuer, with HUB_LTI_AUTHORIZE_URL (its OIDC authorization
                    endpoint), HUB_LTI_JWKS_URL (its public keys) and HUB_LTI_CLIENT_ID (or
                    HUB_LTI_CLIENT_ID_FILE, a file holding it). HUB_LTI_USERNAME_KEY: the claim
                    that names students (default sub, the LMS's stable id of the person). The
                    LMS's Instructor role makes a hub admin, TeachingAssistant a grader;
                    HUB_STUDENTS and HUB_INSTRUCTORS are then optional: without HUB_STUDENTS,
                    whoever the LMS launches may log in
HUB_IMAGE           the students' image (default commlab-hub), built as docs/hub.md says
HUB_DOCKER          the container engine's API (default unix:///var/run/docker.sock; podman's:
                    unix:///run/podman/podman.sock after `systemctl enable --now podman.socket`)
HUB_NETWORK         the containers' network (default bridge)
HUB_CONNECT_IP      the address at which containers reach this server (default 172.17.0.1, Docker's
                    bridge; rootful podman's is 10.88.0.1); the hub's API listens there
HUB_API_IP          where the hub's API listens instead, when the containers' route to it is
                    another address (slirp4netns reaches the host's 127.0.0.1 as 10.0.2.2)
HUB_EXCHANGE        nbgrader's exchange on this server (default /srv/nbgrader/exchange)
HUB_COURSE          the course's folder on this server, where Formgrader runs (make: the checkout)
HUB_COURSE_ID       nbgrader's course id (default commlab)
HUB_COURSE_USER     the system user Formgrader runs as (default: the hub's own user); not the
                    students' uid, or every student would own the exchange
HUB_STUDENT_UID     the uid of the students' containers (default 1000, the image's jovyan)
HUB_DATA            the hub's database and cookie secret (default build/hub-data)
HUB_MEM_LIMIT       memory of one student's server (default 3G), HUB_CPU_LIMIT its CPUs (2),
HUB_SHM_SIZE        its /dev/shm (1g), HUB_CULL_AFTER seconds idle before it is stopped (3600)
HUB_API_PORT, HUB_PROXY_API_PORT, HUB_FORMGRADER_PORT  ports on this server (8081, 8001, 9881)

Each student's server is a container of the course's image (uid 1000, jovyan) with a volume for
the home, the exchange's released chapters and her own feedback pages read-only, and a folder
of the exchange's inbound of her own, chosen by the hub from her login: whatever a student
claims in a submission, it lands in her folder, and the grader reads her identity from it
(grader/intake/exchange.py). Formgrader runs as a hub service in the course's folder, with the
course's environment (.venv), for HUB_INSTRUCTORS (hub admins) and HUB_GRADERS (not admins).
"""

import os
import re
import stat
import sys
from pathlib import Path

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file


def setting(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, "")
    if value:
        return value
    if default is None:
        raise SystemExit(f"jupyterhub_config.py: set {name} (docs/hub.md, \"Teaching a class on "
                         "a JupyterHub\"; hub/jupyterhub_config.py lists every setting)")
    return default


COURSE = Path(setting("HUB_COURSE", str(Path(__file__).resolve().parents[1])))
COURSE_ID = setting("HUB_COURSE_ID", "commlab")
EXCHANGE = Path(setting("HUB_EXCHANGE", "/srv/nbgrader/exchange"))
DATA = Path(setting("HUB_DATA", str(COURSE / "build" / "hub-data")))
IMAGE = setting("HUB_IMAGE", "commlab-hub")
CONNECT_IP = setting("HUB_CONNECT_IP", "172.17.0.1")
# inside every student's container
EXCHANGE_INSIDE = "/srv/nbgrader/exchange"
GRADERS = f"formgrade-{COURSE_ID}"
FORMGRADER = f"formgrader-{COURSE_ID}"


def names(text: str) -> set[str]:
    return {n.strip().lower() for n in text.replace(",", "\n").splitlines()
            if n.strip() and not n.strip().startswith("#")}


# The logins the course takes: letters (any script), digits and _ . @ -, first a letter or
# digit. A login names a folder of the exchange and a container, so it is data, never a word
# of a command: no quote, space, $, ` or /, and no + or * (nbgrader's submit refuses them).
# hub/values.yaml says the same; match() with \Z, so no trailing newline slips through.
LOGIN_PATTERN = r"^\w[\w.@-]*\Z"
LTI = bool(os.environ.get("HUB_LTI_ISSUER"))
students = (names(Path(setting("HUB_STUDENTS")).read_text())
            if os.environ.get("HUB_STUDENTS") or not LTI else set())
instructors = names(setting("HUB_INSTRUCTORS", "" if LTI else None))
graders = names(os.environ.get("HUB_GRADERS", "")) - instructors
refused = sorted(n for n in students | instructors | graders if not re.match(LOGIN_PATTERN, n))
if refused:
    raise SystemExit(f"jupyterhub_config.py: {', '.join(map(repr, refused))}: a login holds "
                     "letters, digits and _ . @ - only, first a letter or a digit (it names "
                     "the student's folder of the exchange; nbgrader refuses + and *)")

# --- the hub and its proxy ----------------------------------------------------------------------

DATA.mkdir(parents=True, exist_ok=True)
c.JupyterHub.bind_url = setting("HUB_URL", "http://:8000")
API_IP = setting("HUB_API_IP", CONNECT_IP)
API_PORT = int(setting("HUB_API_PORT", "8081"))
c.JupyterHub.hub_ip = API_IP
c.JupyterHub.hub_port = API_PORT
# the proxy and the services run on this server and reach the API where it listens; the
# containers by their route to this server
c.Spawner.hub_connect_url = f"http://{CONNECT_IP}:{API_PORT}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{setting('HUB_PROXY_API_PORT', '8001')}"
# configurable-http-proxy from hub/package-lock.json, installed by `make hub-setup`
c.ConfigurableHTTPProxy.command = [
    str(Path(sys.prefix) / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy")]
c.JupyterHub.db_url = f"sqlite:///{DATA / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(DATA / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.pid_file = str(DATA / "jupyterhub-proxy.pid")

# --- who may log in ------------------------------------------------------------------------------

if LTI and not students:
    c.Authenticator.allow_all = True  # whoever the LMS launches: the course's members
else:
    c.Authenticator.allowed_users = students | instructors | graders
c.Authenticator.username_pattern = LOGIN_PATTERN  # whatever the authenticator, HUB_CONFIG's too
c.Authenticator.admin_users = instructors
if os.environ.get("HUB_PASSWORD") and graders:
    raise SystemExit("jupyterhub_config.py: HUB_GRADERS with HUB_PASSWORD: a grader would log in "
                     "with the students' shared password, so any student who knows it could "
                     "log in as a grader and open Formgrader. Give graders with your "
                     "institution's login (HUB_CONFIG), or make them HUB_INSTRUCTORS")


def lti_login() -> None:
    """LTI 1.3 launches from the LMS (hub/lti_login.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from lti_login import CourseLTI13Authenticator

    client_id = os.environ.get("HUB_LTI_CLIENT_ID", "")
    if not client_id and os.environ.get("HUB_LTI_CLIENT_ID_FILE"):
        client_id = Path(os.environ["HUB_LTI_CLIENT_ID_FILE"]).read_text().strip()
    if not client_id:
        raise SystemExit("jupyterhub_config.py: set HUB_LTI_CLIENT_ID, or HUB_LTI_CLIENT_ID_FILE "
                         "to a file holding it: the client id the LMS gave the hub (docs/lms.md)")
    c.JupyterHub.authenticator_class = CourseLTI13Authenticator
    lti = c.CourseLTI13Authenticator
    lti.issuer = setting("HUB_LTI_ISSUER")
    lti.authorize_url = setting("HUB_LTI_AUTHORIZE_URL")
    lti.jwks_endpoint = setting("HUB_LTI_JWKS_URL")
    lti.client_id = {client_id}
    lti.username_key = setting("HUB_LTI_USERNAME_KEY", "sub")
    lti.graders_group = GRADERS
    lti.graders = instructors | graders
    lti.chapters = {p.name for p in (COURSE / "notebooks").iterdir() if p.is_dir()}


if LTI and os.environ.get("HUB_PASSWORD"):
    raise SystemExit("jupyterhub_config.py: HUB_LTI_ISSUER and HUB_PASSWORD: choose one way to "
                     "log in, the LMS's launches or the shared password")
if LTI:
    lti_login()
elif os.environ.get("HUB_PASSWORD"):
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = os.environ["HUB_PASSWORD"]
    c.SharedPasswordAuthenticator.admin_password = setting("HUB_ADMIN_PASSWORD")
elif not os.environ.get("HUB_CONFIG"):
    raise SystemExit("jupyterhub_config.py: say how people log in: HUB_PASSWORD and "
                     "HUB_ADMIN_PASSWORD (a workshop), HUB_LTI_ISSUER and the other HUB_LTI_* "
                     "(launches from the LMS), or HUB_CONFIG, a file that sets your "
                     "institution's authenticator")

# --- each student's server: a container of the course's image ----------------------------------

c.JupyterHub.spawner_class = "docker"
c.DockerSpawner.client_kwargs = {"base_url": setting("HUB_DOCKER",
                                                     "unix:///var/run/docker.sock")}
c.DockerSpawner.image = IMAGE
c.DockerSpawner.name_template = f"{COURSE_ID}-{{username}}"
c.DockerSpawner.remove = True  # the container goes with the server; the home volume stays
c.DockerSpawner.network_name = setting("HUB_NETWORK", "bridge")
# each server's port is published on this server's 127.0.0.1, where the proxy reaches it
c.DockerSpawner.use_internal_ip = False
c.DockerSpawner.mem_limit = setting("HUB_MEM_LIMIT", "3G")
c.DockerSpawner.cpu_limit = float(setting("HUB_CPU_LIMIT", "2"))
# the ranks share /dev/shm; NCCL needs more than Docker's 64 MB
c.DockerSpawner.extra_host_config = {"shm_size": setting("HUB_SHM_SIZE", "1g")}
c.DockerSpawner.volumes = {f"{COURSE_ID}-home-{{username}}": "/home/jovyan"}
c.DockerSpawner.environment = {"NBGRADER_EXCHANGE": EXCHANGE_INSIDE,
                               "COMMLAB_COURSE_ID": COURSE_ID}
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 120

# nbgrader's exchange: the folders and modes nbgrader gives them (released 755, inbound 733,
# feedback 711), all the course account's, which releases, collects and returns feedback; and
# feedback-of/, each student's pages under her login (make release-feedback files them there)
COURSE_USER = os.environ.get("HUB_COURSE_USER", "")
COURSE_EXCHANGE = EXCHANGE / COURSE_ID
STUDENT_UID = int(setting("HUB_STUDENT_UID", "1000"))


def course_uid() -> int:
    """The uid that owns the exchange; never the students': the inbound (0733) and feedback
    (0711) folders hide their names from everyone but their owner."""
    import pwd

    try:
        uid = pwd.getpwnam(COURSE_USER).pw_uid if COURSE_USER else os.geteuid()
    except KeyError:
        raise SystemExit(f"jupyterhub_config.py: HUB_COURSE_USER={COURSE_USER}: no such user "
                         "on this server") from None
    if uid == STUDENT_UID:
        who = f"HUB_COURSE_USER={COURSE_USER}" if COURSE_USER else "the hub's own user"
        raise SystemExit(f"jupyterhub_config.py: {who} has uid {uid}, the students' own "
                         "(HUB_STUDENT_UID): every student would own the exchange and could "
                         "list and read every submission and feedback page. Make the course "
                         "an account of its own (sudo useradd --system commlab-course) and "
                         "set HUB_COURSE_USER to it")
    return uid


course_uid()
FOLDERS = {"": 0o755, "outbound": 0o755, "inbound": 0o733, "feedback": 0o711,
           "feedback-of": 0o711}


def course_owned(path: Path, mode: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if COURSE_USER:
        import pwd

        account = pwd.getpwnam(COURSE_USER)
        os.chown(path, account.pw_uid, account.pw_gid)
    path.chmod(mode)


course_owned(EXCHANGE, 0o755)
for folder, mode in FOLDERS.items():
    course_owned(COURSE_EXCHANGE / folder, mode)


def own_exchange(spawner) -> None:
    """The exchange as this student's container sees it: the released chapters read-only, her
    own feedback pages read-only (nbgrader's fetch finds a page by its name; no one else's is
    there, whatever uid the container runs as), and an inbound folder of her own (write and
    pass, no listing, as nbgrader's inbound); both named after her hub login."""
    mine = COURSE_EXCHANGE / "inbound" / spawner.user.name
    course_owned(mine, stat.S_IRWXU | stat.S_IWGRP | stat.S_IXGRP | stat.S_IWOTH | stat.S_IXOTH)
    pages = COURSE_EXCHANGE / "feedback-of" / spawner.user.name
    course_owned(pages, 0o711)
    inside = f"{EXCHANGE_INSIDE}/{COURSE_ID}"
    spawner.volumes = {
        **c.DockerSpawner.volumes,
        str(COURSE_EXCHANGE / "outbound"): {"bind": f"{inside}/outbound", "mode": "ro"},
        str(pages): {"bind": f"{inside}/feedback", "mode": "ro"},
        str(mine): {"bind": f"{inside}/inbound", "mode": "rw"},
    }


c.Spawner.pre_spawn_hook = own_exchange

# --- Formgrader, for the course's instructors ----------------------------------------------------

formgrader_port = int(setting("HUB_FORMGRADER_PORT", "9881"))
as_root = not COURSE_USER and os.geteuid() == 0
c.JupyterHub.services = [{
    "name": FORMGRADER,
    "display": True,
    "url": f"http://127.0.0.1:{formgrader_port}",
    "command": [str(COURSE / ".venv" / "bin" / "jupyterhub-singleuser"),
                f"--ServerApp.root_dir={COURSE}", "--ServerApp.default_url=/formgrader",
                *(["--allow-root"] if as_root else [])],
    "cwd": str(COURSE),
    "user": COURSE_USER,
    "environment": {"JUPYTER_CONFIG_PATH": str(COURSE / "grader"),
                    "NBGRADER_EXCHANGE": str(EXCHANGE), "COMMLAB_COURSE_ID": COURSE_ID},
    "oauth_no_confirm": True,
}]
c.JupyterHub.load_groups = {GRADERS: {"users": sorted(instructors | graders)}}
c.JupyterHub.load_roles = [
    {"name": GRADERS, "groups": [GRADERS],
     "scopes": [f"access:services!service={FORMGRADER}"]},
]

# --- idle servers stop ---------------------------------------------------------------------------

cull_after = int(setting("HUB_CULL_AFTER", "3600"))
if cull_after:
    c.JupyterHub.services.append({
        "name": "idle-culler",
        "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={cull_after}"],
    })
    c.JupyterHub.load_roles.append({
        "name": "idle-culler", "services": ["idle-culler"],
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    })

if os.environ.get("HUB_CONFIG"):
    load_subconfig(os.environ["HUB_CONFIG"])  # noqa: F821 - provided by JupyterHub
