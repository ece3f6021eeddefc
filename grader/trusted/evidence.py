"""Whether what the ranks say they did agrees with what the machine counted (commlab's
``checks.VERIFY``, installed in the scoring kernel).

For every test case the rank host counted the sandbox's network (:mod:`grader.sandboxed.network`):
bytes between each pair of ranks, bytes to and from the rendezvous store, connections opened,
tried and closed, ports listened on, datagrams. No rank can change those numbers. A case's
result passes only if:

- nothing crossed the network outside the test cases (before the first, after the last), and
  nothing in the case crossed it but on connections that stay open (a connection opened and
  closed again or refused, a datagram, a process group's connection closed in the middle: each
  is data the count could not follow, and fails the case);
- the case opened the connections, and listened on the ports, that the calls of its trace
  open (its groups'), between the same ranks, and no other: a rank's own channel fails it
  whatever it carried;
- what crossed between each pair of ranks, and to the store, is what the calls of the case's
  trace move: the grader makes the same calls again on fresh ranks (:mod:`.replay`, through the
  same rank host) and compares the two counts, within gloo's own control messages
  (:data:`SLACK_PER_CALL`, :data:`SLACK_PER_GROUP`). Calls the trace lists that never
  happened, or calls made and hidden, or data moved on connections of the ranks' own, or
  through the store, show here.

What no count can tell: which of two calls that move the same bytes between the same ranks was
made (``dist.broadcast``, or ``dist.send`` to every rank), and when. Checks of call names,
``async_op`` and times read the trace, which is the ranks' word (docs/security.md, "What the
evidence cannot tell, and how it is weighed").
"""

from __future__ import annotations

import functools
from typing import Any

from ..sandboxed import replay as replaying

# Two runs of the same calls between two ranks can differ: either side of a gloo transfer may
# announce itself first (a 48-byte message, depending on which side is ready first), and making
# a group exchanges a few bytes whose length varies (8 measured). So a count may differ from the
# replay's by this much per call between the two ranks, and per group both belong to, and not
# at all where the replay counted nothing.
SLACK_PER_CALL = 48
SLACK_PER_GROUP = 16
# Seconds a replay may take.
REPLAY_TIMEOUT = 20.0


def _merged(windows: list[dict] | None) -> dict:
    total: dict[str, Any] = {"wire": {}, "store": {}, "connections": {}, "listening": {},
                             "other": 0, "opened": 0, "closed": [], "datagrams": 0}
    for window in windows or []:
        for key in ("wire", "store", "connections", "listening"):
            for who, count in window[key].items():
                total[key][who] = total[key].get(who, 0) + count
        for key in ("other", "opened", "datagrams"):
            total[key] += window[key] or 0  # None: not counted (no network of its own)
        total["closed"] += window["closed"]
    return total


def _outside_channels(count: dict, where: str) -> str | None:
    """What crossed where the count cannot follow it, in words (None: nothing)."""
    if count["opened"]:
        return (f"{count['opened']} network connection(s) were opened, or tried, and closed "
                f"again {where}: data moved outside the process group's connections")
    if count["datagrams"]:
        return f"{count['datagrams']} datagram(s) (UDP or ICMP) were sent {where}"
    if count["closed"]:
        return (f"connection(s) of the process group were closed {where} (between "
                f"{count['closed']}): do not close sockets or destroy the group in a test")
    if count["other"]:
        return f"{count['other']} bytes crossed connections that join no two ranks {where}"
    return None


def _silent(count: dict) -> bool:
    return not (count["wire"] or count["store"] or count["connections"] or count["listening"]
                or count["other"] or count["opened"] or count["datagrams"] or count["closed"])


def _pairs(a: dict, b: dict) -> list:
    return sorted(set(a) | set(b), key=str)


def own_channels(measured: dict, expected: dict) -> list[str]:
    """Connections opened and ports listened on in the case beyond those the replay's calls
    open (its process groups'), in words: a rank's own channel, whatever it carried."""
    found = []
    for pair in _pairs(measured["connections"], expected["connections"]):
        got, wanted = measured["connections"].get(pair, 0), expected["connections"].get(pair, 0)
        if got != wanted:
            found.append(f"{got} connection(s) opened between rank {pair[0]} and rank {pair[1]}, "
                         f"where the calls your trace lists open {wanted}")
    for rank in sorted(measured["listening"]):
        got, wanted = measured["listening"][rank], expected["listening"].get(rank, 0)
        if got > wanted:
            found.append(f"rank {rank} listened on {got - wanted} port(s) of its own")
    return found


