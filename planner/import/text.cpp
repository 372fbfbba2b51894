// Text helpers of the --from importers: a file's text and lines, and value text checked against its type.
#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"
#include "planner/import/common.hpp"

namespace shardplan::import {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path, "", "cannot open the file");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

std::string unquote(const std::string& v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
    return v.substr(1, v.size() - 2);
  return v;
}

std::string line_key(int n) {
  return "line " + std::to_string(n);
}

std::string int_text(const std::string& path, const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used != v.size()) throw std::invalid_argument(v);
    return std::to_string(x);
  } catch (const std::exception&) {
    throw InputError(path, key, "expected an integer, got \"" + v + "\"");
  }
}

std::string bool_text(const std::string& path, const std::string& key, const std::string& v) {
  const std::string l = lower(v);
  if (l == "true" || l == "false") return l;
  throw InputError(path, key, "expected true or false, got \"" + v + "\"");
}

std::string dtype_text(const std::string& path, const std::string& key, const std::string& v) {
  if (v == "float32") return "fp32";
  if (v == "bfloat16") return "bf16";
  throw InputError(path, key, "expected float32 or bfloat16, got \"" + v + "\"");
}

}  // namespace shardplan::import
