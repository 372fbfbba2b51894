// A plan's LoRA knobs applied to the model (docs/model.md "LoRA and QLoRA"): the LoRA knobs do not change the
// Plan's lowering directly; they transform the model (frozen base, adapters), which the stages then sum.
#pragma once
#include "simulator/model/model.hpp"
#include "simulator/plan/plan_types.hpp"

namespace shardplan {

/// The plan's adapters and base storage for `model` (targets resolved against its tensor names).
LoraSpec lora_spec(const Plan& p, const ModelGraph& model);
/// `model` with the plan's LoRA applied (p.lora_rank > 0), else `model`. InputError naming --lora-targets for
/// a target the model does not have.
ModelGraph lora_model(const ModelGraph& model, const Plan& p);

}  // namespace shardplan
