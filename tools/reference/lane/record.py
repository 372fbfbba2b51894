"""The reference lane's outputs: the shardplan.run/1 record and the shardplan.reference_trace/1 trace."""
import json
import sys
import time
from pathlib import Path

from lane.tracker import CATEGORIES, summarize


def record_plan(plan: dict, grad_accum: int) -> dict:
    """The run record's plan keys both paths write, in the committed records' order."""
    return {"runtime": plan["runtime"], "zero": plan["zero"], "seq": plan["seq"], "mbs": plan["mbs"],
            "grad_accum": grad_accum, "ac": plan["ac"], "wrap": plan["wrap"], "prefetch": plan["prefetch"],
            "reshard_after_forward": plan["reshard_after_forward"], "precision": plan["precision"],
            "reduce_dtype": plan["reduce_dtype"], "fused_optimizer": plan["fused_optimizer"],
            "hold_logits": plan["hold_logits"], "loss_dtype": plan["loss_dtype"],
            **({"root_params": plan["root_params"]} if plan.get("root_params", "none") != "none" else {}),
            **({"keep_last_block": True} if plan.get("keep_last_block") else {}),
            **({"loss_impl": "chunked", "loss_chunks": plan["loss_chunks"]}
               if plan.get("loss_impl") == "chunked" else {})}


def write_outputs(a, torch, dist, events, t0, rid, record_model, rec_plan, measured, notes_head, n_params) -> int:
    """Writes the shardplan.run/1 record (-o) and, with --trace, the shardplan.reference_trace/1 trace of one run
    (data parallel or one pipeline rank): the peak and its breakdown from the tracker's events; `measured` adds to
    the record's measured keys, `notes_head` opens its notes (what ran). Ends the process group; returns 0."""
    wall_s = time.time() - t0
    peak, breakdown, peak_phase, peak_index, live_end = summarize(events)
    tv = torch.__version__.split("+")[0]
    rid = a.id or rid
    bd = " ".join(f"{c}={breakdown[c]}" for c in CATEGORIES)
    record = {
        "schema": "shardplan.run/1",
        "id": rid,
        "model": record_model,
        "cluster": a.cluster,
        "gpus": a.gpus,
        "plan": rec_plan,
        "measured": {"peak_allocated_bytes": peak, **measured},
        "source": f"pytorch reference, fake process group, torch {tv}",
        "notes": (f"{notes_head}fused={rec_plan['fused_optimizer']} AdamW, clip_grad_norm={not a.no_clip}; "
                  f"breakdown at peak ({peak_phase}): {bd}; sizes rounded to 512 B per allocation; "
                  f"persistent at end: params={live_end['params']} grads={live_end['grads']} "
                  f"optimizer={live_end['optimizer']}"),
    }
    out = Path(a.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    if a.trace:
        trace = {
            "schema": "shardplan.reference_trace/1",
            "record_id": rid,
            "torch": torch.__version__,
            "device": "cpu (fake tensors)",
            "parameters": n_params,
            "peak_allocated_bytes": peak,
            "peak_event": peak_index,
            "peak_phase": peak_phase,
            "breakdown_at_peak": breakdown,
            "persistent_at_end": {c: live_end[c] for c in ("params", "grads", "optimizer")},
            "events": [{"op": op, "bytes": b, "category": c, "phase": ph, "aten": fn, "storage": sid,
                        "stream": "default"} for op, b, c, ph, fn, sid in events],
        }
        Path(a.trace).write_text(json.dumps(trace, separators=(",", ":")) + "\n")
    print(f"{rid}: peak_allocated {peak} B ({peak / 2**30:.2f} GiB) at {peak_phase}; {len(events)} events; "
          f"{wall_s:.1f} s", file=sys.stderr)
    dist.destroy_process_group()
    return 0
