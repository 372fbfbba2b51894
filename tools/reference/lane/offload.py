"""Activation offload in the reference lane: torch.autograd.graph.save_on_cpu(pin_memory=True) as it behaves on a
GPU, on the lane's fake CPU tensors.

torch 2.15 torch/autograd/graph.py save_on_cpu: pack_to_cpu copies every tensor autograd saves inside the context
into a new pinned host tensor (torch.empty(..., pin_memory=True).copy_(tensor, non_blocking=True)) and keeps only
that; unpack_from_cpu returns tensor.to(device, non_blocking=True), a new device tensor, each time the backward
reads it. On the lane's CPU device the real hooks would allocate their "host" copies on the same device the
tracker counts as GPU memory, so these hooks do what they do on a GPU: the packed bytes leave the device (the hook
keeps no reference; the original dies when the forward drops it) and are tallied as host bytes, and the unpack
allocates a device tensor of the same shape and dtype. Which tensors are packed is autograd's own choice: the
activations, and the weights the matmuls and norms save (under FSDP the unsharded parameters)."""


class SaveOnCpu:
    """saved_tensors_hooks with save_on_cpu's device effects; `host_bytes` sums what every forward packs."""

    def __init__(self, torch):
        self.torch = torch
        self.host_bytes = 0
        self.weight_bytes = 0

    def context(self):
        torch = self.torch

        def pack(t):
            nbytes = t.numel() * t.element_size()
            self.host_bytes += nbytes
            if isinstance(t, torch.nn.Parameter) or isinstance(t._base, torch.nn.Parameter):
                self.weight_bytes += nbytes  # a parameter or a view of one (mm saves weight.t())
            return (t.shape, t.dtype, t.device)

        def unpack(packed):
            shape, dtype, device = packed
            return torch.empty(shape, dtype=dtype, device=device)

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)

    def notes(self, forwards):
        """The record's note: one micro-batch's packed bytes (every forward packs the same)."""
        n = max(1, forwards)
        return (f"save_on_cpu packed {self.host_bytes // n} B per micro-batch to the host, "
                f"{self.weight_bytes // n} B of them parameters; ")
