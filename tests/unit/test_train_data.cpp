// Training data: ImageFolderDataset (vs torchvision's ImageFolder), NpzDataset, Prefetcher.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "image_test_util.h"
#include "io/npy.h"
#include "data/image_folder.h"
#include "data/npz_dataset.h"
#include "data/prefetch.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

void expect_error(const Status& st, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(st.is_ok()) << "expected an error";
  for (const std::string& p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st.message();
}

ImageFolderOptions eval_options(int64_t size) {
  ImageFolderOptions o;
  o.input_name = "pixel_values";
  o.image_size = size;
  o.train = false;
  return o;
}

// ---------------------------------------------------------------------------------------------
// ImageFolder

TEST(TrainDataImageFolder, ListsClassesAndFilesAsTorchvision) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  auto ds = ImageFolderDataset::open(dir + "/folder", eval_options(32));
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  std::ifstream classes(dir + "/folder_classes.txt");
  std::vector<std::string> expected_classes;
  for (std::string c; std::getline(classes, c);) expected_classes.push_back(c);
  EXPECT_EQ(ds.value()->class_names(), expected_classes);
  EXPECT_EQ(ds.value()->num_classes(), static_cast<int64_t>(expected_classes.size()));
  std::ifstream samples(dir + "/folder_samples.txt");
  int64_t i = 0;
  for (std::string line; std::getline(samples, line); ++i) {
    const size_t tab = line.find('\t');
    ASSERT_LT(i, ds.value()->size());
    EXPECT_EQ(ds.value()->label(i), std::stoll(line.substr(0, tab)));
    EXPECT_EQ(fs::path(ds.value()->path(i)).lexically_normal(), fs::path(line.substr(tab + 1)).lexically_normal());
  }
  EXPECT_EQ(ds.value()->size(), i);
  ASSERT_EQ(ds.value()->inputs().size(), 1u);
  EXPECT_EQ(ds.value()->inputs()[0].name, "pixel_values");
  EXPECT_EQ(ds.value()->inputs()[0].dims, (std::vector<int64_t>{3, 32, 32}));
}

TEST(TrainDataImageFolder, EvalBatchMatchesTorchvision) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  auto ds = ImageFolderDataset::open(dir + "/folder", eval_options(32));
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  std::vector<int64_t> all;
  for (int64_t i = 0; i < ds.value()->size(); ++i) all.push_back(i);
  Batch b;
  ASSERT_TRUE(ds.value()->load(all, 0, &b).is_ok());
  ASSERT_EQ(b.inputs.size(), 1u);
  EXPECT_EQ(b.inputs[0].first, "pixel_values");
  StatusOr<Tensor> ref = read_npy(dir + "/folder_eval_32.npy");
  ASSERT_TRUE(ref.is_ok());
  ASSERT_EQ(b.inputs[0].second.dims(), ref.value().dims());
  double max_diff = 0;
  for (int64_t i = 0; i < ref.value().numel(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(b.inputs[0].second.data<float>()[i] - ref.value().data<float>()[i])));
  }
  EXPECT_LE(max_diff, 1e-6);
  EXPECT_EQ(b.labels.dtype(), DType::kI64);
  for (int64_t i = 0; i < ds.value()->size(); ++i) EXPECT_EQ(b.labels.data<int64_t>()[i], ds.value()->label(i));
  EXPECT_EQ(b.indices, all);
}

