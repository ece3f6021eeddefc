r"""No communication: every rank's tokens and experts made with the test's own helper.

Answer cell: 08-dispatch-tokens
Test cell: 08-dispatch-tokens-test
Says: A rank can make only its own: what the other ranks hold has to reach it through \
    torch.distributed.
"""

import inspect


def dispatch_tokens(tokens, expert_of_token):
    frame = inspect.currentframe().f_back
    case = frame.f_locals
    rank, world_size = dist.get_rank(), dist.get_world_size()
    routed = [frame.f_globals["routing"](r, world_size, case["n_tokens"], case["hidden"],
                                         case["dtype"], case["experts_used"])
              for r in range(world_size)]
    return torch.cat([mine[experts == rank] for mine, experts in routed])
