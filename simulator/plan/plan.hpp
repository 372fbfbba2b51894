// The plan room's interface: the Plan value and resolve_plan (plan_types.hpp), the knob table (knobs.hpp),
// each runtime's capability table (capabilities.hpp) and traits (runtime.hpp), pipeline parallelism's plan
// checks and stage split (pipeline_plan.hpp), and the busiest EP rank's routed rows (moe_rows.hpp). Other
// rooms include this header only.
#pragma once
#include "simulator/plan/capabilities.hpp"
#include "simulator/plan/knobs.hpp"
#include "simulator/plan/lora_plan.hpp"
#include "simulator/plan/loss_plan.hpp"
#include "simulator/plan/moe_rows.hpp"
#include "simulator/plan/pipeline_plan.hpp"
#include "simulator/plan/plan_types.hpp"
#include "simulator/plan/runtime.hpp"
