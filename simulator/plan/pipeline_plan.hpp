// Pipeline parallelism's plan: the pipeline knobs checked against the mesh and the schedule, and the model's
// blocks split into stages (torchtitan's split, or --pp-layers) and assigned to pipeline ranks.
#pragma once
#include <vector>

#include "simulator/model/model.hpp"
#include "simulator/plan/plan_types.hpp"

namespace shardplan {

// ---- plan checks (called by resolve_plan) ----

/// pp >= 1, tp x pp divides the GPUs, a runtime that pipelines (InputError naming the flag otherwise).
void check_pipeline_mesh(const Plan& p, int gpus);
/// Resolves virtual_stages and checks the stage split and the micro-batch count against the schedule
/// (grad_accum already resolved: under PP it is the number of pipeline micro-batches per step).
void resolve_pipeline(Plan& p, const ModelGraph& model);

// ---- stages ----

/// Transformer blocks per stage, stage order (p.stages() entries): --pp-layers, or torchtitan 0.3.0's split
/// (distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part with first/last_stage_less_layers = 1:
/// the embedding and the norm + LM head each count as one layer). InputError when the split is impossible.
std::vector<int> stage_blocks(const Plan& p, int blocks);
/// The stages pipeline rank `rank` holds, in local order: loop style r, r + pp, ... (gpipe, 1f1b,
/// interleaved); V style {r, 2 pp - 1 - r} (zbv, dualpipev) — torchtitan
/// _get_pp_rank_to_stage_indices_mapping.
std::vector<int> rank_stages(const Plan& p, int rank);
/// Where each stage's slice of the model's execution order (ModelGraph::order()) begins: p.stages() + 1
/// indices, the last one order().size(). Blocks go by stage_blocks; layers before the first block (the
/// embedding) belong to stage 0, layers after the last block (final norm, head, loss) to the last stage.
std::vector<std::size_t> stage_layer_starts(const Plan& p, const ModelGraph& model);
/// The pipeline rank that holds stage `stage` (the inverse of rank_stages).
int stage_rank(const Plan& p, int stage);

}  // namespace shardplan
