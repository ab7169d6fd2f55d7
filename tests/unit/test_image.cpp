// io/image (JPEG/PNG decoding) and io/image_transform (torchvision transforms) against PIL and
// torchvision references made by image_fixtures.py.
#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "image_test_util.h"
#include "io/image.h"
#include "io/image_transform.h"
#include "io/npy.h"

namespace ferry {
namespace {

using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

void expect_error(const Status& st, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(st.is_ok()) << "expected an error";
  for (const std::string& p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << "'" << p << "' not in: " << st.message();
}

// ---------------------------------------------------------------------------------------------
// Crafted files

void put32(std::vector<uint8_t>* v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v->push_back(static_cast<uint8_t>(x >> s));
}

void png_chunk(std::vector<uint8_t>* v, const char* tag, const std::vector<uint8_t>& data) {
  put32(v, static_cast<uint32_t>(data.size()));
  std::vector<uint8_t> td(tag, tag + 4);
  td.insert(td.end(), data.begin(), data.end());
  v->insert(v->end(), td.begin(), td.end());
  put32(v, static_cast<uint32_t>(crc32(0, td.data(), static_cast<uInt>(td.size()))));
}

std::vector<uint8_t> png_header_only(uint32_t w, uint32_t h) {
  std::vector<uint8_t> v = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  std::vector<uint8_t> ihdr;
  put32(&ihdr, w);
  put32(&ihdr, h);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  png_chunk(&v, "IHDR", ihdr);
  png_chunk(&v, "IDAT", {0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01});
  png_chunk(&v, "IEND", {});
  return v;
}

std::vector<uint8_t> jpeg_sof_only(uint16_t w, uint16_t h, size_t app_bytes = 0) {
  std::vector<uint8_t> v = {0xFF, 0xD8};
  while (app_bytes > 0) {  // APP1 segments before the frame header, as big EXIF blocks are
    size_t n = std::min<size_t>(app_bytes, 65533);
    v.insert(v.end(), {0xFF, 0xE1, static_cast<uint8_t>((n + 2) >> 8), static_cast<uint8_t>((n + 2) & 0xFF)});
    v.insert(v.end(), n, 0x41);
    app_bytes -= n;
  }
  v.insert(v.end(), {0xFF, 0xC0, 0x00, 0x11, 0x08, static_cast<uint8_t>(h >> 8), static_cast<uint8_t>(h),
                     static_cast<uint8_t>(w >> 8), static_cast<uint8_t>(w), 0x03, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1,
                     0xFF, 0xD9});
  return v;
}

// ---------------------------------------------------------------------------------------------
// Decoding

TEST(ImageDecode, EveryKindMatchesPil) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  std::ifstream list(dir + "/decode.txt");
  std::string name;
  int64_t w = 0, h = 0;
  int checked = 0;
  while (list >> name >> w >> h) {
    SCOPED_TRACE(name);
    StatusOr<Image> img = read_image(dir + "/" + name);
    ASSERT_TRUE(img.is_ok()) << img.status().to_string();
    EXPECT_EQ(img.value().width, w);
    EXPECT_EQ(img.value().height, h);
    StatusOr<Tensor> ref = read_npy(dir + "/" + name + ".npy");
    ASSERT_TRUE(ref.is_ok());
    ASSERT_EQ(ref.value().numel(), static_cast<int64_t>(img.value().pixels.size()));
    int max_diff = 0;
    for (size_t i = 0; i < img.value().pixels.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(int{img.value().pixels[i]} - int{ref.value().data<uint8_t>()[i]}));
    }
    EXPECT_EQ(max_diff, 0) << "pixels differ from PIL's convert('RGB')";
    ++checked;
  }
  EXPECT_GE(checked, 29);  // 23 PNG kinds, 6 JPEG kinds
}

TEST(ImageDecode, MemoryEqualsFileAndProbeReadsHeader) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  for (const char* name : {"rgb420.jpg", "palette4.png"}) {
    std::vector<uint8_t> bytes = read_bytes(dir + "/" + name);
    StatusOr<Image> a = decode_image(bytes, name);
    StatusOr<Image> b = read_image(dir + "/" + name);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(a.value().pixels, b.value().pixels);
    StatusOr<ImageInfo> info = probe_image_file(dir + "/" + name);
    ASSERT_TRUE(info.is_ok()) << info.status().to_string();
    EXPECT_EQ(info.value().width, a.value().width);
    EXPECT_EQ(info.value().height, a.value().height);
  }
}

