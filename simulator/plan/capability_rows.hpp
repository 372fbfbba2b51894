// Internal to simulator/plan/capabilities*.cpp: one row of the capability table, and the rows kept in files
// of their own (capabilities.cpp fills the table from all of them).
#pragma once
#include <initializer_list>

#include "simulator/plan/capabilities.hpp"

namespace shardplan {

struct Row {
  Feature feature;
  Support support;
  const char* source;
  const char* note;
};

/// The activation-offload rows of runtime `r` (capabilities_activation_offload.cpp).
const std::initializer_list<Row>& activation_offload_rows(Runtime r);

}  // namespace shardplan
