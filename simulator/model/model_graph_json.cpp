// The project's graph JSON ("shardplan.graph/1", docs/formats.md): ModelGraph written and read back, each
// layer with its parameter tensors, GEMMs, attention core and its list of activation tensors. Files of the
// earlier format (per-token saved-byte keys per layer) are read by converting those figures into tensors of
// the same bytes in every regime (legacy_activations).
#include <boost/graph/topological_sort.hpp>
#include <map>

#include "simulator/model/layer_builders.hpp"
#include "simulator/model/model_graph.hpp"
#include "simulator/model/model_graph_legacy.hpp"

namespace shardplan {

const char* to_string(ActDtype v) {
  switch (v) {
    case ActDtype::kCompute:
      return "compute";
    case ActDtype::kFp32:
      return "fp32";
    case ActDtype::kInt64:
      return "int64";
    case ActDtype::kBool:
      return "bool";
  }
  return "?";
}
const char* to_string(ActSplit v) {
  return v == ActSplit::kTp          ? "tp"
         : v == ActSplit::kSequence  ? "sequence"
         : v == ActSplit::kMoeTokens ? "moe_tokens"
                                     : "none";
}
const char* to_string(ActSac v) {
  return v == ActSac::kSave ? "save" : v == ActSac::kHalf ? "half" : "recompute";
}
const char* to_string(ActRole v) {
  switch (v) {
    case ActRole::kPlain:
      return "plain";
    case ActRole::kSdpaOut:
      return "sdpa_out";
    case ActRole::kSdpaLse:
      return "sdpa_lse";
    case ActRole::kBlockInput:
      return "block_input";
  }
  return "?";
}
const char* to_string(ActOnly v) {
  return v == ActOnly::kFp32Norm         ? "fp32_norm"
         : v == ActOnly::kTp             ? "tp"
         : v == ActOnly::kTpGathered     ? "tp_gathered"
         : v == ActOnly::kMoeGrouped     ? "moe_grouped"
         : v == ActOnly::kMoeLoop        ? "moe_loop"
         : v == ActOnly::kMoeEp          ? "moe_ep"
         : v == ActOnly::kMoeHfRouter    ? "moe_hf_router"
         : v == ActOnly::kMoeSorted      ? "moe_sorted"
         : v == ActOnly::kMoeExpertLoop  ? "moe_expert_loop"
         : v == ActOnly::kMoeHfGroupedMm ? "moe_hf_grouped_mm"
         : v == ActOnly::kMoeHfEager     ? "moe_hf_eager"
         : v == ActOnly::kMoeDeepSpeed   ? "moe_deepspeed"
                                         : "always";
}
const char* to_string(ActLife v) {
  switch (v) {
    case ActLife::kLayer:
      return "layer";
    case ActLife::kAtOnce:
      return "at_once";
    case ActLife::kTransient:
      return "transient";
    case ActLife::kBlock:
      return "block";
    case ActLife::kOutput:
      return "output";
    case ActLife::kUntracked:
      return "untracked";
  }
  return "?";
}

namespace {

/// Parses one of an enum's names (to_string), or fails naming the valid ones.
template <class E>
E parse_enum(const std::string& s, std::initializer_list<E> values, const std::string& file,
             const std::string& where) {
  std::string valid;
  for (E v : values) {
    if (s == to_string(v)) return v;
    valid += (valid.empty() ? "" : ", ") + std::string(to_string(v));
  }
  throw InputError(file, where, "unknown value \"" + s + "\"; expected one of: " + valid);
}

Json activations_to_json(const std::vector<ActTensor>& acts, const std::vector<Tensor>& tensors) {
  Json out = Json::array();
  for (const ActTensor& a : acts) {
    Json j = {{"name", a.name},
              {"per_token", a.per_token},
              {"dtype", to_string(a.dtype)},
              {"split", to_string(a.split)},
              {"eager", a.eager},
              {"compiled", a.compiled},
              {"sac", to_string(a.sac)},
              {"life", to_string(a.life)}};
    if (a.sac_compiled_unread) j["sac_compiled_unread"] = true;
    if (a.role != ActRole::kPlain) j["role"] = to_string(a.role);
    if (a.only != ActOnly::kAlways) j["only"] = to_string(a.only);
    if (a.expert) j["expert"] = true;
    if (a.expert_rows > 0) j["expert_rows"] = a.expert_rows;
    if (a.expert_count > 0) j["expert_count"] = a.expert_count;
    if (a.packs != 1) j["packs"] = static_cast<int>(a.packs);
    if (a.pack_only) j["pack_only"] = true;
    if (a.per_position) j["per_position"] = true;
    if (a.gemm >= 0) j["gemm"] = {a.gemm, a.call};
    if (a.consumer >= 0) j["consumer"] = a.consumer;
    if (a.input) j["input"] = true;
    if (a.saved_gathered) j["saved_gathered"] = true;
    if (a.weight_grad_only) {
      Json names = Json::array();
      for (std::size_t t = 0; t < tensors.size() && t < 32; ++t)
        if (a.weight_grad_of & (std::uint32_t{1} << t)) names.push_back(tensors[t].name);
      j["weight_grad_of"] = names;
    }
    out.push_back(j);
  }
  return out;
}

std::vector<ActTensor> activations_from_json(const Json& arr, const std::vector<Tensor>& tensors,
                                             const std::string& file, const std::string& at) {
  if (!arr.is_array()) throw InputError(file, at, "expected an array of activation tensors");
  std::vector<ActTensor> out;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    JsonObj o(arr[i], file, at + "/" + std::to_string(i));
    ActTensor a;
    a.name = o.str("name");
    a.per_token = o.number("per_token", 0.0, 1e12);
    a.dtype = parse_enum(o.str("dtype", "compute"),
                         {ActDtype::kCompute, ActDtype::kFp32, ActDtype::kInt64, ActDtype::kBool}, file,
                         o.pointer("dtype"));
    a.split = parse_enum(o.str("split", "tp"),
                         {ActSplit::kTp, ActSplit::kSequence, ActSplit::kNone, ActSplit::kMoeTokens}, file,
                         o.pointer("split"));
    a.eager = o.boolean("eager", true);
    a.compiled = o.boolean("compiled", a.eager);
    a.sac = parse_enum(o.str("sac", "recompute"), {ActSac::kRecompute, ActSac::kSave, ActSac::kHalf}, file,
                       o.pointer("sac"));
    a.sac_compiled_unread = o.boolean("sac_compiled_unread", false);
    a.role = parse_enum(o.str("role", "plain"),
                        {ActRole::kPlain, ActRole::kSdpaOut, ActRole::kSdpaLse, ActRole::kBlockInput}, file,
                        o.pointer("role"));
    a.only = parse_enum(
        o.str("only", "always"),
        {ActOnly::kAlways, ActOnly::kFp32Norm, ActOnly::kTp, ActOnly::kTpGathered, ActOnly::kMoeGrouped,
         ActOnly::kMoeLoop, ActOnly::kMoeEp, ActOnly::kMoeHfRouter, ActOnly::kMoeSorted,
         ActOnly::kMoeExpertLoop, ActOnly::kMoeHfGroupedMm, ActOnly::kMoeHfEager, ActOnly::kMoeDeepSpeed},
        file, o.pointer("only"));
    a.life = parse_enum(o.str("life", "layer"),
                        {ActLife::kLayer, ActLife::kAtOnce, ActLife::kTransient, ActLife::kBlock,
                         ActLife::kOutput, ActLife::kUntracked},
                        file, o.pointer("life"));
    a.consumer = static_cast<std::int16_t>(o.integer("consumer", -1, -1, 1 << 14));
    a.input = o.boolean("input", false);
    a.saved_gathered = o.boolean("saved_gathered", false);
    if (o.str("stream", "compute") != "compute")
      o.fail("stream", "expected \"compute\" (activations are allocated on the default stream)");
    a.expert = o.boolean("expert", false);
    a.expert_rows = static_cast<std::int32_t>(o.integer("expert_rows", 0, 0, 1 << 20));
    if (a.expert_rows > 0 && !a.expert)
      o.fail("expert_rows", "rows on the experts' side need \"expert\": true (a routed expert's tensor)");
    a.expert_count = static_cast<std::int32_t>(o.integer("expert_count", 0, 0, 1 << 20));
    a.packs = static_cast<std::int8_t>(o.integer("packs", 1, 1, 64));
    a.pack_only = o.boolean("pack_only", false);
    a.per_position = o.boolean("per_position", false);
    if (a.per_position && !a.pack_only)
      o.fail("per_position",
             "one row per sequence position needs \"pack_only\": true (a buffer save_on_cpu packs)");
    if (auto* w = o.raw_optional("weight_grad_of")) {
      // The layer's weights whose gradient alone saves it (ActTensor::weight_grad_only), by name.
      if (!w->is_array()) o.fail("weight_grad_of", "expected an array of the layer's tensor names");
      a.weight_grad_only = true;
      for (const Json& n : *w) {
        std::size_t t = 0;
        while (t < tensors.size() && !(n.is_string() && tensors[t].name == n.get<std::string>())) ++t;
        if (t >= tensors.size() || t >= 32)
          o.fail("weight_grad_of", "\"" + (n.is_string() ? n.get<std::string>() : n.dump()) +
                                       "\" is none of the layer's first 32 tensors");
        a.weight_grad_of |= std::uint32_t{1} << t;
      }
    }
    if (auto* g = o.raw_optional("gemm")) {
      if (!g->is_array() || g->size() != 2) o.fail("gemm", "expected [gemm index, call]");
      a.gemm = static_cast<std::int16_t>(json_integer((*g)[0], file, o.pointer("gemm") + "/0", 0, 1 << 14));
      a.call = static_cast<std::int16_t>(json_integer((*g)[1], file, o.pointer("gemm") + "/1", 0, 1 << 14));
    }
    o.finish();
    out.push_back(std::move(a));
  }
  return out;
}

const char* tp_name(TpSplit t) {
  return t == TpSplit::kColumn ? "column" : t == TpSplit::kRow ? "row" : "replicated";
}
TpSplit parse_tp(const std::string& s, const std::string& file, const std::string& where) {
  if (s == "column") return TpSplit::kColumn;
  if (s == "row") return TpSplit::kRow;
  if (s == "replicated") return TpSplit::kReplicated;
  throw InputError(file, where, "unknown tp split \"" + s + "\"; expected one of: column, row, replicated");
}
LayerKind parse_kind(const std::string& s, const std::string& file, const std::string& where) {
  for (LayerKind k :
       {LayerKind::kEmbedding, LayerKind::kPositionEmbedding, LayerKind::kNorm, LayerKind::kAttention,
        LayerKind::kMlp, LayerKind::kMoe, LayerKind::kFinalNorm, LayerKind::kLmHead, LayerKind::kLoss})
    if (s == to_string(k)) return k;
  throw InputError(
      file, where,
      "unknown layer kind \"" + s +
          "\"; expected one of: embedding, position_embedding, norm, attention, mlp, moe, final_norm, "
          "lm_head, loss");
}

const char* store_name(WeightStore s) {
  switch (s) {
    case WeightStore::kParam:
      return "param";
    case WeightStore::kBf16:
      return "bf16";
    case WeightStore::kInt8:
      return "int8";
    case WeightStore::kNf4:
      return "nf4";
    case WeightStore::kFp32:
      return "fp32";
  }
  return "param";
}

/// A parameter tensor or buffer: name, shape ([experts, rows, cols] for grouped experts), TP split, and where
/// they differ from a trainable tensor in the plan's dtype: expert, frozen (LoRA's base), how it is stored
/// (bf16, int8, nf4 or fp32 instead of the plan's parameter dtype) and the parameters a packed tensor holds.
Json tensor_to_json(const Tensor& t) {
  Json jt = {{"name", t.name},
             {"shape", t.stack > 1 ? Json{t.stack, t.dim0, t.dim1} : Json{t.dim0, t.dim1}},
             {"tp", tp_name(t.tp)}};
  if (t.expert) jt["expert"] = true;
  if (t.frozen) jt["frozen"] = true;
  if (t.store != WeightStore::kParam) jt["store"] = store_name(t.store);
  if (t.logical > 0) jt["parameters"] = t.logical;
  return jt;
}

Tensor tensor_from_json(JsonObj& to) {
  const std::string& file = to.file();
  Tensor tensor;
  tensor.name = to.str("name");
  const Json& shape = to.raw("shape");
  if (!shape.is_array() || shape.empty() || shape.size() > 3)
    to.fail("shape", "expected [rows], [rows, cols] or, for grouped experts, [experts, rows, cols]");
  // A 3-D shape is a grouped expert weight: its leading dimension stacks the experts.
  const std::size_t d0 = shape.size() == 3 ? 1 : 0;
  if (shape.size() == 3) tensor.stack = json_integer(shape[0], file, to.pointer("shape") + "/0", 1, kMaxDim);
  tensor.dim0 =
      json_integer(shape[d0], file, to.pointer("shape") + "/" + std::to_string(d0), 1, kMaxDim * 64);
  tensor.dim1 = shape.size() > d0 + 1
                    ? json_integer(shape[d0 + 1], file, to.pointer("shape") + "/" + std::to_string(d0 + 1), 1,
                                   kMaxDim * 64)
                    : 1;
  tensor.tp = parse_tp(to.str("tp", "replicated"), file, to.pointer("tp"));
  tensor.expert = to.boolean("expert", false);
  if (tensor.stack > 1 && !tensor.expert)
    to.fail("shape", "a 3-D shape stacks experts: it needs \"expert\": true");
  tensor.frozen = to.boolean("frozen", false);
  const std::string store = to.str("store", "param");
  bool known = false;
  for (WeightStore w :
       {WeightStore::kParam, WeightStore::kBf16, WeightStore::kInt8, WeightStore::kNf4, WeightStore::kFp32})
    if (store == store_name(w)) tensor.store = w, known = true;
  if (!known)
    to.fail("store", "unknown store \"" + store + "\"; expected one of: param, bf16, int8, nf4, fp32");
  tensor.logical = to.integer("parameters", 0, 0, kMaxDim * kMaxDim);
  to.finish();
  return tensor;
}

std::vector<Tensor> tensors_from_json(JsonObj& lo, const std::string& key) {
  std::vector<Tensor> out;
  const Json* ts = lo.raw_optional(key);
  if (!ts) return out;
  if (!ts->is_array()) lo.fail(key, "expected an array");
  for (std::size_t t = 0; t < ts->size(); ++t) {
    JsonObj to((*ts)[t], lo.file(), lo.pointer(key) + "/" + std::to_string(t));
    out.push_back(tensor_from_json(to));
  }
  return out;
}

std::vector<Gemm> gemms_from_json(JsonObj& lo) {
  std::vector<Gemm> out;
  const Json* gs = lo.raw_optional("gemms");
  if (!gs) return out;
  if (!gs->is_array()) lo.fail("gemms", "expected an array");
  for (std::size_t t = 0; t < gs->size(); ++t) {
    JsonObj go((*gs)[t], lo.file(), lo.pointer("gemms") + "/" + std::to_string(t));
    Gemm gm;
    gm.n = go.integer("n", 1, kMaxDim * 64);
    gm.k = go.integer("k", 1, kMaxDim * 64);
    gm.count = go.number("count", 1.0, 0.0, 1e6);
    gm.tp = parse_tp(go.str("tp", "replicated"), lo.file(), go.pointer("tp"));
    gm.expert = go.boolean("expert", false);
    gm.frozen = go.boolean("frozen", false);
    go.finish();
    out.push_back(gm);
  }
  return out;
}

}  // namespace

