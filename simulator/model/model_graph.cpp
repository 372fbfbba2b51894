// Builds ModelGraph from a transformer spec: the layers of each block (layer_builders.cpp, with their
// activation tensors, docs/mechanics.md §2.2), their data-flow edges and the execution order. Graph JSON:
// model_graph_json.cpp.
#include "simulator/model/model_graph.hpp"

#include <algorithm>
#include <boost/graph/topological_sort.hpp>

#include "core/checked.hpp"
#include "simulator/model/layer_builders.hpp"

namespace shardplan {

const char* to_string(LayerKind k) {
  switch (k) {
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kPositionEmbedding:
      return "position_embedding";
    case LayerKind::kNorm:
      return "norm";
    case LayerKind::kAttention:
      return "attention";
    case LayerKind::kMlp:
      return "mlp";
    case LayerKind::kMoe:
      return "moe";
    case LayerKind::kFinalNorm:
      return "final_norm";
    case LayerKind::kLmHead:
      return "lm_head";
    case LayerKind::kLoss:
      return "loss";
  }
  return "?";
}

double Layer::active_parameters() const {
  double dense = 0, routed = 0;
  for (const auto& t : tensors) (t.expert ? routed : dense) += static_cast<double>(t.parameters());
  return moe_experts > 0 ? dense + routed * moe_top_k / moe_experts : dense + routed;
}

double Layer::attended_positions(std::int64_t seq) const {
  const double s = static_cast<double>(seq), w = static_cast<double>(attn_window);
  if (attn_window <= 0 || attn_window >= seq) return (s + 1) / 2;  // causal: position i sees i + 1 keys
  if (attn_chunked) {
    // Position i sees (i mod w) + 1 keys: full chunks of w and a remainder r.
    const double chunks = static_cast<double>(seq / attn_window), r = static_cast<double>(seq % attn_window);
    return (chunks * w * (w + 1) / 2 + r * (r + 1) / 2) / s;
  }
  // Sliding window: position i sees min(w, i + 1) keys, the window counting the query's own position.
  return (w * (w + 1) / 2 + (s - w) * w) / s;
}

std::int64_t Layer::parameters() const {
  std::int64_t n = 0;
  for (const auto& t : tensors)
    n = add_checked(n,
                    t.logical > 0
                        ? t.logical
                        : mul_checked(t.stack, mul_checked(t.dim0, t.dim1, "tensor size"), "tensor size"),
                    "layer parameters");
  return n;
}

using detail::add_activation;
using detail::make_attention;
using detail::make_mlp;
using detail::make_norm;
using detail::mark_block_input;

namespace {

using VertexId = LayerGraph::vertex_descriptor;

/// One transformer block: norms where the family puts them (pre: Llama; post: OLMo 2; sandwich: Gemma 2/3),
/// after `prologue` layers (the MTP module's input norms and projection). The block's first layer's input is
/// the checkpoint's (mark_block_input). Returns the block's last layer.
VertexId add_block(LayerGraph& g, const ModelSpec& s, int b, VertexId block_in, std::vector<Layer> prologue) {
  auto add = [&](Layer l) { return boost::add_vertex(std::move(l), g); };
  const std::string p = "blocks." + std::to_string(b) + ".";
  for (auto& l : prologue) {
    auto v = add(std::move(l));
    boost::add_edge(block_in, v, g);
    block_in = v;
  }
  const bool first_is_ckpt = prologue.empty();
  if (s.norm_placement == NormPlacement::kPre) {
    Layer first_norm = make_norm(s, p + "attention_norm", b);
    if (first_is_ckpt) mark_block_input(first_norm);
    Layer attn = make_attention(s, b), mlp = make_mlp(s, b);
    // Dense Llama-style blocks (separate or fused q/k/v, no latent attention, no experts): the exact
    // matmul parity of the selective policy.
    if (!s.mla.enabled() && mlp.kind == LayerKind::kMlp && first_is_ckpt)
      detail::selective_mm_parity(attn, mlp);
    auto n1 = add(std::move(first_norm));
    auto at = add(std::move(attn));
    // The second norm's input is the residual stream h = x + attention(...), which the block's second
    // residual add reads: where a regime drops it, it lives until the block returns (the lane's traces).
    Layer second_norm = make_norm(s, p + "ffn_norm", b);
    second_norm.activations.front().life = ActLife::kBlock;
    auto n2 = add(std::move(second_norm));
    auto ml = add(std::move(mlp));
    boost::add_edge(block_in, n1, g);
    boost::add_edge(n1, at, g);
    boost::add_edge(block_in, n2, g);  // residual
    boost::add_edge(at, n2, g);
    boost::add_edge(n2, ml, g);
    boost::add_edge(at, ml, g);  // residual
    return ml;
  }
  const bool sandwich = s.norm_placement == NormPlacement::kSandwich;
  std::vector<Layer> ls;
  if (sandwich) ls.push_back(make_norm(s, p + "attention_norm", b));
  ls.push_back(make_attention(s, b));
  ls.push_back(make_norm(s, p + "post_attention_norm", b));
  if (sandwich) ls.push_back(make_norm(s, p + "ffn_norm", b));
  ls.push_back(make_mlp(s, b));
  ls.push_back(make_norm(s, p + "post_ffn_norm", b));
  if (first_is_ckpt) {
    // A leading norm's or attention's input is the checkpoint's.
    mark_block_input(ls.front());
  }
  auto v = block_in;
  for (auto& l : ls) {
    auto w = add(std::move(l));
    boost::add_edge(v, w, g);
    v = w;
  }
  return v;
}

/// DeepSeek-V3 multi-token prediction module k (paper §2.2; HF checkpoint layers 61+): RMSNorm of the main
/// model's hidden state (hnorm) and of the next token's embedding (enorm), eh_proj [h, 2h] on their
/// concatenation, one transformer block, a final norm, and the output head shared with the main model (its
/// logits and loss: the head GEMM and the cross-entropy traffic are counted in the module's projection
/// layer). Returns the module's head; `prev` is the main blocks' output.
VertexId add_mtp_module(LayerGraph& g, const ModelSpec& s, int k, VertexId prev) {
  auto add = [&](Layer l) { return boost::add_vertex(std::move(l), g); };
  const int b = s.layers + k;
  const std::string p = "mtp." + std::to_string(k) + ".";
  std::vector<Layer> prologue;
  prologue.push_back(make_norm(s, p + "enorm", b));
  prologue.push_back(make_norm(s, p + "hnorm", b));
  mark_block_input(prologue.front());
  Layer eh;
  eh.name = p + "eh_proj";
  eh.kind = LayerKind::kMlp;
  eh.block = b;
  eh.tensors.push_back({"weight", s.hidden, 2 * s.hidden, TpSplit::kColumn});
  eh.gemms.push_back({s.hidden, 2 * s.hidden, 1, TpSplit::kColumn});
  // eh_proj's mm saves its input, the concatenation [enorm(e), hnorm(h)] (2h), kept under SAC too.
  ActTensor& in = add_activation(eh, "input", 2.0 * static_cast<double>(s.hidden), ActSplit::kTp);
  in.sac = ActSac::kSave;
  in.input = true;
  eh.elementwise_bytes_per_token = eh.eager_elementwise_bytes_per_token = 8.0 * static_cast<double>(s.hidden);
  prologue.push_back(std::move(eh));
  auto out = add_block(g, s, b, prev, std::move(prologue));
  Layer head = make_norm(s, p + "norm", b);
  auto nv = add(std::move(head));
  boost::add_edge(out, nv, g);
  Layer mh;
  mh.name = p + "head";
  mh.kind = LayerKind::kMlp;
  mh.block = b;
  mh.gemms.push_back({s.vocab, s.hidden, 1, TpSplit::kColumn});  // the shared head's weight, no new tensor
  ActTensor& mh_in = add_activation(mh, "input", static_cast<double>(s.hidden), ActSplit::kSequence);
  mh_in.sac = ActSac::kSave;
  mh_in.input = true;
  mh.elementwise_bytes_per_token = mh.eager_elementwise_bytes_per_token = 14.0 * static_cast<double>(s.vocab);
  auto hv = add(std::move(mh));
  boost::add_edge(nv, hv, g);
  return hv;
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
  // The embedding saves its indices (torch 2.15 derivatives.yaml embedding: `embedding_backward(grad,
  // indices, ...)`), the batch's token ids: no activation on the device, but packed by save_on_cpu.
  ActTensor& ids = add_activation(emb, "input_ids", 1, ActSplit::kNone, ActDtype::kInt64);
  ids.eager = ids.compiled = false;
  ids.life = ActLife::kUntracked;
  ids.pack_only = true;
  auto prev = add(emb);
  if (s.positions == PositionKind::kLearned) {
    Layer pos;
    pos.name = "pos_embeddings";
    pos.kind = LayerKind::kPositionEmbedding;
    pos.tensors.push_back({"weight", s.max_positions, s.hidden, TpSplit::kReplicated});
    pos.elementwise_bytes_per_token = pos.eager_elementwise_bytes_per_token = 6.0 * s.hidden;
    // Its position ids ([1, seq], broadcast over the batch), saved as the embedding's indices: packed only.
    ActTensor& pos_ids = add_activation(pos, "position_ids", 1, ActSplit::kNone, ActDtype::kInt64);
    pos_ids.eager = pos_ids.compiled = false;
    pos_ids.life = ActLife::kUntracked;
    pos_ids.pack_only = pos_ids.per_position = true;
    auto v = add(pos);
    boost::add_edge(prev, v, g);
    prev = v;
  }
  if (s.embedding_norm) {
    auto v = add(make_norm(s, "embedding_norm", -1));
    boost::add_edge(prev, v, g);
    prev = v;
  }
  for (int b = 0; b < s.layers; ++b) prev = add_block(g, s, b, prev, {});
  // The next module and the main model's final norm read the main blocks' output: `prev` stays.
  std::vector<VertexId> mtp_tails;
  for (int k = 0; k < s.mtp_layers; ++k) mtp_tails.push_back(add_mtp_module(g, s, k, prev));
  auto fn = add(make_norm(s, "norm", -1, LayerKind::kFinalNorm));
  boost::add_edge(prev, fn, g);
  for (auto t : mtp_tails) boost::add_edge(t, fn, g);  // order: MTP modules run before the main head
  Layer head;
  head.name = "output";
  head.kind = LayerKind::kLmHead;
  if (!s.tied_embeddings) head.tensors.push_back({"weight", s.vocab, s.hidden, TpSplit::kColumn});
  head.gemms.push_back({s.vocab, s.hidden, 1, TpSplit::kColumn});
  // The output projection's mm saves its input (the final norm's output).
  ActTensor& head_in = add_activation(head, "input", static_cast<double>(s.hidden), ActSplit::kSequence);
  head_in.sac = ActSac::kSave;
  head_in.input = true;
  detail::weight_grad_input(head, "input", {"weight"});  // none with tied embeddings: the embedding's weight
  detail::add_tp_gathered_input(head);
  auto hv = add(head);
  boost::add_edge(fn, hv, g);
  Layer loss;
  loss.name = "loss";
  loss.kind = LayerKind::kLoss;
  add_loss_tensors(loss.loss_tensors);
  // fp32 cross-entropy: cast, log-softmax, gather; backward writes an fp32 gradient and casts it (mechanics
  // §2.3).
  loss.elementwise_bytes_per_token = loss.eager_elementwise_bytes_per_token =
      14.0 * static_cast<double>(s.vocab);
  if (s.final_softcap > 0) {
    // Gemma 2 final_logit_softcapping: logits / cap, tanh, * cap on the bf16 logits. Fused: one read and
    // write (4 bytes per logit); eager: three ops, each a read and a write (12).
    loss.elementwise_bytes_per_token += 4.0 * static_cast<double>(s.vocab);
    loss.eager_elementwise_bytes_per_token += 12.0 * static_cast<double>(s.vocab);
  }
  auto lv = add(loss);
  boost::add_edge(hv, lv, g);
  m.finalize();
  return m;
}

void Layer::group_tensors() {
  tensor_groups.clear();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    auto same = [&](const TensorGroup& g) {
      const Tensor& r = tensors[g.index];
      return r.stack == t.stack && r.dim0 == t.dim0 && r.dim1 == t.dim1 && r.tp == t.tp &&
             r.expert == t.expert && r.frozen == t.frozen && r.store == t.store && r.logical == t.logical;
    };
    auto it = std::find_if(tensor_groups.begin(), tensor_groups.end(), same);
    if (it != tensor_groups.end())
      ++it->count;
    else
      tensor_groups.push_back({static_cast<std::uint32_t>(i), 1});
  }
}

void ModelGraph::finalize() {
  for (auto [v, end] = boost::vertices(graph_); v != end; ++v) graph_[*v].group_tensors();
  std::vector<LayerGraph::vertex_descriptor> topo;
  boost::topological_sort(graph_, std::back_inserter(topo));
  order_.clear();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) order_.push_back(&graph_[*it]);
  merge_tensor_groups();
  number_contents();
  parameters_ = embedding_parameters_ = largest_tensor_ = checkpoint_bytes_ = 0;
  active_parameters_ = 0;
  has_frozen_ = false;
  int last_block = -1;
  blocks_ = 0;
  for (const Layer* l : order_) {
    std::int64_t p = l->parameters();
    parameters_ = add_checked(parameters_, p, "model parameters");
    active_parameters_ += l->active_parameters();
    if (l->kind == LayerKind::kEmbedding || l->kind == LayerKind::kPositionEmbedding)
      embedding_parameters_ += p;
    for (const auto& t : l->tensors) {
      largest_tensor_ = std::max(largest_tensor_, t.parameters());
      has_frozen_ = has_frozen_ || t.frozen;
      // MXFP4 (transformers integrations/mxfp4.py, the checkpoint's *_blocks and *_scales): each row's input
      // dimension in blocks of 32 values, 16 bytes of 4-bit values and one 8-bit scale per block.
      const bool mxfp4 = spec_.moe.mxfp4_experts && t.expert && t.dim1 > 1;
      const std::int64_t b =
          mxfp4 ? mul_checked(t.stack * t.dim0, ceil_div(t.dim1, 32) * 17, "checkpoint bytes")
                : mul_checked(t.parameters(), 2, "checkpoint bytes");
      checkpoint_bytes_ = add_checked(checkpoint_bytes_, b, "checkpoint bytes");
    }
    if (l->block >= 0 && l->block != last_block) ++blocks_, last_block = l->block;
  }
}

