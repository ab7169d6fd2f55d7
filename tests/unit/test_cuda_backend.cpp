// The CUDA backend. Without a GPU (or without FERRY_CUDA) the device tests are skipped with the
// reason, and what can be checked without a GPU runs: device names, the clear "no GPU" error, the
// backend listing. With a GPU every CUDA kernel is compared with the reference kernel (cpu-ref).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "backends/backend.h"
#include "backends/backend_module.h"
#include "op_tester.h"
#include "ops/op_util.h"
#include "ops/registry.h"

#ifdef FERRY_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#endif

namespace ferry {
namespace {

using testing::I64_;
using testing::OpTester;
using testing::T_;

#ifndef FERRY_WITH_CUDA

TEST(Cuda, NotBuilt) { GTEST_SKIP() << "built without the CUDA backend (configure with -DFERRY_CUDA=ON and a CUDA toolkit)"; }

#else

/// "" when a GPU is usable, else why not.
std::string gpu_missing() {
  static const std::string reason = [] {
    auto d = list_cuda_devices();
    return d.is_ok() ? std::string() : d.status().message();
  }();
  return reason;
}

#define REQUIRE_GPU()                                                  \
  do {                                                                 \
    if (!gpu_missing().empty()) GTEST_SKIP() << "no GPU: " << gpu_missing(); \
  } while (0)

TEST(CudaDevice, ParsesDeviceNames) {
  EXPECT_EQ(parse_cuda_device_index("cuda").value(), 0);
  EXPECT_EQ(parse_cuda_device_index("cuda:3").value(), 3);
  for (const char* bad : {"cuda:", "cuda:x", "cuda:-1", "cuda:fp16", "cudax"}) {
    auto r = parse_cuda_device_index(bad);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("cuda:N"), std::string::npos) << r.status().message();
  }
}

TEST(CudaDevice, MakeBackendSaysWhyWhenThereIsNoGpu) {
  auto b = make_backend("cuda");
  if (gpu_missing().empty()) {
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    EXPECT_EQ(b.value()->name(), "cuda:0");
    return;
  }
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnsupported);
  // Names the cause and what to do instead.
  EXPECT_NE(b.status().message().find("--device cpu"), std::string::npos) << b.status().message();
  auto b1 = make_backend("cuda:1");
  ASSERT_FALSE(b1.is_ok());
  auto bad = make_backend("cuda:zero");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(CudaDevice, ListedAsAModuleLoadedOnDemand) {
  const BackendEntry* cuda = nullptr;
  for (const BackendEntry& e : backend_entries())
    if (std::string(e.name) == "cuda") cuda = &e;
  ASSERT_NE(cuda, nullptr);
  ASSERT_NE(cuda->module, nullptr);
  EXPECT_STREQ(cuda->module, "libferry_backend_cuda.so");
  // Loads (the CUDA libraries are installed here even without a GPU) and belongs to this build.
  auto api = load_backend_module(*cuda);
  ASSERT_TRUE(api.is_ok()) << api.status().to_string();
  EXPECT_TRUE(backend_module_loaded(*cuda));
  EXPECT_EQ(api.value()->abi, kBackendModuleAbi);
  auto b = api.value()->open("cuda");
  if (!gpu_missing().empty()) {
    ASSERT_FALSE(b.is_ok());
    EXPECT_EQ(b.status().message(), gpu_missing());  // the module says the same as the linked-in copy
  } else {
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  }
}

TEST(CudaDevice, SupportsOnlyWhatItHasKernelsFor) {
  REQUIRE_GPU();
  auto b = make_backend("cuda");
  ASSERT_TRUE(b.is_ok());
  Node n;
  n.name = "n";
  std::string why;
  n.op_type = "Conv";
  EXPECT_TRUE(b.value()->supports(n, *op_registry().find("", "Conv", 17), &why)) << why;
  n.op_type = "NonMaxSuppression";
  EXPECT_FALSE(b.value()->supports(n, *op_registry().find("", "NonMaxSuppression", 17), &why));
  EXPECT_NE(why.find("no CUDA kernel"), std::string::npos) << why;
}

// --- kernels against the reference (GPU only) ---

Tensor random_tensor(std::vector<int64_t> dims, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  uint32_t s = seed * 2654435761u + 12345u;
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = lo + (hi - lo) * static_cast<float>(s >> 8) / static_cast<float>(1u << 24);
  }
  return t;
}

