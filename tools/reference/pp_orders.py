#!/usr/bin/env python3
"""Dumps the action orders of torch's multi-stage pipeline schedules, as torch itself computes them, for the
simulator's tests (tests/simulator/test_pipeline_torch_orders.cpp): each rank's compute actions of
ScheduleInterleaved1F1B, ScheduleZBVZeroBubble and ScheduleDualPipeV (their _calculate_single_rank_operations,
run on a stand-in `self` with the attributes the method reads, so no process group or stage is built) and the
FSDP residency torch's runtime adds to them (_add_unshard_reshard with its default max_active_stages = 3).

Usage: $(bash tools/pyenv.sh) tools/reference/pp_orders.py > tests/data/pp_orders.json
"""
import json
import sys
import types

import torch
from torch.distributed.pipelining import schedules as S

OPS = {S.FORWARD: "F", S.FULL_BACKWARD: "B", S.BACKWARD_INPUT: "I", S.BACKWARD_WEIGHT: "W"}


def flatten(actions):
    """Compute actions in order; OVERLAP_F_B's sub-actions one after the other; idle slots dropped."""
    out = []
    for a in actions:
        if a is None:
            continue
        for sub in a.sub_actions or (a,):
            out.append(sub)
    return out


def rank_ops(cls, pp, local_stages, m, rank):
    rounds = max(1, m // pp)
    me = types.SimpleNamespace(
        pp_group_size=pp,
        n_local_stages=local_stages,
        _n_microbatches=m,
        number_of_rounds=rounds,
        microbatches_per_round=m // rounds,
        num_stages=pp * local_stages,
        rank=rank,
    )
    return cls._calculate_single_rank_operations(me, rank)


def case(name, cls, pp, local_stages, m):
    ranks = []
    for rank in range(pp):
        ops = rank_ops(cls, pp, local_stages, m, rank)
        lowered = S._add_unshard_reshard(ops)
        unshard, reshard, i = [], [], 0
        pending_u, pending_r = [], []
        for a in lowered:
            if a.computation_type == S.UNSHARD:
                pending_u.append(a.stage_index)
            elif a.computation_type == S.RESHARD:
                pending_r.append(a.stage_index)
            else:
                for _ in a.sub_actions or (a,):
                    unshard.append(pending_u)
                    reshard.append(pending_r)
                    pending_u, pending_r = [], []
                    i += 1
        ranks.append({
            "actions": [[OPS[a.computation_type], a.stage_index, a.microbatch_index] for a in flatten(ops)],
            "unshard": unshard,
            "reshard": reshard,
        })
    return {"schedule": name, "pp": pp, "virtual_stages": local_stages, "micro_batches": m, "ranks": ranks}


def main():
    cases = []
    for pp, v, m in [(2, 2, 4), (4, 2, 8), (4, 4, 8), (4, 4, 4), (3, 5, 6), (8, 4, 16), (4, 3, 12)]:
        cases.append(case("interleaved-1f1b", S.ScheduleInterleaved1F1B, pp, v, m))
    for pp, m in [(2, 4), (4, 8), (4, 5)]:
        cases.append(case("zbv", S.ScheduleZBVZeroBubble, pp, 2, m))
    for pp, m in [(2, 4), (4, 8), (4, 12)]:
        cases.append(case("dualpipev", S.ScheduleDualPipeV, pp, 2, m))
    json.dump({"schema": "shardplan.pp_orders/1", "source": f"torch {torch.__version__} "
               "torch/distributed/pipelining/schedules.py (tools/reference/pp_orders.py)", "cases": cases},
              sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
