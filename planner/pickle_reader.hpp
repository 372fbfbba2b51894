// A restricted pickle reader: the data-only subset of the pickle protocol (0-5 framing) that a PyTorch memory
// snapshot uses, read into JSON without importing or calling anything.
#pragma once
#include <string>

#include "core/json_reader.hpp"

namespace shardplan {

/// Reads a pickle of dicts, lists, tuples (as arrays), str, int, float, bool and None into JSON. Refuses
/// (InputError naming `file`, the byte offset and the opcode) every opcode that would import or call
/// (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, EXT*, PERSID, BINPERSID) and any
/// opcode outside the subset; never executes anything. Non-string dict keys become their JSON text; a
/// structure nested deeper than 200 levels (a self-referencing list, say) is refused.
Json read_pickle(const std::string& bytes, const std::string& file);

}  // namespace shardplan
