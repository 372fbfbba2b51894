"""FSDPMemTracker (torch 2.15 torch/distributed/_tools/fsdp2_mem_tracker.py) with FSDP2 modules that hold several
parameter groups: torchtitan's MoE blocks under EP (distributed/fsdp.py apply_fsdp_to_decoder: a
shard_placement_fn returning ShardPlacementResult puts the routed experts on the `efsdp` mesh and the rest on
`fsdp`, two FSDPParamGroups in one FSDPState). The tracker asks `FSDPState._fsdp_param_group`, which asserts at most
one group (fsdp/_fully_shard/_fsdp_state.py). With several, the property answers a view of all of them: their
parameters in one list (the tracker names unsharded/sharded parameters and gradients from it), and the tracker's
pre_backward/post_backward wrappers installed on each group around that group's own method."""

_CURRENT: dict = {}


class _Groups:
    """All parameter groups of one FSDPState, seen as one by FSDPMemTracker."""

    def __init__(self, groups):
        object.__setattr__(self, "groups", groups)

    @property
    def fsdp_params(self):
        return [p for g in self.groups for p in g.fsdp_params]

    def __getattr__(self, name):
        if name not in ("pre_backward", "post_backward"):
            return getattr(self.groups[0], name)

        def fanout(*args, **kwargs):  # the tracker's wrapper calls it as the original: the calling group's method
            return _CURRENT[name](*args, **kwargs)

        fanout._sp_fanout = name
        return fanout

    def __setattr__(self, name, value):
        for g in self.groups:
            orig = g.__dict__.get("_sp_orig_" + name) or getattr(g, name)
            if getattr(value, "_sp_fanout", None) == name:  # the tracker restoring what it saved
                g.__dict__.pop(name, None)
                g.__dict__.pop("_sp_orig_" + name, None)
                continue
            g.__dict__["_sp_orig_" + name] = orig

            def call(*args, _orig=orig, _wrapped=value, _name=name, **kwargs):
                outer, _CURRENT[_name] = _CURRENT.get(_name), _orig
                try:
                    return _wrapped(*args, **kwargs)
                finally:
                    _CURRENT[_name] = outer

            setattr(g, name, call)


def patch_fsdp_param_group():
    from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

    if getattr(FSDPState, "_sp_groups_patched", False):
        return

    def group(self):
        groups = self._fsdp_param_groups
        if not groups:
            return None
        return groups[0] if len(groups) == 1 else _Groups(groups)

    FSDPState._fsdp_param_group = property(group)
    FSDPState._sp_groups_patched = True


def patch_reduce_role(tracker):
    """Everything FSDP2's foreach_reduce allocates (_fsdp_collectives.py: the reduce-scatter input it copies the
    unsharded gradients into, and its output) is the category comm_buffers (FSDPMemTracker names them only when its
    post_backward wrapper sees them: not a reduce-scatter still in flight, as every group's is on gloo); the output
    storages that become the sharded gradients are renamed grads by the caller (their storage ids)."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pg

    orig = pg.foreach_reduce
    if getattr(orig, "_sp_role", False):
        orig = orig._sp_orig

    def foreach_reduce(*args, **kwargs):
        outer, tracker.role = tracker.role, "comm_buffers"
        try:
            return orig(*args, **kwargs)
        finally:
            tracker.role = outer

    foreach_reduce._sp_role, foreach_reduce._sp_orig = True, orig
    pg.foreach_reduce = foreach_reduce
