// The memory room's interface: memory accounted outside the step's program (persistent state, initial
// allocations, lower bounds, runtime overhead: accounting.hpp; the optimizer's state tensors:
// optimizer_state.hpp; DeepSpeed ZeRO++'s secondary partitions and quantised buffers: zeropp.hpp), per-layer
// activation and shard sizes for a plan (layer_memory.hpp), and the simulated CUDA caching allocator with its
// replay of a timeline (allocator.hpp, replay.hpp). Other rooms include this header only.
#pragma once
#include "simulator/memory/accounting.hpp"
#include "simulator/memory/allocator.hpp"
#include "simulator/memory/ep_buffers.hpp"
#include "simulator/memory/layer_memory.hpp"
#include "simulator/memory/optimizer_state.hpp"
#include "simulator/memory/replay.hpp"
#include "simulator/memory/zeropp.hpp"