def differences(measured: dict, expected: list[dict], slack: dict) -> list[str]:
    """Pairs (and store users) whose count differs from every replay by more than ``slack``
    allows them (nothing where the replays counted nothing). The words say more or fewer, not
    the replay's count: a submission that moves data on a channel of its own must not learn
    from a failure how many bytes to pad it with."""
    found = []
    for key, label in (("wire", "from rank {0} to rank {1}"),
                       ("store", "between rank {0} and the rendezvous store")):
        replays = [e[key] for e in expected]
        if key == "store" and any(_store_use_in_other_roles(measured[key], r, slack)
                                  for r in replays):
            continue
        for who in _pairs(measured[key], {k: 0 for r in replays for k in r}):
            got = measured[key].get(who, 0)
            low = min(r.get(who, 0) for r in replays)
            high = max(r.get(who, 0) for r in replays)
            room = slack.get(who, 0)
            names = who if isinstance(who, tuple) else (who,)
            if got > high + room:
                found.append(f"{got} bytes {label.format(*names)}, more than the calls your "
                             "trace lists send")
            elif got < low - room:
                found.append(f"{got} bytes {label.format(*names)}, fewer than the calls your "
                             "trace lists send")
    return found


def _store_use_in_other_roles(measured: dict, replayed: dict, slack: dict) -> bool:
    """Whether the ranks' bytes with the store are the replay's once both are sorted, and not
    rank for rank: which rank reaches the end of a group's start last, and so tells the others
    (torch's store-based barrier), is a matter of timing, and that rank moves more bytes with
    the store than the rest (1502 more, measured). Data moved through the store adds bytes to
    the ranks that use it, which no sorting hides."""
    ranks = sorted(set(measured) | set(replayed), key=str)
    if not ranks:
        return False
    room = max(slack.get(rank, 0) for rank in ranks)
    got = sorted(measured.get(rank, 0) for rank in ranks)
    wanted = sorted(replayed.get(rank, 0) for rank in ranks)
    return all(abs(a - b) <= room for a, b in zip(got, wanted))


def _peers(call: Any) -> list[int]:
    """The ranks a call exchanges data with: its peer for a point-to-point call, the peers of
    its operations for a batch, every other member of its group for a collective."""
    if call.op in ("send", "recv", "isend", "irecv"):
        return [call.root] if call.root is not None else []
    if call.op == "batch_isend_irecv":
        return sorted({peer for _, peer, _ in call.ops or []})
    return [m for m in call.group_ranks or () if m != call.rank]


def _slack(trace: list[list[Any]], groups: list[list[Any]]) -> dict:
    """How much each pair of ranks may differ from the replay: :data:`SLACK_PER_CALL` for each
    call either of them lists that exchanges data between them, :data:`SLACK_PER_GROUP` for
    each group either made that holds both; and each rank with the store,
    :data:`SLACK_PER_GROUP` for each group it made (nothing else uses the store). Nothing where
    no call or group joins them."""
    room: dict[Any, int] = {}

    def add(a: int, b: int, each: int) -> None:
        for pair in ((a, b), (b, a)):
            room[pair] = room.get(pair, 0) + each

    for calls in trace:
        for call in calls:
            for peer in _peers(call):
                add(call.rank, peer, SLACK_PER_CALL)
    for made in groups:
        for group in made:
            room[group.rank] = room.get(group.rank, 0) + SLACK_PER_GROUP
            if group.rank in (group.group_ranks or ()):
                for member in group.group_ranks:
                    if member != group.rank:
                        add(group.rank, member, SLACK_PER_GROUP)
    return room