TEST(ImageDecode, TruncatedFilesAreNamed) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  ScratchDir tmp;
  for (const char* name : {"rgb420.jpg", "progressive.jpg", "rgb8.png", "interlaced_rgb8.png"}) {
    std::vector<uint8_t> bytes = read_bytes(dir + "/" + name);
    for (size_t keep : {bytes.size() * 2 / 3, size_t{40}, size_t{20}}) {
      std::string path = tmp / ("cut_" + std::to_string(keep) + "_" + name);
      write_bytes(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep)));
      StatusOr<Image> img = read_image(path);
      SCOPED_TRACE(path);
      expect_error(img.status(), {path, "truncated"});
      EXPECT_EQ(img.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

TEST(ImageDecode, CorruptAndForeignFilesAreNamed) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  ScratchDir tmp;
  std::vector<uint8_t> png = read_bytes(dir + "/rgb8.png");
  png[png.size() - 20] ^= 0x55;  // inside the IDAT data or its CRC
  write_bytes(tmp / "bad.png", png);
  expect_error(read_image(tmp / "bad.png").status(), {tmp / "bad.png", "corrupt PNG"});

  std::vector<uint8_t> jpg = read_bytes(dir + "/rgb420.jpg");
  for (size_t i = 2; i < 200; ++i) jpg[i] = static_cast<uint8_t>(i * 37);  // tables and header destroyed
  write_bytes(tmp / "bad.jpg", jpg);
  expect_error(read_image(tmp / "bad.jpg").status(), {tmp / "bad.jpg", "JPEG"});

  write_bytes(tmp / "notes.jpg", {'h', 'e', 'l', 'l', 'o', '\n'});
  expect_error(read_image(tmp / "notes.jpg").status(), {tmp / "notes.jpg", "not a JPEG or PNG", "68 65 6c"});
  write_bytes(tmp / "pic.bmp", {'B', 'M', 0, 0, 0, 0});
  expect_error(read_image(tmp / "pic.bmp").status(), {"BMP", "JPEG and PNG only"});
  write_bytes(tmp / "empty.png", {});
  expect_error(read_image(tmp / "empty.png").status(), {"empty file"});
  StatusOr<Image> missing = read_image(tmp / "missing.png");
  expect_error(missing.status(), {tmp / "missing.png"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  expect_error(read_image(tmp.path()).status(), {"not a regular file"});
}

TEST(ImageDecode, BombsAreRefusedFromTheHeader) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint8_t> png = png_header_only(100000, 100000);
  StatusOr<Image> p = decode_image(png, "'bomb.png'");
  expect_error(p.status(), {"'bomb.png'", "100000x100000", "10000000000 pixels", "178956970"});
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  expect_error(probe_image(png, "'bomb.png'").status(), {"100000x100000"});

  std::vector<uint8_t> jpg = jpeg_sof_only(65000, 65000);
  expect_error(decode_image(jpg, "'bomb.jpg'").status(), {"'bomb.jpg'", "JPEG", "65000x65000", "178956970"});
  // Refused before allocating 12-30 GB: fast, no memory error.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);

  ImageDecodeOptions small;
  small.max_pixels = 50;
  expect_error(decode_image(png_header_only(13, 7), "x", small).status(), {"13x7", "91 pixels", "limit of 50"});
}

TEST(ImageDecode, PixelAndFileLimitsAreConfigurable) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  ImageDecodeOptions o;
  o.max_pixels = 13 * 7;
  EXPECT_TRUE(read_image(dir + "/rgb8.png", o).is_ok());
  o.max_pixels = 13 * 7 - 1;
  expect_error(read_image(dir + "/rgb8.png", o).status(), {"rgb8.png", "over the limit"});
  o.max_pixels = kDefaultMaxImagePixels;
  o.max_file_bytes = 16;
  expect_error(read_image(dir + "/rgb8.png", o).status(), {"rgb8.png", "over the image file limit of 16 bytes"});
}

