// LoRA in the emitted configs: the FSDP2 script wraps the model with PEFT's adapters as simulated; the other
// outputs refuse a LoRA plan (docs/model.md "LoRA and QLoRA").
#pragma once
#include <string>

#include "simulator/model/model.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

/// Refuses (InputError naming --emit and the knob) a LoRA plan the `kind` output would run differently: any
/// LoRA knob outside the FSDP2 script; in it, a quantised base, TP, float8 or a precision other than
/// bf16-mixed.
void check_lora_expressible(const std::string& kind, const Plan& p);
/// The script's LORA line: None, or PEFT 0.21.2's LoraConfig arguments (rank, the Hugging Face module names
/// of the simulated targets) and the simulated trainable parameter count the script's model is compared with.
/// `model`: the plan's model with its adapters (lora_model).
std::string fsdp2_lora_line(const Plan& p, const ModelGraph& model);

}  // namespace shardplan
