// `ferry serve`'s system shared-memory regions (src/serve/shared_memory.h) without a socket: a
// POSIX object registered, slices resolved and bounds-checked, inputs read in place or copied,
// outputs written, a region that outlives its unregistering while a request holds it, an object
// shrunk under a region; the logging settings' all-or-nothing update (server_log.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "serve/kserve_json.h"
#include "serve/server_log.h"
#include "serve/shared_memory.h"

namespace ferry::serve {
namespace {

// A shared-memory object of `size` bytes, unlinked at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t size) : key_("/ferry_unit_shm_" + std::to_string(getpid())) {
    fd_ = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
    p_ = static_cast<char*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    size_ = size;
  }
  ~ShmObject() {
    munmap(p_, size_);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  char* data() { return p_; }
  int fd() const { return fd_; }

 private:
  std::string key_;
  int fd_ = -1;
  char* p_ = nullptr;
  size_t size_ = 0;
};

ShmParams params(const std::string& region, uint64_t size, uint64_t offset = 0) {
  ShmParams p;
  p.region = region;
  p.byte_size = size;
  p.offset = offset;
  return p;
}

TEST(ServeShm, RegisterResolveAndBounds) {
  ShmObject obj(8192);
  SharedMemoryRegistry reg(true);
  ASSERT_TRUE(reg.register_region("r", obj.key(), 4096, 1024).is_ok());
  Status twice = reg.register_region("r", obj.key(), 0, 64);
  EXPECT_NE(twice.message().find("'r' is already registered"), std::string::npos) << twice.message();
  Status past = reg.register_region("p", obj.key(), 8000, 4096);
  EXPECT_NE(past.message().find("= 12096 runs past the end of"), std::string::npos) << past.message();
  EXPECT_FALSE(reg.register_region("z", obj.key(), 0, 0).is_ok());
  EXPECT_FALSE(reg.register_region("n", "/ferry_unit_no_such_object", 0, 64).is_ok());

  auto s = reg.resolve(params("r", 32, 64), "input 'x'");
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  ASSERT_TRUE(s.value().has_value());
  EXPECT_EQ(s.value()->data(), s.value()->region->data() + 64);
  std::memcpy(obj.data() + 4096 + 64, "abcd", 4);  // the server's mapping sees the client's bytes
  EXPECT_EQ(std::memcmp(s.value()->data(), "abcd", 4), 0);

  auto beyond = reg.resolve(params("r", 32, 1000), "input 'x'");
  ASSERT_FALSE(beyond.is_ok());
  EXPECT_NE(beyond.status().message().find("input 'x': shared_memory_offset 1000 + shared_memory_byte_size 32 = 1032 runs past the end of region 'r' (1024 bytes)"),
            std::string::npos)
      << beyond.status().message();
  ShmParams half;
  half.region = "r";
  EXPECT_NE(reg.resolve(half, "input 'x'").status().message().find("'shared_memory_byte_size' is missing"), std::string::npos);
  EXPECT_NE(reg.resolve(params("q", 4), "input 'x'").status().message().find("'q' is not registered"), std::string::npos);
  auto none = reg.resolve(ShmParams(), "input 'x'");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none.value().has_value());
}

