// The .ferry format and the compiler: round trips that reproduce the ONNX run bit for bit,
// batch gears, weights used in place, tuning with its cache, and every way a file can be bad.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "compiler/compile.h"
#include "compiler/session.h"
#include "format/compiled_model.h"
#include "format/file_header.h"
#include "io/npy.h"
#include "onnx/onnx_import.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

const std::string kDemo = std::string(FERRY_SOURCE_DIR) + "/demo/digits_cnn.onnx";
const std::string kBatch = std::string(FERRY_SOURCE_DIR) + "/demo/samples/digits_batch.npy";

std::shared_ptr<Model> demo_model() {
  auto m = load_onnx_model(kDemo);
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.value();
}

Tensor images(int64_t n) {
  auto all = read_npy(kBatch);
  EXPECT_TRUE(all.is_ok());
  const Tensor& t = all.value();
  Tensor out = Tensor::allocate(DType::kF32, {n, 1, 28, 28});
  std::memcpy(out.mutable_raw(), t.raw(), static_cast<size_t>(out.nbytes()));
  return out;
}

std::string compile_bytes(const Model& m, const CompileOptions& o, CompileReport* rep = nullptr) {
  auto spec = compile_model(m, o, rep);
  EXPECT_TRUE(spec.is_ok()) << spec.status().message();
  auto bytes = serialize_compiled_model(spec.value());
  EXPECT_TRUE(bytes.is_ok()) << bytes.status().message();
  return bytes.value();
}

Tensor run_onnx(std::shared_ptr<Model> m, const Tensor& x) {
  auto ex = Executor::create(m);
  EXPECT_TRUE(ex.is_ok()) << ex.status().message();
  NamedTensors out;
  Status st = ex.value()->run({{"image", x}}, &out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out[0].second;
}

Tensor run_session(Session& s, const Tensor& x) {
  NamedTensors out;
  Status st = s.run({{"image", x}}, &out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out.empty() ? Tensor() : out[0].second;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dims() == b.dims() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.get_double(i) - b.get_double(i)));
  return m;
}

Status parse_status(const std::string& bytes) { return parse_compiled_model_copy(bytes.data(), bytes.size(), "test.ferry").status(); }

TEST(CompiledModel, RoundTripReproducesOnnxRunBitForBit) {
  auto m = demo_model();
  const std::string bytes = compile_bytes(*m, {});
  auto cm = parse_compiled_model_copy(bytes.data(), bytes.size(), "demo.ferry");
  ASSERT_TRUE(cm.is_ok()) << cm.status().message();
  EXPECT_EQ(cm.value().gears.size(), 1u);
  EXPECT_EQ(cm.value().isa, host_isa());
  EXPECT_EQ(cm.value().device, "cpu");
  auto s = Session::open(std::move(cm).value());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const Tensor x = images(8);
  EXPECT_TRUE(bit_equal(run_onnx(m, x), run_session(*s.value(), x)));
}

TEST(CompiledModel, SameModelGivesSameBytes) {
  auto m = demo_model();
  EXPECT_EQ(compile_bytes(*m, {}), compile_bytes(*m, {}));
}

TEST(CompiledModel, WeightsAreUsedInPlace) {
  auto m = demo_model();
  const std::string bytes = compile_bytes(*m, {});
  auto cm = parse_compiled_model_copy(bytes.data(), bytes.size(), "demo.ferry");
  ASSERT_TRUE(cm.is_ok());
  // parse_compiled_model_copy made one aligned buffer: every weight must point into it.
  const Graph& g = cm.value().gears[0].model->graph;
  ASSERT_FALSE(g.initializers.empty());
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  for (const auto& [name, t] : g.initializers) {
    const auto* p = static_cast<const uint8_t*>(t.raw());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << name;
    lo = lo ? std::min(lo, p) : p;
    hi = hi ? std::max(hi, p + t.nbytes()) : p + t.nbytes();
  }
  EXPECT_LE(static_cast<size_t>(hi - lo), bytes.size());
  // And from a file: mapped, then run.
  const std::string path = std::string(FERRY_BINARY_DIR) + "/test_in_place.ferry";
  auto spec = compile_model(*m, {});
  ASSERT_TRUE(write_compiled_model(path, spec.value()).is_ok());
  auto loaded = load_compiled_model(path);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded.value().file_size, std::filesystem::file_size(path));
  std::remove(path.c_str());
}

