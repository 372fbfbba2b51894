"""The published runs' measurements: memory kinds, throughput, MFU."""
from published.plan import _number, fp8_recipe
from published.presets import GIB, MIB


# --------------------------------------------------------------------------------------------------
# Measured
# --------------------------------------------------------------------------------------------------
KIND_KEY = {"max_reserved": "peak_reserved_bytes", "max_active": "peak_active_bytes",
            "max_allocated": "peak_allocated_bytes", "unspecified": "peak_device_bytes"}


def map_measured(rec, notes):
    out = {}
    meas = rec["measured"]
    norm = rec.get("normalized") or {}
    src = rec["source"].get("repo")
    pm = meas.get("peak_memory")
    if isinstance(pm, dict):
        kind = str(pm.get("kind") or "")
        if _number(pm.get("bytes")):
            key = KIND_KEY.get(kind)
            if key:
                out[key] = int(pm["bytes"])
        elif src == "pytorch/ao" and "max_reserved" in kind and _number(pm.get("bytes_if_GiB")):
            # torchtitan's memory monitor logs reserved_bytes.all.peak / 2**30 ("GiB"); the ao table labels it GB.
            out["peak_reserved_bytes"] = int(pm["bytes_if_GiB"])
            notes.append("peak memory %.2f 'GB' in the ao table is torchtitan's max_reserved log, which divides "
                         "by 2**30 (GiB): peak_reserved_bytes = value x 2**30" % (pm["bytes_if_GiB"] / GIB))
        elif src == "hpcaitech/ColossalAI-Pytorch-lightning" and _number(pm.get("value")):
            # benchmark/gpt/callback.py prints torch.cuda.max_memory_allocated()/1024**2 labelled 'MB' (rank 0).
            out["peak_allocated_bytes"] = int(round(pm["value"] * MIB))
            notes.append("'Max CUDA memory allocated (MB)' is torch.cuda.max_memory_allocated()/1024**2 printed "
                         "on rank 0 by benchmark/gpt/callback.py: peak_allocated_bytes = value x 2**20")
        elif src == "LianjiaTech/BELLE" and _number(pm.get("bytes_if_GiB")) and _number(pm.get("value")):
            out["peak_device_bytes"] = int(pm["bytes_if_GiB"])
            per = meas.get("peak_memory_per_gpu_GB")
            notes.append("memory '%sGB' per GPU as written by the user (ranks: %s), tool not named; read as "
                         "nvidia-smi-like (device total incl. CUDA context and cache). nvidia-smi prints MiB, so "
                         "the one-decimal 'GB' is taken as GiB (value x 2**30, +-0.05 GiB); if it was decimal GB "
                         "the true value is 7%% lower" % (pm["value"], per))
        else:
            notes.append("published peak memory (%s %s, kind %r) left out: unit not certain"
                         % (pm.get("value"), pm.get("unit"), kind))
    # PR 165 carries active and reserved separately
    pa = meas.get("peak_memory_active")
    if isinstance(pa, dict) and _number(pa.get("bytes")):
        out["peak_active_bytes"] = int(pa["bytes"])
    pr = meas.get("peak_memory_reserved")
    if isinstance(pr, dict) and _number(pr.get("bytes")):
        out["peak_reserved_bytes"] = int(pr["bytes"])
    if pa or pr:
        notes.append("peak memory published as % of 95.0396 GiB; bytes = pct x 95.0396 GiB (+-0.005% rounding)")
    tps = norm.get("tokens_per_s_per_gpu")
    if _number(tps) and tps > 0:
        out["tokens_per_s_per_gpu"] = tps
    st = norm.get("step_time_s")
    if st is None and _number(norm.get("step_time_s_derived")):
        st = norm["step_time_s_derived"]
        notes.append("step_s derived = global batch tokens / published total tokens/s")
    if _number(st) and st > 0:
        out["step_s"] = st
    if _number(meas.get("mfu_pct")) and meas["mfu_pct"] > 0:
        out["mfu"] = round(meas["mfu_pct"] / 100.0, 6)
        tflops = meas.get("model_tflops_per_gpu")
        if fp8_recipe(rec) and _number(tflops) and tflops > 0:
            # shardplan's MFU divides by the bf16 peak; a float8 row may publish it against the fp8 peak, which
            # the ratio of its own columns shows (MosaicML: 598 TFLOP/s at 30.25 % -> 1977 TFLOP/s = H100 fp8).
            implied = tflops / (meas["mfu_pct"] / 100.0)
            if abs(implied / 1978.9 - 1) < 0.02:
                out["mfu"] = round(tflops / 989.4, 6)
                notes.append("published MFU %.2f %% is against the H100 fp8 peak (model TFLOP/s %s / MFU = %.0f "
                             "TFLOP/s); restated against the bf16 peak 989.4 TFLOP/s: %.4f"
                             % (meas["mfu_pct"], tflops, implied, out["mfu"]))
    return out
