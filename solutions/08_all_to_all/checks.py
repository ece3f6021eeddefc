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


# --- 08-moe-layer-test -----------------------------------------------------------------------
def moe_inputs(rank, n_tokens, hidden, dtype, seed):
    """Rank `rank`'s tokens, the gradient its layer output gets from above, and the weights of
    expert `rank`: made on that rank only (and in the check)."""
    generator = checks.private_generator(rank, "moe", seed)

    def draw(*shape, scale=1.0):
        return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(dtype)
    x = draw(n_tokens[rank], hidden)
    grad_output = draw(n_tokens[rank], hidden)
    return x, grad_output, [draw(hidden, hidden, scale=hidden ** -0.5), draw(hidden, scale=0.1)]


def public_router_weight(world_size, hidden, dtype, seed):
    """The router's weight, the same on every rank (replicated, as data parallelism keeps it)."""
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(world_size, hidden, generator=generator, dtype=torch.float64)
            / hidden ** 0.5).to(dtype)


def expert_with(hidden, values, device=None, dtype=torch.float32):
    """make_expert(hidden), holding `values` ([weight, bias])."""
    expert = make_expert(hidden, device, dtype)
    with torch.no_grad():
        for param, value in zip(expert.parameters(), values):
            param.copy_(value)
    return expert


def moe_case(rank, world_size, n_tokens, hidden, capacity, dtype, seed):
    """moe_layer on this rank's own tokens, with expert `rank`'s own weights and the public
    router, then backward from this rank's own output gradient."""
    torch.set_num_threads(1)
    device = commlab.device()
    x, grad_output, values = moe_inputs(rank, n_tokens, hidden, dtype, seed)
    x = x.to(device).requires_grad_()
    router_weight = public_router_weight(world_size, hidden, dtype, seed).to(device)
    router_weight.requires_grad_()
    expert = expert_with(hidden, values, device, dtype)
    y = moe_layer(x, router_weight, expert, capacity)
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        raise checks.CheckFailed(
            f"On rank {rank}, moe_layer returned "
            f"{'a tensor' if isinstance(y, torch.Tensor) else repr(y)} that autograd cannot "
            "go back through (it does not require grad): the tokens, the router and the expert "
            "get no gradient. Build the output from x, the gates and "
            "what AllToAll.apply returns, without .detach() or torch.no_grad().")
    try:
        y.backward(grad_output.to(device))
    except RuntimeError as err:
        raise checks.CheckFailed(
            f"On rank {rank}, the backward pass through moe_layer raised RuntimeError: {err}\n"
            "AllToAll.backward gets the gradient of the rows its forward received and must "
            "return the gradient of the rows it sent, in their shape: each row's gradient goes "
            "back to the rank it came from, with the reverse all_to_all_single (what the "
            "forward received from rank j is sent to rank j: the two split-size lists trade "
            "places).") from None
    return {"output": y.detach(), "input_gradient": x.grad, "router_gradient": router_weight.grad,
            "expert_gradients": [p.grad for p in expert.parameters()]}


def within_capacity(expert_of_token, capacity):
    """For each token in order, whether its expert still has room for it: the first `capacity`
    tokens routed to an expert are kept, the later ones dropped."""
    seen = {}
    kept = []
    for expert in expert_of_token:
        kept.append(seen.get(expert, 0) < capacity)
        seen[expert] = seen.get(expert, 0) + 1
    return kept


def moe_reference(world_size, n_tokens, hidden, capacity, dtype, seed, *, through_experts=True,
                  dropped_as_zeros=False):
    """The layer of every rank in one process, token by token: a kept token's output is
    x + gate * expert(x), a dropped token's is x. Per rank: what moe_case returns, and how many
    tokens it routed to each expert. `through_experts=False` cuts the tokens from autograd on
    their way to the experts, `dropped_as_zeros` makes a dropped token's output zeros: the
    results of two mistakes, which the check names."""
    inputs = [moe_inputs(r, n_tokens, hidden, dtype, seed) for r in range(world_size)]
    experts = [expert_with(hidden, values, dtype=dtype) for _, _, values in inputs]
    results, routed = [], []
    for x, grad_output, _ in inputs:
        x = x.clone().requires_grad_()
        router_weight = public_router_weight(world_size, hidden, dtype, seed).requires_grad_()
        expert_of_token, gate = route(x, router_weight)
        choices = expert_of_token.tolist()
        rows = []
        for i, (expert, kept) in enumerate(zip(choices, within_capacity(choices, capacity))):
            token = x[i:i + 1] if through_experts else x[i:i + 1].detach()
            if kept:
                rows.append(x[i] + gate[i] * experts[expert](token)[0])
            else:
                rows.append(torch.zeros_like(x[i]) if dropped_as_zeros else x[i])
        y = torch.stack(rows) if rows else x + 0 * gate[:, None]
        y.backward(grad_output)
        # a rank whose tokens were all dropped gives its router zeros, not None
        results.append({"output": y.detach(), "input_gradient": x.grad,
                         "router_gradient": torch.zeros_like(router_weight)
                         if router_weight.grad is None else router_weight.grad})
        routed.append([choices.count(e) for e in range(world_size)])
    for result, expert in zip(results, experts):
        result["expert_gradients"] = [torch.zeros_like(p) if p.grad is None else p.grad
                                      for p in expert.parameters()]
    return results, routed