TEST(ImageDecode, ProbeFindsHeadersPastLargeSegments) {
  ScratchDir tmp;
  write_bytes(tmp / "exif.jpg", jpeg_sof_only(640, 480, 200000));
  StatusOr<ImageInfo> info = probe_image_file(tmp / "exif.jpg");
  ASSERT_TRUE(info.is_ok()) << info.status().to_string();
  EXPECT_EQ(info.value().format, ImageFormat::kJpeg);
  EXPECT_EQ(info.value().width, 640);
  EXPECT_EQ(info.value().height, 480);
  std::vector<uint8_t> cut = jpeg_sof_only(640, 480, 200000);
  cut.resize(100000);
  write_bytes(tmp / "cut.jpg", cut);
  expect_error(probe_image_file(tmp / "cut.jpg").status(), {"cut.jpg", "truncated"});
}

// Random byte flips and cuts must give a Status, never a crash or hang (a quick in-tree fuzz).
TEST(ImageDecode, MutatedFilesNeverCrash) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  std::mt19937_64 rng(7);
  ImageDecodeOptions o;
  o.max_pixels = 1 << 16;
  int ok = 0;
  for (const char* name : {"rgb420.jpg", "progressive.jpg", "cmyk.jpg", "palette8_trns.png", "interlaced_rgba16.png"}) {
    const std::vector<uint8_t> orig = read_bytes(dir + "/" + name);
    for (int i = 0; i < 150; ++i) {
      std::vector<uint8_t> b = orig;
      const int flips = 1 + static_cast<int>(rng() % 8);
      for (int f = 0; f < flips; ++f) b[rng() % b.size()] = static_cast<uint8_t>(rng());
      if (rng() % 4 == 0) b.resize(rng() % b.size());
      StatusOr<Image> img = decode_image(b, "m", o);
      if (img.is_ok()) {
        ++ok;
        EXPECT_EQ(static_cast<int64_t>(img.value().pixels.size()), img.value().width * img.value().height * 3);
      } else {
        EXPECT_EQ(img.status().code(), StatusCode::kInvalidArgument) << img.status().to_string();
      }
    }
  }
  EXPECT_GT(ok, 0);
}

// ---------------------------------------------------------------------------------------------
// Transforms

TEST(ImageTransform, MatchesTorchvisionOnPil) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  std::ifstream list(dir + "/transforms.txt");
  std::string line;
  int checked = 0;
  double worst = 0;
  while (std::getline(list, line)) {
    std::istringstream in(line);
    std::string name, src, kind;
    in >> name >> src >> kind;
    std::vector<int64_t> args;
    for (int64_t a; in >> a;) args.push_back(a);
    SCOPED_TRACE(name);
    StatusOr<Image> img = read_image(dir + "/" + src);
    ASSERT_TRUE(img.is_ok()) << img.status().to_string();
    Image out;
    if (kind == "eval") out = eval_transform(img.value(), args[0]);
    else if (kind == "center_crop") out = center_crop(img.value(), args[0]);
    else if (kind == "resized_crop") out = resize_bilinear(crop_image(img.value(), {args[0], args[1], args[2], args[3]}), args[4], args[4]);
    else if (kind == "resize") out = resize_bilinear(img.value(), args[0], args[1]);
    else FAIL() << kind;
    StatusOr<Tensor> ref = read_npy(dir + "/" + name + ".npy");
    ASSERT_TRUE(ref.is_ok());
    ASSERT_EQ(ref.value().dims(), (std::vector<int64_t>{3, out.height, out.width}));
    std::vector<float> got(static_cast<size_t>(3 * out.height * out.width));
    to_normalized_chw(out, got);
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - ref.value().data<float>()[i])));
    }
    worst = std::max(worst, max_diff);
    EXPECT_LE(max_diff, 1e-6) << "normalized values differ from torchvision+PIL";
    ++checked;
  }
  EXPECT_EQ(checked, 6);
  std::printf("[ max |ferry - torchvision| over the transform references: %.3g ]\n", worst);
}

