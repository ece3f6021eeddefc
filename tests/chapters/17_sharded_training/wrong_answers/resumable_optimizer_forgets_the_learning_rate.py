r"""Each rank saves and loads its wrapped optimizer's state_dict() (moments, step counts, its
groups), but not this optimizer's own groups: after loading, step() copies their settings, those
the fresh optimizer was built with, over the learning rate the checkpoint restored.

Answer cell: 17-resume-optimizer
Test cell: 17-resume-optimizer-test
Says: the groups' settings (the learning rate the training halved before the checkpoint): \
    load_state_dict restored the state but not param_groups
"""


class ResumableShardedOptimizer(ShardedOptimizer):
    def state_dict(self):
        return self.local.state_dict()

    def load_state_dict(self, state_dict):
        self.local.load_state_dict(state_dict)
