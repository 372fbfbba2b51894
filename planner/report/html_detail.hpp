// Internal to planner/report/html*.cpp: the shared page pieces (layout constants, CSS page, cards, tables),
// the memory and Gantt charts of one step, and the pipeline charts, used by the simulate, plan, compare and
// validate pages (html.cpp, html_compare.cpp, html_validate.cpp).
#pragma once
#include <array>
#include <string>
#include <vector>

#include "planner/report/report.hpp"
#include "planner/report/svg.hpp"
#include "planner/search.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan::html_detail {

using svg::escape;
using svg::num;

inline constexpr double kChartW = 1300;  // SVG user units; the page is laid out for a 1400 px wide window
inline constexpr double kLeft = 150, kRight = 30;

// Category colours (colour-blind-friendly Tableau 10), in MemCategory order.
inline constexpr std::array<const char*, kMemCategories> kCategoryColor = {
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#bab0ac"};

// Time axis in seconds or milliseconds, whichever reads better for the step.
struct TimeUnit {
  double factor;
  const char* name;
};

/// Memory per category over the step, replayed from the program's effects in CPU issue order at issue time
/// (how torch.cuda.memory_allocated moves). A task that allocates then frees contributes its high point too.
struct MemoryCurve {
  std::vector<double> t_s;
  std::vector<std::array<double, kMemCategories>> by_cat;
  double max_total = 0;
};

struct TaskKind {
  const char* name;
  const char* color;
};
inline constexpr std::array<TaskKind, 9> kKinds = {{{"forward", "#5b8fd0"},
                                                    {"backward", "#2a4d7a"},
                                                    {"all_gather", "#59a14f"},
                                                    {"reduce_scatter", "#f28e2b"},
                                                    {"all_reduce", "#b07aa1"},
                                                    {"copy", "#9aa3ad"},
                                                    {"optimizer", "#edc948"},
                                                    {"other", "#7f7f7f"},
                                                    {"exposed communication", "#c62828"}}};

std::string page(const std::string& title, const std::string& body);
std::string gib(double bytes, int decimals = 2);
std::string card(const std::string& k, const std::string& v);
std::string json_cell(const Json& v);
std::string json_block(const std::string& id, const Json& j);
TimeUnit time_unit(double span_s);
std::string seconds(double s);
std::string breakdown_table(const Result& r);
std::string comm_table(const Result& r);
std::string kv_table(const Json& obj, const std::string& cls);
std::string plan_short(const Plan& p);
MemoryCurve replay_memory(const Program& prog, const Timeline& tl);
MemoryCurve downsample(const MemoryCurve& m, const svg::Scale& x, double px_per_bucket);
MemoryCurve clip(const MemoryCurve& m, double t1_s);
double last_effect_s(const MemoryCurve& m);
std::string memory_chart(const Result& r, const MemoryCurve& full, double t1_s, bool zoom, double H);
std::size_t task_kind(const Task& t);
void exposed_lane(svg::Canvas& c, const svg::Frame& f, double y, double h, const std::string& name,
                  const std::vector<std::pair<double, double>>& intervals, const TimeUnit& tu,
                  double report_s);
void memory_band(svg::Canvas& c, const svg::Frame& f, const Result& r, const TimeUnit& tu, double y0,
                 double h);
std::string gantt_chart(const Result& r);
/// A memory chart's reference lines (GiB axis): the GPU's capacity, what is usable beside the CUDA context
/// and NCCL, and the peak reserved memory where it is above the allocated peak.
void memory_reference_lines(svg::Canvas& c, const svg::Frame& f, const Result& r, double cap);
std::string pipeline_gantt(const Result& r);
std::string pipeline_memory_chart(const Result& r, double H);

}  // namespace shardplan::html_detail
