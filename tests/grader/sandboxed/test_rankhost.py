"""The rank host: a submission's ranks are sealed; the grader's own replays are only tidied,
and the network counts the same calls the same either way."""

from __future__ import annotations

import pytest

from commlab import launch
from grader.sandboxed import namespaces
from grader.sandboxed import replay as replaying
from grader.trusted import evidence, scoring_kernel

pytestmark = pytest.mark.skipif(not namespaces.available(),
                                reason="this machine does not allow user namespaces")


@pytest.fixture()
def host(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    started = scoring_kernel.RankHost(namespaces.plan(work, namespaces.hidden_paths([])))
    yield started
    started.stop()


def test_a_launch_is_sealed_and_the_graders_own_code_is_not(host):
    def where_am_i(rank: int, world_size: int) -> tuple[str, str]:
        """This process's system-call filter mode and mount namespace (a function of the
        test's own, so that it travels by value)."""
        import os

        status = dict(line.split(":", 1) for line in open("/proc/self/status").read()
                      .splitlines() if ":" in line)
        return status["Seccomp"].strip(), os.readlink("/proc/self/ns/mnt")

    sealed = host.launch(launch._pickle_function(where_am_i, ()), 2, backend="gloo",
                         timeout=30, init_process_group=True, debug=False, trace_values=True)
    own = host.launch_own(where_am_i, 2, timeout=30)
    # a sealed rank has its filter (mode 2) and a mount namespace of its own
    assert [mode for mode, _ in sealed.returns] == ["2", "2"]
    assert len({space for _, space in sealed.returns}) == 2
    assert [mode for mode, _ in own.returns] == ["0", "0"]
    assert len({space for _, space in own.returns}) == 1


def test_a_replay_counts_what_sealed_ranks_making_the_same_calls_count(host):
    steps = [[{"op": "all_reduce", "group": [], "root": None, "reduce_op": "SUM",
               "async_op": False, "tensors": {"tensor": ((64,), "float32")},
               "split_sizes": None, "ops": None},
              {"op": "broadcast", "group": [], "root": 1, "reduce_op": None,
               "async_op": False, "tensors": {"tensor": ((32,), "float64")},
               "split_sizes": None, "ops": None}] for _ in range(3)]
    sealed = host.launch(launch._pickle_function(replaying.replay, ([steps],)), 3,
                         backend="gloo", timeout=30, init_process_group=True, debug=False,
                         trace_values=True)
    own = host.launch_own(replaying.replay, 3, args=([steps],), timeout=30)

    def case(result) -> dict:
        return evidence._merged([w for w in result.network
                                 if str(w["tags"][0]).endswith("case 0")])

    counted, replayed = case(sealed), case(own)
    assert counted["wire"], "the sealed ranks' all_reduce and broadcast were not counted"
    room = {pair: 2 * evidence.SLACK_PER_CALL for pair in counted["wire"]}
    assert evidence.differences(counted, [replayed], room) == []
