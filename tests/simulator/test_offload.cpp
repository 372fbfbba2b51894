// CPU offload (docs/mechanics.md §1.11, docs/model.md "Offload"): what stays on the GPU, what the host holds,
// the PCIe traffic and the host optimizer step, derived from the mechanism.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"
#include "simulator/memory/accounting.hpp"

using namespace shardplan;
using fixture::Setup;

namespace {
const CommStats& comm(const Result& r, CommKind k) {
  return r.comm[static_cast<int>(k)];
}
}  // namespace

TEST_CASE("DeepSpeed ZeRO-Offload: optimizer state and fp32 gradients on the host, PCIe both ways, CPU Adam",
          "[simulator][offload]") {
  Setup s("llama3-70b", "dgx-a100-80g", 8);
  Plan p;
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 3;
  p.ac = AcMode::kFull;
  p.seq = 4096;
  const Result base = s.run(p);
  p.offload = Offload::kOptimizer;
  const Plan rp = s.resolve(p);
  const Result r = s.run(p);
  const StateElems e = state_elems(s.model, rp);
  // On the GPU: the 16-bit parameter partition only (bf16-mixed DeepSpeed: 2 B per element).
  CHECK(r.persistent_split[0] == e.params * 2);
  CHECK(r.persistent_split[1] == 0);
  CHECK(r.persistent_split[2] == 0);
  // On the host, per rank: fp32 master + Adam moments (12 B) and the fp32 gradient partition (4 B) per
  // partition element; a DGX holds 8 ranks: 16 x 8,819,213,312 x 8 = 1,128,859,303,936 B (~1.1 TB: 70B x 16
  // B).
  CHECK(r.host_bytes_per_node == e.optimizer * 16 * 8);
  CHECK(static_cast<double>(r.host_bytes_per_node) == Approx(70.55e9 * 16).epsilon(0.01));
  CHECK(r.host_capacity_bytes == 2'000'000'000'000);
  // PCIe: every reduce-scattered gradient partition goes down in fp32 (4 B), the updated 16-bit partition
  // comes back up after the step (2 B): (4 + 2) x partition elements, one micro-batch.
  CHECK(comm(r, CommKind::kOffloadCopy).bytes_per_rank ==
        Approx(static_cast<double>(e.grads) * 4 + static_cast<double>(e.optimizer) * 2));
  // The CPU step is not free: it runs at the host's memory bandwidth shared by 8 GPUs, so it takes longer
  // than the GPU's fused AdamW and the step gets slower.
  CHECK(r.optimizer_s > 10 * base.optimizer_s);
  CHECK(r.step_s > base.step_s);
  CHECK(r.tokens_per_s_per_gpu < base.tokens_per_s_per_gpu);
  // The GPU holds less: no fp32 state.
  CHECK(r.peak_bytes < base.peak_bytes);
}

TEST_CASE("host memory is a fit constraint: 70B with Adam on one 1 TB DGX A100 does not fit",
          "[simulator][offload]") {
  Setup s("llama3-70b", "dgx-a100-40g", 8);  // 1 TB of host memory per node
  Plan p;
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 3;
  p.ac = AcMode::kFull;
  p.seq = 1024;
  p.offload = Offload::kParams;
  const Result r = s.run(p);
  // ZeRO-Infinity (CPU): 16-bit params (2) + fp32 grads (4) + master and moments (12) = 18 B per element,
  // 8 ranks: ~70.55e9 x 18 = 1.27 TB > 1 TB.
  CHECK(r.persistent_bytes == 0);
  CHECK(static_cast<double>(r.host_bytes_per_node) == Approx(70.55e9 * 18).epsilon(0.01));
  CHECK(r.host_bytes_per_node > r.host_capacity_bytes);
  CHECK_FALSE(r.fits);
}

TEST_CASE(
    "FSDP CPU offload: nothing persistent on the GPU, each all-gather's shard comes up, each grad shard goes "
    "down",
    "[simulator][offload]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.ac = AcMode::kFull;
  p.seq = 4096;
  const Result base = s.run(p);
  p.offload = Offload::kParams;
  const Plan rp = s.resolve(p);
  const Result r = s.run(p);
  CHECK(r.persistent_bytes == 0);
  const StateElems e = state_elems(s.model, rp);
  // Host per rank: fp32 params 4 + fp32 grads 4 + Adam 8 = 16 B per shard element.
  CHECK(r.host_bytes_per_node == e.params * 16 * 8);
  // PCIe: the fp32 shard of every all-gather (forward + backward: each unit but the non-resharded head twice,
  // the head once) up, and every reduce-scattered fp32 grad shard down once.
  const double ag_shard_elems =
      comm(r, CommKind::kAllGather).bytes_per_rank / (7.0 / 8.0) / 2.0 / 8.0;  // bf16 AG
  CHECK(comm(r, CommKind::kOffloadCopy).bytes_per_rank ==
        Approx(ag_shard_elems * 4 + static_cast<double>(e.grads) * 4).epsilon(1e-9));
  CHECK(r.step_s > base.step_s);
  CHECK(r.optimizer_s > base.optimizer_s);
}
