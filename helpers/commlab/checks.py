"""Checks for the chapters' test cells: every failure tells the student what was expected, on
which rank, in which case (world size, root, dtype, ...), and never shows a hidden test's source.

(Over 400 lines: it is the test cells' one API, and running cases and wording failures go together.)

A test cell states what every case must satisfy, then runs its cases; the cases of one world size
share one launch, so a cell with twenty hidden cases costs three launches, not twenty:

    def check_my_broadcast(result, src, shape, dtype):
        expected = checks.rank_tensor(src, shape, dtype)
        checks.expect_per_rank(result, [expected] * result.world_size,
                               what="the tensor after my_broadcast")
        checks.expect_not_used(result, "broadcast")

    checks.check_cases(broadcast_case, [checks.Case(3, src=2, shape=(4,), dtype=torch.float32)],
                       check_my_broadcast)

A case's keyword arguments (``src=2``) go to the case function and to the check, and name the
case in every failure message. :func:`run` runs one case on its own.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import hmac
import itertools
import linecache
import math
import os
import re
import secrets
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from . import control
from . import trace as tracing
from .errors import CollectiveTimeout, CommlabError
from .launch import run as _run
from .result import RunResult

# A hanging rank costs at most this much of nbgrader's 30 s cell timeout, and since the first
# failure ends the test cell, a cell never waits twice.
GRADING_TIMEOUT = 8.0

# torch's names for one operation (torch 2.13 renames the flat all-gather and reduce-scatter, and
# its deprecation warnings tell students to use the new names): a check that expects or forbids
# one of them means all of them.
ALIASES: tuple[tuple[str, ...], ...] = (
    ("all_gather_into_tensor", "all_gather_single", "_all_gather_base"),
    ("reduce_scatter_tensor", "reduce_scatter_single", "_reduce_scatter_base"),
)


def names_of(op: str) -> tuple[str, ...]:
    """``op`` and every other name torch has for it, ``op`` first."""
    for names in ALIASES:
        if op in names:
            return (op, *(name for name in names if name != op))
    return (op,)


def canonical(op: str) -> str:
    """One name for each operation, whichever of torch's names a call used: the first name of
    its :data:`ALIASES` entry (``"all_gather_single"`` -> ``"all_gather_into_tensor"``), else
    ``op`` itself. Key anything counted per kind of call by it."""
    for names in ALIASES:
        if op in names:
            return names[0]
    return op


class CheckFailed(AssertionError):
    """A test cell's expectation was not met; the message names the case it failed in."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows for it (in the notebook, Validate and the feedback): the reason
        first, without the frames of the course's own check code above it, then the line of
        the test cell it came from (a grader tells a hidden case's failure by that line)."""
        lines = f"{type(self).__name__}: {self}".splitlines()
        line = _cell_line(self.__traceback__)
        return lines + [f"(this test cell, line {line})"] if line is not None else lines


def _cell_line(tb: Any) -> int | None:
    """The line of the notebook cell where a traceback enters the cell's code (its first frame
    in a cell), or None outside IPython."""
    try:
        shell = get_ipython()  # type: ignore[name-defined]  # noqa: F821
    except NameError:
        return None
    while tb is not None:
        if shell.compile.format_code_name(tb.tb_frame.f_code.co_filename):
            return tb.tb_lineno
        tb = tb.tb_next
    return None


# --- a chapter's test helpers -----------------------------------------------------------------

# The course beside this package (helpers/commlab/ in it): each chapter's checks.py is in its
# release folder (notebooks/NN_name/, made from solutions/NN_name/ by nbgrader).
_HERE = os.path.dirname(os.path.abspath(__file__))
COURSE = os.path.dirname(os.path.dirname(_HERE))


def chapter_checks(chapter: str) -> str:
    """Where chapter ``chapter``'s test helpers are: the course's own copy, never the one in a
    student's work folder (which a student may edit)."""
    for folder in ("notebooks", "solutions"):
        path = os.path.join(COURSE, folder, chapter, "checks.py")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        f"The test helpers of chapter {chapter!r} are not in the course at {COURSE} "
        f"(notebooks/{chapter}/checks.py). Is the course's commlab installed from the course "
        "folder (make lab does it)?")


