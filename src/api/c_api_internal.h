// What the C API's handles hold, and helpers shared by its files (c_api.cpp: lifecycle, models,
// datasets; c_api_execute.cpp: binding buffers and running; c_api_stream.cpp: streams).
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "common/status.h"
#include "compiler/session.h"
#include "ferry/ferry.h"

struct ferry_model {
  std::shared_ptr<ferry::Session> session;
  std::vector<ferry_tensor_desc> inputs;   // names point into the session's graph
  std::vector<ferry_tensor_desc> outputs;
};

struct ferry_dataset {
  struct Buffer {
    void* data;
    size_t size;
    std::vector<int64_t> dims;  // outputs: the shape written by the last execution
  };
  std::vector<Buffer> buffers;
};

namespace ferry::capi {

/// Sets the calling thread's last error and returns `code`.
ferry_status fail(ferry_status code, const std::string& message);
/// Maps a Status to a ferry_status (setting the message when not ok).
ferry_status from_status(const Status& st);
/// FERRY_ERROR_NOT_INITIALIZED unless ferry_init() was called.
ferry_status require_init();

/// Runs `fn` (returning ferry_status) and turns any exception into an error status.
template <typename Fn>
ferry_status guard(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return fail(FERRY_ERROR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return fail(FERRY_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(FERRY_ERROR_INTERNAL, "internal error: unknown exception");
  }
}

/// Checks handles and buffer counts (what ferry_execute_async reports at once).
ferry_status check_execute_args(const ferry_model* model, const ferry_dataset* inputs, const ferry_dataset* outputs);
/// Binds the input buffers in place, runs, and copies the results into the output buffers.
ferry_status execute(ferry_model* model, const ferry_dataset* inputs, ferry_dataset* outputs);

}  // namespace ferry::capi
