// A .ferry file's weights leave the process once a kernel holds its own form of them (issue 40,
// ir/file_pages.h): only pages of a registered file mapping are dropped (never heap bytes), whole
// pages only, none once the registration is gone; and every later reader of a dropped weight (another
// plan's form, the reference kernels) gets the same bytes back from the file, bit for bit.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "compiler/compile.h"
#include "format/compiled_model.h"
#include "io/file.h"
#include "ir/file_pages.h"
#include "pass_test_util.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

using testing::ModelBuilder;

const int64_t kPage = ::sysconf(_SC_PAGESIZE);

std::string temp_path(const std::string& name) {
  return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + name + "_" + std::to_string(::getpid());
}

// Pages of [p, p + n) the process has in memory (/proc/self/pagemap's present bit).
int64_t present_pages(const void* p, int64_t n) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) / static_cast<uintptr_t>(kPage);
  const uintptr_t last = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(n) - 1) / static_cast<uintptr_t>(kPage);
  int64_t present = 0;
  for (uintptr_t i = first; fd >= 0 && i <= last; ++i) {
    uint64_t e = 0;
    EXPECT_EQ(::pread(fd, &e, sizeof(e), static_cast<off_t>(i * sizeof(uint64_t))), static_cast<ssize_t>(sizeof(e)));
    present += static_cast<int64_t>((e >> 63) & 1);
  }
  if (fd >= 0) ::close(fd);
  return present;
}

