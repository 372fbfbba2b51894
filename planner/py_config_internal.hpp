// Internal pieces of the Python-subset reader (planner/py_config.hpp): the tokenizer's logical lines
// (py_tokenize.cpp) and the expression parser (py_expr.cpp) that parse_module (py_config.cpp) builds on.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "planner/py_config.hpp"

namespace shardplan::py::detail {

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

/// InputError naming the file and "line N".
[[noreturn]] void fail(const std::string& file, int line, const std::string& why);

/// Splits the source into logical lines (brackets and backslashes join physical lines; comments and blank
/// lines dropped), each with the indentation of its first physical line.
std::vector<Line> tokenize(const std::string& src, const std::string& file);

/// Parses one whole expression from tokens [pos, end); trailing tokens (a conditional expression, a
/// comparison) make it kOther.
Value parse_expr(const std::vector<Tok>& t, std::size_t pos, std::size_t end, const std::string& file);

}  // namespace shardplan::py::detail
