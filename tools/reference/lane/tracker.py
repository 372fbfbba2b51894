"""The reference lane's allocation tracker and the summary of its events."""
from lane.group_hooks import GroupHooks


# ---------------------------------------------------------------------------------------------------------------
# Allocation trace: PyTorch's own FSDPMemTracker decides which storage is which category and when it is freed
# (weakref finalizers, storage resize_); every update of its snapshot becomes one event here.

CATEGORY = {
    "Sharded Param": "params",
    "Parameter": "params",
    "Gradient": "grads",
    "Optstate": "optimizer",
    "Other": "other",
    "Sharded Grad": "grads",
    "OptState": "optimizer",
    "Activation": "activations",
    "Temp": "activations",
    "Inputs": "activations",
    "Unsharded Param": "gathered_params",
    "All Gather": "gathered_params",
    "Unsharded Grad": "comm_buffers",
    "Reduce Scatter": "comm_buffers",
    "Buffer": "other",
}
CATEGORIES = ("params", "grads", "optimizer", "activations", "gathered_params", "comm_buffers", "other")
MIN_BLOCK = 512  # c10/cuda/CUDACachingAllocator.cpp kMinBlockSize: every request is rounded up to 512 bytes


def round_alloc(nbytes: int) -> int:
    return 0 if nbytes <= 0 else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def make_tracker(torch, model, optim, state, base=None, roles=None):
    """FSDP2: PyTorch's FSDPMemTracker. DDP and FSDP1 (base=MemTracker): the generic tracker, whose categories
    are coarser (gradients and reduction buffers created in backward count as activations); storages allocated
    while DDP builds its Reducer are its buckets (comm_buffers), and `roles` (storage -> category) names FSDP1's
    flat parameters and unsharded/low-precision flat buffers."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import _UpdateType
    from torch.distributed._tools.common_utils import get_untyped_storages

    base = base or FSDPMemTracker
    roles = roles or {}

    class TracingTracker(GroupHooks, base):
        """FSDPMemTracker that also appends one event per alloc/free/recategorization, in program order."""

        lane_state = state
        events: list = []
        live: dict = {}
        current_op = ""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            outer, self.current_op = self.current_op, str(func)
            try:
                return super().__torch_dispatch__(func, types, args, kwargs)
            finally:
                self.current_op = outer

        def phase(self):
            if state["phase"] == "optimizer":
                return f"optimizer, step {state['step']}"
            # The innermost block: ModTracker.parents is a set and may hold two blocks at once (the one running
            # and the one FSDP2 prefetches); the one entered last is the highest in forward, lowest in backward.
            blocks = set()
            for p in self._mod_tracker.parents:  # Transformer.layers.3, FullyShardedDataParallel._fsdp_...layers.3
                w = p.split(".")
                if "layers" in w[:-1] and w[w.index("layers") + 1].isdigit():
                    blocks.add(int(w[w.index("layers") + 1]))
            unit = "root"
            if blocks:
                unit = f"layers.{min(blocks) if self._mod_tracker.is_bw else max(blocks)}"
            return (f"{'backward' if self._mod_tracker.is_bw else 'forward'} {unit}, step {state['step']}, "
                    f"micro-batch {state['micro']}")

        def _emit(self, op, nbytes, category, sid):
            if nbytes == 0 or state["propagating"]:
                return
            self.live[category] = self.live.get(category, 0) + (nbytes if op == "alloc" else -nbytes)
            phase = state["phase"] if state["phase"] not in ("step", "optimizer") else self.phase()
            self.events.append((op, nbytes, category, phase, self.current_op, sid))

        role = None

        def _track(self, reftype, t):
            if roles:
                for st in get_untyped_storages(t):
                    self.role = roles.get(st._cdata, self.role)
            try:
                super()._track(reftype, t)
            finally:
                self.role = None

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # FSDP1's use_orig_params parameters are views of the flat parameter (not leaves) while unsharded:
            # no per-parameter gradient hooks (the gradients are still seen as the ops that create them).
            return super()._track_module_params_and_buffers(module, install_grad_hooks=install_grad_hooks
                                                            and base is FSDPMemTracker)

        def _update_snap(self, u_type, winfo, old_mem_consumed=None, old_reftype=None):
            super()._update_snap(u_type, winfo, old_mem_consumed=old_mem_consumed, old_reftype=old_reftype)
            if winfo.device.type != "cpu":
                return  # meta tensors of DTensor's sharding propagation: no memory anywhere
            if not hasattr(winfo, "_sp_role"):
                winfo._sp_role = self.role or ("comm_buffers" if state["phase"].startswith("wrap") else None)
            cat = winfo._sp_role or CATEGORY.get(str(winfo.reftype.value), "other")
            size = round_alloc(winfo.size * winfo.element_size)
            if not hasattr(winfo, "_sp_id"):
                winfo._sp_id = len(self.events)  # storage id in the trace: the index of its first event
            sid = winfo._sp_id
            if u_type == _UpdateType.ADD:
                winfo._sp_bytes = size
                self._emit("alloc", size, cat, sid)
            elif u_type == _UpdateType.DEL:
                self._emit("free", getattr(winfo, "_sp_bytes", size), cat, sid)
            elif u_type == _UpdateType.SIZE:
                old = getattr(winfo, "_sp_bytes", 0)
                winfo._sp_bytes = size
                if old:
                    self._emit("free", old, cat, sid)
                self._emit("alloc", size, cat, sid)
            elif u_type == _UpdateType.REF:
                old_cat = winfo._sp_role or CATEGORY.get(str(old_reftype.value), "other")
                if old_cat != cat:
                    b = getattr(winfo, "_sp_bytes", size)
                    self._emit("free", b, old_cat, sid)
                    self._emit("alloc", b, cat, sid)

    # DTensor's sharding propagation runs the op on global-shape fake tensors in the active fake mode (ours:
    # torch/distributed/tensor/_sharding_prop.py _propagate_tensor_meta_non_cached): metadata only, never memory.
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    orig = ShardingPropagator._propagate_tensor_meta_non_cached
    if not getattr(orig, "_sp_wrapped", False):
        def wrapped(self, *args, **kwargs):
            outer, state["propagating"] = state["propagating"], True
            try:
                return orig(self, *args, **kwargs)
            finally:
                state["propagating"] = outer

        wrapped._sp_wrapped = True
        ShardingPropagator._propagate_tensor_meta_non_cached = wrapped
    if base is FSDPMemTracker:
        return TracingTracker(model, optim)
    tracker = TracingTracker()
    tracker.track_external(model, optim)
    return tracker


def patch_mesh_concatenate(torch):
    """FSDP2 on DTensor (TP) parameters concatenates the dp and tp meshes (_fsdp_param.py _init_sharding_spec_tp
    -> DeviceMesh._concatenate), which computes coordinates from the mesh tensor with data-dependent ops; under
    the fake mode they fail (DynamicOutputShapeException: nonzero). Run it outside the fake mode: the mesh is
    metadata."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    orig = DeviceMesh._concatenate
    if getattr(orig, "_sp_wrapped", False):
        return

    def concatenate(*args, **kwargs):
        with unset_fake_temporarily():
            return orig(*args, **kwargs)

    concatenate._sp_wrapped = True
    DeviceMesh._concatenate = staticmethod(concatenate)


def summarize(events):
    """Peak of the running total (alloc/free pairs from re-categorization do not move it), the breakdown at the
    peak, and what is live per category at the end."""
    live = dict.fromkeys(CATEGORIES, 0)
    total = peak = 0
    peak_live, peak_phase, peak_index = dict(live), "", 0
    for i, (op, nbytes, cat, phase, _, _) in enumerate(events):
        d = nbytes if op == "alloc" else -nbytes
        live[cat] += d
        total += d
        if total > peak:
            peak, peak_live, peak_phase, peak_index = total, dict(live), phase, i
    return peak, peak_live, peak_phase, peak_index, dict(live)
