// The search space: which plan knobs are searched (a list of values each) and how `--fix KEY=VALUE` pins one.
// Every knob of the knob table is accepted: a searched knob's list is replaced, any other knob is set on the
// base plan every candidate starts from.
#include <algorithm>
#include <functional>

#include "planner/search.hpp"
#include "simulator/plan/plan.hpp"

namespace shardplan {

namespace {
using Assign = std::function<void(SearchSpace&, const std::vector<Plan>&)>;

template <class T, class F>
std::vector<T> each(const std::vector<Plan>& v, F f) {
  std::vector<T> out;
  for (const Plan& p : v) out.push_back(f(p));
  return out;
}

/// A dimension whose values are one Plan field.
template <class T>
Assign field(std::vector<T> SearchSpace::*dim, T Plan::*member) {
  return [dim, member](SearchSpace& s, const std::vector<Plan>& v) {
    s.*dim = each<T>(v, [member](const Plan& p) { return p.*member; });
  };
}

// The searched knobs: run-record key -> how a --fix list of values (each parsed into a Plan by the knob
// table) replaces the search dimension.
const std::vector<std::pair<std::string, Assign>>& dimensions() {
  static const std::vector<std::pair<std::string, Assign>> d = {
      {"runtime", field(&SearchSpace::runtimes, &Plan::runtime)},
      {"zero", field(&SearchSpace::zero, &Plan::zero)},
      {"shard_group", field(&SearchSpace::shard_groups, &Plan::shard_group)},
      {"tp", field(&SearchSpace::tp, &Plan::tp)},
      {"mbs", field(&SearchSpace::mbs, &Plan::mbs)},
      {"ac", field(&SearchSpace::ac, &Plan::ac)},
      {"wrap", field(&SearchSpace::wrap, &Plan::wrap)},
      {"prefetch", field(&SearchSpace::prefetch, &Plan::prefetch)},
      {"reshard_after_forward",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.reshard_after_forward = each<bool>(v, [](const Plan& p) { return p.reshard(); });
       }},
      {"reduce_dtype",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.reduce = each<Dtype>(v, [](const Plan& p) { return p.reduce(); });
       }},
      {"offload", field(&SearchSpace::offload, &Plan::offload)},
      {"compile", field(&SearchSpace::compile, &Plan::compile)},
      {"async_tp", field(&SearchSpace::async_tp, &Plan::async_tp)},
      {"fp8", field(&SearchSpace::fp8, &Plan::fp8)},
      {"pp", field(&SearchSpace::pp, &Plan::pp)},
      {"pp_schedule", field(&SearchSpace::pp_schedules, &Plan::pp_schedule)},
      {"virtual_stages", field(&SearchSpace::virtual_stages, &Plan::virtual_stages)},
      {"cp", field(&SearchSpace::cp, &Plan::cp)},
      {"ep", field(&SearchSpace::ep, &Plan::ep)},
      {"ep_backend",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.ep_backends = each<EpBackend>(v, [](const Plan& p) { return p.ep_dispatch(); });
       }},
      {"optimizer",
       [](SearchSpace& s, const std::vector<Plan>& v) {
         s.optimizers = each<Optimizer>(v, [](const Plan& p) { return p.optimizer; });
         s.base.optimizer = s.optimizers.front();
       }},
  };
  return d;
}

/// `v` split at commas into one Plan per value, each set through the knob table.
std::vector<Plan> parse_values(const Knob& k, const std::string& v, const std::string& where,
                               const std::function<std::string(const std::string&)>& value) {
  std::vector<Plan> values;
  std::size_t pos = 0;
  while (true) {
    const std::size_t c = v.find(',', pos);
    Plan one;
    set_knob(k, one, value(v.substr(pos, c == std::string::npos ? std::string::npos : c - pos)), where);
    values.push_back(one);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return values;
}
}  // namespace

const std::vector<std::string>& SearchSpace::searched_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (const auto& [name, assign] : dimensions()) k.push_back(name);
    return k;
  }();
  return keys;
}

void SearchSpace::fix(const std::string& kv) {
  auto eq = kv.find('=');
  if (eq == std::string::npos) throw InputError::flag("--fix", "expected KEY=VALUE, got \"" + kv + "\"");
  std::string key = kv.substr(0, eq), v = kv.substr(eq + 1);
  std::replace(key.begin(), key.end(), '-', '_');
  const Knob* k = find_knob(key);
  if (!k) {
    const std::vector<std::string> keys = knob_keys();
    std::string sug = did_you_mean_list(key, keys);
    throw InputError::flag("--fix", "unknown knob \"" + key + "\"" +
                                        (sug.empty() ? "" : " (did you mean \"" + sug + "\"?)") +
                                        "; knobs: " + join_names(keys));
  }
  const std::string where = "--fix " + key;
  // A switch named by its flag (foreach_optimizer) means what the flag sets: foreach_optimizer=true is
  // fused_optimizer=false.
  auto value = [&](const std::string& item) {
    if (k->kind != KnobKind::kSwitch || key == k->key || std::string(k->switch_sets) == "true") return item;
    return item == "true" ? std::string("false") : item == "false" ? std::string("true") : item;
  };
  fixed_keys.push_back(k->key);
  for (const auto& [name, assign] : dimensions()) {
    if (name != k->key) continue;
    assign(*this, parse_values(*k, v, where, value));
    return;
  }
  if (v.find(',') != std::string::npos && k->kind != KnobKind::kText)  // --fix pp_layers=3,4,4,3 is one value
    throw InputError::flag(where, "is not searched: give one value, got \"" + v + "\"");
  set_knob(*k, base, value(v), where);
  if (std::string(k->key) == "grad_accum") grad_accum = base.grad_accum;
  if (std::string(k->key) == "seq") seq = base.seq;
}

}  // namespace shardplan
