// Memory: persistent model state per rank (mechanics.md §1.1-§1.2) and the capacity boundary; activation
// memory (mechanics.md §2) is in test_memory_activations.cpp.
#include <catch2/catch.hpp>

#include "sim_helpers.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {
// Per-rank bytes FSDP2's per-parameter dim-0 sharding adds over an exact 1/F split: a tensor of `rows` x
// `cols` becomes ceil(rows/F)·cols elements on each rank, i.e. less than one extra row (cols elements) per
// tensor, and nothing when F divides rows (mechanics §1.8).
std::int64_t fsdp2_padding_bound_elems(const ModelGraph& m, int F) {
  std::int64_t pad = 0;
  for (const Layer* l : m.order())
    for (const auto& t : l->tensors)
      if (t.dim0 % F != 0) pad += t.dim1;
  return pad;
}
std::int64_t tensor_count(const ModelGraph& m) {
  std::int64_t n = 0;
  for (const Layer* l : m.order()) n += static_cast<std::int64_t>(l->tensors.size());
  return n;
}
Bytes total(const std::array<Bytes, 3>& a) {
  return a[0] + a[1] + a[2];
}
}  // namespace

TEST_CASE("Llama-3-70B ZeRO-3 over 16 ranks: 12 Psi/16 (bf16) and 16 Psi/16 (bf16-mixed)",
          "[simulator][memory]") {
  Setup s("llama3-70b", "dgx-h100", 16);
  const double psi = 70'553'706'496.0;
  // Every dim 0 of Llama-3-70B divides by 16 (8192, 1024, 28672, 128256 = 16·8016), so FSDP2's padding is
  // zero here; the bound below is computed from the tensors anyway and must come out 0.
  const std::int64_t pad_elems = fsdp2_padding_bound_elems(s.model, 16);
  CHECK(pad_elems == 0);
  SECTION("fsdp2, --precision bf16: params 2 + grads 2 + Adam m, v in bf16 4 + 4 = 12 bytes/param") {
    Plan p;
    p.precision = Precision::kBf16;
    auto ps = Simulator::persistent_state(s.model, s.resolve(p));
    // 12 · 70,553,706,496 / 16 = 52,915,279,872, plus fused AdamW's `step` scalar per parameter tensor (723
    // tensors: 9 per block · 80 + embedding, final norm, output) at 512 B each = 370,176.
    const double steps = 723.0 * 512;
    CHECK(tensor_count(s.model) == 723);
    CHECK(static_cast<double>(total(ps)) >= 12 * psi / 16 + steps);
    CHECK(static_cast<double>(total(ps)) <= 12 * psi / 16 + 12.0 * static_cast<double>(pad_elems) + steps);
    CHECK(total(ps) == 52'915'279'872 + 370'176);
  }
  SECTION("fsdp2, bf16-mixed: fp32 params 4 + fp32 grads 4 + Adam 8 = 16 bytes/param") {
    Plan p;
    auto ps = Simulator::persistent_state(s.model, s.resolve(p));
    // 16 · 70,553,706,496 / 16 = 70,553,706,496, plus 723 `step` tensors · 512 B
    CHECK(total(ps) == 70'553'706'496 + 723 * 512);
    CHECK(ps[0] == 4 * 4'409'606'656);  // Psi/16 = 4,409,606,656 params per rank, fp32
  }
  SECTION("deepspeed: per-tensor flat partition, < 1 element of padding per tensor per rank") {
    // DeepSpeed partitions each parameter's flat numel: ceil(n/16) per rank ⇒ per-rank padding < #tensors
    // elements, i.e. ≤ #tensors × 16 elements over all ranks (the bound the brief states), × bytes/param.
    const double bound = static_cast<double>(tensor_count(s.model)) * 16.0;
    Plan p;
    p.runtime = Runtime::kDeepSpeed;
    p.precision = Precision::kBf16;
    auto a = Simulator::persistent_state(s.model, s.resolve(p));
    CHECK(static_cast<double>(total(a)) >= 12 * psi / 16);
    CHECK(static_cast<double>(total(a)) <= 12 * psi / 16 + 12.0 * bound);
    p.precision =
        Precision::kBf16Mixed;  // DeepSpeed bf16-mixed: bf16 params 2 + bf16 grads 2 + fp32 master/m/v 12
    auto b = Simulator::persistent_state(s.model, s.resolve(p));
    CHECK(static_cast<double>(total(b)) >= 16 * psi / 16);
    CHECK(static_cast<double>(total(b)) <= 16 * psi / 16 + 16.0 * bound);
  }
}

TEST_CASE("padding bound is respected when the shard size does not divide the tensors",
          "[simulator][memory]") {
  // 24 ranks: 8192 / 24 is not whole ⇒ FSDP2 pads each such tensor to ceil(rows/24) rows per rank.
  Setup s("llama3-70b", "dgx-h100", 24);
  const double psi = 70'553'706'496.0;
  const std::int64_t pad_elems = fsdp2_padding_bound_elems(s.model, 24);
  CHECK(pad_elems > 0);
  Plan p;
  p.precision = Precision::kBf16;
  auto ps = Simulator::persistent_state(s.model, s.resolve(p));
  CHECK(static_cast<double>(total(ps)) >= 12 * psi / 24);
  CHECK(static_cast<double>(total(ps)) <= 12 * psi / 24 + 12.0 * static_cast<double>(pad_elems));
}

TEST_CASE("deepspeed ZeRO-0 >= 1 >= 2 >= 3 and each stage matches the ZeRO paper's formula",
          "[simulator][memory]") {
  Setup s("llama2-7b", "dgx-h100", 16);
  const double psi = 6'738'415'616.0, N = 16;
  const double slack =
      static_cast<double>(tensor_count(s.model)) * 16.0 * 16.0;  // ≤ #tensors × 16 elem × 16 B
  // ZeRO paper §5 with K = 12 (bf16 params, bf16 grads, fp32 master + m + v):
  //   ZeRO-0: 16 Psi;  ZeRO-1: 4 Psi + 12 Psi/N;  ZeRO-2: 2 Psi + 14 Psi/N;  ZeRO-3: 16 Psi/N
  const double expected[4] = {16 * psi, 4 * psi + 12 * psi / N, 2 * psi + 14 * psi / N, 16 * psi / N};
  Bytes prev = 0;
  for (int z = 0; z <= 3; ++z) {
    INFO("zero " << z);
    Plan p;
    p.runtime = Runtime::kDeepSpeed;
    p.zero = z;
    Bytes b = total(Simulator::persistent_state(s.model, s.resolve(p)));
    CHECK(static_cast<double>(b) >= expected[z]);
    CHECK(static_cast<double>(b) <= expected[z] + slack);
    if (z > 0) CHECK(b < prev);  // strictly less for N > 1
    prev = b;
  }
}

TEST_CASE("HSDP shards over the shard group, not the world", "[simulator][memory]") {
  // 64 GPUs, shard group 8 (8 replicas) keeps the same per-rank state as plain FSDP on 8 GPUs: 16 Psi/8.
  Setup hsdp("llama3-8b", "dgx-h100", 64), fsdp8("llama3-8b", "dgx-h100", 8),
      fsdp64("llama3-8b", "dgx-h100", 64);
  Plan p;
  p.shard_group = 8;
  Plan q;
  auto a = Simulator::persistent_state(hsdp.model, hsdp.resolve(p));
  auto b = Simulator::persistent_state(fsdp8.model, fsdp8.resolve(q));
  auto c = Simulator::persistent_state(fsdp64.model, fsdp64.resolve(q));
  CHECK(a == b);
  // Every llama3-8b dim 0 divides by 8; plus 291 AdamW `step` tensors (9 per block · 32 + 3) of 512 B.
  CHECK(total(a) == 16 * 8'030'261'248 / 8 + 291 * 512);
  CHECK(total(c) < total(a));
  CHECK(hsdp.resolve(p).replicas == 8);
  for (Runtime rt : {Runtime::kFsdp1, Runtime::kFsdp2}) {
    p.runtime = q.runtime = rt;
    CHECK(Simulator::persistent_state(hsdp.model, hsdp.resolve(p)) ==
          Simulator::persistent_state(fsdp8.model, fsdp8.resolve(q)));
  }
}

TEST_CASE("TP-8 x FSDP-32 Llama-3-70B weights are a 256-way split plus the replicated norms",
          "[simulator][memory]") {
  // Issue 7 acceptance. 256 GPUs, tp 8 ⇒ dp 32. Column/row-parallel tensors (all matrices, vocab-parallel
  // embedding and head) are split 8 ways by TP then 32 ways by FSDP with no padding (every local dim 0
  // divides by 32: 1024, 128, 3584, 8192, 16032 rows). The RMSNorm weights are TP-replicated: each is h =
  // 8192 elements split only 32 ways (256 per rank) instead of 256 ways (32 per rank).
  //   norms = 2 per block × 80 + final = 161;  slack = 161 × (8192/32 − 8192/256) = 161 × 224 = 36,064
  //   elements weights per GPU = (Psi − 161·8192)/256 + 161·8192/32 = 275,595,264 + 41,216 = 275,636,480
  //   elements
  //                   = Psi/256 (275,600,416) + 36,064
  Setup s("llama3-70b", "dgx-h100", 256);
  Plan p;
  p.tp = 8;
  Plan r = s.resolve(p);
  REQUIRE(r.dp == 32);
  REQUIRE(r.shard_group == 32);
  auto ps = Simulator::persistent_state(s.model, r);
  const std::int64_t psi = 70'553'706'496, norms = 161, h = 8192;
  const std::int64_t elems = (psi - norms * h) / 256 + norms * h / 32;
  CHECK(elems == 275'636'480);
  CHECK(elems - psi / 256 == 36'064);
  // bf16-mixed FSDP2 keeps fp32 parameters: 4 bytes each.
  CHECK(ps[0] == 4 * elems);
  CHECK(ps[1] == 4 * elems);
  CHECK(ps[2] == 8 * elems + 723 * 512);  // + fused AdamW's 723 `step` tensors, 512 B each
}

TEST_CASE(
    "FSDP2 persistent state: every shard and Adam moment is one allocation rounded to 512 B, plus one "
    "`step` tensor per parameter with fused AdamW",
    "[simulator][memory]") {
  // Llama-3-8B over 2048 ranks, bf16-mixed (fp32 shards). Each parameter's shard is ceil(rows / 2048) rows
  // (_fsdp_param.py: padded dim-0 chunks, one new_zeros per parameter), rounded up to 512 B by the caching
  // allocator (kMinBlockSize):
  //   embedding, output: ceil(128256 / 2048) = 63 rows · 4096 · 4 B = 1,032,192 each
  //   per block: wq, wo 2 rows · 4096 · 4 = 32,768 each; wk, wv 1 row · 4096 · 4 = 16,384 each;
  //              w1, w3 7 rows · 4096 · 4 = 114,688 each; w2 2 rows · 14336 · 4 = 114,688;
  //              2 RMSNorm weights of 2 elements = 8 B -> 512 each;  block = 443,392
  //   final norm 512;  params = 2 · 1,032,192 + 32 · 443,392 + 512 = 16,253,440
  // exp_avg and exp_avg_sq are zeros_like each fp32 shard (the same rounded sizes) and fused AdamW keeps a
  // 0-dim fp32 `step` per parameter on the device (torch/optim/adam.py _init_group): 291 · 512 = 148,992.
  Setup s("llama3-8b", "dgx-h100", 2048);
  Plan p;
  const auto ps = Simulator::persistent_state(s.model, s.resolve(p));
  CHECK(ps[0] == 16'253'440);
  CHECK(ps[2] == 2 * 16'253'440 + 148'992);
  // Without the rounding the 65 norm shards would count 8 B instead of 512: 65 · 504 = 32,760 B less.
  std::int64_t unrounded = 0;
  for (const Layer* l : s.model.order())
    for (const auto& t : l->tensors) unrounded += (t.dim0 + 2047) / 2048 * t.dim1 * 4;
  CHECK(unrounded == 16'253'440 - 65 * 504);
  // foreach AdamW keeps `step` on the CPU ("Deliberately host `step` on CPU if both capturable and fused are
  // off"); DeepSpeed's optimizers keep it in the parameter group.
  p.fused_optimizer = false;
  CHECK(Simulator::persistent_state(s.model, s.resolve(p))[2] == 2 * 16'253'440);
}

TEST_CASE(
    "a plan fits at exactly the capacity, below it the allocator frees its cache and retries, below what is "
    "allocated it runs out of memory",
    "[simulator][memory][boundary]") {
  ClusterSpec spec = load_cluster_spec("dgx-h100");
  Plan plan;
  plan.seq = 4096;
  Bytes need = 0;
  {
    Setup s(load_model("llama3-8b"), spec, 8);
    Result r = s.run(plan);
    need = r.peak_reserved_bytes + r.overhead.total();
    // overhead: CUDA context 512 MiB + one NCCL communicator (shard group of 8, no TP, no replicas) 384 MiB.
    CHECK(r.overhead.total() == (512 + 384) * kMiB);
    CHECK(r.capacity_bytes == spec.gpu.memory_bytes);
  }
  // capacity = need ⇒ peak_reserved + overhead ≤ capacity holds with equality ⇒ fits.
  spec.gpu.memory_bytes = need;
  {
    Setup s(load_model("llama3-8b"), spec, 8);
    Result r = s.run(plan);
    CHECK(r.peak_reserved_bytes + r.overhead.total() == need);
    CHECK(r.fits);
    CHECK(r.headroom_bytes() == 0);
  }
  // capacity = need − 1: the replayed allocator reaches the limit, frees its cached segments and retries
  // (release_cached_blocks), as PyTorch does, so the plan still runs with less reserved.
  spec.gpu.memory_bytes = need - 1;
  Bytes allocated = 0;
  {
    Setup s(load_model("llama3-8b"), spec, 8);
    Result r = s.run(plan);
    CHECK(r.fits);
    CHECK_FALSE(r.allocator.oom);
    CHECK(r.allocator.alloc_retries > 0);
    CHECK(r.peak_reserved_bytes + r.overhead.total() <= need - 1);
    allocated = r.allocator.peak_allocated_bytes;
  }
  // capacity below the allocated peak + overhead: no cache to free helps ⇒ out of memory ⇒ does not fit, and
  // the reported reserved is the uncapped demand (the first run's).
  spec.gpu.memory_bytes = allocated + (512 + 384) * kMiB - 1;
  {
    Setup s(load_model("llama3-8b"), spec, 8);
    Result r = s.run(plan);
    CHECK(r.allocator.oom);
    CHECK_FALSE(r.fits);
    CHECK(r.peak_reserved_bytes + r.overhead.total() == need);
  }
}

// ---- activations
// -------------------------------------------------------------------------------------------
