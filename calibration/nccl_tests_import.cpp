// nccl-tests text/JSON parsing (see nccl_tests_import.hpp). The text parser is a line state machine: program
// name and NCCL_* assignments are remembered from any line, "# nThread" starts a run, "#  Rank" lines give
// ranks and hosts, the "size count type" header opens a table, numeric rows must be complete, and the "Avg
// bus bandwidth" footer closes it. A table without footer, or a short row, is a truncated log.
#include "calibration/nccl_tests_import.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "calibration/nccl_tests_lines.hpp"
#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace shardplan::calibration {

using namespace nccl_tests_detail;

std::optional<CollectiveKind> collective_from_program(const std::string& program) {
  std::string p =
      program.substr(program.find_last_of('/') == std::string::npos ? 0 : program.find_last_of('/') + 1);
  for (const char* suffix : {"_mpi", "_perf"})
    if (p.size() > std::strlen(suffix) && p.ends_with(suffix)) p.resize(p.size() - std::strlen(suffix));
  if (p == "alltoall") return CollectiveKind::kAllToAll;
  if (p == "sendrecv") return CollectiveKind::kSendRecv;
  return parse_collective(p);
}

std::string nccl_version_string(long code) {
  if (code <= 0) return "";
  if (code >= 20000)
    return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
           std::to_string(code % 100);
  return std::to_string(code / 1000) + "." + std::to_string(code / 100 % 10) + "." +
         std::to_string(code % 100);
}

namespace {

/// The text parser's state over one log, line by line (the file comment's state machine).
class TextParser {
 public:
  TextParser(const std::string& name, const NcclTestsOverrides& ov) : name_(name), ov_(ov) {}

  NcclTestsImport parse(const std::string& text) {
    std::istringstream in(text);
    std::string raw;
    while (std::getline(in, raw)) {
      ++line_no_;
      const std::string line = valid_utf8(clean_line(raw));
      if (line.empty()) continue;
      if (line[0] != '#')
        plain_line(line);
      else
        comment_line(line);
    }
    if (in_table_)
      throw InputError(
          name_, at_line(header_line_),
          "truncated log: the table starting here has no '# Avg bus bandwidth' footer (file ends at line " +
              std::to_string(line_no_) + ")");
    if (out_.runs.empty() && out_.warnings.empty())
      throw InputError(name_, "", "no nccl-tests results table found");
    return std::move(out_);
  }

 private:
  void close_run() {
    if (!run_) return;
    if (!skip_table_ && !run_->rows.empty()) {
      finish_run(*run_, ov_, out_.warnings, rank_lines_, max_rank_, threads_x_gpus_);
      run_->env = env_;
      run_->nccl_version = nccl_version_;
      out_.runs.push_back(std::move(*run_));
    }
    run_.reset();
    in_table_ = skip_table_ = false;
  }

  /// A line without '#': a result row of the open table, or a command line, prompt, NCCL INFO/WARN output or
  /// prose, of which the program name and NCCL_* assignments are remembered.
  void plain_line(const std::string& line) {
    static const std::regex program_re(R"(([A-Za-z0-9_]+_perf)(_mpi)?\b)");
    const auto tok = split_ws(line);
    if (in_table_ && all_digits(tok[0])) {
      if (tok.size() != cols_.count)
        throw InputError(name_, at_line(line_no_),
                         "truncated or malformed nccl-tests row: expected " + std::to_string(cols_.count) +
                             " columns, got " + std::to_string(tok.size()));
      if (!skip_table_) run_->rows.push_back(row(tok));
      return;
    }
    collect_env(line, env_);
    std::smatch m;
    if (search_line(line, m, program_re, "_perf")) program_ = m[1], program_line_ = line_no_;
  }

  NcclTestsRow row(const std::vector<std::string>& tok) const {
    NcclTestsRow r;
    r.line = line_no_;
    auto num = [&](std::size_t i) {
      auto v = to_double(tok[i]);
      if (!v || *v < 0)
        throw InputError(
            name_, at_line(line_no_),
            "column " + std::to_string(i + 1) + ": \"" + tok[i] + "\" is not a non-negative number");
      // The JSON reader's bound: 1e15 us is 1e9 s, the most a calibration profile accepts for a sample.
      if (*v > kMaxColumnValue)
        throw InputError(name_, at_line(line_no_),
                         "column " + std::to_string(i + 1) + ": \"" + tok[i] +
                             "\" is out of range (at most 1e15 us or GB/s)");
      return *v;
    };
    auto bytes = to_int(tok[cols_.size]);
    if (!bytes)
      throw InputError(name_, at_line(line_no_), "size \"" + tok[cols_.size] + "\" is not an integer");
    r.bytes = *bytes;
    r.dtype = tok[cols_.type];
    r.oop_time_us = num(cols_.oop_time), r.oop_algbw_GBps = num(cols_.oop_algbw);
    r.oop_busbw_GBps = num(cols_.oop_busbw);
    if (cols_.ip_time) {
      r.ip_time_us = num(*cols_.ip_time), r.ip_algbw_GBps = num(*cols_.ip_algbw);
      r.ip_busbw_GBps = num(*cols_.ip_busbw);
    }
    return r;
  }