Tensor ramp(std::vector<int64_t> dims, float scale, float offset) {
  Tensor t = Tensor::allocate(DType::kF32, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i)
    t.mutable_data<float>()[i] = offset + scale * static_cast<float>((i * 7919) % 1009) / 1009.f;
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

TEST(FilePages, DropsOnlyWholePagesOfARegisteredMapping) {
  const std::string path = temp_path("file_pages.bin");
  std::vector<uint8_t> bytes(static_cast<size_t>(16 * kPage));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  auto f = map_file(path);
  ::unlink(path.c_str());
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  ASSERT_TRUE(f.value().mapped);
  const uint8_t* data = f.value().data;
  // Not registered yet: nothing is dropped.
  EXPECT_EQ(std::memcmp(data, bytes.data(), bytes.size()), 0);  // every page read in
  EXPECT_EQ(drop_file_pages(data, static_cast<int64_t>(bytes.size())), 0);
  EXPECT_EQ(present_pages(data, static_cast<int64_t>(bytes.size())), 16);

  std::shared_ptr<const void> owner = register_file_pages(f.value().owner, data, bytes.size());
  // Heap bytes are never dropped (their contents would be lost).
  std::vector<uint8_t> heap(bytes);
  EXPECT_EQ(drop_file_pages(heap.data(), static_cast<int64_t>(heap.size())), 0);
  EXPECT_EQ(heap, bytes);
  // A range reaching outside the registered one: nothing.
  EXPECT_EQ(drop_file_pages(data + 8 * kPage, 9 * kPage), 0);
  EXPECT_EQ(present_pages(data, static_cast<int64_t>(bytes.size())), 16);
  // [100, 100 + 3 pages) covers 2 whole pages: those go, their neighbours (shared with other bytes) stay.
  const int64_t before = file_pages_dropped();
  EXPECT_EQ(drop_file_pages(data + 100, 3 * kPage), 2 * kPage);
  EXPECT_EQ(file_pages_dropped() - before, 2 * kPage);
  EXPECT_EQ(present_pages(data, kPage), 1);
  EXPECT_EQ(present_pages(data + kPage, 2 * kPage), 0);
  EXPECT_EQ(present_pages(data + 3 * kPage, kPage), 1);
  // Read again: the same bytes, from the file.
  EXPECT_EQ(std::memcmp(data, bytes.data(), bytes.size()), 0);
  EXPECT_EQ(present_pages(data, static_cast<int64_t>(bytes.size())), 16);

  // Once the registration's owner is gone (the mapping kept by another owner), nothing is dropped.
  std::shared_ptr<const void> keep = f.value().owner;
  owner.reset();
  f.value().owner.reset();
  EXPECT_EQ(drop_file_pages(data, static_cast<int64_t>(bytes.size())), 0);
  EXPECT_EQ(present_pages(data, static_cast<int64_t>(bytes.size())), 16);
}

// A MatMul's weights read from a .ferry file: the first run packs them (small_gemm panels for 2
// rows) and their file pages go; later shapes pack other forms from the file's bytes again
// (RowGemm, oneDNN) and the reference kernels read them in place, all bit for bit as from memory.
TEST(FilePages, WeightsPackedFromAFerryFileLeaveTheProcessAndReadBackTheSame) {
  ModelBuilder b;
  const int64_t k = 256, n = 768;
  auto x = b.input("x", {64, k});
  b.graph().inputs[0].type.shape->dims[0] = Dim::symbolic("rows");
  b.graph().value_types["x"] = b.graph().inputs[0].type;
  b.output(b.node("MatMul", {x, b.constant(ramp({k, n}, 0.5f, -0.25f))}));
  std::shared_ptr<Model> m = b.build();
  CompileReport rep;
  auto spec = compile_model(*m, CompileOptions(), &rep);
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  const std::string path = temp_path("file_pages.ferry");
  ASSERT_TRUE(write_compiled_model(path, spec.value()).is_ok());
  auto cm = load_compiled_model(path);
  ::unlink(path.c_str());
  ASSERT_TRUE(cm.is_ok()) << cm.status().to_string();
  std::shared_ptr<Model> loaded = cm.value().gears.at(0).model;
  const Tensor* w = nullptr;
  for (const auto& [name, t] : loaded->graph.initializers)
    if (t.numel() == k * n) w = &t;
  ASSERT_NE(w, nullptr);
  const int64_t whole_pages = w->nbytes() / kPage - 1;  // at least this many lie wholly inside it

  ExecutorOptions o;
  o.threads = 1;
  auto from_file = Executor::create(loaded, o);
  auto from_memory = Executor::create(m, o);
  ASSERT_TRUE(from_file.is_ok()) << from_file.status().to_string();
  ASSERT_TRUE(from_memory.is_ok()) << from_memory.status().to_string();
  bool first = true;
  for (int64_t rows : {2, 64, 24, 300, 2}) {
    SCOPED_TRACE(rows);
    const Tensor in = ramp({rows, k}, 1.f, -0.5f);
    const int64_t dropped = file_pages_dropped();
    NamedTensors got, want;
    ASSERT_TRUE(from_file.value()->run({{"x", in}}, &got).is_ok());
    ASSERT_TRUE(from_memory.value()->run({{"x", in}}, &want).is_ok());
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(same_bytes(got[0].second, want[0].second));
    if (first) {  // the first run packed small_gemm panels from the file's bytes
      EXPECT_GE(file_pages_dropped() - dropped, whole_pages * kPage);
      EXPECT_LE(present_pages(w->raw(), w->nbytes()), 2) << "the file's pages stayed beside the packed form";
    }
    first = false;
  }
  // The reference kernels read the weights in place, their pages faulted in again from the file.
  auto rb1 = make_backend("cpu-ref"), rb2 = make_backend("cpu-ref");
  ASSERT_TRUE(rb1.is_ok() && rb2.is_ok());
  auto ref_file = Executor::create(loaded, std::move(rb1.value()), o);
  auto ref_memory = Executor::create(m, std::move(rb2.value()), o);
  ASSERT_TRUE(ref_file.is_ok()) << ref_file.status().to_string();
  ASSERT_TRUE(ref_memory.is_ok()) << ref_memory.status().to_string();
  EXPECT_LE(present_pages(w->raw(), w->nbytes()), 2);
  const Tensor in = ramp({5, k}, 2.f, -1.f);
  NamedTensors got, want;
  ASSERT_TRUE(ref_file.value()->run({{"x", in}}, &got).is_ok());
  ASSERT_TRUE(ref_memory.value()->run({{"x", in}}, &want).is_ok());
  EXPECT_TRUE(same_bytes(got[0].second, want[0].second));
}

}  // namespace
}  // namespace ferry
