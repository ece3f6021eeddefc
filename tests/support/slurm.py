"""A one-node Slurm cluster in a scratch folder, for the grader's Slurm recipe: munge and Slurm's
daemons from Debian's packages (slurmctld, slurmd, slurm-client, munge), started by hand, with
their configuration, state, sockets and logs in the folder, on ports of their own. Nothing
outside the folder is read or changed but the daemons' processes, which stop with the cluster.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from support.containers import free_port

PROGRAMS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")


def why_not() -> str | None:
    """Why a cluster cannot be set up here, or None."""
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path(f"/usr/sbin/{p}")
               .exists()]
    if missing:
        return (f"Slurm or munge is not installed ({', '.join(missing)} missing): on Debian, "
                "apt-get install slurmctld slurmd slurm-client munge (.ci/run does)")
    if os.geteuid() != 0:
        return "Slurm's daemons run as root here, and this user is not root"
    return None


def _program(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class Cluster:
    """One node (this machine, all its CPUs), one partition, no accounting."""

    def __init__(self, folder: Path, cpus: int, memory_mb: int):
        self.folder, self.cpus, self.memory_mb = folder, cpus, memory_mb
        self.node = socket.gethostname().split(".")[0]
        self.daemons: list[subprocess.Popen] = []
        self.munge_socket = folder / "munge" / "socket"

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need to reach this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.folder / "slurm.conf"))

    def start(self) -> Cluster:
        (self.folder / "munge").mkdir(mode=0o700, parents=True)
        for name in ("state", "spool"):
            (self.folder / name).mkdir()
        key = self.folder / "munge" / "key"
        subprocess.run([_program("mungekey"), "-c", "-k", str(key)], check=True)
        munge = self.folder / "munge"
        self.daemons.append(subprocess.Popen(
            [_program("munged"), "-F", "-f", f"--socket={self.munge_socket}",
             f"--key-file={key}", f"--log-file={munge / 'log'}",
             f"--pid-file={munge / 'pid'}", f"--seed-file={munge / 'seed'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self._wait_for(self.munge_socket.exists, "munged to create its socket")
        (self.folder / "slurm.conf").write_text(self._config())
        conf = str(self.folder / "slurm.conf")
        for command in ([_program("slurmctld"), "-D", "-i", "-f", conf],
                        [_program("slurmd"), "-D", "-f", conf, "-N", self.node]):
            self.daemons.append(subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env))
        self._wait_for(self._node_idle, "the node to join the cluster")
        return self

    def _config(self) -> str:
        f = self.folder
        return "\n".join([
            "ClusterName=commlabtest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            f"StateSaveLocation={f / 'state'}", f"SlurmdSpoolDir={f / 'spool'}",
            f"SlurmctldPidFile={f / 'slurmctld.pid'}", f"SlurmdPidFile={f / 'slurmd.pid'}",
            f"SlurmctldLogFile={f / 'slurmctld.log'}", f"SlurmdLogFile={f / 'slurmd.log'}",
            # no cgroups here: Slurm tracks processes by their parents, binds no CPUs
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU_Memory",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "MpiDefault=none", "ReturnToService=2",
            f"DefMemPerCPU={self.memory_mb // self.cpus}",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} "
            f"RealMemory={self.memory_mb} State=UNKNOWN",
            f"PartitionName=grading Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
            ""])

    def _node_idle(self) -> bool:
        done = subprocess.run([_program("sinfo"), "-h", "-o", "%t"], env=self.env,
                              capture_output=True, text=True)
        return done.returncode == 0 and done.stdout.strip() == "idle"

    @staticmethod
    def _wait_for(ready, what: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {seconds:.0f} s for {what}")
            time.sleep(0.3)

    def job_state(self, job: str) -> str:
        """``COMPLETED``, ``RUNNING``, ``PENDING``, ``CANCELLED``, ``FAILED``, ... of a job (an
        array: its tasks' states, space-separated)."""
        done = subprocess.run([_program("scontrol"), "show", "job", job, "-o"], env=self.env,
                              capture_output=True, text=True)
        return " ".join(part.split("=", 1)[1] for line in done.stdout.splitlines()
                        for part in line.split() if part.startswith("JobState="))

    def wait_for_jobs(self, *jobs: str, seconds: float = 900) -> dict[str, str]:
        """Wait until no task of ``jobs`` is pending or running; their final states."""
        busy = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
        self._wait_for(lambda: not any(state in self.job_state(job) for job in jobs
                                       for state in busy),
                       f"jobs {', '.join(jobs)} to end", seconds)
        return {job: self.job_state(job) for job in jobs}

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.send_signal(signal.SIGTERM)
        for daemon in self.daemons:
            try:
                daemon.wait(20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