def test_helpers(chapter: str) -> None:
    """Define chapter ``chapter``'s test helpers (its case functions and checks, in the
    chapter's ``checks.py``) in the calling notebook's namespace, as if they stood in the test
    cell: the names they use are the notebook's (the student's answers, the chapter's own
    definitions), and they go to the ranks by value, as a cell's functions do."""
    path = chapter_checks(chapter)
    with open(path, encoding="utf-8") as file:
        tree = ast.parse(file.read(), path)
    if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(
            getattr(tree.body[0], "value", None), ast.Constant):
        tree.body = tree.body[1:]  # the module's docstring is not the notebook's
    exec(compile(tree, path, "exec"), sys._getframe(1).f_globals)  # noqa: S102


# --- cases ---------------------------------------------------------------------------------------

class Case:
    """One test case: ``world_size`` ranks run ``fn(rank, world_size, *args, **context)``.

    ``context`` (``src=2, dtype=torch.int64``) also goes to the check and names the case in
    failure messages; ``args`` are inputs too big or too dull to name (tensors, models).
    """

    def __init__(self, world_size: int, *, args: tuple = (), **context: Any):
        self.world_size, self.args, self.context = world_size, tuple(args), context

    @property
    def label(self) -> str:
        """``world_size=3, src=2, dtype=torch.int64``: how failure messages name the case."""
        return _words(self.world_size, self.context)

    def __repr__(self) -> str:
        return f"Case({self.label})"


@dataclasses.dataclass
class CaseResult(RunResult):
    """What one case did: ``returns``, ``stdout`` and ``trace`` are that case's only (call
    indices count from the case's first call), ``stderr`` and ``warnings`` those of its whole
    launch. ``context`` names the case; every ``expect_*`` check puts it in its messages."""

    context: dict[str, Any] = dataclasses.field(default_factory=dict)
    key: bytes = dataclasses.field(default=b"", repr=False)  # its launch's private inputs
    # a grader's count of the launch's network outside any case (before the first, after the
    # last): nothing may cross there
    outside: Any = dataclasses.field(default=None, repr=False)


def _words(world_size: int | None, context: dict[str, Any]) -> str:
    parts = [f"world_size={world_size}"] if world_size is not None else []
    return ", ".join(parts + [f"{key}={value!r}" for key, value in context.items()])


def context_words(world_size: int | None, context: dict[str, Any]) -> str:
    """`` (world_size=4, src=0)``: how a message names its case, after "On rank 0"."""
    words = _words(world_size, context)
    return f" ({words})" if words else ""


def case_context(result: RunResult, context: dict[str, Any]) -> dict[str, Any]:
    """The parameters that name ``result``'s case (a :class:`CaseResult`'s), with ``context``."""
    return {**getattr(result, "context", {}), **context}


def check_cases(fn: Callable[..., Any], cases: Iterable[Case], check: Callable[..., Any], *,
                timeout: float = GRADING_TIMEOUT, init_process_group: bool = True,
                backend: str = "gloo") -> None:
    """Run every case (see :func:`run_cases`), then ``check(result, *args, **context)`` each
    case in order; a failure in a check names its case."""
    cases = list(cases)
    results = run_cases(fn, cases, timeout=timeout, init_process_group=init_process_group,
                        backend=backend)
    for case, result in zip(cases, results):
        _check_case(check, result, case)


def run_cases(fn: Callable[..., Any], cases: Iterable[Case], *,
              timeout: float = GRADING_TIMEOUT, init_process_group: bool = True,
              backend: str = "gloo") -> list[CaseResult]:
    """Run every case, the cases of one world size in one launch; return their results.

    A case that raises, dies or hangs fails the test with that case's world size and context
    (each rank marks the case it starts, so a hang names the case it was in). Grading runs on
    gloo by default, so that a class is graded the same on every machine.
    """
    cases = list(cases)
    by_size: dict[int, list[int]] = {}
    for number, case in enumerate(cases):
        by_size.setdefault(case.world_size, []).append(number)
    results: dict[int, CaseResult] = {}
    for world_size, numbers in by_size.items():
        batch = [(n, cases[n].args, cases[n].context) for n in numbers]
        key = secrets.token_bytes(32)  # fresh private inputs for every launch
        try:
            launch = _run(_run_batch, world_size, args=(fn, batch), timeout=timeout,
                          init_process_group=init_process_group, backend=backend,
                          _private=[_rank_key(key, r) for r in range(world_size)])
        except CommlabError as err:
            number = _failed_case(err, numbers)
            raise CheckFailed(_hide_hidden_lines(
                _failure_words(cases[number], number, err))) from None
        split = _split(launch, cases, numbers, key)
        if VERIFY is not None:
            _verified([split[n] for n in numbers], [cases[n] for n in numbers])
        results.update(split)
    return [results[n] for n in range(len(cases))]


