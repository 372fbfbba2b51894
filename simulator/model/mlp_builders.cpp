// The MLP layers' builders (layer_builders.hpp): dense SwiGLU / GELU MLPs and mixtures of experts (router,
// shared and routed experts), their tensors, GEMMs and activation lists, and the block's selective-AC mm
// parity; each entry cited to the code it comes from (docs/model.md "Activations: one list of tensors per
// layer").
#include <cstdint>

#include "simulator/model/layer_builders.hpp"

namespace shardplan::detail {

void add_mlp_tensors(const ModelSpec& s, Layer& l, const std::string& prefix, std::int64_t f) {
  const std::int64_t h = s.hidden;
  if (s.mlp != MlpKind::kGelu) {
    if (s.fused_gate_up) {
      l.tensors.push_back({prefix + "w_gate_up", 2 * f, h, TpSplit::kColumn});  // Phi-3 gate_up_proj
    } else {
      l.tensors.push_back({prefix + "w_gate", f, h, TpSplit::kColumn});
      l.tensors.push_back({prefix + "w_up", f, h, TpSplit::kColumn});
    }
    l.tensors.push_back({prefix + "w_down", h, f, TpSplit::kRow});
    if (s.mlp_bias) {
      if (s.fused_gate_up) {
        l.tensors.push_back({prefix + "b_gate_up", 2 * f, 1, TpSplit::kColumn});  // gpt-oss gate_up_proj_bias
      } else {
        l.tensors.push_back({prefix + "b_gate", f, 1, TpSplit::kColumn});
        l.tensors.push_back({prefix + "b_up", f, 1, TpSplit::kColumn});
      }
      l.tensors.push_back({prefix + "b_down", h, 1, TpSplit::kReplicated});
    }
  } else {
    l.tensors.push_back({prefix + "w_fc1", f, h, TpSplit::kColumn});
    l.tensors.push_back({prefix + "w_fc2", h, f, TpSplit::kRow});
    if (s.mlp_bias) {
      l.tensors.push_back({prefix + "b_fc1", f, 1, TpSplit::kColumn});
      l.tensors.push_back({prefix + "b_fc2", h, 1, TpSplit::kReplicated});
    }
  }
}

// The MLP's tensors in forward order: torchtitan 0.3.0 models/common/feed_forward.py FeedForward.forward,
// `w2(F.silu(w1(x)) * w3(x))`: mm saves its input (the layer's input for w1 and w3, the product for w2),
// silu saves its input (w1's output), mul saves both operands (SiLU(w1 x) and w3's output) (torch 2.15
// derivatives.yaml). GELU MLPs (fc2(gelu(fc1(x)))): gelu saves its input, fc2's mm the GELU output. A MoE
// layer: the router's fp32 probabilities, the routing tensors (moe_tensors.cpp), the shared experts' MLP and
// the routed experts' (per token top_k of them). Per token of a dense SwiGLU MLP: 2h + 8f bytes.
// torch.compile's partitioner saves gate, up and the product and recomputes SiLU(gate) in backward
// (tools/reference/saved_per_block.py, torch 2.15 inductor: 32.22 h vs eager 37.59 h per Llama block at
// f = 2.6875 h, i.e. 2f fewer; 11296 vs 13344 B/token at h = 384, f = 1024; the routed experts' grouped GEMMs
// likewise, three of their four T·top_k x f tensors: tools/reference/moe_tensors.py). The down projection's
// output dies after the residual add (as the attention's output projection's); a routed MoE's combined
// output is the combine's scatter_add into zeros (moe_tensors.cpp).
void mlp_activations(const ModelSpec& s, Layer& l, std::int64_t f, std::int64_t fs) {
  const bool moe = l.kind == LayerKind::kMoe;
  const double h = static_cast<double>(s.hidden);
  // The layer's input is saved by the mm of each linear reading it (save_on_cpu packs it once per mm): a
  // SwiGLU's gate and up (one fused gate_up), a GELU MLP's fc1; a MoE layer's router gate and its shared
  // experts' column linears (the routed experts read the gathered copy, dispatch.routed_input).
  const int column_linears = s.mlp != MlpKind::kGelu && !s.fused_gate_up ? 2 : 1;
  input(l, h, moe ? ActSplit::kMoeTokens : ActSplit::kSequence).packs =
      static_cast<std::int8_t>(moe ? 1 + (fs > 0 ? column_linears : 0) : column_linears);
  std::size_t gi = 0;
  if (moe) {
    // The router's logits upcast to fp32 for the softmax, which saves its output. torchtitan's router
    // (0.3.0 models/common/moe.py TokenChoiceTopKRouter) then takes `scores.gather(dim=1, index=...)`, which
    // saves the scores again (torch 2.15 derivatives.yaml gather: `gather_backward(grad, self, ...)`): two
    // packs under save_on_cpu; Hugging Face's router takes the top-k values from topk, which saves only its
    // indices (derivatives.yaml topk): one. The same storage either way (one entry per implementation).
    add_activation(l, "router.probs", s.moe.experts, ActSplit::kMoeTokens, ActDtype::kFp32).only =
        ActOnly::kMoeGrouped;
    l.activations.back().packs = 2;
    add_activation(l, "router.probs", s.moe.experts, ActSplit::kMoeTokens, ActDtype::kFp32).only =
        ActOnly::kMoeHfRouter;
    ++gi;
    moe_dispatch_activations(s, l);        // top-k ids, the dispatcher's reordering, the routed input
    deepspeed_dispatch_activations(s, l);  // --moe-impl deepspeed: the gate's, the [E, C, M] buffer
  }
  auto one_mlp = [&](const std::string& prefix, double width, bool expert) {
    // The routed experts' tensors are on the expert side (ActTensor::expert_rows): GroupedExperts.forward
    // (torchtitan 0.3.0 models/common/moe.py) runs w1, SiLU, w3 and the product on x_RD, the rows this rank's
    // experts receive.
    auto e = [&](ActTensor& a) -> ActTensor& {
      a.expert = expert;
      if (expert) {
        a.expert_rows = s.moe.top_k;
        a.expert_count = s.moe.experts;
      }
      return a;
    };
    if (s.mlp != MlpKind::kGelu) {
      const std::string gate = s.fused_gate_up ? "w_gate_up.out[gate]" : "w_gate.out";
      const std::string up = s.fused_gate_up ? "w_gate_up.out[up]" : "w_up.out";
      // F.silu(w1(x)) is evaluated before w3(x).
      e(gemm_out(add_activation(l, prefix + gate, width, ActSplit::kTp), gi, 0));
      e(add_activation(l, prefix + "silu.out", width, ActSplit::kTp)).compiled = false;
      e(gemm_out(add_activation(l, prefix + up, width, ActSplit::kTp), gi, 1));
      e(add_activation(l, prefix + "mul.out", width, ActSplit::kTp));
    } else {
      e(gemm_out(add_activation(l, prefix + "w_fc1.out", width, ActSplit::kTp), gi));
      e(add_activation(l, prefix + "gelu.out", width, ActSplit::kTp));
    }
    gi += 2;  // the column and the row GEMM
  };
  if (fs > 0) one_mlp("shared.", static_cast<double>(fs), false);
  one_mlp(moe ? "experts." : "",
          moe ? static_cast<double>(s.moe.top_k) * static_cast<double>(f) : static_cast<double>(f), moe);
  if (moe) moe_combine_activations(s, l);  // the experts' output, the combine's fp32 copy, product, cast
  // The output projection's output (the routed experts' combined, for a MoE layer), before the residual add.
  const std::string out = s.mlp != MlpKind::kGelu ? "w_down.out" : "w_fc2.out";
  gemm_out(unsaved(add_activation(l, out, h, ActSplit::kNone), moe ? ActLife::kUntracked : ActLife::kOutput),
           gi - 1);
  if (moe) {
    moe_combine_lifetimes(l, out);
    return;
  }
  weight_grad_input(l, "input", {"w_gate", "w_up", "w_gate_up", "w_fc1"});
  weight_grad_input(l, "mul.out", {"w_down"});
  weight_grad_input(l, "gelu.out", {"w_fc2"});
  // Where a regime drops them, each operand dies once its consumer exists (the lane's traces of a Llama 3 8B
  // block under full AC: w1's output after SiLU, SiLU's and w3's after the product, the product after w2);
  // the layer's input when it returns.
  if (s.mlp != MlpKind::kGelu) {
    const std::string gate = s.fused_gate_up ? "w_gate_up.out[gate]" : "w_gate.out";
    const std::string up = s.fused_gate_up ? "w_gate_up.out[up]" : "w_up.out";
    dies_after(l, gate, "silu.out");
    dies_after(l, "silu.out", "mul.out");
    dies_after(l, up, "mul.out");
    dies_after(l, "mul.out", "w_down.out");
  } else {
    dies_after(l, "w_fc1.out", "gelu.out");
    dies_after(l, "gelu.out", "w_fc2.out");
  }
}

// A dense MLP, or a mixture of experts: router (+ routing bias), `experts` routed MLPs of which each token
// uses top_k, and the shared experts (one fused MLP of shared_experts·width, as HF DeepseekV3MoE and
// Llama4TextMoe hold them) that every token uses.
Layer make_mlp(const ModelSpec& s, int block) {
  Layer l;
  l.block = block;
  const std::int64_t h = s.hidden;
  const bool moe = s.moe.is_moe_block(block);
  const std::int64_t f = moe ? s.moe.expert_ffn(s.ffn_hidden) : s.ffn_hidden;
  const std::int64_t fs =
      moe ? s.moe.shared_experts * (s.moe.shared_ffn_hidden > 0 ? s.moe.shared_ffn_hidden : f) : 0;
  l.name = "blocks." + std::to_string(block) + (moe ? ".moe" : ".mlp");
  l.kind = moe ? LayerKind::kMoe : LayerKind::kMlp;
  const int experts = moe ? s.moe.experts : 1;
  const double active = moe ? s.moe.top_k : 1;
  std::size_t first_expert = 0;
  if (moe) {
    l.tensors.push_back({"router", s.moe.experts, h, TpSplit::kReplicated});
    if (s.moe.router_bias) l.tensors.push_back({"router_bias", s.moe.experts, 1, TpSplit::kReplicated});
    if (fs > 0) add_mlp_tensors(s, l, "shared.", fs);
    l.gemms.push_back({s.moe.experts, h, 1, TpSplit::kReplicated});
    first_expert = l.tensors.size();
  }
  // The routed experts as grouped tensors, one per weight with the experts stacked on dim 0 (torchtitan 0.3.0
  // models/common/moe.py GroupedExperts: w1_EFD, w2_EDF, w3_EFD of [num_experts, ...]), not one per expert.
  add_mlp_tensors(s, l, moe ? "experts." : "", f);
  if (moe) {
    for (std::size_t i = first_expert; i < l.tensors.size(); ++i) {
      l.tensors[i].expert = true;
      l.tensors[i].stack = experts;
    }
    l.moe_experts = s.moe.experts;
    l.moe_top_k = s.moe.top_k;
  }
  // Per token the routed experts' work counts top_k times, the shared experts' once; written as one width
  // fa = top_k·f + fs for the activations and elementwise traffic.
  const double fa = active * static_cast<double>(f) + static_cast<double>(fs);
  if (s.mlp != MlpKind::kGelu) {
    if (fs > 0) {
      l.gemms.push_back({fs, h, 2, TpSplit::kColumn});  // shared gate and up
      l.gemms.push_back({h, fs, 1, TpSplit::kRow});
    }
    l.gemms.push_back({f, h, 2 * active, TpSplit::kColumn, moe});  // gate and up
    l.gemms.push_back({h, f, active, TpSplit::kRow, moe});
    l.elementwise_bytes_per_token = 6.0 * fa + 6.0 * h;         // fused silu(gate) * up
    l.eager_elementwise_bytes_per_token = 10.0 * fa + 6.0 * h;  // silu 4f, multiply 6f
  } else {
    if (fs > 0) {
      l.gemms.push_back({fs, h, 1, TpSplit::kColumn});
      l.gemms.push_back({h, fs, 1, TpSplit::kRow});
    }
    l.gemms.push_back({f, h, active, TpSplit::kColumn, moe});
    l.gemms.push_back({h, f, active, TpSplit::kRow, moe});
    l.elementwise_bytes_per_token = 4.0 * fa + 6.0 * h;
    l.eager_elementwise_bytes_per_token = 4.0 * fa + 6.0 * h;
  }
  mlp_activations(s, l, f, fs);
  if (moe) {
    // Routing's memory-bound traffic: the writes and reads of its tensors in the list (moe_tensors.cpp);
    // backward moves the same (the cost model's 2x elementwise). The router's fp32 softmax / sigmoid and
    // top-k over `experts` scores are small beside these.
    const MoeRoutingBytes r = moe_routing_bytes(l);
    l.elementwise_bytes_per_token += r.fused;
    l.eager_elementwise_bytes_per_token += r.eager;
  }
  if (!moe) add_tp_gathered_input(l);
  return l;
}

/// torchtitan's op-level selective checkpointing (torchtitan 0.3.0 distributed/activation_checkpoint.py
/// SelectiveAC._wrap_block: `meta[mm_count_key] % 2 == 0` -> PREFER_RECOMPUTE) counts the matmuls of one
/// checkpointed block in execution order from 1 and saves the odd ones: for a Llama block wq, wv, w1 (gate)
/// and w2 (down) are saved, wk, wo and w3 (up) recomputed. Sets the SAC membership of every GEMM output of a
/// dense attention + MLP pair by its parity.
void selective_mm_parity(Layer& attn, Layer& mlp) {
  // Each GEMM call's output tensor is saved or recomputed by its parity. Compiled SAC saves only what
  // backward reads: the output projection's output feeds the residual add alone (its backward needs the
  // projection's input), so a saved w2 / wo output is dropped (tools/reference/saved_per_block.py: 13.44 h
  // compiled vs 15.44 h eager per block, the 2h of w2's output). After each row-parallel GEMM comes the
  // sequence-parallel reduce-scatter's output (T/tp x h; only with TP > 1), which the policy saves whatever
  // the GEMM's parity (reduce_scatter_tensor is in its save list) and which, like the output projection's
  // output, only a residual add reads.
  long long n = 0;
  for (Layer* l : {&attn, &mlp}) {
    for (std::size_t i = 0; i < l->gemms.size(); ++i) {
      const Gemm& g = l->gemms[i];
      for (int c = 0; c < static_cast<int>(g.count); ++c) {
        const bool save = ++n % 2 == 1;
        for (ActTensor& a : l->activations)
          if (a.gemm == static_cast<int>(i) && a.call == c) {
            a.sac = save ? ActSac::kSave : ActSac::kRecompute;
            a.sac_compiled_unread = g.tp == TpSplit::kRow && i + 1 == l->gemms.size();
          }
      }
    }
    for (std::size_t i = 0; i < l->gemms.size(); ++i)
      if (l->gemms[i].tp == TpSplit::kRow)
        for (int c = 0; c < static_cast<int>(l->gemms[i].count); ++c) {
          ActTensor& rs = add_activation(*l, "reduce_scatter.out", static_cast<double>(l->gemms[i].n),
                                         ActSplit::kSequence);
          unsaved(rs, ActLife::kUntracked);
          rs.sac = ActSac::kSave;
          rs.sac_compiled_unread = true;
          rs.only = ActOnly::kTp;
        }
  }
}

}  // namespace shardplan::detail

namespace shardplan {

double moe_routing_elementwise_bytes(const Layer& l, bool fused) {
  if (l.kind != LayerKind::kMoe) return 0;
  const detail::MoeRoutingBytes r = detail::moe_routing_bytes(l);
  return fused ? r.fused : r.eager;
}

}  // namespace shardplan
