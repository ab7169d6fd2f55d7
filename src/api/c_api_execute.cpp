// ferry_execute's work: user buffers become tensors without a copy (Tensor::wrap), the session
// runs, results are copied into the output buffers. See c_api_internal.h.
#include <cstring>

#include "api/c_api_internal.h"

namespace ferry::capi {

ferry_status check_execute_args(const ferry_model* model, const ferry_dataset* inputs, const ferry_dataset* outputs) {
  if (!model || !inputs || !outputs) return fail(FERRY_ERROR_INVALID_ARGUMENT, "execute: model, inputs or outputs is null");
  if (inputs->buffers.size() != model->inputs.size())
    return fail(FERRY_ERROR_INVALID_ARGUMENT, "execute: the model has " + std::to_string(model->inputs.size()) +
                                                  " inputs, the input dataset holds " +
                                                  std::to_string(inputs->buffers.size()) + " buffers");
  if (outputs->buffers.size() != model->outputs.size())
    return fail(FERRY_ERROR_INVALID_ARGUMENT, "execute: the model has " + std::to_string(model->outputs.size()) +
                                                  " outputs, the output dataset holds " +
                                                  std::to_string(outputs->buffers.size()) + " buffers");
  return FERRY_OK;
}

namespace {

// The input's dims for a buffer of `size` bytes: every fixed dim as described, the one unfixed
// dim (the batch of a multi-gear model, a symbolic dim of an ONNX model) from the size.
StatusOr<std::vector<int64_t>> input_dims(const ferry_tensor_desc& d, size_t size) {
  const int64_t elem = dtype_size(static_cast<DType>(d.dtype));
  const std::string what = std::string("input '") + d.name + "'";
  if (d.rank < 0 || elem <= 0) return unsupported(what + ": its shape or element type is not known; cannot bind a buffer");
  std::vector<int64_t> dims(d.dims, d.dims + d.rank);
  int64_t fixed = elem;
  int unknown = -1;
  for (int32_t i = 0; i < d.rank; ++i) {
    if (dims[i] >= 0) {
      fixed *= dims[i];
    } else if (unknown >= 0) {
      return unsupported(what + " has several unfixed dimensions; compile the model with --input-shape");
    } else {
      unknown = i;
    }
  }
  if (unknown >= 0) {
    if (fixed == 0 || size % static_cast<size_t>(fixed) != 0)
      return invalid_argument(what + ": a buffer of " + std::to_string(size) + " bytes is not a whole number of " +
                              std::to_string(fixed) + "-byte samples");
    dims[unknown] = static_cast<int64_t>(size / static_cast<size_t>(fixed));
  } else if (static_cast<size_t>(fixed) != size) {
    return invalid_argument(what + ": the buffer holds " + std::to_string(size) + " bytes, the input needs " +
                            std::to_string(fixed) + " (" + dims_to_string(dims) + ")");
  }
  return dims;
}

}  // namespace

ferry_status execute(ferry_model* model, const ferry_dataset* inputs, ferry_dataset* outputs) {
  NamedTensors feeds;
  for (size_t i = 0; i < model->inputs.size(); ++i) {
    const ferry_tensor_desc& d = model->inputs[i];
    const auto& buf = inputs->buffers[i];
    auto dims = input_dims(d, buf.size);
    if (!dims.is_ok()) return from_status(dims.status());
    feeds.emplace_back(d.name, Tensor::wrap(static_cast<DType>(d.dtype), std::move(dims).value(), nullptr, buf.data));
  }
  NamedTensors results;
  if (Status st = model->session->run(feeds, &results); !st.is_ok()) return from_status(st);
  for (size_t k = 0; k < results.size() && k < outputs->buffers.size(); ++k) {
    const Tensor& t = results[k].second;
    auto& buf = outputs->buffers[k];
    if (t.dtype() == DType::kString)
      return fail(FERRY_ERROR_UNSUPPORTED, "output '" + results[k].first + "' holds strings; the C API returns numeric tensors");
    const size_t n = static_cast<size_t>(t.nbytes());
    if (n > buf.size)
      return fail(FERRY_ERROR_INVALID_ARGUMENT, "output '" + results[k].first + "' is " + t.type().to_string() + " (" +
                                                    std::to_string(n) + " bytes); its buffer holds only " +
                                                    std::to_string(buf.size));
    if (n) std::memcpy(buf.data, t.raw(), n);
    buf.dims = t.dims();
  }
  return FERRY_OK;
}

}  // namespace ferry::capi
