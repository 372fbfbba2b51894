// CalibrationProfile's strict JSON reading (profile.hpp from_json, load): unknown keys, wrong types and
// impossible values raise InputError naming the file and JSON pointer.
#include "calibration/profile.hpp"
#include "core/json_reader.hpp"

namespace shardplan {

namespace {

const Json& array_at(JsonObj& o, const std::string& key) {
  const Json& a = o.raw(key);
  if (!a.is_array()) o.fail(key, "expected an array, got " + json_brief(a));
  return a;
}

/// Element `i` of the array `arr` at `ptr`, which must be an object.
JsonObj element(const Json& arr, std::size_t i, const std::string& file, const std::string& ptr) {
  const std::string at = ptr + "/" + std::to_string(i);
  if (!arr[i].is_object()) throw InputError(file, at, "expected an object, got " + json_brief(arr[i]));
  return JsonObj(arr[i], file, at);
}

void read_timing(JsonObj& x, std::optional<double>& min_s, std::optional<double>& max_s, int& reps,
                 std::int64_t& iters, double time_s) {
  x.allow({"min_s", "max_s"});  // optional keys read only when present: known, so typos get a suggestion
  if (x.has("min_s")) min_s = x.number("min_s", 0, 1e9);
  if (x.has("max_s")) max_s = x.number("max_s", 0, 1e9);
  if (min_s && *min_s > time_s) x.fail("min_s", "min_s is larger than time_s (the median)");
  if (max_s && *max_s < time_s) x.fail("max_s", "max_s is smaller than time_s (the median)");
  reps = static_cast<int>(x.integer("repetitions", 1, 1, 1000000));
  iters = x.integer("iterations", 0, 0, INT64_MAX);
}

double positive_time(JsonObj& x) {
  const double t = x.number("time_s", 0, 1e9);
  if (!(t > 0)) x.fail("time_s", "time must be > 0");
  return t;
}

CalibrationSample read_sample(const Json& arr, std::size_t i, const std::string& file,
                              const std::string& ptr) {
  JsonObj x = element(arr, i, file, ptr);
  CalibrationSample s;
  s.bytes = x.integer("bytes", 0, INT64_MAX);
  s.time_s = positive_time(x);
  read_timing(x, s.min_s, s.max_s, s.repetitions, s.iterations, s.time_s);
  x.finish();
  return s;
}

std::vector<std::string> collective_names() {
  std::vector<std::string> out;
  for (const auto& c : kCollectives) out.emplace_back(c.name);
  return out;
}

void read_hardware(JsonObj& root, const std::string& file, CalibrationHardware& hw) {
  JsonObj h = root.object("hardware");
  const Json& gpus = array_at(h, "gpus");
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    JsonObj g = element(gpus, i, file, h.pointer("gpus"));
    hw.gpus.push_back({g.str("name"), static_cast<int>(g.integer("count", 0, 1 << 24))});
    g.finish();
  }
  hw.gpu_count = static_cast<int>(h.integer("gpu_count", 0, 0, 1 << 24));
  hw.nodes = static_cast<int>(h.integer("nodes", 0, 0, 1 << 24));
  hw.driver_version = h.str("driver_version", "");
  hw.cuda_version = h.str("cuda_version", "");
  hw.nccl_version = h.str("nccl_version", "");
  if (const Json* env = h.raw_optional("env")) {
    if (!env->is_object()) h.fail("env", "expected an object of strings, got " + json_brief(*env));
    for (auto it = env->begin(); it != env->end(); ++it)
      hw.env[it.key()] = json_string(it.value(), file, h.pointer("env") + "/" + it.key());
  }
  h.finish();
}

CollectiveSeries read_series(JsonObj& c, const std::string& file) {
  CollectiveSeries s;
  const std::string kind = c.str("kind");
  const auto k = parse_collective(kind);
  if (!k) {
    const std::string dym = did_you_mean_list(kind, collective_names());
    c.fail("kind", "unknown collective \"" + kind + "\"" +
                       (dym.empty() ? "" : " (did you mean \"" + dym + "\"?)") +
                       "; valid: " + join_names(collective_names()));
  }
  s.kind = *k;
  s.ranks = static_cast<int>(c.integer("ranks", 1, 1 << 24));
  s.nodes = static_cast<int>(c.integer("nodes", 1, 1 << 24));
  if (s.nodes > s.ranks)
    c.fail("nodes",
           "more nodes (" + std::to_string(s.nodes) + ") than ranks (" + std::to_string(s.ranks) + ")");
  s.dtype = c.str("dtype");
  s.placement = c.str("placement", "out_of_place");
  if (s.placement != "out_of_place" && s.placement != "in_place")
    c.fail("placement", "expected \"out_of_place\" or \"in_place\", got \"" + s.placement + "\"");
  s.source = c.str("source", "");
  c.allow({"fit"});  // derived data, recomputed from the samples on load
  const Json& samples = array_at(c, "samples");
  if (samples.empty()) c.fail("samples", "a series needs at least one sample");
  for (std::size_t i = 0; i < samples.size(); ++i)
    s.samples.push_back(read_sample(samples, i, file, c.pointer("samples")));
  c.finish();
  return s;
}

void read_collectives(JsonObj& root, const std::string& file, CalibrationProfile& p) {
  if (!root.has("collectives")) return;
  const Json& arr = array_at(root, "collectives");
  for (std::size_t i = 0; i < arr.size(); ++i) {
    JsonObj c = element(arr, i, file, "/collectives");
    const CollectiveSeries s = read_series(c, file);
    for (const auto& prev : p.collectives())
      if (same_series(prev, s))
        throw InputError(file, "/collectives/" + std::to_string(i),
                         "duplicate series (same kind, ranks, nodes, dtype, placement)");
    p.add_collective_samples(s);  // a new key: the series as read, refitted
  }
}

void read_gemm(JsonObj& root, const std::string& file, CalibrationProfile& p) {
  auto g = root.optional_object("gemm");
  if (!g) return;
  g->allow({"peak_flops", "peak_source"});
  if (g->has("peak_flops")) {
    const double peak = g->number("peak_flops", 1, 1e20);
    p.set_gemm_peak(peak, g->str("peak_source", ""));
  }
  const Json& arr = array_at(*g, "samples");
  for (std::size_t i = 0; i < arr.size(); ++i) {
    JsonObj x = element(arr, i, file, g->pointer("samples"));
    GemmSample s;
    s.m = x.integer("m", 1, INT64_MAX), s.n = x.integer("n", 1, INT64_MAX),
    s.k = x.integer("k", 1, INT64_MAX);
    s.dtype = x.str("dtype", "bf16");
    s.time_s = positive_time(x);
    s.flops_per_s = x.number("flops_per_s", 0, 1e20);
    read_timing(x, s.min_s, s.max_s, s.repetitions, s.iterations, s.time_s);
    x.finish();
    p.add_gemm_sample(s);
  }
  g->finish();
}

void read_hbm_and_adamw(JsonObj& root, const std::string& file, CalibrationProfile& p) {
  if (auto h = root.optional_object("hbm")) {
    const Json& arr = array_at(*h, "samples");
    for (std::size_t i = 0; i < arr.size(); ++i)
      p.add_hbm_sample(read_sample(arr, i, file, h->pointer("samples")));
    h->finish();
  }
  auto a = root.optional_object("adamw");
  if (!a) return;
  for (auto it = a->json().begin(); it != a->json().end(); ++it) {
    const std::string layout = it.key();
    if (layout != "fp32" && layout != "bf16-mixed" && layout != "bf16")
      a->fail(layout, "unknown AdamW layout \"" + layout + "\"; valid: fp32, bf16-mixed, bf16");
    JsonObj l = a->object(layout);
    const Json& arr = array_at(l, "samples");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      JsonObj x = element(arr, i, file, l.pointer("samples"));
      AdamwSample s;
      s.params = x.integer("params", 1, INT64_MAX);
      s.bytes = x.integer("bytes", 1, INT64_MAX);
      s.time_s = positive_time(x);
      read_timing(x, s.min_s, s.max_s, s.repetitions, s.iterations, s.time_s);
      x.finish();
      p.add_adamw_sample(layout, s);
    }
    l.finish();
  }
  a->finish();
}

