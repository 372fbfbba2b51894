// The block-scaled recipes (--fp8 mxfp8 / nvfp4) in the emitted configs: which outputs can express them, and
// their torchtitan converter lines (emit.cpp calls these).
#pragma once
#include <string>

#include "simulator/plan/plan.hpp"

namespace shardplan {

/// Refuses (InputError on --emit) an output of `kind` that cannot run the plan's block-scaled recipe.
void check_blockfp_expressible(const std::string& kind, const Plan& p);
/// torchtitan 2024-2025 TOML: the [model] converters line and the [mx] section (mxfp8 only).
std::string blockfp_toml(const Plan& p);
/// torchtitan 0.3.0 Python config: the converter's import line, and its entry in model_registry's converters.
std::string blockfp_titan_import(const Plan& p);
std::string blockfp_titan_converter(const Plan& p);

}  // namespace shardplan
