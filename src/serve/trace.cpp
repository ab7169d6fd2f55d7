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
    if (v.empty()) return invalid_argument(what + " needs a value: OFF, or TIMESTAMPS and / or TENSORS");
    bool ts = false, tensors = false, off = false;
    for (const std::string& l : v) {
      if (l == "TIMESTAMPS") ts = true;
      else if (l == "TENSORS") tensors = true;
      else if (l == "OFF") off = true;
      else return invalid_argument(what + ": '" + l + "' is not a level; OFF, TIMESTAMPS or TENSORS");
    }
    if (off && (ts || tensors)) return invalid_argument(what + ": OFF cannot be listed with another level");
    if ((ts || tensors) && file.empty()) return invalid_argument(what + ": no trace file; start `ferry serve --trace-file PATH` to trace");
    s->timestamps = ts;
    s->tensors = tensors;
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
    uint64_t f = 0;
    if (!parse_uint(x, &f))
      return invalid_argument(what + " '" + x + "': give 0 (every trace appended to the trace file) or N (N traces a file: FILE.0, FILE.1, ...)");
    s->log_frequency = f;
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
  } else if (global.timestamps || global.tensors) {
    return invalid_argument("--trace-level TIMESTAMPS / TENSORS needs --trace-file PATH (where the traces go)");
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
  for (auto& [scope, f] : indexed_)
    if (f.f) std::fclose(f.f);
}

int64_t Tracer::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Tracer::refresh_any_on() {
  bool on = global_.on();
  for (const auto& [m, s] : models_) on = on || s.on();
  any_on_.store(on, std::memory_order_relaxed);
}

uint64_t Tracer::sample_slow(const std::string& model) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  TraceSettings& s = it != models_.end() ? it->second : global_;
  if (!s.on()) return 0;
  const std::string scope = it != models_.end() ? model : std::string();
  if (seen_[scope]++ % s.rate != 0) return 0;
  if (s.count > 0 && --s.count == 0) refresh_any_on();
  pending_[++next_id_] = Pending{scope, s.timestamps, s.tensors, {}};
  return next_id_;
}

const TraceSettings& Tracer::scope_settings(const std::string& scope) const {
  auto it = scope.empty() ? models_.end() : models_.find(scope);
  return it != models_.end() ? it->second : global_;
}

void Tracer::write_trace(const std::string& scope, const std::string& lines) {
  std::FILE* out = out_;
  const uint64_t frequency = scope_settings(scope).log_frequency;
  auto it = indexed_.find(scope);
  if (it != indexed_.end() && (frequency == 0 || it->second.frequency != frequency || it->second.traces >= frequency)) {
    std::fclose(it->second.f);  // full, or the frequency changed: the next trace starts the next file
    indexed_.erase(it);
    it = indexed_.end();
  }
  if (frequency > 0) {
    if (it == indexed_.end()) {
      // Triton's ${trace_file}.${idx}: one index across the scopes, as Triton's one trace file.
      std::FILE* f = std::fopen((file_ + "." + std::to_string(next_file_index_++)).c_str(), "a");
      if (f) it = indexed_.emplace(scope, IndexedFile{f, 0, frequency}).first;
    }
    if (it != indexed_.end()) {  // else (the file cannot be opened) the trace goes to the trace file
      out = it->second.f;
      ++it->second.traces;
    }
  }
  if (!out) return;
  std::fwrite(lines.data(), 1, lines.size(), out);
  std::fflush(out);
}

namespace {

// Triton's TENSORS record: {"id":N,"activity":"TENSOR_QUEUE_INPUT","tensor":{"name":...,"data":"1,2,3",
// "shape":"1,3","dtype":"FP32"}} (data and shape comma-separated in a string; BYTES elements quoted).
void tensor_line(std::string* out, uint64_t id, const char* activity, const std::string& name, const Tensor& t) {
  std::string data, shape;
  for (int64_t d : t.dims()) {
    if (!shape.empty()) shape += ',';
    shape += std::to_string(d);
  }
  const int64_t n = t.numel();
  char buf[40];
  for (int64_t i = 0; i < n; ++i) {
    if (i) data += ',';
    switch (t.dtype()) {
      case DType::kString:
        data += '"';
        data += t.strings()[static_cast<size_t>(i)];
        data += '"';
        continue;
      case DType::kF32:
      case DType::kF16:
      case DType::kBF16:
        std::snprintf(buf, sizeof buf, "%.9g", t.get_double(i));  // round-trips a float
        break;
      case DType::kF64:
        std::snprintf(buf, sizeof buf, "%.17g", t.get_double(i));
        break;
      case DType::kU64:
        std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(t.data<uint64_t>()[i]));
        break;
      default:  // the signed integers and bool
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(t.get_int64(i)));
        break;
    }
    data += buf;
  }
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> w(sb);
  w.StartObject();
  w.Key("id");
  w.Uint64(id);
  w.Key("activity");
  w.String(activity);
  w.Key("tensor");
  w.StartObject();
  w.Key("name");
  w.String(name);
  w.Key("data");
  w.String(data);
  w.Key("shape");
  w.String(shape);
  w.Key("dtype");
  w.String(kserve_dtype_name(t.dtype()));
  w.EndObject();
  w.EndObject();
  out->append(sb.GetString(), sb.GetSize());
  out->push_back('\n');
}

}  // namespace

void Tracer::record_inputs(uint64_t id, const TensorList& inputs) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end() || !it->second.tensors) return;
  }
  std::string lines;  // formatted without the lock: other requests keep sampling
  for (const auto& [name, t] : inputs) tensor_line(&lines, id, "TENSOR_QUEUE_INPUT", name, t);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(id);
  if (it != pending_.end()) it->second.input_lines += lines;
}

void Tracer::record(uint64_t id, const std::string& model, int64_t version, const std::string& request_id, int64_t request_start_ns,
                    const InferTimestamps& ts, int64_t request_end_ns, const TensorList* outputs) {
  Pending p{std::string(), true, false, {}};  // an id sample() did not give: its timestamps, as the global settings
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it != pending_.end()) {
      p = std::move(it->second);
      pending_.erase(it);
    }
  }
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
  if (p.timestamps) {
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
  }
  w.EndObject();
  std::string lines(sb.GetString(), sb.GetSize());
  lines += '\n';
  if (p.tensors) {
    lines += p.input_lines;
    if (outputs)
      for (const auto& [name, t] : *outputs) tensor_line(&lines, id, "TENSOR_BACKEND_OUTPUT", name, t);
  }
  std::lock_guard<std::mutex> lock(mu_);
  write_trace(p.scope, lines);
}

std::vector<std::pair<std::string, std::vector<std::string>>> Tracer::settings(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(model);
  const TraceSettings& s = it != models_.end() ? it->second : global_;
  std::vector<std::string> level;
  if (s.timestamps) level.push_back("TIMESTAMPS");
  if (s.tensors) level.push_back("TENSORS");
  if (level.empty()) level.push_back("OFF");
  return {{"trace_file", {file_}},
          {"trace_level", level},
          {"trace_rate", {std::to_string(s.rate)}},
          {"trace_count", {std::to_string(s.count)}},
          {"log_frequency", {std::to_string(s.log_frequency)}},
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
      if (name == "trace_level") next.timestamps = g.timestamps, next.tensors = g.tensors;
      else if (name == "trace_rate") next.rate = g.rate;
      else if (name == "log_frequency") next.log_frequency = g.log_frequency;
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
