"""Chapter 18's layout search with the parts that its wrong answers change as arguments."""


def choose_layout_with(model, cluster, optimizer_state=True, node_rule=True,
                       least_memory=False):
    """The search of the notebook: with `optimizer_state` False the optimizer's memory is left
    out, with `node_rule` False tp may leave a node, with `least_memory` the layout that holds
    least wins instead of the one that sends least."""
    gpus = cluster["gpus"]
    sizes = [k for k in range(1, gpus + 1) if gpus % k == 0]
    best, best_key = None, None
    for tp in sizes:
        for pp in sizes:
            for cp in sizes:
                if gpus % (tp * pp * cp):
                    continue
                dp = gpus // (tp * pp * cp)
                if node_rule and tp > cluster["gpus_per_node"]:
                    continue
                if model["layers"] % pp or model["batch"] % dp or model["sequence"] % cp:
                    continue
                memory = memory_per_gpu(model, dp, tp, pp, cp)
                if not optimizer_state:
                    memory["optimizer state"] = 0
                if sum(memory.values()) > cluster["gpu_memory"]:
                    continue
                cost = (sum(memory.values()) if least_memory
                        else seconds_per_step(model, cluster, dp, tp, pp, cp))
                key = (cost, pp, tp, cp)
                if best_key is None or key < best_key:
                    best, best_key = (dp, tp, pp, cp), key
    return best
