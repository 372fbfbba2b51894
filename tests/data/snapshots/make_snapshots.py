#!/usr/bin/env python3
"""Writes the memory-snapshot test pickles (see SOURCES.md). Deterministic: re-running gives the same bytes."""
import pickle

MiB = 1 << 20
NO_FRAMES = []  # torch shares one empty frames list (memory_snapshot.cpp: empty_frames)


def block(size, state, requested=None):
    return {"address": 0, "size": size, "requested_size": size if requested is None else requested,
            "state": state, "frames": NO_FRAMES}


def segment(device, address, blocks, kind):
    total = sum(b["size"] for b in blocks)
    addr = address
    for b in blocks:
        b["address"] = addr
        addr += b["size"]
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    requested = sum(b["requested_size"] for b in blocks if b["state"] == "active_allocated")
    return {"device": device, "address": address, "total_size": total, "allocated_size": allocated,
            "active_size": active, "requested_size": requested, "stream": 0, "segment_type": kind,
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": NO_FRAMES, "blocks": blocks}


def entry(action, addr, size, t):
    key = "device_free" if action == "oom" else "addr"
    return {"action": action, key: addr, "size": size, "stream": 0, "time_us": t, "frames": NO_FRAMES}


def snapshot(oom):
    large = 0x7F0000000000
    small = 0x7F0002000000
    segs = [segment(0, large, [block(8 * MiB, "active_allocated"), block(2 * MiB, "active_pending_free"),
                               block(10 * MiB, "inactive")], "large"),
            segment(0, small, [block(512, "active_allocated", 100), block(2 * MiB - 512, "inactive")], "small")]
    trace = [entry("segment_alloc", large, 20 * MiB, 1), entry("alloc", large, 8 * MiB, 2),
             entry("alloc", large + 10 * MiB, 4 * MiB, 3), entry("segment_alloc", small, 2 * MiB, 4),
             entry("alloc", small, 512, 5), entry("alloc", large + 8 * MiB, 2 * MiB, 6),
             entry("free_requested", large + 10 * MiB, 4 * MiB, 7),
             entry("free_completed", large + 10 * MiB, 4 * MiB, 8),
             entry("free_requested", large + 8 * MiB, 2 * MiB, 9)]
    if oom:
        trace.append(entry("oom", 1 * MiB, 20 * MiB, 10))
    # device 1: one segment, no history recorded for it
    segs.append(segment(1, 0x7E0000000000, [block(6 * MiB, "active_allocated"), block(14 * MiB, "inactive")],
                        "large"))
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                "expandable_segments": False, "roundup_power2_divisions": {"1": 0, "2": 0}}
    return {"segments": segs, "device_traces": [trace, []], "allocator_settings": settings}


with open("snapshot_proto4.pickle", "wb") as f:
    pickle.dump(snapshot(False), f, protocol=4)
with open("snapshot_oom_proto2.pickle", "wb") as f:
    pickle.dump(snapshot(True), f, protocol=2)
# A pickle that would run os.system on load: GLOBAL then REDUCE. The reader must refuse it at byte 2.
with open("malicious_global.pickle", "wb") as f:
    f.write(b"\x80\x02cos\nsystem\nq\x00X\x0b\x00\x00\x00echo pwned!q\x01\x85q\x02Rq\x03.")
