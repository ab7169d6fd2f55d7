// Op family 'linalg': Einsum (opset 12) and Det (opset 11).
//
// Einsum is evaluated directly over the index space: every label (letter, or one of the axes an
// ellipsis stands for) gets a size; each operand gets one stride per label (the sum of the strides
// of its axes with that label, which takes diagonals; 0 where a size-1 axis broadcasts); the output
// labels are walked in row-major order and, for each output element, the remaining labels are
// summed over. Floats accumulate in double, integers in int64.
// Det is an LU decomposition with partial pivoting in double per matrix.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>

#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

// ---- Einsum equation ------------------------------------------------------------------------

constexpr int kEllipsisBase = 256;  // label of the k-th ellipsis axis: kEllipsisBase + k

struct Term {
  vector<int> letters;  // labels (chars) in order, with -1 standing where "..." is
  bool ellipsis = false;
};

struct Equation {
  vector<Term> inputs;
  bool explicit_output = false;
  Term output;
};

template <class Ctx>
Status parse_term(Ctx& ctx, const std::string& s, const std::string& what, Term* t) {
  t->letters.clear();
  t->ellipsis = false;
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '.') {
      if (s.compare(i, 3, "...") != 0)
        return ctx.error("attribute 'equation': " + what + " '" + s + "' has a '.' that is not part of '...'");
      if (t->ellipsis) return ctx.error("attribute 'equation': " + what + " '" + s + "' has more than one '...'");
      t->ellipsis = true;
      t->letters.push_back(-1);
      i += 3;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(c)))
      return ctx.error(std::string("attribute 'equation': ") + what + " '" + s + "' has the character '" + c +
                       "'; subscripts are letters a-z, A-Z and '...'");
    t->letters.push_back(static_cast<unsigned char>(c));
    ++i;
  }
  return Status::ok();
}

template <class Ctx>
Status parse_equation(Ctx& ctx, int64_t num_inputs, Equation* eq) {
  if (!ctx.has("equation")) return ctx.error("required attribute 'equation' is missing");
  std::string raw = ctx.get_string("equation", "");
  std::string s;
  for (char c : raw)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  std::string lhs = s, rhs;
  const size_t arrow = s.find("->");
  eq->explicit_output = arrow != std::string::npos;
  if (eq->explicit_output) {
    lhs = s.substr(0, arrow);
    rhs = s.substr(arrow + 2);
    if (rhs.find("->") != std::string::npos) return ctx.error("attribute 'equation' '" + raw + "' has more than one '->'");
  }
  eq->inputs.clear();
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    Term t;
    const std::string part = lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    RETURN_IF_ERROR(parse_term(ctx, part, "term " + std::to_string(eq->inputs.size()), &t));
    eq->inputs.push_back(t);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int64_t>(eq->inputs.size()) != num_inputs)
    return ctx.error("attribute 'equation' '" + raw + "' has " + std::to_string(eq->inputs.size()) +
                     " input term(s) but the node has " + std::to_string(num_inputs) + " input(s)");
  if (eq->explicit_output) {
    RETURN_IF_ERROR(parse_term(ctx, rhs, "the output", &eq->output));
    vector<int> seen;
    for (int l : eq->output.letters) {
      if (l < 0) continue;
      if (std::find(seen.begin(), seen.end(), l) != seen.end())
        return ctx.error("attribute 'equation' '" + raw + "': the output repeats the subscript '" +
                         std::string(1, static_cast<char>(l)) + "'");
      seen.push_back(l);
      bool found = false;
      for (const Term& t : eq->inputs) found |= std::find(t.letters.begin(), t.letters.end(), l) != t.letters.end();
      if (!found)
        return ctx.error("attribute 'equation' '" + raw + "': the output subscript '" +
                         std::string(1, static_cast<char>(l)) + "' does not appear in any input");
    }
  } else {
    // Implicit output: '...' (when any input has one), then the letters used exactly once, sorted.
    int count[256] = {0};
    bool any_ellipsis = false;
    for (const Term& t : eq->inputs) {
      any_ellipsis |= t.ellipsis;
      for (int l : t.letters)
        if (l >= 0) ++count[l];
    }
    eq->output.letters.clear();
    eq->output.ellipsis = any_ellipsis;
    if (any_ellipsis) eq->output.letters.push_back(-1);
    for (int l = 0; l < 256; ++l)
      if (count[l] == 1) eq->output.letters.push_back(l);
  }
  return Status::ok();
}