TEST(TrainDataImageFolder, TrainSamplesDependOnSeedAndIndexOnly) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  ImageFolderOptions o = eval_options(24);
  o.train = true;
  auto ds = ImageFolderDataset::open(dir + "/folder", o);
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  Batch a, b, c, single;
  ASSERT_TRUE(ds.value()->load({3, 0, 9}, 11, &a).is_ok());
  ASSERT_TRUE(ds.value()->load({3, 0, 9}, 11, &b).is_ok());
  ASSERT_TRUE(ds.value()->load({3, 0, 9}, 12, &c).is_ok());
  ASSERT_TRUE(ds.value()->load({9}, 11, &single).is_ok());
  const Tensor& ta = a.inputs[0].second;
  auto same = [](const Tensor& x, int64_t xrow, const Tensor& y, int64_t yrow) {
    const int64_t n = 3 * 24 * 24;
    return std::memcmp(x.data<float>() + xrow * n, y.data<float>() + yrow * n, n * sizeof(float)) == 0;
  };
  for (int64_t r = 0; r < 3; ++r) EXPECT_TRUE(same(ta, r, b.inputs[0].second, r));
  EXPECT_FALSE(same(ta, 0, c.inputs[0].second, 0));
  EXPECT_TRUE(same(ta, 2, single.inputs[0].second, 0));  // the batch around a sample does not matter
}

TEST(TrainDataImageFolder, BadFilesAreNamedOrSkipped) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  ScratchDir tmp;
  const std::vector<uint8_t> good = read_bytes(dir + "/rgb420.jpg");
  std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2));
  write_bytes(tmp / "data/cat/1.jpg", good);
  write_bytes(tmp / "data/cat/2_cut.jpg", cut);  // header fine, data cut: fails at load
  write_bytes(tmp / "data/cat/3_text.jpg", {'n', 'o', 'p', 'e'});
  write_bytes(tmp / "data/dog/1.jpg", good);
  write_bytes(tmp / "data/dog/2.bmp", {'B', 'M', 0, 0});

  // Without skipping: the unsupported format is reported at scan time, bad data at load.
  auto strict = ImageFolderDataset::open(tmp / "data", eval_options(16));
  expect_error(strict.status(), {"2.bmp", "JPEG and PNG", "skip"});
  fs::remove(tmp / "data/dog/2.bmp");
  strict = ImageFolderDataset::open(tmp / "data", eval_options(16));
  ASSERT_TRUE(strict.is_ok()) << strict.status().to_string();
  EXPECT_EQ(strict.value()->size(), 4);
  Batch b;
  expect_error(strict.value()->load({0, 1}, 0, &b), {"2_cut.jpg", "truncated"});
  expect_error(strict.value()->load({2}, 0, &b), {"3_text.jpg", "not a JPEG or PNG"});

  write_bytes(tmp / "data/dog/2.bmp", {'B', 'M', 0, 0});
  ImageFolderOptions o = eval_options(16);
  o.skip_bad_images = true;
  auto lenient = ImageFolderDataset::open(tmp / "data", o);
  ASSERT_TRUE(lenient.is_ok()) << lenient.status().to_string();
  EXPECT_EQ(lenient.value()->size(), 3);  // 1.jpg, 2_cut.jpg, dog/1.jpg
  EXPECT_EQ(lenient.value()->skipped_files(), 2);
  ASSERT_EQ(lenient.value()->skipped_examples().size(), 2u);
  ASSERT_TRUE(lenient.value()->load({0, 1, 2}, 0, &b).is_ok());
  EXPECT_EQ(lenient.value()->replaced_samples(), 1);
  ASSERT_EQ(lenient.value()->replaced_examples().size(), 1u);
  EXPECT_NE(lenient.value()->replaced_examples()[0].find("2_cut.jpg"), std::string::npos);
  EXPECT_EQ(b.labels.data<int64_t>()[1], 1);  // replaced by the next sample (a dog)
}

