// oneDNN plumbing shared by the cpu backend's oneDNN kernels (dnnl_conv, dnnl_conv_train, dnnl_conv_grad, dnnl_matmul, dnnl_pool,
// dnnl_int8_conv, dnnl_int8_matmul, int8_pool, int8_transpose, attention):
// the engine and stream, dtype mapping, fused activations as post-ops, wrapping ferry tensors as
// oneDNN memory without copies, and the one try/catch of their plans and runs (oneDNN throws; kernels
// return Status: dnnl_call).
#pragma once

#include <dnnl.hpp>

#include <functional>
#include <list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "ops/fused_activation.h"

namespace ferry::cpu {

/// The process-wide CPU engine.
dnnl::engine& dnnl_engine();
/// A stream for the calling thread (oneDNN CPU streams are cheap but not thread-safe).
dnnl::stream& dnnl_stream();

/// f32 / bf16 / f16 map to oneDNN types; false for the others.
bool to_dnnl_type(DType t, dnnl::memory::data_type* out);

/// dims as oneDNN dims.
dnnl::memory::dims to_dnnl_dims(const std::vector<int64_t>& d);

/// The plain (row-major) format tag of a rank-r tensor, or channels-last (nwc / nhwc / ndhwc) for 3..5-D.
dnnl::memory::format_tag plain_tag(size_t rank, bool channels_last = false);

/// Where a matmul primitive keeps constant f32 weights [K, N] plain (`chosen`, its weights_desc():
/// dense row-major, as oneDNN 2.6's gemm path does on AVX2 hosts) and N is a multiple of 256 floats,
/// the same layout with each row kWeightRowPad floats longer; else a zero desc. Such a row stride puts
/// every row in the same cache sets and halves the product's speed: the caller makes its primitive
/// again with the padded desc (docs/performance.md, "Padded weight rows in MatMul / Gemm").
inline constexpr int64_t kWeightRowPad = 16;
dnnl::memory::desc padded_plain_weights(const dnnl::memory::desc& chosen);

/// Appends the post-ops computing `act` (one or two eltwise ops); false when oneDNN has none for it.
bool append_activation(const FusedActivation& act, dnnl::post_ops* ops);

/// Reads the fused activation of a node (none for plain ONNX ops); false when the attributes are invalid.
bool node_activation(const Node& node, FusedActivation* act);

/// A oneDNN memory over a tensor's data (no copy). The tensor must outlive the memory's use.
dnnl::memory wrap(const dnnl::memory::desc& desc, const Tensor& t);

/// A user-facing Status for a oneDNN error in `node`.
Status dnnl_error(const Node& node, const dnnl::error& e);

/// The one skeleton of a oneDNN kernel's plan and run: calls `body` (which makes or executes
/// primitives: oneDNN throws) and returns its Status, a dnnl::error becoming `node`'s (dnnl_error).
/// `body` returns void (success when it returns) or Status.
template <class Body>
Status dnnl_call(const Node& node, Body&& body) {
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<Body&>>) {
      body();
      return Status::ok();
    } else {
      return body();
    }
  } catch (const dnnl::error& e) {
    return dnnl_error(node, e);
  }
}

/// Calls make(convolution_winograd) when `winograd` and oneDNN has a Winograd kernel for the shape
/// (make throws dnnl::error when it has none), else make(convolution_direct), whose error propagates.
template <class Make>
void make_winograd_or_direct(bool winograd, Make&& make) {
  if (winograd) {
    try {
      make(dnnl::algorithm::convolution_winograd);
      return;
    } catch (const dnnl::error&) {  // no Winograd kernel for this shape here: the direct one
    }
  }
  make(dnnl::algorithm::convolution_direct);
}

/// Looks up the constant tensor feeding input `i` of `node` in `graph` (nullptr: not constant / absent).
const Tensor* constant_input(const Graph& graph, const Node& node, size_t i);

/// Static dims of value `v` (false when unknown or symbolic).
bool static_dims(const Graph& graph, const std::string& v, std::vector<int64_t>* dims);

// Primitive-plan plumbing of the int8 kernels (dnnl_int8_conv.cpp, dnnl_int8_matmul.cpp).

/// A reorder primitive between two layouts on the CPU engine.
dnnl::reorder make_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

/// An s32 scalar memory over `*v` (a run-time zero point); `*v` must outlive the primitive's run.
dnnl::memory s32_scalar_memory(const int32_t* v);

/// Whether oneDNN chose its reference implementation for `pd` (slow: the kernel runs ferry's own instead).
bool is_reference_impl(const dnnl::primitive_desc_base& pd);

/// A weight tensor packed into each oneDNN layout a plan asks for, once per layout: the bytes
/// `ferry compile` stored on the node, else a reorder of `user()` (prepacked.h). Not thread-safe:
/// call it where plans are made (under the plan cache's lock).
class PackedWeightsCache {
 public:
  const dnnl::memory* get(const Node& node, const char* kind, const dnnl::memory::desc& want,
                          const std::function<dnnl::memory()>& user);

 private:
  std::list<std::pair<dnnl::memory::desc, dnnl::memory>> packed_;
};

}  // namespace ferry::cpu
