"""The namespaces that student code runs in: only the student's kernel and the ranks that grade
its answers run inside them, nothing of the grader.

Inside: no network but loopback (gloo needs it); empty folders in place of every top-level
folder but the system's (so of the course, home folders, the temporary folder with other
kernels, the course template and its gradebook, the submissions, OUT); the Python environment
and commlab visible at their own paths; every folder read-only but the process's own; a /dev
with only null, zero, full, random and urandom in it (no terminal, no disk); a /dev/shm and
SysV IPC of its own, gone with it; a user namespace of its own, so that nothing inside can trace
or signal a process outside. The namespace's first process is the sandboxed one: when it ends,
Linux kills every process the student's code started, daemons included, and the kernel frees
every IPC object and file they made, so that the next submission starts from nothing.

A :class:`Plan` says what the sandbox hides and shows. Two ways in use it: :func:`kernel_command`
runs a command (the student's kernel) through this module's ``python -m`` entry, which enters
and executes it; :func:`enter` takes the calling process in (the rank host, forked from a warm
process with torch loaded, so that no second torch import is paid per submission).
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import importlib.util
import json
import os
import re
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from . import limits

UNSHARE = ["unshare", "--net", "--mount", "--ipc", "--pid", "--fork", "--kill-child",
           "--mount-proc", "--map-root-user"]

# Set in the course image (Dockerfile), whose grading runs with --no-sandbox in a container
# started with the network off.
IN_IMAGE = "COMMLAB_INSTRUCTOR_IMAGE"


def not_available_message() -> str:
    """What to do where namespaces are not allowed, said for where the grader runs."""
    head = ("Linux namespaces, or the virtual network links that join the ranks' networks "
            "(veth and bridge devices), are not allowed here, so student code would run with "
            "your rights and network access. Grading goes on without the sandbox and notes.json "
            "says so. (Where only the links are missing, load them once as root: modprobe veth "
            "bridge.)")
    if os.environ.get(IN_IMAGE):
        return (f"{head} This is the instructor image: start it with the network off "
                "(docker run --network none ...) and pass --no-sandbox, as the grading command "
                "of docs/security.md, \"Grading without namespaces\", does.")
    return (f"{head} (macOS, Ubuntu 24.04's default AppArmor policy and some containers forbid "
            "them.) To grade safely, grade inside the instructor image with the network off, "
            "keeping the gradebook on the host:\n"
            '  docker build --build-arg UID="$(id -u)" --build-arg GID="$(id -g)" '
            "--target instructor -t commlab-instructor .\n"
            '  docker run --rm --network none --shm-size=1g -v "$PWD/class:/class:ro" '
            '-v "$PWD/grades:/grades" commlab-instructor make grade SUBMISSIONS=/class '
            'OUT=/grades GRADE_FLAGS="--no-sandbox --gradebook /grades/gradebook.db"')


def available() -> bool:
    """Whether this machine lets an unprivileged user make network, mount and pid namespaces,
    and in them the links that join each rank's network to the others (:mod:`.links`)."""
    probe = [*UNSHARE, "sh", "-c",
             "ip link set lo up && ip link add probe0 type bridge "
             "&& ip link add probe1 type veth peer name probe2 "
             f"&& mount -t tmpfs tmpfs {shlex.quote(tempfile.gettempdir())}"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _needed() -> list[Path]:
    """This Python environment and the commlab package, as this process names them."""
    commlab = importlib.util.find_spec("commlab")
    paths = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent]
    if commlab is not None and commlab.origin:
        paths.append(Path(commlab.origin).parent.parent)
    return paths


def readable_paths() -> list[Path]:
    """What student code needs to see: this Python environment and the commlab package."""
    return [p.resolve() for p in _needed()]


def _links(hidden: list[Path]) -> list[tuple[Path, Path]]:
    """(link, target) for each symbolic link on the way to what student code needs that lies in
    a hidden folder (a ``.venv`` that links to a shared environment): made again inside, so that
    the paths this process knows (sys.path, modules' ``__path__``) lead there too."""
    links = {}
    for path in _needed():
        step = Path(path.anchor)
        for part in path.parts[1:]:
            step = step / part
            if step.is_symlink() and any(step.is_relative_to(h) for h in hidden):
                links[step] = step.resolve()
    return sorted(links.items())


# What every process needs and holds nothing of the course's: the system's programs, libraries
# and configuration, and the kernel's own devices and process list.
SYSTEM = {"usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin", "etc", "dev", "proc", "sys"}


