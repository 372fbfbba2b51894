// LoRA and QLoRA applied to a model's layers (docs/model.md "LoRA and QLoRA"). Sources: PEFT 0.21.2
// (peft/tuners/lora/layer.py LoraLayer.update_layer: lora_A = nn.Linear(in_features, r, bias=False), lora_B =
// nn.Linear(r, out_features, bias=False), lora_dropout nn.Identity() when lora_dropout == 0, the default),
// torchtitan 0.3.0 (torchtitan/components/lora.py: LoRALinear freezes the base and builds lora_a, lora_b;
// _lora_adapter_sharding: a column-parallel base gets lora_a replicated and lora_b split on its output rows,
// a row-parallel base lora_a split on its input columns and lora_b replicated), bitsandbytes 0.50.2
// (bitsandbytes/functional.py quantize_4bit, quantize_blockwise; nn/modules.py Int8Params).
#include "simulator/model/lora.hpp"

#include <algorithm>
#include <bit>
#include <utility>

#include "core/checked.hpp"
#include "core/error.hpp"
#include "simulator/model/layer_builders.hpp"

namespace shardplan {

namespace {

// bitsandbytes 0.50.2 functional.quantize_4bit: blocksize 64 (its default); with compress_statistics
// (QLoRA's double quantisation, BitsAndBytesConfig bnb_4bit_use_double_quant) the fp32 absmax per block
// is quantised by quantize_blockwise(absmax - offset, blocksize=256) into uint8 codes with one fp32 absmax
// per 256 blocks, its 256-entry fp32 code (`code.to(A.device, copy=True)`), the fp32 offset, and the
// state's own 16-entry NF4 code (get_4bit_type).
constexpr std::int64_t kNf4Block = 64;
constexpr std::int64_t kNestedBlock = 256;
constexpr std::int64_t kDynamicCodeEntries = 256;
constexpr std::int64_t kNf4CodeEntries = 16;

/// Module names (PEFT / Hugging Face, torchtitan, the model's own) and the model's tensor they stand for.
constexpr std::pair<const char*, const char*> kAliases[] = {
    {"q_proj", "wq"},
    {"wq", "wq"},
    {"k_proj", "wk"},
    {"wk", "wk"},
    {"v_proj", "wv"},
    {"wv", "wv"},
    {"o_proj", "wo"},
    {"wo", "wo"},
    {"qkv_proj", "wqkv"},
    {"c_attn", "wqkv"},
    {"query_key_value", "wqkv"},
    {"Wqkv", "wqkv"},
    {"wqkv", "wqkv"},
    {"gate_proj", "w_gate"},
    {"w1", "w_gate"},
    {"w_gate", "w_gate"},
    {"up_proj", "w_up"},
    {"w3", "w_up"},
    {"w_up", "w_up"},
    {"down_proj", "w_down"},
    {"w2", "w_down"},
    {"w_down", "w_down"},
    {"gate_up_proj", "w_gate_up"},
    {"w_gate_up", "w_gate_up"},
    {"fc1", "w_fc1"},
    {"c_fc", "w_fc1"},
    {"w_fc1", "w_fc1"},
    {"fc2", "w_fc2"},
    {"w_fc2", "w_fc2"},
    {"q_a_proj", "wq_a"},
    {"wq_a", "wq_a"},
    {"q_b_proj", "wq_b"},
    {"wq_b", "wq_b"},
    {"kv_a_proj_with_mqa", "wkv_a"},
    {"wkv_a", "wkv_a"},
    {"kv_b_proj", "wkv_b"},
    {"wkv_b", "wkv_b"},
    {"lm_head", "output"},
    {"output", "output"},
};
constexpr const char* kAllLinear = "all-linear";

/// A linear weight LoRA can wrap: 2-D, not a routed expert's grouped weight.
bool linear_weight(const Tensor& t) {
  return t.dim1 > 1 && t.stack == 1 && !t.expert;
}

/// The tensor's module name: "shared." (a MoE layer's shared expert) stripped, the LM head's "output".
std::string module_name(const Layer& l, const Tensor& t) {
  if (l.kind == LayerKind::kLmHead) return "output";
  const std::string prefix = "shared.";
  return t.name.rfind(prefix, 0) == 0 ? t.name.substr(prefix.size()) : t.name;
}

/// Whether `t` gets an adapter; `router_linear`: the model's MoE router is an nn.Linear that all-linear
/// adapts (ModelSpec::MoeSpec::router_linear).
bool targeted(const Layer& l, const Tensor& t, const std::vector<std::string>& targets, bool router_linear) {
  if (!linear_weight(t) || (l.block < 0 && l.kind != LayerKind::kLmHead)) return false;
  const std::string m = module_name(l, t);
  if (std::find(targets.begin(), targets.end(), kAllLinear) != targets.end())
    return l.block >= 0 && (router_linear || l.kind != LayerKind::kMoe || m != "router");
  return std::find(targets.begin(), targets.end(), m) != targets.end();
}

/// Whether bitsandbytes quantises it: transformers' replace_with_bnb_linear converts every nn.Linear but the
/// output layer (get_keys_to_not_convert): the blocks' linear weights.
bool quantised(const Layer& l, const Tensor& t) {
  return l.block >= 0 && linear_weight(t);
}

void quantise(Tensor& t, WeightStore base, std::vector<Tensor>& buffers) {
  const std::int64_t n = t.numel();
  if (base == WeightStore::kInt8) {
    // Int8Params: CB int8 like the weight (the parameter's data), SCB fp32 per output row.
    t.store = WeightStore::kInt8;
    buffers.push_back({t.name + ".SCB", t.dim0, 1, TpSplit::kReplicated, false, 1, true, WeightStore::kFp32});
    return;
  }
  // Params4bit: ceil(n / 2) bytes of packed codes (an odd count padded by one value), viewed as bf16
  // storage elements (bnb_4bit_quant_storage=bfloat16: two bytes each).
  const std::int64_t packed_bytes = ceil_div(n, std::int64_t{2});
  t.dim0 = ceil_div(packed_bytes, std::int64_t{2});
  t.dim1 = 1;
  t.tp = TpSplit::kReplicated;
  t.store = WeightStore::kNf4;
  t.logical = n;
  const std::int64_t blocks = ceil_div(n, kNf4Block);
  auto fp32 = [&](const std::string& name, std::int64_t elems) {
    buffers.push_back({t.name + name, elems, 1, TpSplit::kReplicated, false, 1, true, WeightStore::kFp32});
  };
  buffers.push_back(
      {t.name + ".absmax", blocks, 1, TpSplit::kReplicated, false, 1, true, WeightStore::kInt8});
  fp32(".absmax.absmax", ceil_div(blocks, kNestedBlock));
  fp32(".absmax.code", kDynamicCodeEntries);
  fp32(".offset", 1);
  fp32(".code", kNf4CodeEntries);
}

/// Appends the adapters of `base` (its TP split as torchtitan's _lora_adapter_sharding), their GEMMs and the
/// A output that B's weight gradient saves.
void add_adapters(Layer& l, const Tensor& base, int r, std::vector<Tensor>& added) {
  const TpSplit a_split = base.tp == TpSplit::kRow ? TpSplit::kRow : TpSplit::kReplicated;
  const TpSplit b_split = base.tp == TpSplit::kColumn ? TpSplit::kColumn : TpSplit::kReplicated;
  added.push_back({base.name + ".lora_a", r, base.dim1, a_split});
  added.push_back({base.name + ".lora_b", base.dim0, r, b_split});
  l.gemms.push_back({r, base.dim1, 1, a_split});
  const auto a_gemm = static_cast<std::int16_t>(l.gemms.size() - 1);
  l.gemms.push_back({base.dim0, r, 1, b_split});
  // The A output [tokens, r]: every TP rank computes it whole (a row-parallel base: its partial sum), so TP
  // does not divide it. x itself is the base linear's input, already in the list.
  ActTensor& a = detail::add_activation(l, base.name + ".lora_a.out", r, ActSplit::kNone);
  a.sac = ActSac::kHalf;
  a.gemm = a_gemm;
}

/// With the base frozen, a linear's input that only the linears' weight gradients saved is not saved, unless
/// one of them carries an adapter (`adapted`: bits over l.tensors), whose lora_A saves the same x.
/// Where kept, each adapter's lora_A saves it once (the frozen base's mm saves none): save_on_cpu packs it
/// once per adapter (ActTensor::packs).
void drop_frozen_inputs(Layer& l, std::uint32_t adapted) {
  for (ActTensor& a : l.activations) {
    if (!a.weight_grad_only) continue;
    const int readers = std::popcount(a.weight_grad_of & adapted);
    if (readers == 0)
      a.eager = a.compiled = false;
    else
      a.packs = static_cast<std::int8_t>(readers);
  }
}

void lora_layer(Layer& l, const LoraSpec& spec, bool router_linear) {
  // The base's GEMMs compute input gradients only; the adapters' GEMMs, appended below, train.
  for (Gemm& g : l.gemms) g.frozen = true;
  std::vector<Tensor> adapters;
  std::uint32_t adapted = 0;
  for (std::size_t i = 0; i < l.tensors.size(); ++i) {
    Tensor& t = l.tensors[i];
    const Tensor before = t;
    t.frozen = true;
    if (spec.base != WeightStore::kBf16 && quantised(l, t))
      quantise(t, spec.base, l.buffers);
    else
      t.store = WeightStore::kBf16;
    if (!targeted(l, before, spec.targets, router_linear)) continue;
    add_adapters(l, before, spec.rank, adapters);
    if (i < 32) adapted |= std::uint32_t{1} << i;
  }
  drop_frozen_inputs(l, adapted);
  l.tensors.insert(l.tensors.end(), adapters.begin(), adapters.end());
}

/// PEFT 0.21.2 on transformers 5 wraps a MoE model's fused routed experts when the targets name them by their
/// v4 module names or are all-linear (ModelSpec::MoeSpec::peft_expert_targets): ParamWrapper adapters of rank
/// r per expert (2r over the fused gate/up), and in every forward the adapted weight W + scaling·B·A folded
/// into a copy of the whole expert stack (peft/tuners/lora/layer.py ParamWrapper._activate_lora,
/// get_delta_factors), whose full weight gradient backward computes before it reaches A and B. None of that
/// is modelled, and leaving the experts out would understate memory by the size of the experts: refused.
void refuse_expert_targets(const ModelGraph& model, const std::vector<std::string>& names) {
  if (model.spec().moe.experts <= 1 || !model.spec().moe.peft_expert_targets) return;
  for (const Layer* l : model.order())
    for (const Tensor& t : l->tensors) {
      if (!t.expert || t.dim1 <= 1) continue;
      const std::string bare = t.name.substr(t.name.find('.') + 1);  // "experts.w_gate" -> "w_gate"
      for (const std::string& n : names)
        if (n == kAllLinear || n == bare)
          throw InputError::flag(
              "--lora-targets",
              "\"" + (n == kAllLinear ? std::string(kAllLinear) : n) + "\" reaches the routed experts of " +
                  model.spec().name +
                  " (PEFT 0.21.2 ParamWrapper over transformers 5's fused experts: an adapted copy of every "
                  "expert weight per forward and its full weight gradient), which is not modelled; target "
                  "the attention and shared projections, e.g. --lora-targets q_proj,k_proj,v_proj,o_proj");
    }
}

}  // namespace

std::vector<std::string> lora_target_tensors(const ModelGraph& model, const std::string& list) {
  const char* flag = "--lora-targets";
  std::vector<std::string> names;
  if (list.empty()) {
    // PEFT's default for decoder-only model types: the query and value projections, or the fused QKV
    // projection (GPT-2's c_attn, Falcon's query_key_value).
    bool q = false, v = false, qkv = false;
    for (const Layer* l : model.order())
      for (const Tensor& t : l->tensors) {
        if (l->block < 0) continue;
        q = q || t.name == "wq";
        v = v || t.name == "wv";
        qkv = qkv || t.name == "wqkv";
      }
    if (q && v) return {"wq", "wv"};
    if (qkv) return {"wqkv"};
    throw InputError::flag(flag, "PEFT has no default target modules for " + model.spec().name +
                                     " (no separate q_proj and v_proj, no fused QKV projection); give "
                                     "--lora-targets, e.g. all-linear");
  }
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = std::min(list.find(',', pos), list.size());
    const std::string name = list.substr(pos, comma - pos);
    pos = comma + 1;
    if (name == kAllLinear) {
      names.push_back(kAllLinear);
      continue;
    }
    const auto* it = std::find_if(std::begin(kAliases), std::end(kAliases),
                                  [&](const auto& a) { return name == a.first; });
    if (it == std::end(kAliases))
      throw InputError::flag(flag, "unknown module \"" + name +
                                       "\"; expected Hugging Face names (q_proj, k_proj, v_proj, o_proj, "
                                       "gate_proj, up_proj, down_proj, ...), torchtitan's (wq, wk, wv, wo, "
                                       "w1, w2, w3, output) or all-linear");
    names.push_back(it->second);
  }
  refuse_expert_targets(model, names);
  for (const std::string& n : names) {
    bool found = false;
    for (const Layer* l : model.order())
      for (const Tensor& t : l->tensors) found = found || targeted(*l, t, {n}, true);
    if (!found)
      throw InputError::flag(flag, "\"" + n + "\" is no linear weight of " + model.spec().name +
                                       " (routed experts' grouped weights and a tied output layer take no "
                                       "LoRA adapter here)");
  }
  return names;
}

ModelGraph apply_lora(const ModelGraph& model, const LoraSpec& spec) {
  if (spec.rank <= 0 || has_frozen_parameters(model)) return model;
  const bool router_linear = model.spec().moe.router_linear;
  return model.with_layers([&](Layer& l) { lora_layer(l, spec, router_linear); });
}

bool has_frozen_parameters(const ModelGraph& model) {
  return model.has_frozen();
}

std::int64_t trainable_parameters(const ModelGraph& model) {
  std::int64_t n = 0;
  for (const Layer* l : model.order())
    for (const Tensor& t : l->tensors)
      if (!t.frozen) n = add_checked(n, t.parameters(), "trainable parameters");
  return n;
}

}  // namespace shardplan
