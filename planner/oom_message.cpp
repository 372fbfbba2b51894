// The CUDA out-of-memory message of PyTorch's caching allocator, parsed.
//
// Source of the wording: c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc (pytorch/pytorch
// at commit 001074d25084fdb87a799823e395a50f5ec044d3, a 2.x main): TORCH_CHECK_WITH(OutOfMemoryError, ...,
//   "CUDA out of memory. Tried to allocate ", format_size(alloc_size), ". GPU ", device,
//   " has a total capacity of ", format_size(device_total), " of which ", format_size(device_free),
//   " is free. ", proc_info, allowed_info, "Of the allocated memory ",
//   format_size(allocated_bytes + allocated_in_private_pools), " is allocated by PyTorch, ",
//   private_pool_msg, "and ", format_size(reserved_bytes - allocated_bytes - allocated_in_private_pools),
//   " is reserved by PyTorch but unallocated.", " If reserved but unallocated memory is large ...")
// where proc_info (reportProcessMemoryInfo, NVML) is, per process on the GPU, "Including non-PyTorch memory,
// this process has X memory in use. " for this process and "Process PID has X memory in use. " for others
// (empty without NVML; a process in another PID namespace is listed as "Process PID"); allowed_info is
// "X allowed; " under set_per_process_memory_fraction; private_pool_msg is "with X allocated in private pools
// (e.g., CUDA Graphs), ". format_size (same file) prints "N bytes" up to 1024, then KiB up to 1 MiB, MiB up
// to 1 GiB, else GiB, with 2 decimals. Releases whose DeviceIndex was printed as a char show "GPU  has". The
// older wording (torch 2.0 and before, as real logs show it): "CUDA out of memory. Tried to allocate X (GPU
// 0; X total capacity; X already allocated; X free; [X allowed; ]X reserved in total by PyTorch)".
#include "planner/oom_message.hpp"

#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.hpp"