Json ModelGraph::to_graph_json() const {
  Json layers = Json::array(), edges = Json::array();
  for (auto v : boost::make_iterator_range(boost::vertices(graph_))) {
    const Layer& l = graph_[v];
    Json tensors = Json::array(), buffers = Json::array(), gemms = Json::array();
    for (const auto& t : l.tensors) tensors.push_back(tensor_to_json(t));
    for (const auto& t : l.buffers) buffers.push_back(tensor_to_json(t));
    for (const auto& g : l.gemms) {
      Json jg = {{"n", g.n}, {"k", g.k}, {"count", g.count}, {"tp", tp_name(g.tp)}};
      if (g.expert) jg["expert"] = true;
      if (g.frozen) jg["frozen"] = true;
      gemms.push_back(jg);
    }
    Json jl = {{"name", l.name},
               {"kind", to_string(l.kind)},
               {"block", l.block},
               {"tensors", tensors},
               {"gemms", gemms},
               {"activations", activations_to_json(l.activations, l.tensors)},
               {"elementwise_bytes_per_token", l.elementwise_bytes_per_token},
               {"eager_elementwise_bytes_per_token", l.eager_elementwise_bytes_per_token}};
    if (!buffers.empty()) jl["buffers"] = buffers;
    if (l.moe_experts > 0) jl["moe"] = {{"experts", l.moe_experts}, {"top_k", l.moe_top_k}};
    if (l.attn_heads > 0) {
      jl["attention"] = {
          {"heads", l.attn_heads}, {"kv_heads", l.attn_kv_heads}, {"head_dim", l.attn_head_dim}};
      if (l.attn_v_head_dim > 0) jl["attention"]["v_head_dim"] = l.attn_v_head_dim;
      if (l.attn_window > 0) jl["attention"]["window"] = l.attn_window;
      if (l.attn_chunked) jl["attention"]["chunked"] = true;
    }
    layers.push_back(jl);
  }
  for (auto e : boost::make_iterator_range(boost::edges(graph_)))
    edges.push_back({boost::source(e, graph_), boost::target(e, graph_)});
  return {{"schema", "shardplan.graph/1"},
          {"spec", model_spec_to_json(spec_)},
          {"layers", layers},
          {"edges", edges}};
}

