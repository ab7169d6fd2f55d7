// The extension module `ferry._ferry` behind the Python package (python/ferry/): sessions over
// compiler/Session with numpy in and out, the error classes, and the bindings of the tools and
// training (tools.cpp, trainer.cpp). Like the CLI it sits on top of every layer; Status codes
// become Python exceptions here and nowhere below.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "backends/backend.h"
#include "compiler/session.h"
#include "format/compiled_model.h"
#include "onnx/onnx_import.h"
#include "passes/pipeline.h"
#include "precision/precision_run.h"
#include "python/py_common.h"

namespace py = pybind11;

namespace ferry::python {

// ---------------------------------------------------------------------------------------------
// Errors: ferry.Error and one subclass per StatusCode (python/ferry/__init__.py re-exports them).

namespace {
PyObject* g_error = nullptr;
PyObject* g_codes[8] = {};  // indexed by StatusCode
PyObject* g_terminated = nullptr;

PyObject* make_error(py::module_& m, const char* name, PyObject* base, PyObject* builtin, const char* doc) {
  PyObject* bases = builtin ? PyTuple_Pack(2, base, builtin) : PyTuple_Pack(1, base);
  const std::string qual = std::string("ferry.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);
  if (!cls) throw py::error_already_set();
  m.add_object(name, py::handle(cls));
  return cls;
}
}  // namespace

void raise_status(const Status& st) {
  PyObject* cls = g_codes[static_cast<int>(st.code())];
  throw StatusError(st, cls ? cls : g_error);
}

void register_errors(py::module_& m) {
  g_error = make_error(m, "Error", PyExc_Exception, nullptr,
                       "Base class of ferry's errors; str(e) is the message `ferry` prints for the same problem.");
  g_codes[static_cast<int>(StatusCode::kInvalidArgument)] =
      make_error(m, "InvalidArgument", g_error, PyExc_ValueError, "Bad input: a file, a feed's shape or dtype, an option.");
  g_codes[static_cast<int>(StatusCode::kInvalidModel)] =
      make_error(m, "InvalidModel", g_error, PyExc_ValueError, "The model file is malformed or inconsistent.");
  g_codes[static_cast<int>(StatusCode::kUnsupported)] = make_error(
      m, "NotImplemented", g_error, PyExc_NotImplementedError, "Valid, but ferry does not implement it (op, opset, attribute).");
  g_codes[static_cast<int>(StatusCode::kNotFound)] =
      make_error(m, "NotFound", g_error, PyExc_LookupError, "A file, input or output name that does not exist.");
  g_codes[static_cast<int>(StatusCode::kResourceExhausted)] =
      make_error(m, "ResourceExhausted", g_error, nullptr, "A limit was hit (size, memory).");
  g_codes[static_cast<int>(StatusCode::kInternal)] =
      make_error(m, "InternalError", g_error, nullptr, "A bug in ferry: please report it with the model.");
  g_terminated = make_error(m, "Terminated", g_error, nullptr,
                            "A run ended early because its RunOptions.terminate was set (from any thread).");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyErr_SetString(e.type(), e.what());
    }
  });
}

// ---------------------------------------------------------------------------------------------
// numpy <-> Tensor

const char* onnx_type_name(DType t) {
  switch (t) {
    case DType::kF32: return "float";
    case DType::kF64: return "double";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI16: return "int16";
    case DType::kU16: return "uint16";
    case DType::kI32: return "int32";
    case DType::kU32: return "uint32";
    case DType::kI64: return "int64";
    case DType::kU64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kString: return "string";
    case DType::kUndefined: break;
  }
  return "undefined";
}

std::string onnx_type_string(const TensorType& t) {
  const std::string tensor = std::string("tensor(") + onnx_type_name(t.dtype) + ")";
  switch (t.kind) {
    case ValueKind::kTensor: return tensor;
    case ValueKind::kSequence: return "seq(" + tensor + ")";
    case ValueKind::kOptionalTensor: return "optional(" + tensor + ")";
    case ValueKind::kOptionalSequence: return "optional(seq(" + tensor + "))";
  }
  return tensor;
}

