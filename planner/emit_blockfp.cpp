// Block-scaled recipes in the emitted configs (docs/model.md "Block-scaled fp8/fp4").
#include "planner/emit_blockfp.hpp"

#include "core/error.hpp"

namespace shardplan {

void check_blockfp_expressible(const std::string& kind, const Plan& p) {
  if (!block_scaled(p.fp8)) return;
  auto refuse = [&](const std::string& why) { throw InputError::flag("--emit", kind + ": " + why); };
  // The FSDP2 script and the DeepSpeed config swap in torchao's Float8Linear only.
  if (kind != "torchtitan" && kind != "torchtitan-toml")
    refuse(std::string("--fp8 ") + to_string(p.fp8) +
           ": the script converts linears with torchao's Float8Linear only; use --emit torchtitan:FILE "
           "(torchtitan 0.3.0's MXFP8LinearConverter / NVFP4LinearConverter)");
  // torchtitan's 2025 TOML job config has an [mx] section (MXLinear, recipe mxfp8_cublas) but no NVFP4.
  if (kind == "torchtitan-toml" && p.fp8 == Fp8::kNvfp4)
    refuse("--fp8 nvfp4: torchtitan's TOML job config has no NVFP4 converter; use --emit torchtitan:FILE");
}

std::string blockfp_toml(const Plan& p) {
  if (p.fp8 != Fp8::kMxfp8) return "";
  // torchtitan 2025 config/job_config.py class MX: recipe_name "mxfp8_cublas" (cuBLAS's MXFP8 GEMM on
  // sm100), filter_fqns ["output"] (the LM head stays bf16, as the simulator's converted set).
  return "\n[model]\nconverters = [\"mx\"]\n\n[mx]\nrecipe_name = \"mxfp8_cublas\"\nfilter_fqns = "
         "[\"output\"]\n";
}

std::string blockfp_titan_import(const Plan& p) {
  if (!block_scaled(p.fp8)) return "";
  return std::string("from torchtitan.components.quantization import ") +
         (p.fp8 == Fp8::kMxfp8 ? "MXFP8LinearConverter\n" : "NVFP4LinearConverter\n");
}

std::string blockfp_titan_converter(const Plan& p) {
  if (!block_scaled(p.fp8)) return "";
  // torchtitan 0.3.0 mx.py / nvfp4.py convert every Linear.Config whose FQN contains one of `fqns` (all of
  // them when empty): "layers." keeps the LM head (lm_head) in bf16, as the simulator converts the blocks'
  // linears only.
  return std::string("            ") +
         (p.fp8 == Fp8::kMxfp8 ? "MXFP8LinearConverter" : "NVFP4LinearConverter") +
         ".Config(\n                fqns=[\"layers.\"],\n                model_compile_enabled=" +
         (p.compile ? "True" : "False") + ",\n            ),\n";
}

}  // namespace shardplan
