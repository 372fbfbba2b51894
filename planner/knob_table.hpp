// The plan knob table (simulator/plan/knobs.hpp) as data: what `shardplan list knobs` prints and
// tools/common/knobs.json holds, from which the Python tools (tools/common/knob_args.py) build their plan
// flags instead of restating them.
#pragma once
#include <string>

#include "core/json_reader.hpp"

namespace shardplan {

/// The knob table as JSON ("shardplan.knobs/1"): every knob in table order with its run-record key, CLI flag,
/// kind, help, default, valid values or range, and the capability-table features whose refusal names its flag
/// with each runtime's support.
Json knob_table_json();

/// The knob table as text, one knob a line (flag, values or range, default): `shardplan list knobs`.
std::string knob_table_text();

}  // namespace shardplan