# Set by a grader in the kernel that decides the score: called with the results of one launch's
# cases, it checks what the ranks report against what the machine itself counted (their traffic
# on the network), and returns, for each case, None or what disagrees.
VERIFY: Callable[[list[CaseResult]], list[str | None]] | None = None


def _verified(results: list[CaseResult], cases: list[Case]) -> None:
    for case, problem in zip(cases, VERIFY(results)):
        if problem is not None:
            raise CheckFailed(_hide_hidden_lines(f"In the case ({case.label}): {problem}"))


def run(fn: Callable[..., Any], world_size: int, *, args: tuple = (),
        timeout: float = GRADING_TIMEOUT, init_process_group: bool = True,
        backend: str = "gloo", **context: Any) -> CaseResult:
    """``commlab.run`` for one test case: a rank that raises, dies or hangs fails the test with
    the world size and ``context`` in the message; ``fn`` gets ``args`` only. The private
    inputs it returns with (:func:`private_tensor`) are those of the rank functions' calls."""
    global _key
    result = run_cases(lambda rank, world_size, *a, **_: fn(rank, world_size, *a),
                       [Case(world_size, args=args, **context)], timeout=timeout,
                       init_process_group=init_process_group, backend=backend)[0]
    _key = result.key
    return result


# Written into a rank's stdout before each case: the launcher keeps what ranks print, even from
# a rank stopped in a hang, so the marks say which case each rank was in, and cut its output.
_MARK = re.compile(r"\x1fcase (\d+)\x1f")


def _run_batch(rank: int, world_size: int, fn: Callable[..., Any],
               batch: list[tuple[int, tuple, dict[str, Any]]]) -> list[tuple[int, Any, int, int]]:
    """On a rank: run the cases one after another; each case's value, and where its calls are
    in the rank's trace.

    Every rank starts a case once every rank finished the one before, through the launcher
    (:mod:`commlab.control`) rather than a collective: then a collective one rank skips in a
    case can never meet another rank's collective of the next case, and a hang stays in the case
    that caused it. A grader counts the network between these barriers, case by case.
    """
    recorder = tracing.current()
    done = []
    for number, args, context in batch:
        sys.stdout.write(f"\x1fcase {number}\x1f")
        sys.stdout.flush()
        control.barrier(f"{control.WINDOW}case {number}")
        if recorder is not None:
            recorder.restart_numbering()
            recorder.case = number
        first = len(recorder.calls) if recorder is not None else 0
        value = _copied(fn(rank, world_size, *args, **context))
        done.append((number, value, first, len(recorder.calls) if recorder is not None else 0))
    control.barrier(f"{control.WINDOW}cases done")
    return done


