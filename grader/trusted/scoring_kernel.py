"""Inside the scoring kernel: the stand-ins for a submission's answers, and the rank host where
its tests' ranks run.

The grader runs, for each submission, the instructor's notebook in this kernel (see
:mod:`grader.trusted.scoring_notebook`): first :func:`begin`, which reads the submission's answers
and sends every ``commlab.run`` of this kernel to a fresh rank host in the sandbox; then, for
each answer cell, :func:`answer` stand-ins; then the test cells as the instructor wrote them, each
after :func:`testing`; then :func:`end`.
This kernel decides every score and runs no line of the student's code: the ranks do, and what
they send back is read as data (:mod:`grader.wire`).
"""

from __future__ import annotations

import json
import multiprocessing
import pickle
import sys
from pathlib import Path
from typing import Any

from commlab import checks, launch, processes
from commlab.errors import CollectiveTimeout, CommlabError
from commlab.result import RunResult
from commlab.watch import STARTUP_LIMIT

from .. import wire
from ..sandboxed import namespaces, rankhost
from . import evidence, stand_ins

# What the forkserver imports once, so that each rank host, and every rank it forks, starts with
# it loaded: what commlab's ranks preload, and the host's own modules.
# torch._dynamo among them only where a chapter this kernel grades needs it (:func:`warm_up`).
# commlab.preload_memory stays last: it freezes what all of them made.
PRELOAD = [*[name for name in processes.PRELOAD if name != processes.MEMORY], "psutil",
           "commlab.launch", "commlab.checks", "commlab.timeline", "grader.sandboxed.rankhost",
           processes.MEMORY]
_preload = PRELOAD
# Seconds a rank host may take to start (fork, enter the sandbox) before grading gives up on it.
HOST_START_LIMIT = 60.0
# Past the run's own timeout and the ranks' start, how long to wait for the host's answer.
REPLY_GRACE = 30.0


class RankHost:
    """The scoring kernel's side of one rank host (see :mod:`grader.sandboxed.rankhost`)."""

    def __init__(self, plan: namespaces.Plan | None):
        self.plan = plan
        self.process: Any = None
        self.connection: Any = None

    def start(self) -> None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(_preload)
        processes._start_forkserver_quietly()
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(target=rankhost.serve, args=(theirs, self.plan),
                                  daemon=True, name="commlab-rank-host")
        try:
            with processes._main_module_hidden():
                process.start()
        finally:
            theirs.close()
        self.process, self.connection = process, ours
        reply = self._reply(HOST_START_LIMIT, "start")
        if reply != rankhost.READY:
            self.stop()
            failure = wire.decode(reply)
            raise CommlabError(f"The sandbox for the ranks could not be set up: {failure}")

    def launch(self, payload: bytes, world_size: int, *, private: list[bytes] | None = None,
               **options: Any) -> RunResult:
        """``commlab.run`` of this kernel, done by the host (see commlab.launch). The ranks'
        private inputs go to the host only once it has forked the ranks, when it asks."""
        if self.process is None:
            self.start()
        limit = options["timeout"] + STARTUP_LIMIT + REPLY_GRACE
        try:
            self.connection.send_bytes(pickle.dumps(
                (payload, world_size, {**options, "private": private is not None})))
            reply = self._reply(limit, "answer")
            if reply == rankhost.PRIVATE_PLEASE and private is not None:
                self.connection.send_bytes(pickle.dumps(list(private)))
                reply = self._reply(limit, "answer")
        except BaseException:
            self.stop()  # interrupted, or the host is gone: the next launch gets a new one
            raise
        outcome = wire.decode(reply)
        if isinstance(outcome, BaseException):
            raise outcome
        if outcome.world_size != world_size or any(
                len(part) != world_size for part in (outcome.returns, outcome.stdout,
                                                     outcome.stderr, outcome.trace)):
            raise CommlabError(f"The ranks' host answered for {outcome.world_size} ranks, not "
                               f"the {world_size} it was asked to start.")
        return outcome

    def launch_own(self, fn: Any, world_size: int, *, args: tuple = (), timeout: float,
                   init_process_group: bool = True) -> RunResult:
        """A launch of the grader's own ``fn`` (a replay): the host tidies its ranks rather
        than sealing them, as no code of the submission runs there."""
        return self.launch(launch._pickle_function(fn, args), world_size, backend="gloo",
                           timeout=timeout, init_process_group=init_process_group,
                           debug=False, trace_values=True, grader_code=True)

    def _reply(self, seconds: float, what: str) -> bytes:
        if not self.connection.poll(seconds):
            raise CollectiveTimeout(
                f"The ranks' host did not {what} within {seconds:.0f} s; it was stopped.", {},
                None)
        try:
            return self.connection.recv_bytes(wire.MAX_BYTES)
        except (EOFError, OSError) as exc:
            raise CommlabError(f"The ranks' host stopped before it could {what} "
                               f"({type(exc).__name__}).") from None

    def stop(self) -> None:
        if self.process is None:
            return
        self.connection.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(10)
        self.process.close()
        self.process = self.connection = None