// numpy's descriptors of the native builtin types, made once (never freed: they outlive the
// interpreter's teardown of this module); a feed's dtype is then found by an identity check.
constexpr DType kNumpyTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kI8,  DType::kU8,  DType::kI16,
                                 DType::kU16, DType::kI32, DType::kU32, DType::kI64, DType::kU64, DType::kBool};
constexpr size_t kNumpyTypeCount = sizeof(kNumpyTypes) / sizeof(kNumpyTypes[0]);
PyObject* const* numpy_descrs() {
  static PyObject** descr = [] {
    auto** out = new PyObject*[kNumpyTypeCount];
    for (size_t i = 0; i < kNumpyTypeCount; ++i) out[i] = py::dtype(dtype_numpy_name(kNumpyTypes[i])).release().ptr();
    return out;
  }();
  return descr;
}

py::dtype numpy_dtype(DType t) {
  for (size_t i = 0; i < kNumpyTypeCount; ++i)
    if (kNumpyTypes[i] == t) return py::reinterpret_borrow<py::dtype>(numpy_descrs()[i]);
  raise_status(unsupported(std::string("element type ") + dtype_name(t) + " has no numpy dtype"));
}

StatusOr<DType> dtype_of(const py::dtype& d) {
  PyObject* const* descr = numpy_descrs();
  for (size_t i = 0; i < kNumpyTypeCount; ++i)
    if (d.ptr() == descr[i]) return kNumpyTypes[i];
  for (size_t i = 0; i < kNumpyTypeCount; ++i)
    if (d.equal(py::reinterpret_borrow<py::dtype>(descr[i]))) return kNumpyTypes[i];
  if (d.kind() == 'U' || d.kind() == 'S' || d.kind() == 'O') return DType::kString;
  return unsupported("numpy dtype " + std::string(py::str(py::handle(d))) + " has no ferry element type");
}

std::string dims_text(const std::vector<int64_t>& dims) { return Shape::of(dims).to_string(); }

Tensor tensor_view(const std::string& what, py::handle obj, DType want, std::vector<py::object>* keep) {
  py::array arr;
  if (py::isinstance<py::array>(obj)) {
    arr = py::reinterpret_borrow<py::array>(obj);
  } else {
    // Lists, scalars and other array-likes: converted to the input's dtype (a copy by nature).
    py::object np = py::module_::import("numpy");
    arr = np.attr("asarray")(obj, want == DType::kString ? py::object(py::none()) : py::object(numpy_dtype(want)));
  }
  std::vector<int64_t> dims(arr.shape(), arr.shape() + arr.ndim());
  StatusOr<DType> got = dtype_of(arr.dtype());
  if (!got.is_ok()) raise_status(invalid_argument(what + ": " + got.status().message()));
  if (got.value() != want && want != DType::kUndefined)
    raise_status(invalid_argument(what + ": expected tensor(" + onnx_type_name(want) + "), given tensor(" +
                                  onnx_type_name(got.value()) + ") of shape " + dims_text(dims) +
                                  "; convert it with .astype(numpy." + (want == DType::kF32 ? std::string("float32") : std::string(dtype_numpy_name(want))) + ")"));
  if (got.value() == DType::kString) {
    Tensor t = Tensor::allocate(DType::kString, dims);
    py::list flat = arr.attr("ravel")().attr("tolist")();
    auto& out = t.mutable_strings();
    for (size_t i = 0; i < out.size() && i < flat.size(); ++i) {
      py::handle e = flat[i];
      out[i] = py::isinstance<py::bytes>(e) ? std::string(py::reinterpret_borrow<py::bytes>(e)) : std::string(py::str(e));
    }
    return t;
  }
  // Read in place when C-contiguous and aligned; else one contiguous copy (as ORT does).
  const bool in_place = (arr.flags() & py::array::c_style) && (arr.flags() & 0x0100 /*NPY_ARRAY_ALIGNED*/);
  if (!in_place) arr = py::module_::import("numpy").attr("ascontiguousarray")(arr);
  keep->push_back(arr);
  return Tensor::wrap(got.value(), std::move(dims), nullptr, arr.data());
}

