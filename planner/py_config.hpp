// A reader for the subset of Python that torchtitan's config modules are written in (imports, functions,
// assignments, calls with literal arguments), for `--from FILE.py`; nothing is executed.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace shardplan::py {

struct Kwarg;

/// A parsed expression: a literal, a (dotted) name, a call, a list/tuple/dict, or anything else (kept as
/// text, so that a field needing a literal can say what it found).
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kStr, kName, kCall, kList, kOther };
  Kind kind = Kind::kOther;
  std::string text;  ///< str: the string; name/call: the dotted name; other: the source text
  long long i = 0;
  double f = 0;
  bool b = false;
  std::vector<Value> items;   ///< list items, or a call's positional arguments
  std::vector<Kwarg> kwargs;  ///< a call's keyword arguments
  int line = 0;
  /// The value as source-like text, for messages ("8", "\"bfloat16\"", "bs", "f(...)").
  std::string repr() const;
};

/// One keyword argument of a call (`name=value`). A struct rather than std::pair: a pair of an incomplete
/// Value inside Value's own definition does not compile with clang's libstdc++ checks (the fuzz build).
struct Kwarg {
  std::string name;
  Value value;
};

/// One statement of a function body (or of the module), as far as configs need them.
struct Stmt {
  enum class Kind { kAssign, kReturn, kExpr, kOther };
  Kind kind = Kind::kOther;
  std::string target;  ///< kAssign: the dotted target ("config", "config.training.seq_len")
  Value value;
  std::string keyword;  ///< kOther: the statement's first word ("if", "for", ...)
  int line = 0;
};

struct Function {
  std::string name;
  std::vector<Stmt> body;
  int line = 0;
};

struct Module {
  std::map<std::string, std::string> imports;  ///< local name -> "module.name" it was imported as
  std::vector<Function> functions;             ///< top-level defs, in file order
};

/// Parses `source`; InputError(file, "line N", reason) on text outside the subset.
Module parse_module(const std::string& source, const std::string& file);

}  // namespace shardplan::py
