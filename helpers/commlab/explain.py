"""What went wrong in a run, in words a student can act on: timeouts, failures and crashes.

:func:`timeout_error` and :func:`failure_error` turn the ranks' reports, exit codes, output and
positions on the status board into the error the notebook raises.
"""

from __future__ import annotations

import linecache
import re
import signal
from typing import TYPE_CHECKING

from . import status
from .errors import CollectiveTimeout, RankCrashed, RankError, RankFailure
from .p2p import POINT_TO_POINT
from .result import RunResult

if TYPE_CHECKING:
    from .processes import RankProcess

# Errors a rank raises only because a peer went away: they are consequences, not causes.
_PEER_LOSS = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
              "connection reset", "Connection refused", "failed to recv", "failed to send")


def rank_list(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"ranks 0-2, 5"``; ``[3]`` -> ``"rank 3"``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    parts, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            parts.append(f"{start}" if start == r else
                         f"{start}, {r}" if r == start + 1 else f"{start}-{r}")
            start = None
    return "ranks " + ", ".join(parts)


def is_peer_loss(message: str) -> bool:
    return any(p.lower() in message.lower() for p in _PEER_LOSS)


def _frame_place(filename: str) -> str:
    """``notebook cell`` for a notebook cell, else ``File "..."``.

    IPython's own tracebacks say ``Cell In[4]``, but that number changes with every execution,
    and a message that names it would differ between two runs of the same notebook.
    """
    try:
        shell = get_ipython()  # type: ignore[name-defined]  # noqa: F821
        if shell.compile.format_code_name(filename):
            return "notebook cell"
    except Exception:  # noqa: BLE001 - not in IPython
        pass
    return f'File "{filename}"'


def format_traceback(failure: RankFailure) -> str:
    """The failing rank's own frames, with source lines looked up here, where the notebook's
    cells are known."""
    lines = []
    for filename, lineno, name, line in failure.frames:
        lines.append(f"  {_frame_place(filename)}, line {lineno}, in {name}")
        source = (linecache.getline(filename, lineno) or line or "").strip()
        if source:
            lines.append(f"    {source}")
    if failure.raised_inside:
        lines.append(f"  (raised inside {failure.raised_inside})")
    lines.append(f"{failure.type}: {shorten(failure.message)}")
    return "\n".join(lines)


def shorten(message: str) -> str:
    """Drop the tensor-options dump that TORCH_DISTRIBUTED_DEBUG=DETAIL repeats in every
    fingerprint; the shapes and dtypes that differ are still named."""
    message = re.sub(r", TensorDeviceTypes=TensorOptions\(.*?memory_format=\([^)]*\)\)", "",
                     message)
    return message.replace(".Collectives differ", ".\nCollectives differ")


def signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "an unknown cause"
    if exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def crash_cause(exitcode: int | None, stderr: str, where: str | None) -> str:
    """A likely cause for a rank that died without a Python exception, and what to try."""
    text = stderr.lower()
    if "enforce" in text or "mismatch" in text or "invalid tensor size" in text or (
            exitcode == -signal.SIGABRT and where):
        return ("likely cause: the ranks passed tensors of different shapes or dtypes (or called "
                "different collectives) in the same call, and gloo stops the process when the "
                "sizes disagree. Print each rank's tensor.shape and dtype before the call, or run "
                "with debug=True to get an error that names them.")
    if exitcode == -signal.SIGKILL:
        return ("likely cause: the process was killed from outside, often by the out-of-memory "
                "killer. Try smaller tensors or fewer ranks.")
    if exitcode == -signal.SIGSEGV:
        return ("likely cause: a crash inside a library, for example a tensor changed or freed "
                "while an async_op=True call still used it. Call .wait() on the work handle "
                "before touching the tensor.")
    if exitcode is not None and exitcode >= 0:
        return ("likely cause: the function ended the process (os._exit or a library calling "
                "exit) instead of returning. Return from the function instead.")
    return "Run again with debug=True for more detail."


def last_stderr_lines(stderr: str, count: int = 3) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return "\n".join("    " + ln for ln in lines[-count:])


def outputs_section(result: RunResult) -> str:
    """What every rank printed, to end an error message with (nothing if none printed)."""
    if not any(out.strip() or err.strip() for out, err in zip(result.stdout, result.stderr)):
        return ""
    return "\n\nWhat the ranks printed:\n" + repr(result)


# --- the ranks hung ------------------------------------------------------------------------------

_HINT_COLLECTIVE = (
    "A rank waits in a collective until every rank of its group makes the same call. Check that "
    "every rank calls the same collectives in the same order (an `if rank == ...` around a "
    "collective is the usual culprit), or run with debug=True to have mismatched calls reported "
    "at once.")
_HINT_P2P = (
    "A send completes only when its peer posts the matching recv (and the other way round). "
    "Check that every send has a recv on the rank it names, in an order both ranks reach: two "
    "ranks that both send first wait for each other forever. Alternate by rank parity, or use "
    "isend/irecv or batch_isend_irecv.")
_HINT_OWN_CODE = (
    "No rank was waiting in a collective: the function itself took longer than the timeout (an "
    "endless loop?). Give run() a larger timeout if the work is really that long.")


def _hang_hint(where: dict[int, str], startup_limit: float) -> str:
    stuck = [text for text in where.values() if text.startswith("in ")]
    if all(text == "starting up" for text in where.values()):
        return (f"The ranks could not start within {startup_limit:g} s (a machine short of "
                "memory or processes?). Try fewer ranks, or restart the kernel.")
    if not stuck:
        return _HINT_OWN_CODE
    if all(text.split()[1] in POINT_TO_POINT for text in stuck):
        return _HINT_P2P
    return _HINT_COLLECTIVE


def timeout_error(positions: list[status.Position], timeout: float, startup_limit: float,
                  result: RunResult) -> CollectiveTimeout:
    """The ranks did not finish in time: where each one was, grouped, and what to check."""
    where = {r: status.describe(position) for r, position in enumerate(positions)}
    groups: dict[str, list[int]] = {}
    for r, text in where.items():
        groups.setdefault(text, []).append(r)
    lines = []
    for text, ranks in sorted(groups.items(), key=lambda item: item[1][0]):
        if text == "finished":
            lines.append(f"{rank_list(ranks)} finished")
        else:
            verb = "is" if len(ranks) == 1 else "are"
            lines.append(f"{rank_list(ranks)} {verb} still {text}")
    message = (f"the ranks did not finish within {timeout:g} s and were stopped.\n"
               + "\n".join(f"  {line}" for line in lines) + "\n"
               + _hang_hint(where, startup_limit) + outputs_section(result))
    return CollectiveTimeout(message, where, result)


# --- a rank raised or died -----------------------------------------------------------------------

def _crash_section(rank: RankProcess, where: str) -> str:
    how = signal_name(rank.exitcode)
    killed = "killed by " if rank.exitcode < 0 else ""
    last = last_stderr_lines(rank.text("stderr"))
    return (f"{rank_list([rank.rank]).capitalize()} died ({killed}{how}) while {where}.\n"
            + (f"  Its last lines on stderr:\n{last}\n" if last else "")
            + "  " + crash_cause(rank.exitcode, rank.text("stderr"),
                                 where if where.startswith("in ") else None))


def _others_section(ranks: list[RankProcess], failures: dict[int, str],
                    where: dict[int, str]) -> str | None:
    """One line on the ranks that did not fail first: finished, stopped, or failed in turn."""
    places: dict[str, list[int]] = {}
    for rank in ranks:
        if rank.rank in failures:
            continue
        if rank.done:
            text = "finished"
        elif rank.report is None:
            text = "stopped " + where[rank.rank]
        else:
            text = "failed in turn: " + rank.report.failure.message.splitlines()[0][:120]
        places.setdefault(text, []).append(rank.rank)
    if not places:
        return None
    return "The other ranks: " + "; ".join(
        f"{rank_list(rs)} {text}" for text, rs in places.items()) + "."


def failure_error(ranks: list[RankProcess], positions: list[status.Position],
                  result: RunResult) -> RankError:
    """A rank raised (:class:`RankError`) or died (:class:`RankCrashed`): whose fault, where."""
    where = {r: status.describe(position) for r, position in enumerate(positions)}
    failed = [rank for rank in ranks
              if rank.failed and (rank.report is not None or not rank.killed)]
    crashed = {rank.rank: signal_name(rank.exitcode) for rank in failed if rank.report is None}
    # A rank that lost a peer fails too ("Connection closed by peer"): that is an echo of the
    # real failure, not a cause, unless nothing else failed.
    primary = [rank for rank in failed if not (
        rank.report is not None and is_peer_loss(rank.report.failure.message))] or failed
    failures, sections = {}, []
    by_text: dict[str, list[int]] = {}
    for rank in primary:
        if rank.report is not None:
            failure = rank.report.failure
            failures[rank.rank] = f"{failure.type}: {shorten(failure.message)}"
            by_text.setdefault(format_traceback(failure), []).append(rank.rank)
        else:
            how = signal_name(rank.exitcode)
            failures[rank.rank] = f"killed by {how}" if rank.exitcode < 0 else how
            sections.append(_crash_section(rank, where[rank.rank]))
    for text, same in by_text.items():
        sections.append(f"{rank_list(same).capitalize()} raised:\n{text}")
    others = _others_section(ranks, failures, where)
    if others:
        sections.append(others)
    message = "\n\n".join(sections) + outputs_section(result)
    if crashed:
        return RankCrashed(message, failures, result, crashed)
    return RankError(message, failures, result)


def torchrun_failure(failures: dict[int, str], result: RunResult) -> RankError:
    """Ranks of a torchrun job raised: one line per rank, then what every rank printed."""
    lines = [f"{rank_list([r]).capitalize()} raised {text}" for r, text in failures.items()]
    return RankError("\n".join(lines) + outputs_section(result), failures, result)
