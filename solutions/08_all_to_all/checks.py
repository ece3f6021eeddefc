"""Chapter 08's test helpers: the case functions and checks its visible test cells use.

Each test cell defines them in the notebook's namespace with ``checks.test_helpers(...)``, as
if they stood in the cell: the names they use (the answers, the chapter's own definitions, its
imports) are the notebook's. Hidden tests are not here. Validate, ``make check`` and the grader
read the course's own copy of this file (in its notebooks/ folder): a copy in your work folder
is for reading, and editing it changes nothing.
"""

import torch

from commlab import checks

# --- 08-my-all-to-all-test -------------------------------------------------------------------
P2P = {"send", "recv", "isend", "irecv", "batch_isend_irecv"}


def block(src, dst, rows, tail, dtype):
    # the block rank src sends rank dst: made on rank src only (and in the check)
    return checks.private_tensor(src, (rows, *tail), dtype, "to", dst)


def all_to_all_case(rank, world_size, rows, tail, dtype):
    # rows[i][j]: how many rows rank i sends rank j
    input_tensor_list = [block(rank, dst, rows[rank][dst], tail, dtype)
                         for dst in range(world_size)]
    output_tensor_list = [torch.full((rows[src][rank], *tail), -1, dtype=dtype)
                          for src in range(world_size)]
    my_all_to_all(output_tensor_list, input_tensor_list)
    return output_tensor_list


def check_my_all_to_all(result, rows, tail, dtype):
    world_size = result.world_size
    expected = [[block(src, dst, rows[src][dst], tail, dtype) for src in range(world_size)]
                for dst in range(world_size)]
    checks.expect_per_rank(result, expected, what="output_tensor_list after my_all_to_all")
    checks.expect_only(result, P2P)
    nbytes = [[b.numel() * b.element_size() for b in per_dst] for per_dst in expected]
    # nbytes[dst][src]: the bytes of the block src sends dst
    checks.expect_bytes(result,
                        sent=[sum(nbytes[d][r] for d in range(world_size) if d != r)
                              for r in range(world_size)],
                        received=[sum(nbytes[r][s] for s in range(world_size) if s != r)
                                  for r in range(world_size)])


# --- 08-dispatch-tokens-test -----------------------------------------------------------------
def routing(rank, world_size, n_tokens, hidden, dtype, experts_used):
    # this rank's tokens and their experts: made on rank `rank` only (and in the check)
    generator = checks.private_generator(rank, "experts")
    tokens = checks.private_tensor(rank, (n_tokens[rank], hidden), dtype, "tokens")
    choice = torch.randint(len(experts_used), (n_tokens[rank],), generator=generator)
    return tokens, torch.tensor(experts_used, dtype=torch.int64)[choice]


def dispatch_case(rank, world_size, n_tokens, hidden, dtype, experts_used):
    tokens, expert_of_token = routing(rank, world_size, n_tokens, hidden, dtype, experts_used)
    return dispatch_tokens(tokens, expert_of_token)


def check_dispatch(result, n_tokens, hidden, dtype, experts_used):
    world_size = result.world_size
    routed = [routing(r, world_size, n_tokens, hidden, dtype, experts_used)
              for r in range(world_size)]
    # one process: expert e gets, from every rank in order, the tokens routed to e
    expected = [torch.cat([tokens[experts == e] for tokens, experts in routed])
                for e in range(world_size)]
    checks.expect_per_rank(result, expected, what="the tokens dispatch_tokens returned")
    checks.expect_used(result, "all_to_all_single")
    row = hidden * expected[0].element_size()
    count = [[int((experts == e).sum()) for e in range(world_size)] for _, experts in routed]
    checks.expect_bytes(
        result,
        sent=[8 * (world_size - 1) + row * sum(count[r][e] for e in range(world_size) if e != r)
              for r in range(world_size)],
        received=[8 * (world_size - 1) + row * sum(count[s][r] for s in range(world_size)
                                                   if s != r) for r in range(world_size)])