py::object tensor_to_numpy(const Tensor& t, bool copy) {
  std::vector<py::ssize_t> shape(t.dims().begin(), t.dims().end());
  if (t.dtype() == DType::kString) {
    py::list items;
    for (const std::string& s : t.strings()) items.append(py::str(s));
    py::object np = py::module_::import("numpy");
    return np.attr("array")(items, "object").attr("reshape")(py::tuple(py::cast(shape)));
  }
  py::dtype dt = numpy_dtype(t.dtype());
  if (t.numel() == 0 || t.raw() == nullptr) return py::array(dt, shape);
  // The array owns ferry's buffer: the capsule holds a Tensor (shared storage) until numpy frees it.
  auto* holder = new Tensor(copy ? t.clone() : t);
  py::capsule owner(holder, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(dt, shape, holder->raw(), owner);
}

// ---------------------------------------------------------------------------------------------
// Logging (SessionOptions / RunOptions.log_severity_level, as ORT: 0 verbose, 1 info, 2 warning,
// 3 error, 4 fatal): one line per event on stderr, "<time> [I:ferry:<logid>] <message>".

void log_line(char severity, const std::string& logid, const std::string& message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const long us = static_cast<long>(std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  std::fprintf(stderr, "%s.%06ld [%c:ferry:%s] %s\n", stamp, us, severity, logid.c_str(), message.c_str());
  std::fflush(stderr);
}

/// A run's terminate flag (RunOptions.terminate), shared with the runs that use it.
struct RunControl {
  std::atomic<bool> terminate{false};
};

// ---------------------------------------------------------------------------------------------
// Profiling: ORT's Chrome trace (SessionOptions.enable_profiling), one event per run and per node.

class Profiler {
 public:
  Profiler() : start_(std::chrono::steady_clock::now()) {}
  void node(const Node& n, double ms) {
    add(n.name.empty() ? n.op_type : n.name, "Node", ms, n.op_type);
  }
  void add(const std::string& name, const char* cat, double ms, const std::string& op = "") {
    const double end_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back({name, cat, op, end_us - ms * 1000.0, ms * 1000.0, static_cast<long>(::syscall(SYS_gettid))});
  }
  StatusOr<std::string> write(const std::string& prefix) {
    char stamp[64];
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::strftime(stamp, sizeof stamp, "%Y-%m-%d_%H-%M-%S", &tm);
    const std::string path = prefix + "_" + stamp + ".json";
    nlohmann::json j = nlohmann::json::array();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Event& e : events_) {
        nlohmann::json ev = {{"cat", e.cat}, {"pid", static_cast<long>(::getpid())}, {"tid", e.tid},
                             {"dur", static_cast<int64_t>(e.dur_us)}, {"ts", static_cast<int64_t>(e.ts_us < 0 ? 0 : e.ts_us)},
                             {"ph", "X"}, {"name", e.cat == std::string("Node") ? e.name + "_kernel_time" : e.name}};
        ev["args"] = e.op.empty() ? nlohmann::json::object() : nlohmann::json{{"op_name", e.op}};
        j.push_back(ev);
      }
      events_.clear();
    }
    std::ofstream f(path);
    if (!f) return invalid_argument("profile file '" + path + "' cannot be written");
    f << j.dump(1) << "\n";
    if (!f) return invalid_argument("profile file '" + path + "' cannot be written");
    return path;
  }

 private:
  struct Event {
    std::string name;
    const char* cat;
    std::string op;
    double ts_us, dur_us;
    long tid;
  };
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::vector<Event> events_;
};