_book: stand_ins.Book | None = None
_host: RankHost | None = None
# checks every test case's result against the network's count; its replays are kept for the
# next submissions, whose correct answers make the same calls
_evidence = evidence.Evidence()


def _plan(data: dict | None) -> namespaces.Plan | None:
    return namespaces.plan_from_data(data)


def warm_up(plan: dict | None, chapters: list[str] | None = None) -> None:
    """Start the forkserver and run one function on two ranks through a rank host, as every
    test will; raise if that does not work. ``chapters``: those this kernel will grade (None:
    any), whose ranks decide whether the forkserver preloads ``torch._dynamo``
    (:data:`commlab.processes.DYNAMO_CHAPTERS`)."""
    global _preload
    _preload = processes.for_chapters(PRELOAD, chapters)
    host = RankHost(_plan(plan))
    try:
        launch.launch_elsewhere(host.launch)
        done = launch.run(rankhost.every_rank_answers, 2, backend="gloo")
        if done.returns != [0, 1]:
            raise CommlabError(f"a warm-up run returned {done.returns}, not [0, 1]")
    finally:
        launch.launch_elsewhere(None)
        host.stop()


_kernel_names: set[str] | None = None  # the namespace before any submission


def _forget_previous_submission() -> None:
    """Remove from the kernel's namespace every name a previous submission's cells defined."""
    global _kernel_names
    namespace = vars(sys.modules["__main__"])
    if _kernel_names is None:
        _kernel_names = set(namespace)
    for name in set(namespace) - _kernel_names - {"__scorer__"}:
        del namespace[name]


def begin(submission: str) -> None:
    """Take the submission written at ``submission`` (the pieces the grading rule takes, the
    sandbox's plan)."""
    global _book, _host
    _forget_previous_submission()
    data = json.loads(Path(submission).read_text())
    _book = stand_ins.Book([tuple(piece) for piece in data["pieces"]], data["cuts"],
                           set(data.get("shared", [])))
    _host = RankHost(_plan(data["plan"]))
    launch.launch_elsewhere(_host.launch)
    _evidence.launch_own = _host.launch_own
    checks.VERIFY = _evidence
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        shell.events.register("pre_execute", _book.forget_bundle)


def answers_defined() -> None:
    """Before the first test: the answers, defined once on one rank (see
    :func:`stand_ins.define_first`); if that fails, every later test fails at once."""
    if _book is None:
        raise RuntimeError("begin() first")
    try:
        stand_ins.define_first(_book)
    except (stand_ins.AnswersEndedTheirProcess, stand_ins.AnswersDidNotFinish) as exc:
        launch.launch_elsewhere(_refuse(str(exc)))
        raise


def testing(grade_id: str) -> None:
    """The test cell ``grade_id`` comes next: its answers are what the cells above it define."""
    if _book is None:
        raise RuntimeError("begin() first")
    _book.testing(grade_id)


def _refuse(why: str):
    def launcher(*_: Any, **__: Any) -> RunResult:
        raise CommlabError(why)
    return launcher


def answer(grade_id: str, name: str) -> stand_ins.Answer:
    """The stand-in for ``name``, which the solution cell ``grade_id`` defines."""
    if _book is None:
        raise RuntimeError("begin() first")
    return stand_ins.Answer(_book, grade_id, name)


def end() -> None:
    """Stop the submission's rank host; forget its answers."""
    global _book, _host
    launch.launch_elsewhere(None)
    checks.VERIFY = None
    _evidence.launch_own = None
    if _host is not None:
        _host.stop()
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None and _book is not None:
        try:
            shell.events.unregister("pre_execute", _book.forget_bundle)
        except ValueError:
            pass
    _book = _host = None
