r"""Each rank's file is right, but load_state_dict restores the groups with torch.optim.Optimizer's
own load_state_dict given the whole checkpoint, state included, then copies the state of the
parameters this rank owns into its wrapped optimizer: every rank keeps that state twice, the
checkpoint's tensors in self.state beside its wrapped optimizer's copies (and, given the files
of all ranks merged, every parameter's state).

Answer cell: 17-resume-optimizer
Test cell: 17-resume-optimizer-memory-test
Says: held_bytes(optimizer) after training resumed from the checkpoint
"""


class ResumableShardedOptimizer(ShardedOptimizer):
    def state_dict(self):
        local = self.local.state_dict()
        share = super().state_dict()
        share["param_groups"] = [{**mine, **group} for mine, group in zip(
            local["param_groups"], share["param_groups"])]
        params = [p for group in self.param_groups for p in group["params"]]
        owned = [i for i, p in enumerate(params) if self.owner[p] == self.rank]
        share["state"] = {owned[i]: state for i, state in local["state"].items()}
        return share

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for i, p in enumerate(params):
            if self.owner[p] == self.rank and i in state_dict["state"]:
                self.local.state[p] = {k: v.clone() if torch.is_tensor(v) else v
                                       for k, v in state_dict["state"][i].items()}
