// HTML reports: one page per simulate / plan run, with inline SVG charts drawn by svg.hpp and the tables of
// the text report (html_detail.hpp: shared pieces and charts; compare and validate pages in html_compare.cpp,
// html_validate.cpp). No scripts beyond an inert JSON block, nothing fetched from the network.
#include "planner/report/html.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "planner/report/evidence.hpp"
#include "planner/report/html_detail.hpp"
#include "planner/report/margin.hpp"
#include "planner/report/svg.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

using namespace html_detail;

namespace {

std::string step_sections(const Result& r, const ReportInputs& in, const std::string& heading) {
  const Json rep = report_json(r, in);
  std::string b;
  b += "<section class=\"summary\">";
  if (!heading.empty()) b += "<h2>" + escape(heading) + "</h2>";
  b += "<div class=\"cards\">";
  b += card("memory", r.fits ? "<span class=\"badge ok\">fits</span>"
                             : "<span class=\"badge bad\">does not fit</span>");
  b += card("peak reserved + overhead",
            escape(gib(static_cast<double>(r.peak_reserved_bytes + r.overhead.total()))) +
                " <span class=\"note\">of " + escape(gib(static_cast<double>(r.capacity_bytes), 0)) +
                "</span>");
  b += card("peak allocated", escape(gib(static_cast<double>(r.peak_bytes))));
  b += card("step", escape(seconds(r.step_s)));
  b += card("tokens/s per GPU", escape(fmt::format("{:.0f}", r.tokens_per_s_per_gpu)));
  b += card("MFU", escape(fmt::format("{:.1f} %", 100 * r.mfu)));
  b += card("exposed communication", escape(seconds(r.exposed_comm_s)));
  b += "</div>";
  b += "<p class=\"sub\">peak at: " + escape(r.peak_phase) + "</p></section>\n";
  const MemoryCurve curve = replay_memory(r.detail->program, r.detail->timeline);
  const double end_s = std::max({r.detail->timeline.end_s, r.step_s, 1e-9});
  const double issue_s = last_effect_s(curve);
  const std::string whole_caption =
      "Memory allocated by the framework on the busiest GPU (what torch.cuda.memory_allocated reports), "
      "replayed per "
      "category in CPU issue order at the time each kernel is issued, on the same time axis as the timeline "
      "above. "
      "The caching allocator's rounding shows as the reserved line; CUDA context and NCCL buffers as the gap "
      "between "
      "the usable and the capacity lines.";
  if (r.pipeline && !r.pipeline->spans.empty()) {
    const PipelineSummary& ps = *r.pipeline;
    b +=
        "<section><h2>Timeline of the whole step</h2><figure>" + pipeline_gantt(r) +
        fmt::format(
            "<figcaption>All {} pipeline ranks over the {} step ({} schedule, {} stages, {} micro-batches, "
            "bubble {:.1f} %): each stage's forward and backward of every micro-batch (hover for stage and "
            "micro-batch; bars narrower than a pixel are merged). Red: the exposed communication of rank {} "
            "(the slowest, whose step the report gives) at its true share of each pixel: the first forwards' "
            "waits on the parameter all-gathers, the tensor-parallel collectives of every action, the "
            "reductions that outlast the compute. Under the lanes: the allocated memory of rank {} (the "
            "busiest).</figcaption></figure></section>\n",
            ps.pp, seconds(r.step_s), to_string(ps.schedule), ps.stages, ps.micro_batches,
            100 * ps.bubble_fraction, ps.slowest_rank, ps.busiest_rank);
    b +=
        "<section><h2>Memory of the busiest pipeline rank</h2><figure>" + pipeline_memory_chart(r, 400) +
        "<figcaption>Allocated memory of the busiest pipeline rank while each action runs (held state, the "
        "unsharded gradients accumulated between a stage's first and last backward, the other micro-batches' "
        "saved activations, the running action's working set), then the optimizer's tail. Its top is the "
        "reported peak allocated memory; the reserved line adds the caching allocator's "
        "rounding.</figcaption>"
        "</figure></section>\n";
  } else {
    b += "<section><h2>Timeline</h2><figure>" + gantt_chart(r) +
         "<figcaption>Kernels per lane (CUDA stream / NCCL communicator). Red bands: a collective runs while "
         "the compute "
         "lane is idle (exposed communication). Tasks narrower than a pixel are merged; hover for "
         "details. Under the lanes: memory allocated by the framework as the GPU runs, each task's "
         "allocations and frees placed at its kernel's start (the charts below place them when the CPU "
         "issues the kernel), with the reported peak marked at its task.</figcaption>"
         "</figure></section>\n";
    b += "<section><h2>Memory as the CPU issues the step</h2>";
    if (issue_s > 0 && issue_s < 0.5 * end_s) {
      // The CPU runs ahead of the GPU: every allocation happens early. Show that window first, then the whole
      // step.
      double t1 = issue_s * 1.04, lo = 0;
      svg::nice_range(lo, t1, 12, false);
      t1 = std::min(t1, end_s);
      b += "<figure>" + memory_chart(r, curve, t1, true, 400) +
           fmt::format(
               "<figcaption>The first {} of the step: the CPU issues kernels ahead of the GPU, and with them "
               "every allocation and free of the step, so memory moves only in this window. Memory allocated "
               "by "
               "the framework on the busiest GPU (torch.cuda.memory_allocated), replayed per category in CPU "
               "issue order.</figcaption></figure>",
               escape(seconds(t1)));
      b += "<figure>" + memory_chart(r, curve, end_s, false, 300) + "<figcaption>" + whole_caption +
           "</figcaption></figure>";
    } else {
      b += "<figure>" + memory_chart(r, curve, end_s, false, 440) + "<figcaption>" + whole_caption +
           "</figcaption></figure>";
    }
    b += "</section>\n";
  }
  b += "<section class=\"cols\"><div><h2>Memory breakdown at the peak</h2>" + breakdown_table(r) + "</div>";
  b += "<div><h2>Communication</h2>" + comm_table(r) +
       fmt::format(
           "<p class=\"note\">step {:.4f} s = compute {:.4f} s + exposed communication {:.4f} s + other; "
           "optimizer "
           "{:.4f} s</p>",
           r.step_s, r.compute_s, r.exposed_comm_s, r.optimizer_s) +
       "</div></section>\n";
  Json inputs = rep["inputs"];
  Json model_spec = inputs["model"]["spec"];
  inputs["model"].erase("spec");
  Json flat_inputs = {{"model", inputs["model"]["name"]},
                      {"parameters", inputs["model"]["parameters"]},
                      {"cluster", inputs["cluster"]["name"]},
                      {"gpu", inputs["cluster"]["gpu"]},
                      {"gpu_memory_bytes", inputs["cluster"]["gpu_memory_bytes"]},
                      {"gpus_per_node", inputs["cluster"]["gpus_per_node"]},
                      {"gpus", inputs["gpus"]},
                      {"calibration", inputs["calibration"].is_null() ? Json("none (datasheet defaults)")
                                                                      : inputs["calibration"]}};
  b += "<section class=\"cols\"><div><h2>Effective plan</h2>" + kv_table(rep["plan"], "plan") + "</div>";
  b += "<div><h2>Inputs</h2>" + kv_table(flat_inputs, "inputs") + "<h2>Model</h2>" +
       kv_table(model_spec, "model") + "</div></section>\n";
  b += "<details class=\"noprint\"><summary>report JSON (shardplan.report/1)</summary><pre>" +
       escape(rep.dump(1)) + "</pre></details>\n";
  return b;
}

}  // namespace