Tensor to_type(const Tensor& t, DType d) { return cast_tensor(t, d).value(); }

/// Runs `tester` on cpu-ref and cuda and compares every output.
void expect_same(OpTester& tester, double atol = 1e-5, double rtol = 1e-5) {
  auto ref = tester.run_status("cpu-ref");
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  auto got = tester.run_status("cuda");
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(ref.value().size(), got.value().size());
  for (size_t i = 0; i < ref.value().size(); ++i) testing::expect_near(got.value()[i], ref.value()[i], atol, rtol);
}

TEST(CudaKernels, Unary) {
  REQUIRE_GPU();
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Erf", "Floor", "HardSwish"}) {
    SCOPED_TRACE(op);
    OpTester t(op, 17);
    t.input(random_tensor({3, 5, 7}, 1, -3.f, 3.f));
    expect_same(t, 1e-6, 1e-5);
  }
  OpTester gelu("Gelu", 20);
  gelu.input(random_tensor({4, 33}, 2, -4.f, 4.f));
  expect_same(gelu, 1e-6, 1e-5);
  OpTester clip("Clip", 13);
  clip.input(random_tensor({100}, 3, -2.f, 2.f)).const_input(Tensor::scalar<float>(-0.5f)).const_input(Tensor::scalar<float>(0.7f));
  expect_same(clip);
}

TEST(CudaKernels, BroadcastBinary) {
  REQUIRE_GPU();
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
    SCOPED_TRACE(op);
    OpTester t(op, 14);
    t.input(random_tensor({2, 3, 4, 5}, 4)).input(random_tensor({3, 1, 5}, 5, 0.5f, 1.5f));
    expect_same(t, 1e-6, 1e-6);
  }
  OpTester ints("Add", 14);
  ints.input(I64_({1, 2, 3, 4, 5, 6}, {2, 3})).input(I64_({10, 20, 30}, {3}));
  expect_same(ints, 0, 0);
  OpTester mod("Mod", 13);
  mod.input(I64_({-7, 7, -7, 7}, {4})).input(I64_({3, -3, -3, 3}, {4}));
  expect_same(mod, 0, 0);
}

TEST(CudaKernels, CompareWhereCast) {
  REQUIRE_GPU();
  OpTester less("Less", 13);
  less.input(random_tensor({4, 6}, 6)).input(random_tensor({6}, 7));
  expect_same(less, 0, 0);
  OpTester where("Where", 16);
  Tensor cond = Tensor::from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  where.input(cond).input(random_tensor({2, 3}, 8)).input(random_tensor({3}, 9));
  expect_same(where, 0, 0);
  OpTester cast("Cast", 13);
  cast.attr("to", static_cast<int64_t>(DType::kF16)).input(random_tensor({17}, 10, -100.f, 100.f));
  expect_same(cast, 0, 0);
}

TEST(CudaKernels, SoftmaxLayerNormReduce) {
  REQUIRE_GPU();
  for (int64_t axis : {-1, 1}) {
    OpTester sm("Softmax", 13);
    sm.attr("axis", axis).input(random_tensor({2, 7, 300}, 11, -5.f, 5.f));
    expect_same(sm, 1e-6, 1e-5);
  }
  OpTester lsm("LogSoftmax", 13);
  lsm.input(random_tensor({3, 1000}, 12, -5.f, 5.f));
  expect_same(lsm, 1e-5, 1e-5);
  OpTester ln("LayerNormalization", 17);
  ln.attr("epsilon", 1e-5f).input(random_tensor({2, 5, 768}, 13)).const_input(random_tensor({768}, 14))
      .const_input(random_tensor({768}, 15));
  expect_same(ln, 1e-5, 1e-4);
  OpTester rm("ReduceMean", 18);
  rm.attr("keepdims", int64_t{1}).input(random_tensor({2, 3, 4, 5}, 16)).const_input(I64_({1, 3}, {2}));
  expect_same(rm, 1e-6, 1e-5);
  OpTester rmax("ReduceMax", 13);
  rmax.attr("axes", std::vector<int64_t>{-1}).attr("keepdims", int64_t{0}).input(random_tensor({6, 9}, 17));
  expect_same(rmax, 0, 0);
  OpTester gap("GlobalAveragePool", 17);
  gap.input(random_tensor({2, 8, 7, 7}, 18));
  expect_same(gap, 1e-6, 1e-5);
}