def _copied(value: Any) -> Any:
    """``value`` with its tensors copied: a later case must not change an earlier one's return."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_copied(v) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


def _split(launch: RunResult, cases: list[Case], numbers: list[int],
           key: bytes) -> dict[int, CaseResult]:
    """One launch's result cut into its cases'. A rank's reply that does not hold exactly the
    cases it was given, in order, fails the test (it is the rank's word, not the run's)."""
    if launch.world_size != cases[numbers[0]].world_size:
        raise CheckFailed(f"The run came back with {launch.world_size} ranks, not the "
                          f"{cases[numbers[0]].world_size} it was started with.")
    per_case: dict[int, dict[str, list]] = {n: {"returns": [], "stdout": [], "trace": [],
                                                "groups": []} for n in numbers}
    for rank in range(launch.world_size):
        outputs = _outputs_by_case(launch.stdout[rank])
        reply, calls = launch.returns[rank], launch.trace[rank]
        if not _well_formed(reply, numbers, len(calls)):
            raise CheckFailed(f"Rank {rank}'s reply does not hold the {len(numbers)} test "
                              "case(s) it was given, each once and in order: its code changed "
                              "what the test sends back.")
        for number, value, first, last in reply:
            parts = per_case[number]
            parts["returns"].append(value)
            parts["stdout"].append(outputs.get(number, ""))
            parts["trace"].append(_renumbered(calls[first:last]))
            made = launch.groups[rank] if rank < len(launch.groups) else []
            parts["groups"].append([dataclasses.replace(g, seq=g.seq - first) for g in made
                                    if g.case == number])
    network = _windows_by_case(launch.network, numbers)
    return {number: CaseResult(launch.world_size, launch.backend, parts["returns"],
                               parts["stdout"], list(launch.stderr), parts["trace"],
                               list(launch.warnings), network=network.get(number),
                               groups=parts["groups"], context=cases[number].context, key=key,
                               outside=network.get(None))
            for number, parts in per_case.items()}


def _well_formed(reply: Any, numbers: list[int], calls: int) -> bool:
    if not isinstance(reply, list) or len(reply) != len(numbers):
        return False
    bound = 0
    for number, entry in zip(numbers, reply):
        if not (isinstance(entry, tuple) and len(entry) == 4 and entry[0] == number):
            return False
        first, last = entry[2], entry[3]
        if not (type(first) is int and type(last) is int and bound <= first <= last <= calls):
            return False
        bound = last
    return True


def _windows_by_case(windows: Any, numbers: list[int]) -> dict[Any, list[dict]]:
    """The grader's count of the network: each case's windows (from its barrier to the next),
    and under None those before the first case and after the last."""
    if windows is None:
        return {}
    found: dict[Any, list[dict]] = {}
    for window in windows:
        opened = str(window["tags"][0]).removeprefix(control.WINDOW)
        current = int(opened.split()[1]) if opened.startswith("case ") else None
        found.setdefault(current, []).append(window)
    return {n: found.get(n, []) for n in [*numbers, None]}


def _outputs_by_case(stdout: str) -> dict[int, str]:
    pieces = _MARK.split(stdout)  # [before, number, output, number, output, ...]
    return {int(pieces[i]): pieces[i + 1] for i in range(1, len(pieces) - 1, 2)}


def _renumbered(calls: list[tracing.Call]) -> list[tracing.Call]:
    """The calls as a launch of this case alone would number them."""
    counts: dict[str, int] = {}
    out = []
    for seq, call in enumerate(calls):
        counts[call.op] = counts.get(call.op, 0) + 1
        out.append(dataclasses.replace(call, seq=seq, index=counts[call.op]))
    return out


def _cases_started(err: CommlabError) -> dict[int, int]:
    """rank -> the last case it had started when the launch failed."""
    result = getattr(err, "result", None)
    if result is None:
        return {}
    return {rank: int(found[-1]) for rank, out in enumerate(result.stdout)
            if (found := _MARK.findall(out))}


def _failed_case(err: CommlabError, numbers: list[int]) -> int:
    """The case the failure happened in: the earliest case a failing rank (or, in a hang, any
    rank) had started."""
    started = _cases_started(err)
    ranks = list(getattr(err, "failures", {})) or list(started)
    cases = [started[rank] for rank in ranks if rank in started]
    return min(cases) if cases else numbers[0]


# How a launch's message words a rank that was outside any call: a rank already waiting for the
# next case had finished the failed one.
_OUTSIDE = re.compile(r"(ranks? [\d, -]+?) ((?:is|are) still|stopped) running its own code, "
                      r"outside any collective(?: \(its last call: [^)]*\))?")


# What is left of a launch's "What the ranks printed" once the marks are gone, if nothing else.
_NOTHING_PRINTED = re.compile(r"\n\nWhat the ranks printed:\n(?:── rank \d+ ──\s*)+$")


def _rank_numbers(words: str) -> set[int]:
    ranks: set[int] = set()
    for part in words.split(" ", 1)[1].split(", "):
        low, _, high = part.partition("-")
        ranks.update(range(int(low), int(high or low) + 1))
    return ranks


def _failure_words(case: Case, number: int, err: CommlabError) -> str:
    started = _cases_started(err)
    ahead = {rank for rank, n in started.items() if n > number}

    def reword(match: re.Match) -> str:
        if _rank_numbers(match.group(1)) <= ahead:
            return f"{match.group(1)} had finished this case"
        return match.group(0)

    text = _OUTSIDE.sub(reword, _MARK.sub("", str(err)))  # the marks are ours, not the student's
    text = _NOTHING_PRINTED.sub("", text)
    what = "did not finish" if isinstance(err, CollectiveTimeout) else "failed"
    return (f"Your code {what} when run on {case.world_size} ranks"
            f"{context_words(None, case.context)}.\n{type(err).__name__}: {text}")


def _names(case: Case, text: str) -> bool:
    """Whether a message already names the case: its world size and every parameter."""
    return (f"world_size={case.world_size}" in text or f"{case.world_size} ranks" in text) and all(
        f"{key}={value!r}" in text for key, value in case.context.items())


def _check_case(check: Callable[..., Any], result: CaseResult, case: Case) -> None:
    """Run the cell's check on one case; any failure in it names the case."""
    global _key
    _key = result.key
    try:
        check(result, *case.args, **case.context)
    except AssertionError as err:
        text = str(err)
        if not _names(case, text):
            text = f"In the case ({case.label}): {text}"
        raise CheckFailed(_hide_hidden_lines(text)) from None
    except Exception as err:  # noqa: BLE001 - e.g. a return value of an unexpected kind
        raise CheckFailed(_hide_hidden_lines(
            f"Checking the case ({case.label}) failed: {type(err).__name__}: {err}. Check "
            "what your function returns and which calls it makes.")) from None