// ---------------------------------------------------------------------------------------------
// Sessions

struct OpenOptions {
  std::string device;  // "" = the file's device / cpu
  int threads = 0;
  int opt_level = -1;  // -1: the device's default
  std::string precision;
  std::vector<std::string> keep_fp32;
  bool profile = false;
  int log_level = 2;  // ORT's severity: 0 verbose (a line per run), 1 info (the session's), 2 warning
  std::string logid;
};

class PySession {
 public:
  static std::shared_ptr<PySession> open(py::object model, const OpenOptions& o) {
    auto s = std::make_shared<PySession>();
    s->log_level_ = o.log_level;
    s->logid_ = o.logid;
    const auto opened_at = std::chrono::steady_clock::now();
    if (o.profile) s->profiler_ = std::make_shared<Profiler>();
    SessionOptions so;
    so.device = o.device;
    so.threads = o.threads;
    if (s->profiler_) so.observer = [p = s->profiler_](const Node& n, const std::vector<Value>&, double ms) { p->node(n, ms); };
    std::string path;
    std::string bytes;
    const bool from_bytes = py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model) ||
                            py::isinstance<py::memoryview>(model);
    if (from_bytes) {
      bytes = std::string(py::bytes(model));
    } else {
      path = py::str(py::module_::import("os").attr("fspath")(model));
    }
    StatusOr<std::shared_ptr<Session>> opened = [&]() -> StatusOr<std::shared_ptr<Session>> {
      py::gil_scoped_release nogil;
      const auto t0 = std::chrono::steady_clock::now();
      bool compiled = from_bytes ? has_compiled_magic(bytes.data(), bytes.size())
                                 : ((path.size() > 6 && path.compare(path.size() - 6, 6, ".ferry") == 0) ||
                                    is_compiled_model_file(path));
      StatusOr<std::shared_ptr<Session>> r = Status::ok();
      if (compiled) {
        // The file's mode was chosen when it was compiled: Session::open refuses another, naming
        // the file and both modes (the same mode is allowed).
        if (!o.precision.empty()) {
          ASSIGN_OR_RETURN(so.precision, parse_precision_mode(o.precision));
        }
        if (from_bytes) {
          r = Session::open_memory(bytes.data(), bytes.size(), so);
        } else {
          ASSIGN_OR_RETURN(CompiledModel cm, load_compiled_model(path));
          r = Session::open(std::move(cm), so);
        }
      } else {
        StatusOr<std::shared_ptr<Model>> m = from_bytes ? parse_onnx_model(bytes.data(), bytes.size(), "", "model bytes")
                                                        : load_onnx_model(path);
        RETURN_IF_ERROR(m.status());
        r = open_onnx(std::move(m).value(), from_bytes ? "model bytes" : path, o, so);
      }
      if (r.is_ok() && s->profiler_)
        s->profiler_->add("session_initialization", "Session",
                          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      return r;
    }();
    if (!opened.is_ok()) raise_status(opened.status());
    s->session_ = std::move(opened).value();
    // What run() looks up per call, made once: names to indices, the inputs' error prefixes, the
    // outputs that are constants of the model (returned as copies).
    std::set<std::string> constants;
    for (const CompiledGear& g : s->session_->compiled().gears)
      for (const auto& [name, t] : g.model->graph.initializers) constants.insert(name);
    for (size_t i = 0; i < s->session_->inputs().size(); ++i) {
      s->input_index_[s->session_->inputs()[i].name] = i;
      s->input_what_.push_back("input '" + s->session_->inputs()[i].name + "'");
    }
    for (size_t i = 0; i < s->session_->outputs().size(); ++i) {
      s->output_index_[s->session_->outputs()[i].name] = i;
      s->output_constant_.push_back(constants.count(s->session_->outputs()[i].name) > 0);
    }
    if (s->log_level_ <= 1) {
      const Session& ss = *s->session_;
      const CompiledModel& cm = ss.compiled();
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.1f", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - opened_at).count());
      std::string gears;
      for (int64_t b : ss.batch_sizes()) gears += (gears.empty() ? ", batch gears " : ",") + std::to_string(b);
      log_line('I', s->logid_,
               "session: " + (from_bytes ? std::string("model bytes") : path) + " on " + ss.device() + ", opt level " +
                   std::to_string(cm.opt_level) + ", " + std::to_string(cm.gears.back().model->graph.nodes.size()) + " nodes, " +
                   (o.threads > 0 ? std::to_string(o.threads) : std::string("all")) + " intra-op thread(s)" +
                   (cm.precision_mode.empty() ? std::string() : ", precision " + cm.precision_mode) + gears + "; opened in " +
                   ms + " ms");
    }
    return s;
  }

