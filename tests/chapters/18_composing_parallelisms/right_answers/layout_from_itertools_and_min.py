r"""Every layout from itertools.product, filtered, and min with a key that breaks ties; the
sizes as a list, which the test takes as the tuple it is.

Answer cell: 18-choose-layout
Test cell: 18-choose-layout-test
"""
import itertools


def choose_layout(model, cluster):
    gpus = cluster["gpus"]
    divisors = [k for k in range(1, gpus + 1) if gpus % k == 0]
    fits = [[gpus // (tp * pp * cp), tp, pp, cp]
            for tp, pp, cp in itertools.product(divisors, repeat=3)
            if gpus % (tp * pp * cp) == 0 and tp <= cluster["gpus_per_node"]
            and model["layers"] % pp == 0 and model["sequence"] % cp == 0
            and model["batch"] % (gpus // (tp * pp * cp)) == 0]
    fits = [layout for layout in fits
            if sum(memory_per_gpu(model, *layout).values()) <= cluster["gpu_memory"]]
    if not fits:
        return None
    return min(fits, key=lambda layout: (seconds_per_step(model, cluster, *layout),
                                         layout[2], layout[1], layout[3]))
