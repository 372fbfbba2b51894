// ModelGraph: a Boost.Graph of layers (embedding, norms, attention, MLP/MoE, LM head, loss) with, per layer,
// its parameter tensors (so padding and per-parameter sharding are exact), its forward GEMMs and attention
// core, the list of activation tensors it saves and creates (activations.hpp), and data-flow edges.
// Execution order is a topological sort.
#pragma once
#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/json_reader.hpp"
#include "simulator/model/activations.hpp"
#include "simulator/model/loss_tensors.hpp"
#include "simulator/model/model_spec.hpp"

namespace shardplan {

enum class LayerKind {
  kEmbedding,
  kPositionEmbedding,
  kNorm,
  kAttention,
  kMlp,
  kMoe,
  kFinalNorm,
  kLmHead,
  kLoss
};
const char* to_string(LayerKind k);

/// How tensor parallelism splits a tensor: replicated (norms), column-parallel (dim 0 split: QKV, gate/up,
/// vocab-parallel embedding and head), row-parallel (dim 1 split: output and down projections).
enum class TpSplit { kReplicated, kColumn, kRow };

/// How a parameter (or a quantisation buffer) is stored, whatever the plan's parameter dtype (docs/model.md
/// "LoRA and QLoRA"): kParam = the plan's parameter dtype; kBf16 = a frozen base weight loaded in bf16;
/// kInt8 = LLM.int8 codes (bitsandbytes Int8Params.CB, 1 byte) or 8-bit absmax codes; kNf4 = 4-bit codes
/// packed two per byte into bf16 storage elements (bnb_4bit_quant_storage=bfloat16, what FSDP and ZeRO-3
/// shard: 2 bytes per storage element, 4 values each); kFp32 = fp32 quantisation constants.
enum class WeightStore : std::uint8_t { kParam, kBf16, kInt8, kNf4, kFp32 };
/// Bytes per stored element (`param_bytes`: the plan's parameter dtype, for kParam).
inline int store_bytes(WeightStore s, int param_bytes) {
  switch (s) {
    case WeightStore::kParam:
      return param_bytes;
    case WeightStore::kInt8:
      return 1;
    case WeightStore::kFp32:
      return 4;
    case WeightStore::kBf16:
    case WeightStore::kNf4:
      return 2;
  }
  return param_bytes;
}

struct Tensor {
  std::string name;
  std::int64_t dim0 = 0;  ///< rows (the dimension FSDP2 shards)
  std::int64_t dim1 = 1;  ///< columns; 1 for vectors
  TpSplit tp = TpSplit::kReplicated;
  /// A routed expert's weight: each token passes through top_k of the layer's `moe_experts` experts.
  bool expert = false;
  /// Grouped experts: how many [dim0 x dim1] slices are stacked on a leading dimension, one per expert, as
  /// the frameworks hold them (torchtitan 0.3.0 GroupedExperts w1 [experts, hidden_dim, dim], w2, w3;
  /// Hugging Face's gpt-oss GptOssExperts gate_up_proj; one parameter per weight, not one per expert). 1 for
  /// a plain tensor. FSDP2 shards the stacked dimension, or dim0 when the experts are fewer than the ranks
  /// (layer_memory.cpp tensor_shard_elems); expert parallelism gives each rank stack / ep slices.
  std::int64_t stack = 1;
  /// requires_grad=False (a LoRA base weight): no gradient, no optimizer state, no reduce-scatter.
  bool frozen = false;
  WeightStore store = WeightStore::kParam;
  /// The parameters a packed tensor stands for (kNf4: 4 per storage element); 0 = numel().
  std::int64_t logical = 0;
  std::int64_t numel() const { return stack * dim0 * dim1; }
  /// The parameters it holds: numel(), or the packed values (kNf4).
  std::int64_t parameters() const { return logical > 0 ? logical : numel(); }
  bool operator==(const Tensor&) const = default;
};

/// One forward GEMM per token: [tokens x k] @ [k x n]; `count` = how many such GEMMs a token goes through
/// (top-k experts for MoE). `tp` says which of n (column) or k (row) TP divides.
struct Gemm {
  std::int64_t n = 0, k = 0;
  double count = 1;
  TpSplit tp = TpSplit::kReplicated;
  /// A routed expert's GEMM (expert parallelism moves its tokens; load imbalance scales the busiest rank's).
  bool expert = false;
  /// The weight is frozen (LoRA base): backward computes the input gradient only, no weight gradient.
  bool frozen = false;
  bool operator==(const Gemm&) const = default;
};

struct Layer {
  std::string name;
  LayerKind kind = LayerKind::kNorm;
  int block = -1;  ///< transformer block index, -1 outside blocks
  std::vector<Tensor> tensors;
  /// Tensors that are not parameters and that every rank holds whole (QLoRA's quantisation constants:
  /// bitsandbytes keeps them on the module, outside what FSDP or ZeRO shard).
  std::vector<Tensor> buffers;
  std::vector<Gemm> gemms;
  // Attention core (flash attention): heads, kv heads, head dim; zero for other layers.
  int attn_heads = 0, attn_kv_heads = 0;
  std::int64_t attn_head_dim = 0;  ///< the Q·K dimension per head
  /// The V (and output) dimension per head when it differs from attn_head_dim (MLA: 128 vs 192); 0 = the
  /// same.
  std::int64_t attn_v_head_dim = 0;
  /// Local attention, 0 = each position attends to all earlier ones (causal, (s + 1) / 2 on average). A
  /// sliding window attends to the last min(window, i + 1) positions; chunked attention (attn_chunked) to the
  /// positions of its own chunk of `attn_window` up to itself.
  std::int64_t attn_window = 0;
  bool attn_chunked = false;
  std::int64_t v_head_dim() const { return attn_v_head_dim > 0 ? attn_v_head_dim : attn_head_dim; }
  /// Mean number of key positions a query attends to at sequence length `seq` (causal, window or chunk).
  double attended_positions(std::int64_t seq) const;
  /// Mixture of experts: routed experts and how many each token uses (0 for dense layers).
  int moe_experts = 0, moe_top_k = 0;
  /// The activation tensors the layer's forward saves and creates, in forward order (activations.hpp).
  std::vector<ActTensor> activations;
  /// The loss layer's buffers (logits, upcast copy, saved statistics, gradients) for every loss
  /// implementation, with when each is made and freed (loss_tensors.hpp); empty for other layers.
  std::vector<LossTensor> loss_tensors;
  /// Memory-bound forward traffic per token (norms, activations, rotary, residual adds), bytes, when the
  /// elementwise ops are fused (torch.compile); `eager_elementwise_bytes_per_token` is the same work run op
  /// by op in eager mode (fp32 upcasts and every intermediate written and read back).
  double elementwise_bytes_per_token = 0;
  double eager_elementwise_bytes_per_token = 0;
  std::int64_t parameters() const;
  /// Parameters one token passes through: routed experts count top_k / experts of their weights.
  double active_parameters() const;
  /// The layer's tensors grouped by shape (stack, dim0, dim1, TP split, expert): `tensors[index]` stands for
  /// `count` identical tensors (a MoE layer's grouped gate and up weights are one group of two). Filled by
  /// ModelGraph; the per-tensor sums of memory.cpp and units.cpp walk the groups (for_each_tensor_group).
  struct TensorGroup {
    std::uint32_t index = 0, count = 0;
    bool operator==(const TensorGroup&) const = default;
  };
  std::vector<TensorGroup> tensor_groups;
  /// Calls f(tensor, count) once per group of identical tensors (every tensor once, count 1, when the groups
  /// are not filled in or stale). Only for order-independent sums.
  template <class F>
  void for_each_tensor_group(F&& f) const {
    std::size_t covered = 0;
    for (const TensorGroup& g : tensor_groups) covered += g.count;
    if (covered == tensors.size() && !tensor_groups.empty()) {
      for (const TensorGroup& g : tensor_groups) f(tensors[g.index], static_cast<std::int64_t>(g.count));
    } else {
      for (const Tensor& t : tensors) f(t, std::int64_t{1});
    }
  }
  /// Groups `tensors` into `tensor_groups`.
  void group_tensors();
  /// Whether the layer simulates as `o` does: every field but the name and the block index (a field added
  /// above must be compared here too).
  bool same_content(const Layer& o) const;
  /// Set by ModelGraph::finalize: layers that are same_content share it (0 .. ModelGraph::contents() - 1), so
  /// a per-plan value of a layer computed once serves every copy (lowering/units_stages.hpp LayerMemo).
  int content = -1;
};

using LayerGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, Layer>;

/// A MoE layer's routing traffic per token (the router's, dispatch's and combine's tensors' writes and reads,
/// 16-bit compute; moe_tensors.cpp), the part of its elementwise bytes on the MoE's token side: fused (with
/// inductor's fusions) or eager. 0 for other layers.
double moe_routing_elementwise_bytes(const Layer& l, bool fused);

class ModelGraph {
 public:
  ModelGraph() = default;
  // `order_` points into the graph's storage: copies and moves rebuild it.
  ModelGraph(const ModelGraph& o) : spec_(o.spec_), graph_(o.graph_) { finalize(); }
  ModelGraph(ModelGraph&& o) noexcept : spec_(std::move(o.spec_)), graph_(std::move(o.graph_)) { finalize(); }
  ModelGraph& operator=(const ModelGraph& o) {
    if (this != &o) spec_ = o.spec_, graph_ = o.graph_, finalize();
    return *this;
  }
  ModelGraph& operator=(ModelGraph&& o) noexcept {
    spec_ = std::move(o.spec_), graph_ = std::move(o.graph_), finalize();
    return *this;
  }
  /// Builds the graph of a decoder-only transformer from its spec.
  static ModelGraph from_spec(const ModelSpec& spec);
  /// Reads the project's graph JSON ("shardplan.graph/1").
  static ModelGraph from_graph_json(const Json& j, const std::string& file);
  Json to_graph_json() const;
  /// The layers order()[first, last) as a model of their own (same spec), chained in execution order: one
  /// pipeline stage's part of the model (simulator/simulate/pipeline_step.cpp).
  ModelGraph slice(std::size_t first, std::size_t last) const;
  /// A copy with `f` applied to every layer (tensor lists, GEMMs, activations), its sums recomputed: a plan's
  /// transformation of the model (LoRA's adapters and frozen base, simulator/model/lora.hpp).
  ModelGraph with_layers(const std::function<void(Layer&)>& f) const;
  /// Whether the slices order()[a, a + n) and order()[b, b + n) simulate alike: their layers pairwise
  /// same_content, inside and outside blocks and starting a new block at the same places (the simulation
  /// reads block indices only to compare neighbours; names are labels).
  bool same_slices(std::size_t a, std::size_t b, std::size_t n) const;

