#include "core/error.hpp"

#include <algorithm>

namespace shardplan {

static std::string compose(const std::string& file, const std::string& where, const std::string& msg) {
  std::string s;
  if (!file.empty()) s += file;
  if (!where.empty()) s += (s.empty() ? "" : ": ") + where;
  if (!s.empty()) s += ": ";
  return s + msg;
}

InputError::InputError(std::string file, std::string where, std::string message)
    : std::runtime_error(compose(file, where, message)), file_(std::move(file)), where_(std::move(where)) {}

InputError InputError::flag(const std::string& flag, const std::string& message) {
  return InputError("", flag, message);
}

static std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string did_you_mean_list(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    std::size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::initializer_list<std::string>& candidates) {
  return did_you_mean_list(word, std::vector<std::string>(candidates));
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace shardplan
