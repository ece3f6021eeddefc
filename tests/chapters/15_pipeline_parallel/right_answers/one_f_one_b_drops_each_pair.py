r"""Each pair taken out of a dict and its names dropped right after the backward step.

Answer cell: 15-one-f-one-b
Test cell: 15-one-f-one-b-schedule-test
"""

from saved_pairs import one_f_one_b_saving


def one_f_one_b(stage, x, target, num_microbatches):
    return one_f_one_b_saving(stage, x, target, num_microbatches, pop=True, drop=True)
