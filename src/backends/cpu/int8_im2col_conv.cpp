// com.ferry.QConvFused on few input channels (an image stem: C = 3) as an im2col into the exact int8
// GEMM (int8_gemm.h), where oneDNN would split (AVX2 without VNNI, weights outside [-64, 64], a source
// with a zero point: int8_pair_saturation.h). oneDNN's split kernel runs a 3-channel convolution at a
// fraction of its rate on wide ones (MobileNetV2's 3x3/2 stem, 32 outputs: 0.93 CPU ms per run for
// 10.8 M multiply-adds, `ferry profile -t 1`); here the patches of every output pixel are copied once,
// (kh, kw, c) order, the padding as the source zero point (so it adds 0, as the reference's
// ConvInteger), into a u8 / s8 [pixels, KH * KW * C] matrix that int8_gemm multiplies by the weights
// reordered to [M, KH * KW * C]. The integer sums are the reference's and the epilogue is int8_gemm's
// (the reference's float steps in its order): bit for bit the reference kernel.
// Channels last, one group, 2-D, no residual, no mid Q/DQ, no activation; C <= 8 (the stems measured;
// wider convolutions stay with oneDNN or with int8_gemm's own 1x1 rule).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/int8_pair_saturation.h"
#include "backends/cpu/int8_util.h"
#include "backends/cpu/node_attrs.h"
#include "ops/conv_pool_util.h"

namespace ferry {
namespace {

using cpu::NodeAttrs;

constexpr int64_t kMaxIm2colChannels = 8;

class Int8Im2colQConvKernel : public Kernel {
 public:
  Int8Im2colQConvKernel(const Node& node, KernelFn fallback) : node_(node), fallback_(fallback) {}

  bool init(const Graph& graph) {
    if (!cpu::int8_gemm_available()) return false;
    enum : size_t { kX = 0, kXScale, kXZp, kW, kWScale, kWZp, kYScale, kYZp, kB, kZ, kZScale, kZZp, kMidScale, kMidZp };
    NodeAttrs attrs(node_);
    if (attrs.get_int("channels_last", 0) == 0 || attrs.get_int("group", 1) != 1 || !attrs.get_string("activation", "").empty() ||
        cpu::has_input(node_, kZ) || cpu::has_input(node_, kMidScale))
      return false;
    const Tensor* w = cpu::constant_input(graph, node_, kW);
    const Tensor* ws = cpu::constant_input(graph, node_, kWScale);
    if (!w || w->dtype() != DType::kI8 || w->rank() != 4 || !ws || ws->dtype() != DType::kF32 || !cpu::needs_split(*w))
      return false;
    const int64_t M = w->dim(0), C = w->dim(1), KH = w->dim(2), KW = w->dim(3);
    if (C > kMaxIm2colChannels || C < 1 || (ws->numel() != 1 && ws->numel() != M)) return false;
    const std::vector<int64_t> kernel = {KH, KW};
    if (!read_spatial_attrs(attrs, 2, &kernel, true, &spatial_).is_ok()) return false;
    const int8_t* wzp = nullptr;
    int64_t wzp_count = 0;
    if (cpu::has_input(node_, kWZp)) {
      const Tensor* wz = cpu::constant_input(graph, node_, kWZp);
      if (!wz || wz->dtype() != DType::kI8 || (wz->numel() != 1 && wz->numel() != M)) return false;
      wzp = wz->data<int8_t>();
      wzp_count = wz->numel();
    }
    const TensorType* xt = graph.find_type(node_.inputs[kX]);
    if (!xt || (xt->dtype != DType::kU8 && xt->dtype != DType::kI8)) return false;
    x_signed_ = xt->dtype == DType::kI8;
    const bool float_y = !cpu::has_input(node_, kYScale) && !cpu::has_input(node_, kYZp);
    const Tensor* yzt = float_y ? nullptr : cpu::constant_input(graph, node_, kYZp);
    if (!float_y && (!yzt || (yzt->dtype() != DType::kU8 && yzt->dtype() != DType::kI8))) return false;
    float xs = 0, xz = 0, ys = 1, yz = 0;
    if (!cpu::scalar_input(graph, node_, kXScale, &xs) || !cpu::scalar_input(graph, node_, kXZp, &xz) ||
        (!float_y && (!cpu::scalar_input(graph, node_, kYScale, &ys) || !cpu::scalar_input(graph, node_, kYZp, &yz))))
      return false;
    if (cpu::has_input(node_, kXZp) && cpu::constant_input(graph, node_, kXZp)->dtype() != xt->dtype) return false;
    if (!x_signed_ && xz == 0) return false;  // oneDNN unsplit with the repair (dnnl_int8_conv.cpp)
    x_zp_ = static_cast<int32_t>(xz);
    const bool has_bias = cpu::has_input(node_, kB);
    if (!factors_.set(xs, *ws, ys, yz, has_bias, has_bias ? cpu::constant_input(graph, node_, kB) : nullptr, M, &epi_))
      return false;
    epi_.conv_relu = attrs.get_int("conv_relu", 0) != 0;
    epi_.clip_lo = attrs.get_float("conv_min", -INFINITY) / ys;
    epi_.clip_hi = attrs.get_float("conv_max", INFINITY) / ys;
    epi_.clip = epi_.clip_lo > -INFINITY || epi_.clip_hi < INFINITY;
    epi_.relu = !float_y && attrs.get_int("relu", 0) != 0;  // (the reference's float output skips it)
    epi_.y_dt = float_y ? DType::kF32 : yzt->dtype();
    // The weights as [M, (kh, kw, c)], the order of the patches.
    const int64_t K = KH * KW * C;
    std::vector<int8_t> wr(static_cast<size_t>(M * K));
    const int8_t* src = w->data<int8_t>();
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < KH * KW; ++t) wr[static_cast<size_t>(m * K + t * C + c)] = src[(m * C + c) * KH * KW + t];
    packed_.pack(wr.data(), K, M, wzp, wzp_count, /*n_major=*/true);
    return true;
  }

