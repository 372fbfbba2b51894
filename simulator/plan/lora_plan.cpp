// The plan's LoRA knobs as a LoraSpec and the transformed model.
#include "simulator/plan/lora_plan.hpp"

namespace shardplan {

const char* to_string(LoraBase b) {
  switch (b) {
    case LoraBase::kBf16:
      return "bf16";
    case LoraBase::kInt8:
      return "int8";
    case LoraBase::kNf4:
      return "nf4";
  }
  return "?";
}

LoraSpec lora_spec(const Plan& p, const ModelGraph& model) {
  LoraSpec s;
  s.rank = p.lora_rank;
  if (s.rank <= 0) return s;
  s.targets = lora_target_tensors(model, p.lora_targets);
  s.base = p.lora_base == LoraBase::kNf4    ? WeightStore::kNf4
           : p.lora_base == LoraBase::kInt8 ? WeightStore::kInt8
                                            : WeightStore::kBf16;
  return s;
}

ModelGraph lora_model(const ModelGraph& model, const Plan& p) {
  if (p.lora_rank <= 0) return model;
  return apply_lora(model, lora_spec(p, model));
}

}  // namespace shardplan
