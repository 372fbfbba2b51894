// The Python-subset reader behind `--from FILE.py` (torchtitan config modules): a tokenizer with logical
// lines and indentation, statements of function bodies, and expressions made of literals, names, calls,
// lists, tuples and dicts (+ - * / on number literals folded). Nothing is imported or executed. This file:
// the statements (imports, assignments, def, return) over the tokenizer (py_tokenize.cpp) and the expression
// parser (py_expr.cpp).
#include "planner/py_config.hpp"

#include "core/error.hpp"
#include "planner/py_config_internal.hpp"

namespace shardplan::py {

namespace {

using namespace detail;

void read_import(const Line& l, Module& m) {
  const auto& t = l.toks;
  auto dotted = [&](std::size_t& k) {
    std::string s;
    while (k < t.size() && (t[k].kind == Tok::Kind::kName || t[k].text == ".")) {
      if (t[k].kind == Tok::Kind::kName && t[k].text == "import") break;
      s += t[k++].text;
    }
    return s;
  };
  std::size_t k = 1;
  if (t[0].text == "import") {
    while (k < t.size()) {
      const std::string mod = dotted(k);
      std::string as = mod.substr(0, mod.find('.'));
      if (k + 1 < t.size() && t[k].text == "as") as = t[k + 1].text, k += 2;
      m.imports[as] = mod;
      if (k < t.size() && t[k].text == ",")
        ++k;
      else
        break;
    }
    return;
  }
  const std::string from = dotted(k);
  if (k >= t.size() || t[k].text != "import") return;
  ++k;
  while (k < t.size()) {
    if (t[k].text == "(" || t[k].text == ")" || t[k].text == ",") {
      ++k;
      continue;
    }
    if (t[k].kind != Tok::Kind::kName) break;
    const std::string name = t[k++].text;
    std::string as = name;
    if (k + 1 < t.size() && t[k].text == "as") as = t[k + 1].text, k += 2;
    m.imports[as] = from + "." + name;
  }
}

Stmt read_stmt(const Line& l, Module& m, const std::string& file) {
  const auto& t = l.toks;
  Stmt s;
  s.line = l.line;
  static const char* const kCompound[] = {"if",     "elif",    "else", "for",   "while", "with",  "try",
                                          "except", "finally", "def",  "class", "async", "match", "case"};
  static const char* const kSimple[] = {"pass",   "assert",   "raise", "del",
                                        "global", "nonlocal", "break", "continue"};
  if (t[0].kind == Tok::Kind::kName) {
    for (const char* k : kCompound)
      if (t[0].text == k) {
        s.keyword = k;
        return s;
      }
    for (const char* k : kSimple)
      if (t[0].text == k) {
        s.keyword = k;
        return s;
      }
    if (t[0].text == "import" || t[0].text == "from") {
      read_import(l, m);
      s.keyword = "import";
      return s;
    }
    if (t[0].text == "return") {
      s.kind = Stmt::Kind::kReturn;
      if (t.size() > 1)
        s.value = parse_expr(t, 1, t.size(), file);
      else
        s.value.kind = Value::Kind::kNone;
      return s;
    }
  }
  // An assignment: a dotted target, an optional annotation, '=' at bracket depth 0.
  int depth = 0;
  for (std::size_t k = 0; k < t.size(); ++k) {
    if (t[k].kind != Tok::Kind::kOp) continue;
    const std::string& o = t[k].text;
    if (o == "(" || o == "[" || o == "{") ++depth;
    if (o == ")" || o == "]" || o == "}") --depth;
    if (depth == 0 && (o == "+=" || o == "-=" || o == "*=" || o == "/=" || o == "//=" || o == "**=")) {
      s.keyword = "augmented assignment";
      return s;
    }
    if (depth != 0 || o != "=") continue;
    std::string target;
    bool ok = true;
    for (std::size_t j = 0; j < k; ++j) {
      if (t[j].kind == Tok::Kind::kOp && t[j].text == ":") break;  // x: T = v
      const bool want_name = j % 2 == 0;
      if (want_name ? t[j].kind != Tok::Kind::kName : !(t[j].kind == Tok::Kind::kOp && t[j].text == ".")) {
        ok = false;
        break;
      }
      target += t[j].text;
    }
    if (!ok || target.empty()) {
      s.keyword = "assignment to " + t[0].text + "...";
      return s;
    }
    s.kind = Stmt::Kind::kAssign;
    s.target = target;
    s.value = parse_expr(t, k + 1, t.size(), file);
    return s;
  }
  s.kind = Stmt::Kind::kExpr;
  s.value = parse_expr(t, 0, t.size(), file);
  return s;
}

}  // namespace

std::string Value::repr() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return b ? "True" : "False";
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kName:
    case Kind::kOther:
      return text;
    case Kind::kStr:
      return "\"" + text + "\"";
    case Kind::kCall:
      return text + "(...)";
    case Kind::kList: {
      std::string s = "[";
      for (std::size_t k = 0; k < items.size(); ++k) s += (k ? ", " : "") + items[k].repr();
      return s + "]";
    }
  }
  return text;
}

Module parse_module(const std::string& source, const std::string& file) {
  const std::vector<Line> lines = tokenize(source, file);
  Module m;
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const Line& l = lines[k];
    if (l.indent != 0) continue;  // inside a top-level block other than a def (class, if __name__ ...)
    const auto& t = l.toks;
    if (t[0].kind != Tok::Kind::kName) continue;
    if (t[0].text == "import" || t[0].text == "from") {
      read_import(l, m);
      continue;
    }
    if (t[0].text != "def") continue;
    if (t.size() < 2 || t[1].kind != Tok::Kind::kName)
      fail(file, l.line, "expected a function name after def");
    Function f;
    f.name = t[1].text;
    f.line = l.line;
    // The body: the following lines indented deeper; statements at the body's own indentation (deeper
    // lines belong to nested blocks, whose header statement is kept as kOther).
    int body_indent = -1;
    for (std::size_t j = k + 1; j < lines.size() && lines[j].indent > 0; ++j) {
      if (body_indent < 0) body_indent = lines[j].indent;
      if (lines[j].indent == body_indent) f.body.push_back(read_stmt(lines[j], m, file));
    }
    m.functions.push_back(std::move(f));
  }
  return m;
}

}  // namespace shardplan::py
