r"""The right order and messages, but every micro-batch's (inputs, outputs) kept to the end of the
step: autograd frees what it saved all the same, so only the pairs show it.

Answer cell: 15-one-f-one-b
Test cell: 15-one-f-one-b-schedule-test
Says: On rank 0, when a forward step began, the (inputs, outputs) of 7 earlier micro-batches were \
    still alive; under 1F1B at most 4 are
"""

from saved_pairs import one_f_one_b_saving


def one_f_one_b(stage, x, target, num_microbatches):
    return one_f_one_b_saving(stage, x, target, num_microbatches, pop=False, drop=False)
