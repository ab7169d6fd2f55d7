// See attention_view.h.
#include "ops/attention_view.h"

#include "ops/op_util.h"

namespace ferry {

namespace {
bool valid_perm(const std::vector<int64_t>& perm, size_t rank) {
  if (perm.size() != rank) return false;
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}
}  // namespace

bool make_permuted_view(const std::vector<int64_t>& dims, const std::vector<int64_t>& perm, PermutedView* view) {
  const std::vector<int64_t> st = strides_of(dims);
  if (perm.empty()) {
    view->dims = dims;
    view->strides = st;
    return true;
  }
  if (!valid_perm(perm, dims.size())) return false;
  view->dims.resize(perm.size());
  view->strides.resize(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    view->dims[i] = dims[perm[i]];
    view->strides[i] = st[perm[i]];
  }
  return true;
}

bool permute_shape(const Shape& s, const std::vector<int64_t>& perm, Shape* out) {
  if (perm.empty()) {
    *out = s;
    return true;
  }
  if (!valid_perm(perm, static_cast<size_t>(s.rank()))) return false;
  std::vector<Dim> d;
  for (int64_t p : perm) d.push_back(s.dims[p]);
  *out = Shape(d);
  return true;
}

bool make_output_view(const std::vector<int64_t>& logical_dims, const std::vector<int64_t>& out_perm,
                      std::vector<int64_t>* stored_dims, std::vector<int64_t>* logical_strides) {
  if (out_perm.empty()) {
    *stored_dims = logical_dims;
    *logical_strides = strides_of(logical_dims);
    return true;
  }
  if (!valid_perm(out_perm, logical_dims.size())) return false;
  stored_dims->resize(out_perm.size());
  for (size_t i = 0; i < out_perm.size(); ++i) (*stored_dims)[i] = logical_dims[out_perm[i]];
  const std::vector<int64_t> st = strides_of(*stored_dims);
  logical_strides->resize(out_perm.size());
  for (size_t i = 0; i < out_perm.size(); ++i) (*logical_strides)[out_perm[i]] = st[i];
  return true;
}

}  // namespace ferry