TEST(ImageTransform, SizesFollowTorchvision) {
  EXPECT_EQ(eval_resize_size(224), 256);
  EXPECT_EQ(eval_resize_size(160), 183);
  Image img;
  img.width = 500;
  img.height = 375;
  img.pixels.assign(500 * 375 * 3, 9);
  Image r = resize_shorter_side(img, 256);
  EXPECT_EQ(r.height, 256);
  EXPECT_EQ(r.width, 341);  // int(256 * 500 / 375) = int(341.33)
  EXPECT_EQ(eval_transform(img, 224).width, 224);
  Image same = resize_shorter_side(r, 256);
  EXPECT_EQ(same.pixels, r.pixels);
  Image f = flip_horizontal(flip_horizontal(r));
  EXPECT_EQ(f.pixels, r.pixels);
}

TEST(ImageTransform, RandomResizedCropBoxes) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 2000; ++i) {
    const int64_t h = 1 + static_cast<int64_t>(rng() % 700), w = 1 + static_cast<int64_t>(rng() % 700);
    CropBox b = random_resized_crop_box(h, w, rng);
    ASSERT_GE(b.top, 0);
    ASSERT_GE(b.left, 0);
    ASSERT_GE(b.height, 1);
    ASSERT_GE(b.width, 1);
    ASSERT_LE(b.top + b.height, h) << h << "x" << w;
    ASSERT_LE(b.left + b.width, w) << h << "x" << w;
  }
  // Fallback (no draw fits): the center crop with the ratio clamped to [3/4, 4/3].
  RandomResizedCropParams never;
  never.scale_min = 2.0;
  never.scale_max = 3.0;
  CropBox wide = random_resized_crop_box(100, 400, rng, never);
  EXPECT_EQ(wide.height, 100);
  EXPECT_EQ(wide.width, 133);  // round(100 * 4/3)
  EXPECT_EQ(wide.left, (400 - 133) / 2);
  CropBox tall = random_resized_crop_box(400, 100, rng, never);
  EXPECT_EQ(tall.width, 100);
  EXPECT_EQ(tall.height, 133);
  CropBox square = random_resized_crop_box(90, 100, rng, never);
  EXPECT_EQ(square.height, 90);
  EXPECT_EQ(square.width, 100);
}

TEST(ImageTransform, TrainTransformIsDeterministicPerSeed) {
  FERRY_REQUIRE_IMAGE_FIXTURES(dir);
  StatusOr<Image> img = read_image(dir + "/photo.jpg");
  ASSERT_TRUE(img.is_ok());
  std::mt19937_64 a(5), b(5), c(6);
  Image x = train_transform(img.value(), 64, a);
  Image y = train_transform(img.value(), 64, b);
  Image z = train_transform(img.value(), 64, c);
  EXPECT_EQ(x.width, 64);
  EXPECT_EQ(x.height, 64);
  EXPECT_EQ(x.pixels, y.pixels);
  EXPECT_NE(x.pixels, z.pixels);
  // About half the draws flip.
  std::mt19937_64 rng(1);
  int flips = 0;
  for (int i = 0; i < 1000; ++i) flips += uniform_real(rng, 0, 1) < 0.5;
  EXPECT_NEAR(flips, 500, 60);
}

}  // namespace
}  // namespace ferry