namespace shardplan {

namespace {

const char* const kSize = R"(([0-9]+(?:\.[0-9]+)? (?:bytes|B|KiB|MiB|GiB)))";

std::string normalized_window(const std::string& text, std::size_t from) {
  std::string out;
  bool space = false;
  for (std::size_t i = from; i < text.size() && out.size() < 4000; ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

std::regex re(const std::string& pattern) {
  std::string p;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '@') {
      p += kSize;
    } else {
      p += pattern[i];
    }
  }
  return std::regex(p);
}

OomMessage parse_new(const std::smatch& m, const std::string& file) {
  OomMessage o;
  o.wording = "torch>=2.1";
  o.requested = parse_torch_size(m[1], file, "Tried to allocate");
  o.device = m[2].length() ? std::stoi(m[2]) : -1;
  o.total_capacity = parse_torch_size(m[3], file, "total capacity");
  o.free = parse_torch_size(m[4], file, "is free");
  const std::string procs = m[5];
  o.allocated = parse_torch_size(m[6], file, "allocated by PyTorch");
  if (m[7].length()) o.private_pools = parse_torch_size(m[7], file, "allocated in private pools");
  o.reserved_unallocated = parse_torch_size(m[8], file, "reserved by PyTorch but unallocated");
  static const std::regex self = re(R"(Including non-PyTorch memory, this process has @ memory in use\.)");
  static const std::regex other = re(R"(Process ([0-9]+) has @ memory in use\.)");
  static const std::regex allowed = re(R"(@ allowed;)");
  std::smatch p;
  if (std::regex_search(procs, p, self)) o.process_in_use = parse_torch_size(p[1], file, "this process has");
  for (std::sregex_iterator it(procs.begin(), procs.end(), other), end; it != end; ++it)
    o.other_processes.push_back(
        {std::stoll((*it)[1]), parse_torch_size((*it)[2], file, "Process " + (*it)[1].str() + " has")});
  if (std::regex_search(procs, p, allowed)) o.allowed = parse_torch_size(p[1], file, "allowed");
  return o;
}

OomMessage parse_old(const std::smatch& m, const std::string& file) {
  OomMessage o;
  o.wording = "torch<2.1";
  o.requested = parse_torch_size(m[1], file, "Tried to allocate");
  o.device = std::stoi(m[2]);
  o.total_capacity = parse_torch_size(m[3], file, "total capacity");
  o.allocated = parse_torch_size(m[4], file, "already allocated");
  o.free = parse_torch_size(m[5], file, "free");
  if (m[6].length()) o.allowed = parse_torch_size(m[6], file, "allowed");
  const Bytes reserved = parse_torch_size(m[7], file, "reserved in total by PyTorch");
  o.reserved_unallocated = reserved - o.allocated;
  return o;
}

}  // namespace

Bytes parse_torch_size(const std::string& text, const std::string& file, const std::string& what) {
  static const std::regex size(R"(([0-9]{1,15})(?:\.([0-9]{1,6}))? (bytes|B|KiB|MiB|GiB))");
  std::smatch m;
  if (!std::regex_match(text, m, size))
    throw InputError(file, what,
                     "\"" + text + "\" is not a size as torch prints it (e.g. 2.00 GiB, 512 bytes)");
  const std::string unit = m[3];
  const Bytes scale = unit == "GiB" ? kGiB : unit == "MiB" ? kMiB : unit == "KiB" ? kKiB : 1;
  std::string frac = m[2];
  Bytes denom = 1;
  for (std::size_t i = 0; i < frac.size(); ++i) denom *= 10;
  const Bytes whole = std::stoll(m[1]);
  const Bytes part = frac.empty() ? 0 : std::stoll(frac);
  if (whole > (Bytes{1} << 62) / scale) throw InputError(file, what, "\"" + text + "\" is out of range");
  // whole x scale + part x scale / denom, the fraction rounded half up to a byte (scale x part fits: the
  // fraction has at most 6 digits and scale is at most 2^30).
  return whole * scale + (part * scale * 2 + denom) / (2 * denom);
}

OomMessage parse_oom_message(const std::string& text, const std::string& file) {
  const std::string marker = "Tried to allocate";
  const std::size_t at = text.find(marker);
  if (at == std::string::npos)
    throw InputError(file, "", "no PyTorch CUDA out-of-memory message (\"Tried to allocate ...\") in it");
  const std::string w = normalized_window(text, at);
  static const std::regex now = re(
      R"(^Tried to allocate @\. GPU ?([0-9]*) ?has a total capacity of @ of which @ is free\. (.*?)Of the )"
      R"(allocated memory @ is allocated by PyTorch, (?:with @ allocated in private pools \(e\.g\., CUDA )"
      R"(Graphs\), )?and @ is reserved by PyTorch but unallocated\.)");
  static const std::regex before = re(
      R"(^Tried to allocate @ \(GPU ([0-9]+); @ total capacity; @ already allocated; @ free; (?:@ allowed; )?@ )"
      R"(reserved in total by PyTorch\))");
  std::smatch m;
  OomMessage o;
  if (std::regex_search(w, m, now)) {
    o = parse_new(m, file);
  } else if (std::regex_search(w, m, before)) {
    o = parse_old(m, file);
  } else {
    throw InputError(
        file, "\"" + w.substr(0, 60) + "...\"",
        "an out-of-memory message in neither torch wording (\"GPU N has a total capacity of X of "
        "which X is free. ... Of the allocated memory X is allocated by PyTorch, and X is "
        "reserved by PyTorch but unallocated.\" or \"(GPU N; X total capacity; X already "
        "allocated; X free; X reserved in total by PyTorch)\")");
  }
  o.messages = 0;
  for (std::size_t p = text.find(marker); p != std::string::npos; p = text.find(marker, p + 1)) ++o.messages;
  return o;
}

OomMessage read_oom_message(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the out-of-memory message file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_oom_message(ss.str(), path);
}

}  // namespace shardplan
