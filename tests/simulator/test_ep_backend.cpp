// Token dispatch backends (--ep-backend; docs/model.md "Token dispatch backends"): DeepEP's ElasticBuffer
// bytes from DeepEP's own formula, the all-gather dispatcher's buffer and wire bytes, DeepEP's NVLink/RDMA
// traffic, each runtime's default and the capability refusals.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/cost/constants.hpp"
#include "simulator/memory/accounting.hpp"
#include "simulator/memory/ep_buffers.hpp"
#include "simulator/parallel/parallel.hpp"

using namespace shardplan;
using fixture::Setup;
using shardplan::test::units_of;

namespace {
const CommStats& dispatch(const Result& r) {
  return r.comm[static_cast<int>(CommKind::kAllToAll)];
}
std::string resolve_error(const Setup& s, const Plan& p) {
  try {
    s.resolve(p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
const Layer* first_moe(const ModelGraph& m) {
  for (const Layer* l : m.order())
    if (l->moe_experts > 0) return l;
  return nullptr;
}
}  // namespace

TEST_CASE("DeepEP: the ElasticBuffer's bytes are DeepEP's calculate_buffer_size", "[simulator][ep_backend]") {
  // WorkspaceLayout::get_num_bytes (layout.cuh): 16 + (1024 + 2048) x 8 + 1024 x 8 x 2 + 2048 x 8 x 2 +
  // 1024 x 4 + 1024 x 4 x 2 + 2048 x 4 x 2 + 1024 x 1024 x 8 + 1024 x 1024 x 4 + 32 + 33 x 1024 x 4 =
  // 12,820,528 B, aligned up to 2 MiB: 7 x 2,097,152 = 14,680,064 B.
  CHECK(fw::kDeepEpWorkspaceBytes == 7 * 2'097'152);
  // Direct mode (one NVLink domain, 8 ranks), hidden 2048, top-8, 4096 tokens per rank. Dispatch token slot:
  // hidden 4096 B + metadata 8 x 8 + 9 x 4 = 100 -> 128 B = 4224 B; combine slot: 4096 + 64 = 4160 B.
  // dispatch = 8 ranks x 4096 x 4224 = 138,412,032; combine = min(8, 8) x 4096 x 4160 = 136,314,880;
  // buffer = the larger, aligned to 2 MiB: 66 x 2 MiB = 138,412,032 exactly.
  const DeepEpBuffer d = deepep_buffer(2048, 8, 4096, 1, 8);
  CHECK(d.dispatch_bytes == 138'412'032);
  CHECK(d.combine_bytes == 136'314'880);
  CHECK(d.buffer_bytes == 138'412'032);
  CHECK(d.total() == 138'412'032 + 14'680'064);
  // Hybrid mode (2 domains x 8), hidden 7168 (DeepSeek-V3), top-8, 4096 tokens. Slots 14336 + 128 = 14464
  // and 14336 + 64 = 14400 B. dispatch = 8 x (2 x 4096) x 14464 + 4096 x 14464 + 2 x (4096 + 1280) x 14464
  // = 947,912,704 + 59,244,544 + 155,516,928 = 1,162,674,176; combine = 8 x 8192 x 14400 + 2 x 4096 x 14400
  // + 1 x 2 x 5376 x 14400 = 943,718,400 + 117,964,800 + 154,828,800 = 1,216,512,000; aligned up to 2 MiB:
  // 581 x 2,097,152 = 1,218,445,312.
  const DeepEpBuffer h = deepep_buffer(7168, 8, 4096, 2, 8);
  CHECK(h.dispatch_bytes == 1'162'674'176);
  CHECK(h.combine_bytes == 1'216'512'000);
  CHECK(h.buffer_bytes == 1'218'445'312);
}

TEST_CASE("DeepEP: the plan's buffer is runtime overhead for the whole run", "[simulator][ep_backend]") {
  // Qwen3-30B-A3B (hidden 2048, top-8), 16 H100s, ep 8 (one node), seq 4096, mbs 1: torchtitan sizes the
  // buffer for 1 x 4096 / (cp 1 x tp 1) = 4096 tokens -> 138,412,032 + 14,680,064 B (the case above).
  Setup s("qwen3-30b-a3b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  p.ep = 8;
  p.ep_backend = EpBackend::kDeepEp;
  const Plan rp = s.resolve(p);
  CHECK(deepep_max_tokens_per_rank(rp) == 4096);
  CHECK(ep_dispatch_buffer_bytes(rp, s.model, *s.cluster) == 153'092'096);
  const Result r = s.run(p);
  CHECK(r.overhead.ep_dispatch_bytes == 153'092'096);
  CHECK(r.overhead.total() == runtime_overhead(rp).total() + 153'092'096);
  // The all-to-all backend holds no such buffer.
  p.ep_backend = EpBackend::kAllToAll;
  CHECK(s.run(p).overhead.ep_dispatch_bytes == 0);
}

TEST_CASE("allgather dispatcher: gathered [T x ep, h] buffer and its all-gather + reduce-scatter bytes",
          "[simulator][ep_backend]") {
  // Megatron runtime (default backend allgather), Qwen3-30B-A3B on 8 H100s, ep 4, tp 1, seq 4096, no AC.
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  Plan p;
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  p.seq = 4096;
  p.ep = 4;
  const Plan rp = s.resolve(p);
  REQUIRE(rp.ep_backend == EpBackend::kAllGather);
  // Gathered buffer: 4096 tokens x 4 ranks x 2048 x 2 B = 67,108,864 B.
  CHECK(allgather_dispatch_buffer_bytes(s.model.spec(), rp, 4096) == 67'108'864.0);
  // Per pass and MoE layer one all-gather and one reduce-scatter over the 4 ranks, each sending 3/4 of the
  // buffer; 48 MoE layers x 2 passes: 48 x 2 x 2 x 3/4 x 67,108,864 = 9,663,676,416 B, 48 x 4 collectives.
  const Result r = s.run(p);
  CHECK(dispatch(r).bytes_per_rank == Approx(9'663'676'416.0).epsilon(1e-12));
  CHECK(dispatch(r).count == 48 * 4);
  // Every token is gathered whatever the router chose: the bytes do not depend on the imbalance (the
  // all-to-all's grow with it).
  p.moe_imbalance = 1.5;
  CHECK(dispatch(s.run(p)).bytes_per_rank == Approx(9'663'676'416.0).epsilon(1e-12));
  // The backward's gathered gradient is a transient of each unit with a MoE layer: the workspace grows by
  // the buffer over the all-to-all backend's.
  p.moe_imbalance = 1.0;
  const auto ug = units_of(s, rp);
  p.ep_backend = EpBackend::kAllToAll;
  const auto ua = units_of(s, s.resolve(p));
  REQUIRE(ug.size() == ua.size());
  bool some = false;
  for (std::size_t i = 0; i < ug.size(); ++i)
    if (ug[i].blocks > 0) {
      CHECK(std::llabs(ug[i].workspace_bytes - ua[i].workspace_bytes - 67'108'864) <= 1);
      some = true;
    }
  CHECK(some);
}

TEST_CASE("DeepEP: NVLink and RDMA traffic of the dispatch", "[simulator][ep_backend]") {
  // Qwen3-30B-A3B, 16 H100s in 2 nodes, ep 16: 8 ranks per NVLink domain (U), 2 domains (S); top-8;
  // 4096 tokens, 32,768 routed rows (moe_expert_rows at a balanced router); a row is 2048 x 2 B. NVLink:
  // T k (U - 1)/U rows = 4096 x 8 x 7/8 x 4096 B = 117,440,512 B. RDMA: each token once per remote domain
  // holding one of its experts: T (S - 1)(1 - (1 - 1/S)^k) = 4096 x (1 - 2^-8) rows = 4096 x 255/256 x 4096 B
  // = 16,711,680 B.
  Setup s("qwen3-30b-a3b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  p.ep = 16;
  p.ep_backend = EpBackend::kDeepEp;
  const Plan rp = s.resolve(p);
  const Layer* l = first_moe(s.model);
  REQUIRE(l != nullptr);
  const DeepEpTraffic t = deepep_traffic(s.model.spec(), *l, *s.cluster, rp, 4096 * 8);
  CHECK(t.nvlink_bytes == Approx(117'440'512.0));
  CHECK(t.rdma_bytes == Approx(16'711'680.0));
  const GroupView g = s.cluster->group(16, 1);
  CHECK(t.nvlink_Bps == Approx(g.intra_Bps * 153.0 / 160.0));
  CHECK(t.rdma_Bps == Approx(g.inter_Bps / 8 * 43.0 / 50.0));
  // One pass: dispatch + combine, each bounded by its slower leg.
  const EpLayerCost c = deepep_dispatch_cost(s.model.spec(), *l, *s.cluster, rp, 4096 * 8);
  CHECK(c.a2a_s == Approx(2 * std::max(t.nvlink_bytes / t.nvlink_Bps, t.rdma_bytes / t.rdma_Bps)));
  CHECK(c.a2a_bytes == Approx(2 * (117'440'512.0 + 16'711'680.0)));
  // Inside one node (ep 8) there is no RDMA leg and the NVLink rows are the all-to-all's (7/8 of T k).
  p.ep = 8;
  const DeepEpTraffic t8 = deepep_traffic(s.model.spec(), *l, *s.cluster, s.resolve(p), 4096 * 8);
  CHECK(t8.rdma_bytes == 0);
  CHECK(t8.nvlink_bytes ==
        Approx(moe_all_to_all_buffer_bytes(s.model.spec(), s.resolve(p), 4096 * 8) * 7 / 8));
}

TEST_CASE("ep backend: each runtime's default, and the refusals", "[simulator][ep_backend][capabilities]") {
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.ep = 4;
  CHECK(s.resolve(p).ep_backend == EpBackend::kAllToAll);  // torchtitan: comm_backend "standard"
  p.runtime = Runtime::kDeepSpeed;
  CHECK(s.resolve(p).ep_backend == EpBackend::kAllToAll);  // deepspeed/moe/sharded_moe.py _AllToAll
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  CHECK(s.resolve(p).ep_backend == EpBackend::kAllGather);  // megatron-core 0.8.0's default dispatcher
  p.ep = 1;
  CHECK(!s.resolve(p).ep_backend);  // dense plans: nothing printed, nothing dispatched
  // Refusals: one sentence naming the flag, the runtime and its source.
  p.ep = 4;
  p.ep_backend = EpBackend::kDeepEp;
  CHECK_THAT(resolve_error(s, p), Catch::Contains("--ep-backend") && Catch::Contains("megatron") &&
                                      Catch::Contains("flex dispatcher"));
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 3;
  CHECK_THAT(resolve_error(s, p), Catch::Contains("--ep-backend") && Catch::Contains("AutoEP"));
  p.runtime = Runtime::kFsdp2;
  CHECK(resolve_error(s, p).empty());
  p.ep_backend = EpBackend::kAllGather;
  CHECK_THAT(resolve_error(s, p), Catch::Contains("no all-gather dispatcher"));
  p.ep = 1;
  p.ep_backend = EpBackend::kDeepEp;
  CHECK_THAT(resolve_error(s, p), Catch::Contains("requires expert parallelism"));
}

TEST_CASE("an expert loop under EP: only the runtimes with one", "[simulator][ep_backend][capabilities]") {
  // --moe-impl loop is Hugging Face's MixtralSparseMoeBlock: torchtitan runs only grouped GEMMs and the
  // transformers block under FSDP2 has no EP, so fsdp2 refuses it with --ep > 1; DeepSpeed's MoE Experts
  // and Megatron-core's SequentialMLP loop over their local experts under EP.
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.moe_impl = MoeImpl::kLoop;
  p.ep = 1;
  CHECK(resolve_error(s, p).empty());
  p.ep = 4;
  CHECK_THAT(resolve_error(s, p), Catch::Contains("--moe-impl") && Catch::Contains("GroupedExperts") &&
                                      Catch::Contains("use --moe-impl grouped or --ep 1"));
  p.moe_impl = MoeImpl::kGrouped;
  CHECK(resolve_error(s, p).empty());
  p.moe_impl = MoeImpl::kLoop;
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 3;
  CHECK(resolve_error(s, p).empty());
  p.runtime = Runtime::kMegatron;
  p.zero = 1;
  CHECK(resolve_error(s, p).empty());
}
