// .npz data sets (see npz_dataset.h).
#include "data/npz_dataset.h"

#include <algorithm>
#include <cstring>

#include "io/npy.h"

namespace ferry {
namespace {

constexpr int64_t kMaxClasses = int64_t{1} << 24;

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Copies rows `indices` of `t` ([N, ...]) into a new [B, ...] tensor.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& indices) {
  std::vector<int64_t> dims = t.dims();
  dims[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::allocate(t.dtype(), dims);
  const int64_t row_bytes = t.dim(0) > 0 ? t.nbytes() / t.dim(0) : 0;
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.mutable_raw());
  for (size_t i = 0; i < indices.size(); ++i) {
    std::memcpy(dst + static_cast<int64_t>(i) * row_bytes, src + indices[i] * row_bytes, static_cast<size_t>(row_bytes));
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<NpzDataset>> NpzDataset::open(const std::string& path, const NpzDatasetOptions& options) {
  ASSIGN_OR_RETURN(auto arrays, read_npz(path));
  return from_arrays(std::move(arrays), "'" + path + "'", options);
}

StatusOr<std::unique_ptr<NpzDataset>> NpzDataset::from_arrays(std::vector<std::pair<std::string, Tensor>> arrays,
                                                              const std::string& what,
                                                              const NpzDatasetOptions& options) {
  std::string held;
  for (const auto& [name, t] : arrays) held += (held.empty() ? "" : ", ") + ("'" + name + "'");
  if (held.empty()) held = "no arrays";
  auto find = [&](const std::string& name) -> const Tensor* {
    for (const auto& [n, t] : arrays) {
      if (n == name) return &t;
    }
    return nullptr;
  };
  // Every array needs samples on axis 0; all must agree with `labels` on their count.
  auto check_array = [&](const std::string& name, const Tensor& t, const std::string& role) -> Status {
    if (t.dtype() == DType::kString) {
      return invalid_argument(what + ": array '" + name + "' holds strings; " + role + " must be numeric");
    }
    if (t.rank() == 0) {
      return invalid_argument(what + ": array '" + name + "' is a scalar; " + role +
                              " needs one row per sample on axis 0");
    }
    return Status::ok();
  };

  std::unique_ptr<NpzDataset> ds(new NpzDataset());
  ds->what_ = what;
  if (options.input_names.empty()) return invalid_argument(what + ": no model input names given");
  const Tensor* labels = find("labels");
  if (labels == nullptr) {
    return invalid_argument(what + " has no array 'labels' (it holds " + held +
                            "); save the targets with np.savez(path, <input>=x, labels=y)");
  }
  RETURN_IF_ERROR(check_array("labels", *labels, "labels"));
  ds->size_ = labels->dim(0);
  if (ds->size_ == 0) return invalid_argument(what + ": 'labels' has no samples (0 rows)");

  for (const std::string& name : options.input_names) {
    const Tensor* t = find(name);
    if (t == nullptr) {
      return invalid_argument(what + " has no array '" + name + "' for the model input '" + name + "' (it holds " +
                              held + "); name each array after the model input it feeds");
    }
    RETURN_IF_ERROR(check_array(name, *t, "model input '" + name + "'"));
    if (t->dim(0) != ds->size_) {
      return invalid_argument(what + ": array '" + name + "' has " + std::to_string(t->dim(0)) +
                              " samples (axis 0 of " + dims_string(t->dims()) + ") but 'labels' has " +
                              std::to_string(ds->size_) + "; every array needs one row per sample");
    }
    ds->inputs_.emplace_back(name, *t);
  }

  if (options.labels == NpzLabelKind::kClassIndex) {
    if (!dtype_is_integer(labels->dtype())) {
      return invalid_argument(what + ": 'labels' has dtype " + dtype_numpy_name(labels->dtype()) +
                              " but class indices must be integers (save them with labels.astype(np.int64)), or "
                              "use a regression loss (mse) for float targets");
    }
    if (labels->rank() != 1) {
      return invalid_argument(what + ": 'labels' has shape " + dims_string(labels->dims()) +
                              "; class indices are one integer per sample (shape [N])");
    }
    Tensor l = Tensor::allocate(DType::kI64, {ds->size_});
    int64_t max_label = -1;
    for (int64_t i = 0; i < ds->size_; ++i) {
      const bool unsigned_big = labels->dtype() == DType::kU64 && labels->data<uint64_t>()[i] > uint64_t{1} << 62;
      const int64_t v = unsigned_big ? kMaxClasses : labels->get_int64(i);
      if (v < 0 || v >= kMaxClasses) {
        return invalid_argument(what + ": 'labels' row " + std::to_string(i) + " is " +
                                (unsigned_big ? std::string("too large") : std::to_string(v)) +
                                "; class indices must lie in [0, " + std::to_string(kMaxClasses) + ")");
      }
      l.mutable_data<int64_t>()[i] = v;
      max_label = std::max(max_label, v);
    }
    ds->labels_ = l;
    ds->num_classes_ = max_label + 1;
  } else {
    if (labels->dtype() == DType::kBool) {
      return invalid_argument(what + ": 'labels' is boolean; regression targets must be numbers");
    }
    Tensor l = Tensor::allocate(DType::kF32, labels->dims());
    for (int64_t i = 0; i < labels->numel(); ++i) l.mutable_data<float>()[i] = static_cast<float>(labels->get_double(i));
    ds->labels_ = l;
    ds->num_classes_ = 0;
  }
  return ds;
}

std::vector<SampleInput> NpzDataset::inputs() const {
  std::vector<SampleInput> out;
  for (const auto& [name, t] : inputs_) {
    out.push_back(SampleInput{name, t.dtype(), std::vector<int64_t>(t.dims().begin() + 1, t.dims().end())});
  }
  return out;
}

Status NpzDataset::load(const std::vector<int64_t>& indices, uint64_t seed, Batch* out) const {
  for (int64_t i : indices) {
    if (i < 0 || i >= size_) {
      return invalid_argument("sample index " + std::to_string(i) + " is out of range: " + what_ + " has " +
                              std::to_string(size_) + " samples");
    }
  }
  out->inputs.clear();
  for (const auto& [name, t] : inputs_) out->inputs.emplace_back(name, gather_rows(t, indices));
  out->labels = gather_rows(labels_, indices);
  out->indices = indices;
  return Status::ok();
}

}  // namespace ferry
