// Training checkpoints (src/format/checkpoint.h): round trip of every dtype the trainer stores,
// keep_last pruning, latest selection and fallback, corrupt and truncated files, a full disk
// (RLIMIT_FSIZE in a forked child) and unreadable folders.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "format/checkpoint.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ferry_ckpt_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, ec);
    fs::remove_all(dir_, ec);
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
};

Checkpoint sample(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.tensors["param/fc.weight"] = Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-8f}, {2, 3});
  c.tensors["state/adam/m/fc.weight"] = Tensor::from_vector<double>({0.1, 0.2, 0.3}, {3});
  c.tensors["bn/num_batches_tracked"] = Tensor::scalar<int64_t>(step * 10 + 1);
  c.tensors["rng/bytes"] = Tensor::from_vector<uint8_t>({0, 1, 255, 42, 7}, {5});
  c.tensors["mask"] = Tensor::from_vector<bool>({true, false, true}, {1, 3});
  c.tensors["empty"] = Tensor::allocate(DType::kF32, {0, 4});
  c.meta_json = "{\"config\":\"abc123\",\"data_position\":" + std::to_string(step * 32) + "}";
  return c;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

TEST_F(CheckpointTest, RoundTripsEveryDtypeAndMeta) {
  const Checkpoint c = sample(42);
  ASSERT_TRUE(write_checkpoint(dir_, c, 3).is_ok());
  EXPECT_EQ(names(), std::vector<std::string>{"ckpt-00000042.fckpt"});
  auto r = read_checkpoint(dir_ + "/ckpt-00000042.fckpt");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Checkpoint& got = r.value();
  EXPECT_EQ(got.step, 42);
  EXPECT_EQ(got.meta_json, c.meta_json);
  EXPECT_EQ(got.warning, "");
  ASSERT_EQ(got.tensors.size(), c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    const Tensor& g = got.tensors.at(name);
    EXPECT_EQ(g.dtype(), t.dtype()) << name;
    EXPECT_EQ(g.dims(), t.dims()) << name;
    EXPECT_EQ(std::memcmp(g.raw(), t.raw(), static_cast<size_t>(t.nbytes())), 0) << name;
  }
  EXPECT_EQ(values<float>(got.tensors.at("param/fc.weight"))[2], 3.25f);
  EXPECT_EQ(values<int64_t>(got.tensors.at("bn/num_batches_tracked"))[0], 421);
  EXPECT_EQ(got.tensors.at("bn/num_batches_tracked").rank(), 0);
  // Every tensor's data starts 64-byte aligned in the file.
  const std::string bytes = read_bytes(dir_ + "/ckpt-00000042.fckpt");
  EXPECT_EQ(bytes.size() % 64, 0u);
  EXPECT_EQ(bytes.compare(0, 8, "FERRYCKP"), 0);
}

TEST_F(CheckpointTest, KeepLastPrunesOnlyCheckpointFiles) {
  write_bytes(dir_ + "/notes.txt", "mine");
  write_bytes(dir_ + "/ckpt-1.fckpt", "too few digits: not ours");
  write_bytes(dir_ + "/ckpt-00000001.fckpt.bak", "not ours either");
  for (int64_t step : {5, 10, 15, 20}) ASSERT_TRUE(write_checkpoint(dir_, sample(step), 2).is_ok());
  EXPECT_EQ(names(), (std::vector<std::string>{"ckpt-00000001.fckpt.bak", "ckpt-00000015.fckpt", "ckpt-00000020.fckpt",
                                               "ckpt-1.fckpt", "notes.txt"}));
  ASSERT_TRUE(write_checkpoint(dir_, sample(123456789), 0).is_ok());  // 0 keeps all; 9 digits
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt-123456789.fckpt"));
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt-00000015.fckpt"));
}

TEST_F(CheckpointTest, LatestIsTheHighestStepAndFolderReadsIt) {
  EXPECT_EQ(latest_checkpoint(dir_).status().code(), StatusCode::kNotFound);
  for (int64_t step : {100, 7, 30}) ASSERT_TRUE(write_checkpoint(dir_, sample(step), 5).is_ok());
  auto latest = latest_checkpoint(dir_);
  ASSERT_TRUE(latest.is_ok());
  EXPECT_EQ(latest.value(), dir_ + "/ckpt-00000100.fckpt");
  auto r = read_checkpoint(dir_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value().step, 100);
  EXPECT_EQ(r.value().path, dir_ + "/ckpt-00000100.fckpt");
}

TEST_F(CheckpointTest, CorruptLatestFallsBackWithAWarning) {
  for (int64_t step : {1, 2, 3}) ASSERT_TRUE(write_checkpoint(dir_, sample(step), 5).is_ok());
  const std::string p3 = dir_ + "/ckpt-00000003.fckpt";
  std::string bytes = read_bytes(p3);
  bytes[bytes.size() - 70] ^= 0x5a;  // a flipped bit in the data
  write_bytes(p3, bytes);
  auto direct = read_checkpoint(p3);
  ASSERT_FALSE(direct.is_ok());
  EXPECT_NE(direct.status().message().find("checksum mismatch"), std::string::npos);
  EXPECT_NE(direct.status().message().find(p3), std::string::npos);
  write_bytes(dir_ + "/ckpt-00000002.fckpt", read_bytes(dir_ + "/ckpt-00000002.fckpt").substr(0, 100));  // truncated
  auto r = read_checkpoint(dir_);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value().step, 1);
  EXPECT_NE(r.value().warning.find("ckpt-00000003.fckpt"), std::string::npos) << r.value().warning;
  EXPECT_NE(r.value().warning.find("truncated"), std::string::npos) << r.value().warning;
  write_bytes(dir_ + "/ckpt-00000001.fckpt", "garbage");
  auto none = read_checkpoint(dir_);
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("no readable checkpoint"), std::string::npos);
}

