// Output files are written whole or not at all: content goes to a temporary file beside the target, which is
// renamed over the target only after the write succeeded. "-" means standard output.
#pragma once
#include <string>

namespace shardplan {

/// Writes `content` to `path` atomically (or to stdout for "-"). Throws InputError if the directory is not
/// writable.
void write_file_atomic(const std::string& path, const std::string& content);

}  // namespace shardplan
