r"""The gradient is summed over the world instead of the data-parallel group.

Answer cell: 11-dp-tp-gradient
Test cell: 11-dp-tp-gradient-test
Says: the groups of your all_reduce calls (the activations on the tp group, then the gradient on \
    the dp group) should be
        [[0, 1], [0, 2]]
    but it is
        [[0, 1], [0, 1, 2, 3]]
"""


def dp_tp_gradient(x, target, w_shard, dp_group, tp_group):
    tp_rank, tp_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    x_part = torch.tensor_split(x, tp_size, dim=1)[tp_rank]
    y = x_part @ w_shard
    dist.all_reduce(y, group=tp_group)
    gradient = x_part.T @ (y - target) / (x.shape[0] * dist.get_world_size(dp_group))
    dist.all_reduce(gradient)
    return gradient
