"""FSDP2's grouped forward hooks under the reference lane's tracker (lane/tracker.py)."""


class GroupHooks:
    """Mixin over FSDPMemTracker (torch 2.15 torch/distributed/_tools/fsdp2_mem_tracker.py); the class using it
    sets `lane_state` (the run's state dict; its "group_hooks" turns the gating on)."""

    lane_state: dict = {}

    # FSDPMemTracker replaces each FSDP state's forward hooks by one pre/post pair per module
    # (_instrument_fsdp_module), which runs a grouped state's (fully_shard([norm, output])) full post-forward
    # after every module instead of once per group pass (torch 2.15 _fsdp_state.py
    # _register_group_forward_hooks: `modules_to_run`). With state["group_hooks"] the wrappers keep FSDP's
    # gating: the chunked loss calls the head alone per chunk, and a post-forward there would register a
    # pre-backward hook on the chunk's logits whose backward ends FSDP2's iteration per chunk (releasing
    # the last reduce-scatter input and clearing the implicit backward prefetch), which real FSDP2 does not.
    def _fsdp_state_pre_forward(self, fsdp_mod, orig):
        inner = super()._fsdp_state_pre_forward(fsdp_mod, orig)
        st = fsdp_mod._get_fsdp_state()
        if not self.lane_state.get("group_hooks") or len(st._modules) < 2:
            return inner

        def gated(*args, **kwargs):
            if not st._modules_to_run_forward:
                st._modules_to_run_forward.update(st._modules)
            return inner(*args, **kwargs)

        return gated

    def _fsdp_state_post_forward(self, fsdp_mod, orig):
        inner = super()._fsdp_state_post_forward(fsdp_mod, orig)
        st = fsdp_mod._get_fsdp_state()
        if not self.lane_state.get("group_hooks") or len(st._modules) < 2:
            return inner

        def gated(module, input, output):
            if module in st._modules_to_run_forward:
                st._modules_to_run_forward.remove(module)
                if not st._modules_to_run_forward:
                    return inner(module, input, output)
            return st._cast_output_dtype(output)

        return gated

