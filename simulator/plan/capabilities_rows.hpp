// Internal to simulator/plan/capabilities*.cpp: one row of the capability table, so that groups of features
// can keep their rows in files of their own (capabilities_zeropp.cpp).
#pragma once
#include <span>

#include "simulator/plan/capabilities.hpp"

namespace shardplan::detail {

struct CapabilityRow {
  Feature feature;
  Support support;
  const char* source;
  const char* note;
};

/// The rows of DeepSpeed ZeRO++'s features (kHpz .. kZeroppWithEp) for runtime `r`.
std::span<const CapabilityRow> zeropp_rows(Runtime r);

}  // namespace shardplan::detail
