// Dating a torchtitan TOML by its layout (--from FILE.toml): the markers of JobConfig's dated layouts and the
// version rules (planner/frameworks.cpp) that change inside the range they allow.
#include <fmt/format.h>

#include <set>

#include "core/error.hpp"
#include "planner/frameworks.hpp"
#include "planner/import/common.hpp"

namespace shardplan::import {

namespace {

/// Whether the file sets a key of the section `prefix` ("compile.").
bool has_section(const std::map<std::string, std::string>& m, const char* prefix) {
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) return true;
  return false;
}

/// The day before an ISO date: "2025-04-07" -> "2025-04-06" (day arithmetic via a civil day count).
std::string day_before(const std::string& iso) {
  auto days = [](const std::string& d) {
    int y = std::stoi(d.substr(0, 4)), m = std::stoi(d.substr(5, 2)), dd = std::stoi(d.substr(8, 2));
    y -= m <= 2;
    const int era = (y >= 0 ? y : y - 399) / 400;
    const int yoe = y - era * 400, doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + dd - 1;
    return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy;
  };
  auto date_of = [](int z) {
    z += 719468;
    const int era = (z >= 0 ? z : z - 146096) / 146097, doe = z - era * 146097;
    const int yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365,
              doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1, m = mp + (mp < 10 ? 3 : -9);
    const int y = yoe + era * 400 + (m <= 2);
    return fmt::format("{:04d}-{:02d}-{:02d}", y, m, d);
  };
  return date_of(days(iso) - 1 - 719468);  // days() counts from 0000-03-01, date_of from 1970
}

}  // namespace

/// A torchtitan TOML's layout dates it: each marker bounds the torchtitan commit dates whose JobConfig had it
/// (the dates of the train_configs that first / last carried it: git log of torchtitan/models/llama3/
/// train_configs/llama3_8b.toml and its predecessors). The version defaults are those of the latest date the
/// markers allow; the rows that change inside the range are named.
void date_titan_toml(const std::map<std::string, std::string>& t, ImportedConfig& c) {
  struct Marker {
    const char* what;
    bool (*present)(const std::map<std::string, std::string>&);
    const char* from;  // inclusive
    const char* to;    // exclusive
  };
  static const Marker markers[] = {
      {"[experimental] (parallel degrees beside [training])",
       [](const std::map<std::string, std::string>& m) {
         for (const auto& [k, v] : m)
           if (k.rfind("experimental.", 0) == 0 && k.find("parallel") != std::string::npos) return true;
         return false;
       },
       "2024-06-12", "2025-04-07"},
      {"training.tensor_parallel_degree",
       [](const std::map<std::string, std::string>& m) {
         return m.count("training.tensor_parallel_degree") > 0 ||
                m.count("training.data_parallel_shard_degree") > 0;
       },
       "", "2025-04-07"},
      {"float8.enable_float8_linear",
       [](const std::map<std::string, std::string>& m) { return m.count("float8.enable_float8_linear") > 0; },
       "", "2025-02-15"},
      {"model.norm_type",
       [](const std::map<std::string, std::string>& m) { return m.count("model.norm_type") > 0; }, "",
       "2025-04-17"},
      {"model.converters",
       [](const std::map<std::string, std::string>& m) { return m.count("model.converters") > 0; },
       "2025-02-15", ""},
      {"[parallelism]",
       [](const std::map<std::string, std::string>& m) { return has_section(m, "parallelism."); },
       "2025-04-07", ""},
      {"training.local_batch_size",
       [](const std::map<std::string, std::string>& m) { return m.count("training.local_batch_size") > 0; },
       "2025-06-05", ""},
      {"[compile]", [](const std::map<std::string, std::string>& m) { return has_section(m, "compile."); },
       "2025-08-20", ""},
      {"[quantize.*]",
       [](const std::map<std::string, std::string>& m) { return has_section(m, "quantize."); }, "2025-09-26",
       ""},
  };
  std::string from = "2024-04-01",
              to = "2026-02-23";  // the TOML era: torchtitan's first configs .. 9810191bb
  std::vector<std::string> seen;
  for (const Marker& m : markers) {
    if (!m.present(t)) continue;
    seen.push_back(m.what);
    if (*m.from && m.from > from) from = m.from;
    if (*m.to && m.to < to) to = m.to;
  }
  if (from >= to) {
    c.assumed.push_back("the file mixes torchtitan layouts of different dates (" + join_names(seen) +
                        "): no version defaults inferred (give --framework torchtitan@DATE)");
    return;
  }
  const std::string latest = day_before(to);  // the latest day the markers allow
  c.framework = "torchtitan@" + latest;
  std::string changing;
  std::set<std::string> named;
  for (const VersionRule& r : version_rules())
    if (std::string(r.framework) == "torchtitan" && !r.launcher &&
        ((*r.from && r.from > from && r.from < to) || (*r.to && r.to > from && r.to < to)) &&
        named.insert(r.knob).second)
      changing += std::string(changing.empty() ? "" : ", ") + r.knob + " (" + (*r.from ? r.from : r.to) + ")";
  c.framework_reason =
      "the file's layout (" + join_names(seen.empty() ? std::vector<std::string>{"no dated key"} : seen) +
      ") dates it to torchtitan of " + from + " .. " + to + ", the defaults of its latest day" +
      (changing.empty() ? "" : "; within that range changes " + changing);
}

}  // namespace shardplan::import
