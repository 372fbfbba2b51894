// --from on PEFT LoRA adapters (tests/data/from/peft-0.21.2-*, written by PEFT 0.21.2's
// LoraConfig(...).save_pretrained in the pinned environment, SOURCES.md): r and target_modules become the
// LoRA knobs lora_rank and lora_targets (docs/model.md "LoRA and QLoRA"); fields the model does not express
// are named on stderr; a bad field is one line naming the file and the field, exit 2.
#include <catch2/catch.hpp>

#include "core/json_reader.hpp"
#include "plan_helpers.hpp"

using namespace shardplan;
namespace fs = std::filesystem;
using ptest::quote;

namespace {

const fs::path kFrom = fs::path(SHARDPLAN_TEST_DATA) / "from";

struct Run {
  int rc = -1;
  std::string out, err;
};

/// `shardplan memory` of llama3-8b on 16 H100s with --from `from` (text output).
Run memory_from(const std::string& from) {
  auto dir = ptest::temp_dir("from-peft");
  Run r;
  r.rc = ptest::run_cli("memory --model llama3-8b --cluster dgx-h100 --gpus 16 --from " + quote(from),
                        dir / "out.txt", dir / "err.txt");
  r.out = ptest::read_text(dir / "out.txt");
  r.err = ptest::read_text(dir / "err.txt");
  return r;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::size_t lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

// llama3-8b: hidden 4096, 8 KV heads x 128 = 1024, FFN 14336, 32 blocks. An adapter on W [out, in] adds
// A [r, in] + B [out, r] = r (in + out) trainable parameters.
TEST_CASE("from: a PEFT checkpoint folder: r and target_modules as the LoRA knobs", "[from][peft]") {
  // LoraConfig(r=16, target_modules=["q_proj", "v_proj"]), every other field PEFT's default.
  // 32 x 16 x [(4096 + 4096) + (4096 + 1024)] = 32 x 16 x 13312 = 6815744.
  Run r = memory_from((kFrom / "peft-0.21.2-q_v").string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "lora: rank 16, targets q_proj,v_proj, base bf16 (6815744 trainable parameters)\n"));
  CHECK(r.err.empty());  // PEFT's defaults: nothing unmodelled, unread or assumed
  // The same file named directly reads the same.
  Run f = memory_from((kFrom / "peft-0.21.2-q_v" / "adapter_config.json").string());
  CHECK(f.out == r.out);
  // simulate --json: the plan's knobs exactly.
  auto dir = ptest::temp_dir("from-peft-json");
  REQUIRE(ptest::run_cli("simulate --model llama3-8b --cluster dgx-h100 --gpus 16 --from " +
                             quote((kFrom / "peft-0.21.2-q_v").string()) + " --json -",
                         dir / "o.json", dir / "e.txt") == 0);
  const Json plan = load_json_file((dir / "o.json").string())["plan"];
  CHECK(plan["lora_rank"] == 16);
  CHECK(plan["lora_targets"] == "q_proj,v_proj");
}

TEST_CASE("from: PEFT all-linear, dropout and the base model named", "[from][peft]") {
  // LoraConfig(r=64, lora_alpha=16, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM",
  // base_model_name_or_path="meta-llama/Llama-3.1-8B"): every linear of the blocks (not lm_head):
  // 32 x 64 x [2 (4096 + 4096) + 2 (4096 + 1024) + 3 (4096 + 14336)] = 32 x 64 x 81920 = 167772160.
  Run r = memory_from((kFrom / "peft-0.21.2-all-linear").string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "lora: rank 64, targets all-linear, base bf16 (167772160 trainable parameters)\n"));
  CHECK(has(r.err, "not modelled (changes memory or time): lora_dropout 0.05 ("));
  CHECK(has(r.err, "assumed: base_model_name_or_path \"meta-llama/Llama-3.1-8B\""));
  CHECK_FALSE(has(r.err, "lora_alpha"));  // a scale: no memory or time
  CHECK(lines(r.err) == 2);
}

TEST_CASE("from: PEFT regex targets, DoRA, bias and modules_to_save named", "[from][peft]") {
  // target_modules ".*\.(q_proj|k_proj|v_proj|o_proj)$" (PEFT: re.fullmatch on module names) names the four
  // attention projections: 32 x 8 x [2 (4096 + 4096) + 2 (4096 + 1024)] = 32 x 8 x 26624 = 6815744.
  Run r = memory_from((kFrom / "peft-0.21.2-regex-dora" / "adapter_config.json").string());
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out,
            "lora: rank 8, targets q_proj,k_proj,v_proj,o_proj, base bf16 (6815744 trainable parameters)\n"));
  CHECK(has(r.err, "bias lora_only ("));
  CHECK(has(r.err, "use_dora true ("));
  CHECK(has(r.err, "modules_to_save [\"lm_head\"] ("));
  CHECK(has(r.err, "assumed: target_modules regex"));
}

TEST_CASE("from: bad PEFT adapter fields are one line naming the file and the field, exit 2",
          "[from][peft]") {
  auto dir = ptest::temp_dir("from-peft-bad");
  auto bad = [&](const std::string& name, const std::string& json, const std::string& field) {
    ptest::write_text(dir / name, json);
    Run r = memory_from((dir / name).string());
    INFO(name << ": " << r.err);
    CHECK(r.rc == 2);
    CHECK(lines(r.err) == 1);
    CHECK(has(r.err, (dir / name).string() + ": " + field));
  };
  // A module llama3-8b does not have: blamed on the file's field, not on --lora-targets.
  bad("unknown.json", R"({"peft_type": "LORA", "r": 8, "target_modules": ["q_proj", "qq_proj"]})",
      "target_modules = [\"q_proj\",\"qq_proj\"]: unknown module \"qq_proj\"");
  bad("rank.json", R"({"peft_type": "LORA", "r": "8", "target_modules": ["q_proj"]})", "r: expected");
  bad("zero.json", R"({"peft_type": "LORA", "r": 0, "target_modules": ["q_proj"]})", "r: expected");
  bad("type.json", R"({"peft_type": "IA3", "target_modules": ["q_proj"]})", "peft_type: LoRA adapters");
  bad("regex.json", R"({"peft_type": "LORA", "r": 8, "target_modules": ".*"})", "target_modules: the regex");
  bad("list.json", R"({"peft_type": "LORA", "r": 8, "target_modules": [3]})", "target_modules: expected");
  // A checkpoint folder with the base model's config.json beside the adapter: --model is said to read it.
  const fs::path ckpt = dir / "ckpt";
  fs::create_directories(ckpt);
  fs::copy_file(kFrom / "peft-0.21.2-q_v" / "adapter_config.json", ckpt / "adapter_config.json");
  ptest::write_text(ckpt / "config.json", "{}");
  Run with_base = memory_from(ckpt.string());
  CHECK(with_base.rc == 0);
  CHECK(has(with_base.err, "assumed: " + (ckpt / "config.json").string() +
                               " is beside the adapter: give --model " + (ckpt / "config.json").string()));
  // A folder without adapter_config.json.
  const fs::path empty = dir / "empty";
  fs::create_directories(empty);
  Run r = memory_from(empty.string());
  CHECK(r.rc == 2);
  CHECK(has(r.err, empty.string() + ": a folder is read as a PEFT adapter checkpoint"));
}
