"""grader/trusted/evidence.py on counts written here. The ranks' word against the network's
count on real launches: tests/grader/sandboxed/test_rankhost.py; forged traces:
tests/chapters/test_attacks.py."""

from __future__ import annotations

from grader.trusted import evidence


def _count(store: dict) -> dict:
    count = evidence._merged([])
    count["store"] = dict(store)
    return count


REPLAYED = {0: 4000, 1: 2498, 2: 2498, 3: 2498}  # rank 0 started the group's last
SLACK = {rank: evidence.SLACK_PER_GROUP for rank in REPLAYED}


def test_another_rank_last_at_a_groups_start_is_no_difference():
    # rank 2 came last this time: it told the others, and moved the barrier's bytes
    measured = {0: 2498, 1: 2498, 2: 4000, 3: 2498}
    assert evidence.differences(_count(measured), [_count(REPLAYED)], SLACK) == []


def test_bytes_through_the_store_show_whichever_rank_came_last():
    # rank 1 put 600 bytes in the store, rank 3 read them
    measured = {0: 2498, 1: 3098, 2: 4000, 3: 3098}
    found = evidence.differences(_count(measured), [_count(REPLAYED)], SLACK)
    assert any("rank 1 and the rendezvous store, more than" in f for f in found), found
    assert any("rank 3 and the rendezvous store, more than" in f for f in found), found
    # and in the replay's own roles
    measured = {0: 4000, 1: 2498, 2: 2498, 3: 3098}
    found = evidence.differences(_count(measured), [_count(REPLAYED)], SLACK)
    assert found == ["3098 bytes between rank 3 and the rendezvous store, more than the calls "
                     "your trace lists send"]
