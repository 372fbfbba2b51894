// --moe-imbalance F on the activations (issue 30): under expert parallelism the busiest EP rank's experts
// receive ceil(F x tokens x top_k) rows, and every tensor on the experts' side of the dispatch
// (ActTensor::expert_rows: the received and permuted input, _permute's index, the grouped GEMMs' outputs,
// SiLU and the product; torchtitan 0.3.0 models/common/token_dispatcher.py AllToAllTokenDispatcher,
// models/common/moe.py GroupedExperts) has that many rows; the token side (the router's tensors, the argsort,
// the token indices, the combine's) does not.
#include <catch2/catch.hpp>

#include "core/json_reader.hpp"
#include "sim_helpers.hpp"
#include "simulator/memory/accounting.hpp"
#include "simulator/memory/layer_memory.hpp"

using namespace shardplan;
using fixture::Setup;
using test::tiny_moe;

namespace {

Plan ep_plan(const Setup& s, int ep, double imbalance) {
  Plan p;
  p.seq = 64;
  p.ep = ep;
  p.moe_imbalance = imbalance;
  return s.resolve(p);
}

}  // namespace

TEST_CASE("MoE imbalance: the expert side of the list, tensor by tensor",
          "[simulator][moe][ep][activations]") {
  // torchtitan 0.3.0: GroupedExperts.forward runs w1, SiLU, w3, the product and w2 on x_RD, the rows the
  // rank's experts receive; under EP routed_input_RD is the all-to-all's output reordered by _permute (whose
  // index is saved), and the experts' output is routed_output_RD until _unpermute. The argsort, the sorted
  // scores, the token indices (LocalTokenDispatcher._local_reorder, on this rank's T·top_k rows) and the
  // combine's tensors (after the return all-to-all) are the token side.
  const ModelGraph m = ModelGraph::from_spec(tiny_moe());
  const Layer& moe = test::first_moe_layer(m);
  std::vector<std::string> expert_side, routed_token_side;
  for (const ActTensor& a : moe.activations) {
    // torchtitan's tensors (--moe-impl grouped under EP); the other implementations' are listed beside them.
    const bool titan = a.only == ActOnly::kAlways || a.only == ActOnly::kMoeGrouped ||
                       a.only == ActOnly::kMoeSorted || a.only == ActOnly::kMoeEp;
    if (!titan) continue;
    if (a.expert_rows > 0) {
      CHECK(a.expert_rows == 2);  // top_k rows per token
      CHECK(a.expert);
      expert_side.push_back(a.name);
    } else if (a.expert) {
      routed_token_side.push_back(a.name);
    }
  }
  CHECK(expert_side == std::vector<std::string>{"dispatch.routed_input", "dispatch.ep_permuted_indices",
                                                "experts.w_gate.out", "experts.silu.out", "experts.w_up.out",
                                                "experts.mul.out", "experts.w_down.out"});
  // (combine.scatter_index: the token indices' expanded view, packed by save_on_cpu only,
  // ActTensor::pack_only)
  CHECK(routed_token_side == std::vector<std::string>{"dispatch.sort_idx", "dispatch.scores_sorted",
                                                      "dispatch.token_idx", "combine.float", "combine.mul",
                                                      "combine.cast", "combine.scatter_index"});
  // The graph JSON carries the field and reads it back; without "expert" it is refused.
  const Json j = m.to_graph_json();
  CHECK(ModelGraph::from_graph_json(j, "tiny.graph.json").to_graph_json() == j);
  Json bad = j;
  for (auto& l : bad["layers"])
    for (auto& a : l["activations"])
      if (a.value("name", "") == "combine.float") {
        a["expert_rows"] = 2;
        a.erase("expert");
      }
  CHECK_THROWS_WITH(ModelGraph::from_graph_json(bad, "tiny.graph.json"),
                    Catch::Contains("expert_rows") && Catch::Contains("\"expert\": true"));
}

