// GPTQ weight rounding; see gptq.h.
#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace ferry::quant {
namespace {

int8_t round_clamp(double v, int qmax) { return static_cast<int8_t>(std::clamp(std::nearbyint(v), -double(qmax), double(qmax))); }

// Lower Cholesky factor of the symmetric positive definite a [k, k] in place (lower triangle
// written, upper left as is). False when a pivot is not positive.
bool cholesky_lower(std::vector<double>& a, int64_t k) {
  for (int64_t j = 0; j < k; ++j) {
    double* rj = a.data() + j * k;
    double d = rj[j];
#pragma omp simd reduction(- : d)
    for (int64_t m = 0; m < j; ++m) d -= rj[m] * rj[m];
    if (!(d > 0) || !std::isfinite(d)) return false;
    const double ljj = std::sqrt(d);
    rj[j] = ljj;
#pragma omp parallel for schedule(static) if (k - j > 256)
    for (int64_t i = j + 1; i < k; ++i) {
      double* ri = a.data() + i * k;
      double s = ri[j];
#pragma omp simd reduction(- : s)
      for (int64_t m = 0; m < j; ++m) s -= ri[m] * rj[m];
      ri[j] = s / ljj;
    }
  }
  return true;
}

// Inverse of the lower triangular l [k, k] (lower triangle used): X with X L = I... computed row by row
// as L X = I (forward substitution on rows): X[i] = (e_i - sum_{m<i} L[i][m] X[m]) / L[i][i].
std::vector<double> invert_lower(const std::vector<double>& l, int64_t k) {
  std::vector<double> x(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    double* xi = x.data() + i * k;
    const double* li = l.data() + i * k;
    xi[i] = 1.0;
    for (int64_t m = 0; m < i; ++m) {
      const double c = li[m];
      if (c == 0) continue;
      const double* xm = x.data() + m * k;
#pragma omp simd
      for (int64_t t = 0; t <= m; ++t) xi[t] -= c * xm[t];
    }
    const double inv = 1.0 / li[i];
#pragma omp simd
    for (int64_t t = 0; t <= i; ++t) xi[t] *= inv;
  }
  return x;
}

}  // namespace

void HessianAccumulator::add(const float* rows, int64_t count) {
  // H += X^T X over a block of rows, the block transposed so each entry is a contiguous dot product.
  constexpr int64_t kBlock = 256;
  std::vector<double> xt(static_cast<size_t>(k_ * kBlock));
  for (int64_t r0 = 0; r0 < count; r0 += kBlock) {
    const int64_t b = std::min(kBlock, count - r0);
    for (int64_t r = 0; r < b; ++r)
      for (int64_t a = 0; a < k_; ++a) xt[static_cast<size_t>(a * kBlock + r)] = rows[(r0 + r) * k_ + a];
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t a = 0; a < k_; ++a) {
      const double* xa = xt.data() + a * kBlock;
      double* ha = h_.data() + a * k_;
      for (int64_t c = a; c < k_; ++c) {
        const double* xc = xt.data() + c * kBlock;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t r = 0; r < b; ++r) s += xa[r] * xc[r];
        ha[c] += s;
      }
    }
  }
  rows_ += count;
}

std::vector<int8_t> nearest_round(const float* w, int64_t n, int64_t k, const std::vector<float>& scales, int qmax) {
  std::vector<int8_t> q(static_cast<size_t>(n * k));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      q[static_cast<size_t>(r * k + c)] =
          static_cast<int8_t>(std::clamp(std::nearbyint(w[r * k + c] / scales[static_cast<size_t>(r)]), -float(qmax), float(qmax)));
  return q;
}

