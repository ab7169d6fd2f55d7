// Shared by the extension module's files (src/python/): Status -> Python exception, numpy <-> Tensor.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "ir/tensor.h"

namespace ferry::python {

/// Carries a Status out of a binding; the module's translator raises `type` with the message.
class StatusError : public std::exception {
 public:
  StatusError(Status st, PyObject* type) : st_(std::move(st)), type_(type) {}
  const char* what() const noexcept override { return st_.message().c_str(); }
  PyObject* type() const { return type_; }

 private:
  Status st_;
  PyObject* type_;
};

/// Throws the StatusError for `st` (ferry.InvalidArgument, ferry.NotImplemented, ...).
[[noreturn]] void raise_status(const Status& st);

template <typename T>
T unwrap(StatusOr<T> s) {
  if (!s.is_ok()) raise_status(s.status());
  return std::move(s).value();
}
inline void check(const Status& st) {
  if (!st.is_ok()) raise_status(st);
}

/// "float", "int64", ... (ONNX's names, as in "tensor(float)").
const char* onnx_type_name(DType t);
/// A tensor reading `obj` (a numpy array, or any array-like, converted to `want`) in place when it
/// is C-contiguous and aligned; the arrays it reads are appended to *keep (alive until the run ends).
/// kUndefined accepts any dtype. Errors name `what`.
Tensor tensor_view(const std::string& what, pybind11::handle obj, DType want, std::vector<pybind11::object>* keep);
/// A numpy array owning `t`'s buffer (a copy of it when `copy`).
pybind11::object tensor_to_numpy(const Tensor& t, bool copy);

/// tools.cpp: compile, check, compare, quantize, doctor, bench.
void register_tools(pybind11::module_& m);
/// trainer.cpp: ferry._ferry._Trainer (train/StepTrainer).
void register_trainer(pybind11::module_& m);

}  // namespace ferry::python
