// Builds ModelGraph from a transformer spec or from graph JSON. Activation accounting follows mechanics.md §2.2
// (flash attention, no dropout): attention saves its input, Q, K, V, O and an fp32 log-sum-exp; SwiGLU saves its
// input, gate and up outputs, SiLU(gate) and the product; norms save their input.
#include "simulator/model_graph.hpp"

#include <boost/graph/topological_sort.hpp>

#include "core/checked.hpp"

namespace shardplan {

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::kEmbedding: return "embedding";
    case LayerKind::kPositionEmbedding: return "position_embedding";
    case LayerKind::kNorm: return "norm";
    case LayerKind::kAttention: return "attention";
    case LayerKind::kMlp: return "mlp";
    case LayerKind::kMoe: return "moe";
    case LayerKind::kFinalNorm: return "final_norm";
    case LayerKind::kLmHead: return "lm_head";
    case LayerKind::kLoss: return "loss";
  }
  return "?";
}

double Layer::active_parameters() const {
  double dense = 0, routed = 0;
  for (const auto& t : tensors) (t.expert ? routed : dense) += static_cast<double>(t.numel());
  return moe_experts > 0 ? dense + routed * moe_top_k / moe_experts : dense + routed;
}

std::int64_t Layer::parameters() const {
  std::int64_t n = 0;
  for (const auto& t : tensors) n = add_checked(n, mul_checked(t.dim0, t.dim1, "tensor size"), "layer parameters");
  return n;
}

