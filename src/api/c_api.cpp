// The C API (include/ferry/ferry.h) over ferry::Session. Every entry point catches everything:
// no exception crosses the ABI; errors become a status plus a thread-local message.
#include "ferry/ferry.h"

#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "api/c_api_internal.h"
#include "backends/backend.h"
#include "compiler/session.h"

namespace {

thread_local std::string t_last_error;
std::atomic<int> g_init_count{0};
std::mutex g_config_mu;
std::string g_device;  // "" = the model's own device
int g_threads = 0;

}  // namespace

namespace ferry::capi {

ferry_status fail(ferry_status code, const std::string& message) {
  t_last_error = message;
  return code;
}

ferry_status from_status(const Status& st) {
  if (st.is_ok()) return FERRY_OK;
  ferry_status code = FERRY_ERROR_INTERNAL;
  switch (st.code()) {
    case StatusCode::kOk: code = FERRY_OK; break;
    case StatusCode::kInvalidArgument: code = FERRY_ERROR_INVALID_ARGUMENT; break;
    case StatusCode::kInvalidModel: code = FERRY_ERROR_INVALID_MODEL; break;
    case StatusCode::kUnsupported: code = FERRY_ERROR_UNSUPPORTED; break;
    case StatusCode::kNotFound: code = FERRY_ERROR_NOT_FOUND; break;
    case StatusCode::kResourceExhausted: code = FERRY_ERROR_RESOURCE_EXHAUSTED; break;
    case StatusCode::kInternal: code = FERRY_ERROR_INTERNAL; break;
  }
  return fail(code, st.message());
}

ferry_status require_init() {
  if (g_init_count.load() <= 0) return fail(FERRY_ERROR_NOT_INITIALIZED, "ferry_init() was not called");
  return FERRY_OK;
}

}  // namespace ferry::capi

using ferry::capi::fail;
using ferry::capi::from_status;
using ferry::capi::guard;

namespace {

void describe(const ferry::ValueInfo& v, bool multi_gear, ferry_tensor_desc* d) {
  std::memset(d, 0, sizeof *d);
  d->name = v.name.c_str();
  d->dtype = static_cast<ferry_dtype>(v.type.dtype);
  if (!v.type.shape) {
    d->rank = -1;
    return;
  }
  d->rank = static_cast<int32_t>(v.type.shape->rank());
  int64_t elements = 1;
  bool known = true;
  for (int64_t i = 0; i < v.type.shape->rank() && i < FERRY_MAX_RANK; ++i) {
    const ferry::Dim& dim = v.type.shape->dims[static_cast<size_t>(i)];
    d->dims[i] = dim.is_known() ? dim.value : -1;
    if (dim.is_known()) elements *= dim.value;
    else known = false;
  }
  if (known) d->size_bytes = static_cast<size_t>(elements * ferry::dtype_size(v.type.dtype));
  if (multi_gear && d->rank > 0) d->dims[0] = -1;  // the batch is chosen per call
}

}  // namespace

extern "C" {

const char* ferry_last_error(void) { return t_last_error.c_str(); }

const char* ferry_status_name(ferry_status status) {
  switch (status) {
    case FERRY_OK: return "FERRY_OK";
    case FERRY_ERROR_INVALID_ARGUMENT: return "FERRY_ERROR_INVALID_ARGUMENT";
    case FERRY_ERROR_INVALID_MODEL: return "FERRY_ERROR_INVALID_MODEL";
    case FERRY_ERROR_UNSUPPORTED: return "FERRY_ERROR_UNSUPPORTED";
    case FERRY_ERROR_NOT_FOUND: return "FERRY_ERROR_NOT_FOUND";
    case FERRY_ERROR_RESOURCE_EXHAUSTED: return "FERRY_ERROR_RESOURCE_EXHAUSTED";
    case FERRY_ERROR_NOT_INITIALIZED: return "FERRY_ERROR_NOT_INITIALIZED";
    case FERRY_ERROR_INTERNAL: return "FERRY_ERROR_INTERNAL";
  }
  return "FERRY_ERROR_UNKNOWN";
}

const char* ferry_version(void) {
  static const std::string v = ferry::ferry_version();
  return v.c_str();
}

ferry_status ferry_init(void) {
  ++g_init_count;
  t_last_error.clear();
  return FERRY_OK;
}

ferry_status ferry_finalize(void) {
  int n = g_init_count.load();
  while (n > 0 && !g_init_count.compare_exchange_weak(n, n - 1)) {
  }
  if (n <= 0) return fail(FERRY_ERROR_NOT_INITIALIZED, "ferry_finalize() without a matching ferry_init()");
  return FERRY_OK;
}

ferry_status ferry_device_count(int32_t* count) {
  return guard([&] {
    if (!count) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_count: count is null");
    *count = static_cast<int32_t>(ferry::backend_entries().size());
    return FERRY_OK;
  });
}

ferry_status ferry_device_name(int32_t index, const char** name) {
  return guard([&] {
    const auto& entries = ferry::backend_entries();
    if (!name || index < 0 || static_cast<size_t>(index) >= entries.size())
      return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_device_name: index " + std::to_string(index) + " is not in [0, " +
                                                    std::to_string(entries.size()) + ")");
    *name = entries[static_cast<size_t>(index)].name;
    return FERRY_OK;
  });
}

ferry_status ferry_set_device(const char* name) {
  return guard([&] {
    if (ferry_status s = ferry::capi::require_init(); s != FERRY_OK) return s;
    if (!name) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_set_device: name is null");
    auto backend = ferry::make_backend(name);  // validates the name (the error lists the known devices)
    if (!backend.is_ok()) return from_status(backend.status());
    std::lock_guard<std::mutex> lock(g_config_mu);
    g_device = name;
    return FERRY_OK;
  });
}

ferry_status ferry_set_num_threads(int32_t threads) {
  return guard([&] {
    if (threads < 0) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_set_num_threads: threads must be >= 0");
    std::lock_guard<std::mutex> lock(g_config_mu);
    g_threads = threads;
    return FERRY_OK;
  });
}

}  // extern "C"

