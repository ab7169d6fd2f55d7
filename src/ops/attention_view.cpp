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

namespace {
bool valid_slice(const std::vector<int64_t>& slice, int64_t rank) {
  return slice.size() == 3 && slice[0] >= 0 && slice[0] < rank && slice[1] >= 0 && slice[1] <= slice[2];
}
}  // namespace

bool make_sliced_view(const std::vector<int64_t>& dims, const std::vector<int64_t>& slice,
                      const std::vector<int64_t>& perm, PermutedView* view, int64_t* offset) {
  *offset = 0;
  if (slice.empty()) return make_permuted_view(dims, perm, view);
  if (!valid_slice(slice, static_cast<int64_t>(dims.size())) || slice[2] > dims[slice[0]]) return false;
  std::vector<int64_t> cut = dims;
  cut[slice[0]] = slice[2] - slice[1];
  if (!make_permuted_view(cut, perm, view)) return false;
  // The strides are the whole tensor's.
  const std::vector<int64_t> st = strides_of(dims);
  for (size_t i = 0; i < view->strides.size(); ++i) view->strides[i] = st[perm.empty() ? i : perm[i]];
  *offset = slice[1] * st[slice[0]];
  return true;
}

bool slice_shape(const Shape& s, const std::vector<int64_t>& slice, Shape* out) {
  *out = s;
  if (slice.empty()) return true;
  if (!valid_slice(slice, s.rank())) return false;
  const Dim& d = s.dims[slice[0]];
  if (d.is_known() && slice[2] > d.value) return false;
  out->dims[slice[0]] = Dim(slice[2] - slice[1]);
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

bool broadcast_batch_dims(const std::vector<PermutedView*>& views, std::vector<int64_t>* batch_dims) {
  if (views.empty()) return false;
  const size_t r = views[0]->dims.size();
  if (r < 2) return false;
  batch_dims->assign(views[0]->dims.begin(), views[0]->dims.end() - 2);
  for (const PermutedView* v : views) {
    if (v->dims.size() != r) return false;
    for (size_t i = 0; i + 2 < r; ++i) {
      int64_t& b = (*batch_dims)[i];
      const int64_t d = v->dims[i];
      if (d == b || d == 1) continue;
      if (b != 1) return false;
      b = d;
    }
  }
  for (PermutedView* v : views)
    for (size_t i = 0; i + 2 < r; ++i)
      if (v->dims[i] != (*batch_dims)[i]) {
        v->dims[i] = (*batch_dims)[i];
        v->strides[i] = 0;
      }
  return true;
}

bool broadcast_batch_shape(const std::vector<const Shape*>& shapes, std::vector<Dim>* batch_dims) {
  if (shapes.empty() || shapes[0]->rank() < 2) return false;
  const int64_t r = shapes[0]->rank();
  batch_dims->assign(shapes[0]->dims.begin(), shapes[0]->dims.end() - 2);
  for (const Shape* s : shapes) {
    if (s->rank() != r) return false;
    for (int64_t i = 0; i + 2 < r; ++i) {
      Dim& b = (*batch_dims)[i];
      const Dim& d = s->dims[i];
      if (d == b || (d.is_known() && d.value == 1)) continue;
      if (b.is_known() && d.is_known() && b.value != 1) return false;
      if (!b.is_known() && !d.is_known()) b = Dim();  // two different unknowns
      else if (!b.is_known() || b.value == 1) b = d;  // (b unknown, d known != 1) or b == 1
    }
  }
  return true;
}

}  // namespace ferry
