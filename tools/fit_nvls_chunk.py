#!/usr/bin/env python3
"""Fits the per-iteration hand-over cost of NCCL's single-domain NVLS all-reduce (simulator/collectives/collectives.cpp
kNvlsIterationSync_s) to an nccl-tests log, with everything else from NCCL's source: latency 25 us (tuning.cc
NVLS NVLink row), algbw = NVLink x nvlsEfficiency x n / (n + 1), 16 NVLS channels (NVLS_NCHANNELS_SM90), heads = n,
and the chunk of calcCollChunking (src/enqueue.cc). Model: t = 25 us + (iters + 1) x (loop / algbw + o), with
loop = channels x heads x chunk and iters = S / loop (the + 1: the last chunk's gather trails its reduction). Least squares on the relative error. Usage:
  python3 tools/fit_nvls_chunk.py tests/data/nccl-tests/dev/all_reduce_8ranks_h100_xxrjun.log
"""
import statistics
import sys

LAT_US = 25.0                      # hwLatencies NVLINK NVLS Simple (v2.29.2-1 src/graph/tuning.cc)
NVLINK_BPS = 18 * 20.6e9           # 18 links x SM90_NVLINK_BW (src/graph/topo.h)
EFFICIENCY = 0.85                  # nvlsEfficiency Hopper (tuning.cc)
CHANNELS = 16                      # NVLS_NCHANNELS_SM90 (src/transport/nvls.cc)


def chunk(channel_bytes, heads):  # calcCollChunking, NVLS branch
    c = 128 * 1024
    if channel_bytes < 64 * heads * c and c > 65536: c = 65536
    if channel_bytes < 8 * heads * c and c > 32768: c = 32768
    if channel_bytes < 2 * heads * c and c > 16384: c = 16384
    return c


def main(path):
    rows = []
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit() and len(f) > 6 and int(f[0]) >= 1 << 20:
            rows.append((int(f[0]), float(f[5]) * 1e-6))
    n = 8
    algbw = NVLINK_BPS * EFFICIENCY * n / (n + 1)
    xs, ys, ws = [], [], []
    for s, t in rows:
        loop = CHANNELS * n * chunk(s / CHANNELS, n)
        k = s / loop + 1
        xs.append(k); ys.append(t - LAT_US * 1e-6 - k * loop / algbw); ws.append(1 / t)
    o = sum(x * y * w * w for x, y, w in zip(xs, ys, ws)) / sum((x * w) ** 2 for x, w in zip(xs, ws))
    errs = []
    for (s, t), x, y in zip(rows, xs, ys):
        model = t - y + x * o
        errs.append(model / t - 1)
        print(f"{s:>12d}  measured {t*1e6:9.1f} us  model {model*1e6:9.1f} us  {100*(model/t-1):+5.1f} %")
    print(f"o = {o*1e6:.2f} us per iteration; median |error| {100*statistics.median(abs(e) for e in errs):.1f} %, "
          f"worst {100*max(abs(e) for e in errs):.1f} %")


if __name__ == "__main__":
    main(sys.argv[1])
