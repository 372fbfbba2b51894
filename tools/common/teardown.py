"""How a process that ran collectives on gloo ends: every rank past its last collective, the process groups
destroyed, then the process leaves without finalizing the interpreter.

Why not a plain return or sys.exit: at interpreter finalization Python objects that still reference tensors held by
gloo's C++ work objects (FSDP2's last all-gather / reduce-scatter results, DTensor caches) are destroyed while the
interpreter is being torn down; the destructor takes the GIL and the process aborts with SIGABRT, "terminate called
without an active exception", after all of its output was written (pytorch PR 179291, 2026-04, describes the
mechanism; abandoned unmerged, so torch 2.15 still has it). Seen once in CI on an emitted FSDP2 script under
torchrun, whose JSON line rank 0 had already printed. os._exit skips finalization; the streams are flushed first
because os._exit does not flush them. The emitted FSDP2 scripts carry the same lines inline (they run without this
repository: planner/emit_fsdp2_script_main.cpp)."""

import os
import sys


def end_distributed(code=0):
    """Barrier, destroy every process group, flush stdout/stderr, os._exit(code). Never returns."""
    import torch.distributed as dist

    if dist.is_initialized():
        # A rank tearing gloo down while another still waits in a collective aborts the other one.
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
