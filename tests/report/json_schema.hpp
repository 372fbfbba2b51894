// A JSON-Schema (draft 2020-12) subset validator for the tests, since no validator package is available:
// type, required, properties, additionalProperties, enum, const, items, minItems, minProperties, minimum,
// maximum, exclusiveMinimum, anyOf, oneOf and $ref to local pointers ("#/$defs/..."). Unknown keywords fail
// loudly, so a schema cannot silently rely on something this validator ignores. In `strict` mode an object
// without additionalProperties is treated as closed: every key the data holds must be documented.
#pragma once
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace shardplan::test {

class SchemaValidator {
 public:
  explicit SchemaValidator(nlohmann::json root, bool strict = false)
      : root_(std::move(root)), strict_(strict) {}

  /// Error messages ("/pointer: what"), empty when the instance is valid.
  std::vector<std::string> validate(const nlohmann::json& instance) const {
    std::vector<std::string> errors;
    check(root_, instance, "", errors);
    return errors;
  }

 private:
  static std::string type_of(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
  }
  static bool has_type(const nlohmann::json& v, const std::string& t) {
    const std::string a = type_of(v);
    if (t == "number") return a == "number" || a == "integer";
    if (t == "integer" && a == "number") {  // 2020-12: a number with a zero fractional part is an integer
      const double d = v.get<double>();
      return d == static_cast<double>(static_cast<long long>(d));
    }
    return a == t;
  }

  const nlohmann::json& resolve(const std::string& ref, const std::string& at,
                                std::vector<std::string>& errors) const {
    static const nlohmann::json kEmpty = nlohmann::json::object();
    if (ref.rfind("#", 0) != 0) {
      errors.push_back(at + ": unsupported $ref " + ref);
      return kEmpty;
    }
    const nlohmann::json::json_pointer ptr(ref.substr(1));
    if (!root_.contains(ptr)) {
      errors.push_back(at + ": dangling $ref " + ref);
      return kEmpty;
    }
    return root_.at(ptr);
  }

  void check(const nlohmann::json& s, const nlohmann::json& v, const std::string& at,
             std::vector<std::string>& errors) const {
    if (s.is_boolean()) {
      if (!s.get<bool>()) errors.push_back(at + ": no value is allowed here");
      return;
    }
    static const std::set<std::string> kKnown = {"$schema",
                                                 "$id",
                                                 "$defs",
                                                 "$comment",
                                                 "title",
                                                 "description",
                                                 "default",
                                                 "examples",
                                                 "$ref",
                                                 "type",
                                                 "required",
                                                 "properties",
                                                 "additionalProperties",
                                                 "enum",
                                                 "const",
                                                 "items",
                                                 "minItems",
                                                 "minProperties",
                                                 "minimum",
                                                 "maximum",
                                                 "exclusiveMinimum",
                                                 "anyOf",
                                                 "oneOf"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kKnown.count(it.key()))
        errors.push_back(at + ": schema keyword not supported by the test validator: " + it.key());
    if (s.contains("$ref")) check(resolve(s["$ref"].get<std::string>(), at, errors), v, at, errors);
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_array()) {
        for (const auto& t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
      } else {
        ok = has_type(v, s["type"].get<std::string>());
      }
      if (!ok) {
        errors.push_back(at + ": expected type " + s["type"].dump() + ", got " + type_of(v));
        return;
      }
    }
    if (s.contains("const") && v != s["const"])
      errors.push_back(at + ": expected " + s["const"].dump() + ", got " + v.dump());
    if (s.contains("enum")) {
      bool found = false;
      for (const auto& e : s["enum"]) found = found || e == v;
      if (!found) errors.push_back(at + ": " + v.dump() + " is not one of " + s["enum"].dump());
    }
    if (v.is_number()) {
      const double d = v.get<double>();
      if (s.contains("minimum") && d < s["minimum"].get<double>())
        errors.push_back(at + ": " + v.dump() + " < minimum " + s["minimum"].dump());
      if (s.contains("maximum") && d > s["maximum"].get<double>())
        errors.push_back(at + ": " + v.dump() + " > maximum " + s["maximum"].dump());
      if (s.contains("exclusiveMinimum") && !(d > s["exclusiveMinimum"].get<double>()))
        errors.push_back(at + ": " + v.dump() + " <= exclusiveMinimum " + s["exclusiveMinimum"].dump());
    }
    if (v.is_object()) {
      if (s.contains("required"))
        for (const auto& k : s["required"])
          if (!v.contains(k.get<std::string>()))
            errors.push_back(at + ": missing required key \"" + k.get<std::string>() + "\"");
      if (s.contains("minProperties") && v.size() < s["minProperties"].get<std::size_t>())
        errors.push_back(at + ": fewer than " + s["minProperties"].dump() + " keys");
      const bool typed_object = s.contains("properties") || s.contains("additionalProperties") ||
                                (s.contains("type") && s["type"] == "object");
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string child = at + "/" + it.key();
        if (s.contains("properties") && s["properties"].contains(it.key())) {
          check(s["properties"][it.key()], it.value(), child, errors);
        } else if (s.contains("additionalProperties")) {
          check(s["additionalProperties"], it.value(), child, errors);
        } else if (strict_ && typed_object && !s.contains("$ref")) {
          errors.push_back(child + ": key not documented in the schema (strict mode)");
        }
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>())
        errors.push_back(at + ": fewer than " + s["minItems"].dump() + " items");
      if (s.contains("items"))
        for (std::size_t i = 0; i < v.size(); ++i)
          check(s["items"], v[i], at + "/" + std::to_string(i), errors);
    }
    if (s.contains("anyOf") || s.contains("oneOf")) {
      const bool one = s.contains("oneOf");
      const auto& alts = one ? s["oneOf"] : s["anyOf"];
      int matched = 0;
      std::vector<std::string> first;
      for (const auto& alt : alts) {
        std::vector<std::string> e;
        check(alt, v, at, e);
        if (e.empty())
          ++matched;
        else if (first.empty() || e.size() < first.size())
          first = e;
      }
      if (matched == 0) {
        errors.push_back(at + ": matches none of the " + std::string(one ? "oneOf" : "anyOf") +
                         " alternatives; closest:");
        errors.insert(errors.end(), first.begin(), first.end());
      } else if (one && matched > 1) {
        errors.push_back(at + ": matches " + std::to_string(matched) + " oneOf alternatives");
      }
    }
  }

  nlohmann::json root_;
  bool strict_;
};

}  // namespace shardplan::test
