// Context parallelism (ring attention) and expert parallelism (MoE all-to-alls): bytes, memory and time
// derived from the mechanism (docs/model.md "Context parallelism", "Expert parallelism"), and the bad-input
// messages of resolve_plan.
#include <catch2/catch.hpp>
#include <string>

#include "core/error.hpp"
#include "sim_helpers.hpp"
#include "simulator/lowering/units.hpp"
#include "simulator/lowering/units_stages.hpp"
#include "simulator/memory/accounting.hpp"
#include "simulator/parallel/parallel.hpp"

using namespace shardplan;
using fixture::Setup;

namespace {
const CommStats& comm(const Result& r, CommKind k) {
  return r.comm[static_cast<int>(k)];
}
/// The InputError message resolve_plan throws for `p` ("" when none).
std::string resolve_error(const Setup& s, const Plan& p) {
  try {
    s.resolve(p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("expert parallelism: all-to-all bytes per MoE layer = tokens x hidden x top_k x dtype x (ep-1)/ep",
          "[simulator][ep]") {
  // Qwen3-30B-A3B: 48 blocks, every one MoE (128 experts, top-8), hidden 2048; bf16 compute.
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  Plan p;
  p.seq = 4096;
  p.ep = 8;
  p.ac = AcMode::kSelective;  // no block recomputation: each all-to-all runs once per pass
  const Plan rp = s.resolve(p);
  const Layer* moe = nullptr;
  int moe_layers = 0;
  for (const Layer* l : s.model.order())
    if (l->moe_experts > 0) moe = l, ++moe_layers;
  REQUIRE(moe_layers == 48);
  REQUIRE(moe->moe_top_k == 8);
  // One dispatch (or combine) buffer: 4096 tokens x top-8 = 32,768 routed rows x 2048 x 2 B = 134,217,728 B;
  // each rank sends 7/8.
  const double T = 4096;
  CHECK(moe_all_to_all_buffer_bytes(s.model.spec(), rp, T * 8) == 4096.0 * 2048 * 8 * 2);
  const Result r = s.run(p);
  // Per step: 48 layers x (2 forward + 2 backward) all-to-alls x 134,217,728 x 7/8 = 22,548,578,304 B.
  CHECK(comm(r, CommKind::kAllToAll).bytes_per_rank == Approx(48.0 * 4 * 4096 * 2048 * 8 * 2 * 7 / 8));
  CHECK(comm(r, CommKind::kAllToAll).count == 48 * 4);
  CHECK(comm(r, CommKind::kAllToAll).time_s > 0);
  // Imbalance 1.5: the busiest rank's routed tokens, and so its bytes, x 1.5.
  p.moe_imbalance = 1.5;
  const Result ri = s.run(p);
  CHECK(comm(ri, CommKind::kAllToAll).bytes_per_rank ==
        Approx(1.5 * comm(r, CommKind::kAllToAll).bytes_per_rank));
  // ... and its expert GEMMs take longer: the step cannot get faster.
  CHECK(ri.compute_s > r.compute_s);
  CHECK(ri.step_s > r.step_s);
  // A row is whole: the bytes follow the rows the busiest rank's experts get (moe_expert_rows, the count its
  // grouped GEMMs run on), ceil(F x 32,768). F = 1.00001: 32,768.33 -> 32,769 rows, not F x 32,768.
  // Per step: 48 layers x 4 all-to-alls x 32,769 x 2048 x 2 B x 7/8; DeepEP inside one node (no RDMA leg)
  // sends the same rows over NVLink: (U - 1) / U = 7/8 of them, dispatch and combine, forward and backward.
  p.moe_imbalance = 1.00001;
  const double rounded = 48.0 * 4 * 32769 * 2048 * 2 * 7 / 8;
  CHECK(comm(s.run(p), CommKind::kAllToAll).bytes_per_rank == Approx(rounded).epsilon(1e-12));
  p.ep_backend = EpBackend::kDeepEp;
  CHECK(comm(s.run(p), CommKind::kAllToAll).bytes_per_rank == Approx(rounded).epsilon(1e-12));
  p.ep_backend.reset();
  // Full AC recomputes the forward, its two all-to-alls included: 48 x 6.
  p.moe_imbalance = 1.0;
  p.ac = AcMode::kFull;
  CHECK(comm(s.run(p), CommKind::kAllToAll).count == 48 * 6);
}

TEST_CASE("expert parallelism: each EP rank holds experts / ep of every MoE layer", "[simulator][ep]") {
  // Plain data parallel (ZeRO-0) holds every parameter unsharded: with ep = 8 a rank keeps the dense
  // parameters and 1/8 of the routed experts, so it holds 7/8 of the expert parameters fewer.
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  std::int64_t expert_elems = 0;
  for (const Layer* l : s.model.order())
    for (const auto& t : l->tensors)
      if (t.expert) expert_elems += t.numel();
  Plan p;
  p.zero = 0;
  p.seq = 4096;
  const StateElems e1 = state_elems(s.model, s.resolve(p));
  p.ep = 8;
  const StateElems e8 = state_elems(s.model, s.resolve(p));
  CHECK(e1.params == s.model.parameters());
  CHECK(e8.params == e1.params - expert_elems / 8 * 7);
  // ZeRO-3: FSDP shards the dense parameters over 8 ranks and the 16 local experts over efsdp = 8 / 8 = 1:
  // the same total per rank up to FSDP2's per-tensor padding, but the experts are no longer all-gathered.
  p.zero = 3;
  p.ep = 1;
  const Plan r1 = s.resolve(p);
  p.ep = 8;
  const Plan r8 = s.resolve(p);
  CHECK(r8.efsdp_ranks() == 1);
  CHECK(static_cast<double>(state_elems(s.model, r8).params) ==
        Approx(static_cast<double>(state_elems(s.model, r1).params)).epsilon(1e-3));
  const Result a = s.run(r1), b = s.run(r8);
  // All-gather bytes per rank: without EP 7/8 of every unit's parameters; with EP only the dense ones'.
  const double dense = static_cast<double>(s.model.parameters() - expert_elems);
  CHECK(comm(a, CommKind::kAllGather).bytes_per_rank >
        comm(b, CommKind::kAllGather).bytes_per_rank +
            2.0 * 7 / 8 * 2 * static_cast<double>(expert_elems) * 0.99);
  // ... gathered in forward and again in backward (the FSDP2 head, not resharded, once): between one and two
  // passes of 7/8 x 2 B x the dense parameters.
  CHECK(comm(b, CommKind::kAllGather).bytes_per_rank <= 2.0 * 7 / 8 * 2 * dense * 1.01);
  CHECK(comm(b, CommKind::kAllGather).bytes_per_rank > 7.0 / 8 * 2 * dense);
}

TEST_CASE("context parallelism: activations per rank divided by cp", "[simulator][cp]") {
  // Every saved tensor (and the loss's log-softmax) is linear in the rank's tokens; cp = 2 halves them:
  // seq 8192 on cp 2 holds the activations of 4096 tokens.
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 8192;
  const Bytes a1 = activation_bytes(s.model, s.resolve(p));
  p.cp = 2;
  const Plan r2 = s.resolve(p);
  CHECK(r2.dp == 4);
  CHECK(r2.fsdp_ranks() == 8);
  const Bytes a2 = activation_bytes(s.model, r2);
  CHECK(std::abs(2 * a2 - a1) <= 2);  // rounding to whole bytes
  // Simulated: the peak's activations fall by at least the saved bytes removed minus the ring's buffers
  // (the all-gathered K/V of one layer, cp x 8192/2 tokens x 8 KV heads x 256 x 2 B = 33,554,432 B, and fp32
  // gradient accumulators).
  p.cp = 1;
  const Result b1 = s.run(p);
  p.cp = 2;
  const Result b2 = s.run(p);
  CHECK(b2.peak_bytes < b1.peak_bytes);
  const Bytes act1 = b1.breakdown[static_cast<int>(MemCategory::kActivations)];
  const Bytes act2 = b2.breakdown[static_cast<int>(MemCategory::kActivations)];
  CHECK(act2 < act1);
  // Persistent state: the FSDP group is dp_shard x cp = 4 x 2 = 8 ranks either way.
  CHECK(b2.persistent_bytes == b1.persistent_bytes);
}

TEST_CASE("context parallelism: ring attention bytes per attention layer", "[simulator][cp]") {
  // llama3-8b: 32 layers, 8 KV heads of 128. cp = 4, seq 16384: each rank holds 4096 tokens; its K and V are
  // 4096 x 8 x 256 x 2 B = 16,777,216 B. Forward: one all-gather, the rank sends (cp - 1) x 16 MiB; backward:
  // the same all-gather plus cp shifts of the fp32 dK/dV (2 x 16 MiB each).
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 16384;
  p.cp = 4;
  p.ac = AcMode::kSelective;
  const Result r = s.run(p);
  const double kv = 4096.0 * 8 * 256 * 2;
  CHECK(comm(r, CommKind::kCpRing).bytes_per_rank == Approx(32 * (3 * kv + 3 * kv + 4 * 2 * kv)));
  // Collectives: 32 forward all-gathers, 32 x (1 + 4) backward.
  CHECK(comm(r, CommKind::kCpRing).count == 32 + 32 * 5);
  // Exposed only where the attention compute does not hide it: never more than the transfers' time.
  CHECK(comm(r, CommKind::kCpRing).exposed_s <= comm(r, CommKind::kCpRing).time_s);
  // Throughput per GPU counts each sequence once over its tp x cp ranks: 2 sequences of 16384 tokens on 8
  // GPUs.
  CHECK(r.tokens_per_s_per_gpu == Approx(2.0 * 16384 / 8 / r.step_s));
}

TEST_CASE("context parallelism: more CP bandwidth never slows the step", "[simulator][cp]") {
  // cp = 8 over two DGX H100 nodes (tp 2: the CP group spans both); raising NVLink and NIC bandwidth can
  // only shorten every transfer.
  ClusterSpec spec = load_cluster_spec("dgx-h100");
  Plan p;
  p.seq = 32768;
  p.cp = 8;
  p.tp = 2;
  p.ac = AcMode::kFull;
  double prev = 1e30;
  for (double scale : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    ClusterSpec c = spec;
    c.node.nvlink_Bps *= scale;
    c.node.nic_Bps *= scale;
    Setup s(load_model("llama3-8b"), c, 16);
    const Result r = s.run(p);
    CHECK(r.step_s <= prev * (1 + 1e-12));
    prev = r.step_s;
  }
}

TEST_CASE("context and expert parallelism: bad input is one clear message naming the flag",
          "[simulator][cp][ep]") {
  Setup dense("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.seq = 8192;
  p.tp = 2;
  p.cp = 3;  // 8 / 2 = 4 ranks left
  CHECK(resolve_error(dense, p).find("--cp") != std::string::npos);
  CHECK(resolve_error(dense, p).find("does not divide the 4 ranks") != std::string::npos);
  p.cp = 4;
  p.seq = 8196;  // not a multiple of 2 x 4
  CHECK(resolve_error(dense, p).find("not divisible by 2 x cp = 8") != std::string::npos);
  p.seq = 8192;
  CHECK(resolve_error(dense, p).empty());
  p.cp = 1;
  p.tp = 1;
  p.ep = 2;
  CHECK(resolve_error(dense, p).find("no mixture-of-experts layers") != std::string::npos);

  Setup mixtral("mixtral-8x7b", "gb200-nvl72", 72);  // 8 experts
  Plan q;
  q.seq = 4096;
  q.ep = 9;
  CHECK(resolve_error(mixtral, q).find("exceeds the 8 experts") != std::string::npos);
  q.ep = 3;
  CHECK(resolve_error(mixtral, q).find("does not divide the 8 experts") != std::string::npos);
  q.ep = 8;
  q.shard_group = 4;  // HSDP: dp_shard 4 x cp 1
  CHECK(resolve_error(mixtral, q).find("does not divide dp_shard x cp = 4 x 1") != std::string::npos);
  q.shard_group = 0;
  CHECK(resolve_error(mixtral, q).empty());
  q.moe_imbalance = 0.5;
  CHECK(resolve_error(mixtral, q).find("--moe-imbalance") != std::string::npos);
}

TEST_CASE("cp = 1 and ep = 1 are the plan without them", "[simulator][cp][ep]") {
  // The defaults add no task, byte or lane: a plan spelled with cp = ep = 1 simulates to the same numbers.
  Setup s("mixtral-8x7b", "dgx-h100", 16);
  Plan p;
  p.seq = 4096;
  p.ac = AcMode::kFull;
  const Result a = s.run(p, true);
  CHECK(a.detail->program.lane_names.size() == static_cast<std::size_t>(kLanesWithoutCpEp));
  CHECK(comm(a, CommKind::kCpRing).bytes_per_rank == 0);
  CHECK(comm(a, CommKind::kAllToAll).bytes_per_rank == 0);
  p.ep = 1;
  p.cp = 1;
  p.moe_imbalance = 3.0;  // no EP: every rank runs all experts on its own tokens, nothing is imbalanced
  const Result b = s.run(p);
  CHECK(b.step_s == a.step_s);
  CHECK(b.peak_bytes == a.peak_bytes);
}

TEST_CASE("routed experts run one GEMM per local expert over its token group (grouped GEMM)",
          "[simulator][moe][ep]") {
  // Qwen3-30B-A3B: 128 experts of width 768, top 8, hidden 2048. A rank with T = 4,096 tokens computes T x 8
  // token-expert pairs: 256 per expert over all 128 experts without EP, 2,048 per expert over its 16 local
  // experts with EP 8. Each group's GEMM runs at its own M's efficiency (CostModel::gemm_efficiency); the
  // FLOPs are the same, so the time ratio is the efficiency ratio, (2048 / 2208) / (256 / 416) for M alone.
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  const Layer* moe = nullptr;
  for (const Layer* l : s.model.order())
    if (l->kind == LayerKind::kMoe && !moe) moe = l;
  REQUIRE(moe);
  REQUIRE(moe->moe_experts == 128);
  REQUIRE(moe->moe_top_k == 8);
  const Gemm* down = nullptr;
  for (const Gemm& g : moe->gemms)
    if (g.expert && g.tp == TpSplit::kRow) down = &g;
  REQUIRE(down);
  const double T = 4096, n = static_cast<double>(down->n), k = static_cast<double>(down->k);
  Plan p1;
  Plan p8 = p1;
  p8.ep = 8;
  const double rows = T * 8;  // T x top_k routed rows
  const double t1 = detail::routed_experts_gemm_s(*s.costs, *moe, *down, p1, rows, n, k, false);
  const double t8 = detail::routed_experts_gemm_s(*s.costs, *moe, *down, p8, rows, n, k, false);
  // Closed form: 128 GEMMs of M = 256 against 16 of M = 2,048, each 2 M n k FLOPs.
  CHECK(t1 == Approx(128 * s.costs->gemm_s(256, n, k)).epsilon(1e-12));
  CHECK(t8 == Approx(16 * s.costs->gemm_s(2048, n, k)).epsilon(1e-12));
  CHECK(t1 / t8 == Approx((2048.0 / 2208.0) / (256.0 / 416.0)).epsilon(1e-12));
  // The same FLOPs as top_k GEMMs over T tokens.
  CHECK(128 * 2.0 * 256 * n * k == Approx(down->count * 2.0 * T * n * k));
}