  static StatusOr<std::shared_ptr<Session>> open_onnx(std::shared_ptr<Model> m, const std::string& source,
                                                      const OpenOptions& o, const SessionOptions& so) {
    ExecutorOptions eo;
    eo.device = o.device.empty() ? "cpu" : o.device;
    eo.opt_level = o.opt_level;
    eo.threads = o.threads;
    CompiledModel cm;
    cm.device = eo.device;
    cm.opt_level = effective_opt_level(eo);
    cm.source = source;
    if (!o.precision.empty() || !o.keep_fp32.empty()) {
      PrecisionOptions p;
      if (!o.precision.empty()) {
        ASSIGN_OR_RETURN(p.mode, parse_precision_mode(o.precision));
      }
      p.keep_fp32 = o.keep_fp32;
      ASSIGN_OR_RETURN(std::shared_ptr<const Model> pm, prepare_precision_model(m, eo, p));
      m = std::const_pointer_cast<Model>(pm);
      cm.precision_mode = precision_mode_name(p.mode);
    }
    if (m->metadata.count(kOptimizedMetadataKey) == 0) {
      if (cm.opt_level > 0) {
        OptimizeOptions oo;
        oo.opt_level = cm.opt_level;
        oo.device_traits = device_graph_traits(cm.device);
        RETURN_IF_ERROR(optimize_model(m.get(), oo));
      }
      m->metadata[kOptimizedMetadataKey] = std::to_string(cm.opt_level);
    }
    cm.gears.push_back({0, std::move(m)});
    SessionOptions so2 = so;
    so2.device = cm.device;
    return Session::open(std::move(cm), so2);
  }

  py::list run(const std::optional<std::vector<std::string>>& output_names, const py::dict& feed) {
    return run_with(output_names, feed, nullptr, log_level_, std::string(), logid_);
  }

