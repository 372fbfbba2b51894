// The expression parser of the Python-subset reader (py_config_internal.hpp): literals, names, calls, lists,
// tuples and dicts, with + - * / on number literals folded.
#include <climits>
#include <cmath>

#include "core/error.hpp"
#include "planner/py_config_internal.hpp"

namespace shardplan::py::detail {

namespace {

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

}  // namespace

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

}  // namespace shardplan::py::detail