TEST(CudaKernels, DataMovement) {
  REQUIRE_GPU();
  OpTester tr("Transpose", 13);
  tr.attr("perm", std::vector<int64_t>{0, 2, 3, 1}).input(random_tensor({2, 3, 4, 5}, 19));
  expect_same(tr, 0, 0);
  OpTester cat("Concat", 13);
  cat.attr("axis", int64_t{1}).input(random_tensor({2, 3, 4}, 20)).input(random_tensor({2, 5, 4}, 21));
  expect_same(cat, 0, 0);
  OpTester sl("Slice", 13);
  sl.input(random_tensor({6, 10}, 22)).const_input(I64_({5, 1}, {2})).const_input(I64_({0, 9}, {2}))
      .const_input(I64_({0, 1}, {2})).const_input(I64_({-2, 3}, {2}));
  expect_same(sl, 0, 0);
  OpTester ga("Gather", 13);
  ga.attr("axis", int64_t{0}).input(random_tensor({10, 16}, 23)).input(I64_({3, -1, 0, 3}, {2, 2}));
  expect_same(ga, 0, 0);
  OpTester bad("Gather", 13);
  bad.input(random_tensor({10, 16}, 23)).input(I64_({3, 10}, {2}));
  auto r = bad.run_status("cuda");
  ASSERT_FALSE(r.is_ok());  // out of range: an error naming the index, never zeros
  EXPECT_NE(r.status().message().find("out of range"), std::string::npos) << r.status().message();
  OpTester ex("Expand", 13);
  ex.input(random_tensor({3, 1}, 24)).const_input(I64_({2, 3, 4}, {3}));
  expect_same(ex, 0, 0);
  OpTester rs("Reshape", 14);
  rs.input(random_tensor({2, 3, 4}, 25)).const_input(I64_({0, -1}, {2}));
  expect_same(rs, 0, 0);
  OpTester rz("Resize", 13);
  rz.attr("mode", "linear").input(random_tensor({1, 2, 5, 7}, 26)).no_input()
      .const_input(T_({1.f, 1.f, 2.f, 1.5f}, {4}));
  expect_same(rz, 1e-6, 1e-5);
}

TEST(CudaKernels, MatMulGemmStrictFp32) {
  REQUIRE_GPU();
  // 512-long dot products: TF32 (10-bit mantissa) would miss 1e-5; fp32 FMA does not.
  OpTester mm("MatMul", 13);
  mm.input(random_tensor({3, 64, 512}, 27)).const_input(random_tensor({512, 96}, 28));
  expect_same(mm, 1e-5, 1e-5);
  OpTester bmm("MatMul", 13);
  bmm.input(random_tensor({2, 4, 33, 64}, 29)).input(random_tensor({2, 4, 64, 17}, 30));
  expect_same(bmm, 1e-5, 1e-5);
  OpTester gemm("Gemm", 13);
  gemm.attr("transB", int64_t{1}).input(random_tensor({8, 256}, 31)).const_input(random_tensor({100, 256}, 32))
      .const_input(random_tensor({100}, 33));
  expect_same(gemm, 1e-5, 1e-5);
}