std::string html_simulate_report(const Result& r, const ReportInputs& in) {
  std::string b;
  b += "<h1>" +
       escape(fmt::format("{} on {} × {}", in.model->spec().name, in.cluster->gpus(),
                          in.cluster->spec().gpu.model)) +
       "</h1>";
  b += "<p class=\"sub\">" +
       escape(fmt::format("{} · {} · simulated step with {}", in.cluster->spec().name, plan_short(r.plan),
                          in.calibration.empty() ? "datasheet defaults" : "calibration " + in.calibration)) +
       "</p>\n";
  if (r.detail) b += step_sections(r, in, "");
  b += json_block("shardplan-report", report_json(r, in));
  return page(fmt::format("shardplan simulate — {}", in.model->spec().name), b);
}

// ------------------------------------------------------------------------------------------- plan report

namespace {

std::string plans_chart(const SearchOutcome& o) {
  const std::size_t n = o.plans.size();
  const double row_h = 30, top = 40;
  const double H = top + static_cast<double>(n) * row_h + 56;
  const double label_w = 470, mem_x = 985, mem_w = 150, bind_x = 1190;
  svg::Canvas c(kChartW, H,
                "Top plans by tokens per second per GPU, with peak memory and the binding constraint",
                "chart plans");
  double tmax = 0;
  for (const auto& r : o.plans) tmax = std::max(tmax, r.tokens_per_s_per_gpu);
  double lo = 0, hi = std::max(tmax, 1.0);
  svg::nice_range(lo, hi, 6, false);
  svg::Frame f;
  f.area = {label_w, top, mem_x - 40 - label_w, static_cast<double>(n) * row_h};
  f.x = {0, hi, f.area.x, f.area.right(), false};
  f.y = {0, 1, f.area.bottom(), f.area.y, false};
  c.text(f.area.x, 22, "throughput", "axis-title");
  c.text(mem_x, 22, "memory of capacity", "axis-title");
  c.text(bind_x, 22, "binding", "axis-title");
  svg::axes(
      c, f,
      svg::Axis{"tokens/s per GPU", svg::nice_ticks(0, hi, 6), [](double v) { return num(v, 0); }, true},
      svg::Axis{"", {}, {}, false});
  for (std::size_t i = 0; i < n; ++i) {
    const Result& r = o.plans[i];
    const double y = top + static_cast<double>(i) * row_h;
    c.open_group("plan-bar", fmt::format("data-rank=\"{}\"", i + 1));
    c.text(label_w - 10, y + row_h / 2 + 4, fmt::format("#{} {}", i + 1, plan_short(r.plan)), "bar-label",
           "end");
    const double w = f.x(r.tokens_per_s_per_gpu) - f.area.x;
    c.rect(f.area.x, y + 5, w, row_h - 10, i == 0 ? "#2a4d7a" : "#5b8fd0", "bar",
           fmt::format("{:.0f} tokens/s/GPU, step {:.3f} s, MFU {:.1f} %", r.tokens_per_s_per_gpu, r.step_s,
                       100 * r.mfu));
    c.text(f.area.x + w + 6, y + row_h / 2 + 4, fmt::format("{:.0f}", r.tokens_per_s_per_gpu), "bar-value");
    const double used = static_cast<double>(r.peak_reserved_bytes + r.overhead.total());
    const double cap = std::max(1.0, static_cast<double>(r.capacity_bytes));
    c.rect(mem_x, y + 8, mem_w, row_h - 16, "#e6e8ec", "mem-bg");
    c.rect(mem_x, y + 8, mem_w * std::min(1.0, used / cap), row_h - 16, used > cap ? "#c62828" : "#59a14f",
           "mem", fmt::format("{} of {}", gib(used), gib(cap)));
    c.text(mem_x + mem_w + 6, y + row_h / 2 + 4, fmt::format("{:.0f}%", 100 * used / cap), "bar-value");
    c.text(bind_x, y + row_h / 2 + 4, binding_constraint(r), "bar-value");
    c.close_group();
  }
  return c.str();
}

/// Why the recommendation is not a Pareto point that beats it on both charted axes: such a point is within
/// the tie tolerance of the fastest plan (or choose_plan would have taken it), and the first tie rule
/// separating the two decided.
std::string pareto_note(const SearchOutcome& o, const Result& r) {
  const Result& rec = o.plans[0];
  if (!(r.tokens_per_s_per_gpu > rec.tokens_per_s_per_gpu && r.headroom_bytes() > rec.headroom_bytes()))
    return r.tokens_per_s_per_gpu > rec.tokens_per_s_per_gpu ? "faster than #1, less headroom"
                                                             : "more headroom than #1, slower";
  const TieKeys a = tie_keys(rec), b = tie_keys(r);
  const std::array<int, 4> ka = {a.memory_risk, a.parallel_dims, a.runtime_rank, a.non_default_knobs},
                           kb = {b.memory_risk, b.parallel_dims, b.runtime_rank, b.non_default_knobs};
  for (std::size_t i = 0; i < ka.size(); ++i)
    if (ka[i] != kb[i])
      return fmt::format(
          "faster and more headroom than #1, within the model's {:.1f} % error: a tie, which #1 "
          "wins by the rule \"{}\"",
          100 * o.tie_tolerance, tie_rule_names()[i]);
  return "faster and more headroom than #1, within the model's error; #1 has fewer network bytes per GPU";
}

/// The Pareto front of the search: memory headroom (x) against tokens/s per GPU (y), each point a plan no
/// fitting plan beats on tokens/s, headroom and network bytes per GPU together (the third axis in the
/// tooltip). The listed plans are marked #k over the front; every other point is labelled Pk and listed in
/// the table below the chart with why it is not the recommendation when it beats #1 on both axes.
std::string pareto_chart(const SearchOutcome& o, std::vector<const Result*>& labelled) {
  const double H = 380, left = 90, top = 30, right = 300, bottom = 60;
  svg::Canvas c(kChartW, H, "Pareto front: tokens per second per GPU against memory headroom",
                "chart pareto");
  auto hx = [](const Result& r) {
    return static_cast<double>(r.headroom_bytes()) / static_cast<double>(kGiB);
  };
  double xlo = 0, xhi = 1, ylo = 0, yhi = 1;
  bool first = true;
  auto extend = [&](const Result& r) {
    if (first) xlo = xhi = hx(r), ylo = yhi = r.tokens_per_s_per_gpu, first = false;
    xlo = std::min(xlo, hx(r)), xhi = std::max(xhi, hx(r));
    ylo = std::min(ylo, r.tokens_per_s_per_gpu), yhi = std::max(yhi, r.tokens_per_s_per_gpu);
  };
  for (const auto& r : o.pareto) extend(r);
  for (const auto& r : o.plans) extend(r);
  xlo = std::min(0.0, xlo);
  if (yhi - ylo < 1) ylo -= 1, yhi += 1;
  svg::nice_range(xlo, xhi, 6, false);
  svg::nice_range(ylo, yhi, 6, false);
  svg::Frame f;
  f.area = {left, top, kChartW - left - right, H - top - bottom};
  f.x = {xlo, xhi, f.area.x, f.area.right(), false};
  f.y = {ylo, yhi, f.area.bottom(), f.area.y, false};
  svg::axes(
      c, f,
      svg::Axis{"memory headroom (GiB)", svg::nice_ticks(xlo, xhi, 6), [](double v) { return num(v, 1); },
                true},
      svg::Axis{"tokens/s per GPU", svg::nice_ticks(ylo, yhi, 6), [](double v) { return num(v, 0); }, true});
  auto tip = [](const Result& r, const std::string& what) {
    return fmt::format("{}: {}; {:.0f} tokens/s/GPU, {:.1f} GiB headroom, {:.2f} GB network per GPU per step",
                       what, plan_family(r.plan), r.tokens_per_s_per_gpu,
                       static_cast<double>(r.headroom_bytes()) / static_cast<double>(kGiB),
                       1e-9 * network_bytes_per_gpu(r));
  };
  labelled.clear();
  for (const auto& r : o.pareto) {
    const bool listed =
        std::any_of(o.plans.begin(), o.plans.end(), [&](const Result& p) { return p.plan == r.plan; });
    const double x = f.x(hx(r)), y = f.y(r.tokens_per_s_per_gpu);
    if (listed) {
      c.circle(x, y, 3.5, "#9aa3ad", "point", tip(r, "Pareto (listed)"));
      continue;
    }
    labelled.push_back(&r);
    const std::string name = fmt::format("P{}", labelled.size());
    c.open_group("pareto-point", fmt::format("data-label=\"{}\"", name));
    c.circle(x, y, 3.5, "#9aa3ad", "point", tip(r, name));
    c.text(x + 6, y + 12, name, "point-label");
    c.close_group();
  }
  for (std::size_t i = o.plans.size(); i-- > 0;) {
    const Result& r = o.plans[i];
    const double x = f.x(hx(r)), y = f.y(r.tokens_per_s_per_gpu);
    c.circle(x, y, i == 0 ? 8 : 5.5, i == 0 ? "#c62828" : "#4e79a7", i == 0 ? "recommended" : "alternative",
             tip(r, i == 0 ? "recommended" : fmt::format("#{}", i + 1)));
    c.text(x + 9, y - 6, fmt::format("#{}", i + 1), "bar-value");
  }
  const double lx = f.area.right() + 30;
  c.circle(lx, top + 10, 8, "#c62828", "legend");
  c.text(lx + 14, top + 14, "#1 recommended", "bar-value");
  c.circle(lx, top + 34, 5.5, "#4e79a7", "legend");
  c.text(lx + 14, top + 38, "#2+ listed plans (table)", "bar-value");
  c.circle(lx, top + 58, 3.5, "#9aa3ad", "legend");
  c.text(lx + 14, top + 62, fmt::format("Pareto front ({} plans)", o.pareto.size()), "bar-value");
  c.text(lx, top + 86, "Pk: a front plan not listed,", "bar-value");
  c.text(lx, top + 102, " described below the chart", "bar-value");
  return c.str();
}

/// The table of the Pareto points the chart labels Pk.
std::string pareto_table(const SearchOutcome& o, const std::vector<const Result*>& labelled) {
  if (labelled.empty()) return "";
  std::string b =
      "<table class=\"pareto\"><tr><th>point</th><th>plan</th><th class=\"n\">tokens/s/GPU</th><th "
      "class=\"n\">headroom</th><th class=\"n\">network per GPU</th><th>against #1</th></tr>\n";
  for (std::size_t i = 0; i < labelled.size(); ++i) {
    const Result& r = *labelled[i];
    b += fmt::format(
        "<tr><td>P{}</td><td>{}</td><td class=\"n\">{:.0f}</td><td class=\"n\">{}</td><td "
        "class=\"n\">{:.2f} GB</td><td>{}</td></tr>\n",
        i + 1,
        escape(plan_short(r.plan) + (r.plan.compile ? " compile" : "") +
               (r.plan.async_tp ? " async-tp" : "")),
        r.tokens_per_s_per_gpu, gib(static_cast<double>(r.headroom_bytes())), 1e-9 * network_bytes_per_gpu(r),
        escape(pareto_note(o, r)));
  }
  return b + "</table>\n";
}

}  // namespace

