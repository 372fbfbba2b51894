// The transformer specification a ModelGraph is built from (docs/formats.md, "shardplan.model/1").
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/json_reader.hpp"

namespace shardplan {

enum class MlpKind { kSwiGlu, kGelu };
enum class NormKind { kRmsNorm, kLayerNorm };
enum class PositionKind { kRotary, kLearned, kAlibi };

struct MoeSpec {
  int experts = 0;  ///< experts per block; 0 = dense
  int top_k = 0;
};

struct ModelSpec {
  std::string name;
  std::string description;
  int layers = 0;
  std::int64_t hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t ffn_hidden = 0;
  std::int64_t vocab = 0;
  MlpKind mlp = MlpKind::kSwiGlu;
  NormKind norm = NormKind::kRmsNorm;
  bool attn_bias = false, mlp_bias = false, norm_bias = false;
  bool qkv_bias_only = false;  ///< with attn_bias: biases on q, k, v but not on the output projection (Qwen2)
  bool embedding_norm = false; ///< a norm right after the token embedding (BLOOM)
  bool tied_embeddings = false;
  PositionKind positions = PositionKind::kRotary;
  std::int64_t max_positions = 0;
  MoeSpec moe;
  std::int64_t seq = 4096;  ///< default sequence length
};

/// Reads a "shardplan.model/1" object strictly. `file` and the object's pointer go into errors.
ModelSpec parse_model_spec(JsonObj obj);
Json model_spec_to_json(const ModelSpec& s);
/// Reads a Hugging Face config.json (llama, mistral, mixtral, qwen2, gpt_neox, mpt, bloom, gpt2).
ModelSpec parse_hf_config(const Json& j, const std::string& file);
/// Checks the spec is a buildable transformer; throws InputError naming the field.
void validate_model_spec(const ModelSpec& s, const std::string& file);

const char* to_string(MlpKind k);
const char* to_string(NormKind k);
const char* to_string(PositionKind k);

}  // namespace shardplan
