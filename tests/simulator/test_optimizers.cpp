// Optimizers (--optimizer): the state each implementation allocates per parameter, from closed forms over the
// model's tensors; Muon's gathers, gathered matrix and Newton-Schulz time; the step's traffic per optimizer;
// the combinations the runtimes cannot run.
#include <catch2/catch.hpp>
#include <cstdint>

#include "sim_helpers.hpp"
#include "simulator/memory/memory.hpp"

using namespace shardplan;
using shardplan::test::Setup;

namespace {

Bytes round512(Bytes b) {
  return (b + 511) / 512 * 512;
}

std::int64_t ceil_div64(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

/// Every parameter tensor of the model with its count, TP 1 (the tests below run without TP).
template <class F>
void each_tensor(const ModelGraph& m, F f) {
  for (const Layer* l : m.order())
    for (const Tensor& t : l->tensors) f(*l, t);
}

Plan with(Optimizer o, Runtime rt = Runtime::kFsdp2, int zero = 3) {
  Plan p;
  p.optimizer = o;
  p.runtime = rt;
  p.zero = zero;
  p.seq = 1024;
  return p;
}

}  // namespace

TEST_CASE("optimizers: 8-bit AdamW (torchao, FSDP2) keeps 2 bytes per parameter + fp32 scales per 256",
          "[optimizers][memory]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  const Plan p = s.resolve(with(Optimizer::kAdamW8bit));
  // torchao AdamW8bit on each FSDP2 shard (n = ceil(rows / 8) x cols elements): when n >= 4096 and n % 256
  // == 0, per moment uint8 codes (n B), fp32 scales (n / 256 x 4 B) and a 256-entry fp32 qmap (1 KiB), each
  // its own allocation; else two moments like the shard (fp32 under bf16-mixed). Its `step` is a CPU tensor.
  Bytes expected = 0;
  std::int64_t quantised = 0, elems = 0;
  each_tensor(s.model, [&](const Layer&, const Tensor& t) {
    const std::int64_t n = ceil_div64(t.dim0, 8) * t.dim1;
    elems += n;
    if (n >= 4096 && n % 256 == 0) {
      expected += 2 * (round512(n) + round512(n / 256 * 4) + round512(1024));
      quantised += n;
    } else {
      expected += 2 * round512(4 * n);
    }
  });
  const auto ps = persistent_state(s.model, p);
  CHECK(ps[2] == expected);
  // Every matrix is quantised; only the norms' 512-element shards are not: 2 + 8/256 bytes per parameter.
  CHECK(quantised > elems * 99 / 100);
  CHECK(static_cast<double>(ps[2]) / static_cast<double>(elems) == Approx(2.0 + 8.0 / 256).epsilon(0.01));
  CHECK(optimizer_step_tensors(s.model, p) == 0);
}

TEST_CASE("optimizers: 8-bit AdamW (bitsandbytes) on DeepSpeed's flat partition", "[optimizers][memory]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  const Plan p = s.resolve(with(Optimizer::kAdamW8bit, Runtime::kDeepSpeed, 1));
  // DeepSpeed ZeRO-1 bf16-mixed: one flat fp32 partition of n = ceil(N / 16) x 2 elements (padded to 2 x F),
  // its fp32 master copy (4n) and bitsandbytes' state on it: state1 and state2 uint8 (2n), absmax1 and
  // absmax2 fp32 per block of 256 (2 x 4 x ceil(n / 256)).
  const std::int64_t n = ceil_div64(s.model.parameters(), 16) * 2;
  CHECK(state_elems(s.model, p).optimizer == n);
  CHECK(persistent_state(s.model, p)[2] == 4 * n + 2 * n + 8 * ceil_div64(n, 256));
}

TEST_CASE("optimizers: Adafactor keeps factored moments (rows + cols) per matrix", "[optimizers][memory]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  const Plan p = s.resolve(with(Optimizer::kAdafactor, Runtime::kFsdp2, 0));
  // DDP: every parameter whole. torch.optim.Adafactor: a matrix keeps row_var [rows, 1] and col_var [1,
  // cols], a vector variance like it, in fp32 (the parameters' dtype under bf16-mixed); `step` on the CPU.
  Bytes expected = 0;
  each_tensor(s.model, [&](const Layer&, const Tensor& t) {
    expected += t.dim1 > 1 ? round512(4 * t.dim0) + round512(4 * t.dim1) : round512(4 * t.dim0);
  });
  const auto ps = persistent_state(s.model, p);
  CHECK(ps[2] == expected);
  // Llama 3 8B: 1,000 times less than AdamW's 8 bytes per parameter.
  CHECK(ps[2] < s.model.parameters() * 8 / 1000);
  // FSDP1 hands it a flat 1-D shard: an unfactored variance of the shard (4 bytes per element).
  const Plan f1 = s.resolve(with(Optimizer::kAdafactor, Runtime::kFsdp1, 3));
  CHECK(persistent_state(s.model, f1)[2] == 4 * state_elems(s.model, f1).optimizer);
}

TEST_CASE("optimizers: SGD and Lion keep one moment, AdamW two", "[optimizers][memory]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  const Plan adamw = s.resolve(with(Optimizer::kAdamW));
  const Bytes steps = optimizer_step_tensors(s.model, adamw) * 512;  // fused AdamW's fp32 `step` per tensor
  const Bytes adam_state = persistent_state(s.model, adamw)[2] - steps;
  for (Optimizer o : {Optimizer::kSgd, Optimizer::kLion}) {
    const Plan p = s.resolve(with(o));
    CHECK(persistent_state(s.model, p)[2] * 2 == adam_state);
    CHECK(optimizer_step_tensors(s.model, p) == 0);
  }
  // Adam and AdamW allocate the same.
  CHECK(persistent_state(s.model, s.resolve(with(Optimizer::kAdam)))[2] ==
        persistent_state(s.model, adamw)[2]);
}

TEST_CASE("optimizers: Muon's state, its gathered matrix per rank and its all-gathers",
          "[optimizers][muon]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  const Plan p = s.resolve(with(Optimizer::kMuon));
  // State: a momentum buffer per block matrix shard (fp32), AdamW's two moments and fused `step` for the
  // embedding, head and norms.
  Bytes expected = 0;
  std::int64_t aux = 0, matrix_elems = 0;
  each_tensor(s.model, [&](const Layer& l, const Tensor& t) {
    const std::int64_t n = ceil_div64(t.dim0, 8) * t.dim1;
    if (l.block >= 0 && t.dim1 > 1) {
      expected += round512(4 * n);
      matrix_elems += t.numel();
    } else {
      expected += 2 * round512(4 * n) + 512;
      ++aux;
    }
  });
  CHECK(optimizer_step_tensors(s.model, p) == aux);
  CHECK(persistent_state(s.model, p)[2] == expected);

  Simulator sim(s.model, *s.cluster, *s.costs);
  const Result& r = sim.run(p);
  // Each of the 32 x 7 matrices gathered once over the 8 ranks: a ring all-gather sends 7/8 of the whole
  // fp32 update.
  const CommStats& g = r.comm[static_cast<int>(CommKind::kOptimizerAllGather)];
  CHECK(g.count == 32 * 7);
  CHECK(g.bytes_per_rank == Approx(7.0 / 8 * 4 * static_cast<double>(matrix_elems)).epsilon(1e-12));
  // The optimizer's transients peak at the largest matrix, 14336 x 4096 (w1, w2, w3), m = 4096, n = 14336:
  // the local update (1792 x 4096 x 4 B), the gathered fp32 matrix (n m x 4 B) and Newton-Schulz's working
  // set in bf16, X and its successor (2 x 2 m n) with the Gram matrix and its polynomial (2 x 2 m^2).
  const Bytes m = 4096, n = 14336;
  const Bytes transient = 1792 * 4096 * 4 + m * n * 4 + 4 * m * n + 4 * m * m;
  CHECK(transient == 566231040);
  CHECK(test::max_category_bytes(sim.program(), MemCategory::kOptimizer) == transient);

  // ZeRO-0 (DDP) gathers nothing: every rank holds the whole matrices.
  const Result r0 = s.run(with(Optimizer::kMuon, Runtime::kFsdp2, 0));
  CHECK(r0.comm[static_cast<int>(CommKind::kOptimizerAllGather)].count == 0);
}

TEST_CASE("optimizers: Muon's Newton-Schulz time is 5 x (4 m^2 n + 2 m^3) FLOPs per matrix",
          "[optimizers][muon]") {
  // Ideal constants: every GEMM at the dense bf16 peak (efficiency 1, no small-dimension roll-off), so the
  // orthogonalisation's time is its FLOPs over the peak plus its element-wise passes (12 B per element of
  // the whole matrix) over HBM. ZeRO-0 on one GPU: no gathers.
  const ClusterSpec spec = load_cluster_spec("dgx-h100");
  ComputeConstants k = default_compute_constants(spec.gpu.arch);
  k.gemm_efficiency_max = 1.0;
  k.gemm_half_dim = 0.0;
  const ModelGraph model = load_model("llama3-8b");
  Cluster cluster(spec, 1);
  CostModel costs(cluster, k);
  Plan base = with(Optimizer::kAdamW, Runtime::kFsdp2, 0);
  Plan muon = with(Optimizer::kMuon, Runtime::kFsdp2, 0);
  base = resolve_plan(base, model, cluster);
  muon = resolve_plan(muon, model, cluster);
  Simulator sim(model, cluster, costs);
  const double t_adamw = sim.run(base).optimizer_s;
  const double t_muon = sim.run(muon).optimizer_s;
  double flops = 0, full_elems = 0, matrix_elems = 0;
  for (const Layer* l : model.order())
    for (const Tensor& t : l->tensors) {
      if (l->block < 0 || t.dim1 <= 1) continue;
      const double a = static_cast<double>(std::min(t.dim0, t.dim1)),
                   b = static_cast<double>(std::max(t.dim0, t.dim1));
      flops += 5 * (4 * a * a * b + 2 * a * a * a);
      full_elems += a * b;
      matrix_elems += a * b;
    }
  // Llama 3 8B: 20.8 TFLOPs per block, 666 TFLOPs per step on every rank.
  CHECK(flops == Approx(666.0e12).epsilon(0.01));
  const double peak = spec.gpu.peak_bf16_flops, hbm = spec.gpu.hbm_Bps * k.hbm_efficiency;
  const double opt_Bps = spec.gpu.hbm_Bps * k.optimizer_efficiency;
  // The main step: Muon's local updates (42 B per matrix element) replace AdamW's 28 B on the matrices.
  const double main_delta = matrix_elems * (42.0 - 28.0) / opt_Bps;
  CHECK(t_muon - t_adamw == Approx(flops / peak + 12 * full_elems / hbm + main_delta).epsilon(1e-9));
}

TEST_CASE("optimizers: step traffic per optimizer against fused AdamW's", "[optimizers][time]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  auto opt_s = [&](Optimizer o, int zero = 3, Runtime rt = Runtime::kFsdp2) {
    return s.run(with(o, rt, zero)).optimizer_s;
  };
  const double adamw = opt_s(Optimizer::kAdamW);
  // 28 + 4 (gradient norm) B per parameter for AdamW; SGD 20 + 4, 8-bit AdamW 16 + 4.
  CHECK(opt_s(Optimizer::kSgd) == Approx(adamw * 24.0 / 32.0).epsilon(1e-9));
  CHECK(opt_s(Optimizer::kAdamW8bit) == Approx(adamw * 20.0 / 32.0).epsilon(1e-9));
  CHECK(opt_s(Optimizer::kAdam) == Approx(adamw).epsilon(1e-12));
  // Lion's eight unfused passes: 76 + 4 B.
  CHECK(opt_s(Optimizer::kLion) == Approx(adamw * 80.0 / 32.0).epsilon(1e-9));
  // Adafactor (DDP): its passes, 76 + 4 B per parameter, plus two device synchronisations per tensor.
  const double adamw0 = opt_s(Optimizer::kAdamW, 0);
  const std::int64_t tensors =
      optimizer_work(s.model, s.resolve(with(Optimizer::kAdafactor, Runtime::kFsdp2, 0))).tensors;
  CHECK(opt_s(Optimizer::kAdafactor, 0) ==
        Approx(adamw0 * 80.0 / 32.0 + static_cast<double>(tensors) * 2 * 15e-6).epsilon(1e-9));
}

