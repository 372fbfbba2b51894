// LoRA and QLoRA as a transformation of the model's layers (docs/model.md "LoRA and QLoRA"): every base
// parameter frozen (stored in bf16, LLM.int8 or NF4), two trainable adapter tensors A [r, in] and B [out, r]
// beside each targeted linear weight, their GEMMs and the [tokens, r] A-output they save, and QLoRA's
// quantisation constants as buffers every rank holds whole.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "simulator/model/model_graph.hpp"

namespace shardplan {

/// The adapters and how the frozen base is stored.
struct LoraSpec {
  int rank = 0;                      ///< adapter rank r; 0 = no LoRA
  std::vector<std::string> targets;  ///< the model's tensor names (lora_target_tensors)
  /// kBf16, kInt8 (LLM.int8: bitsandbytes Linear8bitLt) or kNf4 (QLoRA: Linear4bit, double quantisation).
  WeightStore base = WeightStore::kBf16;
};

/// The tensor names that a comma-separated list of module names stands for in `model`: Hugging Face / PEFT
/// names (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, qkv_proj, c_attn, query_key_value,
/// gate_up_proj, fc1, fc2, lm_head), torchtitan's (wq, wk, wv, wo, w1, w2, w3, output), the model's own
/// (w_gate, ...), or PEFT's "all-linear" (every linear weight in the blocks, not the output layer). Empty:
/// PEFT 0.21.2's default for the model type (peft/utils/constants.py
/// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING: q_proj and v_proj for llama, mistral, mixtral, qwen2,
/// qwen3, gemma; the fused c_attn / query_key_value of GPT-2 and Falcon). InputError naming --lora-targets
/// for a name the model does not have, or an empty default (MLA: PEFT has none for deepseek_v3).
std::vector<std::string> lora_target_tensors(const ModelGraph& model, const std::string& list);

/// `model` with LoRA applied (spec.rank > 0), else `model` unchanged.
ModelGraph apply_lora(const ModelGraph& model, const LoraSpec& spec);

/// Whether the model's parameters are frozen (apply_lora ran on it).
bool has_frozen_parameters(const ModelGraph& model);
/// Parameters that train (the adapters under LoRA; all of them otherwise).
std::int64_t trainable_parameters(const ModelGraph& model);

}  // namespace shardplan