def hidden_paths(extra: list[Path]) -> list[Path]:
    """The folders covered by an empty one: every top-level folder but the system's (home
    folders, other copies of the course, /tmp, /run, /opt, ...), and the course, the temporary
    folder and ``extra`` wherever they are."""
    from ..course import ROOT

    tops = [p for p in Path("/").iterdir()
            if p.is_dir() and not p.is_symlink() and p.name not in SYSTEM]
    paths = [*tops, ROOT, Path(tempfile.gettempdir()), *extra]
    paths = [p.resolve() for p in paths if p.exists() and p.resolve() != Path("/")]
    return _outermost(paths)


def _outermost(paths: list[Path]) -> list[Path]:
    """``paths`` without those under another one (already covered by it)."""
    return sorted({p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths)})


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a sandboxed process sees.

    hidden: folders covered by an empty one; readable: folders bound back read-only at their own
    path (those a hidden folder covers); workdir: the process's own folder, bound back writable,
    its working directory; covered_files: files outside every hidden folder, covered by
    /dev/null; links: symbolic links on the way to readable folders, made again inside.
    """

    hidden: tuple[Path, ...]
    readable: tuple[Path, ...]
    workdir: Path
    covered_files: tuple[Path, ...] = ()
    links: tuple[tuple[Path, Path], ...] = ()  # (link, target), made again inside


def plan(workdir: Path, hidden: list[Path], hidden_files: list[Path] = ()) -> Plan:
    """The plan for a process working in ``workdir``, with ``hidden`` covered (from
    :func:`hidden_paths`) and ``hidden_files`` (a gradebook) out of reach."""
    keep = [p for p in readable_paths() if any(p.is_relative_to(h) for h in hidden)]
    files = [f.resolve() for f in hidden_files
             if f.exists() and not any(f.resolve().is_relative_to(h) for h in hidden)]
    # fds 4 to 8 hold the kept folders while the shell's mounts cover them
    return Plan(tuple(hidden), tuple(_outermost(keep))[:5], workdir.resolve(), tuple(files),
                tuple(_links(hidden)))


def _bound_back(plan: Plan) -> list[tuple[Path, bool]]:
    """(folder, read-only) for each folder bound back from behind the covering mounts."""
    return [(plan.workdir, False)] + [(p, True) for p in plan.readable]


# --- the way in for a command: this module as a program --------------------------------------

def kernel_command(plan: Plan, argv: list[str]) -> list[str]:
    """``argv`` (the student's kernel) inside the namespaces, started in the plan's workdir."""
    from ..course import ROOT

    data = json.dumps(plan_data(plan))
    return [*dies_with_parent(), sys.executable, "-P", "-c",
            f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from grader.sandboxed import namespaces; namespaces.main(sys.argv[1:])",
            data, "--", *argv]


def plan_data(plan: Plan) -> dict:
    """The plan as JSON-able data (for a process to enter it)."""
    return {"hidden": [str(p) for p in plan.hidden], "readable": [str(p) for p in plan.readable],
            "workdir": str(plan.workdir), "covered_files": [str(p) for p in plan.covered_files],
            "links": [[str(a), str(b)] for a, b in plan.links]}


def plan_from_data(data: dict | None) -> Plan | None:
    if data is None:
        return None
    return Plan(tuple(map(Path, data["hidden"])), tuple(map(Path, data["readable"])),
                Path(data["workdir"]), tuple(map(Path, data["covered_files"])),
                tuple((Path(a), Path(b)) for a, b in data["links"]))


# Folders a process inside writes to that an environment variable can name: outside the sandbox
# they lie where it cannot write (torch sets TORCHINDUCTOR_CACHE_DIR in its own process's
# environment, under /tmp, when it first imports its compiler, and its import inside makes the
# folder: a grader that imported it would otherwise hand every kernel a folder it fails on).
_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME",
                    "MPLCONFIGDIR")


def own_writable_folders(plan: Plan) -> None:
    """The temporary folder inside is the plan's workdir, and the caches that the environment
    placed outside are made where torch and matplotlib place them by default: in it."""
    os.environ["TMPDIR"] = str(plan.workdir)
    tempfile.tempdir = None
    for name in _CACHE_VARIABLES:
        value = os.environ.get(name)
        if value and not Path(value).resolve().is_relative_to(plan.workdir.resolve()):
            del os.environ[name]


def main(arguments: list[str]) -> None:
    """``kernel_command``'s program: enter the plan given as JSON, then run the command after
    ``--`` as the namespace's first process (its parent waits, and ends as it ends)."""
    plan = plan_from_data(json.loads(arguments[0]))
    argv = arguments[arguments.index("--") + 1:]
    enter(plan)
    own_writable_folders(plan)
    child = os.fork()
    if child:
        _, status = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    become_init()
    limits.for_submission()
    limits.drop_capabilities()
    os.execvp(argv[0], argv)


def dies_with_parent() -> list[str]:
    """A prefix that kills the command when the grader dies, even by SIGKILL."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv and os.name == "posix" else []


# --- the way in for this process: system calls ---------------------------------------------------

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
_CLONE_NEWPID, _CLONE_NEWNET = 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
# statvfs flags -> the mount flags a remount inside a user namespace must keep (they are locked)
_KEPT_FLAGS = ((0x2, _MS_NOSUID), (0x4, _MS_NODEV), (0x8, _MS_NOEXEC), (0x400, 0x400),
               (0x800, 0x800), (0x1000, 0x200000))
_PR_SET_PDEATHSIG = 1
_libc = None


def call(name: str, *args) -> None:
    """A libc call that raises OSError when it fails."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}{args}: {os.strerror(errno)}")