// Expands a term to one label per axis, given the operand's rank and the common ellipsis rank.
vector<int> expand_labels(const Term& t, int64_t rank, int64_t ell_rank_total) {
  vector<int> out;
  const int64_t explicit_count = static_cast<int64_t>(t.letters.size()) - (t.ellipsis ? 1 : 0);
  const int64_t ell = t.ellipsis ? rank - explicit_count : 0;
  for (int l : t.letters) {
    if (l >= 0) {
      out.push_back(l);
      continue;
    }
    for (int64_t k = 0; k < ell; ++k) out.push_back(kEllipsisBase + static_cast<int>(ell_rank_total - ell + k));
  }
  return out;
}

struct EinsumPlan {
  int64_t ell_rank = 0;                // axes the ellipsis stands for (the largest over the inputs)
  vector<vector<int>> in_labels;       // per input, one label per axis
  vector<int> out_labels;              // one label per output axis
  vector<int> sum_labels;              // labels summed over
};

// Checks the ranks against the equation and fills the plan; `ranks` are the inputs' ranks.
template <class Ctx>
Status plan_einsum(Ctx& ctx, const Equation& eq, const vector<int64_t>& ranks, EinsumPlan* p) {
  p->ell_rank = 0;
  for (size_t i = 0; i < eq.inputs.size(); ++i) {
    const Term& t = eq.inputs[i];
    const int64_t explicit_count = static_cast<int64_t>(t.letters.size()) - (t.ellipsis ? 1 : 0);
    if (t.ellipsis ? ranks[i] < explicit_count : ranks[i] != explicit_count)
      return ctx.error("attribute 'equation': term " + std::to_string(i) + " has " + std::to_string(explicit_count) +
                       " subscript(s)" + (t.ellipsis ? " and '...'" : "") + " but input " + std::to_string(i) +
                       " has rank " + std::to_string(ranks[i]));
    if (t.ellipsis) p->ell_rank = std::max(p->ell_rank, ranks[i] - explicit_count);
  }
  p->in_labels.clear();
  for (size_t i = 0; i < eq.inputs.size(); ++i) p->in_labels.push_back(expand_labels(eq.inputs[i], ranks[i], p->ell_rank));
  p->out_labels.clear();
  bool out_has_ellipsis = false;
  for (int l : eq.output.letters) {
    if (l >= 0) {
      p->out_labels.push_back(l);
      continue;
    }
    out_has_ellipsis = true;
    for (int64_t k = 0; k < p->ell_rank; ++k) p->out_labels.push_back(kEllipsisBase + static_cast<int>(k));
  }
  (void)out_has_ellipsis;  // ellipsis axes missing from an explicit output are summed (as numpy does)
  p->sum_labels.clear();
  for (const vector<int>& labels : p->in_labels)
    for (int l : labels)
      if (std::find(p->out_labels.begin(), p->out_labels.end(), l) == p->out_labels.end() &&
          std::find(p->sum_labels.begin(), p->sum_labels.end(), l) == p->sum_labels.end())
        p->sum_labels.push_back(l);
  return Status::ok();
}

std::string label_name(int l) {
  if (l >= kEllipsisBase) return "... axis " + std::to_string(l - kEllipsisBase);
  return std::string("'") + static_cast<char>(l) + "'";
}

