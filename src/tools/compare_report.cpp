// JSON and HTML reports of `ferry compare`; see compare_report.h.
#include "tools/compare_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace ferry::cli {

using nlohmann::json;

namespace {

// JSON has no inf/NaN: such metrics become strings.
json number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json metrics_json(const TensorMetrics& m) {
  json j = {{"cosine", number(m.cosine)},       {"max_abs", number(m.max_abs)}, {"mean_abs", number(m.mean_abs)},
            {"max_rel", number(m.max_rel)},     {"rmse", number(m.rmse)},       {"ref_max_abs_value", number(m.ref_max_abs_value)},
            {"ref_nan", m.ref_nan},             {"ref_inf", m.ref_inf},         {"target_nan", m.target_nan},
            {"target_inf", m.target_inf}};
  if (!m.mismatch.empty()) j["mismatch"] = m.mismatch;
  return j;
}

double as_double(const json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string s = v.is_string() ? v.get<std::string>() : "nan";
  return s == "inf" ? INFINITY : s == "-inf" ? -INFINITY : NAN;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fmt(double v, const char* f = "%.6g") {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// One line chart over the layers: y(i) for each layer, an optional threshold line, the first
// diverging layer marked. `log_scale` plots log10 (for errors).
std::string svg_chart(const std::string& id, const std::string& title, const std::vector<double>& ys, double threshold,
                      bool log_scale, long first_diverging, const std::vector<std::string>& labels) {
  const double w = 960, h = 260, left = 60, right = 20, top = 30, bottom = 30;
  std::vector<double> v;
  for (double y : ys) {
    double t = y;
    if (!std::isfinite(t)) t = log_scale ? 1e6 : 0.0;  // off the chart: drawn at the edge
    if (log_scale) t = std::log10(std::max(t, 1e-12));
    v.push_back(t);
  }
  double lo = 0, hi = 1;
  if (!v.empty()) {
    lo = *std::min_element(v.begin(), v.end());
    hi = *std::max_element(v.begin(), v.end());
  }
  double th = log_scale ? std::log10(std::max(threshold, 1e-12)) : threshold;
  lo = std::min(lo, th);
  hi = std::max(hi, th);
  if (hi - lo < 1e-9) hi = lo + 1;
  const size_t n = std::max<size_t>(v.size(), 2);
  auto X = [&](size_t i) { return left + (w - left - right) * static_cast<double>(i) / static_cast<double>(n - 1); };
  auto Y = [&](double y) { return top + (h - top - bottom) * (1.0 - (y - lo) / (hi - lo)); };
  std::ostringstream s;
  s << "<svg id=\"" << id << "\" class=\"chart\" viewBox=\"0 0 " << w << " " << h << "\" width=\"" << w << "\" height=\"" << h
    << "\" xmlns=\"http://www.w3.org/2000/svg\" data-points=\"" << v.size() << "\">\n";
  s << "<text x=\"" << left << "\" y=\"18\" class=\"ct\">" << esc(title) << "</text>\n";
  s << "<line x1=\"" << left << "\" y1=\"" << Y(lo) << "\" x2=\"" << w - right << "\" y2=\"" << Y(lo) << "\" class=\"axis\"/>\n";
  s << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << Y(lo) << "\" class=\"axis\"/>\n";
  s << "<text x=\"4\" y=\"" << Y(hi) + 4 << "\" class=\"tick\">" << (log_scale ? "1e" + fmt(hi, "%.1f") : fmt(hi, "%.4g")) << "</text>\n";
  s << "<text x=\"4\" y=\"" << Y(lo) + 4 << "\" class=\"tick\">" << (log_scale ? "1e" + fmt(lo, "%.1f") : fmt(lo, "%.4g")) << "</text>\n";
  s << "<line x1=\"" << left << "\" y1=\"" << Y(th) << "\" x2=\"" << w - right << "\" y2=\"" << Y(th)
    << "\" class=\"threshold\"><title>threshold " << fmt(threshold) << "</title></line>\n";
  if (first_diverging >= 0 && static_cast<size_t>(first_diverging) < v.size()) {
    const double x = X(static_cast<size_t>(first_diverging));
    s << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << Y(lo) << "\" class=\"diverge\"/>\n";
    s << "<text x=\"" << x + 4 << "\" y=\"" << top + 10 << "\" class=\"divergetext\">first diverging: "
      << esc(labels[static_cast<size_t>(first_diverging)]) << "</text>\n";
  }
  s << "<polyline class=\"series\" points=\"";
  for (size_t i = 0; i < v.size(); ++i) s << X(i) << "," << Y(v[i]) << " ";
  s << "\"/>\n";
  for (size_t i = 0; i < v.size(); ++i)
    s << "<circle cx=\"" << X(i) << "\" cy=\"" << Y(v[i]) << "\" r=\"2.5\" class=\"pt"
      << (static_cast<long>(i) == first_diverging ? " bad" : "") << "\"><title>" << i << " " << esc(labels[i]) << ": "
      << fmt(ys[i]) << "</title></circle>\n";
  s << "</svg>\n";
  return s.str();
}

}  // namespace

json compare_to_json(const CompareResult& r, const CompareOptions& o, const std::string& model_path) {
  json j;
  j["model"] = model_path;
  j["ref"] = o.ref.text;
  j["target"] = o.target.text;
  j["thresholds"] = {{"cosine_min", o.thresholds.cosine_min}, {"max_abs", o.thresholds.max_abs}};
  j["thresholds"]["max_abs_checked"] = o.thresholds.check_max_abs;
  j["samples"] = r.samples;
  j["samples_passed"] = r.samples_passed;
  j["pass_rate"] = r.samples ? static_cast<double>(r.samples_passed) / static_cast<double>(r.samples) : 0.0;
  j["passed"] = r.passed();
  j["failing_samples"] = r.failing_samples;
  j["ref_ms_per_sample"] = r.ref_ms;
  j["target_ms_per_sample"] = r.target_ms;
  j["target_precision"] = {{"mode", precision_mode_name(o.target.mode)},
                           {"nodes_lowered", r.target_precision.nodes_lowered},
                           {"nodes_computed_in_fp32", r.target_precision.nodes_computed_in_fp32},
                           {"nodes_kept_fp32", r.target_precision.nodes_kept_fp32},
                           {"casts_inserted", r.target_precision.casts_inserted}};
  json outs = json::array();
  for (const OutputRecord& rec : r.outputs) {
    json e = {{"name", rec.name},
              {"worst", metrics_json(rec.worst)},
              {"mean_cosine", number(rec.mean_cosine)},
              {"mean_max_abs", number(rec.mean_max_abs)},
              {"samples_passed", rec.samples_passed},
              {"passed", rec.samples_passed == static_cast<int64_t>(r.samples)}};
    if (!rec.first_failing_sample.empty()) {  // why it failed: each criterion, its value and threshold
      json failed = json::array();
      for (const FailedCriterion& f : failed_criteria(rec.first_failure, o.thresholds))
        failed.push_back({{"criterion", f.criterion}, {"value", number(f.value)}, {"threshold", number(f.threshold)}, {"text", f.text}});
      e["first_failure"] = {{"sample", rec.first_failing_sample}, {"failed", failed}};
    }
    if (rec.rows > 0) {
      e["top1_agreement"] = static_cast<double>(rec.top1_agree) / static_cast<double>(rec.rows);
      if (rec.top5_defined) e["top5_agreement"] = static_cast<double>(rec.top5_agree) / static_cast<double>(rec.rows);
      e["rows"] = rec.rows;
    }
    outs.push_back(e);
  }
  j["outputs"] = outs;
  if (!r.layers.empty()) {
    json layers = json::array();
    for (const LayerRecord& l : r.layers)
      layers.push_back({{"node", l.node}, {"op", l.op}, {"origin", l.origin}, {"value", l.value},
                        {"metrics", metrics_json(l.worst)}, {"mean_cosine", number(l.mean_cosine)}, {"passed", l.passes}});
    j["layers"] = layers;
    if (r.first_diverging) {
      const LayerRecord& l = r.layers[*r.first_diverging];
      j["first_diverging"] = {{"index", *r.first_diverging}, {"node", l.node}, {"op", l.op}, {"origin", l.origin}, {"value", l.value}};
    } else {
      j["first_diverging"] = nullptr;
    }
  }
  if (r.first_non_finite)
    j["first_non_finite"] = {{"node", r.first_non_finite->node}, {"op", r.first_non_finite->op},
                             {"value", r.first_non_finite->value}, {"nan", r.first_non_finite->count.nan},
                             {"inf", r.first_non_finite->count.inf}, {"sample", r.first_non_finite_sample}};
  return j;
}

void add_fix_json(json* doc, const FixResult& fix, const std::string& config_path) {
  json f = {{"found", fix.search.found}, {"nodes", fix.search.keep_fp32}, {"size", fix.search.keep_fp32.size()},
            {"config_names", fix.config_names}, {"probes", fix.search.probes}, {"log", fix.search.log}};
  if (fix.search.found) {
    f["config"] = config_path;
    f["verified_passed"] = fix.verified.passed();
    f["verified_samples_passed"] = fix.verified.samples_passed;
    f["target_ms_before"] = fix.target_ms_before;
    f["target_ms_after"] = fix.target_ms_after;
  }
  (*doc)["fix"] = f;
}

Status write_compare_html(const std::string& path, const json& doc) {
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ferry compare: " << esc(doc.value("model", "")) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;font-size:13px}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td.l,th.l{text-align:left}"
       "tr.fail td{background:#fde2e2}tr.first td{background:#f8b4b4;font-weight:bold}"
       ".pass{color:#137333}.failtxt{color:#b3261e}.chart{display:block;margin:8px 0;border:1px solid #eee}"
       ".axis{stroke:#888}.series{fill:none;stroke:#1a73e8;stroke-width:1.5}.pt{fill:#1a73e8}.pt.bad{fill:#d93025}"
       ".threshold{stroke:#f29900;stroke-dasharray:4 3}.diverge{stroke:#d93025;stroke-width:2}"
       ".divergetext{fill:#d93025;font-size:12px}.ct{font-size:14px;font-weight:bold}.tick{font-size:10px;fill:#555}</style>\n"
    << "</head><body>\n";
  const bool passed = doc.value("passed", false);
  h << "<h1>ferry compare</h1>\n<p>model <code>" << esc(doc.value("model", "")) << "</code>: reference <b>"
    << esc(doc.value("ref", "")) << "</b> vs target <b>" << esc(doc.value("target", "")) << "</b> — <span id=\"verdict\" class=\""
    << (passed ? "pass\">PASS" : "failtxt\">FAIL") << "</span>, " << doc.value("samples_passed", 0) << "/"
    << doc.value("samples", 0) << " samples pass (cosine &ge; " << fmt(doc["thresholds"].value("cosine_min", 0.0))
    << ", max abs &le; "
    << (doc["thresholds"].value("max_abs_checked", true) ? fmt(doc["thresholds"].value("max_abs", 0.0))
                                                        : std::string("(not judged: int8 model)"))
    << ").</p>\n";
  if (doc.contains("outputs") && doc["outputs"].is_array())
    for (const json& o : doc["outputs"])
      if (o.contains("first_failure"))
        for (const json& f : o["first_failure"]["failed"])
          h << "<p class=\"failtxt\">output <b>" << esc(o.value("name", "")) << "</b> fails on sample "
            << esc(o["first_failure"].value("sample", "")) << ": " << esc(f.value("text", "")) << "</p>\n";
  if (doc.contains("first_non_finite"))
    h << "<p class=\"failtxt\">First NaN/inf: node <b>" << esc(doc["first_non_finite"].value("node", "")) << "</b> ("
      << esc(doc["first_non_finite"].value("op", "")) << ") in sample " << esc(doc["first_non_finite"].value("sample", ""))
      << ".</p>\n";
  h << "<h2>Outputs</h2>\n<table id=\"outputs\"><tr><th class=\"l\">output</th><th>worst cosine</th><th>mean cosine</th>"
       "<th>worst max abs</th><th>mean abs</th><th>max rel</th><th>RMSE</th><th>NaN/inf (target)</th><th>samples passed</th>"
       "<th>top-1 agree</th><th>top-5 agree</th></tr>\n";
  for (const json& o : doc["outputs"]) {
    const json& m = o["worst"];
    h << "<tr class=\"" << (o.value("passed", false) ? "" : "fail") << "\"><td class=\"l\">" << esc(o.value("name", ""))
      << "</td><td>" << fmt(as_double(m["cosine"])) << "</td><td>" << fmt(as_double(o["mean_cosine"])) << "</td><td>"
      << fmt(as_double(m["max_abs"])) << "</td><td>" << fmt(as_double(m["mean_abs"])) << "</td><td>"
      << fmt(as_double(m["max_rel"])) << "</td><td>" << fmt(as_double(m["rmse"])) << "</td><td>"
      << m.value("target_nan", 0) << "/" << m.value("target_inf", 0) << "</td><td>" << o.value("samples_passed", 0)
      << "</td><td>" << (o.contains("top1_agreement") ? fmt(o["top1_agreement"].get<double>() * 100, "%.1f%%") : "")
      << "</td><td>" << (o.contains("top5_agreement") ? fmt(o["top5_agreement"].get<double>() * 100, "%.1f%%") : "")
      << "</td></tr>\n";
  }
  h << "</table>\n";
  if (doc.contains("fix")) {
    const json& f = doc["fix"];
    h << "<h2>Repair</h2>\n<p id=\"fix\">" << (f.value("found", false) ? "Keep " + std::to_string(f.value("size", 0)) +
                                               " node(s) in fp32 (config <code>" + esc(f.value("config", "")) + "</code>): " +
                                               (f.value("verified_passed", false) ? "verified to pass." : "verification FAILED.")
                                                                       : std::string("no fp32 set found."))
      << "</p>\n<ul>";
    for (const json& n : f["config_names"]) h << "<li><code>" << esc(n.get<std::string>()) << "</code></li>";
    h << "</ul>\n";
  }
  if (doc.contains("layers")) {
    std::vector<double> cos, mabs;
    std::vector<std::string> labels;
    for (const json& l : doc["layers"]) {
      cos.push_back(as_double(l["metrics"]["cosine"]));
      mabs.push_back(as_double(l["metrics"]["max_abs"]));
      labels.push_back(l.value("node", "") + " (" + l.value("op", "") + ")");
    }
    long first = doc["first_diverging"].is_null() ? -1 : doc["first_diverging"].value("index", -1L);
    h << "<h2>Per layer</h2>\n";
    if (first >= 0)
      h << "<p class=\"failtxt\" id=\"first-diverging\">First diverging node: <b>" << esc(doc["first_diverging"].value("node", ""))
        << "</b> (" << esc(doc["first_diverging"].value("op", "")) << "), value <code>"
        << esc(doc["first_diverging"].value("value", "")) << "</code>.</p>\n";
    else
      h << "<p id=\"first-diverging\">No layer is over the cosine threshold.</p>\n";
    h << svg_chart("cosine-chart", "cosine similarity per layer (worst over samples)", cos,
                   doc["thresholds"].value("cosine_min", 0.99), false, first, labels);
    h << svg_chart("maxabs-chart", "max abs error per layer (log10)", mabs, doc["thresholds"].value("max_abs", 0.01), true,
                   first, labels);
    h << "<table id=\"layers\"><tr><th>#</th><th class=\"l\">node</th><th class=\"l\">op</th><th class=\"l\">covers</th>"
         "<th class=\"l\">value</th><th>cosine</th><th>max abs</th><th>mean abs</th><th>max rel</th><th>RMSE</th>"
         "<th>NaN/inf</th></tr>\n";
    long i = 0;
    for (const json& l : doc["layers"]) {
      const json& m = l["metrics"];
      std::string origin;
      for (const json& o : l["origin"]) origin += (origin.empty() ? "" : ", ") + o.get<std::string>();
      h << "<tr class=\"" << (i == first ? "first" : l.value("passed", true) ? "" : "fail") << "\"><td>" << i << "</td><td class=\"l\">"
        << esc(l.value("node", "")) << "</td><td class=\"l\">" << esc(l.value("op", "")) << "</td><td class=\"l\">" << esc(origin)
        << "</td><td class=\"l\">" << esc(l.value("value", "")) << "</td><td>" << fmt(as_double(m["cosine"])) << "</td><td>"
        << fmt(as_double(m["max_abs"])) << "</td><td>" << fmt(as_double(m["mean_abs"])) << "</td><td>"
        << fmt(as_double(m["max_rel"])) << "</td><td>" << fmt(as_double(m["rmse"])) << "</td><td>" << m.value("target_nan", 0)
        << "/" << m.value("target_inf", 0) << "</td></tr>\n";
      ++i;
    }
    h << "</table>\n";
  }
  std::string data = doc.dump();
  // Keep the embedded JSON from closing the script element.
  for (size_t p = data.find("</"); p != std::string::npos; p = data.find("</", p + 2)) data.replace(p, 2, "<\\/");
  h << "<script type=\"application/json\" id=\"ferry-data\">" << data << "</script>\n</body></html>\n";
  std::ofstream f(path);
  if (!f) return invalid_argument("cannot write report '" + path + "'");
  f << h.str();
  if (!f) return invalid_argument("writing report '" + path + "' failed");
  return Status::ok();
}

}  // namespace ferry::cli