TEST_CASE("MoE imbalance: closed-form saved bytes of the busiest EP rank",
          "[simulator][moe][ep][activations]") {
  // T = 64 tokens, h 32, f 48, E 8, K 2, bf16 compute (fp32 router scores), no AC, eager, EP 2.
  // Token side per token: the layer's input 2h = 64, router.probs 4E = 32, top-k ids 8K = 16, argsort 8K =
  // 16, sorted scores 4K = 8, token indices 8K = 16, the combine's fp32 copy 4Kh = 256: 408 B, x 64 = 26,112.
  // Expert side per received row: routed input 2h = 64, _permute's index 8, gate, SiLU, up and product 4 x 2f
  // = 384: 456 B (the experts' bf16 output is saved only by inductor). Rows: mean T·K = 128; the busiest rank
  // ceil(128 F): F 1 -> 128 (84,480 B), F 1.5 -> 192 (113,664 B), F 1.01 -> ceil(129.28) = 130 (85,392 B).
  Setup s(ModelGraph::from_spec(tiny_moe()), load_cluster_spec("dgx-h100"), 2);
  const Layer& moe = test::first_moe_layer(s.model);
  const double T = 64;
  const Plan f1 = ep_plan(s, 2, 1.0), f15 = ep_plan(s, 2, 1.5), f101 = ep_plan(s, 2, 1.01);
  CHECK(layer_saved_bytes(moe, f1, T, false) == 26112.0 + 456.0 * 128);
  CHECK(layer_saved_bytes(moe, f15, T, false) == 26112.0 + 456.0 * 192);
  CHECK(layer_saved_bytes(moe, f101, T, false) == 26112.0 + 456.0 * 130);
  CHECK(ep_busiest_rows(128, 8, f101) == 130);
  CHECK(ep_busiest_rows(128, 8, f15) == 192);
  // Tensor by tensor: an expert-side tensor's bytes are its bytes per row times the busiest rows; the token
  // side's do not move.
  for (const ActTensor& a : moe.activations) {
    INFO(a.name);
    const double mean = T * act_bytes_per_token(a, f1, T);
    const double rows = a.expert_rows > 0 ? 192.0 / 128.0 : 1.0;
    CHECK(T * act_bytes_per_token(a, f15, T) == Approx(mean * rows).epsilon(1e-15));
  }
  // With EP 1 every rank runs its own tokens: the knob changes no activation (and _permute's index is absent:
  // 448 B per row).
  const Plan e1 = ep_plan(s, 1, 1.0), e1f = ep_plan(s, 1, 1.5);
  CHECK(layer_saved_bytes(moe, e1, T, false) == 26112.0 + 448.0 * 128);
  CHECK(layer_saved_bytes(moe, e1f, T, false) == layer_saved_bytes(moe, e1, T, false));
  // The planner's lower bound sees the same list: it grows by the expert side's 456 B x 64 extra rows.
  CHECK(memory_lower_bound(s.model, f15) - memory_lower_bound(s.model, f1) == 456 * 64);
}

TEST_CASE("MoE imbalance: the busiest rank's peak grows with F (qwen3-30b-a3b, EP 8)",
          "[simulator][moe][ep][memory]") {
  // The reference-lane paragraph's symptom: 8 GPUs, --ep 8, seq 4096, no AC, where the peak (the loss's
  // backward, every block's saved tensors live) was the same at F 1 and 2. Per MoE layer the expert side
  // saved eagerly: routed input 2h, _permute's index 8, gate, SiLU, up and product 4 x 2f: 4096 + 8 + 6144 =
  // 10,248 B per row (h 2048, f 768); T·K = 32,768 rows; F 2 adds 32,768 rows x 10,248 B x 48 layers =
  // 16,118,710,272 B to the saved activations.
  Setup s("qwen3-30b-a3b", "dgx-h100", 8);
  Simulator sim(s.model, *s.cluster, *s.costs);
  for (AcMode ac : {AcMode::kNone, AcMode::kSelective, AcMode::kFull}) {
    INFO("ac " << static_cast<int>(ac));
    Bytes prev_peak = 0, prev_bound = 0;
    for (double f : {1.0, 1.25, 1.5, 2.0}) {
      Plan p;
      p.seq = 4096;
      p.ep = 8;
      p.ac = ac;
      p.moe_imbalance = f;
      p = s.resolve(p);
      const Result r = sim.run(p);
      const Bytes bound = memory_lower_bound(s.model, p);
      CHECK(r.peak_bytes >= prev_peak);
      CHECK(bound >= prev_bound);
      CHECK(bound <= r.peak_reserved_bytes + r.overhead.total());
      if (ac == AcMode::kNone && f == 2.0) {
        Plan p1 = p;
        p1.moe_imbalance = 1.0;
        CHECK(activation_bytes(s.model, p) - activation_bytes(s.model, p1) == 16118710272);
        // The peak is the loss's backward, every block's saved tensors live (memory.peak_phase "backward
        // head"): the allocator replay's tensors grow by the same bytes (each a multiple of 512 already).
        CHECK(r.peak_bytes - sim.run(p1).peak_bytes == 16118710272);
      }
      prev_peak = r.peak_bytes;
      prev_bound = bound;
    }
  }
}
