"""The namespaces around a student's kernel: only the kernel runs in them, nothing of the grader.

Inside: no network but loopback (gloo needs it); empty folders in place of every top-level
folder but the system's (so of the course, home folders, the temporary folder with other
kernels, the course template and its gradebook, the submissions, OUT); the Python environment
and commlab visible read-only at their own paths; the kernel's own scratch folder (its notebook,
its connection file and sockets) writable; a /dev/shm of its own. The namespace's first process
is the kernel: when it ends, the kernel (Linux) kills every process the student's code started,
daemons included.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

UNSHARE = ["unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc",
           "--map-root-user"]

NOT_AVAILABLE = (
    "Linux namespaces are not allowed on this machine (macOS, or Ubuntu 24.04's default "
    "AppArmor policy, or a container without them), so student code would run with your rights "
    "and network access. Grading goes on without the sandbox and grades.csv's notes say so. "
    "To grade safely, grade inside the instructor image with the network off:\n"
    "  docker build --target instructor -t commlab-instructor .\n"
    '  docker run --rm --network none --shm-size=1g -v "$PWD/class:/class:ro" '
    '-v "$PWD/grades:/grades" commlab-instructor make grade SUBMISSIONS=/class OUT=/grades '
    "GRADE_FLAGS=--no-sandbox")


def available() -> bool:
    """Whether this machine lets an unprivileged user make network, mount and pid namespaces."""
    probe = [*UNSHARE, "sh", "-c",
             f"ip link set lo up && mount -t tmpfs tmpfs {shlex.quote(tempfile.gettempdir())}"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def readable_paths() -> list[Path]:
    """What the kernel needs to see: this Python environment and the commlab package."""
    commlab = importlib.util.find_spec("commlab")
    paths = [Path(sys.prefix), Path(sys.base_prefix)]
    if commlab is not None and commlab.origin:
        paths.append(Path(commlab.origin).resolve().parent.parent)
    return [p.resolve() for p in paths]


# What every process needs and holds nothing of the course's: the system's programs, libraries
# and configuration, and the kernel's own devices and process list.
SYSTEM = {"usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin", "etc", "dev", "proc", "sys"}


def hidden_paths(extra: list[Path]) -> list[Path]:
    """The folders covered by an empty one: every top-level folder but the system's (home
    folders, other copies of the course, /tmp, /run, /opt, ...), and the course, the temporary
    folder and ``extra`` wherever they are."""
    from .course import ROOT

    tops = [p for p in Path("/").iterdir()
            if p.is_dir() and not p.is_symlink() and p.name not in SYSTEM]
    paths = [*tops, ROOT, Path(tempfile.gettempdir()), *extra]
    paths = [p.resolve() for p in paths if p.exists() and p.resolve() != Path("/")]
    # a folder under another one is already covered by its parent's empty folder
    return sorted({p for p in paths if not any(p != q and p.is_relative_to(q) for q in paths)})


def kernel_command(argv: list[str], workdir: Path, hidden: list[Path],
                   hidden_files: list[Path] = ()) -> list[str]:
    """``argv`` (the kernel) inside the namespaces, started in ``workdir``."""
    workdir = workdir.resolve()
    keep = [p for p in readable_paths() if any(p.is_relative_to(h) for h in hidden)]
    keep = [p for p in dict.fromkeys(keep)
            if not any(p != q and p.is_relative_to(q) for q in keep)][:5]  # fds 4 to 8
    # Each kept folder is opened before the covering mounts and bound back from its descriptor
    # (mount -c: do not resolve /proc/self/fd/N by name, which would find the empty folder).
    opened = [(3, workdir)] + [(4 + i, p) for i, p in enumerate(keep)]
    steps = ["set -e", "ip link set lo up"]
    steps += [f"exec {fd}<{shlex.quote(str(p))}" for fd, p in opened]
    steps += [f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(h))}" for h in hidden]
    if Path("/dev/shm").is_dir():  # shared memory of this kernel's ranks only
        steps.append("mount -t tmpfs -o mode=1777 tmpfs /dev/shm")
    steps += [f"mount --bind /dev/null {shlex.quote(str(f))}" for f in hidden_files
              if f.is_file()]
    for fd, path in opened:
        target = shlex.quote(str(path))
        steps += [f"mkdir -p {target}", f"mount -c --bind /proc/self/fd/{fd} {target}"]
        if path != workdir:
            steps.append(f"mount -c -o remount,bind,ro {target}")
    steps += [f"exec {fd}<&-" for fd, _ in opened]
    steps += [f"cd {shlex.quote(str(workdir))}", 'exec "$@"']
    return [*dies_with_parent(), *UNSHARE, "sh", "-c", "\n".join(steps), "kernel", *argv]


def dies_with_parent() -> list[str]:
    """A prefix that kills the command when the grader dies, even by SIGKILL."""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL"] if setpriv and os.name == "posix" else []
