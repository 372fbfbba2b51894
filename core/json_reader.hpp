// Strict JSON reading: every document and object is read through JsonObj, which knows the file and the JSON
// pointer it came from, converts values with range checks, and rejects keys nobody asked for ("did you
// mean").
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace shardplan {

using Json = nlohmann::json;

/// Parses a whole file; InputError names the file and line:column on malformed JSON.
Json load_json_file(const std::string& path);
/// Parses text (from an embedded preset or stdin); `name` is used in error messages.
Json parse_json_text(const std::string& text, const std::string& name);

class JsonObj {
 public:
  JsonObj(const Json& j, std::string file, std::string pointer = "");

  bool has(const std::string& key) const;
  /// Marks a key as known without reading it (documentation keys such as "source", "notes").
  void allow(std::initializer_list<const char*> keys);

  std::string str(const std::string& key);
  std::string str(const std::string& key, const std::string& def);
  bool boolean(const std::string& key, bool def);
  bool boolean(const std::string& key);
  /// Integers: must be a JSON integer (or an integral double such as 1e9) within [lo, hi].
  std::int64_t integer(const std::string& key, std::int64_t lo = INT64_MIN, std::int64_t hi = INT64_MAX);
  std::int64_t integer(const std::string& key, std::int64_t def, std::int64_t lo, std::int64_t hi);
  /// Finite numbers within [lo, hi].
  double number(const std::string& key, double lo = -1e300, double hi = 1e300);
  double number(const std::string& key, double def, double lo, double hi);
  JsonObj object(const std::string& key);
  std::optional<JsonObj> optional_object(const std::string& key);
  /// Raw access (marks the key as known). Throws if missing.
  const Json& raw(const std::string& key);
  const Json* raw_optional(const std::string& key);

  /// Throws InputError listing the first unknown key and the valid ones.
  void finish() const;

  std::string pointer(const std::string& key) const { return pointer_ + "/" + key; }
  const std::string& pointer() const { return pointer_; }
  const std::string& file() const { return file_; }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  const Json& json() const { return j_; }

 private:
  const Json& j_;
  std::string file_, pointer_;
  std::set<std::string> known_;
};

/// Value conversions used by JsonObj, exposed for arrays: `where` is the JSON pointer for messages.
std::int64_t json_integer(const Json& v, const std::string& file, const std::string& where, std::int64_t lo,
                          std::int64_t hi);
double json_number(const Json& v, const std::string& file, const std::string& where, double lo, double hi);
std::string json_string(const Json& v, const std::string& file, const std::string& where);
/// Short rendering of a value for error messages.
std::string json_brief(const Json& v);

}  // namespace shardplan