TEST(ServeShm, InputsInPlaceOrCopiedAndOutputsWritten) {
  ShmObject obj(4096);
  SharedMemoryRegistry reg(true);
  ASSERT_TRUE(reg.register_region("r", obj.key(), 0, 4096).is_ok());
  const float x[4] = {1, 2, 3, 4};
  std::memcpy(obj.data() + 64, x, sizeof(x));
  std::memcpy(obj.data() + 132, x, sizeof(x));
  auto aligned = reg.resolve(params("r", 16, 64), "input 'x'");
  auto in_place = shm_input_tensor(*aligned.value(), DType::kF32, {1, 4}, "input 'x'");
  ASSERT_TRUE(in_place.is_ok()) << in_place.status().message();
  EXPECT_EQ(in_place.value().raw(), static_cast<const void*>(aligned.value()->data()));  // no copy
  auto odd = reg.resolve(params("r", 16, 132), "input 'x'");
  auto copied = shm_input_tensor(*odd.value(), DType::kF32, {1, 4}, "input 'x'");
  ASSERT_TRUE(copied.is_ok());
  EXPECT_NE(copied.value().raw(), static_cast<const void*>(odd.value()->data()));
  EXPECT_EQ(std::memcmp(copied.value().raw(), x, sizeof(x)), 0);
  auto wrong = shm_input_tensor(*aligned.value(), DType::kF32, {2, 4}, "input 'x'");
  EXPECT_NE(wrong.status().message().find("shared_memory_byte_size 16 but shape [2,4] of FP32 needs 32 bytes"), std::string::npos)
      << wrong.status().message();

  // Unregistered while a request holds the slice: the mapping lives until the request lets go.
  reg.unregister("r");
  reg.unregister("r");  // idempotent
  EXPECT_FALSE(reg.status("r").is_ok());
  EXPECT_EQ(std::memcmp(in_place.value().raw(), x, sizeof(x)), 0);

  ModelSignature sig;
  sig.name = "m";
  sig.max_batch = 0;
  sig.outputs = {{"z", DType::kF32, {1, 4}, nullptr}};
  RequestedOutput out;
  out.name = "z";
  out.shm = *aligned.value();
  out.shm->offset = 512;
  TensorList outputs;
  outputs.emplace_back("z", Tensor::from_vector<float>({5, 6, 7, 8}, {1, 4}));
  ASSERT_TRUE(check_shm_outputs(sig, {out}, 1).is_ok());
  ASSERT_TRUE(write_shm_outputs(sig, {out}, outputs).is_ok());
  const float want[4] = {5, 6, 7, 8};
  EXPECT_EQ(std::memcmp(obj.data() + 512, want, sizeof(want)), 0);
  out.shm->byte_size = 8;
  Status small = check_shm_outputs(sig, {out}, 1);
  EXPECT_NE(small.message().find("output 'z': 16 bytes do not fit shared_memory_byte_size 8"), std::string::npos) << small.message();
  EXPECT_FALSE(write_shm_outputs(sig, {out}, outputs).is_ok());
}

TEST(ServeShm, ShrunkObjectIsRefusedNotTouched) {
  ShmObject obj(8192);
  SharedMemoryRegistry reg(true);
  ASSERT_TRUE(reg.register_region("r", obj.key(), 0, 8192).is_ok());
  ASSERT_EQ(ftruncate(obj.fd(), 4096), 0);
  auto s = reg.resolve(params("r", 32), "input 'x'");
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("was shrunk to 4096 bytes"), std::string::npos) << s.status().message();
  ASSERT_EQ(ftruncate(obj.fd(), 8192), 0);
}

TEST(ServeShm, DisabledRegistryRefusesRegistration) {
  ShmObject obj(4096);
  SharedMemoryRegistry reg(false);
  Status st = reg.register_region("r", obj.key(), 0, 64);
  EXPECT_NE(st.message().find("--allow-client-shm true"), std::string::npos) << st.message();
  EXPECT_NE(reg.resolve(params("r", 4), "input 'x'").status().message().find("--allow-client-shm true"), std::string::npos);
}

TEST(ServeLogSettings, UpdateIsAllOrNothing) {
  auto log = ServerLog::open(LogSettings());
  ASSERT_TRUE(log.is_ok());
  ServerLog& l = *log.value();
  EXPECT_FALSE(l.verbose_on(1));
  ASSERT_TRUE(l.update_json("{\"log_verbose_level\": 2, \"log_format\": \"ISO8601\"}").is_ok());
  EXPECT_TRUE(l.verbose_on(2));
  EXPECT_FALSE(l.verbose_on(3));
  Status bad = l.update_json("{\"log_info\": false, \"log_verbose_level\": \"x\"}");
  EXPECT_NE(bad.message().find("log setting 'log_verbose_level' is an unsigned 32-bit integer"), std::string::npos) << bad.message();
  EXPECT_TRUE(l.settings().info);  // nothing applied
  EXPECT_FALSE(l.update({{"log_file", LogValue(std::string("/tmp/x"))}}).is_ok());
  EXPECT_TRUE(l.update({{"log_file", LogValue(std::string(""))}}).is_ok());  // its current value
  EXPECT_EQ(l.settings_json(),
            "{\"log_file\":\"\",\"log_info\":true,\"log_warnings\":true,\"log_errors\":true,\"log_verbose_level\":2,\"log_format\":\"ISO8601\"}");
}

}  // namespace
}  // namespace ferry::serve
