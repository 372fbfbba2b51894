// The restricted pickle reader. Opcode values and semantics: CPython's Lib/pickletools.py (the reference
// documentation of the format). PyTorch writes memory snapshots two ways: torch.cuda.memory._dump_snapshot
// pickles _snapshot()'s dict with Python's pickle (protocol 4 by default: PROTO, FRAME, MEMOIZE,
// SHORT_BINUNICODE, BININT1/2, BININT, LONG1, BINFLOAT, ...), and torch/csrc/cuda/memory_snapshot.cpp's
// _memory_snapshot_pickled writes it with torch's own Pickler (protocol 2: BINUNICODE, BINPUT/BINGET, ...,
// aggregates untagged, so no GLOBAL). Both are data only; this reader takes exactly that data subset.
#include "planner/pickle_reader.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace shardplan {

namespace {

struct Node;
using NodePtr = std::shared_ptr<Node>;
/// A pickled value. Lists and dicts are shared (the memo can hand the same one out again, filled later).
struct Node {
  enum Kind { kScalar, kList, kDict } kind = kScalar;
  Json scalar;
  std::vector<NodePtr> items;                        ///< list / tuple
  std::vector<std::pair<NodePtr, NodePtr>> entries;  ///< dict
};

const char* refused_name(unsigned char op) {
  switch (op) {
    case 'c':
      return "GLOBAL";
    case 0x93:
      return "STACK_GLOBAL";
    case 'R':
      return "REDUCE";
    case 'b':
      return "BUILD";
    case 'i':
      return "INST";
    case 'o':
      return "OBJ";
    case 0x81:
      return "NEWOBJ";
    case 0x92:
      return "NEWOBJ_EX";
    case 0x82:
      return "EXT1";
    case 0x83:
      return "EXT2";
    case 0x84:
      return "EXT4";
    case 'P':
      return "PERSID";
    case 'Q':
      return "BINPERSID";
    default:
      return nullptr;
  }
}

class Reader {
 public:
  Reader(const std::string& bytes, const std::string& file) : b_(bytes), file_(file) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  /// A pickle may make a list or dict that holds itself (through the memo): the nodes' links are cut here so
  /// that shared ownership frees every node, cycles included (the value was converted before this).
  ~Reader() {
    for (const NodePtr& n : made_) {
      n->items.clear();
      n->entries.clear();
    }
  }