// SessionOptions::precision: a compiled model's mode is fixed when it is compiled; asking for
// another fails naming both (`ferry serve`'s config parameter "precision" relies on it).
TEST(CompiledModel, SessionPrecisionMustMatchTheCompiledMode) {
  auto m = demo_model();
  CompileOptions o;
  o.precision_mode = "fp16";
  const std::string bytes = compile_bytes(*m, o);
  SessionOptions so;
  so.precision = PrecisionMode::kForceFp16;
  auto same = Session::open_memory(bytes.data(), bytes.size(), so);
  EXPECT_TRUE(same.is_ok()) << same.status().message();
  so.precision = PrecisionMode::kForceFp32;
  auto other = Session::open_memory(bytes.data(), bytes.size(), so);
  ASSERT_FALSE(other.is_ok());
  EXPECT_NE(other.status().message().find("compiled with precision mode 'force_fp16', asked for 'force_fp32'"), std::string::npos)
      << other.status().message();
  // From a file: the message names it and says what to do.
  const std::string path = std::string(FERRY_BINARY_DIR) + "/test_precision_fp16.ferry";
  ASSERT_TRUE(write_compiled_model(path, compile_model(*m, o).value()).is_ok());
  auto from_file = Session::open_file(path, so);
  std::remove(path.c_str());
  ASSERT_FALSE(from_file.is_ok());
  EXPECT_EQ(from_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(from_file.status().message().rfind(path + ": compiled with precision mode 'force_fp16', asked for 'force_fp32'", 0), 0u)
      << from_file.status().message();
  EXPECT_NE(from_file.status().message().find("`ferry compile --precision-mode force_fp32`"), std::string::npos)
      << from_file.status().message();
}

TEST(CompiledModel, DynamicBatchGearsRunBatchesOneToEight) {
  auto m = demo_model();
  CompileOptions o;
  o.batch_gears = {1, 2, 4, 8};
  const std::string bytes = compile_bytes(*m, o);
  auto cm = parse_compiled_model_copy(bytes.data(), bytes.size(), "gears.ferry");
  ASSERT_TRUE(cm.is_ok()) << cm.status().message();
  ASSERT_EQ(cm.value().gears.size(), 4u);
  EXPECT_EQ(cm.value().gear_for_batch(3)->batch, 4);
  EXPECT_EQ(cm.value().gear_for_batch(5)->batch, 8);
  EXPECT_EQ(cm.value().gear_for_batch(9), nullptr);
  auto s = Session::open(std::move(cm).value());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s.value()->batch_sizes(), (std::vector<int64_t>{1, 2, 4, 8}));
  for (int64_t b = 1; b <= 8; ++b) {
    const Tensor x = images(b);
    const Tensor want = run_onnx(m, x);
    const Tensor got = run_session(*s.value(), x);
    ASSERT_EQ(got.dims(), (std::vector<int64_t>{b, 10})) << "batch " << b;
    EXPECT_LE(max_abs_diff(want, got), 1e-4) << "batch " << b;
  }
  NamedTensors out;
  Status too_big = s.value()->run({{"image", Tensor::allocate(DType::kF32, {9, 1, 28, 28})}}, &out);
  EXPECT_FALSE(too_big.is_ok());
  EXPECT_NE(too_big.message().find("not covered by the compiled batch sizes 1,2,4,8"), std::string::npos) << too_big.message();
}

TEST(CompiledModel, ConcurrentRunsMatchSequentialOnes) {
  auto m = demo_model();
  CompileOptions o;
  o.batch_gears = {1, 4};
  const std::string bytes = compile_bytes(*m, o);
  auto s = Session::open_memory(bytes.data(), bytes.size());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  std::vector<Tensor> inputs, want(8), got(8);
  for (int64_t i = 0; i < 8; ++i) inputs.push_back(images(1 + i % 4));
  for (size_t i = 0; i < 8; ++i) want[i] = run_session(*s.value(), inputs[i]);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 5; ++r) got[i] = run_session(*s.value(), inputs[i]);
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < 8; ++i) EXPECT_TRUE(bit_equal(want[i], got[i])) << "request " << i;
}

