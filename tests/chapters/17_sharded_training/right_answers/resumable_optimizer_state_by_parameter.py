r"""The wrapped optimizer's state read and written by parameter (its `state` dictionary, keyed by
the parameter itself) instead of through its own state_dict() and load_state_dict(): each
rank's file holds, under torch.optim's numbers, copies of the state of the parameters it owns,
and loading copies back the entries of the parameters this rank owns. It sends nothing.

Answer cell: 17-resume-optimizer
Test cell: 17-resume-optimizer-test, 17-resume-optimizer-memory-test
"""


def copied(state):
    return {key: value.clone() if torch.is_tensor(value) else value
            for key, value in state.items()}


class ResumableShardedOptimizer(ShardedOptimizer):
    def state_dict(self):
        saved = torch.optim.Optimizer.state_dict(self)
        settings = [{key: value for key, value in group.items() if key != "params"}
                    for group in self.local.param_groups]
        saved["param_groups"] = [{**setting, **group}
                                 for setting, group in zip(settings, saved["param_groups"])]
        params = [param for group in self.param_groups for param in group["params"]]
        saved["state"] = {i: copied(self.local.state[param]) for i, param in enumerate(params)
                          if param in self.local.state}
        return saved

    def load_state_dict(self, state_dict):
        torch.optim.Optimizer.load_state_dict(self, {**state_dict, "state": {}})
        params = [param for group in self.param_groups for param in group["params"]]
        for i, param in enumerate(params):
            if self.owner[param] == self.rank and i in state_dict["state"]:
                self.local.state[param] = copied(state_dict["state"][i])
