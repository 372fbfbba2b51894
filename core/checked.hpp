// Overflow-checked integer arithmetic for byte and element counts. Every product of sizes in shardplan goes
// through these, so a 10^13-parameter model on 2^20 GPUs either computes exactly or fails loudly.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace shardplan {

struct OverflowError : std::overflow_error {
  using std::overflow_error::overflow_error;
};

inline std::int64_t mul_checked(std::int64_t a, std::int64_t b, const char* what = "size") {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    throw OverflowError(std::string("integer overflow computing ") + what);
  return r;
}
inline std::int64_t add_checked(std::int64_t a, std::int64_t b, const char* what = "size") {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r))
    throw OverflowError(std::string("integer overflow computing ") + what);
  return r;
}
/// ceil(a / b) for a >= 0, b > 0.
constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}
/// Smallest multiple of m that is >= a (a >= 0, m > 0).
constexpr std::int64_t round_up(std::int64_t a, std::int64_t m) {
  return ceil_div(a, m) * m;
}

}  // namespace shardplan
