// Triton's trace extension; see trace.h.
#define RAPIDJSON_HAS_STDSTRING 1
#include "serve/trace.h"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace ferry::serve {

namespace {

bool parse_uint(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoull(s);
  return true;
}

// One setting's values into `s` (the model's or the global ones).
Status apply(TraceSettings* s, const std::string& name, const std::vector<std::string>& v, const std::string& file) {
  const std::string what = "trace setting '" + name + "'";
  auto one = [&]() -> StatusOr<std::string> {
    if (v.size() != 1) return invalid_argument(what + " takes one value, got " + std::to_string(v.size()));
    return v[0];
  };
  if (name == "trace_level") {
    if (v.empty()) return invalid_argument(what + " needs a value: OFF or TIMESTAMPS");
    bool ts = false;
    for (const std::string& l : v) {
      if (l == "TIMESTAMPS") ts = true;
      else if (l == "TENSORS") return invalid_argument(what + ": TENSORS is not supported by ferry (TIMESTAMPS is)");
      else if (l != "OFF") return invalid_argument(what + ": '" + l + "' is not a level; OFF or TIMESTAMPS");
    }
    if (ts && file.empty()) return invalid_argument(what + ": no trace file; start `ferry serve --trace-file PATH` to trace");
    s->timestamps = ts;
  } else if (name == "trace_rate") {
    ASSIGN_OR_RETURN(std::string x, one());
    uint64_t r = 0;
    if (!parse_uint(x, &r) || r == 0) return invalid_argument(what + " '" + x + "': give a count >= 1 (one request traced in that many)");
    s->rate = r;
  } else if (name == "trace_count") {
    ASSIGN_OR_RETURN(std::string x, one());
    uint64_t c = 0;
    if (x == "-1") s->count = -1;
    else if (parse_uint(x, &c)) s->count = static_cast<int64_t>(c);
    else return invalid_argument(what + " '" + x + "': give the number of requests to trace, or -1 for no limit");
  } else if (name == "log_frequency") {
    ASSIGN_OR_RETURN(std::string x, one());
    if (x != "0") return invalid_argument(what + " '" + x + "': only 0 (every trace appended to the one trace file as it is taken)");
  } else if (name == "trace_file") {
    ASSIGN_OR_RETURN(std::string x, one());
    if (x != file)
      return invalid_argument(what + " cannot be changed while the server runs (it is '" + file + "'): start `ferry serve --trace-file PATH`");
  } else if (name == "trace_mode") {
    ASSIGN_OR_RETURN(std::string x, one());
    if (x != "triton") return invalid_argument(what + " '" + x + "': only triton");
  } else {
    return invalid_argument("unknown trace setting '" + name +
                            "'; the settings are trace_level, trace_rate, trace_count, log_frequency, trace_file, trace_mode");
  }
  return Status::ok();
}

}  // namespace

StatusOr<std::unique_ptr<Tracer>> Tracer::open(const std::string& file, TraceSettings global) {
  std::unique_ptr<Tracer> t(new Tracer());
  if (!file.empty()) {
    t->out_ = std::fopen(file.c_str(), "a");
    if (!t->out_) return invalid_argument("--trace-file " + file + ": cannot open it for appending (" + std::strerror(errno) + ")");
  } else if (global.timestamps) {
    return invalid_argument("--trace-level TIMESTAMPS needs --trace-file PATH (where the traces go)");
  }
  if (global.rate == 0) return invalid_argument("--trace-rate must be >= 1");
  t->file_ = file;
  t->global_ = global;
  std::lock_guard<std::mutex> lock(t->mu_);
  t->refresh_any_on();
  return t;
}

Tracer::~Tracer() {
  if (out_) std::fclose(out_);
}

int64_t Tracer::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Tracer::refresh_any_on() {
  bool on = global_.timestamps && global_.count != 0;
  for (const auto& [m, s] : models_) on = on || (s.timestamps && s.count != 0);
  any_on_.store(on, std::memory_order_relaxed);
}

uint64_t Tracer::sample_slow(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  TraceSettings& s = it != models_.end() ? it->second : global_;
  if (!s.timestamps || s.count == 0) return 0;
  if (seen_[it != models_.end() ? model : std::string()]++ % s.rate != 0) return 0;
  if (s.count > 0 && --s.count == 0) refresh_any_on();
  return ++next_id_;
}

