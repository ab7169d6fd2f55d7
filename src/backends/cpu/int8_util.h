// Small pieces shared by the cpu backend's 8-bit kernel files (dnnl_int8_conv, dnnl_int8_matmul,
// int8_pool, int8_quantize, int8_transpose): oneDNN's type of an 8-bit tensor, the optional-input
// test, constant scalar inputs, and the factory of kernels that decline a node from init.
#pragma once

#include <dnnl.hpp>

#include <memory>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/dnnl_util.h"

namespace ferry::cpu {

/// u8 -> u8, f32 -> f32 (a float output), anything else -> s8.
inline dnnl::memory::data_type int8_type(DType t) {
  return t == DType::kU8 ? dnnl::memory::data_type::u8 : t == DType::kF32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::s8;
}

/// Whether optional input `i` of `n` is given.
inline bool has_input(const Node& n, size_t i) { return n.inputs.size() > i && !n.inputs[i].empty(); }

/// A scalar constant input as float (scales) or integer (zero points); false when not constant.
inline bool scalar_input(const Graph& g, const Node& n, size_t i, float* v) {
  const Tensor* t = constant_input(g, n, i);
  if (!t || t->numel() != 1) return false;
  *v = t->dtype() == DType::kF32 ? t->data<float>()[0] : static_cast<float>(t->get_int64(0));
  return t->dtype() == DType::kF32 || t->dtype() == DType::kU8 || t->dtype() == DType::kI8;
}

/// The factory of a kernel K(node, fallback) whose `bool init(graph)` says whether it takes the node
/// (false: the next factory, or the reference kernel, runs it).
template <class K>
StatusOr<std::unique_ptr<Kernel>> make_if_init(const Node& node, const OpSchema& schema, const Graph& graph) {
  auto k = std::make_unique<K>(node, schema.kernel);
  if (!k->init(graph)) return std::unique_ptr<Kernel>();
  return std::unique_ptr<Kernel>(std::move(k));
}

}  // namespace ferry::cpu
