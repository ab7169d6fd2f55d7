// Constant MatMul / Gemm weights whose row stride is a multiple of 256 floats, kept plain by oneDNN
// (its gemm path on AVX2 hosts), run with their rows padded (cpu::padded_plain_weights,
// dnnl_matmul.cpp): the padding is chosen only for that layout, the kernel's products with padded
// weights (whole, column split at 2 threads, Gemm transB, bias + GELU, odd K, rows just above
// RowGemm's range and far above) match the reference kernels, and a compiled .ferry (which does not
// store that plain copy) pads at load and gives the ONNX model's bits.
#include <dnnl.hpp>

#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/dnnl_matmul.h"
#include "backends/cpu/dnnl_util.h"
#include "compiler/compile.h"
#include "format/compiled_model.h"
#include "graph_builder.h"
#include "op_tester.h"
#include "runtime/executor.h"

namespace ferry::testing {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using std::vector;
constexpr memory::data_type kF32 = memory::data_type::f32;

TEST(CpuMatMulPaddedWeights, OnlyPlainF32RowsOf256MultiplesArePadded) {
  const memory::desc p = cpu::padded_plain_weights(memory::desc({67, 512}, kF32, tag::ab));
  ASSERT_FALSE(p.is_zero());
  EXPECT_TRUE(p == memory::desc({67, 512}, kF32, memory::dims{512 + cpu::kWeightRowPad, 1}));
  EXPECT_GE(p.get_size(), size_t{67} * (512 + cpu::kWeightRowPad) * 4 - cpu::kWeightRowPad * 4);
  EXPECT_FALSE(cpu::padded_plain_weights(memory::desc({1, 256}, kF32, tag::ab)).is_zero());
  EXPECT_TRUE(cpu::padded_plain_weights(memory::desc({67, 500}, kF32, tag::ab)).is_zero());  // not a 256 multiple
  EXPECT_TRUE(cpu::padded_plain_weights(memory::desc({67, 512}, kF32, tag::ba)).is_zero());  // column-major
  EXPECT_TRUE(cpu::padded_plain_weights(p).is_zero());                                        // already padded
  EXPECT_TRUE(cpu::padded_plain_weights(memory::desc({67, 512}, memory::data_type::bf16, tag::ab)).is_zero());
  EXPECT_TRUE(cpu::padded_plain_weights(memory::desc({2, 67, 512}, kF32, tag::abc)).is_zero());
}

// Whether oneDNN keeps [K, N] constant weights plain for an [M, K] source here (AVX2 hosts: yes).
bool onednn_keeps_plain(int64_t m, int64_t k, int64_t n) {
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  const dnnl::matmul::primitive_desc pd(
      {memory::desc({m, k}, kF32, tag::ab), memory::desc({k, n}, kF32, tag::any), memory::desc({m, n}, kF32, tag::ab)}, eng);
  return pd.weights_desc() == memory::desc({k, n}, kF32, tag::ab);
}

struct RunResult {
  Tensor y;
  int64_t packed_bytes = 0;
};

RunResult run_model(const std::shared_ptr<Model>& model, const NamedTensors& feeds, const std::string& device, int threads) {
  ExecutorOptions o;
  o.device = device;
  o.threads = threads;
  auto ex = Executor::create(model, o);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  if (!ex.is_ok()) return {};
  NamedTensors outs;
  const Status st = ex.value()->run(feeds, &outs);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return {outs.empty() ? Tensor() : outs[0].second, ex.value()->resident_bytes().packed_weights};
}

// MatMul (+ bias + GELU, fused) and Gemm with transB and beta, K 67, N 256 and 512; 25 rows (just
// above RowGemm's 16-24 where oneDNN keeps the weights plain) and 300 rows at 1 thread, 40 rows at 2 threads (one 2-thread primitive on
// the padded form where oneDNN keeps it plain: no column split, no second copy).
TEST(CpuMatMulPaddedWeights, ProductsMatchReference) {
  const int64_t K = 67;
  for (int64_t N : {256, 512}) {
    for (bool gemm : {false, true}) {
      for (auto [M, threads] : {std::pair<int64_t, int>{25, 1}, {300, 1}, {40, 2}}) {
        SCOPED_TRACE("N " + std::to_string(N) + (gemm ? " Gemm transB" : " MatMul+bias+Gelu") + " M " + std::to_string(M) +
                     " threads " + std::to_string(threads));
        GraphBuilder b(13);
        const std::string a = b.input("a", DType::kF32, {M, K});
        const Tensor bias = random_tensor({N}, 3);
        if (gemm) {
          b.output(b.node("Gemm", {a, b.initializer("w", random_tensor({N, K}, 2)), b.initializer("c", bias)},
                          {{"transB", GraphBuilder::i(1)}, {"beta", GraphBuilder::f(0.5f)}}));
        } else {
          const std::string mm = b.node("MatMul", {a, b.initializer("w", random_tensor({K, N}, 2))});
          const std::string biased = b.node("Add", {mm, b.initializer("bias", bias)});
          // GELU as Div / Erf / Add / Mul / Mul (fused into the FusedMatMul's activation).
          const std::string d = b.node("Div", {biased, b.initializer("sqrt2", Tensor::scalar(1.4142135f))});
          const std::string e = b.node("Add", {b.node("Erf", {d}), b.initializer("one", Tensor::scalar(1.f))});
          b.output(b.node("Mul", {b.node("Mul", {biased, e}), b.initializer("half", Tensor::scalar(0.5f))}));
        }
        const auto model = b.build();
        const NamedTensors feeds = {{"a", random_tensor({M, K}, static_cast<uint32_t>(M))}};
        const int64_t splits = cpu::matmul_column_split_runs();
        const RunResult got = run_model(model, feeds, "cpu", threads);
        if (threads == 2 && onednn_keeps_plain(M, K, N) && !std::getenv("FERRY_MATMUL_NSPLIT")) {
          // One 2-thread primitive on the one padded form, not per-thread column blocks (a second copy).
          EXPECT_EQ(cpu::matmul_column_split_runs(), splits) << "split plain weights";
          EXPECT_EQ(got.packed_bytes, K * (N + cpu::kWeightRowPad) * 4) << "more than the one padded form";
        }
        ASSERT_EQ(got.y.dims(), (vector<int64_t>{M, N}));
        expect_near(got.y, run_model(model, feeds, "cpu-ref", 1).y, 1e-4, 1e-4);
        if (threads == 1 && onednn_keeps_plain(M, K, N)) {
          EXPECT_EQ(got.packed_bytes, K * (N + cpu::kWeightRowPad) * 4) << "the weights' rows were not padded";
        }
      }
    }
  }
}

// `ferry compile` does not store the padded form (a plain copy, made at load as fast as the plain
// weights are read; stored, it doubled the file); a run of the file pads at load and gives the ONNX
// model's bits.
TEST(CpuMatMulPaddedWeights, CompiledFileLeavesThePaddedFormToTheLoad) {
  const int64_t M = 40, K = 67, N = 512;
  if (!onednn_keeps_plain(M, K, N)) GTEST_SKIP() << "oneDNN packs these weights blocked on this CPU";
  GraphBuilder b(13);
  const std::string a = b.input("a", DType::kF32, {M, K});
  b.output(b.node("MatMul", {a, b.initializer("w", random_tensor({K, N}, 5))}));
  const auto model = b.build();
  CompileOptions co;
  co.threads = 1;
  CompileReport rep;
  auto spec = compile_model(*model, co, &rep);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_EQ(rep.packed_nodes, 0);
  auto bytes = serialize_compiled_model(spec.value());
  ASSERT_TRUE(bytes.is_ok()) << bytes.status().to_string();
  EXPECT_LT(bytes.value().size(), static_cast<size_t>(K * N * 4 * 3 / 2)) << "the weights stored twice";
  auto cm = parse_compiled_model_copy(bytes.value().data(), bytes.value().size(), "padded.ferry");
  ASSERT_TRUE(cm.is_ok()) << cm.status().to_string();
  const NamedTensors feeds = {{"a", random_tensor({M, K}, 6)}};
  const RunResult from_file = run_model(cm.value().gears.at(0).model, feeds, "cpu", 1);
  EXPECT_EQ(from_file.packed_bytes, K * (N + cpu::kWeightRowPad) * 4) << "the weights' rows were not padded";
  const RunResult from_onnx = run_model(model, feeds, "cpu", 1);
  ASSERT_EQ(from_file.y.nbytes(), from_onnx.y.nbytes());
  EXPECT_EQ(std::memcmp(from_file.y.raw(), from_onnx.y.raw(), static_cast<size_t>(from_onnx.y.nbytes())), 0);
}

}  // namespace
}  // namespace ferry::testing
