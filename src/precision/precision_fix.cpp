// Automatic mixed-precision repair; see precision_fix.h for the three steps.
#include "precision/precision_fix.h"

#include <algorithm>
#include <set>

namespace ferry {

namespace {

// Keeps the candidates' order: the set as a list in topological order.
std::vector<std::string> ordered(const std::vector<std::string>& candidates, const std::set<std::string>& keep) {
  std::vector<std::string> out;
  for (const std::string& c : candidates)
    if (keep.count(c)) out.push_back(c);
  return out;
}

}  // namespace

StatusOr<FixSearchResult> search_fp32_set(const std::vector<std::string>& candidates, const FixEvaluator& evaluate,
                                          const FixSearchOptions& options) {
  FixSearchResult r;
  std::set<std::string> keep;
  auto probe = [&](const std::set<std::string>& set, bool locate) -> StatusOr<FixProbe> {
    ++r.probes;
    return evaluate(ordered(candidates, set), locate);
  };
  // 1. Greedy from the first diverging node.
  ASSIGN_OR_RETURN(FixProbe p, probe(keep, true));
  if (p.passes) {
    r.found = true;
    r.log.push_back("the target passes as it is: nothing to keep in fp32");
    return r;
  }
  for (int round = 0; round < options.max_greedy_rounds && !p.passes; ++round) {
    const std::string& node = p.first_diverging;
    if (node.empty() || keep.count(node) ||
        std::find(candidates.begin(), candidates.end(), node) == candidates.end())
      break;
    keep.insert(node);
    ASSIGN_OR_RETURN(p, probe(keep, true));
    r.log.push_back("greedy: keep '" + node + "' in fp32 -> " + (p.passes ? "passes" : "still fails"));
  }
  // 2. Bisection over prefixes of the candidates.
  if (!p.passes) {
    std::set<std::string> all(candidates.begin(), candidates.end());
    ASSIGN_OR_RETURN(FixProbe full, probe(all, false));
    if (!full.passes) {
      r.log.push_back("every lowered node in fp32 still fails: the difference is not from precision "
                      "(compare the devices at the same precision)");
      return r;
    }
    size_t lo = 0, hi = candidates.size();  // prefix hi passes; the answer lies in (lo, hi]
    while (lo + 1 < hi && r.probes < options.max_probes) {
      const size_t mid = (lo + hi) / 2;
      std::set<std::string> trial = keep;
      trial.insert(candidates.begin(), candidates.begin() + static_cast<long>(mid));
      ASSIGN_OR_RETURN(FixProbe q, probe(trial, false));
      if (q.passes) hi = mid;
      else lo = mid;
    }
    keep.insert(candidates.begin(), candidates.begin() + static_cast<long>(hi));
    r.log.push_back("bisection: the first " + std::to_string(hi) + " of " + std::to_string(candidates.size()) +
                    " lowered nodes in fp32 pass");
  }
  // 3. Pruning, latest nodes first (bisection's tail is the likeliest to be needed).
  std::vector<std::string> list = ordered(candidates, keep);
  int dropped = 0;
  for (auto it = list.rbegin(); it != list.rend() && r.probes < options.max_probes; ++it) {
    if (list.size() == 1) break;
    std::set<std::string> trial = keep;
    trial.erase(*it);
    ASSIGN_OR_RETURN(FixProbe q, probe(trial, false));
    if (q.passes) {
      keep = trial;
      ++dropped;
    }
  }
  if (dropped) r.log.push_back("pruning: " + std::to_string(dropped) + " node(s) were not needed");
  if (r.probes >= options.max_probes) r.log.push_back("probe budget reached: the set may not be minimal");
  r.found = true;
  r.keep_fp32 = ordered(candidates, keep);
  return r;
}

StatusOr<FixResult> fix_precision(Comparator* comparator, const SampleSource& samples, const std::string& config_path,
                                  const FixSearchOptions& options) {
  FixResult result;
  const PrecisionOptions base = comparator->target_precision();
  const std::vector<std::string> candidates = comparator->target_precision_report().lowered;
  bool first_probe = true;
  FixEvaluator evaluate = [&](const std::vector<std::string>& keep, bool locate) -> StatusOr<FixProbe> {
    PrecisionOptions p = base;
    p.keep_fp32.insert(p.keep_fp32.end(), keep.begin(), keep.end());
    RETURN_IF_ERROR(comparator->set_target_precision(p));
    ASSIGN_OR_RETURN(CompareResult r, comparator->run_target_only(samples, /*stop_at_first_failure=*/true));
    if (first_probe) result.target_ms_before = r.target_ms;
    first_probe = false;
    FixProbe probe;
    probe.passes = r.passed();
    if (!probe.passes && locate && r.samples > 0) {
      ASSIGN_OR_RETURN(CompareResult layers, comparator->run_per_layer(samples, r.samples - 1));
      if (layers.first_diverging) probe.first_diverging = layers.layers[*layers.first_diverging].node;
    }
    return probe;
  };
  ASSIGN_OR_RETURN(result.search, search_fp32_set(candidates, evaluate, options));
  if (!result.search.found) {
    RETURN_IF_ERROR(comparator->set_target_precision(base));
    return result;
  }
  // Name kept nodes by the ONNX nodes they cover, so the config also applies at other opt levels.
  const Graph& g = comparator->target_model().graph;
  for (const std::string& name : result.search.keep_fp32) {
    const Node* node = nullptr;
    for (const Node& n : g.nodes)
      if (n.name == name) node = &n;
    if (node && !node->origin.empty()) result.config_names.insert(result.config_names.end(), node->origin.begin(), node->origin.end());
    else result.config_names.push_back(name);
  }
  std::vector<std::string> all = base.keep_fp32;
  all.insert(all.end(), result.config_names.begin(), result.config_names.end());
  RETURN_IF_ERROR(write_precision_config(config_path, base.mode, all,
                                         "written by ferry compare --fix: nodes kept in fp32 so the target passes"));
  // Verify from the file, as a user would apply it.
  PrecisionOptions verify = base;
  verify.keep_fp32.clear();
  RETURN_IF_ERROR(load_precision_config(config_path, &verify));
  RETURN_IF_ERROR(comparator->set_target_precision(verify));
  ASSIGN_OR_RETURN(result.verified, comparator->run_target_only(samples, false));
  result.target_ms_after = result.verified.target_ms;
  return result;
}

}  // namespace ferry
