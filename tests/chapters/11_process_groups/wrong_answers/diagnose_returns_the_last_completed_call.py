r"""Finds the rank behind, but returns the sequence number of the last collective it got
through instead of the one it never reached.

Answer cell: 11-diagnose
Test cell: 11-diagnose-test
Says: collective 4 is the last one every rank got through; the job is stuck in the next one of \
    the group, 5.
"""


def diagnose(dumps):
    last = {}
    for rank, dump in dumps.items():
        world = [e for e in dump["entries"] if e["process_group"][0] == "0"]
        last[rank] = world[-1]
    behind = min(last, key=lambda rank: last[rank]["collective_seq_id"])
    return behind, last[behind]["profiling_name"], last[behind]["collective_seq_id"]