std::vector<int8_t> gptq_round(const float* w, int64_t n, const std::vector<float>& scales, const HessianAccumulator& acc,
                               double damp, bool act_order, bool* fell_back, int qmax) {
  const int64_t k = acc.k();
  if (fell_back) *fell_back = false;
  if (acc.rows() == 0 || k == 0) {
    if (fell_back) *fell_back = true;
    return nearest_round(w, n, k, scales);
  }
  // Column order: largest diagonal first ("act order"); H in that order, symmetric, damped.
  std::vector<double> diag(static_cast<size_t>(k));
  for (int64_t a = 0; a < k; ++a) diag[static_cast<size_t>(a)] = acc.h()[static_cast<size_t>(a * k + a)];
  std::vector<int64_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order)
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t x, int64_t y) { return diag[static_cast<size_t>(x)] > diag[static_cast<size_t>(y)]; });
  double mean_diag = 0;
  for (double d : diag) mean_diag += d;
  mean_diag /= static_cast<double>(k);
  if (!(mean_diag > 0)) {
    if (fell_back) *fell_back = true;
    return nearest_round(w, n, k, scales);
  }
  // The upper Cholesky factor U of H^-1 (H^-1 = U^T U), through the reversed matrix: with P the
  // reversal, chol(P H P) = L' gives U = P L'^-1 P. Built directly in reversed order: hr[i][j] =
  // H[perm[k-1-i]][perm[k-1-j]].
  std::vector<double> hr(static_cast<size_t>(k * k));
  const std::vector<double>& h = acc.h();
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      int64_t a = perm[static_cast<size_t>(k - 1 - i)], b = perm[static_cast<size_t>(k - 1 - j)];
      if (a > b) std::swap(a, b);  // the accumulator fills the upper triangle
      double v = h[static_cast<size_t>(a * k + b)];
      if (i == j) v = (v == 0 ? 1.0 : v) + damp * mean_diag;
      hr[static_cast<size_t>(i * k + j)] = v;
    }
  if (!cholesky_lower(hr, k)) {
    if (fell_back) *fell_back = true;
    return nearest_round(w, n, k, scales);
  }
  const std::vector<double> li = invert_lower(hr, k);
  hr.clear();
  hr.shrink_to_fit();
  // U[i][j] = li[k-1-i][k-1-j] (upper).
  std::vector<double> u(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = i; j < k; ++j) u[static_cast<size_t>(i * k + j)] = li[static_cast<size_t>((k - 1 - i) * k + (k - 1 - j))];
  // Rows are independent: each row rounds its columns in order, spreading each error over the rest.
  std::vector<int8_t> q(static_cast<size_t>(n * k));
  constexpr int64_t kRows = 16;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t rb = std::min(kRows, n - r0);
    std::vector<double> wr(static_cast<size_t>(rb * k));
    for (int64_t r = 0; r < rb; ++r)
      for (int64_t c = 0; c < k; ++c) wr[static_cast<size_t>(r * k + c)] = w[(r0 + r) * k + perm[static_cast<size_t>(c)]];
    for (int64_t i = 0; i < k; ++i) {
      const double* ui = u.data() + i * k;
      for (int64_t r = 0; r < rb; ++r) {
        double* x = wr.data() + r * k;
        const double s = scales[static_cast<size_t>(r0 + r)];
        const int8_t v = round_clamp(x[i] / s, qmax);
        q[static_cast<size_t>((r0 + r) * k + perm[static_cast<size_t>(i)])] = v;
        const double e = (x[i] - v * s) / ui[i];
#pragma omp simd
        for (int64_t c = i + 1; c < k; ++c) x[c] -= e * ui[c];
      }
    }
  }
  return q;
}

double output_error(const float* w, const int8_t* q, int64_t n, const std::vector<float>& scales, const HessianAccumulator& acc) {
  // sum_r d_r^T H d_r / rows with d_r = q_r s_r - w_r (H: upper triangle).
  const int64_t k = acc.k();
  if (acc.rows() == 0) return 0;
  const std::vector<double>& h = acc.h();
  double total = 0;
  std::vector<double> d(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c)
      d[static_cast<size_t>(c)] = q[r * k + c] * static_cast<double>(scales[static_cast<size_t>(r)]) - w[r * k + c];
    for (int64_t a = 0; a < k; ++a) {
      double s = 0;
      for (int64_t b = a + 1; b < k; ++b) s += h[static_cast<size_t>(a * k + b)] * d[static_cast<size_t>(b)];
      total += d[static_cast<size_t>(a)] * (h[static_cast<size_t>(a * k + a)] * d[static_cast<size_t>(a)] + 2 * s);
    }
  }
  return total / static_cast<double>(acc.rows());
}

}  // namespace ferry::quant