TEST(CudaKernels, ConvPoolBatchNorm) {
  REQUIRE_GPU();
  OpTester conv("Conv", 11);
  conv.attr("pads", std::vector<int64_t>{1, 1, 1, 1}).attr("strides", std::vector<int64_t>{2, 2})
      .attr("group", int64_t{2}).input(random_tensor({2, 8, 15, 15}, 34)).const_input(random_tensor({16, 4, 3, 3}, 35))
      .const_input(random_tensor({16}, 36));
  expect_same(conv, 1e-5, 1e-5);
  OpTester mp("MaxPool", 12);
  mp.attr("kernel_shape", std::vector<int64_t>{3, 3}).attr("strides", std::vector<int64_t>{2, 2})
      .attr("pads", std::vector<int64_t>{1, 1, 1, 1}).input(random_tensor({2, 4, 11, 11}, 37));
  expect_same(mp, 0, 0);
  OpTester ap("AveragePool", 11);
  ap.attr("kernel_shape", std::vector<int64_t>{2, 2}).attr("strides", std::vector<int64_t>{2, 2})
      .input(random_tensor({1, 3, 8, 8}, 38));
  expect_same(ap, 1e-6, 1e-5);
  OpTester bn("BatchNormalization", 15);
  bn.input(random_tensor({2, 4, 5, 5}, 39)).const_input(random_tensor({4}, 40)).const_input(random_tensor({4}, 41))
      .const_input(random_tensor({4}, 42)).const_input(random_tensor({4}, 43, 0.5f, 2.f));
  expect_same(bn, 1e-5, 1e-5);
}

TEST(CudaKernels, FusedAttention) {
  REQUIRE_GPU();
  // BERT layout: Q, V as [B, S, H, D] read through perm (0, 2, 1, 3); K^T through (0, 2, 3, 1).
  OpTester at("Attention", 1, "com.ferry");
  at.attr("scale", 0.125f).attr("q_perm", std::vector<int64_t>{0, 2, 1, 3}).attr("k_perm", std::vector<int64_t>{0, 2, 3, 1})
      .attr("v_perm", std::vector<int64_t>{0, 2, 1, 3}).attr("out_perm", std::vector<int64_t>{0, 2, 1, 3})
      .input(random_tensor({2, 37, 4, 64}, 44)).input(random_tensor({2, 37, 4, 64}, 45)).input(random_tensor({2, 37, 4, 64}, 46))
      .input(random_tensor({2, 1, 1, 37}, 47, -10000.f, 0.f));
  expect_same(at, 1e-5, 1e-4);
}

TEST(CudaKernels, HalfAndBFloat16) {
  REQUIRE_GPU();
  for (DType dt : {DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::kF16 ? 2e-3 : 2e-2;
    OpTester mm("MatMul", 13);
    mm.input(to_type(random_tensor({16, 128}, 48), dt)).const_input(to_type(random_tensor({128, 32}, 49), dt));
    expect_same(mm, tol, tol);
    OpTester sm("Softmax", 13);
    sm.input(to_type(random_tensor({4, 100}, 50, -3.f, 3.f), dt));
    expect_same(sm, tol, tol);
    OpTester conv("Conv", 11);
    conv.attr("pads", std::vector<int64_t>{1, 1, 1, 1}).input(to_type(random_tensor({1, 8, 9, 9}, 51), dt))
        .const_input(to_type(random_tensor({8, 8, 3, 3}, 52), dt));
    expect_same(conv, 4 * tol, 4 * tol);
  }
}

TEST(CudaRuntime, AllocatorStatsAndResidency) {
  REQUIRE_GPU();
  auto b = CudaBackend::open(0);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  CudaContext* ctx = b.value()->context();
  auto t = ctx->allocate(DType::kF32, {1024, 1024});
  ASSERT_TRUE(t.is_ok());
  EXPECT_GE(ctx->allocator().stats().allocated_bytes, 4 << 20);
  t = DeviceTensor{};
  // Round trip through pinned staging.
  Tensor host = random_tensor({3, 77}, 53);
  auto dev = ctx->upload(host);
  ASSERT_TRUE(dev.is_ok());
  auto back = ctx->download(dev.value());
  ASSERT_TRUE(back.is_ok());
  testing::expect_near(back.value(), host, 0, 0);
  b.value()->empty_cache();
  EXPECT_LE(ctx->allocator().stats().reserved_bytes, ctx->allocator().stats().allocated_bytes + (2 << 20));
}

#endif  // FERRY_WITH_CUDA

}  // namespace
}  // namespace ferry
