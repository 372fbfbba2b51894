// Tensor groups remember their size (simulator/lowering/tensor_groups.hpp, issue 29): a free names only the
// group and frees what its allocations added up to; freeing a group twice, or one never handed out, is a
// logic error; and in every lowered program, with and without the allocator replay's tensor lists, each free
// effect is minus its group's allocations.
#include <catch2/catch.hpp>
#include <map>
#include <stdexcept>

#include "sim_helpers.hpp"
#include "simulator/lowering/tensor_groups.hpp"

using namespace shardplan;
using shardplan::detail::TensorGroups;
using shardplan::test::Setup;

TEST_CASE(
    "tensor groups: a free returns the group's allocations and pool, freeing twice or an unknown group "
    "throws",
    "[simulator][lowering]") {
  TensorGroups g;
  // Three groups handed out (ids 0, 1, 2). Group 0: three tensors of 100, 200 and 300 bytes from the
  // reduce-scatter pool; group 1 one of 7 bytes from the default pool; group 2 none.
  g.allocated(0, 100, kPoolReduceScatter, 3);
  g.allocated(0, 200, kPoolReduceScatter, 3);
  g.allocated(0, 300, kPoolReduceScatter, 3);
  g.allocated(1, 7, kPoolDefault, 3);
  CHECK(g.live(0) == 600);
  CHECK_THROWS_AS(g.allocated(0, 1, kPoolDefault, 3), std::logic_error);  // one group, two pools
  const TensorGroups::Released r0 = g.release(0, 3);
  CHECK(r0.bytes == 600);  // 100 + 200 + 300
  CHECK(r0.pool == kPoolReduceScatter);
  CHECK(g.live(0) == 0);
  CHECK_THROWS_AS(g.release(0, 3), std::logic_error);                           // freed twice
  CHECK_THROWS_AS(g.allocated(0, 1, kPoolReduceScatter, 3), std::logic_error);  // allocated after its free
  CHECK_THROWS_AS(g.release(3, 3), std::logic_error);                           // never handed out
  CHECK_THROWS_AS(g.release(-2, 3), std::logic_error);
  CHECK(g.release(-1, 3).bytes == 0);  // -1: no allocation was made (alloc_one of 0 bytes), nothing to free
  CHECK(g.release(-1, 3).bytes == 0);
  CHECK(g.release(2, 3).bytes == 0);  // handed out, nothing allocated in it
  CHECK_THROWS_AS(g.release(2, 3), std::logic_error);
  const TensorGroups::Released r1 = g.release(1, 3);
  CHECK(r1.bytes == 7);
  CHECK(r1.pool == kPoolDefault);
  g.clear();  // a new lowering
  // A group handed out before a higher id was allocated (grown with no bytes) takes its pool when first
  // allocated.
  g.allocated(1, 5, kPoolDefault, 2);
  g.allocated(0, 9, kPoolAllGather, 2);
  CHECK(g.release(0, 2).pool == kPoolAllGather);
  CHECK(g.release(1, 2).bytes == 5);
}

namespace {

/// Per group: bytes its allocations (Program::initial and the step's effects) added up to before its free,
/// their pool, and its frees. Checks that every free is minus those bytes from that pool, that one group's
/// allocations share a pool, and that no group is freed twice or allocated after its free; returns the bytes
/// of frees of groups the program never allocates (the planner's pass: the held logits, allocated before the
/// step in the engine's initial totals).
std::vector<Bytes> check_frees(const Program& prog) {
  std::map<std::int32_t, Bytes> allocated;
  std::map<std::int32_t, std::uint8_t> pool;
  std::map<std::int32_t, int> frees;
  std::vector<Bytes> unallocated;
  for (const MemEffect& e : prog.initial) {
    allocated[e.tensor] += e.delta_bytes;
    pool[e.tensor] = e.pool;
  }
  for (const Task& t : prog.tasks)
    for (std::uint32_t k = t.first_effect; k < t.first_effect + t.n_effects; ++k) {
      const MemEffect& e = prog.effects[k];
      REQUIRE(e.tensor >= 0);
      REQUIRE(e.tensor < prog.tensors);
      if (e.delta_bytes > 0) {
        CHECK(frees[e.tensor] == 0);  // not allocated after its free
        const auto [at, first] = pool.try_emplace(e.tensor, e.pool);
        CHECK(at->second == e.pool);  // one group, one pool
        allocated[e.tensor] += e.delta_bytes;
        continue;
      }
      CHECK(++frees[e.tensor] == 1);  // freed once
      const auto it = allocated.find(e.tensor);
      if (it == allocated.end()) {
        unallocated.push_back(-e.delta_bytes);
      } else {
        CHECK(e.delta_bytes == -it->second);
        CHECK(e.pool == pool[e.tensor]);  // freed from the pool it was allocated in
      }
    }
  return unallocated;
}

}  // namespace

TEST_CASE("tensor groups: every free effect is minus its group's allocations, with and without tensor lists",
          "[simulator][lowering]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  struct Case {
    const char* what;
    Runtime runtime;
    int zero;
    AcMode ac;
    int grad_accum;
    bool hold_logits;
    Precision precision;
    int activation_offload;
  };
  for (const Case c :
       {Case{"fsdp2 selective ga3 hold", Runtime::kFsdp2, 3, AcMode::kSelective, 3, true,
             Precision::kBf16Mixed, 0},
        Case{"fsdp1 full ga2", Runtime::kFsdp1, 3, AcMode::kFull, 2, false, Precision::kBf16Mixed, 0},
        Case{"ddp ga2", Runtime::kFsdp2, 0, AcMode::kNone, 2, false, Precision::kBf16Mixed, 0},
        Case{"deepspeed zero1 fp16", Runtime::kDeepSpeed, 1, AcMode::kFull, 2, false, Precision::kFp16Mixed,
             0},
        Case{"deepspeed zero0 fp16", Runtime::kDeepSpeed, 0, AcMode::kFull, 1, false, Precision::kFp16Mixed,
             0},
        Case{"fsdp2 offload", Runtime::kFsdp2, 3, AcMode::kNone, 1, false, Precision::kBf16Mixed,
             kActivationOffloadAll}}) {
    INFO(c.what);
    Plan p;
    p.runtime = c.runtime;
    p.zero = c.zero;
    p.ac = c.ac;
    p.seq = 2048;
    p.grad_accum = c.grad_accum;
    p.hold_logits = c.hold_logits;
    p.precision = c.precision;
    p.activation_offload = c.activation_offload;
    const Plan rp = s.resolve(p);
    Simulator sim(s.model, *s.cluster, *s.costs);
    sim.run(rp);
    const std::vector<Bytes> replayed = check_frees(sim.program());
    CHECK(replayed.empty());  // with tensor lists the held logits are allocated in Program::initial
    Bytes held = 0;           // the held logits' group: Program::initial's activations
    for (const MemEffect& e : sim.program().initial)
      if (e.category == MemCategory::kActivations) held += e.delta_bytes;
    sim.set_allocator_replay(false);
    sim.run(rp);
    const std::vector<Bytes> walked = check_frees(sim.program());
    if (c.hold_logits) {
      // The previous step's fp32 logits, one sequence of 2,048 tokens x the 128,256-token vocabulary x 4
      // bytes (TP 1): freed by the loss in both passes; the planner's pass knows their size from the
      // initial totals alone.
      CHECK(held == Bytes{2048} * 128256 * 4);
      REQUIRE(walked.size() == 1);
      CHECK(walked[0] == held);
    } else {
      CHECK(held == 0);
      CHECK(walked.empty());
    }
  }
}