namespace {

ferry::SessionOptions current_options() {
  std::lock_guard<std::mutex> lock(g_config_mu);
  ferry::SessionOptions o;
  o.device = g_device;
  o.threads = g_threads;
  return o;
}

ferry_status finish_load(ferry::StatusOr<std::shared_ptr<ferry::Session>> session, ferry_model** out) {
  if (!session.is_ok()) return from_status(session.status());
  auto m = std::make_unique<ferry_model>();
  m->session = std::move(session).value();
  const bool multi = !m->session->batch_sizes().empty();
  for (const ferry::ValueInfo& v : m->session->inputs()) {
    m->inputs.emplace_back();
    describe(v, multi, &m->inputs.back());
  }
  for (const ferry::ValueInfo& v : m->session->outputs()) {
    m->outputs.emplace_back();
    describe(v, multi, &m->outputs.back());
  }
  *out = m.release();
  return FERRY_OK;
}

}  // namespace

extern "C" {

ferry_status ferry_model_load_from_file(const char* path, ferry_model** model) {
  return guard([&] {
    if (ferry_status s = ferry::capi::require_init(); s != FERRY_OK) return s;
    if (!path || !model) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_model_load_from_file: path or model is null");
    *model = nullptr;
    return finish_load(ferry::Session::open_file(path, current_options()), model);
  });
}

ferry_status ferry_model_load_from_memory(const void* data, size_t size, ferry_model** model) {
  return guard([&] {
    if (ferry_status s = ferry::capi::require_init(); s != FERRY_OK) return s;
    if (!data || !model) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_model_load_from_memory: data or model is null");
    *model = nullptr;
    return finish_load(ferry::Session::open_memory(data, size, current_options()), model);
  });
}

ferry_status ferry_model_unload(ferry_model* model) {
  return guard([&] {
    delete model;
    return FERRY_OK;
  });
}

size_t ferry_model_num_inputs(const ferry_model* model) { return model ? model->inputs.size() : 0; }
size_t ferry_model_num_outputs(const ferry_model* model) { return model ? model->outputs.size() : 0; }

ferry_status ferry_model_get_input_desc(const ferry_model* model, size_t index, ferry_tensor_desc* desc) {
  if (!model || !desc || index >= model->inputs.size())
    return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_model_get_input_desc: null argument or index " +
                                                  std::to_string(index) + " out of range");
  *desc = model->inputs[index];
  return FERRY_OK;
}

ferry_status ferry_model_get_output_desc(const ferry_model* model, size_t index, ferry_tensor_desc* desc) {
  if (!model || !desc || index >= model->outputs.size())
    return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_model_get_output_desc: null argument or index " +
                                                  std::to_string(index) + " out of range");
  *desc = model->outputs[index];
  return FERRY_OK;
}

ferry_status ferry_model_get_batch_sizes(const ferry_model* model, int64_t* sizes, size_t* count) {
  return guard([&] {
    if (!model || !count) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_model_get_batch_sizes: null argument");
    const std::vector<int64_t> gears = model->session->batch_sizes();
    if (sizes)  // null: only the count is wanted
      for (size_t i = 0; i < gears.size() && i < *count; ++i) sizes[i] = gears[i];
    *count = gears.size();
    return FERRY_OK;
  });
}

ferry_status ferry_dataset_create(ferry_dataset** dataset) {
  return guard([&] {
    if (!dataset) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_dataset_create: dataset is null");
    *dataset = new ferry_dataset();
    return FERRY_OK;
  });
}

ferry_status ferry_dataset_destroy(ferry_dataset* dataset) {
  delete dataset;
  return FERRY_OK;
}

ferry_status ferry_dataset_add_buffer(ferry_dataset* dataset, void* data, size_t size) {
  return guard([&] {
    if (!dataset) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_dataset_add_buffer: dataset is null");
    if (!data && size > 0) return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_dataset_add_buffer: data is null");
    dataset->buffers.push_back({data, size, {}});
    return FERRY_OK;
  });
}

size_t ferry_dataset_num_buffers(const ferry_dataset* dataset) { return dataset ? dataset->buffers.size() : 0; }

ferry_status ferry_dataset_get_dims(const ferry_dataset* dataset, size_t index, int32_t* rank, int64_t* dims) {
  if (!dataset || !rank || !dims || index >= dataset->buffers.size())
    return fail(FERRY_ERROR_INVALID_ARGUMENT, "ferry_dataset_get_dims: null argument or index " + std::to_string(index) +
                                                  " out of range");
  const auto& d = dataset->buffers[index].dims;
  if (d.size() > FERRY_MAX_RANK) return fail(FERRY_ERROR_UNSUPPORTED, "ferry_dataset_get_dims: rank over FERRY_MAX_RANK");
  *rank = static_cast<int32_t>(d.size());
  for (size_t i = 0; i < d.size(); ++i) dims[i] = d[i];
  return FERRY_OK;
}

ferry_status ferry_execute(ferry_model* model, const ferry_dataset* inputs, ferry_dataset* outputs) {
  return guard([&] {
    if (ferry_status s = ferry::capi::check_execute_args(model, inputs, outputs); s != FERRY_OK) return s;
    return ferry::capi::execute(model, inputs, outputs);
  });
}

}  // extern "C"