  /// run() with ORT's RunOptions: `control` its terminate flag (nullptr: none), `log_level` the
  /// run's severity (RunOptions' when set, else the session's), `tag` its run_tag.
  py::list run_with(const std::optional<std::vector<std::string>>& output_names, const py::dict& feed,
                    std::shared_ptr<RunControl> control, int log_level, const std::string& tag, const std::string& logid) {
    std::vector<py::object> keep;
    keep.reserve(feed.size());
    NamedTensors feeds;
    feeds.reserve(feed.size());
    const auto& ins = session_->inputs();
    for (const auto& [k, v] : feed) {
      std::string name = py::str(k);
      auto it = input_index_.find(name);
      if (it == input_index_.end()) raise_status(invalid_argument("no input named '" + name + "'; the model's inputs: " + names(ins)));
      feeds.emplace_back(std::move(name), tensor_view(input_what_[it->second], v, ins[it->second].type.dtype, &keep));
    }
    std::vector<size_t> picked;
    if (output_names && !output_names->empty()) {
      for (const std::string& n : *output_names) {
        auto it = output_index_.find(n);
        if (it == output_index_.end())
          raise_status(invalid_argument("no output named '" + n + "'; the model's outputs: " + names(session_->outputs())));
        picked.push_back(it->second);
      }
    }
    NamedTensors outs;
    Status st;
    SessionRunOptions ro;
    if (control) ro.terminate = &control->terminate;
    double ms = 0;
    const bool timed = profiler_ || log_level <= 0;
    {
      py::gil_scoped_release nogil;
      std::chrono::steady_clock::time_point t0;
      if (timed) t0 = std::chrono::steady_clock::now();
      st = session_->run(feeds, &outs, ro);
      if (timed) ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (profiler_) profiler_->add(tag.empty() ? "model_run" : "model_run " + tag, "Session", ms);
    }
    if (log_level <= 0) {
      char text[64];
      std::snprintf(text, sizeof text, "%.3f ms", ms);
      log_line('V', logid, "run" + (tag.empty() ? std::string() : " '" + tag + "'") + ": " +
                               (st.is_ok() ? std::string(text) : "failed after " + std::string(text) + ": " + st.message()));
    }
    if (!st.is_ok()) {
      if (control && control->terminate.load()) throw StatusError(st, g_terminated);
      raise_status(st);
    }
    if (picked.empty())
      for (size_t i = 0; i < outs.size(); ++i) picked.push_back(i);
    py::list result;
    std::vector<const void*> given;
    for (size_t i : picked) {
      const Tensor& t = outs[i].second;
      // Copy what ferry does not own for the caller: a view of an input's memory (an output that
      // is an input), a constant (read-only weights), or a buffer another output already returned.
      bool copy = output_constant_[i];
      const char* p = static_cast<const char*>(t.raw());
      if (p && t.dtype() != DType::kString) {
        for (const auto& [name, in] : feeds) {
          const char* b = static_cast<const char*>(in.raw());
          if (b && p >= b && p < b + in.nbytes()) copy = true;
        }
        for (const void* q : given) copy = copy || q == p;
        given.push_back(p);
      }
      result.append(tensor_to_numpy(t, copy));
    }
    return result;
  }

  /// Seconds per call of the C++ Session::run on `feed` (converted once), `runs` calls in a row
  /// without the GIL: the baseline bench/python_overhead.py subtracts from run()'s time.
  std::vector<double> bench_native(const py::dict& feed, int runs) {
    std::vector<py::object> keep;
    NamedTensors feeds;
    const auto& ins = session_->inputs();
    for (const auto& [k, v] : feed) {
      std::string name = py::str(k);
      auto it = input_index_.find(name);
      if (it == input_index_.end()) raise_status(invalid_argument("no input named '" + name + "'"));
      feeds.emplace_back(name, tensor_view("input '" + name + "'", v, ins[it->second].type.dtype, &keep));
    }
    std::vector<double> secs;
    Status st;
    {
      py::gil_scoped_release nogil;
      for (int r = 0; r < runs && st.is_ok(); ++r) {
        NamedTensors outs;
        const auto t0 = std::chrono::steady_clock::now();
        st = session_->run(feeds, &outs);
        secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
    }
    check(st);
    return secs;
  }

  py::list io_info(bool inputs) const {
    py::list out;
    const bool geared = !session_->batch_sizes().empty();
    for (const ValueInfo& v : inputs ? session_->inputs() : session_->outputs()) {
      py::object shape = py::none();
      if (v.type.shape) {
        py::list dims;
        for (size_t i = 0; i < v.type.shape->dims.size(); ++i) {
          const Dim& d = v.type.shape->dims[i];
          if (i == 0 && geared) dims.append("batch");
          else if (d.is_known()) dims.append(d.value);
          else if (!d.symbol.empty()) dims.append(d.symbol);
          else dims.append(py::none());
        }
        shape = dims;
      }
      out.append(py::make_tuple(v.name, shape, onnx_type_string(v.type)));
    }
    return out;
  }

  py::dict metadata() const {
    const Model& m = *session_->compiled().gears.back().model;
    py::dict custom;
    for (const auto& [k, v] : m.metadata)
      if (k.rfind("ferry.", 0) != 0) custom[py::str(k)] = v;
    py::dict d;
    d["producer_name"] = m.producer_name;
    d["producer_version"] = m.producer_version;
    d["graph_name"] = m.graph.name;
    d["domain"] = m.domain;
    d["description"] = m.doc_string;
    d["version"] = m.model_version;
    d["custom_metadata_map"] = custom;
    return d;
  }

  py::object end_profiling(const std::string& prefix) {
    if (!profiler_) return py::str("");
    StatusOr<std::string> p = profiler_->write(prefix);
    if (!p.is_ok()) raise_status(p.status());
    return py::str(p.value());
  }

  const Session& session() const { return *session_; }

 private:
  static std::string names(const std::vector<ValueInfo>& vs) {
    std::string s;
    for (const ValueInfo& v : vs) s += (s.empty() ? "'" : ", '") + v.name + "'";
    return s;
  }
  std::shared_ptr<Session> session_;
  std::shared_ptr<Profiler> profiler_;
  int log_level_ = 2;
  std::string logid_;
  std::unordered_map<std::string, size_t> input_index_, output_index_;
  std::vector<std::string> input_what_;  // "input 'name'", by input index
  std::vector<bool> output_constant_;    // by output index
};

}  // namespace ferry::python