void Tracer::record(uint64_t id, const std::string& model, int64_t version, const std::string& request_id, int64_t request_start_ns,
                    const InferTimestamps& ts, int64_t request_end_ns) {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  w.Key("id");
  w.Uint64(id);
  w.Key("model_name");
  w.String(model);
  w.Key("model_version");
  w.Int64(version);
  if (!request_id.empty()) {
    w.Key("request_id");
    w.String(request_id);
  }
  w.Key("timestamps");
  w.StartArray();
  const std::pair<const char*, int64_t> steps[] = {{"REQUEST_START", request_start_ns},      {"QUEUE_START", ts.queue_start},
                                                   {"COMPUTE_START", ts.compute_start},      {"COMPUTE_INPUT_END", ts.compute_input_end},
                                                   {"COMPUTE_OUTPUT_START", ts.compute_output_start}, {"COMPUTE_END", ts.compute_end},
                                                   {"REQUEST_END", request_end_ns}};
  for (const auto& [name, ns] : steps) {
    if (ns == 0) continue;  // a step the request did not reach (refused, timed out, failed)
    w.StartObject();
    w.Key("name");
    w.String(name);
    w.Key("ns");
    w.Int64(ns);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  std::lock_guard<std::mutex> lock(mu_);
  if (!out_) return;
  std::fwrite(sb.GetString(), 1, sb.GetSize(), out_);
  std::fputc('\n', out_);
  std::fflush(out_);
}

std::vector<std::pair<std::string, std::vector<std::string>>> Tracer::settings(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  const TraceSettings& s = it != models_.end() ? it->second : global_;
  return {{"trace_file", {file_}},
          {"trace_level", {s.timestamps ? "TIMESTAMPS" : "OFF"}},
          {"trace_rate", {std::to_string(s.rate)}},
          {"trace_count", {std::to_string(s.count)}},
          {"log_frequency", {"0"}},
          {"trace_mode", {"triton"}}};
}

Status Tracer::update(const std::string& model, const std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>>& changes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!model.empty() && changes.empty()) {  // Triton: a model's empty update removes its override
    models_.erase(model);
    seen_.erase(model);
    refresh_any_on();
    return Status::ok();
  }
  auto it = models_.find(model);
  TraceSettings next = model.empty() ? global_ : it != models_.end() ? it->second : global_;
  for (const auto& [name, values] : changes) {
    if (!values) {  // null: back to the global value
      if (model.empty()) return invalid_argument("trace setting '" + name + "': null clears a model's setting; the global ones need a value");
      TraceSettings g = global_;
      if (name == "trace_level") next.timestamps = g.timestamps;
      else if (name == "trace_rate") next.rate = g.rate;
      else if (name == "trace_count") next.count = g.count;
      else RETURN_IF_ERROR(apply(&g, name, {}, file_));  // names the unknown setting
      continue;
    }
    RETURN_IF_ERROR(apply(&next, name, *values, file_));
  }
  if (model.empty()) global_ = next;
  else models_[model] = next;
  refresh_any_on();
  return Status::ok();
}

std::string Tracer::settings_json(const std::string& model) const {
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  for (const auto& [name, values] : settings(model)) {
    w.Key(name.data(), static_cast<rapidjson::SizeType>(name.size()));
    if (name == "trace_level") {
      w.StartArray();
      for (const std::string& v : values) w.String(v);
      w.EndArray();
    } else {
      w.String(values.empty() ? std::string() : values[0]);
    }
  }
  w.EndObject();
  return std::string(sb.GetString(), sb.GetSize());
}

Status Tracer::update_json(const std::string& model, std::string_view body) {
  rapidjson::Document doc;
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    doc.SetObject();
  } else {
    doc.Parse<rapidjson::kParseIterativeFlag>(body.data(), body.size());
    if (doc.HasParseError() || !doc.IsObject())
      return invalid_argument("the trace settings request is not a JSON object such as {\"trace_level\": [\"TIMESTAMPS\"], \"trace_rate\": \"100\"}");
  }
  const rapidjson::Value& obj = doc;  // const iterators: compared without C++20's reversed-operator ambiguity
  std::vector<std::pair<std::string, std::optional<std::vector<std::string>>>> changes;
  for (const auto& m : obj.GetObject()) {
    std::string name(m.name.GetString(), m.name.GetStringLength());
    const rapidjson::Value& v = m.value;
    if (v.IsNull()) {
      changes.emplace_back(std::move(name), std::nullopt);
    } else if (v.IsString()) {
      changes.emplace_back(std::move(name), std::vector<std::string>{std::string(v.GetString(), v.GetStringLength())});
    } else if (v.IsArray()) {
      std::vector<std::string> values;
      for (const auto& e : v.GetArray()) {
        if (!e.IsString()) return invalid_argument("trace setting '" + name + "': the list holds a value that is not a string");
        values.emplace_back(e.GetString(), e.GetStringLength());
      }
      changes.emplace_back(std::move(name), std::move(values));
    } else {
      return invalid_argument("trace setting '" + name + "': give a string (\"100\"), a list of strings ([\"TIMESTAMPS\"]) or null");
    }
  }
  return update(model, changes);
}

}  // namespace ferry::serve
