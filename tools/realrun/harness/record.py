"""The harness's shardplan.run/1 record: cluster detection, building, validation, the environment."""
import json
import os
import socket
import sys

import torch

from harness.spec import MODEL_KEYS


RECORD_KEYS = {"schema", "id", "model", "cluster", "gpus", "plan", "measured", "source", "notes"}
PLAN_KEYS = {"runtime", "zero", "shard_group", "tp", "seq", "mbs", "grad_accum", "ac", "wrap", "prefetch",
             "reshard_after_forward", "precision", "reduce_dtype", "offload", "compile"}
MEASURED_KEYS = {"peak_allocated_bytes", "peak_active_bytes", "peak_reserved_bytes", "peak_device_bytes",
                 "step_s", "tokens_per_s_per_gpu", "mfu"}

# ================================================================================================
# Record
# ================================================================================================
def detect_cluster(gpu_name):
    n = (gpu_name or "").upper()
    if "H200" in n:
        return "hgx-h200"
    if "H100" in n:
        return "dgx-h100"
    if "B200" in n or "GB200" in n:
        return "dgx-b200" if "GB200" not in n else "gb200-nvl72"
    if "A100" in n and "80GB" in n:
        return "dgx-a100-80g"
    if "A100" in n:
        return "dgx-a100-40g"
    if "V100" in n and "32GB" in n:
        return "dgx-v100-32g"
    return None


def build_record(run_id, spec, cluster, gpus, plan, measured, notes, source):
    rec = {"schema": "shardplan.run/1", "id": run_id, "model": dict(spec, schema="shardplan.model/1"),
           "cluster": cluster, "gpus": int(gpus), "plan": plan, "measured": measured, "source": source,
           "notes": notes}
    errs = validate_record(rec)
    if errs:
        raise ValueError("invalid record: " + "; ".join(errs))
    return rec


def validate_record(rec):
    errs = []
    for k in ("schema", "id", "model", "cluster", "gpus", "plan", "measured"):
        if k not in rec:
            errs.append("missing " + k)
    if set(rec) - RECORD_KEYS:
        errs.append("unknown keys %s" % sorted(set(rec) - RECORD_KEYS))
    if rec.get("schema") != "shardplan.run/1":
        errs.append("schema")
    if set(rec.get("plan", {})) - PLAN_KEYS:
        errs.append("unknown plan keys %s" % sorted(set(rec["plan"]) - PLAN_KEYS))
    if set(rec.get("measured", {})) - MEASURED_KEYS:
        errs.append("unknown measured keys %s" % sorted(set(rec["measured"]) - MEASURED_KEYS))
    for k, v in rec.get("measured", {}).items():
        if k.endswith("_bytes") and not isinstance(v, int):
            errs.append("%s must be an integer" % k)
    m = rec.get("model")
    if isinstance(m, dict) and set(m) - set(MODEL_KEYS) - {"schema", "source", "notes", "description"}:
        errs.append("unknown model keys")
    return errs

def mem_stats():
    st = torch.cuda.memory_stats()
    keys = ["allocated_bytes.all.peak", "reserved_bytes.all.peak", "active_bytes.all.peak",
            "inactive_split_bytes.all.peak", "allocated_bytes.all.current", "reserved_bytes.all.current",
            "active_bytes.all.current", "inactive_split_bytes.all.current", "num_alloc_retries", "num_ooms",
            "num_device_alloc", "num_device_free"]
    return {k: int(st.get(k, 0)) for k in keys}


def environment():
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "host": socket.gethostname(),
           "python": sys.version.split()[0]}
    try:
        v = torch.cuda.nccl.version()
        env["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:  # noqa: BLE001
        env["nccl"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(gpu=p.name, gpu_total_memory_bytes=int(p.total_memory), gpu_sm_count=p.multi_processor_count)
    return env

def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