std::string html_plan_report(const SearchOutcome& o, const ModelGraph& model, const Cluster& cluster) {
  std::string b;
  b += "<h1>" +
       escape(fmt::format("Plan search: {} on {} × {}", model.spec().name, cluster.gpus(),
                          cluster.spec().gpu.model)) +
       "</h1>";
  b += "<p class=\"sub\">" +
       escape(
           fmt::format("{} · {} candidates considered, {} simulated, {} fit (headroom {:.0f} %) in {:.2f} s",
                       cluster.spec().name, o.stats.considered, o.stats.evaluated, o.stats.fitting,
                       100 * o.headroom, o.stats.seconds)) +
       "</p>\n";
  if (!o.explanation.empty()) b += "<p style=\"white-space: pre-line\">" + escape(o.explanation) + "</p>\n";
  ReportInputs ri{&model, &cluster, ""};
  if (o.plans.empty()) {
    b += "<section><h2>No plan fits</h2>";
    if (o.closest)
      b += "<p>" +
           escape(fmt::format("Closest: {} — over by {}.", plan_short(o.closest->plan),
                              gib(static_cast<double>(o.closest_over_bytes)))) +
           "</p>";
    if (!o.binding_hint.empty()) b += "<p>" + escape("What would help most: " + o.binding_hint) + "</p>";
    b += "</section>\n";
  } else {
    b += "<section><h2>Recommendation and alternatives</h2><figure>" + plans_chart(o) +
         "<figcaption>Bars: predicted tokens/s per GPU (#1 is the recommendation; then the fastest plan "
         "when the tie rules chose another; then the fastest plan of each other family: runtime × TP × PP × "
         "CP × EP × AC × HSDP). Beside: peak reserved memory plus "
         "runtime overhead as a share of GPU memory, and the constraint that binds the "
         "plan.</figcaption></figure>";
    if (!o.pareto.empty()) {
      std::vector<const Result*> labelled;
      const std::string chart = pareto_chart(o, labelled);  // fills `labelled` for the table below
      b += "<figure>" + chart +
           "<figcaption>Pareto front of the fitting plans over tokens/s per GPU, memory headroom and network "
           "bytes per GPU per step (grey); the listed plans (#k, the table above). Every other front plan is "
           "labelled Pk and described below, with why it is not the recommendation where it beats #1 on both "
           "axes (the third axis, network bytes, or a tie within the model's throughput error decided by the "
           "tie rules).</figcaption></figure>" +
           pareto_table(o, labelled);
    }
    b += "<table class=\"plans\"><tr><th>#</th><th>plan</th><th class=\"n\">tokens/s/GPU</th><th "
         "class=\"n\">step (s)</th>"
         "<th class=\"n\">vs fastest</th><th class=\"n\">MFU</th><th class=\"n\">peak + "
         "overhead</th><th>binding</th></tr>\n";
    for (std::size_t i = 0; i < o.plans.size(); ++i) {
      const Result& r = o.plans[i];
      const std::string vs = i >= o.alternatives.size() ? std::string("—")
                             : o.alternatives[i].delta_fastest == 0
                                 ? std::string("fastest")
                                 : fmt::format("{:+.1f} % ({})", 100 * o.alternatives[i].delta_fastest,
                                               o.alternatives[i].within_error ? "a tie" : "beyond error");
      b += fmt::format(
          "<tr><td>{}</td><td>{}</td><td class=\"n\">{:.0f}</td><td class=\"n\">{:.4f}</td>"
          "<td class=\"n\">{}</td><td class=\"n\">{:.1f} %</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
          i + 1,
          escape(plan_short(r.plan) + (r.plan.compile ? " compile" : "") +
                 (r.plan.async_tp ? " async-tp" : "") +
                 (r.plan.fp8 != Fp8::kNone ? std::string(" fp8=") + to_string(r.plan.fp8) : "") +
                 (r.plan.cp > 1 ? " cp" + std::to_string(r.plan.cp) : "") +
                 (r.plan.ep > 1 ? " ep" + std::to_string(r.plan.ep) : "")),
          r.tokens_per_s_per_gpu, r.step_s, escape(vs), 100 * r.mfu,
          gib(static_cast<double>(r.peak_reserved_bytes + r.overhead.total())),
          escape(binding_constraint(r)));
    }
    b += "</table></section>\n";
  }
  if (!o.stats.rejections.count.empty()) {
    b += "<section><h2>Rejected candidates</h2><table class=\"rejections\"><tr><th>reason</th><th "
         "class=\"n\">count</th>"
         "<th>example</th></tr>";
    for (const auto& [reason, count] : o.stats.rejections.count) {
      auto ex = o.stats.rejections.example.find(reason);
      b += fmt::format("<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>", escape(to_string(reason)),
                       count, escape(ex == o.stats.rejections.example.end() ? "" : ex->second));
    }
    b += "</table></section>\n";
  }
  if (!o.plans.empty()) {
    const Result& r = o.plans[0];  // the search keeps the recommended plan's detail run
    if (r.detail) b += step_sections(r, ri, "Recommended plan: " + plan_short(r.plan));
    Json doc = {{"schema", "shardplan.report/1"}, {"plans", Json::array()}};
    for (const auto& p : o.plans) doc["plans"].push_back(report_json(p, ri));
    b += json_block("shardplan-plans", doc);
  }
  return page(fmt::format("shardplan plan — {}", model.spec().name), b);
}

// ------------------------------------------------------------------------------------------- compare

}  // namespace shardplan
