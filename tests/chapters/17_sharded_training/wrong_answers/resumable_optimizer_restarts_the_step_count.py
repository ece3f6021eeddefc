r"""Saves the moments of the parameters each rank owns and loads them back on the same rank, but
not the step counts: they start again from 0, and Adam's bias correction with them.

Answer cell: 17-resume-optimizer
Test cell: 17-resume-optimizer-test
Says: the step counts (state['step'], back to 0): the optimizer state was restored without them
"""


class ResumableShardedOptimizer(ShardedOptimizer):
    def state_dict(self):
        moments = {param_number: {k: v for k, v in state.items() if k != "step"}
                   for param_number, state in self.local.state_dict()["state"].items()}
        return {"param_groups": super().state_dict()["param_groups"], "moments": moments}

    def load_state_dict(self, state_dict):
        super().load_state_dict({"state": {}, "param_groups": state_dict["param_groups"]})
        mine = [p for group in self.local.param_groups for p in group["params"]]
        for i, moments in state_dict["moments"].items():
            state = {k: v.clone() for k, v in moments.items()}
            state["step"] = torch.tensor(0.0)
            self.local.state[mine[i]] = state