  /// A '#' line: the test's name, the NCCL version, a run's header, its rank lines, a table's header or
  /// footer.
  void comment_line(const std::string& line) {
    static const std::regex starting_re(R"(^#\s*Collective test starting:\s*(\S+))");
    static const std::regex version_re(R"(^#\s*nccl-tests version \S+ nccl-headers=\d+ nccl-library=(\d+))");
    static const std::regex nthread_re(
        R"(^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+\d+\s+maxBytes\s+\d+.*?warmup iters:\s*\d+\s+iters:\s*(\d+))");
    static const std::regex rank_re(
        R"(^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$)");
    std::smatch m;
    if (search_line(line, m, starting_re, "Collective test starting")) {
      program_ = m[1], program_line_ = line_no_;
    } else if (search_line(line, m, version_re, "nccl-tests version")) {
      nccl_version_ = nccl_version_string(header_int(m[1], name_, line_no_, "nccl-library", 1 << 30));
    } else if (search_line(line, m, nthread_re, "nThread")) {
      run_header(m);
    } else if (run_ && !in_table_ && search_line(line, m, rank_re, "Rank")) {
      ++rank_lines_;
      max_rank_ = std::max(max_rank_, static_cast<int>(header_int(m[1], name_, line_no_, "Rank", 1 << 24)));
      if (hosts_.insert(m[2]).second) run_->hostnames.push_back(m[2]);
      run_->gpu_names.push_back(m[3]);
    } else if (const auto tok = split_ws(line.substr(1)); !tok.empty() && tok[0] == "size") {
      table_header(tok);
    } else if (line.find("Out of bounds values") != std::string::npos ||
               line.find("Avg bus bandwidth") != std::string::npos ||
               line.find("Collective test concluded") != std::string::npos) {
      if (in_table_) {
        if (run_->rows.empty() && !skip_table_)
          out_.warnings.push_back(name_ + ": " + at_line(header_line_) + ": table without rows");
        close_run();
        program_.clear();
      }
    }
    // Other '#' lines (units row, "# Using devices", comments) carry nothing we need.
  }

  /// "# nThread ... nGpus ... iters": a run starts.
  void run_header(const std::smatch& m) {
    if (in_table_)
      throw InputError(name_, at_line(header_line_),
                       "truncated log: table has no '# Avg bus bandwidth' footer "
                       "before the next run at line " +
                           std::to_string(line_no_));
    close_run();
    run_.emplace();
    run_->file = name_;
    run_->line = line_no_;
    run_->iterations = header_int(m[3], name_, line_no_, "iters", INT64_MAX);
    run_->gpus_per_thread = static_cast<int>(header_int(m[2], name_, line_no_, "nGpus", 1 << 12));
    threads_x_gpus_ =
        static_cast<int>(header_int(m[1], name_, line_no_, "nThread", 1 << 12) * run_->gpus_per_thread);
    rank_lines_ = 0, max_rank_ = -1;
    hosts_.clear();
  }

  /// "# size count type ...": a table opens; its collective from the program named before it or the file.
  void table_header(const std::vector<std::string>& tok) {
    auto c = parse_header(tok);
    if (!c) throw InputError(name_, at_line(line_no_), "unrecognised nccl-tests table header");
    if (in_table_)
      throw InputError(name_, at_line(header_line_),
                       "truncated log: table has no '# Avg bus bandwidth' footer");
    if (!run_) {  // a table pasted without its "# nThread" header
      run_.emplace();
      run_->file = name_;
      rank_lines_ = 0, max_rank_ = -1, threads_x_gpus_ = 0;
      hosts_.clear();
    }
    run_->line = line_no_;
    header_line_ = line_no_;
    cols_ = *c;
    in_table_ = true;
    std::optional<CollectiveKind> kind;
    if (!program_.empty()) kind = collective_from_program(program_);
    if (program_.empty()) {
      const std::string base =
          name_.substr(name_.find_last_of('/') == std::string::npos ? 0 : name_.find_last_of('/') + 1);
      for (const auto& k : kCollectives)
        if (!kind && base.find(k.name) != std::string::npos) kind = k.kind;
      if (!kind && base.find("alltoall") != std::string::npos) kind = CollectiveKind::kAllToAll;
      if (!kind)
        throw InputError(name_, at_line(line_no_),
                         "cannot tell which collective this table measures: no nccl-tests program name "
                         "(e.g. all_gather_perf) before it and none in the file name");
    }
    if (!kind) {
      skip_table_ = true;
      out_.warnings.push_back(name_ + ": " + at_line(line_no_) + ": skipped " + program_ + " table (line " +
                              std::to_string(program_line_) + "): not a collective shardplan models");
    } else {
      run_->kind = *kind;
    }
  }