# --- the order of events across ranks -----------------------------------------------------------

# How many times late_rank was entered in this process: every rank enters it for the same cases
# in the same order, so the count names one use on all ranks (cases share a launch).
_late_rank_uses = itertools.count()


@contextlib.contextmanager
def late_rank(op: str, count: int, *, timeout: float = 3.0) -> Iterator[None]:
    """Around the answer inside a case function: the last rank starts the block only once every
    other rank has *started* ``count`` calls of ``dist.<op>`` (by any of its names) in it, or
    ``timeout`` seconds later.

    No collective can finish before the last rank makes it too, so a rank that waits for one
    call before it starts the next cannot start its second call before the last rank starts
    its first; a rank that starts every call, then waits, starts them all before. The trace
    tells the two apart by the order of events, whatever the machine's load: compare each
    rank's ``started`` times with the last rank's first call (the ranks of one machine share
    the clock). ``timeout``, counted once every rank has entered the block, only bounds how
    long a wrong answer holds the last rank back.
    """
    import torch.distributed as dist

    use = next(_late_rank_uses)
    recorder = tracing.current()
    if recorder is None or not control.in_rank() or not dist.is_initialized():
        yield
        return
    rank, last = dist.get_rank(), dist.get_world_size() - 1
    # first every rank gets here: a rank slow to start the case must not count against the answer
    control.barrier(f"late {use} entered")
    started = f"late {use} started"
    if rank == last:
        control.barrier(started, timeout)
        yield
        return
    names, first, done = set(names_of(op)), len(recorder.calls), threading.Event()

    def tell_when_started() -> None:
        while not done.is_set():
            # a call's start time is taken after it is listed: count the calls that have one
            if sum(call.op in names and call.started > 0
                   for call in recorder.calls[first:]) >= count:
                control.arrive(started)
                return
            done.wait(0.001)

    watcher = threading.Thread(target=tell_when_started, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


# --- never quote hidden tests ---------------------------------------------------------------

@functools.cache
def _hidden_blocks() -> re.Pattern:
    """The hidden-test blocks of a test cell, with nbgrader's own delimiters (nbgrader is loaded
    only when a check fails)."""
    from nbgrader.preprocessors import ClearHiddenTests

    begin = ClearHiddenTests.begin_test_delimeter.default_value
    end = ClearHiddenTests.end_test_delimeter.default_value
    return re.compile(rf"### {re.escape(begin)}\n(.*?)### {re.escape(end)}", re.S)


def _course_code(filename: str) -> bool:
    """commlab's own code, or a chapter's test helpers (its checks.py): not a test cell."""
    path = os.path.abspath(filename)
    return path.startswith(_HERE) or (
        os.path.basename(path) == "checks.py" and path.startswith(COURSE))


def _hide_hidden_lines(message: str) -> str:
    """``message`` without any line of the calling test cell's hidden tests (a rank's traceback
    quotes the lines it ran, and the feedback shows the message)."""
    frame = sys._getframe(1)
    while frame is not None and _course_code(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return message
    source = "".join(linecache.getlines(frame.f_code.co_filename))
    blocks = _hidden_blocks()
    hidden = {line.strip() for block in blocks.findall(source) for line in block.splitlines()}
    visible = {line.strip() for line in blocks.sub("", source).splitlines()}
    secret = {line for line in hidden - visible if line}
    if not secret:
        return message
    return "\n".join("    (a line of the hidden tests)" if line.strip() in secret else line
                     for line in message.splitlines())


# --- values --------------------------------------------------------------------------------------

def rank_tensor(rank: int, shape: tuple[int, ...] = (4,), dtype: torch.dtype = torch.float32
                ) -> torch.Tensor:
    """A tensor whose values say which rank made it: ``rank * 100 + 0, 1, 2, ...``.

    Complex dtypes get the same numbers as imaginary parts, so a swapped real and imaginary part
    shows too.
    """
    values = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) + 100 * rank
    if dtype.is_complex:
        return torch.complex(values, -values).to(dtype)
    return values.to(dtype)


# --- private inputs -------------------------------------------------------------------------------

# Every launch of run_cases draws a fresh key; each rank is sent only its own rank's key, derived
# from it (commlab.worker.PRIVATE). A case function makes its rank's inputs from that key, and
# the check makes every rank's from the launch's key: the right result on a rank then shows that
# the other ranks' data reached it, since it could not have made them itself.
_key: bytes | None = None  # in the notebook: the key of the launch whose case is being checked


def _rank_key(key: bytes, rank: int) -> bytes:
    return hmac.new(key, f"rank {rank}".encode(), hashlib.sha256).digest()


def _key_of(rank: int) -> bytes:
    from . import worker

    if worker.PRIVATE is not None:  # in a rank: its own inputs only
        own = int(os.environ.get("RANK", "-1"))
        if rank != own:
            raise CheckFailed(
                f"On rank {own}, checks.private_tensor/private_seed was asked for rank {rank}'s "
                "input. A rank can make only its own: what the other ranks hold has to reach "
                "it through torch.distributed.")
        return worker.PRIVATE
    if _key is None:
        raise RuntimeError("checks.private_tensor and private_seed give a rank's inputs inside "
                           "a test case (in its case function, or in the check of its result)")
    return _rank_key(_key, rank)


def private_seed(rank: int, *salt: Any) -> int:
    """A seed for ``torch.manual_seed`` or a ``torch.Generator`` that only ``rank`` knows (and
    the check): different on every test run, and for every ``salt`` (any values that tell this
    input from the rank's others, e.g. ``"model"``)."""
    digest = hmac.new(_key_of(rank), repr(salt).encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def private_generator(rank: int, *salt: Any) -> torch.Generator:
    """A ``torch.Generator`` seeded with :func:`private_seed`."""
    return torch.Generator().manual_seed(private_seed(rank, *salt))


def private_tensor(rank: int, shape: tuple[int, ...] = (4,), dtype: torch.dtype = torch.float32,
                   *salt: Any) -> torch.Tensor:
    """A tensor only ``rank`` can make (in a case function) and the check can make for any rank:
    whole numbers from 1 to 99 with random signs (exact sums and products), different on every
    test run. Complex dtypes get random imaginary parts as well."""
    generator = private_generator(rank, tuple(shape), str(dtype), *salt)
    count = math.prod(shape)

    def draw() -> torch.Tensor:
        sizes = torch.randint(1, 100, (count,), generator=generator, dtype=torch.int64)
        signs = torch.randint(0, 2, (count,), generator=generator, dtype=torch.int64) * 2 - 1
        return (sizes * signs).to(torch.float64).reshape(shape)

    if dtype.is_complex:
        return torch.complex(draw(), draw()).to(dtype)
    return draw().to(dtype)


# How far a floating-point result may be from the expected one (relative, absolute), by dtype.
# The tests' inputs are random on every run, and a rank adds and merges in another order than
# the check's one process: float32's rounding then reaches a few 1e-6 on values near 1 (ring
# attention's merged blocks, a tensor-parallel matmul's partial sums). These are
# torch.testing's own float32, float16 and bfloat16 tolerances; every mistake the tests look
# for (a missing rank, a sum for a mean, a wrong block) is off by far more.
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.complex64: (1e-5, 1e-5),
              torch.float16: (1e-3, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}
_TOLERANCE = (1e-5, 1e-6)  # float64, complex128, Python floats


def same(got: Any, expected: Any) -> bool:
    """Equal values of the same kind: tensors by shape, dtype and value (floating point within
    :data:`TOLERANCES`), lists, tuples and dicts item by item, anything else by ``==``."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or (
                got.dtype != expected.dtype):
            return False
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            rtol, atol = TOLERANCES.get(expected.dtype, _TOLERANCE)
            return bool(torch.allclose(got, expected, rtol=rtol, atol=atol))
        return bool(torch.equal(got, expected))
    if isinstance(expected, (list, tuple)):
        return (isinstance(got, (list, tuple)) and len(got) == len(expected)
                and all(same(g, e) for g, e in zip(got, expected)))
    if isinstance(expected, dict):
        return (isinstance(got, dict) and got.keys() == expected.keys()
                and all(same(got[k], expected[k]) for k in expected))
    if isinstance(expected, float) and isinstance(got, (int, float)):
        return math.isclose(got, expected, rel_tol=_TOLERANCE[0], abs_tol=_TOLERANCE[1])
    return bool(got == expected)


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value!r} (shape {tuple(value.shape)}, {str(value.dtype).replace('torch.', '')})"
    return repr(value)


# Values at most this big are shown whole in a failure message; in larger ones the message
# names the first item that differs and says how it differs.
_SHOWN_WHOLE = 300


def _shown_whole(value: Any) -> bool:
    return len(_show(value)) <= _SHOWN_WHOLE


def _kind(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).replace("torch.", "")
    article = "an" if dtype.startswith("int") else "a"
    return f"{article} {dtype} tensor of shape {tuple(tensor.shape)}"


def _brief(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return _kind(value)
    if isinstance(value, (list, tuple, dict)):
        return f"a {type(value).__name__} of {len(value)} item{'' if len(value) == 1 else 's'}"
    return _show(value) if _shown_whole(value) else f"a {type(value).__name__}"


def _index(flat: int, shape: tuple[int, ...]) -> list[int]:
    where = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        where.append(i)
    return where[::-1]


def _number(value: torch.Tensor) -> str:
    return f"{value.item():.6g}" if value.dtype.is_floating_point else str(value.item())


def _tensor_difference(got: torch.Tensor, expected: torch.Tensor) -> str:
    """How two tensors of one shape and dtype differ: the largest difference and where."""
    values = f"{_kind(expected)} whose"
    if expected.dtype.is_floating_point or expected.dtype.is_complex:
        wide = torch.complex128 if expected.dtype.is_complex else torch.float64
        gap = (got.detach().cpu().to(wide) - expected.detach().cpu().to(wide)).abs().reshape(-1)
        gap = torch.where(torch.isnan(gap), torch.full_like(gap, math.inf), gap)
        flat = int(gap.argmax())
        return (f"{values} largest difference from the expected values is "
                f"{gap[flat].item():.4g}, at {_index(flat, tuple(expected.shape))} "
                f"({_number(got.reshape(-1)[flat])} instead of "
                f"{_number(expected.reshape(-1)[flat])})")
    wrong = (got.detach().cpu() != expected.detach().cpu()).reshape(-1)
    flat = int(wrong.nonzero()[0])
    return (f"{values} values differ from the expected ones in {int(wrong.sum())} of "
            f"{wrong.numel()} places, first at {_index(flat, tuple(expected.shape))} "
            f"({_number(got.reshape(-1)[flat])} instead of {_number(expected.reshape(-1)[flat])})")


def _difference(got: Any, expected: Any, path: str = "") -> tuple[str, str] | None:
    """Where ``got`` first differs from ``expected`` (``"['2.weight']"``, ``"[1][0]"``, or ``""``
    for the whole value) and how; None when they are the same."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape or (
                got.dtype != expected.dtype):
            return path, f"expected {_kind(expected)}, got {_brief(got)}"
        return None if same(got, expected) else (path, _tensor_difference(got, expected))
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return path, f"expected {_brief(expected)}, got {_brief(got)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            if found := _difference(g, e, f"{path}[{i}]"):
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return path, f"expected {_brief(expected)}, got {_brief(got)}"
        if got.keys() != expected.keys():
            missing = [k for k in expected if k not in got]
            extra = [k for k in got if k not in expected]
            return path, "; ".join(part for part in (
                f"the keys {missing} are missing" if missing else "",
                f"the keys {extra} should not be there" if extra else "") if part)
        for key in expected:
            if found := _difference(got[key], expected[key], f"{path}[{key!r}]"):
                return found
        return None
    if same(got, expected):
        return None
    return path, f"expected {_show(expected)}, got {_show(got)}"


def expect(got: Any, expected: Any, *, what: str, rank: int | None = None,
           world_size: int | None = None, **context: Any) -> None:
    """Fail with a student-facing message unless ``got`` is ``expected``: both values in full
    when they are short, else the first item that differs (a dict's key, a list's index) and
    how (for tensors, the largest difference and where)."""
    if same(got, expected):
        return
    where = f"On rank {rank}" if rank is not None else "Here"
    head = f"{where}{context_words(world_size, context)}, {what}"
    if _shown_whole(expected) and _shown_whole(got):
        raise CheckFailed(f"{head} should be\n    {_show(expected)}\nbut it is\n    "
                          f"{_show(got)}")
    path, how = _difference(got, expected) or ("", "a value differs")
    raise CheckFailed(f"{head}: wrong at {path}, {how}." if path else f"{head}: {how}.")


def expect_per_rank(result: RunResult, expected: list[Any], *, what: str = "the returned value",
                    **context: Any) -> None:
    """Each rank returned ``expected[rank]``."""
    if len(expected) != result.world_size:
        raise ValueError(f"expected has {len(expected)} entries for {result.world_size} ranks")
    context = case_context(result, context)
    for rank, (got, want) in enumerate(zip(result.returns, expected)):
        expect(got, want, what=what, rank=rank, world_size=result.world_size, **context)


# --- calls -------------------------------------------------------------------------------------

def _either(op: str) -> str:
    """``dist.<name>`` for each public name of ``op`` (private aliases such as
    ``_all_gather_base`` are accepted, but not suggested to a student)."""
    public = [name for name in names_of(op) if not name.startswith("_")] or [op]
    return " or ".join(f"dist.{name}" for name in public)


def expect_used(result: RunResult, op: str, *, ranks: list[int] | None = None,
                **context: Any) -> None:
    """Every rank in ``ranks`` (default: all) called ``dist.<op>`` (by any of its names) at
    least once."""
    context = case_context(result, context)
    for rank in ranks if ranks is not None else range(result.world_size):
        if not any(result.calls(name, rank) for name in names_of(op)):
            made = sorted({c.op for c in result.trace[rank]}) or ["no torch.distributed call"]
            raise CheckFailed(
                f"On rank {rank}{context_words(result.world_size, context)}, your code should call "
                f"{_either(op)}, but it made: {', '.join(made)}.")


def expect_not_used(result: RunResult, *ops: str, **context: Any) -> None:
    """No rank called any of ``ops`` (by any of their names): the exercise builds them from
    something simpler."""
    context = case_context(result, context)
    for rank in range(result.world_size):
        for op in ops:
            for name in names_of(op):
                if result.calls(name, rank):
                    where = context_words(result.world_size, context)
                    raise CheckFailed(
                        f"On rank {rank}{where}, your code called dist.{name}; this exercise "
                        f"asks you to build it without dist.{name}.")


def expect_only(result: RunResult, allowed: set[str], **context: Any) -> None:
    """Every call each rank made is one of ``allowed`` (e.g. ``{"send", "recv"}``), by any of
    their names."""
    context = case_context(result, context)
    every_name = {name for op in allowed for name in names_of(op)}
    for rank in range(result.world_size):
        other = sorted({c.op for c in result.trace[rank]} - every_name)
        if other:
            raise CheckFailed(
                f"On rank {rank}{context_words(result.world_size, context)}, your code called "
                f"{', '.join('dist.' + o for o in other)}; this exercise allows only "
                f"{', '.join(_either(a) for a in sorted(allowed))}.")


# --- bytes -------------------------------------------------------------------------------------

def expect_bytes(result: RunResult, *, sent: list[int] | None = None,
                 received: list[int] | None = None, hint: str = "", **context: Any) -> None:
    """Each rank sent and received exactly these many bytes (over all its traced calls): what
    the algorithm should move, no more (a ring that passes whole tensors around fails).

    When the ranks together moved the right number of bytes but not each its own share, the
    message says so, followed by ``hint`` (e.g. which rank sends which chunk when).
    """
    context = case_context(result, context)
    for label, wanted, actual in (("sent", sent, result.bytes_sent()),
                                  ("received", received, result.bytes_received())):
        if wanted is None:
            continue
        for rank, (want, got) in enumerate(zip(wanted, actual)):
            if want == got:
                continue
            where = f"On rank {rank}{context_words(result.world_size, context)}, your code {label}"
            if sum(actual) == sum(wanted):
                raise CheckFailed(
                    f"{where} {got} bytes, but the algorithm has this rank move exactly {want}. "
                    f"The ranks together {label} the right total ({sum(wanted)} bytes), so the "
                    "work is shared out differently from the algorithm's."
                    + (f" {hint}" if hint else ""))
            raise CheckFailed(
                f"{where} {got} bytes, but the algorithm needs to move exactly {want} bytes"
                + (f" ({got / want:.2f} times as many as needed)." if want else "."))


def expect_total_bytes(result: RunResult, *, at_most: int, needs: str,
                       **context: Any) -> None:
    """The ranks together sent at most ``at_most`` bytes; ``needs`` says why that is enough
    (e.g. "each rank's tensor must reach each other rank once"), and what moves more."""
    context = case_context(result, context)
    total = sum(result.bytes_sent())
    if total > at_most:
        raise CheckFailed(
            f"With {result.world_size} ranks{context_words(None, context)}, your ranks sent "
            f"{total} bytes in all, {total / at_most:.2f} times the {at_most} bytes this "
            f"exercise needs: {needs}")