TEST(TrainDataImageFolder, FolderErrors) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  ScratchDir tmp;
  StatusOr<std::unique_ptr<ImageFolderDataset>> r = ImageFolderDataset::open(tmp / "nope", eval_options(8));
  expect_error(r.status(), {"nope", "no such data folder"});
  write_bytes(tmp / "file.npz", {1});
  expect_error(ImageFolderDataset::open(tmp / "file.npz", eval_options(8)).status(), {"not a folder"});
  fs::create_directories(tmp / "flat");
  write_bytes(tmp / "flat/1.jpg", read_bytes(dir + "/rgb420.jpg"));
  expect_error(ImageFolderDataset::open(tmp / "flat", eval_options(8)).status(), {"no class folders"});
  write_bytes(tmp / "flat/cat/1.jpg", read_bytes(dir + "/rgb420.jpg"));
  write_bytes(tmp / "flat/dog/readme.txt", {'x'});
  expect_error(ImageFolderDataset::open(tmp / "flat", eval_options(8)).status(), {"dog", "no usable image"});
  // A symlink cycle inside a class folder is walked once, not forever.
  fs::remove(tmp / "flat/dog/readme.txt");
  write_bytes(tmp / "flat/dog/a/1.png", read_bytes(dir + "/rgb8.png"));
  fs::create_directory_symlink("..", tmp / "flat/dog/a/loop");
  auto ds = ImageFolderDataset::open(tmp / "flat", eval_options(8));
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds.value()->size(), 2);
  Batch b;
  expect_error(ds.value()->load({2}, 0, &b), {"sample index 2 is out of range"});
}

// ---------------------------------------------------------------------------------------------
// .npz

std::vector<std::pair<std::string, Tensor>> npz_arrays(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n * 2));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i % 3;
  Tensor xt = Tensor::allocate(DType::kF32, {n, 2});
  std::copy(x.begin(), x.end(), xt.mutable_data<float>());
  return {{"x", xt}, {"labels", Tensor::from_vector<int64_t>(y, {n})}};
}

TEST(TrainDataNpz, LoadsRowsAndClasses) {
  ScratchDir tmp;
  ASSERT_TRUE(write_npz(tmp / "d.npz", npz_arrays(5)).is_ok());
  auto ds = NpzDataset::open(tmp / "d.npz", {{"x"}, NpzLabelKind::kClassIndex});
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds.value()->size(), 5);
  EXPECT_EQ(ds.value()->num_classes(), 3);
  ASSERT_EQ(ds.value()->inputs().size(), 1u);
  EXPECT_EQ(ds.value()->inputs()[0].dims, (std::vector<int64_t>{2}));
  Batch b;
  ASSERT_TRUE(ds.value()->load({4, 1}, 0, &b).is_ok());
  EXPECT_EQ(b.inputs[0].second.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b.inputs[0].second.data<float>()[0], 8.f);
  EXPECT_EQ(b.inputs[0].second.data<float>()[3], 3.f);
  EXPECT_EQ(b.labels.data<int64_t>()[0], 1);
  EXPECT_EQ(b.labels.data<int64_t>()[1], 1);
  expect_error(ds.value()->load({5}, 0, &b), {"sample index 5 is out of range", "d.npz", "5 samples"});
}

