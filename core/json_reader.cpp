#include "core/json_reader.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

namespace shardplan {

static std::string line_col(const std::string& text, std::size_t byte) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n')
      ++line, col = 1;
    else
      ++col;
  }
  return "line " + std::to_string(line) + ":" + std::to_string(col);
}

Json parse_json_text(const std::string& text, const std::string& name) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    std::string msg = e.what();
    auto p = msg.find("syntax error");
    throw InputError(name, line_col(text, e.byte == 0 ? 0 : e.byte - 1),
                     "malformed JSON (" + (p == std::string::npos ? msg : msg.substr(p)) + ")");
  } catch (const Json::out_of_range& e) {
    // A number literal beyond double range (1e400): nlohmann names the literal but not where it is.
    std::string msg = e.what();
    std::string where;
    const auto q1 = msg.find('\''), q2 = msg.rfind('\'');
    if (q1 != std::string::npos && q2 > q1) {
      const auto at = text.find(msg.substr(q1 + 1, q2 - q1 - 1));
      if (at != std::string::npos) where = line_col(text, at);
    }
    const auto p = msg.find("number overflow");
    throw InputError(name, where,
                     "number out of range (" + (p == std::string::npos ? msg : msg.substr(p)) +
                         "; numbers must be finite doubles)");
  }
}

Json load_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json_text(ss.str(), path);
}

// Renders at most `budget` characters and a few levels deep, so a huge or deeply nested value (a million '[')
// costs nothing and cannot exhaust the stack the way a full dump() would.
static void brief_into(const Json& v, std::string& out, std::size_t budget, int depth) {
  if (out.size() > budget) return;
  if (!v.is_structured()) {
    out += v.dump();
    return;
  }
  const bool obj = v.is_object();
  out += obj ? '{' : '[';
  if (depth >= 3) {
    out += v.empty() ? "" : "...";
  } else {
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= budget; ++it) {
      if (!first) out += ',';
      first = false;
      if (obj) out += Json(it.key()).dump() + ':';
      brief_into(*it, out, budget, depth + 1);
    }
  }
  out += obj ? '}' : ']';
}

std::string json_brief(const Json& v) {
  std::string s;
  brief_into(v, s, 60, 0);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::int64_t json_integer(const Json& v, const std::string& file, const std::string& where, std::int64_t lo,
                          std::int64_t hi) {
  std::int64_t r = 0;
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      throw InputError(file, where, "value " + json_brief(v) + " is too large");
    r = v.get<std::int64_t>();
  } else if (v.is_number_float()) {
    double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18)
      throw InputError(file, where, "value " + json_brief(v) + " is not an integer");
    r = static_cast<std::int64_t>(d);
  } else {
    throw InputError(file, where, "expected an integer, got " + json_brief(v));
  }
  if (r < lo || r > hi)
    throw InputError(file, where,
                     "value " + std::to_string(r) + " is out of range [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "]");
  return r;
}

double json_number(const Json& v, const std::string& file, const std::string& where, double lo, double hi) {
  if (!v.is_number()) throw InputError(file, where, "expected a number, got " + json_brief(v));
  double d = v.get<double>();
  if (!std::isfinite(d)) throw InputError(file, where, "value is not finite");
  if (d < lo || d > hi) {
    std::ostringstream os;
    os << "value " << d << " is out of range [" << lo << ", " << hi << "]";
    throw InputError(file, where, os.str());
  }
  return d;
}

std::string json_string(const Json& v, const std::string& file, const std::string& where) {
  if (!v.is_string()) throw InputError(file, where, "expected a string, got " + json_brief(v));
  return v.get<std::string>();
}

JsonObj::JsonObj(const Json& j, std::string file, std::string pointer)
    : j_(j), file_(std::move(file)), pointer_(std::move(pointer)) {
  if (!j_.is_object())
    throw InputError(file_, pointer_.empty() ? "/" : pointer_,
                     "expected a JSON object, got " + json_brief(j_));
}

bool JsonObj::has(const std::string& key) const {
  return j_.contains(key) && !j_.at(key).is_null();
}
void JsonObj::allow(std::initializer_list<const char*> keys) {
  for (auto k : keys) known_.insert(k);
}

void JsonObj::fail(const std::string& key, const std::string& message) const {
  throw InputError(file_, pointer(key), message);
}

const Json& JsonObj::raw(const std::string& key) {
  known_.insert(key);
  if (!has(key)) {
    // A misspelt required key would otherwise only surface as "missing": point at the likely typo.
    std::string msg = "required field is missing";
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!known_.count(it.key()) && did_you_mean_list(it.key(), {key}) == key) {
        msg += " (found \"" + it.key() + "\": did you mean \"" + key + "\"?)";
        break;
      }
    fail(key, msg);
  }
  return j_.at(key);
}
const Json* JsonObj::raw_optional(const std::string& key) {
  known_.insert(key);
  return has(key) ? &j_.at(key) : nullptr;
}

std::string JsonObj::str(const std::string& key) {
  return json_string(raw(key), file_, pointer(key));
}
std::string JsonObj::str(const std::string& key, const std::string& def) {
  auto* v = raw_optional(key);
  return v ? json_string(*v, file_, pointer(key)) : def;
}
bool JsonObj::boolean(const std::string& key) {
  const Json& v = raw(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + json_brief(v));
  return v.get<bool>();
}
bool JsonObj::boolean(const std::string& key, bool def) {
  return has(key) ? boolean(key) : (known_.insert(key), def);
}
std::int64_t JsonObj::integer(const std::string& key, std::int64_t lo, std::int64_t hi) {
  return json_integer(raw(key), file_, pointer(key), lo, hi);
}
std::int64_t JsonObj::integer(const std::string& key, std::int64_t def, std::int64_t lo, std::int64_t hi) {
  auto* v = raw_optional(key);
  return v ? json_integer(*v, file_, pointer(key), lo, hi) : def;
}
double JsonObj::number(const std::string& key, double lo, double hi) {
  return json_number(raw(key), file_, pointer(key), lo, hi);
}
double JsonObj::number(const std::string& key, double def, double lo, double hi) {
  auto* v = raw_optional(key);
  return v ? json_number(*v, file_, pointer(key), lo, hi) : def;
}
JsonObj JsonObj::object(const std::string& key) {
  return JsonObj(raw(key), file_, pointer(key));
}
std::optional<JsonObj> JsonObj::optional_object(const std::string& key) {
  auto* v = raw_optional(key);
  if (!v) return std::nullopt;
  return JsonObj(*v, file_, pointer(key));
}

void JsonObj::finish() const {
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (known_.count(it.key())) continue;
    std::vector<std::string> valid(known_.begin(), known_.end());
    std::string msg = "unknown key \"" + it.key() + "\"";
    std::string sug = did_you_mean_list(it.key(), valid);
    if (!sug.empty()) msg += " (did you mean \"" + sug + "\"?)";
    msg += "; valid keys: " + join_names(valid);
    throw InputError(file_, pointer(it.key()), msg);
  }
}

}  // namespace shardplan
