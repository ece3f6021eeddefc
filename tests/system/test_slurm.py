"""The Slurm recipe of docs/instructors.md, as written there, on a real one-node cluster (Debian's
Slurm and munge, set up in a scratch folder): a job array grades a class in slices, a merge job
runs once every task has succeeded; twice in a row in the same course folder; then a killed task
and a slice given twice, which merge refuses.

Scaled to this machine: two tasks of one CPU each (slices of two students and one), on two CPUs.
Skipped, with the reason, where Slurm cannot be installed and started (not root, not Debian); CI
installs it.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from nbgrader.api import Gradebook

from support import slurm
from support.class_factory import correct, release, write
from support.course_copy import ROOT, VENV, tracked_copy

pytestmark = pytest.mark.skipif(slurm.why_not() is not None, reason=str(slurm.why_not()))

CHAPTER = "01_broadcast"
CLASS = {"ann": correct(CHAPTER), "ben": release(CHAPTER), "cat": correct(CHAPTER)}
SCORES = {"ann": "4", "ben": "0", "cat": "4"}
# the recipe's sizes for a big cluster -> this machine's
SCALED = {"--array=1-8": "--array=1-2", "--cpus-per-task=16": "--cpus-per-task=1",
          "--mem=64G": "--mem=3G"}


def documented_recipe() -> str:
    """The Slurm commands of docs/instructors.md (the code block that submits
    grader/slurm/grade.sbatch), scaled to this machine."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / "instructors.md").read_text(),
                        re.S)
    [block] = [b for b in blocks if "grader/slurm/grade.sbatch" in b]
    for big, small in SCALED.items():
        assert block.count(big) == 1, f"docs/instructors.md's recipe no longer says {big}"
        block = block.replace(big, small)
    return block


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    memory_mb = int(psutil.virtual_memory().available * 0.6) // 2**20
    started = slurm.Cluster(tmp_path_factory.mktemp("slurm"), psutil.cpu_count(),
                            memory_mb).start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    root = tracked_copy(tmp_path_factory.mktemp("course"))
    (root / ".venv").symlink_to(VENV, target_is_directory=True)
    for student, notebook in CLASS.items():
        write(root / "class", student, notebook, CHAPTER)
    return root


def submit(course: Path, cluster: slurm.Cluster) -> tuple[str, str]:
    """Run the documented commands in the course's root; the array's and the merge's job ids."""
    done = subprocess.run(["bash", "-euo", "pipefail", "-c",
                           documented_recipe() + 'echo "array job $array"\n'],
                          cwd=course, env=cluster.env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    array = re.search(r"array job (\d+)", done.stdout).group(1)
    merge = re.search(r"Submitted batch job (\d+)", done.stdout).group(1)
    return array, merge


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "grades.csv") as sheet:
        return list(csv.DictReader(sheet))


def _log(course: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                     for p in sorted(course.glob("slurm-*.out")))


@pytest.fixture(scope="module")
def two_runs(course, cluster):
    """The recipe run twice in a row; after each, what grades/ held."""
    runs = []
    for _ in range(2):
        began = time.monotonic()
        array, merge = submit(course, cluster)
        states = cluster.wait_for_jobs(array, merge)
        seconds = time.monotonic() - began
        print(f"\nSlurm recipe: array and merge done in {seconds:.0f} s: {states}")
        runs.append((states, _rows(course / "grades"), _log(course)))
        shutil.move(course / "grades", course / f"grades-run{len(runs)}")
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("run", [0, 1])
def test_the_array_and_the_merge_grade_every_student_once(two_runs, run):
    states, rows, log = two_runs[run]
    assert set(" ".join(states.values()).split()) == {"COMPLETED"}, log
    assert sorted((r["student"], r["score"], r["status"]) for r in rows) == sorted(
        (student, score, "graded") for student, score in SCORES.items()), log


@pytest.mark.slow
def test_the_gradebook_and_feedback_stand_on_their_own(course, two_runs):
    with Gradebook(f"sqlite:///{course / 'grader' / 'gradebook.db'}") as gb:
        scores = {s.student.id: s.score for s in gb.assignment_submissions(CHAPTER)}
    assert scores == {student: float(score) for student, score in SCORES.items()}
    shutil.rmtree(course / "parts")
    for student in CLASS:
        page = course / "grades-run2" / "feedback" / student / f"{CHAPTER}.html"
        assert "broadcast" in page.read_text()


def _merge(course: Path, *parts: str) -> subprocess.CompletedProcess:
    return subprocess.run([".venv/bin/python", "-m", "grader", "merge", "grades/", *parts],
                          cwd=course, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_killed_task_and_a_doubled_slice_are_refused(course, cluster, two_runs):
    array, merge = submit(course, cluster)
    marker = course / "parts" / "1" / ".grading-unfinished"
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert time.monotonic() < deadline, _log(course)
        time.sleep(0.2)
    subprocess.run(["scancel", f"{array}_1"], env=cluster.env, check=True)
    states = cluster.wait_for_jobs(array, merge)
    assert "CANCELLED" in states[merge], states  # the merge never runs on a failed slice
    killed = _merge(course, "parts/1", "parts/2")
    assert killed.returncode == 2, killed.stdout + killed.stderr
    assert "parts/1: its grading run was stopped before it finished" in killed.stderr
    shutil.copytree(course / "parts" / "2", course / "parts" / "2-again")
    doubled = _merge(course, "parts/2", "parts/2-again")
    assert doubled.returncode == 2, doubled.stdout + doubled.stderr
    assert "Slice 2/2 is given twice: parts/2 and parts/2-again." in doubled.stderr
    assert "Slice 1 of 2 is missing." in doubled.stderr
    assert not (course / "grades").exists()
