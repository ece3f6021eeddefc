"""The namespaces that student code runs in: only the student's kernel and the ranks that grade
its answers run inside them, nothing of the grader.

Inside: no network but loopback (gloo needs it); empty folders in place of every top-level
folder but the system's (so of the course, home folders, the temporary folder with other
kernels, the course template and its gradebook, the submissions, OUT); the Python environment
and commlab visible read-only at their own paths; the process's own folder writable; a /dev/shm
of its own; a user namespace of its own, so that nothing inside can trace or signal a process
outside. The namespace's first process is the sandboxed one: when it ends, Linux kills every
process the student's code started, daemons included.

A :class:`Plan` says what the sandbox hides and shows. Two ways in use it: :func:`kernel_command`
wraps a command (the student's kernel) in ``unshare``; :func:`enter` takes the calling process in
(the rank host, forked from a warm process with torch loaded, so that no second torch import is
paid per submission).
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import importlib.util
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

UNSHARE = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
           "--map-root-user"]

# Set in the course image (Dockerfile), whose grading runs with --no-sandbox in a container
# started with the network off.
IN_IMAGE = "COMMLAB_INSTRUCTOR_IMAGE"


def not_available_message() -> str:
    """What to do where namespaces are not allowed, said for where the grader runs."""
    head = ("Linux namespaces are not allowed here, so student code would run with your rights "
            "and network access. Grading goes on without the sandbox and notes.json says so.")
    if os.environ.get(IN_IMAGE):
        return (f"{head} This is the instructor image: start it with the network off "
                "(docker run --network none ...) and pass --no-sandbox, as the README's grading "
                "command does.")
    return (f"{head} (macOS, Ubuntu 24.04's default AppArmor policy and some containers forbid "
            "them.) To grade safely, grade inside the instructor image with the network off, "
            "keeping the gradebook on the host:\n"
            '  docker build --build-arg UID="$(id -u)" --build-arg GID="$(id -g)" '
            "--target instructor -t commlab-instructor .\n"
            '  docker run --rm --network none --shm-size=1g -v "$PWD/class:/class:ro" '
            '-v "$PWD/grades:/grades" commlab-instructor make grade SUBMISSIONS=/class '
            'OUT=/grades GRADE_FLAGS="--no-sandbox --gradebook /grades/gradebook.db"')


def available() -> bool:
    """Whether this machine lets an unprivileged user make network, mount and pid namespaces."""
    probe = [*UNSHARE, "sh", "-c",
             f"ip link set lo up && mount -t tmpfs tmpfs {shlex.quote(tempfile.gettempdir())}"]
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


# --- the way in for a command: unshare and a shell script --------------------------------------

def kernel_command(plan: Plan, argv: list[str]) -> list[str]:
    """``argv`` (the student's kernel) inside the namespaces, started in the plan's workdir."""
    opened = list(enumerate(_bound_back(plan), start=3))
    # Each kept folder is opened before the covering mounts and bound back from its descriptor
    # (mount -c: do not resolve /proc/self/fd/N by name, which would find the empty folder).
    steps = ["set -e", "ip link set lo up"]
    steps += [f"exec {fd}<{shlex.quote(str(p))}" for fd, (p, _) in opened]
    steps += [f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(h))}" for h in plan.hidden]
    if Path("/dev/shm").is_dir():  # shared memory of this kernel's ranks only
        steps.append("mount -t tmpfs -o mode=1777 tmpfs /dev/shm")
    steps += [f"mount --bind /dev/null {shlex.quote(str(f))}" for f in plan.covered_files]
    for fd, (path, read_only) in opened:
        target = shlex.quote(str(path))
        steps += [f"mkdir -p {target}", f"mount -c --bind /proc/self/fd/{fd} {target}"]
        if read_only:
            steps.append(f"mount -c -o remount,bind,ro {target}")
    steps += [f"exec {fd}<&-" for fd, _ in opened]
    for link, target in plan.links:
        steps += [f"mkdir -p {shlex.quote(str(link.parent))}",
                  f"ln -sfn {shlex.quote(str(target))} {shlex.quote(str(link))}"]
    steps += [f"cd {shlex.quote(str(plan.workdir))}", 'exec "$@"']
    return [*dies_with_parent(), *UNSHARE, "sh", "-c", "\n".join(steps), "kernel", *argv]


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


def _call(name: str, *args) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}{args}: {os.strerror(errno)}")


def _bytes(text: object) -> bytes | None:
    return None if text is None else str(text).encode()


def _mount(source: str | None, target: Path | str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    _call("mount", _bytes(source), _bytes(target), _bytes(fstype), ctypes.c_ulong(flags),
          _bytes(data))


def enter(plan: Plan) -> None:
    """Take this process into new user, mount, network, IPC and pid namespaces laid out as
    ``plan`` says. The process must have one thread (a forked child). The pid namespace holds
    the process's *children*: fork once, and in the child call :func:`become_init`."""
    uid, gid = os.getuid(), os.getgid()
    _call("unshare", _CLONE_NEWUSER)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        Path(f"/proc/self/{name}").write_text(text)
    _call("unshare", _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWPID)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    opened = [(os.open(p, os.O_PATH | os.O_DIRECTORY), p, ro) for p, ro in _bound_back(plan)]
    for hidden in plan.hidden:
        _mount("tmpfs", hidden, "tmpfs", 0, "mode=755")
    if Path("/dev/shm").is_dir():
        _mount("tmpfs", "/dev/shm", "tmpfs", 0, "mode=1777")
    for covered in plan.covered_files:
        _mount("/dev/null", covered, None, _MS_BIND)
    for fd, path, read_only in opened:
        path.mkdir(parents=True, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        if read_only:
            locked = os.statvfs(path).f_flag
            kept = sum(ms for st, ms in _KEPT_FLAGS if locked & st)
            _mount(None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | kept)
        os.close(fd)
    for link, target in plan.links:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    _loopback_up()
    os.chdir(plan.workdir)


def become_init() -> None:
    """In the first child after :func:`enter`: show this pid namespace's processes in /proc,
    and die with the parent (which the grader can kill)."""
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    _call("prctl", _PR_SET_PDEATHSIG, 9, 0, 0, 0)


def _loopback_up() -> None:
    """``ip link set lo up``, by ioctl: the network namespace starts with loopback down."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket() as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))