Status infer_einsum(InferContext& ctx) {
  Equation eq;
  RETURN_IF_ERROR(parse_equation(ctx, ctx.num_inputs(), &eq));
  DType dt = DType::kUndefined;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is missing");
    const DType t = ctx.input_type(i).dtype;
    if (t == DType::kUndefined) continue;
    if (t == DType::kBool || t == DType::kString)
      return ctx.error(std::string("input ") + std::to_string(i) + " has element type " + dtype_name(t) +
                       "; Einsum takes numeric types");
    if (dt != DType::kUndefined && t != dt)
      return ctx.error(std::string("inputs have different element types: ") + dtype_name(dt) + " and " + dtype_name(t));
    dt = t;
  }
  vector<int64_t> ranks;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.input_type(i).shape) {
      // Without every rank the ellipsis rank is unknown; without an ellipsis the output rank is known.
      if (eq.output.ellipsis) {
        ctx.set_output(0, TensorType{dt, std::nullopt});
        return Status::ok();
      }
      int64_t n = 0;
      for (int l : eq.output.letters) n += l >= 0;
      bool in_ell = false;
      for (const Term& t : eq.inputs) in_ell |= t.ellipsis;
      if (in_ell) {
        ctx.set_output(0, TensorType{dt, Shape(vector<Dim>(static_cast<size_t>(n)))});
        return Status::ok();
      }
      ranks.push_back(static_cast<int64_t>(eq.inputs[i].letters.size()));
      continue;
    }
    ranks.push_back(ctx.input_type(i).shape->rank());
  }
  EinsumPlan p;
  RETURN_IF_ERROR(plan_einsum(ctx, eq, ranks, &p));
  // Label sizes: a known size other than 1 wins; sizes must agree (1 broadcasts).
  auto size_of = [&](int label) -> Dim {
    Dim best;
    bool have = false;
    for (size_t i = 0; i < p.in_labels.size(); ++i) {
      if (!ctx.input_type(static_cast<int64_t>(i)).shape) continue;
      const Shape& s = *ctx.input_type(static_cast<int64_t>(i)).shape;
      for (size_t a = 0; a < p.in_labels[i].size(); ++a) {
        if (p.in_labels[i][a] != label) continue;
        const Dim& d = s.dims[a];
        if (!have) {
          best = d;
          have = true;
        } else if (d.is_known() && best.is_known()) {
          if (best.value == 1) best = d;
        } else if (best.is_known() && best.value == 1) {
          best = d;
        } else if (!best.is_known() && !d.is_known() && !(best == d)) {
          best = Dim();
        }
      }
    }
    return best;
  };
  for (size_t i = 0; i < p.in_labels.size(); ++i) {
    if (!ctx.input_type(static_cast<int64_t>(i)).shape) continue;
    const Shape& s = *ctx.input_type(static_cast<int64_t>(i)).shape;
    for (size_t a = 0; a < p.in_labels[i].size(); ++a) {
      const Dim want = size_of(p.in_labels[i][a]);
      const Dim& d = s.dims[a];
      if (d.is_known() && want.is_known() && d.value != want.value && d.value != 1)
        return ctx.error("subscript " + label_name(p.in_labels[i][a]) + " has size " + std::to_string(d.value) +
                         " in input " + std::to_string(i) + " but size " + std::to_string(want.value) + " elsewhere");
    }
  }
  Shape out;
  for (int l : p.out_labels) out.dims.push_back(size_of(l));
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

template <typename T, typename Acc>
void einsum_compute(const vector<const T*>& data, const vector<vector<int64_t>>& out_strides,
                    const vector<vector<int64_t>>& sum_strides, const vector<int64_t>& out_sizes,
                    const vector<int64_t>& sum_sizes, T* y, int64_t out_numel) {
  const size_t n = data.size();
  const size_t no = out_sizes.size(), ns = sum_sizes.size();
  int64_t sum_numel = 1;
  for (int64_t s : sum_sizes) sum_numel *= s;
  vector<int64_t> oi(no, 0), si(ns, 0), base(n, 0), off(n, 0);
  for (int64_t o = 0; o < out_numel; ++o) {
    Acc acc = 0;
    if (sum_numel > 0) {
      std::fill(si.begin(), si.end(), 0);
      off = base;
      for (int64_t s = 0; s < sum_numel; ++s) {
        Acc prod = 1;
        for (size_t k = 0; k < n; ++k) prod *= static_cast<Acc>(data[k][off[k]]);
        acc += prod;
        for (size_t d = ns; d-- > 0;) {
          if (++si[d] < sum_sizes[d]) {
            for (size_t k = 0; k < n; ++k) off[k] += sum_strides[k][d];
            break;
          }
          si[d] = 0;
          for (size_t k = 0; k < n; ++k) off[k] -= sum_strides[k][d] * (sum_sizes[d] - 1);
        }
      }
    }
    y[o] = static_cast<T>(acc);
    for (size_t d = no; d-- > 0;) {
      if (++oi[d] < out_sizes[d]) {
        for (size_t k = 0; k < n; ++k) base[k] += out_strides[k][d];
        break;
      }
      oi[d] = 0;
      for (size_t k = 0; k < n; ++k) base[k] -= out_strides[k][d] * (out_sizes[d] - 1);
    }
  }
}

