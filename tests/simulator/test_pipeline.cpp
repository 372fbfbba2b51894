// Pipeline parallelism (simulator/pipeline.hpp): schedule orders, the bubble, activations in flight, the
// stage split, point-to-point bytes, bad input, and pp = 1 leaving results unchanged.
#include <catch2/catch.hpp>
#include <numeric>
#include <string>

#include "sim_helpers.hpp"
#include "simulator/knobs.hpp"
#include "simulator/pipeline.hpp"

using namespace shardplan;
using Catch::Matchers::Contains;
using shardplan::test::Setup;

namespace {

PipelineInputs equal_stages(PpSchedule s, int pp, int V, int m, double f, double b, double p2p = 0) {
  PipelineInputs in;
  in.schedule = s;
  in.pp = pp;
  in.virtual_stages = V;
  in.micro_batches = m;
  in.p2p_s = p2p;
  StageCost c;
  c.fwd_s = f;
  c.bwd_s = b;
  c.bwd_input_s = b / 2;
  c.bwd_weight_s = b / 2;
  c.act_bytes = 1000;
  in.stages.assign(static_cast<std::size_t>(pp * V), c);
  return in;
}

int count_ops(const std::vector<PipeAction>& o, PipeOp op) {
  int n = 0;
  for (const PipeAction& a : o) n += a.op == op;
  return n;
}

}  // namespace

TEST_CASE("1F1B bubble is (p-1)/(m+p-1) for equal stages and free communication", "[simulator][pipeline]") {
  // Every rank computes m x (f + b); the last micro-batch's backward reaches stage 0 after the pipeline fills
  // and drains, (p - 1) x (f + b) later than a bubble-free run: makespan (m + p - 1)(f + b), so
  // bubble = 1 - p m (f + b) / (p (m + p - 1)(f + b)) = (p - 1) / (m + p - 1).
  for (int p : {2, 4, 8})
    for (int m : {p, 2 * p, 3 * p + 1}) {
      const PipelineRun r = run_pipeline(equal_stages(PpSchedule::k1F1B, p, 1, m, 1.0, 2.0));
      CHECK(r.makespan_s == Approx((m + p - 1) * 3.0));
      CHECK(r.bubble_fraction == Approx(static_cast<double>(p - 1) / (m + p - 1)));
    }
  // GPipe has the same bubble with equal stages (all forwards fill, all backwards drain).
  const PipelineRun g = run_pipeline(equal_stages(PpSchedule::kGpipe, 4, 1, 8, 1.0, 2.0));
  CHECK(g.bubble_fraction == Approx(3.0 / 11.0));
}

TEST_CASE("activations in flight: GPipe holds every micro-batch, 1F1B stage s holds min(p - s, m)",
          "[simulator][pipeline]") {
  const int p = 4;
  for (int m : {4, 6, 12}) {
    const PipelineRun g = run_pipeline(equal_stages(PpSchedule::kGpipe, p, 1, m, 1.0, 2.0));
    const PipelineRun o = run_pipeline(equal_stages(PpSchedule::k1F1B, p, 1, m, 1.0, 2.0));
    for (int s = 0; s < p; ++s) {
      // GPipe: every forward runs before the first backward.
      CHECK(g.stage_max_in_flight[static_cast<std::size_t>(s)] == m);
      // 1F1B: stage s warms up with min(m, p - s) forwards (Schedule1F1B), then one backward frees one per
      // forward.
      CHECK(o.stage_max_in_flight[static_cast<std::size_t>(s)] == std::min(p - s, m));
      // One stage per rank at 1000 bytes per micro-batch.
      CHECK(o.rank_peak_activation_bytes[static_cast<std::size_t>(s)] == 1000 * std::min(p - s, m));
    }
  }
}

TEST_CASE("interleaved 1F1B follows torch's warmup: (V-1) x per_round + 2 (p-1-r) forwards first",
          "[simulator][pipeline]") {
  // p 4, V 2, m 8: rounds = 2, 4 micro-batches per round; rank 0 warms up with 4 + 2 x 3 = 10 forwards
  // (stage 0 mb 0-3, stage 4 mb 0-3, stage 0 mb 4-5), the last rank with 4; the steady phase then issues
  // F before B (_get_1f1b_rank_ops), so the first backward follows warmup + 1 forwards.
  const auto order = pipeline_order(PpSchedule::kInterleaved1F1B, 4, 2, 8);
  int warm0 = 0;
  while (order[0][static_cast<std::size_t>(warm0)].op == PipeOp::kForward) ++warm0;
  CHECK(warm0 == 11);
  CHECK(order[0][4].stage == 4);
  CHECK(order[0][8].stage == 0);
  CHECK(order[0][8].micro_batch == 4);
  int warm3 = 0;
  while (order[3][static_cast<std::size_t>(warm3)].op == PipeOp::kForward) ++warm3;
  CHECK(warm3 == 5);
  // Each rank runs every (stage, micro-batch) once forward and once backward: 2 stages x 8.
  for (const auto& o : order) {
    CHECK(count_ops(o, PipeOp::kForward) == 16);
    CHECK(count_ops(o, PipeOp::kBackward) == 16);
  }
  // It runs to completion, and its bubble is below plain 1F1B's (p-1)/(m+p-1) = 3/11 with the same work
  // split into twice as many half-size stages.
  const PipelineRun r = run_pipeline(equal_stages(PpSchedule::kInterleaved1F1B, 4, 2, 8, 0.5, 1.0));
  CHECK(r.bubble_fraction < 3.0 / 11.0);
}