class Evidence:
    """Verifies each case's result (see the module docstring). The calls of a launch's cases
    are made again in one launch of the grader's; replays are remembered by their calls, for
    every submission this kernel scores (correct answers make the same calls)."""

    def __init__(self) -> None:
        self.replays: dict[str, dict] = {}
        # how the grader's own code is launched on the rank host (the scoring kernel's
        # RankHost.launch_own); None: commlab.run, as any launch
        self.launch_own: Any = None

    def __call__(self, results: list[Any]) -> list[str | None]:
        """For each case's result, None or what is wrong with it (in words for a student)."""
        problems: list[str | None] = []
        programs: list[list[list[dict]] | None] = []
        for result in results:
            problem, steps = self._first_look(result)
            problems.append(problem)
            programs.append(steps)
        wanted = [(steps, result.world_size) for steps, result in zip(programs, results)
                  if steps is not None and _key(steps, result.world_size) not in self.replays]
        try:
            self._replay_all(wanted, results[0].world_size if results else 0)
        except AssertionError as exc:
            return [p if p is not None or s is None else f"{exc}"
                    for p, s in zip(problems, programs)]
        for index, (result, steps) in enumerate(zip(results, programs)):
            if problems[index] is not None or steps is None:
                continue
            count = _merged(result.network)
            expected = self.replays[_key(steps, result.world_size)]
            channels = own_channels(count, expected)
            if channels:
                problems[index] = (
                    "The grader counted your ranks' connections, and they are not the process "
                    "group's alone (the grader made the calls your trace lists again and counted "
                    "theirs too): " + "; ".join(channels[:4]) + ". Move data only with "
                    "torch.distributed calls: a socket of your own is a channel the exercise "
                    "does not allow.")
                continue
            found = differences(count, [expected], _slack(result.trace, result.groups or []))
            if found:
                problems[index] = (
                    "The grader counted what your ranks sent over the network, and it is not "
                    "what the calls they report send (the grader made the same calls again and "
                    "counted them too): " + "; ".join(found[:4]) + ". Move data only with the "
                    "torch.distributed calls your code makes, and leave commlab's trace alone.")
        return problems

    def _first_look(self, result: Any) -> tuple[str | None, list[list[dict]] | None]:
        """What is wrong before any replay, and the case's calls to make again."""
        if result.network is None:
            return None, None  # not launched by the rank host: nothing was counted
        outside = _merged(result.outside)
        if not _silent(outside):
            problem = _outside_channels(outside, "outside any test case") or (
                "data crossed the network while no test case was running")
            return f"The grader counted traffic your code made on its own: {problem}.", None
        problem = _outside_channels(_merged(result.network), "during the case")
        if problem:
            return f"The grader counted traffic your code made on its own: {problem}.", None
        try:
            return None, replaying.program(result.trace,
                                           result.groups or [[]] * result.world_size)
        except replaying.NotReplayable as exc:
            return (f"your code called {exc}, whose traffic the grader cannot check; use the "
                    "tensor collectives", None)
        except replaying.NotACall as exc:
            return (f"the trace your ranks report lists {exc}, which no torch.distributed call "
                    "made: a trace is recorded, not written", None)

    def _replay_all(self, wanted: list, world_size: int) -> None:
        """Make the calls of every case in ``wanted`` again, one window each, in one launch of
        the grader's (or one launch per case that starts its own group, which a launch can do
        only once), and remember their counts."""
        from commlab import launch

        unique = {_key(steps, size): steps for steps, size in wanted}
        starting = [k for k, steps in unique.items() if _starts_world(steps)]
        batches = [[k for k in unique if k not in starting]] + [[k] for k in starting]
        for keys in batches:
            if not keys:
                continue
            start = self.launch_own or functools.partial(launch.run, backend="gloo")
            try:
                done = start(replaying.replay, world_size, args=([unique[k] for k in keys],),
                             timeout=REPLAY_TIMEOUT,
                             init_process_group=not _starts_world(unique[keys[0]]))
            except Exception as exc:  # noqa: BLE001 - calls that cannot all be made
                raise AssertionError(
                    "the calls your ranks report do not fit together: made again by the "
                    f"grader, they failed ({_first_failure(exc)})") from None
            by_case: dict[int, list[dict]] = {}
            for window in done.network or []:
                opened = str(window["tags"][0]).split(":", 1)[-1]
                if opened.startswith("case "):
                    by_case.setdefault(int(opened.split()[1]), []).append(window)
            for number, key in enumerate(keys):
                self.replays[key] = _merged(by_case.get(number, []))


def _first_failure(exc: Exception) -> str:
    """What went wrong in a failed replay, in a line: the first failing rank's own error when
    the ranks raised (the RankError's first line only names them)."""
    failures = getattr(exc, "failures", None)
    if failures:
        rank = min(failures)
        lines = [line.strip() for line in str(failures[rank]).splitlines() if line.strip()]
        return f"on rank {rank}: {(lines[0] if lines else type(exc).__name__)[:200]}"
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {(lines[0] if lines else '')[:200]}"


def _key(steps: list[list[dict]], world_size: int) -> str:
    return repr((world_size, steps))


def _starts_world(steps: list[list[dict]]) -> bool:
    return any(s["op"] == "init_process_group" for rank in steps for s in rank)
