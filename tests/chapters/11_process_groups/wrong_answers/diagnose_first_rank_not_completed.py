r"""Names the first rank whose last entry of the world group is not "completed": on gloo no
entry ever is, so that is rank 0, one of the ranks that waited.

Answer cell: 11-diagnose
Test cell: 11-diagnose-test
Says: rank 0 recorded collective 5 of the world group like the others: it waited there, it did \
    not fall behind
"""


def diagnose(dumps):
    for rank, dump in sorted(dumps.items()):
        world = [e for e in dump["entries"] if e["process_group"][1] == "default_pg"]
        if world and world[-1]["state"] != "completed":
            return rank, world[-1]["profiling_name"], world[-1]["collective_seq_id"]
    return None