namespace {

Layer make_norm(const ModelSpec& s, std::string name, int block, LayerKind kind = LayerKind::kNorm) {
  Layer l;
  l.name = std::move(name);
  l.kind = kind;
  l.block = block;
  l.tensors.push_back({"weight", s.hidden, 1, TpSplit::kReplicated});
  if (s.norm_bias) l.tensors.push_back({"bias", s.hidden, 1, TpSplit::kReplicated});
  const double h = static_cast<double>(s.hidden);
  l.act_replicated_bytes_per_token = 2 * h + 4;  // bf16 input + fp32 rstd
  // Under op-level selective checkpointing norms are recomputed; the block's first norm holds the checkpoint
  // input (set by the builder).
  l.act_selective_replicated_bytes_per_token = 0;
  l.elementwise_bytes_per_token = 4 * h;  // fused: read and write bf16
  // Eager RMSNorm/LayerNorm in fp32: x.float() 6h, pow 8h, mean 4h, x * rsqrt 12h, type_as 6h, * weight 6h.
  l.eager_elementwise_bytes_per_token = 42 * h;
  return l;
}

Layer make_attention(const ModelSpec& s, int block) {
  Layer l;
  l.name = "blocks." + std::to_string(block) + ".attention";
  l.kind = LayerKind::kAttention;
  l.block = block;
  const std::int64_t h = s.hidden, d = s.head_dim, q = s.heads * d, kv = s.kv_heads * d;
  l.tensors.push_back({"wq", q, h, TpSplit::kColumn});
  l.tensors.push_back({"wk", kv, h, TpSplit::kColumn});
  l.tensors.push_back({"wv", kv, h, TpSplit::kColumn});
  l.tensors.push_back({"wo", h, q, TpSplit::kRow});
  if (s.attn_bias) {
    l.tensors.push_back({"bq", q, 1, TpSplit::kColumn});
    l.tensors.push_back({"bk", kv, 1, TpSplit::kColumn});
    l.tensors.push_back({"bv", kv, 1, TpSplit::kColumn});
    if (!s.qkv_bias_only) l.tensors.push_back({"bo", h, 1, TpSplit::kReplicated});
  }
  l.gemms = {{q, h, 1, TpSplit::kColumn}, {kv, h, 1, TpSplit::kColumn}, {kv, h, 1, TpSplit::kColumn},
             {h, q, 1, TpSplit::kRow}};
  l.attn_heads = s.heads;
  l.attn_kv_heads = s.kv_heads;
  l.attn_head_dim = d;
  // Saved: input of the QKV projections (2h, replicated under TP), Q 2q, K and V 2kv each, O 2q (o-proj input),
  // log-sum-exp fp32 per head (4a).
  l.act_replicated_bytes_per_token = 2.0 * h;
  l.act_split_bytes_per_token = 2.0 * q + 4.0 * kv + 2.0 * q + 4.0 * s.heads;
  // Op-level selective checkpointing (torchtitan's policy): attention outputs (O, LSE) are saved, and every
  // second matmul output: half of q, k, v and of the output projection's 2h.
  l.act_selective_replicated_bytes_per_token = 0.5 * 2.0 * h;
  l.act_selective_split_bytes_per_token = 2.0 * q + 4.0 * s.heads + 0.5 * (2.0 * q + 4.0 * kv);
  // Rotary on q and k (read + write), residual add (read 2 x 2h, write 2h).
  l.elementwise_bytes_per_token =
      (s.positions == PositionKind::kRotary ? 4.0 * (q + kv) : 0.0) + 6.0 * static_cast<double>(h);
  // Eager rotary on complex fp32 views: float() 6, complex multiply 12, back to bf16 6 bytes per element of q, k.
  l.eager_elementwise_bytes_per_token =
      (s.positions == PositionKind::kRotary ? 24.0 * (q + kv) : 0.0) + 6.0 * static_cast<double>(h);
  return l;
}

void add_mlp_tensors(const ModelSpec& s, Layer& l, const std::string& prefix) {
  const std::int64_t h = s.hidden, f = s.ffn_hidden;
  if (s.mlp == MlpKind::kSwiGlu) {
    l.tensors.push_back({prefix + "w_gate", f, h, TpSplit::kColumn});
    l.tensors.push_back({prefix + "w_up", f, h, TpSplit::kColumn});
    l.tensors.push_back({prefix + "w_down", h, f, TpSplit::kRow});
    if (s.mlp_bias) {
      l.tensors.push_back({prefix + "b_gate", f, 1, TpSplit::kColumn});
      l.tensors.push_back({prefix + "b_up", f, 1, TpSplit::kColumn});
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

Layer make_mlp(const ModelSpec& s, int block) {
  Layer l;
  l.block = block;
  const std::int64_t h = s.hidden, f = s.ffn_hidden;
  const bool moe = s.moe.experts > 0;
  l.name = "blocks." + std::to_string(block) + (moe ? ".moe" : ".mlp");
  l.kind = moe ? LayerKind::kMoe : LayerKind::kMlp;
  const int experts = moe ? s.moe.experts : 1;
  const double active = moe ? s.moe.top_k : 1;
  if (moe) {
    l.tensors.push_back({"router", s.moe.experts, h, TpSplit::kReplicated});
    l.gemms.push_back({s.moe.experts, h, 1, TpSplit::kReplicated});
  }
  for (int e = 0; e < experts; ++e) add_mlp_tensors(s, l, moe ? "experts." + std::to_string(e) + "." : "");
  if (moe) {
    for (std::size_t i = 1; i < l.tensors.size(); ++i) l.tensors[i].expert = true;  // all but the router
    l.moe_experts = s.moe.experts;
    l.moe_top_k = s.moe.top_k;
  }
  if (s.mlp == MlpKind::kSwiGlu) {
    l.gemms.push_back({f, h, 2 * active, TpSplit::kColumn});  // gate and up
    l.gemms.push_back({h, f, active, TpSplit::kRow});
    // Saved: input 2h; gate and up outputs 4f; SiLU(gate) 2f; product 2f (down-proj input).
    l.act_replicated_bytes_per_token = 2.0 * h;
    l.act_split_bytes_per_token = active * 8.0 * f;
    // Selective: half of the matmul outputs (gate, up: 4f; down: 2h) saved, the rest recomputed.
    l.act_selective_replicated_bytes_per_token = 0.5 * 2.0 * h;
    l.act_selective_split_bytes_per_token = active * 0.5 * 4.0 * f;
    l.elementwise_bytes_per_token = active * 6.0 * f + 6.0 * h;   // fused silu(gate) * up
    l.eager_elementwise_bytes_per_token = active * 10.0 * f + 6.0 * h;  // silu 4f, multiply 6f
  } else {
    l.gemms.push_back({f, h, active, TpSplit::kColumn});
    l.gemms.push_back({h, f, active, TpSplit::kRow});
    // Saved: input 2h; GELU input 2f; GELU output 2f (fc2 input).
    l.act_replicated_bytes_per_token = 2.0 * h;
    l.act_split_bytes_per_token = active * 4.0 * f;
    l.act_selective_replicated_bytes_per_token = 0.5 * 2.0 * h;
    l.act_selective_split_bytes_per_token = active * 0.5 * 2.0 * f;
    l.elementwise_bytes_per_token = active * 4.0 * f + 6.0 * h;
    l.eager_elementwise_bytes_per_token = active * 4.0 * f + 6.0 * h;
  }
  if (moe) l.act_replicated_bytes_per_token += 4.0 * s.moe.experts;  // router logits, fp32
  return l;
}

}  // namespace

ModelGraph ModelGraph::from_spec(const ModelSpec& s) {
  validate_model_spec(s, s.name);
  ModelGraph m;
  m.spec_ = s;
  auto& g = m.graph_;
  auto add = [&](Layer l) { return boost::add_vertex(std::move(l), g); };

  Layer emb;
  emb.name = "tok_embeddings";
  emb.kind = LayerKind::kEmbedding;
  emb.tensors.push_back({"weight", s.vocab, s.hidden, TpSplit::kColumn});
  emb.elementwise_bytes_per_token = emb.eager_elementwise_bytes_per_token = 2.0 * s.hidden;
  auto prev = add(emb);
  if (s.positions == PositionKind::kLearned) {
    Layer pos;
    pos.name = "pos_embeddings";
    pos.kind = LayerKind::kPositionEmbedding;
    pos.tensors.push_back({"weight", s.max_positions, s.hidden, TpSplit::kReplicated});
    pos.elementwise_bytes_per_token = pos.eager_elementwise_bytes_per_token = 6.0 * s.hidden;
    auto v = add(pos);
    boost::add_edge(prev, v, g);
    prev = v;
  }
  if (s.embedding_norm) {
    auto v = add(make_norm(s, "embedding_norm", -1));
    boost::add_edge(prev, v, g);
    prev = v;
  }
  for (int b = 0; b < s.layers; ++b) {
    auto block_in = prev;
    Layer first_norm = make_norm(s, "blocks." + std::to_string(b) + ".attention_norm", b);
    first_norm.act_selective_replicated_bytes_per_token = 2.0 * static_cast<double>(s.hidden);  // checkpoint input
    auto n1 = add(first_norm);
    auto at = add(make_attention(s, b));
    auto n2 = add(make_norm(s, "blocks." + std::to_string(b) + ".ffn_norm", b));
    auto ml = add(make_mlp(s, b));
    boost::add_edge(block_in, n1, g);
    boost::add_edge(n1, at, g);
    boost::add_edge(block_in, n2, g);  // residual
    boost::add_edge(at, n2, g);
    boost::add_edge(n2, ml, g);
    boost::add_edge(at, ml, g);  // residual
    prev = ml;
  }
  auto fn = add(make_norm(s, "norm", -1, LayerKind::kFinalNorm));
  boost::add_edge(prev, fn, g);
  Layer head;
  head.name = "output";
  head.kind = LayerKind::kLmHead;
  if (!s.tied_embeddings) head.tensors.push_back({"weight", s.vocab, s.hidden, TpSplit::kColumn});
  head.gemms.push_back({s.vocab, s.hidden, 1, TpSplit::kColumn});
  head.act_replicated_bytes_per_token = 2.0 * s.hidden;  // head input
  head.act_selective_replicated_bytes_per_token = 2.0 * s.hidden;
  auto hv = add(head);
  boost::add_edge(fn, hv, g);
  Layer loss;
  loss.name = "loss";
  loss.kind = LayerKind::kLoss;
  // fp32 cross-entropy: cast, log-softmax, gather; backward writes an fp32 gradient and casts it (mechanics §2.3).
  loss.elementwise_bytes_per_token = loss.eager_elementwise_bytes_per_token = 14.0 * static_cast<double>(s.vocab);
  auto lv = add(loss);
  boost::add_edge(hv, lv, g);
  m.finalize();
  return m;
}

void ModelGraph::finalize() {
  std::vector<LayerGraph::vertex_descriptor> topo;
  boost::topological_sort(graph_, std::back_inserter(topo));
  order_.clear();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) order_.push_back(&graph_[*it]);
  parameters_ = embedding_parameters_ = largest_tensor_ = 0;
  active_parameters_ = 0;
  int max_block = -1;
  for (const Layer* l : order_) {
    std::int64_t p = l->parameters();
    parameters_ = add_checked(parameters_, p, "model parameters");
    active_parameters_ += l->active_parameters();
    if (l->kind == LayerKind::kEmbedding || l->kind == LayerKind::kPositionEmbedding)
      embedding_parameters_ += p;
    for (const auto& t : l->tensors) largest_tensor_ = std::max(largest_tensor_, t.numel());
    max_block = std::max(max_block, l->block);
  }
  blocks_ = max_block + 1;
}

// --- graph JSON ----------------------------------------------------------------------------------------------

static const char* tp_name(TpSplit t) {
  return t == TpSplit::kColumn ? "column" : t == TpSplit::kRow ? "row" : "replicated";
}
static TpSplit parse_tp(const std::string& s, const std::string& file, const std::string& where) {
  if (s == "column") return TpSplit::kColumn;
  if (s == "row") return TpSplit::kRow;
  if (s == "replicated") return TpSplit::kReplicated;
  throw InputError(file, where, "unknown tp split \"" + s + "\"; expected one of: column, row, replicated");
}
static LayerKind parse_kind(const std::string& s, const std::string& file, const std::string& where) {
  for (LayerKind k : {LayerKind::kEmbedding, LayerKind::kPositionEmbedding, LayerKind::kNorm, LayerKind::kAttention,
                      LayerKind::kMlp, LayerKind::kMoe, LayerKind::kFinalNorm, LayerKind::kLmHead, LayerKind::kLoss})
    if (s == to_string(k)) return k;
  throw InputError(file, where,
                   "unknown layer kind \"" + s +
                       "\"; expected one of: embedding, position_embedding, norm, attention, mlp, moe, final_norm, "
                       "lm_head, loss");
}

Json ModelGraph::to_graph_json() const {
  Json layers = Json::array(), edges = Json::array();
  for (auto v : boost::make_iterator_range(boost::vertices(graph_))) {
    const Layer& l = graph_[v];
    Json tensors = Json::array(), gemms = Json::array();
    for (const auto& t : l.tensors) {
      Json jt = {{"name", t.name}, {"shape", {t.dim0, t.dim1}}, {"tp", tp_name(t.tp)}};
      if (t.expert) jt["expert"] = true;
      tensors.push_back(jt);
    }
    for (const auto& g : l.gemms) gemms.push_back({{"n", g.n}, {"k", g.k}, {"count", g.count}, {"tp", tp_name(g.tp)}});
    Json jl = {{"name", l.name},
               {"kind", to_string(l.kind)},
               {"block", l.block},
               {"tensors", tensors},
               {"gemms", gemms},
               {"act_split_bytes_per_token", l.act_split_bytes_per_token},
               {"act_replicated_bytes_per_token", l.act_replicated_bytes_per_token},
               {"act_selective_split_bytes_per_token", l.act_selective_split_bytes_per_token},
               {"act_selective_replicated_bytes_per_token", l.act_selective_replicated_bytes_per_token},
               {"elementwise_bytes_per_token", l.elementwise_bytes_per_token},
               {"eager_elementwise_bytes_per_token", l.eager_elementwise_bytes_per_token}};
    if (l.moe_experts > 0) jl["moe"] = {{"experts", l.moe_experts}, {"top_k", l.moe_top_k}};
    if (l.attn_heads > 0)
      jl["attention"] = {{"heads", l.attn_heads}, {"kv_heads", l.attn_kv_heads}, {"head_dim", l.attn_head_dim}};
    layers.push_back(jl);
  }
  for (auto e : boost::make_iterator_range(boost::edges(graph_)))
    edges.push_back({boost::source(e, graph_), boost::target(e, graph_)});
  return {{"schema", "shardplan.graph/1"}, {"spec", model_spec_to_json(spec_)}, {"layers", layers}, {"edges", edges}};
}

ModelGraph ModelGraph::from_graph_json(const Json& j, const std::string& file) {
  JsonObj o(j, file);
  std::string schema = o.str("schema");
  if (schema != "shardplan.graph/1") o.fail("schema", "expected \"shardplan.graph/1\"");
  ModelGraph m;
  m.spec_ = parse_model_spec(o.object("spec"));
  const Json& layers = o.raw("layers");
  if (!layers.is_array() || layers.empty()) o.fail("layers", "expected a non-empty array of layers");
  constexpr std::int64_t kMaxDim = std::int64_t{1} << 24;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    JsonObj lo(layers[i], file, "/layers/" + std::to_string(i));
    Layer l;
    l.name = lo.str("name");
    l.kind = parse_kind(lo.str("kind"), file, lo.pointer("kind"));
    l.block = static_cast<int>(lo.integer("block", -1, -1, 1000000));
    if (auto* ts = lo.raw_optional("tensors")) {
      if (!ts->is_array()) lo.fail("tensors", "expected an array");
      for (std::size_t t = 0; t < ts->size(); ++t) {
        JsonObj to((*ts)[t], file, lo.pointer("tensors") + "/" + std::to_string(t));
        Tensor tensor;
        tensor.name = to.str("name");
        const Json& shape = to.raw("shape");
        if (!shape.is_array() || shape.empty() || shape.size() > 2) to.fail("shape", "expected [rows] or [rows, cols]");
        tensor.dim0 = json_integer(shape[0], file, to.pointer("shape") + "/0", 1, kMaxDim * 64);
        tensor.dim1 = shape.size() > 1 ? json_integer(shape[1], file, to.pointer("shape") + "/1", 1, kMaxDim * 64) : 1;
        tensor.tp = parse_tp(to.str("tp", "replicated"), file, to.pointer("tp"));
        tensor.expert = to.boolean("expert", false);
        to.finish();
        l.tensors.push_back(tensor);
      }
    }
    if (auto* gs = lo.raw_optional("gemms")) {
      if (!gs->is_array()) lo.fail("gemms", "expected an array");
      for (std::size_t t = 0; t < gs->size(); ++t) {
        JsonObj go((*gs)[t], file, lo.pointer("gemms") + "/" + std::to_string(t));
        Gemm gm;
        gm.n = go.integer("n", 1, kMaxDim * 64);
        gm.k = go.integer("k", 1, kMaxDim * 64);
        gm.count = go.number("count", 1.0, 0.0, 1e6);
        gm.tp = parse_tp(go.str("tp", "replicated"), file, go.pointer("tp"));
        go.finish();
        l.gemms.push_back(gm);
      }
    }
    if (auto mo = lo.optional_object("moe")) {
      l.moe_experts = static_cast<int>(mo->integer("experts", 1, 1 << 20));
      l.moe_top_k = static_cast<int>(mo->integer("top_k", 1, l.moe_experts));
      mo->finish();
    }
    if (auto ao = lo.optional_object("attention")) {
      l.attn_heads = static_cast<int>(ao->integer("heads", 1, 100000));
      l.attn_kv_heads = static_cast<int>(ao->integer("kv_heads", l.attn_heads, 1, 100000));
      l.attn_head_dim = ao->integer("head_dim", 1, kMaxDim);
      ao->finish();
    }
    l.act_split_bytes_per_token = lo.number("act_split_bytes_per_token", 0.0, 0.0, 1e12);
    l.act_replicated_bytes_per_token = lo.number("act_replicated_bytes_per_token", 0.0, 0.0, 1e12);
    l.act_selective_split_bytes_per_token =
        lo.number("act_selective_split_bytes_per_token", l.act_split_bytes_per_token, 0.0, 1e12);
    l.act_selective_replicated_bytes_per_token =
        lo.number("act_selective_replicated_bytes_per_token", l.act_replicated_bytes_per_token, 0.0, 1e12);
    l.elementwise_bytes_per_token = lo.number("elementwise_bytes_per_token", 0.0, 0.0, 1e12);
    l.eager_elementwise_bytes_per_token =
        lo.number("eager_elementwise_bytes_per_token", l.elementwise_bytes_per_token, 0.0, 1e12);
    lo.finish();
    if (l.moe_experts == 0)
      for (std::size_t t = 0; t < l.tensors.size(); ++t)
        if (l.tensors[t].expert)
          throw InputError(file, lo.pointer("tensors") + "/" + std::to_string(t) + "/expert",
                           "an expert tensor needs the layer's \"moe\": {\"experts\", \"top_k\"}");
    boost::add_vertex(std::move(l), m.graph_);
  }
  const auto n = static_cast<std::int64_t>(layers.size());
  if (auto* es = o.raw_optional("edges")) {
    if (!es->is_array()) o.fail("edges", "expected an array of [from, to] pairs");
    for (std::size_t i = 0; i < es->size(); ++i) {
      const Json& e = (*es)[i];
      std::string where = "/edges/" + std::to_string(i);
      if (!e.is_array() || e.size() != 2) throw InputError(file, where, "expected [from, to]");
      auto a = json_integer(e[0], file, where + "/0", 0, n - 1), b = json_integer(e[1], file, where + "/1", 0, n - 1);
      boost::add_edge(static_cast<std::size_t>(a), static_cast<std::size_t>(b), m.graph_);
    }
  }
  o.finish();
  try {
    m.finalize();
  } catch (const boost::not_a_dag&) {
    throw InputError(file, "/edges", "the layer graph has a cycle");
  }
  return m;
}

}  // namespace shardplan