def _bytes(text: object) -> bytes | None:
    return None if text is None else str(text).encode()


def mount(source: str | None, target: Path | str, fstype: str | None, flags: int,
          data: str | None = None) -> None:
    call("mount", _bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags),
          _bytes(data))


# Device files a process needs and that reach no hardware, terminal or other process.
DEVICES = ("null", "zero", "full", "random", "urandom")


def enter(plan: Plan) -> None:
    """Take this process into new user, mount, network, IPC and pid namespaces laid out as
    ``plan`` says. The process must have one thread (a forked child). The pid namespace holds
    the process's *children*: fork once, and in the child call :func:`become_init`."""
    uid, gid = os.getuid(), os.getgid()
    call("unshare", _CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        Path(f"/proc/self/{name}").write_text(text)
    call("unshare", _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID)
    mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    opened = [(os.open(p, os.O_PATH | os.O_DIRECTORY), p, ro) for p, ro in _bound_back(plan)]
    devices = {name: os.open(f"/dev/{name}", os.O_PATH) for name in DEVICES
               if os.path.exists(f"/dev/{name}")}
    for covered in plan.covered_files:
        mount("/dev/null", covered, None, _MS_BIND)
    for hidden in plan.hidden:
        mount("tmpfs", hidden, "tmpfs", 0, "mode=755")
    _read_only_everywhere(plan)
    _own_dev(devices)
    for fd, path, read_only in opened:
        path.mkdir(parents=True, exist_ok=True)
        mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        # a bind takes its source's flags, read-only by now: set them, both ways
        _remount(path, read_only)
        os.close(fd)
    for link, target in plan.links:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    for hidden in plan.hidden:  # the empty folders too (what is bound into them keeps its own)
        remount_read_only(hidden)
    _loopback_up()
    os.chdir(plan.workdir)


def _remount(path: Path | str, read_only: bool) -> None:
    """``path``'s mount read-only or writable, keeping the flags a user namespace may not
    drop."""
    locked = os.statvfs(path).f_flag
    kept = sum(ms for st, ms in _KEPT_FLAGS if locked & st)
    mount(None, path, None, _MS_BIND | _MS_REMOUNT | (_MS_RDONLY if read_only else 0) | kept)


def remount_read_only(path: Path | str) -> None:
    _remount(path, True)


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # mountinfo writes a space in a path as \\040 (octal); no codec: the standard library's
        # own folder may be hidden at this point
        points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)),
                             line.split()[4]))
    return list(dict.fromkeys(points))


def _read_only_everywhere(plan: Plan) -> None:
    """Every mount this process sees read-only: the system's folders, ``/`` itself, ``/sys``
    (run as root, the sandbox's root user is the machine's, and could write them otherwise)."""
    skip = ("/proc", "/dev")
    for point in _mount_points():
        path = Path(point)
        if point in skip or any(path.is_relative_to(s) for s in skip if s != "/"):
            continue
        if any(path.is_relative_to(h) for h in plan.hidden) or not path.is_dir():
            continue
        try:
            remount_read_only(point)
        except OSError:
            pass  # a mount this namespace may not change: one the kernel already locked


def _own_dev(devices: dict[str, int]) -> None:
    """A /dev of the sandbox's own (see :data:`DEVICES`), with /dev/shm and /dev/fd."""
    mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=755")
    for name, fd in devices.items():
        Path(f"/dev/{name}").touch()
        mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, _MS_BIND)
        os.close(fd)
    Path("/dev/shm").mkdir()
    mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    remount_read_only("/dev")


def become_init() -> None:
    """In the first child after :func:`enter`: show this pid namespace's processes in /proc,
    and die with the parent (which the grader can kill)."""
    mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    call("prctl", _PR_SET_PDEATHSIG, 9, 0, 0, 0)


def _loopback_up() -> None:
    """``ip link set lo up``, by ioctl: the network namespace starts with loopback down."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket() as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))
