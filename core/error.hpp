// Error types that the CLI maps to exit codes. InputError (exit 2) always names where the bad value came
// from: the file, a JSON pointer or line, the value, and what was expected.
#pragma once
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace shardplan {

/// Bad user input: malformed file, unknown name, out-of-range value, impossible plan. CLI exit code 2.
class InputError : public std::runtime_error {
 public:
  InputError(std::string file, std::string where, std::string message);
  /// An error not tied to a file (a command-line flag, say): `where` names the flag.
  static InputError flag(const std::string& flag, const std::string& message);
  const std::string& file() const { return file_; }
  const std::string& where() const { return where_; }

 private:
  std::string file_, where_;
};

/// Levenshtein-closest candidate, or "" when nothing is close enough to suggest.
std::string did_you_mean(const std::string& word, const std::initializer_list<std::string>& candidates);
std::string did_you_mean_list(const std::string& word, const std::vector<std::string>& candidates);
/// "a, b, c" for listing valid names.
std::string join_names(const std::vector<std::string>& names);

}  // namespace shardplan
