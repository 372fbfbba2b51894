// Shared fixtures for the simulator tests: a model + cluster + cost model bundle that keeps the references
// the Simulator holds alive, plan construction through resolve_plan, and a walk over a Program's memory
// effects.
#pragma once
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "simulator/cost/cost_model.hpp"
#include "simulator/lowering/units.hpp"
#include "simulator/model/model_graph.hpp"
#include "simulator/model/presets.hpp"
#include "simulator/plan/plan_types.hpp"
#include "simulator/plan/runtime.hpp"
#include "simulator/simulate/pipeline_step.hpp"
#include "simulator/simulate/simulate.hpp"
#include "tests/common/fixture.hpp"
#include "topologies/cluster.hpp"

namespace shardplan::test {

using fixture::Setup;

/// A Llama-2-7B-shaped model with fewer blocks (keeps the grid tests fast).
inline ModelSpec small_llama(int layers = 4, std::int64_t vocab = 32000) {
  ModelSpec s;
  s.name = "llama2-7b-shape";
  s.layers = layers;
  s.hidden = 4096;
  s.heads = 32;
  s.kv_heads = 32;
  s.head_dim = 128;
  s.ffn_hidden = 11008;
  s.vocab = vocab;
  s.seq = 4096;
  return s;
}

/// The reference lane's MoE layer (tools/reference/moe_ep.py, tests/reference/test_moe_ep.py): hidden 32, 8
/// experts of width 48, top 2, one block.
inline ModelSpec tiny_moe() {
  ModelSpec s;
  s.name = "tiny-moe";
  s.layers = 1;
  s.hidden = 32;
  s.heads = 4;
  s.kv_heads = 4;
  s.head_dim = 8;
  s.ffn_hidden = 48;
  s.vocab = 256;
  s.seq = 64;
  s.moe.experts = 8;
  s.moe.top_k = 2;
  return s;
}

/// DeepSeek-V3's layer types (MLA, shared experts, a first dense block) at a size the property tests can
/// sweep: 8 blocks of hidden 2,048, 64 routed experts of width 1,408, top 6, 2 shared experts.
inline ModelGraph deepseek_small() {
  ModelSpec sp = load_model("deepseek-v3").spec();
  sp.name = "deepseek-small";
  sp.layers = 8;
  sp.hidden = 2048;
  sp.heads = 16;
  sp.kv_heads = 16;
  sp.ffn_hidden = 10944;
  sp.vocab = 102400;
  sp.moe.experts = 64;
  sp.moe.top_k = 6;
  sp.moe.ffn_hidden = 1408;
  sp.moe.shared_experts = 2;
  sp.moe.first_dense = 1;
  sp.mla.q_lora_rank = 0;
  return ModelGraph::from_spec(sp);
}

/// The reference lane's tiny torchtitan qwen3 MoE (tools/reference/lane/titan_moe.py, without its q/k norms):
/// 2 blocks, hidden 64, 4 heads / 2 KV heads of 16, 8 experts of 32, top-2, vocab 256, seq 64.
inline ModelSpec lane_qwen3_moe(int shared_experts = 0, RopeCache rope = RopeCache::kNone) {
  ModelSpec s;
  s.name = "qwen3-moe-tiny";
  s.layers = 2;
  s.hidden = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.ffn_hidden = 256;
  s.vocab = 256;
  s.seq = 64;
  s.moe.experts = 8;
  s.moe.top_k = 2;
  s.moe.ffn_hidden = 32;
  s.moe.shared_experts = shared_experts;
  s.rope_cache = rope;
  return s;
}

/// Bytes per token (16-bit compute, TP = 1) of a layer's activation tensors of lifetime `life`
/// (activations.hpp).
inline double act_life_bytes(const Layer& l, ActLife life) {
  double b = 0;
  for (const ActTensor& a : l.activations)
    if (a.life == life && !a.eager) b += a.per_token * act_dtype_bytes(a.dtype, 2.0);
  return b;
}

/// Bytes per token (16-bit compute) of the layer's tensors that eager autograd saves without AC, of TP split
/// rule `split`.
inline double act_eager_saved_bytes(const Layer& l, ActSplit split) {
  double b = 0;
  for (const ActTensor& a : l.activations)
    if (a.eager && a.split == split && a.only == ActOnly::kAlways)
      b += a.per_token * act_dtype_bytes(a.dtype, 2.0);
  return b;
}

/// Running total of `cat` over the program's memory effects in CPU issue order (the same walk the engine does
/// for the total); calls f(task, effect, total after the effect).
template <class F>
void walk_category(const Program& prog, MemCategory cat, F f) {
  Bytes cur = 0;
  for (const Task& t : prog.tasks)
    for (std::uint32_t e = t.first_effect; e < t.first_effect + t.n_effects; ++e)
      if (prog.effects[e].category == cat) f(t, prog.effects[e], cur += prog.effects[e].delta_bytes);
}

/// Highest value the category `cat` reaches on that walk.
inline Bytes max_category_bytes(const Program& prog, MemCategory cat) {
  Bytes hi = 0;
  walk_category(prog, cat, [&](const Task&, const MemEffect&, Bytes cur) { hi = std::max(hi, cur); });
  return hi;
}

/// The plan's FSDP units as the simulator builds them (`p` already resolved).
inline std::vector<SimUnit> units_of(const Setup& s, const Plan& p) {
  std::vector<SimUnit> units;
  build_units(s.model, *s.cluster, *s.costs, p, runtime_traits(p), units);
  return units;
}

/// The first MoE layer of `m`, and the FSDP unit of `units` holding one.
inline const Layer& first_moe_layer(const ModelGraph& m) {
  for (const Layer* l : m.order())
    if (l->kind == LayerKind::kMoe) return *l;
  throw std::logic_error("no MoE layer");
}
inline SimUnit unit_with_moe(const std::vector<SimUnit>& units) {
  for (const SimUnit& u : units)
    for (const Layer* l : u.layers)
      if (l->kind == LayerKind::kMoe) return u;
  throw std::logic_error("no MoE unit");
}

/// The same model with each transformer block's layers merged into one graph layer (tensors, GEMMs, saved
/// bytes and elementwise traffic summed; parameter count unchanged). Lowering cannot then split a block
/// across FSDP units, which isolates effects of the unit partition (see the [!mayfail] wrap test).
inline ModelGraph merge_blocks(const ModelGraph& m) {
  Json j = m.to_graph_json();
  Json out = Json::array();
  for (const auto& l : j["layers"]) {
    const int b = l["block"].get<int>();
    if (b >= 0 && !out.empty() && out.back()["block"].get<int>() == b) {
      Json& o = out.back();
      for (auto t : l["tensors"]) {
        t["name"] = l["name"].get<std::string>() + "." + t["name"].get<std::string>();
        o["tensors"].push_back(t);
      }
      for (const auto& g : l["gemms"]) o["gemms"].push_back(g);
      // Every per-token figure of the layer (saved bytes, their selective / compiled / TP parts, elementwise
      // traffic), present in either layer.
      for (const auto& [k, v] : l.items())
        if (k.ends_with("_bytes_per_token")) o[k] = o.value(k, 0.0) + v.get<double>();
      if (l.contains("attention")) o["attention"] = l["attention"];
    } else {
      out.push_back(l);
    }
  }
  j["layers"] = out;
  Json edges = Json::array();
  for (std::size_t i = 1; i < out.size(); ++i) edges.push_back({i - 1, i});
  j["edges"] = edges;
  return ModelGraph::from_graph_json(j, "merged " + m.spec().name);
}

/// `pp` x `V` identical stages of `f` s forward and `b` s backward (each half input, half weight gradient)
/// over `m` micro-batches, `p2p` s per send; each micro-batch's activations `act_bytes` (the forward's
/// working set ends holding them, the backward's starts holding them).
inline PipelineInputs equal_stages(PpSchedule s, int pp, int V, int m, double f, double b, double p2p = 0,
                                   Bytes act_bytes = 1000) {
  PipelineInputs in;
  in.schedule = s;
  in.pp = pp;
  in.virtual_stages = V;
  in.micro_batches = m;
  in.p2p_s = p2p;
  StageCost c;
  c.fwd_s = f;
  c.bwd_s = b;
  c.bwd_input_s = b / 2;
  c.bwd_weight_s = b / 2;
  c.act_bytes = act_bytes;
  c.fwd_work.act_bytes = act_bytes;
  c.bwd_work.act_bytes = act_bytes;
  in.stages.assign(static_cast<std::size_t>(pp * V), c);
  return in;
}

}  // namespace shardplan::test
