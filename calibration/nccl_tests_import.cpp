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

#include "core/error.hpp"
#include "core/json_reader.hpp"

namespace shardplan::calibration {

namespace {

std::string at_line(int line) {
  return "line " + std::to_string(line);
}

std::vector<std::string> split_ws(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Largest time (us) or bandwidth (GB/s) a log may carry: 1e15 us = 1e9 s, the calibration profile's bound.
constexpr double kMaxColumnValue = 1e15;

std::optional<double> to_double(const std::string& s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<std::int64_t> to_int(const std::string& s) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

/// A number from a header line ("iters: 20"); digits only by the regex, but possibly too many of them.
std::int64_t header_int(const std::string& digits, const std::string& file, int line, const char* what,
                        std::int64_t hi) {
  const auto v = to_int(digits);
  if (!v || *v > hi)
    throw InputError(file, at_line(line),
                     std::string(what) + " " + digits + " is out of range [0, " + std::to_string(hi) + "]");
  return *v;
}

/// Column positions of one results table, from its header line.
struct Columns {
  std::size_t count = 0;  ///< tokens a row must have
  std::size_t size = 0, type = 0;
  std::size_t oop_time = 0, oop_algbw = 0, oop_busbw = 0;
  std::optional<std::size_t> ip_time, ip_algbw, ip_busbw;
};

std::optional<Columns> parse_header(const std::vector<std::string>& tok) {
  // tok excludes the leading '#'. Old logs: "size count type redop time algbw busbw error ..." (no root
  // column); current: "size count type redop root time algbw busbw #wrong time algbw busbw #wrong
  // [timestamp]".
  auto find = [&](const std::string& name, std::size_t from) -> std::optional<std::size_t> {
    for (std::size_t i = from; i < tok.size(); ++i)
      if (tok[i] == name) return i;
    return std::nullopt;
  };
  auto size = find("size", 0), count = find("count", 0), type = find("type", 0);
  if (!size || !count || !type || *size != 0) return std::nullopt;
  auto t1 = find("time", 0);
  if (!t1) t1 = find("cputime", 0);
  if (!t1) return std::nullopt;
  auto a1 = find("algbw", *t1), b1 = find("busbw", *t1);
  if (!a1 || !b1) return std::nullopt;
  Columns c;
  c.size = *size, c.type = *type, c.oop_time = *t1, c.oop_algbw = *a1, c.oop_busbw = *b1;
  const std::string& time_name = tok[*t1];
  if (auto t2 = find(time_name, *b1 + 1)) {
    auto a2 = find("algbw", *t2), b2 = find("busbw", *t2);
    if (a2 && b2) c.ip_time = *t2, c.ip_algbw = *a2, c.ip_busbw = *b2;
  }
  c.count = tok.size();
  if (find("timestamp", 0)) c.count += 1;  // "YYYY-MM-DD HH:MM:SS" is two tokens under one label
  return c;
}

// libstdc++'s std::regex matches recursively, one stack frame per character a repetition consumes, so a line
// of a few hundred kilobytes overflows the stack. nccl-tests header lines are under 300 characters: longer
// lines are never given to a regex (they can still be result rows, which are split on blanks).
constexpr std::size_t kMaxRegexLine = 4096;

/// regex_search on lines that are short enough and contain `needle` (a cheap filter: most lines match
/// nothing).
bool search_line(const std::string& line, std::smatch& m, const std::regex& re, const char* needle) {
  return line.size() <= kMaxRegexLine && line.find(needle) != std::string::npos &&
         std::regex_search(line, m, re);
}

/// Replaces each byte that is not part of well-formed UTF-8 with '?': host names, GPU names and NCCL_* values
/// end up in the profile's JSON, which must be valid UTF-8 (a Latin-1 host name made dump() throw).
std::string valid_utf8(std::string s) {
  auto cont = [&](std::size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return i < s.size() && static_cast<unsigned char>(s[i]) >= lo && static_cast<unsigned char>(s[i]) <= hi;
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    if (c < 0x80)
      n = 1;
    else if (c >= 0xC2 && c <= 0xDF && cont(i + 1))
      n = 2;
    else if (c >= 0xE0 && c <= 0xEF && cont(i + 1, c == 0xE0 ? 0xA0 : 0x80, c == 0xED ? 0x9F : 0xBF) &&
             cont(i + 2))
      n = 3;
    else if (c >= 0xF0 && c <= 0xF4 && cont(i + 1, c == 0xF0 ? 0x90 : 0x80, c == 0xF4 ? 0x8F : 0xBF) &&
             cont(i + 2) && cont(i + 3))
      n = 4;
    if (n == 0) s[i] = '?', n = 1;
    i += n;
  }
  return s;
}

/// Strips mpirun --tag-output prefixes ("[1,0]<stdout>:") and leading/trailing blanks.
std::string clean_line(std::string s) {
  static const std::regex tag(R"(^\s*\[\d+,\d+\]<std(out|err)>:)");
  if (!s.empty() && s.back() == '\r') s.pop_back();
  const auto open = s.find_first_not_of(" \t");
  if (open != std::string::npos && s[open] == '[') {
    const auto close = s.find(">:", open);
    if (close != std::string::npos && close - open < 64) {
      std::string head = s.substr(0, close + 2);
      if (std::regex_search(head, tag)) s.erase(0, close + 2);
    }
  }
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

void collect_env(const std::string& line, std::map<std::string, std::string>& env) {
  static const std::regex assign(R"((?:^|[\s'"])(NCCL_[A-Z0-9_]+)=([^\s'"]+))");
  if (line.size() > kMaxRegexLine || line.find("NCCL_") == std::string::npos) return;
  for (std::sregex_iterator it(line.begin(), line.end(), assign), end; it != end; ++it)
    env[(*it)[1]] = (*it)[2];
}

void finish_run(NcclTestsRun& run, const NcclTestsOverrides& ov, std::vector<std::string>& warnings,
                int rank_lines, int max_rank, int threads_x_gpus) {
  const std::string where = at_line(run.line);
  if (ov.ranks) {
    run.ranks = *ov.ranks;
  } else if (rank_lines > 0) {
    run.ranks = max_rank + 1;
  } else {
    run.ranks = threads_x_gpus;
    warnings.push_back(run.file + ": " + where + ": no '# Rank' lines; assuming " +
                       std::to_string(run.ranks) +
                       " rank(s) from nThread x nGpus (use --ranks for MPI runs)");
  }
  if (run.ranks < 1) throw InputError(run.file, where, "cannot determine the number of ranks (use --ranks)");
  if (ov.nodes) {
    run.nodes = *ov.nodes;
  } else if (ov.gpus_per_node) {
    if (run.ranks % *ov.gpus_per_node != 0)
      throw InputError(run.file, where,
                       std::to_string(run.ranks) + " ranks are not a multiple of --gpus-per-node " +
                           std::to_string(*ov.gpus_per_node));
    run.nodes = run.ranks / *ov.gpus_per_node;
  } else if (!run.hostnames.empty()) {
    run.nodes = static_cast<int>(run.hostnames.size());
  } else {
    run.nodes = 1;
    warnings.push_back(run.file + ": " + where + ": no host names; assuming one node (use --nodes)");
  }
  if (run.nodes < 1 || run.nodes > run.ranks)
    throw InputError(
        run.file, where,
        std::to_string(run.nodes) + " nodes for " + std::to_string(run.ranks) + " ranks is impossible");
  // The busbw column is algbw x busbw_factor(kind, ranks): it tells whether kind and rank count are right.
  const double factor = busbw_factor(run.kind, run.ranks);
  auto check = [&](const NcclTestsRow& r, double alg, double bus) {
    if (alg < 1.0) return;  // too few printed digits to compare
    if (std::fabs(bus - alg * factor) > 0.02 + 0.006 * std::max(bus, alg * factor))
      throw InputError(run.file, at_line(r.line),
                       "busbw/algbw = " + std::to_string(bus / alg) + " but " +
                           std::string(collective_name(run.kind)) + " on " + std::to_string(run.ranks) +
                           " ranks has busbw factor " + std::to_string(factor) +
                           " (wrong --ranks, or the log mixes runs?)");
  };
  for (const auto& r : run.rows) {
    check(r, r.oop_algbw_GBps, r.oop_busbw_GBps);
    if (r.ip_algbw_GBps) check(r, *r.ip_algbw_GBps, *r.ip_busbw_GBps);
  }
}

}  // namespace

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

NcclTestsImport parse_nccl_tests_text(const std::string& text, const std::string& name,
                                      const NcclTestsOverrides& ov) {
  static const std::regex program_re(R"(([A-Za-z0-9_]+_perf)(_mpi)?\b)");
  static const std::regex starting_re(R"(^#\s*Collective test starting:\s*(\S+))");
  static const std::regex version_re(R"(^#\s*nccl-tests version \S+ nccl-headers=\d+ nccl-library=(\d+))");
  static const std::regex nthread_re(
      R"(^#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+\d+\s+maxBytes\s+\d+.*?warmup iters:\s*\d+\s+iters:\s*(\d+))");
  static const std::regex rank_re(
      R"(^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$)");

  NcclTestsImport out;
  std::map<std::string, std::string> env;
  std::string program;  // last nccl-tests program named before the current run
  int program_line = 0;
  std::string nccl_version;
  std::optional<NcclTestsRun> run;  // header seen, table maybe open
  bool in_table = false, skip_table = false;
  Columns cols;
  int rank_lines = 0, max_rank = -1, threads_x_gpus = 0;
  std::set<std::string> hosts;

  auto close_run = [&] {
    if (!run) return;
    if (!skip_table && !run->rows.empty()) {
      finish_run(*run, ov, out.warnings, rank_lines, max_rank, threads_x_gpus);
      run->env = env;
      run->nccl_version = nccl_version;
      out.runs.push_back(std::move(*run));
    }
    run.reset();
    in_table = skip_table = false;
  };

  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  int header_line = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string line = valid_utf8(clean_line(raw));
    if (line.empty()) continue;
    std::smatch m;
    if (line[0] != '#') {
      const auto tok = split_ws(line);
      if (in_table && all_digits(tok[0])) {
        if (tok.size() != cols.count)
          throw InputError(name, at_line(line_no),
                           "truncated or malformed nccl-tests row: expected " + std::to_string(cols.count) +
                               " columns, got " + std::to_string(tok.size()));
        if (skip_table) continue;
        NcclTestsRow r;
        r.line = line_no;
        auto num = [&](std::size_t i) {
          auto v = to_double(tok[i]);
          if (!v || *v < 0)
            throw InputError(
                name, at_line(line_no),
                "column " + std::to_string(i + 1) + ": \"" + tok[i] + "\" is not a non-negative number");
          // The JSON reader's bound: 1e15 us is 1e9 s, the most a calibration profile accepts for a sample.
          if (*v > kMaxColumnValue)
            throw InputError(name, at_line(line_no),
                             "column " + std::to_string(i + 1) + ": \"" + tok[i] +
                                 "\" is out of range (at most 1e15 us or GB/s)");
          return *v;
        };
        auto bytes = to_int(tok[cols.size]);
        if (!bytes)
          throw InputError(name, at_line(line_no), "size \"" + tok[cols.size] + "\" is not an integer");
        r.bytes = *bytes;
        r.dtype = tok[cols.type];
        r.oop_time_us = num(cols.oop_time), r.oop_algbw_GBps = num(cols.oop_algbw);
        r.oop_busbw_GBps = num(cols.oop_busbw);
        if (cols.ip_time) {
          r.ip_time_us = num(*cols.ip_time), r.ip_algbw_GBps = num(*cols.ip_algbw);
          r.ip_busbw_GBps = num(*cols.ip_busbw);
        }
        run->rows.push_back(r);
        continue;
      }
      // Not a row: a command line, prompt, NCCL INFO/WARN output or prose. Remember program names and NCCL_*
      // vars.
      collect_env(line, env);
      if (search_line(line, m, program_re, "_perf")) program = m[1], program_line = line_no;
      continue;
    }
    if (search_line(line, m, starting_re, "Collective test starting")) {
      program = m[1], program_line = line_no;
      continue;
    }
    if (search_line(line, m, version_re, "nccl-tests version")) {
      nccl_version = nccl_version_string(header_int(m[1], name, line_no, "nccl-library", 1 << 30));
      continue;
    }
    if (search_line(line, m, nthread_re, "nThread")) {
      if (in_table)
        throw InputError(name, at_line(header_line),
                         "truncated log: table has no '# Avg bus bandwidth' footer "
                         "before the next run at line " +
                             std::to_string(line_no));
      close_run();
      run.emplace();
      run->file = name;
      run->line = line_no;
      run->iterations = header_int(m[3], name, line_no, "iters", INT64_MAX);
      run->gpus_per_thread = static_cast<int>(header_int(m[2], name, line_no, "nGpus", 1 << 12));
      threads_x_gpus =
          static_cast<int>(header_int(m[1], name, line_no, "nThread", 1 << 12) * run->gpus_per_thread);
      rank_lines = 0, max_rank = -1;
      hosts.clear();
      continue;
    }
    if (run && !in_table && search_line(line, m, rank_re, "Rank")) {
      ++rank_lines;
      max_rank = std::max(max_rank, static_cast<int>(header_int(m[1], name, line_no, "Rank", 1 << 24)));
      if (hosts.insert(m[2]).second) run->hostnames.push_back(m[2]);
      run->gpu_names.push_back(m[3]);
      continue;
    }
    const auto tok = split_ws(line.substr(1));
    if (!tok.empty() && tok[0] == "size") {
      auto c = parse_header(tok);
      if (!c) throw InputError(name, at_line(line_no), "unrecognised nccl-tests table header");
      if (in_table)
        throw InputError(name, at_line(header_line),
                         "truncated log: table has no '# Avg bus bandwidth' footer");
      if (!run) {  // a table pasted without its "# nThread" header
        run.emplace();
        run->file = name;
        rank_lines = 0, max_rank = -1, threads_x_gpus = 0;
        hosts.clear();
      }
      run->line = line_no;
      header_line = line_no;
      cols = *c;
      in_table = true;
      std::optional<CollectiveKind> kind;
      if (!program.empty()) kind = collective_from_program(program);
      if (program.empty()) {
        const std::string base =
            name.substr(name.find_last_of('/') == std::string::npos ? 0 : name.find_last_of('/') + 1);
        for (const auto& c : kCollectives)
          if (!kind && base.find(c.name) != std::string::npos) kind = c.kind;
        if (!kind && base.find("alltoall") != std::string::npos) kind = CollectiveKind::kAllToAll;
        if (!kind)
          throw InputError(name, at_line(line_no),
                           "cannot tell which collective this table measures: no nccl-tests program name "
                           "(e.g. all_gather_perf) before it and none in the file name");
      }
      if (!kind) {
        skip_table = true;
        out.warnings.push_back(name + ": " + at_line(line_no) + ": skipped " + program + " table (line " +
                               std::to_string(program_line) + "): not a collective shardplan models");
      } else {
        run->kind = *kind;
      }
      continue;
    }
    if (line.find("Out of bounds values") != std::string::npos ||
        line.find("Avg bus bandwidth") != std::string::npos ||
        line.find("Collective test concluded") != std::string::npos) {
      if (in_table) {
        if (run->rows.empty() && !skip_table)
          out.warnings.push_back(name + ": " + at_line(header_line) + ": table without rows");
        close_run();
        program.clear();
      }
      continue;
    }
    // Other '#' lines (units row, "# Using devices", comments) carry nothing we need.
  }
  if (in_table)
    throw InputError(
        name, at_line(header_line),
        "truncated log: the table starting here has no '# Avg bus bandwidth' footer (file ends at line " +
            std::to_string(line_no) + ")");
  if (out.runs.empty() && out.warnings.empty())
    throw InputError(name, "", "no nccl-tests results table found");
  return out;
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