PYBIND11_MODULE(_ferry, m) {
  using namespace ferry::python;
  m.doc() = "ferry's extension module; import `ferry` instead.";
  register_errors(m);
  m.attr("__version__") = ferry::ferry_version();

  py::class_<OpenOptions>(m, "_OpenOptions")
      .def(py::init<>())
      .def_readwrite("device", &OpenOptions::device)
      .def_readwrite("threads", &OpenOptions::threads)
      .def_readwrite("opt_level", &OpenOptions::opt_level)
      .def_readwrite("precision", &OpenOptions::precision)
      .def_readwrite("keep_fp32", &OpenOptions::keep_fp32)
      .def_readwrite("profile", &OpenOptions::profile)
      .def_readwrite("log_level", &OpenOptions::log_level)
      .def_readwrite("logid", &OpenOptions::logid);

  py::class_<RunControl, std::shared_ptr<RunControl>>(m, "_RunControl")
      .def(py::init<>())
      .def_property(
          "terminate", [](const RunControl& c) { return c.terminate.load(); },
          [](RunControl& c, bool v) { c.terminate.store(v); });

  py::class_<PySession, std::shared_ptr<PySession>>(m, "_Session")
      .def(py::init(&PySession::open), py::arg("model"), py::arg("options"))
      .def("run", &PySession::run, py::arg("output_names"), py::arg("feed"))
      .def("run_with", &PySession::run_with, py::arg("output_names"), py::arg("feed"), py::arg("control"),
           py::arg("log_level"), py::arg("tag"), py::arg("logid"))
      .def("io_info", &PySession::io_info, py::arg("inputs"))
      .def("_bench_native", &PySession::bench_native, py::arg("feed"), py::arg("runs"))
      .def("metadata", &PySession::metadata)
      .def("end_profiling", &PySession::end_profiling, py::arg("prefix"))
      .def_property_readonly("device", [](const PySession& s) { return s.session().device(); })
      .def_property_readonly("batch_sizes", [](const PySession& s) { return s.session().batch_sizes(); })
      .def_property_readonly("precision", [](const PySession& s) { return s.session().compiled().precision_mode; })
      .def_property_readonly("opt_level", [](const PySession& s) { return s.session().compiled().opt_level; });

  m.def(
      "_devices",
      []() {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& e : ferry::backend_entries()) out.emplace_back(e.name, e.summary);
        return out;
      },
      "The backends compiled in: (name, summary).");
  m.def(
      "_device_available",
      [](const std::string& device) {
        py::gil_scoped_release nogil;
        return ferry::make_backend(device).is_ok();
      },
      py::arg("device"));
  register_tools(m);
  register_trainer(m);
}