ModelGraph ModelGraph::from_graph_json(const Json& j, const std::string& file) {
  JsonObj o(j, file);
  std::string schema = o.str("schema");
  if (schema != "shardplan.graph/1") o.fail("schema", "expected \"shardplan.graph/1\"");
  ModelGraph m;
  m.spec_ = parse_model_spec(o.object("spec"));
  const Json& layers = o.raw("layers");
  if (!layers.is_array() || layers.empty()) o.fail("layers", "expected a non-empty array of layers");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    JsonObj lo(layers[i], file, "/layers/" + std::to_string(i));
    Layer l;
    legacy_graph::LegacyActivations legacy;
    l.name = lo.str("name");
    l.kind = parse_kind(lo.str("kind"), file, lo.pointer("kind"));
    l.block = static_cast<int>(lo.integer("block", -1, -1, 1000000));
    l.tensors = tensors_from_json(lo, "tensors");
    l.buffers = tensors_from_json(lo, "buffers");
    l.gemms = gemms_from_json(lo);
    if (auto mo = lo.optional_object("moe")) {
      l.moe_experts = static_cast<int>(mo->integer("experts", 1, 1 << 20));
      l.moe_top_k = static_cast<int>(mo->integer("top_k", 1, l.moe_experts));
      mo->finish();
    }
    if (auto ao = lo.optional_object("attention")) {
      l.attn_heads = static_cast<int>(ao->integer("heads", 1, 100000));
      l.attn_kv_heads = static_cast<int>(ao->integer("kv_heads", l.attn_heads, 1, 100000));
      l.attn_head_dim = ao->integer("head_dim", 1, kMaxDim);
      l.attn_v_head_dim = ao->integer("v_head_dim", 0, 0, kMaxDim);
      l.attn_window = ao->integer("window", 0, 0, kMaxDim);
      l.attn_chunked = ao->boolean("chunked", false);
      // Legacy (before the activation lists): the SDPA kernel's saved O and log-sum-exp within the split
      // saved bytes (absent: 0, nothing that the plan's SDPA backend or SAC save list changes).
      legacy.sdpa_out = ao->number("sdpa_out_bytes_per_token", 0.0, 0.0, 1e12);
      legacy.sdpa_lse = ao->number("sdpa_lse_bytes_per_token", 0.0, 0.0, 1e12);
      legacy.any = legacy.any || ao->has("sdpa_out_bytes_per_token") || ao->has("sdpa_lse_bytes_per_token");
      if (l.attn_chunked && l.attn_window == 0)
        ao->fail("chunked", "chunked attention needs a window (chunk size)");
      ao->finish();
    }
    if (auto* as = lo.raw_optional("activations")) {
      l.activations = activations_from_json(*as, l.tensors, file, lo.pointer("activations"));
      if (legacy.any)
        lo.fail("activations", "give either \"activations\" or the per-token keys of the earlier format");
    } else {
      legacy_graph::read_legacy(lo, legacy);
      if (legacy.any) {
        l.activations = legacy_graph::legacy_activations(legacy);
        legacy_graph::split_legacy_input(l);
      }
    }
    l.elementwise_bytes_per_token = lo.number("elementwise_bytes_per_token", 0.0, 0.0, 1e12);
    l.eager_elementwise_bytes_per_token =
        lo.number("eager_elementwise_bytes_per_token", l.elementwise_bytes_per_token, 0.0, 1e12);
    lo.finish();
    for (std::size_t t = 0; t < l.tensors.size(); ++t) {
      if (l.moe_experts == 0 && l.tensors[t].expert)
        throw InputError(file, lo.pointer("tensors") + "/" + std::to_string(t) + "/expert",
                         "an expert tensor needs the layer's \"moe\": {\"experts\", \"top_k\"}");
      if (l.tensors[t].stack > 1 && l.tensors[t].stack != l.moe_experts)
        throw InputError(file, lo.pointer("tensors") + "/" + std::to_string(t) + "/shape/0",
                         "a grouped expert weight stacks the layer's " + std::to_string(l.moe_experts) +
                             " experts, not " + std::to_string(l.tensors[t].stack));
    }
    if (l.kind == LayerKind::kLoss) add_loss_tensors(l.loss_tensors);  // from the loss implementation
    boost::add_vertex(std::move(l), m.graph_);
  }
  const auto n = static_cast<std::int64_t>(layers.size());
  if (auto* es = o.raw_optional("edges")) {
    if (!es->is_array()) o.fail("edges", "expected an array of [from, to] pairs");
    for (std::size_t i = 0; i < es->size(); ++i) {
      const Json& e = (*es)[i];
      std::string where = "/edges/" + std::to_string(i);
      if (!e.is_array() || e.size() != 2) throw InputError(file, where, "expected [from, to]");
      auto a = json_integer(e[0], file, where + "/0", 0, n - 1),
           b = json_integer(e[1], file, where + "/1", 0, n - 1);
      boost::add_edge(static_cast<std::size_t>(a), static_cast<std::size_t>(b), m.graph_);
    }
  }
  o.finish();
  try {
    m.finalize();
  } catch (const boost::not_a_dag&) {
    throw InputError(file, "/edges", "the layer graph has a cycle");
  }
  legacy_graph::add_legacy_block_inputs(m.graph_, m.spec_);
  return m;
}

}  // namespace shardplan
