// Fixtures shared by the simulator, planner and report tests: the model + cluster + cost-model bundle a
// Simulator (or search_plans) points to, and whole-file text I/O.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "simulator/cost/cost_model.hpp"
#include "simulator/model/model_graph.hpp"
#include "simulator/model/presets.hpp"
#include "simulator/plan/plan_types.hpp"
#include "simulator/simulate/simulate.hpp"
#include "topologies/cluster.hpp"

namespace shardplan::fixture {

/// Owns what a Simulator points to (model, cluster, cost model); not movable once built.
struct Setup {
  ModelGraph model;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<CostModel> costs;
  Setup(ModelGraph m, ClusterSpec spec, int gpus)
      : model(std::move(m)),
        cluster(std::make_unique<Cluster>(std::move(spec), gpus)),
        costs(std::make_unique<CostModel>(*cluster)) {}
  Setup(const std::string& model_name, const std::string& cluster_name, int gpus)
      : Setup(load_model(model_name), load_cluster_spec(cluster_name), gpus) {}
  Plan resolve(Plan p, std::int64_t global_batch = 0) const {
    return resolve_plan(p, model, *cluster, global_batch);
  }
  Result run(Plan p, bool detail = false) const {
    Simulator sim(model, *cluster, *costs);
    return sim.run(resolve(p), detail);
  }
};

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace shardplan::fixture