TEST_CASE("zero-bubble V schedules split backward into I and W and complete", "[simulator][pipeline]") {
  for (PpSchedule s : {PpSchedule::kZbv, PpSchedule::kDualPipeV}) {
    const int p = 4, m = 8;
    const auto order = pipeline_order(s, p, 2, m);
    for (std::size_t r = 0; r < order.size(); ++r) {
      const auto& o = order[r];
      // Two stages per rank, V-shaped: r and 2p - 1 - r; every micro-batch forwarded once on each.
      CHECK(count_ops(o, PipeOp::kForward) == 2 * m);
      // Every micro-batch's gradient: a full backward, or an I with its W.
      CHECK(count_ops(o, PipeOp::kBackward) + count_ops(o, PipeOp::kBackwardInput) == 2 * m);
      CHECK(count_ops(o, PipeOp::kBackwardInput) == count_ops(o, PipeOp::kBackwardWeight));
      for (const PipeAction& a : o)
        CHECK((a.stage == static_cast<int>(r) || a.stage == 2 * p - 1 - static_cast<int>(r)));
    }
    const PipelineRun run = run_pipeline(equal_stages(s, p, 2, m, 1.0, 2.0));
    CHECK(run.bubble_fraction >= 0);
    CHECK(run.bubble_fraction < 3.0 / 11.0);
  }
  // ZB-V with F = I = W (the paper's zero-bubble condition) and m >= 2p - 1: ZBV's own claim of no bubble in
  // the steady state leaves only the fill and drain, below 1F1B's (p - 1)/(m + p - 1).
  const PipelineRun z = run_pipeline(equal_stages(PpSchedule::kZbv, 4, 2, 16, 1.0, 2.0));
  CHECK(z.bubble_fraction < 3.0 / 19.0);
}

TEST_CASE("more micro-batches never increase the bubble fraction", "[simulator][pipeline]") {
  for (PpSchedule s :
       {PpSchedule::kGpipe, PpSchedule::k1F1B, PpSchedule::kInterleaved1F1B, PpSchedule::kZbv}) {
    const int V = s == PpSchedule::kGpipe || s == PpSchedule::k1F1B ? 1 : 2;
    double prev = 1.0;
    for (int m = 4; m <= 32; m += 4) {
      const PipelineRun r = run_pipeline(equal_stages(s, 4, V, m, 1.0, 2.0, 0.05));
      CHECK(r.bubble_fraction <= prev + 1e-12);
      prev = r.bubble_fraction;
    }
  }
}

TEST_CASE("torchtitan's stage split: embedding and head count as one layer each", "[simulator][pipeline]") {
  Plan p;
  p.pp = 4;
  p.virtual_stages = 1;
  // 32 blocks + 2 = 34 effective layers over 4 stages: 9, 9, 8, 8; the first loses one to the embedding,
  // the last one to norm + head (torchtitan _generate_llm_fqn_per_model_part): 8, 9, 8, 7.
  CHECK(stage_blocks(p, 32) == std::vector<int>{8, 9, 8, 7});
  // 126 blocks (405B), 16 stages: 128 / 16 = 8 each: 7, 8 x 14, 7.
  p.pp = 16;
  const auto b = stage_blocks(p, 126);
  CHECK(b.front() == 7);
  CHECK(b.back() == 7);
  CHECK(std::accumulate(b.begin(), b.end(), 0) == 126);
  p.pp_layers = {3, 4, 4, 3};
  p.pp = 4;
  CHECK(stage_blocks(p, 14) == std::vector<int>{3, 4, 4, 3});
}