void ModelGraph::number_contents() {
  std::vector<Layer*> firsts;  // the first layer of each content
  for (auto [v, end] = boost::vertices(graph_); v != end; ++v) {
    Layer& l = graph_[*v];
    const auto it =
        std::find_if(firsts.begin(), firsts.end(), [&](const Layer* f) { return f->same_content(l); });
    l.content = it == firsts.end() ? static_cast<int>(firsts.size()) : (*it)->content;
    if (it == firsts.end()) firsts.push_back(&l);
  }
  contents_ = static_cast<int>(firsts.size());
}

void ModelGraph::merge_tensor_groups() {
  model_groups_.clear();
  for (const Layer* l : order_)
    l->for_each_tensor_group([&](const Tensor& t, std::int64_t count) {
      // The fields Layer::group_tensors compares, and the count.
      const auto it =
          std::find_if(model_groups_.begin(), model_groups_.end(), [&](const ModelTensorGroup& g) {
            const Tensor& r = *g.tensor;
            return g.count == count && r.stack == t.stack && r.dim0 == t.dim0 && r.dim1 == t.dim1 &&
                   r.tp == t.tp && r.expert == t.expert && r.frozen == t.frozen && r.store == t.store &&
                   r.logical == t.logical;
          });
      if (it != model_groups_.end())
        ++it->layers;
      else
        model_groups_.push_back({&t, count, 1});
    });
}

