"""A batch as a whole: its slices for several machines and their merge, a killed run cleaned up
by the next, a gradebook that refuses the scores, a batch without the sandbox, --jobs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbgrader.api import Gradebook

from commlab import processes
from grader import cli, intake
from grader.trusted import batch, scoring_kernel, scratch
from support.bad_downloads import BAD_MEMBERS, bad_members_zip
from support.class_factory import CHAPTER, correct, release, write
from support.grading import read_grades

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def short_root():
    """A scratch root of its own with a short path: the kernels' sockets live in it."""
    root = Path(tempfile.mkdtemp(prefix="grading-test-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_shards_cover_the_class_once():
    keys = [(f"s{i}", c) for i in range(7) for c in ("00_a", "01_b", "02_c")]
    slices = [batch.shard_of(keys, (k, 4)) for k in range(1, 5)]
    assert sorted(k for part in slices for k in part) == sorted(keys)
    assert max(map(len, slices)) - min(map(len, slices)) <= 1


def test_shard_must_name_one_of_n_slices():
    with pytest.raises(ValueError):
        batch.shard_of([("s", "c")], (3, 2))


def test_default_jobs_scales_what_the_bench_found_fastest_to_the_usable_cpus(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setattr(cli, "usable_memory", lambda: 2**40)
    (tmp_path / "grader-jobs").write_text("3 2\n")  # 3 jobs were fastest on 2 CPUs
    assert cli.default_jobs(tmp_path / "grader-jobs") == round(1.5 * cli.usable_cpus())


def test_default_jobs_without_a_bench_is_one_per_cpu_and_one_more(tmp_path, monkeypatch):
    # a fresh clone grades at what the bench finds fastest on 2 cores (3 jobs), not at one
    monkeypatch.setattr(cli, "usable_memory", lambda: 2**40)
    monkeypatch.setattr(cli, "usable_cpus", lambda: 2)
    assert cli.default_jobs(tmp_path / "absent") == 3
    (tmp_path / "damaged").write_text("3 0\n")
    assert cli.default_jobs(tmp_path / "damaged") == 3


def test_default_jobs_follow_the_slurm_allocation_and_the_memory(tmp_path, monkeypatch):
    (tmp_path / "grader-jobs").write_text("3 2\n")
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert cli.usable_cpus() == 1
    monkeypatch.setattr(cli, "usable_memory", lambda: 2**40)
    assert cli.default_jobs(tmp_path / "grader-jobs") == 2  # round(1.5)
    monkeypatch.setattr(cli, "usable_memory", lambda: cli.MEMORY_PER_JOB)
    assert cli.default_jobs(tmp_path / "grader-jobs") == 1


def test_slurm_memory_per_cpu_bounds_the_memory(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    monkeypatch.setenv("SLURM_MEM_PER_CPU", "1000")
    assert cli.usable_memory() <= 1000 * 2**20


def test_grading_never_installs_and_says_what_to_run_first(tmp_path, monkeypatch, capsys):
    (tmp_path / ".installed").write_text("")
    os.utime(tmp_path / ".installed", (0, 0))  # installed long before the pins changed
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert cli.main(["grade", str(tmp_path / "class"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "older than requirements.txt" in err and "run `make setup` once" in err


@pytest.mark.slow
def test_shards_merged_give_one_grades_csv_and_gradebook(tmp_path, short_root):
    for student, nb in (("ann", correct()), ("ben", release()), ("cat", correct())):
        write(tmp_path / "class", student, nb)
    parts = []
    for k in (1, 2):
        settings = batch.Settings(jobs=1, shard=(k, 2), db=tmp_path / "unused.db",
                                  scratch_parent=short_root)
        batch.grade_class(tmp_path / "class", tmp_path / f"part{k}", settings)
        parts.append(tmp_path / f"part{k}")
    assert not (tmp_path / "unused.db").exists()  # shards leave the gradebook to merge
    db = tmp_path / "gradebook.db"
    assert cli.main(["merge", str(tmp_path / "out"), *map(str, parts),
                     "--gradebook", str(db)]) == 0
    rows = read_grades(tmp_path / "out")
    assert {s: r["score"] for s, r in rows.items()} == {"ann": "2", "ben": "0", "cat": "2"}
    with Gradebook(f"sqlite:///{db}") as gb:
        assert gb.find_submission(CHAPTER, "cat").score == 2.0
    assert (tmp_path / "out" / "feedback" / "ben" / f"{CHAPTER}.html").exists()


@pytest.mark.slow
def test_a_download_with_bad_members_grades_every_other_student_and_names_them(tmp_path,
                                                                               short_root):
    honest = {f"{name}_{uid}_{9000 + uid}_{CHAPTER}.ipynb": nbformat.writes(correct())
              for name, uid in (("kimjo", 4001), ("leebo", 2001))}
    download = bad_members_zip(tmp_path / "canvas.zip", honest)
    graded = subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(download), str(tmp_path / "out"),
         "--jobs", "1", "--gradebook", str(tmp_path / "gradebook.db")],
        cwd=ROOT, env=dict(os.environ, TMPDIR=str(short_root)), capture_output=True, text=True,
        timeout=600)
    assert graded.returncode == 0, graded.stderr[-3000:]
    rows = read_grades(tmp_path / "out")
    assert {s: r["score"] for s, r in rows.items()} == {"kimjo_4001": "2", "leebo_2001": "2"}
    for member, reason in BAD_MEMBERS.items():
        assert f"skipped {member}: " in graded.stderr and reason in graded.stderr, member


def _run_folders(root: Path) -> list[Path]:
    return sorted(root.glob(f"{scratch.PREFIX}*"))


def _processes_mentioning(text: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if text in " ".join(p.info["cmdline"] or [])]


@pytest.mark.slow
def test_a_run_killed_mid_batch_is_cleaned_up_by_the_next(tmp_path, short_root, capsys):
    write(tmp_path / "slow", "loops", _looping())
    root = short_root
    killed = subprocess.Popen(
        [sys.executable, "-m", "grader", "grade", str(tmp_path / "slow"), str(tmp_path / "o1"),
         "--jobs", "1", "--cell-timeout", "60", "--gradebook", str(tmp_path / "g1.db")],
        cwd=ROOT, env=dict(os.environ, TMPDIR=str(root)), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    # the submission's data is written for its scoring kernel: it is being graded
    while not list(root.glob(f"{scratch.PREFIX}*/r*/submission.json")):
        assert killed.poll() is None and time.monotonic() < deadline, "grading never started"
        time.sleep(0.5)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    [left] = _run_folders(root)
    time.sleep(2)  # the kernel dies with its parent (SIGKILL on the parent's death)
    assert _processes_mentioning(left.name) == []
    write(tmp_path / "class", "ann", correct())
    settings = batch.Settings(jobs=1, db=tmp_path / "g2.db", scratch_parent=root)
    batch.grade_class(tmp_path / "class", tmp_path / "o2", settings)
    assert f"removed {left}" in capsys.readouterr().err
    assert _run_folders(root) == []
    assert read_grades(tmp_path / "o2")["ann"]["score"] == "2"


def _looping():
    """An answer cell that never finishes when the grader defines it."""
    nb = correct()
    answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = "while True:\n    pass\n" + answer.source
    return nb


@pytest.fixture(scope="module")
def unsandboxed_into_an_older_gradebook(tmp_path_factory):
    """One submission graded without the sandbox, into a gradebook that holds chapter 00
    graded with other test cells than it has now."""
    folder = tmp_path_factory.mktemp("changed")
    db = folder / "gradebook.db"
    with Gradebook(f"sqlite:///{db}") as gb:
        gb.add_assignment(CHAPTER)
        gb.add_notebook(CHAPTER, CHAPTER)
        gb.add_grade_cell("an-old-test", CHAPTER, CHAPTER, max_score=1, cell_type="code")
        gb.add_student("someone")
        gb.add_submission(CHAPTER, "someone")
    write(folder / "class", "ann", correct())
    root = Path(tempfile.mkdtemp(prefix="grading-test-"))
    settings = batch.Settings(jobs=1, sandbox=False, db=db, scratch_parent=root)
    result = batch.grade_class(folder / "class", folder / "out", settings)
    root.rmdir()
    return result, folder / "out"


@pytest.mark.slow
def test_a_gradebook_that_refuses_keeps_the_grades_and_says_what_to_do(
        unsandboxed_into_an_older_gradebook):
    result, out = unsandboxed_into_an_older_gradebook
    assert read_grades(out)["ann"]["score"] == "2"
    assert (out / "feedback" / "ann" / f"{CHAPTER}.html").exists()
    assert "python -m grader merge" in result.gradebook_error
    assert json.loads((out / "results.json").read_text())["outcomes"][0]["score"] == 2.0


@pytest.mark.slow
def test_a_batch_without_the_sandbox_says_so_in_the_notes(unsandboxed_into_an_older_gradebook):
    _, out = unsandboxed_into_an_older_gradebook
    notes = json.loads((out / "notes.json").read_text())
    assert "without the sandbox" in " ".join(notes["batch"])


# Python imports sitecustomize from PYTHONPATH at start-up: a real environment that breaks one
# kernel (the second student's kernel to start) or every kernel's commlab.
BREAKS_THE_SECOND_KERNEL = '''\
import os, sys
if any("ipykernel_launcher" in arg for arg in sys.orig_argv) and \\
        os.path.basename(os.getcwd()).startswith("k"):
    count = os.path.join(os.path.dirname(__file__), "kernels")
    started = len(open(count).read()) if os.path.exists(count) else 0
    open(count, "a").write("k")
    if started == 1:
        raise SystemExit("simulated broken environment")
'''
BREAKS_COMMLAB_IN_KERNELS = '''\
import os, sys
if any("ipykernel_launcher" in arg for arg in sys.orig_argv):
    os.environ["COMMLAB_WORKER"] = "1"  # commlab.run then refuses to start ranks
'''
# ... or reports, as the grader's own process ends, whether it ever imported torch
REPORTS_TORCH_IN_THE_GRADER = '''\
import atexit, sys
if sys.orig_argv[1:3] == ["-m", "grader"]:
    atexit.register(lambda: print("the grader's process imported torch:",
                                  "torch" in sys.modules, file=sys.stderr))
'''


def _grade_with(tmp_path: Path, short_root: Path, site: str, students: list[str],
                *flags: str) -> subprocess.CompletedProcess:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(site)
    for student in students:
        write(tmp_path / "class", student, correct())
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), TMPDIR=str(short_root))
    # without the sandbox: it would hide the folder of sitecustomize from the kernels
    return subprocess.run(
        [sys.executable, "-m", "grader", "grade", str(tmp_path / "class"), str(tmp_path / "out"),
         "--jobs", "1", "--no-sandbox", "--gradebook", str(tmp_path / "gradebook.db"), *flags],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_kernel_that_cannot_start_stops_the_batch_in_plain_words_and_keeps_what_was_graded(
        tmp_path, short_root):
    # students' kernels start only for fresh outputs
    done = _grade_with(tmp_path, short_root, BREAKS_THE_SECOND_KERNEL, ["ann", "ben"],
                       "--fresh-outputs")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr, done.stderr
    assert "Grading stopped: a student's kernel" in done.stderr
    assert "simulated broken environment" in done.stderr  # the end of its log
    assert "What to try" in done.stderr and "not graded: 1" in done.stderr
    # a plain folder says no time it was handed in, and there is no due date: no late mark
    assert read_grades(tmp_path / "out") == {"ann": {"student": "ann", "chapter": CHAPTER,
                                               "score": "2", "max_score": "2",
                                               "status": "graded", "submitted": "",
                                               "late": "", "notes": ""}}
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        assert gb.find_submission(CHAPTER, "ann").score == 2.0


@pytest.mark.slow
def test_a_failed_warm_up_is_reported(tmp_path, short_root):
    done = _grade_with(tmp_path, short_root, BREAKS_COMMLAB_IN_KERNELS, ["ann"])
    assert done.returncode == 1
    assert "could not run a function on two ranks" in done.stderr, done.stderr
    assert "commlab.run was called inside a rank" in done.stderr


@pytest.mark.slow
def test_the_graders_own_process_grades_without_importing_torch(tmp_path, short_root):
    # it reads notebooks with the grading rule (commlab.cells) and decides with nbgrader: torch
    # is for the scoring kernel and the ranks, and its import is 2 s of every `make grade`
    done = _grade_with(tmp_path, short_root, REPORTS_TORCH_IN_THE_GRADER, ["ann"])
    assert done.returncode == 0, done.stderr
    assert read_grades(tmp_path / "out")["ann"]["score"] == "2"
    assert "the grader's process imported torch: False" in done.stderr, done.stderr


def test_out_and_the_gradebook_folder_must_be_writable_before_anything_is_graded(tmp_path,
                                                                               capsys):
    write(tmp_path / "class", "ann", correct())
    (tmp_path / "a-file").write_text("not a folder")
    for out, db in ((tmp_path / "a-file" / "out", tmp_path / "gradebook.db"),
                    (tmp_path / "out", tmp_path / "a-file" / "gradebook.db")):
        code = cli.main(["grade", str(tmp_path / "class"), str(out), "--gradebook", str(db)])
        assert code == 2
        assert "Nothing was graded" in capsys.readouterr().err
    assert not (tmp_path / "out" / "grades.csv").exists()


# --- merge refuses slices that cannot make one class --------------------------------------------

def _slices(tmp_path: Path, n: int, students: list[str], name: str = "part") -> list[Path]:
    """The OUT folders of n slices of a class of ``students`` (chapter 00), as grading writes
    them, without grading: what merge reads."""
    from grader.trusted import gradebook
    from grader.trusted.verdict import Outcome, Status

    grid = [(s, CHAPTER) for s in students]
    folders = []
    for k in range(1, n + 1):
        keys = batch.shard_of(grid, (k, n))
        outcomes = [Outcome(s, c, 2.0, 2.0, Status.GRADED, cells={"00-whoami-test": 1.0,
                                                                  "00-join-group-test": 1.0})
                    for s, c in keys]
        folder = tmp_path / f"{name}{k}"
        for o in outcomes:
            page = folder / "feedback" / o.student / f"{CHAPTER}.html"
            page.parent.mkdir(parents=True)
            page.write_text(f"feedback of {o.student}")
            o.feedback = page
        gradebook.write_sheets(folder, outcomes, [], gradebook.Slice.of(grid, keys, k, n))
        folders.append(folder)
    return folders


def _merge(tmp_path: Path, parts: list[Path], *flags: str) -> int:
    return cli.main(["merge", str(tmp_path / "out"), *map(str, parts),
                     "--gradebook", str(tmp_path / "gradebook.db"), *flags])


def _missing(parts):
    return parts[:2]


def _same_folder_twice(parts):
    return parts + [parts[1]]


def _same_slice_twice(parts):
    copy = parts[1].with_name("copy-of-2")
    shutil.copytree(parts[1], copy)
    return parts + [copy]


def _never_finished(parts):
    (parts[2] / "results.json").unlink()
    return parts


def _stopped(parts):
    (parts[0] / ".grading-unfinished").write_text("grading started\n")
    return parts


@pytest.mark.parametrize("damage, words", [
    (_missing, "Slice 3 of 3 is missing."),
    (_same_folder_twice, "is given twice."),
    (_same_slice_twice, "Slice 2/3 is given twice"),
    (_never_finished, "there is no results.json"),
    (_stopped, "was stopped before it finished"),
])
def test_merge_refuses_slices_that_do_not_make_one_class(tmp_path, capsys, damage, words):
    parts = damage(_slices(tmp_path, 3, ["ann", "ben", "cat", "dan"]))
    assert _merge(tmp_path, parts) == 2
    err = capsys.readouterr().err
    assert words in err and "Nothing was merged" in err
    assert not (tmp_path / "out" / "grades.csv").exists()
    assert not (tmp_path / "gradebook.db").exists()


def test_merge_refuses_a_slice_of_another_class(tmp_path, capsys):
    ours = _slices(tmp_path, 2, ["ann", "ben", "cat"])
    theirs = _slices(tmp_path, 2, ["zoe", "yan"], name="other")
    assert _merge(tmp_path, [ours[0], theirs[1]]) == 2
    assert "of another grading" in capsys.readouterr().err


@pytest.mark.slow
def test_merge_takes_what_is_there_when_asked_and_stands_on_its_own(tmp_path, capsys):
    parts = _slices(tmp_path, 3, ["ann", "ben", "cat", "dan"])
    assert _merge(tmp_path, [parts[0], parts[1], parts[1]], "--partial") == 0
    assert "warning: Slice 3 of 3 is missing." in capsys.readouterr().err
    rows = read_grades(tmp_path / "out")
    assert sorted(rows) == sorted(s for s, _ in batch.shard_of(
        [(s, CHAPTER) for s in ["ann", "ben", "cat", "dan"]], (1, 3)) + batch.shard_of(
        [(s, CHAPTER) for s in ["ann", "ben", "cat", "dan"]], (2, 3)))
    for part in parts:
        shutil.rmtree(part)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    for outcome in results["outcomes"]:
        assert Path(outcome["feedback"]).read_text() == f"feedback of {outcome['student']}"


def test_the_no_namespace_advice_fits_where_the_grader_runs(monkeypatch):
    from grader.sandboxed import namespaces as sandbox

    monkeypatch.delenv(sandbox.IN_IMAGE, raising=False)
    outside = sandbox.not_available_message()
    assert '--build-arg UID="$(id -u)"' in outside and "--gradebook /grades/gradebook.db" in outside
    monkeypatch.setenv(sandbox.IN_IMAGE, "1")
    inside = sandbox.not_available_message()
    assert "This is the instructor image" in inside and "docker build" not in inside


def test_the_later_chapters_are_graded_first_each_chapters_students_in_order(tmp_path):
    subs = [intake.Submission(student, chapter, tmp_path, "")
            for student in ("ann", "ben") for chapter in ("00_a", "17_z", "09_m")]
    assert [(s.chapter, s.student) for s in batch.longest_first(subs)] == [
        ("17_z", "ann"), ("17_z", "ben"), ("09_m", "ann"), ("09_m", "ben"), ("00_a", "ann"),
        ("00_a", "ben")]


def test_the_rank_hosts_preload_dynamo_only_for_a_batch_with_a_chapter_that_needs_it():
    preload = scoring_kernel.PRELOAD
    assert processes.DYNAMO in processes.for_chapters(preload,
                                                      ["01_broadcast", "17_sharded_training"])
    assert processes.DYNAMO in processes.for_chapters(preload, None)  # chapters not known
    without = processes.for_chapters(preload, ["01_broadcast", "05_reduce"])
    assert without == [name for name in preload if name != processes.DYNAMO]
    # the collector off for all the imports, and on again once what they made is frozen
    assert (preload[0], preload[-1]) == ("commlab.preload_start", processes.MEMORY)