TEST_CASE("bad pipeline plans: one clear InputError naming the knob", "[simulator][pipeline][plan]") {
  Setup s(ModelGraph::from_spec(test::small_llama(8)), load_cluster_spec("dgx-h100"), 16);
  Plan p;
  p.pp = 3;  // 16 GPUs: 3 does not divide
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp") && Contains("does not divide"));
  p.pp = 4;
  p.grad_accum = 2;  // 1F1B needs m >= pp
  CHECK_THROWS_WITH(s.resolve(p), Contains("--grad-accum") && Contains("1f1b"));
  p.grad_accum = 4;
  CHECK(s.resolve(p).dp == 4);  // 16 / (tp 1 x pp 4)
  p.pp_layers = {2, 2, 2};
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp-layers") && Contains("4 entries"));
  p.pp_layers = {2, 2, 2, 3};
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp-layers") && Contains("sum to 9"));
  p.pp_layers.clear();
  p.pp = 8;
  p.grad_accum = 8;
  p.pp_schedule = PpSchedule::kInterleaved1F1B;  // 16 stages > 8 blocks + 2
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp") && Contains("exceeds"));
  p.pp = 2;
  p.pp_schedule = PpSchedule::kZbv;
  p.virtual_stages = 3;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--virtual-stages") && Contains("exactly 2"));
  p.virtual_stages = 0;
  p.pp_schedule = PpSchedule::kDualPipeV;
  p.grad_accum = 3;  // 4 stages
  CHECK_THROWS_WITH(s.resolve(p), Contains("--grad-accum") && Contains("dualpipev"));
  p.pp_schedule = PpSchedule::k1F1B;
  p.grad_accum = 4;
  p.runtime = Runtime::kDeepSpeed;
  p.zero = 3;
  CHECK_THROWS_WITH(s.resolve(p), Contains("--pp") && Contains("ZeRO-2 and ZeRO-3"));
  p.zero = 1;
  CHECK(s.resolve(p).pp == 2);
  Plan bad;
  CHECK_THROWS_WITH(set_knob(*find_knob("pp_layers"), bad, "3,x", "--pp-layers"), Contains("--pp-layers"));
}

TEST_CASE("a pipelined step: per-stage memory, p2p bytes in closed form, FSDP not resharded",
          "[simulator][pipeline]") {
  // 8 blocks, 16 H100s: tp 2 x pp 4 x dp 2; 1F1B with 8 micro-batches of mbs 1 x seq 4096.
  Setup s(ModelGraph::from_spec(test::small_llama(8)), load_cluster_spec("dgx-h100"), 16);
  Plan p;
  p.tp = 2;
  p.pp = 4;
  p.grad_accum = 8;
  const Plan rp = s.resolve(p);
  CHECK(rp.dp == 2);
  // torchtitan under PP: reshard_after_forward=False, i.e. SHARD_GRAD_OP (--zero 2).
  CHECK(rp.zero == 2);
  CHECK(!rp.reshard());
  const Result r = s.run(p);
  REQUIRE(r.pipeline);
  const PipelineSummary& ps = *r.pipeline;
  CHECK(ps.stages == 4);
  REQUIRE(ps.stage_detail.size() == 4);
  // Split of 8 blocks + 2 over 4 stages: 10 / 4 = 2 rem 2 -> effective 3, 3, 2, 2 -> blocks 2, 3, 2, 1.
  CHECK(ps.stage_detail[0].blocks == 2);
  CHECK(ps.stage_detail[1].blocks == 3);
  CHECK(ps.stage_detail[3].blocks == 1);
  CHECK(ps.stage_detail[0].embedding);
  CHECK(ps.stage_detail[3].head);
  // 1F1B in flight: stage s holds min(4 - s, 8).
  for (int st = 0; st < 4; ++st)
    CHECK(ps.stage_detail[static_cast<std::size_t>(st)].activations_in_flight == 4 - st);
  // A middle rank sends each micro-batch's activations forward and its gradient backward:
  // 2 x 8 sends of mbs x seq x hidden x 2 bytes / tp = 4096 x 4096 x 2 / 2 bytes.
  CHECK(ps.p2p_bytes_per_step == Approx(2.0 * 8 * 4096.0 * 4096 * 2 / 2));
  // The reported peak is the busiest rank's, and every stage reports its rank's peak.
  Bytes max_peak = 0;
  for (const auto& d : ps.stage_detail) max_peak = std::max(max_peak, d.peak_bytes);
  CHECK(r.peak_bytes == max_peak);
  Bytes sum = 0;
  for (Bytes b : r.breakdown) sum += b;
  CHECK(sum == r.peak_bytes);
  // The step is at least the busiest rank's compute plus the bubble: every rank computes 8 micro-batches.
  CHECK(r.step_s >= 8 * (ps.stage_detail[1].fwd_s + ps.stage_detail[1].bwd_s));
  CHECK(ps.bubble_fraction > 0);
  CHECK(ps.bubble_fraction < 1);
  // Tokens per GPU: mbs x seq x m / (tp x pp).
  CHECK(r.tokens_per_s_per_gpu == Approx(4096.0 * 8 / 8 / r.step_s));
}

TEST_CASE("pp = 1 leaves the simulation unchanged", "[simulator][pipeline]") {
  Setup s("llama3-8b", "dgx-h100", 8);
  Plan p;
  p.grad_accum = 2;
  const Result a = s.run(p);
  Plan q = p;
  q.pp = 1;
  q.pp_schedule = PpSchedule::k1F1B;
  const Result b = s.run(q);
  CHECK(!a.pipeline);
  CHECK(a.peak_bytes == b.peak_bytes);
  CHECK(a.step_s == b.step_s);
  CHECK(s.resolve(p).dp == 8);
}