TEST_F(CheckpointTest, HostileBytesAreRefusedBeforeAllocation) {
  ASSERT_TRUE(write_checkpoint(dir_, sample(9), 1).is_ok());
  const std::string good = read_bytes(dir_ + "/ckpt-00000009.fckpt");
  auto parse = [](const std::string& b) {
    return parse_checkpoint(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "test bytes");
  };
  ASSERT_TRUE(parse(good).is_ok());
  EXPECT_NE(parse("FERRYMDL").status().message().find("not a ferry checkpoint"), std::string::npos);
  EXPECT_NE(parse(good.substr(0, 40)).status().message().find("truncated"), std::string::npos);
  EXPECT_NE(parse(good.substr(0, good.size() - 64)).status().message().find("truncated"), std::string::npos);
  EXPECT_NE(parse(good + "x").status().message().find("wrong size"), std::string::npos);
  std::string v2 = good;
  v2[8] = 2;
  EXPECT_NE(parse(v2).status().message().find("format version 2"), std::string::npos);
  // Every single-byte corruption of the header and index is caught (the checksum, at least).
  for (size_t i = 0; i < 400 && i < good.size(); ++i) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0xff);
    EXPECT_FALSE(parse(b).is_ok()) << "byte " << i;
  }
}

TEST_F(CheckpointTest, FullDiskLeavesPreviousCheckpointAndNoTempFile) {
  ASSERT_TRUE(write_checkpoint(dir_, sample(1), 2).is_ok());
  const std::string before = read_bytes(dir_ + "/ckpt-00000001.fckpt");
  Checkpoint big = sample(2);
  big.tensors["param/big"] = Tensor::allocate(DType::kF32, {1 << 18});  // 1 MiB
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    Status s = write_checkpoint(dir_, big, 2);
    const bool named = s.message().find("File too large") != std::string::npos &&
                       s.message().find("ckpt-00000002.fckpt") != std::string::npos;
    ::_exit(s.is_ok() ? 10 : named ? 0 : 11);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: the write succeeded, 11: the error did not name EFBIG and the file";
  EXPECT_EQ(names(), std::vector<std::string>{"ckpt-00000001.fckpt"});
  EXPECT_EQ(read_bytes(dir_ + "/ckpt-00000001.fckpt"), before);
  EXPECT_TRUE(read_checkpoint(dir_).is_ok());
}

TEST_F(CheckpointTest, MissingOrNonFolderPaths) {
  const std::string file = dir_ + "/plain_file";
  write_bytes(file, "x");
  EXPECT_FALSE(write_checkpoint(file, sample(1), 1).is_ok());
  EXPECT_FALSE(latest_checkpoint(file).is_ok());
  EXPECT_EQ(read_checkpoint(dir_ + "/missing").status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(write_checkpoint(dir_ + "/missing/deeper", sample(1), 1).is_ok());
  ASSERT_TRUE(write_checkpoint(dir_ + "/created", sample(1), 1).is_ok());  // one level is created
  Checkpoint bad = sample(3);
  bad.tensors["s"] = Tensor::from_vector<std::string>({"a"}, {1});
  EXPECT_NE(write_checkpoint(dir_, bad, 1).message().find("string tensors"), std::string::npos);
  bad = sample(-1);
  EXPECT_FALSE(write_checkpoint(dir_, bad, 1).is_ok());
}

TEST_F(CheckpointTest, UnreadableFolderIsNamed) {
  const std::string locked = dir_ + "/locked";
  ASSERT_TRUE(write_checkpoint(locked, sample(1), 1).is_ok());
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(locked.c_str(), 0), 0);
  // Root ignores permission bits: the checks run in a child that drops to user 'nobody'.
  const bool forked = ::geteuid() == 0;
  const pid_t pid = forked ? ::fork() : 0;
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (forked && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(20);
    auto r = read_checkpoint(locked);
    const bool named = !r.is_ok() && r.status().message().find("'" + locked + "'") != std::string::npos &&
                       r.status().message().find("check its permissions") != std::string::npos;
    const bool write_refused = !write_checkpoint(locked, sample(2), 1).is_ok();
    const bool latest_refused = !latest_checkpoint(locked).is_ok();
    const int code = named && write_refused && latest_refused ? 0 : 21;
    if (forked) ::_exit(code);
    EXPECT_EQ(code, 0) << (r.is_ok() ? "read" : r.status().message());
  } else {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "20: cannot drop to user nobody, 21: a check failed";
  }
  ::chmod(locked.c_str(), 0755);
}

}  // namespace
}  // namespace ferry