void read_failures_and_completed(JsonObj& root, const std::string& file, CalibrationProfile& p) {
  if (root.has("failures")) {
    const Json& arr = array_at(root, "failures");
    for (std::size_t i = 0; i < arr.size(); ++i) {
      JsonObj x = element(arr, i, file, "/failures");
      CalibrationFailure f;
      f.benchmark = x.str("benchmark");
      f.error = x.str("error");
      f.time = x.str("time", "");
      x.allow({"bytes"});
      if (x.has("bytes")) f.bytes = x.integer("bytes", 0, INT64_MAX);
      x.finish();
      p.record_failure(f);
    }
  }
  if (root.has("completed")) {
    const Json& arr = array_at(root, "completed");
    for (std::size_t i = 0; i < arr.size(); ++i)
      p.mark_completed(json_string(arr[i], file, "/completed/" + std::to_string(i)));
  }
}

}  // namespace

CalibrationProfile CalibrationProfile::from_json(const Json& j, const std::string& file) {
  if (!j.is_object())
    throw InputError(file, "",
                     "expected a JSON object with \"schema\": \"" + std::string(kCalibrationSchema) + "\"");
  JsonObj root(j, file);
  const std::string schema = root.str("schema");
  if (schema != kCalibrationSchema)
    root.fail("schema", "unsupported schema \"" + schema + "\" (expected \"" + kCalibrationSchema + "\")");
  root.allow({"notes", "source", "description"});
  root.allow({"collectives", "failures", "completed"});  // read only when present; listed for suggestions
  CalibrationProfile p;
  p.source = root.str("source", "");
  p.notes = root.str("notes", "");
  {
    JsonObj t = root.object("tool");
    p.tool_name = t.str("name");
    p.tool_version = t.str("version");
    t.finish();
  }
  p.created = root.str("created");
  read_hardware(root, file, p.hardware_);
  read_collectives(root, file, p);
  read_gemm(root, file, p);
  read_hbm_and_adamw(root, file, p);
  read_failures_and_completed(root, file, p);
  root.finish();
  return p;
}

CalibrationProfile CalibrationProfile::load(const std::string& path) {
  return from_json(load_json_file(path), path);
}

}  // namespace shardplan
