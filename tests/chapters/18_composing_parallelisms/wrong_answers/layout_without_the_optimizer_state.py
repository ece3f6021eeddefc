r"""The memory of a layout counted without the optimizer state (weights, gradients and
activations only): a layout that does not fit gets chosen.

Answer cell: 18-choose-layout
Test cell: 18-choose-layout-test
Says: more than the GPU's 80 GB: every kind counts, the optimizer state included
"""

from layout import choose_layout_with


def choose_layout(model, cluster):
    return choose_layout_with(model, cluster, optimizer_state=False)