TEST(CompiledModel, FixedInputShapes) {
  auto m = demo_model();
  CompileOptions o;
  ASSERT_TRUE(parse_input_shapes({"image:2,1,28,28"}, &o.input_shapes).is_ok());
  auto spec = compile_model(*m, o);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  const Graph& g = spec.value().gears[0].model->graph;
  EXPECT_EQ(g.inputs[0].type.to_string(), "f32[2,1,28,28]");
  EXPECT_EQ(g.outputs[0].type.to_string(), "f32[2,10]");

  std::vector<std::pair<std::string, std::vector<int64_t>>> bad;
  ASSERT_TRUE(parse_input_shapes({"nope:1,2"}, &bad).is_ok());
  auto unknown = fix_input_shapes(m->clone().get(), bad, 0);
  EXPECT_NE(unknown.message().find("no input 'nope'"), std::string::npos) << unknown.message();
  bad = {{"image", {1, 28, 28}}};
  auto rank = fix_input_shapes(m->clone().get(), bad, 0);
  EXPECT_NE(rank.message().find("rank 4"), std::string::npos) << rank.message();
  std::vector<std::pair<std::string, std::vector<int64_t>>> parsed;
  EXPECT_FALSE(parse_input_shapes({"image:1,x"}, &parsed).is_ok());
  EXPECT_FALSE(parse_batch_gears("4,4").is_ok());
  EXPECT_FALSE(parse_batch_gears("0,2").is_ok());
  EXPECT_EQ(parse_batch_gears("8,1,2").value(), (std::vector<int64_t>{1, 2, 8}));
}

TEST(CompiledModel, DynamicBatchNeedsABatchAxis) {
  auto m = demo_model()->clone();
  m->graph.inputs[0].type.shape = Shape::of({1, 1, 28, 28});  // a model exported with batch fixed at 1
  Status st = fix_input_shapes(m.get(), {}, 4);
  EXPECT_NE(st.message().find("batch dimension is fixed at 1"), std::string::npos) << st.message();
}

// ---- Bad files ----

class BadFiles : public ::testing::Test {
 protected:
  void SetUp() override { good_ = compile_bytes(*demo_model(), {}); }
  std::string good_;
  format::FileHeader header() const {
    format::FileHeader h;
    std::memcpy(&h, good_.data(), sizeof h);
    return h;
  }
  static void expect_error(const std::string& bytes, const std::string& text) {
    Status st = parse_status(bytes);
    EXPECT_EQ(st.code(), StatusCode::kInvalidModel) << st.message();
    EXPECT_NE(st.message().find(text), std::string::npos) << st.message();
  }
};

// The AVX-512 checksum loop (used on CPUs that have it) and the portable one agree, on sizes
// around xxHash's internal boundaries (240-byte short path, 1 KiB stripes, 64 KiB blocks).
TEST(CompiledModel, ChecksumSameOnEveryPath) {
  std::vector<uint8_t> bytes(300000);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (uint8_t& b : bytes) b = static_cast<uint8_t>((x = x * 6364136223846793005ull + 1442695040888963407ull) >> 56);
  for (size_t n : {64, 65, 239, 240, 241, 1023, 1024, 1025, 4096, 65535, 65536, 65600, 299999, 300000}) {
    SCOPED_TRACE(n);
    EXPECT_EQ(format::file_checksum(bytes.data(), n), format::file_checksum_portable(bytes.data(), n));
  }
  // The value itself is fixed by the format: a flipped byte changes it.
  const uint64_t before = format::file_checksum(bytes.data(), bytes.size());
  bytes[123456] ^= 1;
  EXPECT_NE(format::file_checksum(bytes.data(), bytes.size()), before);
  if (!format::file_checksum_has_avx512()) GTEST_SKIP() << "no AVX-512F here: only the portable path ran";
}

TEST_F(BadFiles, GoodFileLoads) { EXPECT_TRUE(parse_status(good_).is_ok()); }

TEST_F(BadFiles, FlippedBytesFailTheChecksum) {
  for (size_t pos : {size_t(100), good_.size() / 2, good_.size() - 1}) {
    std::string b = good_;
    b[pos] = static_cast<char>(b[pos] ^ 0x10);
    expect_error(b, "checksum mismatch");
  }
}