  const std::string& name_;
  const NcclTestsOverrides& ov_;
  NcclTestsImport out_;
  std::map<std::string, std::string> env_;
  std::string program_;  // last nccl-tests program named before the current run
  int program_line_ = 0;
  std::string nccl_version_;
  std::optional<NcclTestsRun> run_;  // header seen, table maybe open
  bool in_table_ = false, skip_table_ = false;
  Columns cols_;
  int rank_lines_ = 0, max_rank_ = -1, threads_x_gpus_ = 0;
  std::set<std::string> hosts_;
  int line_no_ = 0, header_line_ = 0;
};

}  // namespace

NcclTestsImport parse_nccl_tests_text(const std::string& text, const std::string& name,
                                      const NcclTestsOverrides& ov) {
  return TextParser(name, ov).parse(text);
}

NcclTestsImport parse_nccl_tests_json(const std::string& text, const std::string& name,
                                      const NcclTestsOverrides& ov) {
  // Foreign format: read the keys we need and ignore the rest (nccl-tests adds keys between versions).
  const Json j = parse_json_text(text, name);
  auto need = [&](const Json& obj, const char* key, const std::string& ptr) -> const Json& {
    if (!obj.is_object() || !obj.contains(key)) throw InputError(name, ptr + "/" + key, "missing");
    return obj.at(key);
  };
  NcclTestsImport out;
  NcclTestsRun run;
  run.file = name;
  const Json& args = need(j, "args", "");
  if (!args.is_array() || args.empty() || !args[0].is_string())
    throw InputError(name, "/args", "expected the command line as a list of strings");
  const std::string program = args[0].get<std::string>();
  const auto kind = collective_from_program(program);
  if (!kind)
    throw InputError(name, "/args/0", "\"" + program + "\" is not an nccl-tests collective shardplan models");
  run.kind = *kind;
  if (j.contains("nccl_version"))
    run.nccl_version =
        nccl_version_string(json_integer(j["nccl_version"], name, "/nccl_version", 0, 1 << 30));
  if (j.contains("env") && j["env"].is_array())
    for (const auto& e : j["env"])
      if (e.is_string()) collect_env(e.get<std::string>(), run.env);
  const Json& config = need(j, "config", "");
  run.iterations =
      json_integer(need(config, "iterations", "/config"), name, "/config/iterations", 0, INT64_MAX);
  int max_rank = -1, rank_lines = 0;
  std::set<std::string> hosts;
  if (config.contains("devices")) {
    const Json& devs = config["devices"];
    if (!devs.is_array()) throw InputError(name, "/config/devices", "expected a list");
    for (std::size_t i = 0; i < devs.size(); ++i) {
      const std::string ptr = "/config/devices/" + std::to_string(i);
      max_rank = std::max<int>(max_rank, static_cast<int>(json_integer(need(devs[i], "rank", ptr), name,
                                                                       ptr + "/rank", 0, 1 << 24)));
      ++rank_lines;
      const std::string host = json_string(need(devs[i], "hostname", ptr), name, ptr + "/hostname");
      if (hosts.insert(host).second) run.hostnames.push_back(host);
      if (devs[i].contains("device_info") && devs[i]["device_info"].is_string())
        run.gpu_names.push_back(devs[i]["device_info"].get<std::string>());
    }
  }
  const Json& results = need(j, "results", "");
  if (!results.is_array()) throw InputError(name, "/results", "expected a list");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::string ptr = "/results/" + std::to_string(i);
    const Json& r = results[i];
    NcclTestsRow row;
    row.line = 0;
    row.bytes = json_integer(need(r, "size", ptr), name, ptr + "/size", 0, INT64_MAX);
    row.dtype = json_string(need(r, "type", ptr), name, ptr + "/type");
    auto body = [&](const char* key, double& t, double& a, double& b) {
      const Json& o = need(r, key, ptr);
      if (o.is_null()) return false;
      const std::string p = ptr + "/" + key;
      t = json_number(need(o, o.contains("time") ? "time" : "cpu_time", p), name, p + "/time", 0,
                      kMaxColumnValue);
      a = json_number(need(o, "alg_bw", p), name, p + "/alg_bw", 0, kMaxColumnValue);
      b = json_number(need(o, "bus_bw", p), name, p + "/bus_bw", 0, kMaxColumnValue);
      return true;
    };
    double t = 0, a = 0, b = 0;
    if (!body("out_of_place", row.oop_time_us, row.oop_algbw_GBps, row.oop_busbw_GBps)) continue;
    if (r.contains("in_place") && body("in_place", t, a, b))
      row.ip_time_us = t, row.ip_algbw_GBps = a, row.ip_busbw_GBps = b;
    run.rows.push_back(row);
  }
  if (run.rows.empty())
    throw InputError(name, "/results", "no results (the run stopped before its first size?)");
  int threads_x_gpus = 0;
  if (config.contains("nthreads") && config.contains("ngpus"))
    threads_x_gpus = static_cast<int>(json_integer(config["nthreads"], name, "/config/nthreads", 1, 1 << 20) *
                                      json_integer(config["ngpus"], name, "/config/ngpus", 1, 1 << 20));
  run.line = 0;
  finish_run(run, ov, out.warnings, rank_lines, max_rank, threads_x_gpus);
  out.runs.push_back(std::move(run));
  return out;
}