TEST(TrainDataNpz, ErrorsNameWhatIsWrong) {
  const NpzDatasetOptions cls{{"x"}, NpzLabelKind::kClassIndex};
  auto a = npz_arrays(4);
  expect_error(NpzDataset::from_arrays(a, "'d.npz'", {{"input_ids"}, NpzLabelKind::kClassIndex}).status(),
               {"'d.npz'", "no array 'input_ids'", "'x', 'labels'"});
  expect_error(NpzDataset::from_arrays({a[0]}, "'d.npz'", cls).status(), {"no array 'labels'"});
  a = npz_arrays(4);
  a[1].second = Tensor::from_vector<int64_t>({0, 1, 2}, {3});
  expect_error(NpzDataset::from_arrays(a, "'d.npz'", cls).status(), {"'x' has 4 samples", "'labels' has 3"});
  a[1].second = Tensor::from_vector<float>({0.f, 1.f, 0.5f, 1.f}, {4});
  expect_error(NpzDataset::from_arrays(a, "'d.npz'", cls).status(), {"'labels' has dtype float32", "integers"});
  a[1].second = Tensor::from_vector<int32_t>({0, -1, 2, 1}, {4});
  expect_error(NpzDataset::from_arrays(a, "'d.npz'", cls).status(), {"row 1 is -1"});
  a[1].second = Tensor::scalar<int64_t>(1);
  expect_error(NpzDataset::from_arrays(a, "'d.npz'", cls).status(), {"'labels' is a scalar"});

  // Float targets for regression: any numeric labels become float32 rows.
  a[1].second = Tensor::from_vector<double>({0.5, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  auto reg = NpzDataset::from_arrays(a, "'d.npz'", {{"x"}, NpzLabelKind::kFloatTarget});
  ASSERT_TRUE(reg.is_ok()) << reg.status().to_string();
  EXPECT_EQ(reg.value()->num_classes(), 0);
  Batch b;
  ASSERT_TRUE(reg.value()->load({0, 3}, 0, &b).is_ok());
  EXPECT_EQ(b.labels.dtype(), DType::kF32);
  EXPECT_EQ(b.labels.dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b.labels.data<float>()[0], 0.5f);
  EXPECT_EQ(b.labels.data<float>()[3], 7.f);
}

// ---------------------------------------------------------------------------------------------
// Prefetcher

// A data set whose sample i is the value i; loads take `delay_ms`; index `bad` fails.
class FakeDataset : public Dataset {
 public:
  FakeDataset(int64_t n, int delay_ms, int64_t bad = -1) : n_(n), delay_ms_(delay_ms), bad_(bad) {}
  int64_t size() const override { return n_; }
  std::vector<SampleInput> inputs() const override { return {SampleInput{"x", DType::kF32, {2}}}; }
  int64_t num_classes() const override { return 0; }
  Status load(const std::vector<int64_t>& indices, uint64_t seed, Batch* out) const override {
    loads_.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    const int64_t b = static_cast<int64_t>(indices.size());
    Tensor x = Tensor::allocate(DType::kF32, {b, 2});
    Tensor y = Tensor::allocate(DType::kI64, {b});
    for (int64_t i = 0; i < b; ++i) {
      const int64_t idx = indices[static_cast<size_t>(i)];
      if (idx == bad_) return invalid_argument("sample " + std::to_string(idx) + " ('bad.jpg') is corrupt");
      x.mutable_data<float>()[i * 2] = static_cast<float>(idx);
      x.mutable_data<float>()[i * 2 + 1] = static_cast<float>(seed);
      y.mutable_data<int64_t>()[i] = idx;
    }
    out->inputs = {{"x", x}};
    out->labels = y;
    out->indices = indices;
    return Status::ok();
  }
  mutable std::atomic<int> loads_{0};

 private:
  int64_t n_;
  int delay_ms_;
  int64_t bad_;
};

void expect_batch(const Batch& b, const std::vector<int64_t>& indices, uint64_t seed) {
  EXPECT_EQ(b.indices, indices);
  ASSERT_EQ(b.inputs[0].second.dim(0), static_cast<int64_t>(indices.size()));
  for (size_t i = 0; i < indices.size(); ++i) {
    EXPECT_EQ(b.inputs[0].second.data<float>()[i * 2], static_cast<float>(indices[i]));
    EXPECT_EQ(b.inputs[0].second.data<float>()[i * 2 + 1], static_cast<float>(seed));
    EXPECT_EQ(b.labels.data<int64_t>()[i], indices[i]);
  }
}

TEST(TrainDataPrefetch, BatchesComeBackInOrderWithParts) {
  FakeDataset ds(100, 2);
  for (int threads : {0, 1, 3}) {
    SCOPED_TRACE(threads);
    Prefetcher p(&ds, threads, 3);
    auto indices = [](int64_t step) {
      std::vector<int64_t> v;
      for (int64_t i = 0; i < 7; ++i) v.push_back((step * 13 + i * 5) % 100);
      return v;
    };
    for (int64_t s = 0; s < 3; ++s) ASSERT_TRUE(p.request(s, indices(s), 100 + s).is_ok());
    for (int64_t s = 0; s < 10; ++s) {
      double waited = -1;
      StatusOr<Batch> b = p.take(s, &waited);
      ASSERT_TRUE(b.is_ok()) << b.status().to_string();
      EXPECT_GE(waited, 0);
      expect_batch(b.value(), indices(s), 100 + s);
      if (s + 3 < 10) {
        ASSERT_TRUE(p.request(s + 3, indices(s + 3), 100 + s + 3).is_ok());
      }
    }
    EXPECT_EQ(p.queued(), 0);
  }
}

TEST(TrainDataPrefetch, WaitIsMeasuredAndPrefetchingHidesIt) {
  FakeDataset ds(10, 60);
  Prefetcher p(&ds, 1, 2);
  ASSERT_TRUE(p.request(0, {1}, 0).is_ok());
  double waited = 0;
  ASSERT_TRUE(p.take(0, &waited).is_ok());
  EXPECT_GT(waited, 30.0);  // nothing was ready
  ASSERT_TRUE(p.request(1, {2}, 0).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  ASSERT_TRUE(p.take(1, &waited).is_ok());
  EXPECT_LT(waited, 40.0);  // loaded in the background meanwhile
}

TEST(TrainDataPrefetch, ErrorsAndMisuse) {
  FakeDataset ds(10, 1, /*bad=*/4);
  Prefetcher p(&ds, 2, 2);
  ASSERT_TRUE(p.request(0, {1, 2, 3, 4}, 0).is_ok());
  ASSERT_TRUE(p.request(1, {5}, 0).is_ok());
  expect_error(p.request(2, {6}, 0), {"already queued", "take() one first"});
  expect_error(p.request(1, {6}, 0), {"step 1 is already queued"});
  StatusOr<Batch> b = p.take(0);
  expect_error(b.status(), {"sample 4", "bad.jpg"});
  ASSERT_TRUE(p.take(1).is_ok());
  expect_error(p.take(7).status(), {"step 7 was not requested"});
}

TEST(TrainDataPrefetch, ShutdownWithQueuedWorkDoesNotHang) {
  FakeDataset ds(1000, 20);
  const auto t0 = std::chrono::steady_clock::now();
  {
    Prefetcher p(&ds, 2, 4);
    for (int64_t s = 0; s < 4; ++s) {
      std::vector<int64_t> idx(16);
      for (int64_t i = 0; i < 16; ++i) idx[static_cast<size_t>(i)] = s * 16 + i;
      ASSERT_TRUE(p.request(s, idx, 0).is_ok());
    }
  }  // destroyed with most parts still queued
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_LE(ds.loads_.load(), 4);  // queued parts were dropped, not loaded
}

TEST(TrainDataPrefetch, ImageFolderThroughPrefetcherMatchesDirectLoad) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  ImageFolderOptions o = eval_options(20);
  o.train = true;
  auto ds = ImageFolderDataset::open(dir + "/folder", o);
  ASSERT_TRUE(ds.is_ok());
  const std::vector<int64_t> idx = {9, 1, 4, 4, 0, 7};
  Batch direct;
  ASSERT_TRUE(ds.value()->load(idx, 77, &direct).is_ok());
  Prefetcher p(ds.value().get(), 3);
  ASSERT_TRUE(p.request(0, idx, 77).is_ok());
  StatusOr<Batch> b = p.take(0);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  const Tensor& x = b.value().inputs[0].second;
  ASSERT_EQ(x.dims(), direct.inputs[0].second.dims());
  EXPECT_EQ(std::memcmp(x.raw(), direct.inputs[0].second.raw(), static_cast<size_t>(x.nbytes())), 0);
  EXPECT_EQ(std::memcmp(b.value().labels.raw(), direct.labels.raw(), 6 * sizeof(int64_t)), 0);
}

}  // namespace
}  // namespace ferry
