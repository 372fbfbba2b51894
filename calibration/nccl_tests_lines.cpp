// Reading one line of an nccl-tests log and checking a completed run (nccl_tests_lines.hpp).
#include "calibration/nccl_tests_lines.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace shardplan::calibration::nccl_tests_detail {

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

}  // namespace shardplan::calibration::nccl_tests_detail