NcclTestsImport parse_nccl_tests_file(const std::string& path, const NcclTestsOverrides& ov) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return parse_nccl_tests_json(text, path, ov);
  return parse_nccl_tests_text(text, path, ov);
}

void add_nccl_tests_runs(CalibrationProfile& profile, const std::vector<NcclTestsRun>& runs) {
  const NcclTestsRun* largest = nullptr;
  for (const auto& run : runs) {
    if (!largest || run.ranks > largest->ranks) largest = &run;
    for (int placement = 0; placement < 2; ++placement) {
      CollectiveSeries s;
      s.kind = run.kind, s.ranks = run.ranks, s.nodes = run.nodes;
      s.placement = placement == 0 ? "out_of_place" : "in_place";
      s.source =
          valid_utf8("nccl-tests " + run.file + (run.line ? ":" + std::to_string(run.line) : std::string()));
      for (const auto& r : run.rows) {
        if (r.bytes <= 0) continue;
        const double t_us = placement == 0 ? r.oop_time_us : r.ip_time_us.value_or(0);
        if (t_us <= 0) continue;
        s.dtype = r.dtype;
        CalibrationSample x;
        x.bytes = r.bytes;
        x.time_s = t_us / 1e6;  // nccl-tests prints microseconds; exact division keeps 1e15 us at 1e9 s
        if (!(x.time_s > 0)) continue;  // a subnormal microsecond count underflows to 0 s: no measurement
        x.repetitions = 1;
        x.iterations = run.iterations;
        s.samples.push_back(x);
      }
      if (!s.samples.empty()) profile.add_collective_samples(s);
    }
    for (const auto& [k, v] : run.env) profile.hardware().env[k] = v;
    if (!run.nccl_version.empty()) profile.hardware().nccl_version = run.nccl_version;
  }
  if (largest) {
    auto& hw = profile.hardware();
    hw.gpu_count = largest->ranks;
    hw.nodes = largest->nodes;
    hw.gpus.clear();
    for (const auto& n : largest->gpu_names) {
      auto it = std::find_if(hw.gpus.begin(), hw.gpus.end(), [&](const auto& g) { return g.name == n; });
      if (it == hw.gpus.end())
        hw.gpus.push_back({n, 1});
      else
        ++it->count;
    }
  }
}

CalibrationProfile import_nccl_tests(const std::vector<std::string>& paths, const NcclTestsOverrides& ov,
                                     std::vector<std::string>* warnings) {
  if (paths.empty()) throw InputError::flag("LOG", "no nccl-tests log given");
  CalibrationProfile profile;
  profile.tool_name = "shardplan calibrate import-nccl-tests";
  std::vector<NcclTestsRun> runs;
  for (const auto& p : paths) {
    auto r = parse_nccl_tests_file(p, ov);
    runs.insert(runs.end(), r.runs.begin(), r.runs.end());
    if (warnings) warnings->insert(warnings->end(), r.warnings.begin(), r.warnings.end());
  }
  if (runs.empty())
    throw InputError(paths.front(), "", "no collective shardplan models was found in the logs");
  std::string src = "nccl-tests logs:";
  for (const auto& p : paths) src += " " + p;
  profile.source = valid_utf8(src);  // file names are bytes; the profile is JSON
  add_nccl_tests_runs(profile, runs);
  return profile;
}

}  // namespace shardplan::calibration
