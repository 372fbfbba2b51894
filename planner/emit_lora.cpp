// LoRA in the emitted configs (emit_lora.hpp).
#include "planner/emit_lora.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "core/error.hpp"

namespace shardplan {

namespace {
/// The Hugging Face module name (what PEFT's target_modules matches) of each target tensor of the
/// Llama-family models the script builds (transformers 5.23 LlamaAttention / LlamaMLP, the LM head), and
/// PEFT's all-linear shorthand.
constexpr std::pair<const char*, const char*> kHfNames[] = {
    {"wq", "q_proj"},        {"wk", "k_proj"},        {"wv", "v_proj"},
    {"wo", "o_proj"},        {"w_gate", "gate_proj"}, {"w_up", "up_proj"},
    {"w_down", "down_proj"}, {"output", "lm_head"},   {"all-linear", "all-linear"},
};
}  // namespace

void check_lora_expressible(const std::string& kind, const Plan& p) {
  auto refuse = [&](const std::string& why) { throw InputError::flag("--emit", kind + ": " + why); };
  if (p.lora_rank == 0) {
    if (!p.lora_targets.empty() || p.lora_base != LoraBase::kBf16)
      refuse(std::string(p.lora_targets.empty() ? "--lora-base" : "--lora-targets") +
             ": LoRA knobs without --lora-rank are not emitted; drop them from the plan");
    return;
  }
  // DeepSpeed's ds_config and torchtitan's configs do not say which parameters train: the config would train
  // every parameter, a different run from the simulated one.
  if (kind != "fsdp2")
    refuse(
        "--lora-rank: LoRA is emitted only as the FSDP2 script (PEFT's adapters on the Hugging Face model); "
        "wrap the model with PEFT's get_peft_model or torchtitan's LoRAConverter by hand, or use --emit "
        "fsdp2:FILE");
  if (p.lora_base != LoraBase::kBf16)
    refuse(std::string("--lora-base ") + to_string(p.lora_base) +
           ": a quantised base (bitsandbytes) is not emitted; emit the plan with --lora-base bf16");
  if (p.tp > 1)
    refuse("--lora-rank with --tp > 1: the script's TP plan does not split PEFT's adapters; use --tp 1");
  if (p.fp8 != Fp8::kNone)
    refuse("--lora-rank with --fp8: the script would convert the adapters' linears to float8 too");
  if (p.precision != Precision::kBf16Mixed)
    refuse(std::string("--lora-rank with --precision ") + to_string(p.precision) +
           ": the script emits LoRA under bf16-mixed only (a bf16 base beside fp32 adapters)");
}

std::string fsdp2_lora_line(const Plan& p, const ModelGraph& model) {
  if (p.lora_rank == 0) return "LORA = None\n";
  std::string targets;
  for (const std::string& t : lora_target_tensors(model, p.lora_targets)) {
    const auto* it =
        std::find_if(std::begin(kHfNames), std::end(kHfNames), [&](const auto& n) { return t == n.first; });
    if (it == std::end(kHfNames))
      throw InputError::flag(
          "--emit",
          "fsdp2: --lora-targets: the script names the Llama family's modules (q_proj, k_proj, "
          "v_proj, o_proj, gate_proj, up_proj, down_proj, lm_head) or all-linear, not " +
              t);
    targets += std::string(targets.empty() ? "" : ", ") + "\"" + it->second + "\"";
  }
  if (targets == "\"all-linear\"") targets = "all-linear";
  const std::string target_arg = targets == "all-linear" ? "\"all-linear\"" : "[" + targets + "]";
  return "# LoRA (PEFT 0.21.2 LoraConfig): the simulated adapters and their trainable parameter count.\n"
         "LORA = dict(rank=" +
         std::to_string(p.lora_rank) + ", targets=" + target_arg +
         ", trainable=" + std::to_string(trainable_parameters(model)) + ")\n";
}

}  // namespace shardplan