Status k_einsum(KernelContext& ctx) {
  Equation eq;
  RETURN_IF_ERROR(parse_equation(ctx, ctx.num_inputs(), &eq));
  vector<int64_t> ranks;
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.error("input " + std::to_string(i) + " is missing");
    ranks.push_back(ctx.input(i).rank());
  }
  const DType dt = ctx.input(0).dtype();
  for (int64_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.input(i).dtype() != dt)
      return ctx.error(std::string("inputs have different element types: ") + dtype_name(dt) + " and " +
                       dtype_name(ctx.input(i).dtype()));
  EinsumPlan p;
  RETURN_IF_ERROR(plan_einsum(ctx, eq, ranks, &p));
  // Label sizes (1 broadcasts against any size).
  std::map<int, int64_t> size;
  for (size_t i = 0; i < p.in_labels.size(); ++i) {
    const Tensor& t = ctx.input(static_cast<int64_t>(i));
    for (size_t a = 0; a < p.in_labels[i].size(); ++a) {
      const int l = p.in_labels[i][a];
      const int64_t d = t.dim(static_cast<int64_t>(a));
      auto it = size.find(l);
      if (it == size.end() || it->second == 1) size[l] = d;
      else if (d != 1 && d != it->second)
        return ctx.error("subscript " + label_name(l) + " has size " + std::to_string(d) + " in input " +
                         std::to_string(i) + " but size " + std::to_string(it->second) + " elsewhere");
    }
  }
  vector<int64_t> out_sizes, sum_sizes;
  for (int l : p.out_labels) out_sizes.push_back(size[l]);
  for (int l : p.sum_labels) sum_sizes.push_back(size[l]);
  // Per-input stride for each output / summed label.
  vector<vector<int64_t>> out_strides, sum_strides;
  vector<Tensor> held;
  for (size_t i = 0; i < p.in_labels.size(); ++i) {
    const Tensor& t = ctx.input(static_cast<int64_t>(i));
    const vector<int64_t> st = strides_of(t.dims());
    auto stride_for = [&](int l) {
      int64_t s = 0;
      for (size_t a = 0; a < p.in_labels[i].size(); ++a)
        if (p.in_labels[i][a] == l && t.dim(static_cast<int64_t>(a)) != 1) s += st[a];
      return s;
    };
    vector<int64_t> os, ss;
    for (int l : p.out_labels) os.push_back(stride_for(l));
    for (int l : p.sum_labels) ss.push_back(stride_for(l));
    out_strides.push_back(os);
    sum_strides.push_back(ss);
    held.push_back(widen_to_f32(t));
  }
  ASSIGN_OR_RETURN(Tensor y, Tensor::create(held[0].dtype(), out_sizes, ctx.node().describe() + " output 0"));
  int64_t sum_numel = 1;
  for (int64_t s : sum_sizes) sum_numel *= s;
  if (sum_numel > 0 && y.numel() > 0 && sum_numel > kMaxTensorElements / y.numel())
    return resource_exhausted(ctx.node().describe() + ": Einsum would iterate over more than 2^36 index combinations");
  auto run = [&](auto tag, auto acc_tag) {
    using T = decltype(tag);
    using Acc = decltype(acc_tag);
    vector<const T*> data;
    for (const Tensor& h : held) data.push_back(h.data<T>());
    einsum_compute<T, Acc>(data, out_strides, sum_strides, out_sizes, sum_sizes, y.mutable_data<T>(), y.numel());
  };
  switch (held[0].dtype()) {
    case DType::kF32: run(float(), double()); break;
    case DType::kF64: run(double(), double()); break;
    case DType::kI8: run(int8_t(), int64_t()); break;
    case DType::kU8: run(uint8_t(), int64_t()); break;
    case DType::kI16: run(int16_t(), int64_t()); break;
    case DType::kU16: run(uint16_t(), int64_t()); break;
    case DType::kI32: run(int32_t(), int64_t()); break;
    case DType::kU32: run(uint32_t(), int64_t()); break;
    case DType::kI64: run(int64_t(), int64_t()); break;
    case DType::kU64: run(uint64_t(), uint64_t()); break;
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  if (dt != y.dtype()) {
    ASSIGN_OR_RETURN(y, cast_tensor(y, dt));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

// ---- Det ------------------------------------------------------------------------------------

Status infer_det(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  if (x.dtype != DType::kUndefined && !dtype_is_float(x.dtype))
    return ctx.error(std::string("input 'X' has element type ") + dtype_name(x.dtype) + "; Det takes float types");
  std::optional<Shape> out;
  if (x.shape) {
    const Shape& s = *x.shape;
    if (s.rank() < 2) return ctx.error("input 'X' must have rank >= 2 ([*, M, M]), got shape " + s.to_string());
    const Dim &a = s.dims[s.rank() - 2], &b = s.dims[s.rank() - 1];
    if (a.is_known() && b.is_known() && a.value != b.value)
      return ctx.error("input 'X' has shape " + s.to_string() + "; the last two dimensions must be equal (square matrices)");
    out = Shape(vector<Dim>(s.dims.begin(), s.dims.end() - 2));
  }
  ctx.set_output(0, TensorType{x.dtype, out});
  return Status::ok();
}

double det_lu(vector<double>& a, int64_t n) {
  double det = 1.0;
  for (int64_t k = 0; k < n; ++k) {
    int64_t piv = k;
    for (int64_t i = k + 1; i < n; ++i)
      if (std::fabs(a[i * n + k]) > std::fabs(a[piv * n + k])) piv = i;
    if (a[piv * n + k] == 0.0) return 0.0;
    if (piv != k) {
      for (int64_t j = 0; j < n; ++j) std::swap(a[k * n + j], a[piv * n + j]);
      det = -det;
    }
    const double d = a[k * n + k];
    det *= d;
    for (int64_t i = k + 1; i < n; ++i) {
      const double f = a[i * n + k] / d;
      if (f == 0.0) continue;
      for (int64_t j = k + 1; j < n; ++j) a[i * n + j] -= f * a[k * n + j];
    }
  }
  return det;
}

Status k_det(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!dtype_is_float(x.dtype()))
    return ctx.error(std::string("input 'X' has element type ") + dtype_name(x.dtype()) + "; Det takes float types");
  if (x.rank() < 2) return ctx.error("input 'X' must have rank >= 2 ([*, M, M]), got shape " + dims_to_string(x.dims()));
  const int64_t n = x.dim(x.rank() - 1);
  if (x.dim(x.rank() - 2) != n)
    return ctx.error("input 'X' has shape " + dims_to_string(x.dims()) + "; the last two dimensions must be equal");
  const vector<int64_t> od(x.dims().begin(), x.dims().end() - 2);
  Tensor y = Tensor::allocate(DType::kF64, od);
  const vector<double> xv = x.to_double_vector();
  const int64_t count = y.numel();
  vector<double> a(static_cast<size_t>(n * n));
  for (int64_t b = 0; b < count; ++b) {
    std::copy(xv.begin() + b * n * n, xv.begin() + (b + 1) * n * n, a.begin());
    y.mutable_data<double>()[b] = det_lu(a, n);
  }
  if (x.dtype() != DType::kF64) {
    ASSIGN_OR_RETURN(y, cast_tensor(y, x.dtype()));
  }
  ctx.set_output(0, std::move(y));
  return Status::ok();
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.add(OpSchema{.name = "Einsum", .since_version = 12, .min_inputs = 1, .max_inputs = 1 << 20,
                 .attrs = {{"equation", AttrType::kString, true}}, .infer = infer_einsum, .kernel = k_einsum});
  r.add(OpSchema{.name = "Det", .since_version = 11, .attrs = {},
                 .types = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16}, .infer = infer_det, .kernel = k_det});
}

}  // namespace ferry
