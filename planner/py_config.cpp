// The Python-subset reader behind `--from FILE.py` (torchtitan config modules): a tokenizer with logical
// lines and indentation, statements of function bodies, and expressions made of literals, names, calls,
// lists, tuples and dicts (+ - * / on number literals folded). Nothing is imported or executed.
#include "planner/py_config.hpp"

#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace shardplan::py {

namespace {

struct Tok {
  enum class Kind { kName, kNumber, kString, kOp, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  ///< string tokens: the decoded string
  int line = 0;
};

struct Line {
  int indent = 0;
  int line = 0;
  std::vector<Tok> toks;
};

[[noreturn]] void fail(const std::string& file, int line, const std::string& why) {
  throw InputError(file, "line " + std::to_string(line), why);
}

/// Splits the source into logical lines (brackets and backslashes join physical lines; comments and blank
/// lines dropped), each with the indentation of its first physical line.
std::vector<Line> tokenize(const std::string& src, const std::string& file) {
  std::vector<Line> lines;
  Line cur;
  int depth = 0, line = 1;
  bool at_line_start = true;
  std::size_t i = 0;
  const std::size_t n = src.size();
  auto flush = [&] {
    if (!cur.toks.empty()) lines.push_back(std::move(cur));
    cur = Line{};
  };
  while (i < n) {
    if (at_line_start && depth == 0) {
      int col = 0;
      while (i < n && (src[i] == ' ' || src[i] == '\t')) {
        col += src[i] == '\t' ? 8 - col % 8 : 1;
        ++i;
      }
      if (i < n && (src[i] == '\n' || src[i] == '\r' || src[i] == '#')) {
        while (i < n && src[i] != '\n') ++i;  // blank or comment-only line
        if (i < n) ++i, ++line;
        continue;
      }
      cur.indent = col;
      cur.line = line;
      at_line_start = false;
      continue;
    }
    const char c = src[i];
    if (c == '\n') {
      ++line;
      ++i;
      if (depth == 0) {
        flush();
        at_line_start = true;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f') {
      ++i;
      continue;
    }
    if (c == '\\' && i + 1 < n && (src[i + 1] == '\n' || src[i + 1] == '\r')) {
      i += src[i + 1] == '\r' && i + 2 < n && src[i + 2] == '\n' ? 3 : 2;
      ++line;
      continue;
    }
    if (c == '#') {
      while (i < n && src[i] != '\n') ++i;
      continue;
    }
    // String literals, with an optional r/b/u/f prefix (f-strings are kept as their text).
    std::size_t j = i;
    bool raw = false;
    while (j < n && j - i < 2 && src[j] != '\0' && std::strchr("rRbBuUfF", src[j])) {
      if (src[j] == 'r' || src[j] == 'R') raw = true;
      ++j;
    }
    if (j < n && (src[j] == '"' || src[j] == '\'')) {
      const char q = src[j];
      const bool triple = j + 2 < n && src[j + 1] == q && src[j + 2] == q;
      const std::size_t open = j + (triple ? 3 : 1);
      const int start_line = line;
      std::string text;
      std::size_t k = open;
      for (;;) {
        if (k >= n) fail(file, start_line, "unterminated string");
        if (src[k] == '\n') {
          if (!triple) fail(file, start_line, "unterminated string");
          ++line;
        }
        if (src[k] == '\\' && k + 1 < n) {
          const char e = src[k + 1];
          if (raw) {
            text += src[k];
            text += e;
          } else if (e == 'n') {
            text += '\n';
          } else if (e == 't') {
            text += '\t';
          } else if (e == '\n') {
            ++line;
          } else {
            text += e;
          }
          if (e == '\n' && raw) ++line;
          k += 2;
          continue;
        }
        if (src[k] == q && (!triple || (k + 2 < n && src[k + 1] == q && src[k + 2] == q))) {
          k += triple ? 3 : 1;
          break;
        }
        text += src[k++];
      }
      cur.toks.push_back({Tok::Kind::kString, text, start_line});
      i = k;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t k = i;
      while (k < n && (std::isalnum(static_cast<unsigned char>(src[k])) || src[k] == '_')) ++k;
      cur.toks.push_back({Tok::Kind::kName, src.substr(i, k - i), line});
      i = k;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i + 1 < n && std::isdigit(static_cast<unsigned char>(src[i + 1])))) {
      std::size_t k = i;
      while (k < n && (std::isalnum(static_cast<unsigned char>(src[k])) || src[k] == '_' || src[k] == '.' ||
                       ((src[k] == '+' || src[k] == '-') && (src[k - 1] == 'e' || src[k - 1] == 'E') &&
                        !(src[i] == '0' && i + 1 < n && (src[i + 1] == 'x' || src[i + 1] == 'X')))))
        ++k;
      cur.toks.push_back({Tok::Kind::kNumber, src.substr(i, k - i), line});
      i = k;
      continue;
    }
    static const char* const kOps[] = {
        "**=", "//=", "->", "**", "//", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", ":=", "<<", ">>"};
    std::string op(1, c);
    for (const char* o : kOps)
      if (src.compare(i, std::strlen(o), o) == 0) {
        op = o;
        break;
      }
    if (op == "(" || op == "[" || op == "{") ++depth;
    if (op == ")" || op == "]" || op == "}") {
      if (depth == 0) fail(file, line, "unbalanced '" + op + "'");
      --depth;
    }
    cur.toks.push_back({Tok::Kind::kOp, op, line});
    i += op.size();
  }
  if (depth != 0) fail(file, line, "unclosed bracket at the end of the file");
  flush();
  return lines;
}

class ExprParser {
 public:
  ExprParser(const std::vector<Tok>& t, std::size_t pos, std::size_t end, const std::string& file)
      : t_(t), pos_(pos), end_(end), file_(file) {}
  std::size_t pos() const { return pos_; }

  /// An expression; one with boolean, comparison or conditional operators (a and b, x if c else y) is
  /// skipped to the end of its item and kept as text (kOther).
  Value expr() {
    // Nesting bounded: a file of 100k '(' is an input error, not a stack overflow.
    if (++depth_ > kMaxDepth) fail(file_, line(), "expressions nested more than 100 deep");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    Value v = arith();
    if (done() || at_op(",") || at_op(")") || at_op("]") || at_op("}") || at_op(":")) return v;
    const Tok& t = t_[pos_];
    static const char* const kWords[] = {"and", "or", "not", "in", "is", "if", "else"};
    static const char* const kOps[] = {"==", "!=", "<", ">", "<=", ">=", "|", "&", "^", "@", "<<", ">>"};
    bool tail = false;
    for (const char* w : kWords) tail = tail || (t.kind == Tok::Kind::kName && t.text == w);
    for (const char* o : kOps) tail = tail || (t.kind == Tok::Kind::kOp && t.text == o);
    if (!tail) return v;
    std::string text = v.repr();
    int depth = 0;
    while (!done() && !(depth == 0 && (at_op(",") || at_op(")") || at_op("]") || at_op("}")))) {
      if (at_op("(") || at_op("[") || at_op("{")) ++depth;
      if (at_op(")") || at_op("]") || at_op("}")) --depth;
      text += " " + t_[pos_++].text;
    }
    Value o;
    o.kind = Value::Kind::kOther;
    o.text = text;
    o.line = v.line;
    return o;
  }

 private:
  Value arith() {
    Value v = term();
    while (at_op("+") || at_op("-")) {
      const std::string op = t_[pos_++].text;
      v = fold(v, op, term());
    }
    return v;
  }

 public:
 private:
  static constexpr int kMaxDepth = 100;
  const std::vector<Tok>& t_;
  std::size_t pos_, end_;
  const std::string& file_;
  int depth_ = 0;

  bool done() const { return pos_ >= end_; }
  bool at_op(const char* op) const {
    return !done() && t_[pos_].kind == Tok::Kind::kOp && t_[pos_].text == op;
  }
  int line() const { return done() ? (end_ ? t_[end_ - 1].line : 0) : t_[pos_].line; }
  void expect(const char* op) {
    if (!at_op(op))
      fail(file_, line(),
           std::string("expected '") + op + "'" + (done() ? "" : ", got '" + t_[pos_].text + "'"));
    ++pos_;
  }

  static bool numeric(const Value& v) { return v.kind == Value::Kind::kInt || v.kind == Value::Kind::kFloat; }
  static double as_double(const Value& v) {
    return v.kind == Value::Kind::kInt ? static_cast<double>(v.i) : v.f;
  }

  /// Number literals folded (8 * 1024, 2**13, 3e-4 / 2); anything else is kept as text.
  static Value fold(const Value& a, const std::string& op, const Value& b) {
    Value r;
    r.line = a.line;
    if (numeric(a) && numeric(b)) {
      const bool ints = a.kind == Value::Kind::kInt && b.kind == Value::Kind::kInt;
      if (ints && op != "/" && !(op == "**" && b.i < 0) && !((op == "//" || op == "%") && b.i == 0)) {
        // Folded with overflow checks: an integer that does not fit 64 bits stays text (kOther).
        long long x = 0;
        bool overflow = false;
        if (op == "+") {
          overflow = __builtin_add_overflow(a.i, b.i, &x);
        } else if (op == "-") {
          overflow = __builtin_sub_overflow(a.i, b.i, &x);
        } else if (op == "*") {
          overflow = __builtin_mul_overflow(a.i, b.i, &x);
        } else if (op == "**") {
          x = 1;
          for (long long k = 0; k < b.i && !overflow; ++k) overflow = __builtin_mul_overflow(x, a.i, &x);
        } else if (a.i == LLONG_MIN && b.i == -1) {
          overflow = true;
        } else {
          // Python's floor division and modulo (the result takes the divisor's sign).
          const bool adjust = a.i % b.i != 0 && ((a.i < 0) != (b.i < 0));
          x = op == "//" ? a.i / b.i - (adjust ? 1 : 0) : a.i % b.i + (adjust ? b.i : 0);
        }
        if (!overflow) {
          r.kind = Value::Kind::kInt;
          r.i = x;
          r.text = std::to_string(r.i);
          return r;
        }
      } else if (!ints && op != "%" && op != "//" && !(op == "/" && as_double(b) == 0)) {
        r.kind = Value::Kind::kFloat;
        const double x = as_double(a), y = as_double(b);
        r.f = op == "+" ? x + y : op == "-" ? x - y : op == "*" ? x * y : op == "/" ? x / y : std::pow(x, y);
        r.text = std::to_string(r.f);
        return r;
      }
    }
    r.kind = Value::Kind::kOther;
    r.text = a.repr() + " " + op + " " + b.repr();
    return r;
  }

  Value term() {
    Value v = unary();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = t_[pos_++].text;
      v = fold(v, op, unary());
    }
    return v;
  }

  Value unary() {
    if (at_op("-") || at_op("+")) {
      const std::string op = t_[pos_++].text;
      if (++depth_ > kMaxDepth) fail(file_, line(), "expressions nested more than 100 deep");
      Value v = unary();
      --depth_;
      if (op == "-" && v.kind == Value::Kind::kInt && v.i != LLONG_MIN)
        v.i = -v.i, v.text = std::to_string(v.i);
      else if (op == "-" && v.kind == Value::Kind::kFloat)
        v.f = -v.f, v.text = std::to_string(v.f);
      else if (op == "-")
        v.text = "-" + v.repr(), v.kind = Value::Kind::kOther;
      return v;
    }
    Value v = postfix();
    if (at_op("**")) {
      ++pos_;
      if (++depth_ > kMaxDepth) fail(file_, line(), "expressions nested more than 100 deep");
      v = fold(v, "**", unary());
      --depth_;
    }
    return v;
  }

  Value postfix() {
    Value v = atom();
    for (;;) {
      if (at_op(".")) {
        ++pos_;
        if (done() || t_[pos_].kind != Tok::Kind::kName) fail(file_, line(), "expected a name after '.'");
        if (v.kind == Value::Kind::kName) {
          v.text += "." + t_[pos_].text;
        } else {
          v.text = v.repr() + "." + t_[pos_].text;
          v.kind = Value::Kind::kOther;
        }
        ++pos_;
      } else if (at_op("(")) {
        ++pos_;
        Value c;
        c.line = v.line;
        c.kind = v.kind == Value::Kind::kName ? Value::Kind::kCall : Value::Kind::kOther;
        c.text = v.kind == Value::Kind::kName ? v.text : v.repr() + "(...)";
        while (!at_op(")")) {
          if (done()) fail(file_, line(), "unclosed call");
          if (at_op("*") || at_op("**")) {
            ++pos_;
            expr();
            c.kind = Value::Kind::kOther;  // *args / **kwargs: not a call the subset can read
          } else if (!done() && t_[pos_].kind == Tok::Kind::kName && pos_ + 1 < end_ &&
                     t_[pos_ + 1].kind == Tok::Kind::kOp && t_[pos_ + 1].text == "=") {
            const std::string key = t_[pos_].text;
            pos_ += 2;
            c.kwargs.push_back({key, expr()});
          } else {
            c.items.push_back(expr());
          }
          if (!at_op(",")) break;
          ++pos_;
        }
        expect(")");
        v = std::move(c);
      } else if (at_op("[")) {
        ++pos_;
        int depth = 1;
        while (!done() && depth > 0) {
          if (at_op("[")) ++depth;
          if (at_op("]")) --depth;
          ++pos_;
        }
        v.text = v.repr() + "[...]";
        v.kind = Value::Kind::kOther;
      } else {
        return v;
      }
    }
  }

  /// A bracketed sequence of items: list [..], tuple (..), set/dict {..} (dict values kept as items).
  Value sequence(const char* close) {
    Value v;
    v.kind = Value::Kind::kList;
    v.line = line();
    while (!at_op(close)) {
      if (done()) fail(file_, v.line, std::string("expected '") + close + "'");
      if (at_op("*") || at_op("**")) ++pos_;
      Value item = expr();
      if (at_op(":")) {  // dict entry: key: value
        ++pos_;
        item = expr();
      }
      if (!done() && t_[pos_].kind == Tok::Kind::kName && t_[pos_].text == "for") {
        // A comprehension: skipped to the closing bracket.
        int depth = 0;
        while (!done() && !(depth == 0 && at_op(close))) {
          if (at_op("(") || at_op("[") || at_op("{")) ++depth;
          if (at_op(")") || at_op("]") || at_op("}")) --depth;
          ++pos_;
        }
        v.kind = Value::Kind::kOther;
        v.text = "a comprehension";
        break;
      }
      v.items.push_back(std::move(item));
      if (!at_op(",")) break;
      ++pos_;
    }
    expect(close);
    return v;
  }

  Value atom() {
    if (done()) fail(file_, line(), "expected an expression");
    const Tok& tok = t_[pos_];
    Value v;
    v.line = tok.line;
    switch (tok.kind) {
      case Tok::Kind::kNumber: {
        ++pos_;
        std::string s;
        for (char ch : tok.text)
          if (ch != '_') s += ch;
        try {
          const bool is_float = s.find_first_of(".eE") != std::string::npos &&
                                !(s.size() > 1 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'));
          std::size_t used = 0;
          if (is_float) {
            v.f = std::stod(s, &used);
            v.kind = Value::Kind::kFloat;
          } else {
            v.i = std::stoll(s, &used, 0);
            v.kind = Value::Kind::kInt;
          }
          if (used != s.size()) throw std::invalid_argument(s);
        } catch (const std::exception&) {
          fail(file_, tok.line, "bad number \"" + tok.text + "\"");
        }
        v.text = tok.text;
        return v;
      }
      case Tok::Kind::kString:
        v.kind = Value::Kind::kStr;
        while (!done() && t_[pos_].kind == Tok::Kind::kString) v.text += t_[pos_++].text;  // "a" "b"
        return v;
      case Tok::Kind::kName:
        ++pos_;
        if (tok.text == "None") {
          v.kind = Value::Kind::kNone;
        } else if (tok.text == "True" || tok.text == "False") {
          v.kind = Value::Kind::kBool;
          v.b = tok.text == "True";
        } else if (tok.text == "lambda" || tok.text == "not" || tok.text == "await" || tok.text == "yield") {
          // Outside the subset: the rest of the expression up to a ',' or closing bracket at this level.
          int depth = 0;
          while (!done() && !(depth == 0 && (at_op(",") || at_op(")") || at_op("]") || at_op("}")))) {
            if (at_op("(") || at_op("[") || at_op("{")) ++depth;
            if (at_op(")") || at_op("]") || at_op("}")) --depth;
            ++pos_;
          }
          v.kind = Value::Kind::kOther;
          v.text = tok.text + " ...";
          return v;
        } else {
          v.kind = Value::Kind::kName;
        }
        v.text = tok.text;
        return v;
      case Tok::Kind::kOp:
        if (tok.text == "(") {
          ++pos_;
          Value s = sequence(")");
          // (x) is x; (x,) and (x, y) are tuples.
          if (s.kind == Value::Kind::kList && s.items.size() == 1 && t_[pos_ - 2].text != ",")
            return s.items[0];
          return s;
        }
        if (tok.text == "[") {
          ++pos_;
          return sequence("]");
        }
        if (tok.text == "{") {
          ++pos_;
          return sequence("}");
        }
        break;
      case Tok::Kind::kEnd:
        break;
    }
    fail(file_, tok.line, "unexpected '" + tok.text + "'");
  }
};

/// Parses one whole expression from tokens [pos, end); trailing tokens (a conditional expression, a
/// comparison) make it kOther.
Value parse_expr(const std::vector<Tok>& t, std::size_t pos, std::size_t end, const std::string& file) {
  ExprParser p(t, pos, end, file);
  Value v = p.expr();
  if (p.pos() < end) {
    if (t[p.pos()].kind == Tok::Kind::kOp && t[p.pos()].text == ",") {  // a bare tuple: a, b
      Value tup;
      tup.kind = Value::Kind::kOther;
      tup.text = "a tuple";
      tup.line = v.line;
      return tup;
    }
    Value o;
    o.kind = Value::Kind::kOther;
    o.text = v.repr() + " " + t[p.pos()].text + " ...";
    o.line = v.line;
    return o;
  }
  return v;
}

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