  NodePtr run() {
    while (true) {
      const std::size_t at = pos_;
      const unsigned char op = u8();
      if (op == '.') break;  // STOP
      step(op, at);
    }
    if (stack_.size() != 1 || !marks_.empty()) fail(pos_, "the pickle does not end with exactly one value");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(std::size_t at, const std::string& why) const {
    throw InputError(file_, fmt::format("byte {}", at), why);
  }
  void need(std::size_t n) const {
    if (b_.size() - pos_ < n) fail(pos_, "the pickle ends early (truncated file?)");
  }
  unsigned char u8() {
    need(1);
    return static_cast<unsigned char>(b_[pos_++]);
  }
  std::uint64_t le(std::size_t n) {
    need(n);
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i)
      v |= std::uint64_t{static_cast<unsigned char>(b_[pos_ + i])} << (8 * i);
    pos_ += n;
    return v;
  }
  std::string take(std::uint64_t n) {
    need(n);
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  static NodePtr scalar(Json v) {  // a leaf: never part of a cycle
    auto n = std::make_shared<Node>();
    n->scalar = std::move(v);
    return n;
  }
  NodePtr pop(std::size_t at) {
    if (stack_.size() <= floor()) fail(at, "an opcode took a value from an empty stack");
    NodePtr n = stack_.back();
    stack_.pop_back();
    return n;
  }
  std::size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<NodePtr> pop_mark(std::size_t at) {
    if (marks_.empty()) fail(at, "no MARK before a SETITEMS / APPENDS / TUPLE");
    std::vector<NodePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  NodePtr& top(std::size_t at, Node::Kind kind) {
    if (stack_.size() <= floor() || stack_.back()->kind != kind)
      fail(at,
           kind == Node::kDict ? "SETITEM(S) on something not a dict" : "APPEND(S) on something not a list");
    return stack_.back();
  }
  void long_int(std::uint64_t n, std::size_t at) {
    if (n > 8) fail(at, fmt::format("an integer of {} bytes (more than 64 bits)", n));
    std::uint64_t v = le(n);
    if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
    stack_.push_back(scalar(static_cast<std::int64_t>(v)));
  }
  void memo_put(std::uint64_t id, std::size_t at) {
    if (stack_.empty()) fail(at, "memo store with an empty stack");
    memo_[id] = stack_.back();
  }
  void memo_get(std::uint64_t id, std::size_t at) {
    auto it = memo_.find(id);
    if (it == memo_.end()) fail(at, fmt::format("memo entry {} read before it was stored", id));
    stack_.push_back(it->second);
  }
  void tuple(std::vector<NodePtr> items) {
    auto n = make_node();
    n->kind = Node::kList;
    n->items = std::move(items);
    stack_.push_back(n);
  }
  void step(unsigned char op, std::size_t at);
  /// The opcodes that push one str, int, float, bool or None; false for any other.
  bool push_scalar(unsigned char op, std::size_t at);

  const std::string& b_;
  const std::string& file_;
  std::size_t pos_ = 0;
  std::vector<NodePtr> stack_;
  std::vector<NodePtr> made_;  ///< every node made, for the destructor
  NodePtr make_node() {
    made_.push_back(std::make_shared<Node>());
    return made_.back();
  }
  std::vector<std::size_t> marks_;
  std::map<std::uint64_t, NodePtr> memo_;
};

bool Reader::push_scalar(unsigned char op, std::size_t at) {
  switch (op) {
    case 'X':
      stack_.push_back(scalar(take(le(4))));
      return true;  // BINUNICODE
    case 0x8c:
      stack_.push_back(scalar(take(u8())));
      return true;  // SHORT_BINUNICODE
    case 0x8d:
      stack_.push_back(scalar(take(le(8))));
      return true;  // BINUNICODE8
    case 'J':
      stack_.push_back(scalar(static_cast<std::int32_t>(le(4))));
      return true;  // BININT
    case 'K':
      stack_.push_back(scalar(static_cast<std::int64_t>(u8())));
      return true;  // BININT1
    case 'M':
      stack_.push_back(scalar(static_cast<std::int64_t>(le(2))));
      return true;  // BININT2
    case 0x8a:
      long_int(u8(), at);
      return true;  // LONG1
    case 0x8b:
      long_int(le(4), at);
      return true;  // LONG4
    case 'G': {     // BINFLOAT, big-endian IEEE 754 double
      need(8);
      std::uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(b_[pos_ + i]);
      pos_ += 8;
      double d;
      std::memcpy(&d, &v, 8);
      stack_.push_back(scalar(d));
      return true;
    }
    case 'N':
      stack_.push_back(scalar(nullptr));
      return true;  // NONE
    case 0x88:
      stack_.push_back(scalar(true));
      return true;  // NEWTRUE
    case 0x89:
      stack_.push_back(scalar(false));
      return true;  // NEWFALSE
    default:
      return false;
  }
}

void Reader::step(unsigned char op, std::size_t at) {
  if (const char* name = refused_name(op))
    fail(at,
         fmt::format("opcode {} (0x{:02x}) refused: it imports or calls Python code, and a memory snapshot "
                     "holds only dicts, lists, strings and numbers (this reader never executes a pickle)",
                     name, op));
  switch (op) {
    case 0x80:
      u8();
      return;  // PROTO
    case 0x95:
      le(8);
      return;    // FRAME (a length hint; the bytes follow inline)
    case '}': {  // EMPTY_DICT
      auto n = make_node();
      n->kind = Node::kDict;
      stack_.push_back(n);
      return;
    }
    case ']': {  // EMPTY_LIST
      auto n = make_node();
      n->kind = Node::kList;
      stack_.push_back(n);
      return;
    }
    case ')':
      tuple({});
      return;  // EMPTY_TUPLE
    case '(':
      marks_.push_back(stack_.size());
      return;    // MARK
    case 'u': {  // SETITEMS
      auto kv = pop_mark(at);
      if (kv.size() % 2) fail(at, "SETITEMS with an odd number of keys and values");
      NodePtr& d = top(at, Node::kDict);
      for (std::size_t i = 0; i < kv.size(); i += 2) d->entries.push_back({kv[i], kv[i + 1]});
      return;
    }
    case 's': {  // SETITEM
      NodePtr v = pop(at), k = pop(at);
      top(at, Node::kDict)->entries.push_back({k, v});
      return;
    }
    case 'e': {  // APPENDS
      auto items = pop_mark(at);
      NodePtr& l = top(at, Node::kList);
      l->items.insert(l->items.end(), items.begin(), items.end());
      return;
    }
    case 'a': {  // APPEND
      NodePtr v = pop(at);
      top(at, Node::kList)->items.push_back(v);
      return;
    }
    case 't':
      tuple(pop_mark(at));
      return;  // TUPLE
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      std::vector<NodePtr> items(op - 0x84);
      for (std::size_t i = items.size(); i-- > 0;) items[i] = pop(at);
      tuple(std::move(items));
      return;
    }
    case 0x94:
      memo_put(memo_.size(), at);
      return;  // MEMOIZE
    case 'q':
      memo_put(u8(), at);
      return;  // BINPUT
    case 'r':
      memo_put(le(4), at);
      return;  // LONG_BINPUT
    case 'h':
      memo_get(u8(), at);
      return;  // BINGET
    case 'j':
      memo_get(le(4), at);
      return;  // LONG_BINGET
    case '0':
      pop(at);
      return;  // POP
    case '1':
      pop_mark(at);
      return;  // POP_MARK
    default:
      if (push_scalar(op, at)) return;
      fail(at, fmt::format("opcode 0x{:02x} is not in the data-only subset this reader takes (dict, list, "
                           "tuple, str, int, float, bool, None)",
                           op));
  }
}

Json to_json(const Node& n, int depth, std::int64_t& budget, const std::string& file) {
  if (depth > 200) throw InputError(file, "", "structure nested deeper than 200 levels (a self-reference?)");
  if (--budget < 0) throw InputError(file, "", "more than 20 million values (shared references expanded)");
  if (n.kind == Node::kScalar) return n.scalar;
  if (n.kind == Node::kList) {
    Json a = Json::array();
    for (const auto& i : n.items) a.push_back(to_json(*i, depth + 1, budget, file));
    return a;
  }
  Json o = Json::object();
  for (const auto& [k, v] : n.entries) {
    const std::string key = k->kind == Node::kScalar && k->scalar.is_string()
                                ? k->scalar.get<std::string>()
                                : to_json(*k, depth + 1, budget, file).dump();
    o[key] = to_json(*v, depth + 1, budget, file);
  }
  return o;
}

}  // namespace

Json read_pickle(const std::string& bytes, const std::string& file) {
  Reader r(bytes, file);
  NodePtr root = r.run();
  std::int64_t budget = 20'000'000;
  return to_json(*root, 0, budget, file);
}

}  // namespace shardplan