TEST_F(BadFiles, TruncatedFilesSaySo) {
  expect_error(good_.substr(0, good_.size() - 1), "truncated");
  expect_error(good_.substr(0, good_.size() / 3), "truncated");
  expect_error(good_.substr(0, 100), "truncated");
  expect_error(good_ + std::string(64, '\0'), "unexpected bytes");
}

TEST_F(BadFiles, OtherVersionsAndIsasAreRefused) {
  std::string b = good_;
  uint32_t v = 7;
  std::memcpy(b.data() + offsetof(format::FileHeader, format_version), &v, 4);
  expect_error(b, "format version 7");
  b = good_;
  format::set_field(b.data() + offsetof(format::FileHeader, isa), 16, "aarch64x");
  expect_error(b, "compiled for ISA 'aarch64x'");
  b = good_;
  format::set_field(b.data() + offsetof(format::FileHeader, ferry_version), 16, "0.0.1");
  expect_error(b, "compiled by ferry 0.0.1");
  expect_error("not a model", "not a compiled ferry model");
  expect_error("", "not a compiled ferry model");
}

TEST_F(BadFiles, CorruptGraphWithValidChecksumNeverCrashes) {
  // A hostile file can carry a correct checksum: the flatbuffer verifier and the reader's
  // checks must then refuse it or load a graph whose every reference is in bounds. Flip bytes
  // all over the graph section.
  const format::FileHeader h = header();
  int refused = 0;
  for (uint64_t pos = h.graph_offset; pos < h.graph_offset + h.graph_size; pos += 7) {
    std::string b = good_;
    b[pos] = static_cast<char>(b[pos] ^ 0xA5);
    const uint64_t sum = format::file_checksum(reinterpret_cast<const uint8_t*>(b.data()), b.size());
    std::memcpy(b.data() + offsetof(format::FileHeader, checksum), &sum, 8);
    // Only the load: what a loaded graph then does is the executor's concern (as for ONNX).
    auto cm = parse_compiled_model_copy(b.data(), b.size(), "hostile.ferry");
    if (!cm.is_ok()) {
      ++refused;
      EXPECT_EQ(cm.status().code(), StatusCode::kInvalidModel) << cm.status().message();
    }
  }
  EXPECT_GT(refused, 0);
}

// ---- Tuning ----

TEST(CompiledModel, TuningPinsChoicesAndReusesItsCache) {
  auto m = demo_model();
  const std::string cache = std::string(FERRY_BINARY_DIR) + "/test_tuning_cache.json";
  std::remove(cache.c_str());
  CompileOptions o;
  ASSERT_TRUE(parse_input_shapes({"image:1,1,28,28"}, &o.input_shapes).is_ok());
  o.tune = true;
  o.threads = 1;
  o.tuning_cache = cache;
  CompileReport first, second;
  auto spec = compile_model(*m, o, &first);
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  ASSERT_GT(first.tuned_nodes, 0) << "no node of the demo model has an optimized CPU kernel to time";
  EXPECT_EQ(first.cache_hits, 0);
  EXPECT_TRUE(std::filesystem::exists(cache));
  EXPECT_EQ(static_cast<int64_t>(spec.value().tuning.size()), first.tuned_nodes);
  auto again = compile_model(*m, o, &second);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(second.tuned_nodes, 0);
  EXPECT_EQ(second.cache_hits, first.tuned_nodes);
  // The choices travel in the file and the tuned model still computes the same function.
  auto bytes = serialize_compiled_model(again.value());
  auto cm = parse_compiled_model_copy(bytes.value().data(), bytes.value().size(), "tuned.ferry");
  ASSERT_TRUE(cm.is_ok()) << cm.status().message();
  EXPECT_EQ(cm.value().tuning.size(), spec.value().tuning.size());
  auto s = Session::open(std::move(cm).value());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const Tensor x = images(1);
  EXPECT_LE(max_abs_diff(run_onnx(m, x), run_session(*s.value(), x)), 1e-4);
  std::remove(cache.c_str());
}

}  // namespace
}  // namespace ferry