  Status compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const DType want = x_signed_ ? DType::kI8 : DType::kU8;
    const int64_t C = packed_.K / (spatial_.kernel[0] * spatial_.kernel[1]);
    if (x.dtype() != want || x.rank() != 4 || x.dim(3) != C) return fallback_(ctx);
    NodeAttrs attrs(node_);
    AxisGeom gh, gw;
    if (!conv_pool_axis(attrs, spatial_, 0, x.dim(1), &gh).is_ok() || !conv_pool_axis(attrs, spatial_, 1, x.dim(2), &gw).is_ok() ||
        gh.out <= 0 || gw.out <= 0 || gh.pad_begin < 0 || gw.pad_begin < 0)
      return fallback_(ctx);
    const int64_t N = x.dim(0), H = x.dim(1), W = x.dim(2), OH = gh.out, OW = gw.out, K = packed_.K;
    ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, epi_.y_dt, {N, OH, OW, packed_.N}, false));
    const int64_t rows = N * OH * OW;
    thread_local std::vector<uint8_t> cols;
    if (static_cast<int64_t>(cols.size()) < rows * K) cols.resize(static_cast<size_t>(rows * K));
    uint8_t* d = cols.data();
    const uint8_t* xp = static_cast<const uint8_t*>(x.raw());
    const uint8_t pad = static_cast<uint8_t>(x_zp_);
    const int64_t KH = spatial_.kernel[0], KW = spatial_.kernel[1], sh = spatial_.strides[0], sw = spatial_.strides[1];
    const int64_t dh = spatial_.dilations[0], dw = spatial_.dilations[1], run = KW * C, xbytes = x.numel();
    parallel_ranges(N * OH, OW * K, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t n = r / OH, oh = r % OH;
        uint8_t* o = d + r * OW * K;
        const uint8_t* row_end = o + OW * K;
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t kh = 0; kh < KH; ++kh, o += run) {
            const int64_t ih = oh * sh - gh.pad_begin + kh * dh, iw0 = ow * sw - gw.pad_begin;
            if (ih < 0 || ih >= H) {
              std::memset(o, pad, static_cast<size_t>(run));
              continue;
            }
            const int64_t at = ((n * H + ih) * W + iw0) * C;
            if (dw == 1 && iw0 >= 0 && iw0 + KW <= W) {
              // One run of KW * C bytes; a 16-byte move where the run fits, the source has 16 bytes and the
              // bytes written past the run are this row's, written again after (another thread's are not).
              if (run <= 16 && at + 16 <= xbytes && o + 16 <= row_end)
                _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_loadu_si128(reinterpret_cast<const __m128i*>(xp + at)));
              else
                std::memcpy(o, xp + at, static_cast<size_t>(run));
              continue;
            }
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t iw = iw0 + kw * dw;
              if (iw < 0 || iw >= W) std::memset(o + kw * C, pad, static_cast<size_t>(C));
              else std::memcpy(o + kw * C, xp + ((n * H + ih) * W + iw) * C, static_cast<size_t>(C));
            }
          }
      }
    });
    cpu::int8_gemm(d, x_signed_, x_zp_, rows, packed_, epi_, y->mutable_raw());
    return Status::ok();
  }

 private:
  Node node_;
  KernelFn fallback_;
  SpatialAttrs spatial_;
  bool x_signed_ = false;
  int32_t x_zp_ = 0;
  cpu::EpilogueFactors factors_;
  cpu::Int8GemmEpilogue epi_;
  cpu::PackedInt8B packed_;
};

}  // namespace

void register_cpu_int8_im2col_conv_kernels(CpuKernelTable& t) {
  t.add("com.ferry", "QConvFused", cpu::make_if_init<Int8Im2colQConvKernel>);
}

}  // namespace ferry