ModelGraph ModelGraph::slice(std::size_t first, std::size_t last) const {
  ModelGraph m;
  m.spec_ = spec_;
  LayerGraph::vertex_descriptor prev = 0;
  for (std::size_t i = first; i < last && i < order_.size(); ++i) {
    const auto v = boost::add_vertex(*order_[i], m.graph_);
    if (i > first) boost::add_edge(prev, v, m.graph_);
    prev = v;
  }
  m.finalize();
  return m;
}

ModelGraph ModelGraph::with_layers(const std::function<void(Layer&)>& f) const {
  ModelGraph m(*this);
  for (auto [v, end] = boost::vertices(m.graph_); v != end; ++v) f(m.graph_[*v]);
  m.finalize();
  return m;
}

bool Layer::same_content(const Layer& o) const {
  return kind == o.kind && (block >= 0) == (o.block >= 0) && tensors == o.tensors && buffers == o.buffers &&
         gemms == o.gemms && attn_heads == o.attn_heads && attn_kv_heads == o.attn_kv_heads &&
         attn_head_dim == o.attn_head_dim && attn_v_head_dim == o.attn_v_head_dim &&
         attn_window == o.attn_window && attn_chunked == o.attn_chunked && moe_experts == o.moe_experts &&
         moe_top_k == o.moe_top_k && activations == o.activations && loss_tensors == o.loss_tensors &&
         elementwise_bytes_per_token == o.elementwise_bytes_per_token &&
         eager_elementwise_bytes_per_token == o.eager_elementwise_bytes_per_token &&
         tensor_groups == o.tensor_groups;
}

bool ModelGraph::same_slices(std::size_t a, std::size_t b, std::size_t n) const {
  if (a + n > order_.size() || b + n > order_.size()) return false;
  for (std::size_t k = 0; k < n; ++k) {
    const Layer &x = *order_[a + k], &y = *order_[b + k];
    if (k > 0 && (x.block == order_[a + k - 1]->block) != (y.block == order_[b + k - 1]->block)) return false;
    if (!x.same_content(y)) return false;
  }
  return true;
}

double ModelGraph::attention_model_flops_per_token(std::int64_t seq) const {
  double f = 0;
  for (const Layer* l : order_) {
    if (l->attn_heads <= 0) continue;
    const double positions = static_cast<double>(l->attn_window > 0 ? std::min(l->attn_window, seq) : seq);
    f += 6.0 * l->attn_heads * static_cast<double>(l->attn_head_dim + l->v_head_dim()) * positions;
  }
  return f;
}

}  // namespace shardplan