TEST_CASE("optimizers: the combinations a runtime cannot run are refused with a reason",
          "[optimizers][plan]") {
  Setup s("llama3-8b", "dgx-h100", 16);
  auto refused = [&](Plan p, const char* what) {
    INFO(what);
    CHECK_THROWS_WITH(s.resolve(p), Catch::Matchers::Contains(what));
  };
  refused(with(Optimizer::kMuon, Runtime::kDeepSpeed, 2), "flat 1-D shards");
  refused(with(Optimizer::kMuon, Runtime::kFsdp1, 3), "flat 1-D shards");
  Plan tp = with(Optimizer::kMuon);
  tp.tp = 2;
  refused(tp, "second gather");
  refused(with(Optimizer::kAdafactor, Runtime::kFsdp2, 3), "DTensor");
  refused(with(Optimizer::kLion, Runtime::kMegatron, 1), "Adam (AdamW) or SGD");
  Plan off = with(Optimizer::kSgd, Runtime::kDeepSpeed, 2);
  off.offload = Offload::kOptimizer;
  refused(off, "host step");
  // What they can run.
  CHECK_NOTHROW(s.resolve(with(Optimizer::kSgd, Runtime::kMegatron, 1)));
  CHECK_NOTHROW(s.resolve(with(Optimizer::kAdafactor, Runtime::kDeepSpeed, 3)));
  CHECK_NOTHROW(s.resolve(with(Optimizer::kAdamW8bit, Runtime::kFsdp1, 3)));
  CHECK_NOTHROW(s.resolve(with(Optimizer::kMuon, Runtime::kFsdp2, 2)));
}