def check_moe_layer(result, n_tokens, hidden, capacity, dtype, seed):
    world_size = result.world_size
    case = dict(n_tokens=n_tokens, hidden=hidden, capacity=capacity, dtype=dtype, seed=seed)
    expected, routed = moe_reference(world_size, **case)
    got = result.returns
    for rank in range(world_size):
        where = dict(rank=rank, world_size=world_size, **case)
        words = f"On rank {rank}{checks.context_words(world_size, case)}"
        output = got[rank]["output"]
        if not checks.same(output, expected[rank]["output"]):
            if checks.same(output, moe_reference(world_size, n_tokens, hidden, 10**9, dtype,
                                                 seed)[0][rank]["output"]):
                most = max(range(world_size), key=lambda e: routed[rank][e])
                raise checks.CheckFailed(
                    f"{words}, the layer dropped no token: every token went through its expert. "
                    f"Each expert takes at most capacity={capacity} tokens from each rank, and "
                    f"this rank routed {routed[rank][most]} to expert {most}. Keep, for each "
                    f"expert, the first {capacity} tokens of this rank routed to it (in the "
                    "rank's order), send only those, and let the others through unchanged.")
            if checks.same(output, moe_reference(world_size, **case, dropped_as_zeros=True)[0][
                    rank]["output"]):
                raise checks.CheckFailed(
                    f"{words}, the tokens over the capacity came out as zeros. In this layer a "
                    "dropped token passes through unchanged (the residual): its output is its "
                    "input.")
        checks.expect(output, expected[rank]["output"], **where,
                      what="the layer's output (one process's: x + gate * expert(x) for a kept "
                           "token, x for a dropped one)")
    for rank in range(world_size):
        where = dict(rank=rank, world_size=world_size, **case)
        words = f"On rank {rank}{checks.context_words(world_size, case)}"
        gradients = got[rank]["expert_gradients"]
        if isinstance(gradients, list) and any(g is None for g in gradients):
            raise checks.CheckFailed(
                f"{words}, the expert's parameters got no gradient (their .grad is None): no "
                "gradient came back to the expert. The tokens left autograd on their way: a "
                "dist.all_to_all_single called outside AllToAll.apply, .detach() or "
                "torch.no_grad() cuts them off, and autograd cannot follow them to the expert "
                "and back.")
        checks.expect(gradients, expected[rank]["expert_gradients"], **where,
                      what=f"the gradients [weight, bias] of expert {rank} (one process's: from "
                           "the kept tokens of every rank routed to it; each output row's "
                           "gradient comes back to this rank with the reverse "
                           "all_to_all_single, in which the forward's two split-size lists "
                           "trade places)")
    for rank in range(world_size):
        where = dict(rank=rank, world_size=world_size, **case)
        words = f"On rank {rank}{checks.context_words(world_size, case)}"
        gradient = got[rank]["input_gradient"]
        if gradient is None:
            raise checks.CheckFailed(
                f"{words}, the tokens x got no gradient (x.grad is None): something detached "
                "them from autograd (.detach(), torch.no_grad()), so no gradient reaches the "
                "layers before this one.")
        if not checks.same(gradient, expected[rank]["input_gradient"]) and checks.same(
                gradient, moe_reference(world_size, **case, through_experts=False)[0][rank][
                    "input_gradient"]):
            raise checks.CheckFailed(
                f"{words}, the gradient of the tokens x holds only the residual's and the "
                "router's parts: none came back through the experts. The tokens were detached "
                "on their way to the experts (.detach() or torch.no_grad() before "
                "AllToAll.apply), so autograd cannot follow them there and back.")
        checks.expect(gradient, expected[rank]["input_gradient"], **where,
                      what="the gradient of this rank's tokens x (one process's: through the "
                           "residual, the router and each kept token's expert, back through "
                           "the two reverse all_to_all_single calls, in which the forward's two "
                           "split-size lists trade places)")
        checks.expect(got[rank]["router_gradient"], expected[rank]["router_gradient"], **where,
                      what="the router's gradient on this rank (one process's, from this "
                           "rank's tokens: through the gates)")


# --- 08-moe-layer-bytes-test -----------------------------------------------------------------
def moe_bytes_case(rank, world_size, n_tokens, hidden, capacity, dtype, seed):
    moe_case(rank, world_size, n_tokens, hidden, capacity, dtype, seed)


def check_moe_layer_bytes(result, n_tokens, hidden, capacity, dtype, seed):
    world_size = result.world_size
    checks.expect_only(result, {"all_to_all_single"})
    checks.expect_used(result, "all_to_all_single")
    _, routed = moe_reference(world_size, n_tokens, hidden, capacity, dtype, seed)
    # kept[src][dst]: the tokens rank src sends expert dst
    kept = [[min(count, capacity) for count in counts] for counts in routed]
    row = hidden * torch.empty((), dtype=dtype).element_size()
    # the counts once; each kept token, its output, and their two gradients once each way
    moved = [8 * (world_size - 1) + 2 * row * sum(kept[r][p] + kept[p][r]
                                                  for p in range(world_size) if p != r)
             for r in range(world_size)]
    checks.expect_bytes(
        result, sent=moved, received=moved,
        hint="The counts cross once; each kept token crosses once to its expert, its output once "
             "back, and their gradients once each in the backward pass; dropped tokens stay.")
