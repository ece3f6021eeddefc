"""The namespaces around a student's kernel: what a process inside them sees and can do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.course import ROOT
from grader.sandboxed import namespaces as sandbox

pytestmark = pytest.mark.skipif(not sandbox.available(),
                                reason="this machine does not allow user namespaces")


def _inside(tmp_path: Path, code: str, **environ: str) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    hidden = sandbox.hidden_paths([tmp_path / "out"])
    command = sandbox.kernel_command(sandbox.plan(work, hidden), [sys.executable, "-c", code])
    return subprocess.run(command, capture_output=True, text=True, timeout=60,
                          env={**os.environ, **environ})


def test_the_course_folder_shows_only_python_and_commlab(tmp_path):
    done = _inside(tmp_path, f"import os; print(sorted(os.listdir({str(ROOT)!r})))")
    assert done.stdout.split("\n")[0] == str(sorted(
        p.name for p in (ROOT / ".venv", ROOT / "helpers"))), done.stderr


def test_python_and_commlab_are_read_only(tmp_path):
    done = _inside(tmp_path, f"open({str(ROOT / 'helpers' / 'x')!r}, 'w')")
    assert "Read-only file system" in done.stderr


def test_the_kernel_folder_is_writable_and_seen_outside(tmp_path):
    done = _inside(tmp_path, "open('note', 'w').write('hi')")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "work" / "note").read_text() == "hi"


def test_other_temporary_folders_are_empty(tmp_path):
    (tmp_path / "secret").write_text("x")
    done = _inside(tmp_path, f"import os; print(os.path.exists({str(tmp_path / 'secret')!r}))")
    assert done.stdout.strip() == "False", done.stderr


def test_caches_the_graders_environment_places_outside_are_made_inside(tmp_path):
    # what torch writes in the grader's own environment once it has imported its compiler
    outside = {"TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_grader",
               "TRITON_CACHE_DIR": str(tmp_path / "triton"), "TMPDIR": str(tmp_path / "t")}
    done = _inside(tmp_path, "import tempfile, torch._dynamo\n"
                   "from torch._inductor.runtime.cache_dir_utils import cache_dir\n"
                   "print(cache_dir()); print(tempfile.gettempdir())", **outside)
    assert done.returncode == 0, done.stderr[-3000:]
    cache, temporary = done.stdout.split()
    assert Path(cache).parent == Path(temporary) == tmp_path / "work", done.stdout


def test_only_loopback_is_up(tmp_path):
    done = _inside(tmp_path, "import socket; print(socket.if_nameindex())")
    assert "'lo'" in done.stdout and "eth" not in done.stdout, done.stderr


def test_system_folders_and_the_root_are_read_only_even_for_root(tmp_path):
    done = _inside(tmp_path, "\n".join([
        "import os",
        "for path in ('/usr/commlab-x', '/etc/commlab-x', '/commlab-x', '/tmp/commlab-x'):",
        "    try:",
        "        open(path, 'w')",
        "        print('wrote', path)",
        "    except OSError as err:",
        "        print('refused', path, err.strerror)"]))
    assert "wrote" not in done.stdout and done.stdout.count("Read-only file system") == 4, \
        done.stdout + done.stderr


def test_dev_holds_no_terminal_or_disk(tmp_path):
    done = _inside(tmp_path, "import os; print(sorted(os.listdir('/dev')))")
    shown = eval(done.stdout.strip())  # noqa: S307 - a list the test itself printed
    assert {"null", "zero", "urandom", "shm"} <= set(shown), done.stderr
    assert not {"tty", "console", "pts", "ptmx", "kmsg", "mem"} & set(shown), shown


def test_shared_memory_made_inside_is_gone_with_the_sandbox(tmp_path):
    code = ("import ctypes; libc = ctypes.CDLL(None)\n"
            "print(libc.shmget(0x5A5A5A, 4096, 0o1000 | 0o666) >= 0)\n"
            "open('/dev/shm/commlab-x', 'w').write('x')")
    done = _inside(tmp_path, code)
    assert done.stdout.strip() == "True", done.stderr
    listed = subprocess.run(["ipcs", "-m"], capture_output=True, text=True).stdout
    assert "0x005a5a5a" not in listed
    assert not Path("/dev/shm/commlab-x").exists()
    again = _inside(tmp_path, "import ctypes; print(ctypes.CDLL(None).shmget(0x5A5A5A, 4096, "
                              "0o666))")
    assert again.stdout.strip() == "-1", again.stderr