  const ModelSpec& spec() const { return spec_; }
  const LayerGraph& graph() const { return graph_; }
  /// Layers in execution (topological) order.
  const std::vector<const Layer*>& order() const { return order_; }
  /// Exact total parameter count (tied embeddings counted once).
  std::int64_t parameters() const { return parameters_; }
  /// Parameters of embeddings (token + learned positions), the part MFU's 6N excludes, as torchtitan does.
  std::int64_t embedding_parameters() const { return embedding_parameters_; }
  /// Parameters one token passes through (top_k of each MoE layer's routed experts; = parameters() for dense
  /// models): what MFU's 6N counts.
  double active_parameters() const { return active_parameters_; }
  /// Transformer blocks in the model (distinct block indices; a slice counts its own).
  int blocks() const { return blocks_; }
  /// Distinct layer contents (Layer::content).
  int contents() const { return contents_; }
  /// Attention's term of the model FLOPs per token at sequence length `seq`, the convention of torchtitan's
  /// get_num_flop_per_token (12·L·heads·head_dim·seq, causality not halved): per attention layer
  /// 6·heads·(qk_dim + v_dim)·positions, where positions is seq for global layers and min(window, seq) for
  /// local.
  double attention_model_flops_per_token(std::int64_t seq) const;
  /// The layers' tensor groups (Layer::tensor_groups) merged over the model: f(tensor, count, layers) once
  /// per distinct group (shape fields and count), where `layers` of the model's layers each have `count`
  /// such tensors. Only for order-independent integer sums: adding a layer group's term `layers` times is
  /// multiplying it by `layers` (memory.cpp's persistent state walks these, not every layer, per plan).
  template <class F>
  void for_each_model_tensor_group(F&& f) const {
    for (const ModelTensorGroup& g : model_groups_) f(*g.tensor, g.count, g.layers);
  }
  /// Whether any parameter is frozen (LoRA's base, simulator/model/lora.hpp).
  bool has_frozen() const { return has_frozen_; }
  /// Largest parameter count of a single tensor.
  std::int64_t largest_tensor() const { return largest_tensor_; }
  /// Bytes of the parameters as the released checkpoint stores them: 16-bit, except routed experts' weight
  /// matrices stored as MXFP4 (ModelSpec::moe.mxfp4_experts, gpt-oss: 4.25 bits per value). What loading
  /// the checkpoint quantised takes; training dequantises (the simulated parameters follow the plan's
  /// precision).
  std::int64_t checkpoint_bytes() const { return checkpoint_bytes_; }

 private:
  void finalize();
  void merge_tensor_groups();
  void number_contents();
  struct ModelTensorGroup {
    const Tensor* tensor = nullptr;  ///< a representative (in the graph's storage: rebuilt by finalize)
    std::int64_t count = 0, layers = 0;
  };
  ModelSpec spec_;
  std::vector<ModelTensorGroup> model_groups_;
  LayerGraph graph_;
  std::vector<const Layer*> order_;
  std::int64_t parameters_ = 0, embedding_parameters_ = 0, largest_tensor_ = 0, checkpoint_bytes_ = 0;
  double active_parameters_ = 0;
  int blocks_ = 0, contents_ = 0;
  bool has_frozen_ = false;
};

}  // namespace shardplan
