// The tokenizer of the Python-subset reader (py_config_internal.hpp): logical lines with indentation, names,
// numbers, string literals (decoded) and operators.
#include <cctype>
#include <cstring>

#include "core/error.hpp"
#include "planner/py_config_internal.hpp"

namespace shardplan::py::detail {

[[noreturn]] void fail(const std::string& file, int line, const std::string& why) {
  throw InputError(file, "line " + std::to_string(line), why);
}

namespace {

/// The string literal whose opening quote is at src[j] (raw: it had an r prefix), decoded, as a token;
/// returns the index past its closing quote. `line` counts the newlines it spans.
std::size_t read_string(const std::string& src, std::size_t j, bool raw, const std::string& file, int& line,
                        std::vector<Tok>& toks) {
  const std::size_t n = src.size();
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
  toks.push_back({Tok::Kind::kString, text, start_line});
  return k;
}

}  // namespace

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
      i = read_string(src, j, raw, file, line, cur.toks);
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

}  // namespace shardplan::py::detail
