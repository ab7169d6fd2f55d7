// Tests for src/io/npy.h: .npy/.npz reading and writing. All fixtures are built byte by byte
// here (no python needed); deflated archives are made with zlib.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "io/npy.h"

namespace ferry {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Byte helpers

template <typename T>
std::string le_bytes(const std::vector<T>& v) {
  std::string out(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;  // the test host is little-endian (checked below)
}

template <typename T>
std::string be_bytes(const std::vector<T>& v) {
  std::string out = le_bytes(v);
  for (size_t i = 0; i < v.size(); ++i) std::reverse(out.begin() + i * sizeof(T), out.begin() + (i + 1) * sizeof(T));
  return out;
}

// UTF-32 bytes of a string of ASCII chars, padded to `n` chars.
std::string utf32(const std::string& ascii, size_t n, bool big_endian = false) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    uint32_t c = i < ascii.size() ? static_cast<unsigned char>(ascii[i]) : 0;
    char b[4] = {char(c & 0xff), char((c >> 8) & 0xff), char((c >> 16) & 0xff), char(c >> 24)};
    if (big_endian) std::reverse(b, b + 4);
    out.append(b, 4);
  }
  return out;
}

// A .npy image with header text `dict` (padded to 64 bytes like numpy) followed by `data`.
std::string npy(const std::string& dict, const std::string& data, int major = 1, bool pad = true) {
  size_t len_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  if (pad) {
    size_t total = 8 + len_bytes + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
  }
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

std::string header(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") + ", 'shape': " + shape +
         ", }";
}

StatusOr<Tensor> parse(const std::string& bytes, const std::string& what = "'test.npy'") {
  return parse_npy(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what);
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> parse_zip(const std::string& bytes) {
  return parse_npz(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "'test.npz'");
}

std::string raw_bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes()));
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    const auto& _s = (expr);                                \
    ASSERT_TRUE(_s.is_ok()) << _s.status().to_string();    \
  } while (0)

// Status has no status() accessor; adapt it so ASSERT_OK works for both.
struct StatusView {
  Status s;
  bool is_ok() const { return s.is_ok(); }
  const Status& status() const { return s; }
};
StatusView view(const Status& s) { return StatusView{s}; }

// Expects an error whose message contains every one of `parts`.
template <typename T>
void expect_error(const T& result, std::initializer_list<std::string> parts, const std::string& context = "") {
  ASSERT_FALSE(result.is_ok()) << "expected an error " << context;
  const std::string& msg = result.status().message();
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

class NpyTest : public ::testing::Test {
 public:
  void SetUp() override {
    ASSERT_EQ(std::endian::native, std::endian::little) << "the fixtures assume a little-endian host";
    dir_ = fs::path(::testing::TempDir()) /
           ("ferry_npy_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// Round trips

template <typename T>
void round_trip(NpyTest* test, const std::vector<T>& values, std::vector<int64_t> dims, const std::string& descr) {
  Tensor t = Tensor::from_vector<T>(values, dims);
  SCOPED_TRACE(descr);
  auto bytes = encode_npy(t);
  ASSERT_OK(bytes);
  const std::vector<uint8_t>& b = bytes.value();
  std::string text(b.begin(), b.end());
  EXPECT_NE(text.find("'descr': '" + descr + "'"), std::string::npos) << text.substr(0, 128);
  size_t hlen = b[8] | (b[9] << 8);
  EXPECT_EQ((10 + hlen) % 64, 0u);
  EXPECT_EQ(text[10 + hlen - 1], '\n');

  std::string p = test->path("rt.npy");
  ASSERT_OK(view(write_npy(p, t)));
  EXPECT_EQ(slurp(p), text);
  for (int from_file = 0; from_file < 2; ++from_file) {
    auto r = from_file ? read_npy(p) : parse_npy(b.data(), b.size(), "bytes");
    ASSERT_OK(r);
    const Tensor& u = r.value();
    EXPECT_EQ(u.dtype(), t.dtype());
    EXPECT_EQ(u.dims(), t.dims());
    if constexpr (std::is_same_v<T, std::string>) {
      EXPECT_EQ(u.strings(), t.strings());
    } else {
      EXPECT_EQ(raw_bytes(u), raw_bytes(t));
    }
  }
}

TEST_F(NpyTest, RoundTripEveryDType) {
  round_trip<float>(this, {1.5f, -2.25f, 0.0f, 1e30f, -0.0f, 3.0f}, {2, 3}, "<f4");
  round_trip<double>(this, {1.5, -2.25, 1e300}, {3}, "<f8");
  round_trip<Float16>(this, {Float16{f32_to_f16(1.5f)}, Float16{f32_to_f16(-65504.0f)}}, {2, 1}, "<f2");
  round_trip<int8_t>(this, {-128, 0, 127}, {3}, "|i1");
  round_trip<uint8_t>(this, {0, 255, 7, 8}, {2, 2}, "|u1");
  round_trip<int16_t>(this, {-32768, 32767}, {2}, "<i2");
  round_trip<uint16_t>(this, {0, 65535}, {1, 2}, "<u2");
  round_trip<int32_t>(this, {INT32_MIN, INT32_MAX, 0}, {3, 1, 1}, "<i4");
  round_trip<uint32_t>(this, {0u, 4294967295u}, {2}, "<u4");
  round_trip<int64_t>(this, {INT64_MIN, INT64_MAX}, {2}, "<i8");
  round_trip<uint64_t>(this, {0ull, 18446744073709551615ull}, {2}, "<u8");
  round_trip<bool>(this, {true, false, false, true}, {4}, "|b1");
  round_trip<std::string>(this, {"hello", "", "h\xc3\xa9llo", "\xe6\x97\xa5\xe6\x9c\xac", "x\xf0\x9f\x99\x82"}, {5},
                          "<U5");
  round_trip<std::string>(this, {"", ""}, {2}, "<U1");  // numpy uses <U1 for empty strings too
}

TEST_F(NpyTest, ExactHeaderMatchesNumpy) {
  auto b = encode_npy(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  ASSERT_OK(b);
  std::string text(b.value().begin(), b.value().end());
  std::string expected_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(text.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(text.substr(10, expected_dict.size()), expected_dict);
  // numpy leaves room for the first axis to grow to 21 digits, then pads to 64 bytes.
  EXPECT_EQ(text.substr(10 + expected_dict.size(), 21), std::string(20, ' ') + " ");
  EXPECT_EQ(text.size(), 128u + 24u);
  EXPECT_EQ(text[127], '\n');

  auto one = encode_npy(Tensor::from_vector<int64_t>({7}, {1}));
  ASSERT_OK(one);
  EXPECT_NE(std::string(one.value().begin(), one.value().end()).find("'shape': (1,), }"), std::string::npos);
}

TEST_F(NpyTest, ScalarAndZeroSize) {
  round_trip<double>(this, {3.25}, {}, "<f8");
  round_trip<int64_t>(this, {}, {0}, "<i8");
  round_trip<float>(this, {}, {3, 0, 2}, "<f4");
  round_trip<std::string>(this, {}, {0, 4}, "<U1");
  auto b = encode_npy(Tensor::scalar<float>(1.0f));
  ASSERT_OK(b);
  EXPECT_NE(std::string(b.value().begin(), b.value().end()).find("'shape': ()"), std::string::npos);

  // Zero-size arrays need no data bytes, even with a huge other dimension.
  auto z = parse(npy(header("<f4", "(0, 1099511627776)"), ""));
  ASSERT_OK(z);
  EXPECT_EQ(z.value().numel(), 0);
  EXPECT_EQ(z.value().dims(), (std::vector<int64_t>{0, 1099511627776}));
}

TEST_F(NpyTest, Bf16IsWrittenAsFloat32) {
  Tensor t = Tensor::from_vector<BFloat16>({BFloat16{f32_to_bf16(2.5f)}, BFloat16{f32_to_bf16(-3.0f)}}, {2});
  ASSERT_OK(view(write_npy(path("bf.npy"), t)));
  auto r = read_npy(path("bf.npy"));
  ASSERT_OK(r);
  EXPECT_EQ(r.value().dtype(), DType::kF32);
  EXPECT_EQ(r.value().to_double_vector(), (std::vector<double>{2.5, -3.0}));
}

TEST_F(NpyTest, Float16ValuesSurvive) {
  auto r = parse(npy(header("<f2", "(2,)"), le_bytes<uint16_t>({0x3e00, 0xc000})));
  ASSERT_OK(r);
  EXPECT_EQ(r.value().dtype(), DType::kF16);
  EXPECT_EQ(r.value().to_double_vector(), (std::vector<double>{1.5, -2.0}));
}

TEST_F(NpyTest, StringsRejectInvalidUtf8OnWrite) {
  Tensor t = Tensor::from_vector<std::string>({"ok", "bad\xff"}, {2});
  expect_error(view(write_npy(path("s.npy"), t)), {"s.npy", "element 1", "UTF-8"});
  EXPECT_TRUE(files().empty());  // no partial or temporary file left behind
}

// ---------------------------------------------------------------------------------------------
// Layout conversions

TEST_F(NpyTest, FortranOrderIsTransposed) {
  // Logical 2x3 matrix [[0,1,2],[3,4,5]] stored column-major: 0,3,1,4,2,5.
  auto r = parse(npy(header("<i4", "(2, 3)", true), le_bytes<int32_t>({0, 3, 1, 4, 2, 5})));
  ASSERT_OK(r);
  EXPECT_EQ(r.value().dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.value().to_int64_vector(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));

  // 2x3x4 with value = C index; Fortran storage walks the first index fastest.
  std::vector<int16_t> f;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) f.push_back(static_cast<int16_t>(i * 12 + j * 4 + k));
  auto r3 = parse(npy(header(">i2", "(2, 3, 4)", true), be_bytes(f)));  // big-endian too
  ASSERT_OK(r3);
  std::vector<int64_t> expected(24);
  for (int i = 0; i < 24; ++i) expected[i] = i;
  EXPECT_EQ(r3.value().to_int64_vector(), expected);

  // Dims of size 1 make Fortran and C order identical.
  auto r1 = parse(npy(header("<f8", "(1, 3, 1)", true), le_bytes<double>({1, 2, 3})));
  ASSERT_OK(r1);
  EXPECT_EQ(r1.value().to_double_vector(), (std::vector<double>{1, 2, 3}));

  auto rb = parse(npy(header("|b1", "(2, 2)", true), std::string("\x01\x00\x00\x05", 4)));
  ASSERT_OK(rb);
  EXPECT_EQ(rb.value().to_int64_vector(), (std::vector<int64_t>{1, 0, 0, 1}));

  auto rs = parse(npy(header("<U2", "(2, 2)", true), utf32("a", 2) + utf32("c", 2) + utf32("bb", 2) + utf32("d", 2)));
  ASSERT_OK(rs);
  EXPECT_EQ(rs.value().strings(), (std::vector<std::string>{"a", "bb", "c", "d"}));
}

TEST_F(NpyTest, BigEndianIsSwapped) {
  auto f4 = parse(npy(header(">f4", "(3,)"), be_bytes<float>({1.5f, -2.0f, 1e20f})));
  ASSERT_OK(f4);
  EXPECT_EQ(f4.value().dtype(), DType::kF32);
  EXPECT_EQ(f4.value().to_double_vector(), (std::vector<double>{1.5, -2.0, double(1e20f)}));

  auto f8 = parse(npy(header(">f8", "(2,)"), be_bytes<double>({1.25, -1e300})));
  ASSERT_OK(f8);
  EXPECT_EQ(f8.value().to_double_vector(), (std::vector<double>{1.25, -1e300}));

  auto i8 = parse(npy(header(">i8", "(2,)"), be_bytes<int64_t>({-2, 300})));
  ASSERT_OK(i8);
  EXPECT_EQ(i8.value().to_int64_vector(), (std::vector<int64_t>{-2, 300}));

  auto u2 = parse(npy(header(">u2", "(1,)"), be_bytes<uint16_t>({0x1234})));
  ASSERT_OK(u2);
  EXPECT_EQ(u2.value().data<uint16_t>()[0], 0x1234);

  auto f2 = parse(npy(header(">f2", "()"), be_bytes<uint16_t>({0x3e00})));
  ASSERT_OK(f2);
  EXPECT_EQ(f2.value().get_double(0), 1.5);

  auto u = parse(npy(header(">U3", "(2,)"), utf32("abc", 3, true) + utf32("d", 3, true)));
  ASSERT_OK(u);
  EXPECT_EQ(u.value().strings(), (std::vector<std::string>{"abc", "d"}));

  auto i1 = parse(npy(header(">i1", "(2,)"), std::string("\xff\x02", 2)));
  ASSERT_OK(i1);
  EXPECT_EQ(i1.value().to_int64_vector(), (std::vector<int64_t>{-1, 2}));
}

TEST_F(NpyTest, ByteOrderVariants) {
  struct Case {
    std::string descr;
    DType dtype;
  };
  for (const Case& c : {Case{"|u1", DType::kU8}, Case{"<u1", DType::kU8}, Case{"=u1", DType::kU8},
                        Case{"|i1", DType::kI8}, Case{"<i1", DType::kI8}, Case{"|b1", DType::kBool},
                        Case{"<b1", DType::kBool}, Case{"=f4", DType::kF32}, Case{"|f4", DType::kF32},
                        Case{"f4", DType::kF32}, Case{"=i4", DType::kI32}, Case{"<u4", DType::kU32},
                        Case{"<u8", DType::kU64}, Case{"<i2", DType::kI16}, Case{"?", DType::kBool}}) {
    SCOPED_TRACE(c.descr);
    size_t size = static_cast<size_t>(dtype_size(c.dtype));
    std::string data;
    for (size_t i = 0; i < 2 * size; ++i) data.push_back(static_cast<char>(c.dtype == DType::kBool ? i % 2 : i + 1));
    auto r = parse(npy(header(c.descr, "(2,)"), data));
    ASSERT_OK(r);
    EXPECT_EQ(r.value().dtype(), c.dtype);
    EXPECT_EQ(raw_bytes(r.value()), data) << "native (little-endian) order, bytes unchanged";
  }
}

TEST_F(NpyTest, BoolBytesAreNormalised) {
  auto r = parse(npy(header("|b1", "(3,)"), std::string("\x00\x02\xff", 3)));
  ASSERT_OK(r);
  const uint8_t* b = static_cast<const uint8_t*>(r.value().raw());
  EXPECT_EQ(b[0], 0);
  EXPECT_EQ(b[1], 1);
  EXPECT_EQ(b[2], 1);
}

TEST_F(NpyTest, ByteStringsAndUnicode) {
  auto s = parse(npy(header("|S3", "(2,)"), std::string("ab\0xyz", 6)));
  ASSERT_OK(s);
  EXPECT_EQ(s.value().dtype(), DType::kString);
  EXPECT_EQ(s.value().strings(), (std::vector<std::string>{"ab", "xyz"}));

  // Interior NULs are kept, trailing ones stripped (as numpy does).
  std::string data = utf32("a", 1) + std::string(4, '\0') + utf32("b", 1) + std::string(4, '\0');
  auto u = parse(npy(header("<U4", "()"), data));
  ASSERT_OK(u);
  EXPECT_EQ(u.value().strings()[0], std::string("a\0b", 3));

  // Code points beyond U+10FFFF and surrogates are refused.
  auto bad = parse(npy(header("<U1", "(1,)"), le_bytes<uint32_t>({0x110000})));
  expect_error(bad, {"test.npy", "U+00110000"});
  auto sur = parse(npy(header("<U1", "(1,)"), le_bytes<uint32_t>({0xd800})));
  expect_error(sur, {"U+0000D800"});

  auto u0 = parse(npy(header("<U0", "(2,)"), ""));
  ASSERT_OK(u0);
  EXPECT_EQ(u0.value().strings(), (std::vector<std::string>{"", ""}));
  // ...but a tiny file may not declare hundreds of millions of them (fuzz find: 307M '>a0').
  auto many = parse(npy(header(">a0", "(307291279, 1)"), ""));
  expect_error(many, {"test.npy", "zero-width", "307291279", "limit"});
}

// ---------------------------------------------------------------------------------------------
// Header variants

TEST_F(NpyTest, FormatVersions) {
  std::string data = le_bytes<int16_t>({1, 2, 3});
  for (int major : {1, 2, 3}) {
    auto r = parse(npy(header("<i2", "(3,)"), data, major));
    ASSERT_OK(r);
    EXPECT_EQ(r.value().to_int64_vector(), (std::vector<int64_t>{1, 2, 3}));
  }
  std::string v4 = npy(header("<i2", "(3,)"), data, 2);
  v4[6] = 4;
  expect_error(parse(v4), {"version 4.0", "1.0, 2.0 and 3.0"});
  std::string v11 = npy(header("<i2", "(3,)"), data);
  v11[7] = 1;
  expect_error(parse(v11), {"version 1.1"});
}

TEST_F(NpyTest, LenientButValidHeaderSyntax) {
  std::string data = le_bytes<int32_t>({1, 2, 3, 4, 5, 6});
  for (const std::string& h : {
           std::string("{\"descr\": \"<i4\", \"fortran_order\": False, \"shape\": (2, 3)}"),
           std::string("{ 'shape' : ( 2 , 3 ) , 'descr':'<i4','fortran_order':False }"),
           std::string("{'descr': '<i4', 'fortran_order': False, 'shape': (2L, 3L), }"),
           std::string("{'descr': u'<i4', 'fortran_order': False, 'shape': (2, 3,), }"),
           std::string("{'descr':\n'<i4',\t'fortran_order': False, 'shape': (+2, 3), }\n   "),
       }) {
    SCOPED_TRACE(h);
    auto r = parse(npy(h, data, 1, /*pad=*/false));
    ASSERT_OK(r);
    EXPECT_EQ(r.value().dims(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(r.value().get_int64(5), 6);
  }
}

TEST_F(NpyTest, BadMagicAndTruncation) {
  expect_error(parse(""), {"test.npy", "not a .npy file"});
  expect_error(parse("\x93NUM"), {"not a .npy file"});
  expect_error(parse("PK\x03\x04 this is a zip"), {"not a .npy file", "read_npz"});
  expect_error(parse("hello world, not numpy"), {"not a .npy file", "\\x93NUMPY"});
  expect_error(parse(std::string("\x93NUMPY\x01\x00", 8)), {"preamble"});
  expect_error(parse(std::string("\x93NUMPY\x02\x00\x10\x00", 10)), {"preamble"});

  // Header length past the end of the file.
  std::string h = npy(header("<f4", "(2,)"), le_bytes<float>({1, 2}));
  std::string long_header = h;
  long_header[8] = '\xff';
  long_header[9] = '\x7f';
  expect_error(parse(long_header), {"header", "runs past the end"});
  std::string v2 = npy(header("<f4", "(2,)"), le_bytes<float>({1, 2}), 2);
  v2[11] = '\x7f';
  expect_error(parse(v2), {"exceeds the limit"});

  // Truncated data: the error names the file, the needed and the present byte counts.
  std::string full = npy(header("<f4", "(3, 4)"), le_bytes<float>(std::vector<float>(12, 1.0f)));
  std::string cut = full.substr(0, full.size() - 10);
  std::string p = path("cut.npy");
  spit(p, cut);
  auto r = read_npy(p);
  expect_error(r, {"cut.npy", "truncated", "needs 48 data bytes", "only 38"});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  // Every prefix of a valid file fails cleanly (and never reads past the end, under ASan).
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<long>(n));  // exact-size heap block
    EXPECT_FALSE(parse_npy(prefix.data(), prefix.size(), "prefix").is_ok()) << n;
  }
  // Extra trailing bytes are ignored, like numpy.
  ASSERT_OK(parse(full + "trailing"));
}

TEST_F(NpyTest, BadHeadersAreRejected) {
  std::string data = le_bytes<float>({1, 2});
  struct Case {
    std::string header;
    std::string expect;
  };
  for (const Case& c : std::vector<Case>{
           {"", "unexpected end of header"},
           {"['descr', '<f4']", "not a dictionary"},
           {"{'descr': '<f4', 'fortran_order': False}", "lacks the 'shape' key"},
           {"{'descr': '<f4', 'shape': (2,)}", "lacks the 'fortran_order' key"},
           {"{'fortran_order': False, 'shape': (2,)}", "lacks the 'descr' key"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}", "unexpected key 'extra'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'shape': (2,)}", "duplicate key 'shape'"},
           {"{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}'"},
           {"{'descr' '<f4', 'fortran_order': False, 'shape': (2,)}", "expected ':' after key 'descr'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", "missing '}'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", "after the dictionary"},
           {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "expected ','"},
           {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", "'fortran_order' is not True or False"},
           {"{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}", "unexpected name 'false'"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", "'shape' is not a tuple"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", "'shape' is not a tuple"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': ('2',)}", "other than integers"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}", "expected an integer"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "integer too large"},
           {"{'descr': 5, 'fortran_order': False, 'shape': (2,)}", "'descr' is not a string"},
           {"{'descr': '', 'fortran_order': False, 'shape': (2,)}", "empty dtype"},
           {"{'descr': '<f3', 'fortran_order': False, 'shape': (2,)}", "not a dtype ferry understands"},
           {"{'descr': '<f', 'fortran_order': False, 'shape': (2,)}", "not a dtype ferry understands"},
           {"{'descr': '<f4x', 'fortran_order': False, 'shape': (2,)}", "not a dtype ferry understands"},
           {"{'descr': '<c8', 'fortran_order': False, 'shape': (2,)}", "complex"},
           {"{'descr': '<M8[s]', 'fortran_order': False, 'shape': (2,)}", "dates"},
           {"{'descr': '<f16', 'fortran_order': False, 'shape': (2,)}", "np.longdouble"},
           {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", "structured"},
           {"{1: '<f4'}", "keys must be strings"},
           {"{'descr': '<f4\n', 'fortran_order': False, 'shape': (2,)}", "unterminated string"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(100, '(') + std::string(100, ')') + "}",
            "nesting too deep"},
       }) {
    SCOPED_TRACE(c.header);
    auto r = parse(npy(c.header, data));
    expect_error(r, {"test.npy", c.expect});
  }
  std::string dims65 = "(";
  for (int i = 0; i < 65; ++i) dims65 += "1, ";
  expect_error(parse(npy(header("<f4", dims65 + ")"), data)), {"65 dimensions"});
}

TEST_F(NpyTest, NegativeAndHugeDims) {
  auto neg = parse(npy(header("<f4", "(2, -3)"), ""));
  expect_error(neg, {"test.npy", "negative dimension -3", "(2, -3)"});
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);

  // 2^40 elements: refused from the header alone, nothing allocated.
  auto huge = parse(npy(header("<f4", "(1048576, 1048576)"), le_bytes<float>({1, 2})));
  expect_error(huge, {"test.npy", "[1048576,1048576]"});
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  auto overflow = parse(npy(header("<u1", "(4294967296, 4294967296, 4294967296)"), "x"));
  EXPECT_EQ(overflow.status().code(), StatusCode::kResourceExhausted);

  // Within the element limit but larger than the file: a truncation error, not an allocation.
  auto big = parse(npy(header("<f8", "(1073741824,)"), le_bytes<double>({1})));
  expect_error(big, {"truncated", "needs 8589934592 data bytes"});

  // Huge string item size times elements.
  auto big_str = parse(npy(header("<U2147483647", "(1000000,)"), ""));
  EXPECT_FALSE(big_str.is_ok());
}

TEST_F(NpyTest, ObjectArraysAreRefused) {
  // What np.save(allow_pickle=True) writes for dtype=object: a pickle after the header.
  auto r = parse(npy(header("|O", "(2,)"), "\x80\x03]q\x00(K\x01X\x01\x00\x00\x00xq\x01e."));
  expect_error(r, {"test.npy", "object array", "pickles", "astype"});
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  expect_error(parse(npy(header("O", "(1,)"), "")), {"object array"});
}

// ---------------------------------------------------------------------------------------------
// Files

TEST_F(NpyTest, ReadNpyViewsAlignedDataWithoutTouchingTheFile) {
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  std::string p = path("big.npy");
  ASSERT_OK(view(write_npy(p, Tensor::from_vector<float>(v, {10, 100}))));
  auto r = read_npy(p);
  ASSERT_OK(r);
  Tensor t = r.value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  t.mutable_data<float>()[0] = 42.0f;  // copy-on-write: the file keeps its value
  auto again = read_npy(p);
  ASSERT_OK(again);
  EXPECT_EQ(again.value().data<float>()[0], 0.0f);
  EXPECT_EQ(t.data<float>()[999], 999.0f);
}

TEST_F(NpyTest, FileErrors) {
  auto missing = read_npy(path("nope.npy"));
  expect_error(missing, {"nope.npy", "no such file"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  expect_error(read_npy(dir_.string()), {"folder"});
  spit(path("empty.npy"), "");
  expect_error(read_npy(path("empty.npy")), {"empty.npy", "not a .npy file"});

  Status st = write_npy(path("no/such/dir/x.npy"), Tensor::scalar<float>(1.0f));
  expect_error(view(st), {"no/such/dir/x.npy", "folder exists"});
  expect_error(view(write_npy(path("u.npy"), Tensor())), {"undefined"});
}

TEST_F(NpyTest, WriteIsAtomic) {
  std::string p = path("x.npy");
  ASSERT_OK(view(write_npy(p, Tensor::from_vector<int32_t>({1, 2, 3}, {3}))));
  ASSERT_OK(view(write_npy(p, Tensor::from_vector<int32_t>({4, 5}, {2}))));  // replaces
  EXPECT_EQ(files(), (std::vector<std::string>{"x.npy"}));
  std::string before = slurp(p);
  // A failing write leaves the old file intact and no temporary behind.
  expect_error(view(write_npy(p, Tensor::from_vector<std::string>({"\xc0\x80"}, {1}))), {"UTF-8"});
  EXPECT_EQ(slurp(p), before);
  EXPECT_EQ(files(), (std::vector<std::string>{"x.npy"}));
  auto r = read_npy(p);
  ASSERT_OK(r);
  EXPECT_EQ(r.value().to_int64_vector(), (std::vector<int64_t>{4, 5}));
}

// ---------------------------------------------------------------------------------------------
// .npz

std::string deflate_raw(const std::string& in) {
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  EXPECT_EQ(deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

void put16(std::string* s, uint32_t v) {
  s->push_back(char(v & 0xff));
  s->push_back(char((v >> 8) & 0xff));
}
void put32(std::string* s, uint32_t v) {
  put16(s, v & 0xffff);
  put16(s, v >> 16);
}
void put64(std::string* s, uint64_t v) {
  put32(s, uint32_t(v));
  put32(s, uint32_t(v >> 32));
}

// A hand-built ZIP member, with knobs to corrupt it.
struct Member {
  std::string name;
  std::string content;  // uncompressed
  bool deflate = false;
  uint16_t flags = 0;
  std::optional<uint16_t> method;  // overrides the method field
  std::optional<uint32_t> crc;
  std::optional<uint64_t> usize;
  std::optional<uint64_t> csize;
  std::optional<uint64_t> offset;
  bool zip64 = false;        // sizes/offset as 0xffffffff + ZIP64 extra field (central directory)
  bool short_zip64 = false;  // ... with a truncated extra field
};

std::string build_zip(const std::vector<Member>& members, std::optional<uint32_t> cd_offset_override = {}) {
  std::string out, cd;
  for (const Member& m : members) {
    std::string data = m.deflate ? deflate_raw(m.content) : m.content;
    uint16_t method = m.method.value_or(m.deflate ? 8 : 0);
    uint32_t crc = m.crc.value_or(static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(m.content.data()),
                                                              static_cast<uInt>(m.content.size()))));
    uint64_t usize = m.usize.value_or(m.content.size());
    uint64_t csize = m.csize.value_or(data.size());
    uint64_t offset = m.offset.value_or(out.size());
    // Local header.
    put32(&out, 0x04034b50);
    put16(&out, 20);
    put16(&out, m.flags);
    put16(&out, method);
    put16(&out, 0);
    put16(&out, 0x21);
    put32(&out, crc);
    put32(&out, static_cast<uint32_t>(csize));
    put32(&out, static_cast<uint32_t>(usize));
    put16(&out, static_cast<uint32_t>(m.name.size()));
    put16(&out, 0);
    out += m.name + data;
    // Central directory entry.
    std::string extra;
    if (m.zip64) {
      put16(&extra, 1);
      put16(&extra, m.short_zip64 ? 8 : 24);
      put64(&extra, usize);
      if (!m.short_zip64) {
        put64(&extra, csize);
        put64(&extra, offset);
      }
    }
    put32(&cd, 0x02014b50);
    put16(&cd, 45);
    put16(&cd, 45);
    put16(&cd, m.flags);
    put16(&cd, method);
    put16(&cd, 0);
    put16(&cd, 0x21);
    put32(&cd, crc);
    put32(&cd, m.zip64 ? 0xffffffffu : static_cast<uint32_t>(csize));
    put32(&cd, m.zip64 ? 0xffffffffu : static_cast<uint32_t>(usize));
    put16(&cd, static_cast<uint32_t>(m.name.size()));
    put16(&cd, static_cast<uint32_t>(extra.size()));
    put16(&cd, 0);
    put16(&cd, 0);
    put16(&cd, 0);
    put32(&cd, 0);
    put32(&cd, m.zip64 ? 0xffffffffu : static_cast<uint32_t>(offset));
    cd += m.name + extra;
  }
  uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += cd;
  put32(&out, 0x06054b50);
  put16(&out, 0);
  put16(&out, 0);
  put16(&out, static_cast<uint32_t>(members.size()));
  put16(&out, static_cast<uint32_t>(members.size()));
  put32(&out, static_cast<uint32_t>(cd.size()));
  put32(&out, cd_offset_override.value_or(cd_offset));
  put16(&out, 0);
  return out;
}

std::string npy_of(const Tensor& t) {
  auto b = encode_npy(t);
  EXPECT_TRUE(b.is_ok());
  return std::string(b.value().begin(), b.value().end());
}

std::vector<std::pair<std::string, Tensor>> sample_arrays() {
  return {
      {"weights", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
      {"ids", Tensor::from_vector<int64_t>({7, 8, 9}, {3})},
      {"mask", Tensor::from_vector<bool>({true, false}, {2})},
      {"label", Tensor::from_vector<std::string>({"cat", "d\xc3\xb6g"}, {2})},
      {"scalar", Tensor::scalar<double>(0.5)},
      {"empty", Tensor::from_vector<uint8_t>({}, {0, 2})},
      {"a/b:c", Tensor::from_vector<int8_t>({-1}, {1})},
  };
}

void expect_same_arrays(const std::vector<std::pair<std::string, Tensor>>& got,
                        const std::vector<std::pair<std::string, Tensor>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].first);
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.dtype(), want[i].second.dtype());
    EXPECT_EQ(got[i].second.dims(), want[i].second.dims());
    if (want[i].second.dtype() == DType::kString) {
      EXPECT_EQ(got[i].second.strings(), want[i].second.strings());
    } else {
      EXPECT_EQ(raw_bytes(got[i].second), raw_bytes(want[i].second));
    }
  }
}

TEST_F(NpyTest, NpzStoredRoundTrip) {
  auto arrays = sample_arrays();
  std::string p = path("a.npz");
  ASSERT_OK(view(write_npz(p, arrays)));
  EXPECT_EQ(files(), (std::vector<std::string>{"a.npz"}));
  auto r = read_npz(p);
  ASSERT_OK(r);
  expect_same_arrays(r.value(), arrays);

  NpzWriteOptions o;
  o.force_zip64 = true;
  ASSERT_OK(view(write_npz(path("z64.npz"), arrays, o)));
  auto r64 = read_npz(path("z64.npz"));
  ASSERT_OK(r64);
  expect_same_arrays(r64.value(), arrays);

  ASSERT_OK(view(write_npz(path("none.npz"), {})));
  auto none = read_npz(path("none.npz"));
  ASSERT_OK(none);
  EXPECT_TRUE(none.value().empty());
}

TEST_F(NpyTest, NpzWriteRejectsBadNames) {
  Tensor t = Tensor::scalar<float>(1);
  expect_error(view(write_npz(path("a.npz"), {{"x", t}, {"x", t}})), {"a.npz", "two arrays are named 'x'"});
  expect_error(view(write_npz(path("a.npz"), {{"", t}})), {"empty name"});
  EXPECT_TRUE(files().empty());
}

TEST_F(NpyTest, NpzDeflatedAndMixed) {
  std::vector<float> big(20000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 7);
  Tensor tb = Tensor::from_vector<float>(big, {200, 100});
  Tensor ti = Tensor::from_vector<int32_t>({1, 2, 3}, {3});
  Tensor ts = Tensor::from_vector<std::string>({"x", "yz"}, {2});
  std::string zip = build_zip({{"big.npy", npy_of(tb), true},
                               {"small.npy", npy_of(ti), false},
                               {"text.npy", npy_of(ts), true},
                               {"nosuffix", npy_of(ti), true}});
  std::string p = path("c.npz");
  spit(p, zip);
  auto r = read_npz(p);
  ASSERT_OK(r);
  expect_same_arrays(r.value(), {{"big", tb}, {"small", ti}, {"text", ts}, {"nosuffix", ti}});
  // Inflated members are decoded in place: the data is 64-byte aligned.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r.value()[0].second.raw()) % 64, 0u);

  // ZIP64 extra fields in the central directory (what large members use).
  Member m{"big.npy", npy_of(tb), true};
  m.zip64 = true;
  auto r64 = parse_zip(build_zip({m, {"small.npy", npy_of(ti)}}));
  ASSERT_OK(r64);
  expect_same_arrays(r64.value(), {{"big", tb}, {"small", ti}});

  // A folder entry is skipped.
  auto rd = parse_zip(build_zip({{"dir/", ""}, {"dir/x.npy", npy_of(ti)}}));
  ASSERT_OK(rd);
  ASSERT_EQ(rd.value().size(), 1u);
  EXPECT_EQ(rd.value()[0].first, "dir/x");
}

TEST_F(NpyTest, NpzHostileArchives) {
  Tensor t = Tensor::from_vector<int32_t>({1, 2, 3, 4}, {4});
  const std::string content = npy_of(t);
  auto with = [&](auto mutate) {
    Member m{"x.npy", content, true};
    mutate(m);
    return parse_zip(build_zip({m}));
  };

  expect_error(with([](Member& m) { m.offset = 1u << 30; }), {"test.npz", "member 'x.npy'", "local header offset"});
  expect_error(with([](Member& m) { m.offset = 5; }), {"local header offset"});
  expect_error(with([](Member& m) { m.csize = 1u << 30; }), {"member 'x.npy'", "claims 1073741824 bytes"});
  expect_error(with([](Member& m) { m.crc = 0x12345678; }), {"member 'x.npy'", "CRC-32 mismatch"});
  expect_error(with([](Member& m) { m.usize = m.content.size() - 1; }), {"more than the declared", "bomb"});
  expect_error(with([](Member& m) { m.usize = m.content.size() + 1; }), {"inflates to"});
  expect_error(with([](Member& m) { m.usize = uint64_t(1) << 40; m.zip64 = true; }),
               {"more than deflate can produce"});
  expect_error(with([](Member& m) { m.method = 12; }), {"method 12", "bzip2"});
  expect_error(with([](Member& m) { m.method = 99; }), {"method 99"});
  expect_error(with([](Member& m) { m.flags = 1; }), {"encrypted"});
  expect_error(with([](Member& m) { m.zip64 = true; m.short_zip64 = true; }), {"ZIP64 extra field"});
  expect_error(with([](Member& m) { m.csize = 3; }), {"member 'x.npy'"});  // stream cut short
  expect_error(with([](Member& m) { m.content[0] = 'X'; }), {"member 'x.npy'", "not a .npy file"});

  // Stored: sizes must agree, and a flipped data byte fails the CRC.
  Member stored{"x.npy", content};
  stored.usize = content.size() + 8;
  expect_error(parse_zip(build_zip({stored})), {"stored uncompressed but declares"});
  std::string ok = build_zip({{"x.npy", content}});
  std::string flipped = ok;
  flipped[30 + 5 + 130] ^= 1;
  expect_error(parse_zip(flipped), {"CRC-32 mismatch"});

  // Duplicate names, also after stripping ".npy".
  expect_error(parse_zip(build_zip({{"a.npy", content}, {"a.npy", content}})), {"two arrays named 'a'"});
  expect_error(parse_zip(build_zip({{"a", content}, {"a.npy", content}})), {"two arrays named 'a'"});

  // Central directory out of range; overlapping members; truncated and non-zip files.
  expect_error(parse_zip(build_zip({{"x.npy", content}}, 0x7fffffff)), {"central directory", "outside the file"});
  Member second{"y.npy", content};
  second.offset = 0;
  Member first{"x.npy", content};
  std::string overlap = build_zip({first, second});
  expect_error(parse_zip(overlap), {"member 'y.npy'", "local header names a different member"});
  Member again{"x.npy", content};
  again.offset = 0;
  expect_error(parse_zip(build_zip({first, again})), {"members 'x.npy' and 'x.npy' overlap"});
  expect_error(parse_zip(ok.substr(0, ok.size() / 2)), {"not a ZIP/.npz archive"});
  expect_error(parse_zip(ok.substr(0, ok.size() - 1)), {"not a ZIP/.npz archive"});
  expect_error(parse_zip(""), {"not a ZIP/.npz archive"});
  expect_error(parse_zip(content), {"not a ZIP/.npz archive", "read_npy"});

  auto missing = read_npz(path("missing.npz"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST_F(NpyTest, NpzEntryCountLies) {
  std::string ok = build_zip({{"x.npy", npy_of(Tensor::scalar<float>(1))}});
  std::string lie = ok;
  // Total entries field of the end record (offset 10 from its start).
  size_t end = ok.size() - 22;
  lie[end + 8] = lie[end + 10] = 100;
  expect_error(parse_zip(lie), {"announces 100 members"});
}

// Random corruption of valid files must produce errors or values, never crashes or
// out-of-bounds reads (run under ASan/UBSan).
TEST_F(NpyTest, FuzzedInputsDoNotCrash) {
  std::mt19937 rng(12345);
  std::vector<std::string> seeds = {
      npy_of(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})),
      npy(header(">U3", "(2, 2)", true), std::string(48, 'a')),
      npy(header("|b1", "(3,)"), "\x01\x00\x01"),
      build_zip({{"a.npy", npy_of(Tensor::from_vector<int64_t>({1, 2, 3}, {3})), true},
                 {"b.npy", npy_of(Tensor::scalar<double>(1.0))}}),
  };
  Member z64{"c.npy", npy_of(Tensor::scalar<int16_t>(3)), true};
  z64.zip64 = true;
  seeds.push_back(build_zip({z64}));
  int parsed = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string s = seeds[static_cast<size_t>(iter) % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % s.size();
      switch (rng() % 4) {
        case 0: s[pos] = static_cast<char>(rng()); break;
        case 1: s[pos] = static_cast<char>(s[pos] ^ (1 << (rng() % 8))); break;
        case 2: s.resize(pos + 1); break;
        case 3: s[pos] = "0123456789(),:'L-"[rng() % 17]; break;
      }
    }
    std::vector<uint8_t> exact(s.begin(), s.end());
    bool ok1 = parse_npy(exact.data(), exact.size(), "fuzz").is_ok();
    bool ok2 = parse_npz(exact.data(), exact.size(), "fuzz").is_ok();
    parsed += ok1 + ok2;
  }
  SUCCEED() << parsed << " mutated inputs still parsed";
}

// ---------------------------------------------------------------------------------------------
// safe_file_name

TEST(SafeFileName, Replaces) {
  EXPECT_EQ(safe_file_name("input_ids"), "input_ids");
  EXPECT_EQ(safe_file_name("Conv-1.weight"), "Conv-1.weight");
  EXPECT_EQ(safe_file_name("a/b\\c:d e"), "a_b_c_d_e");
  EXPECT_EQ(safe_file_name("/abs/../x"), "_abs_.._x");
  EXPECT_EQ(safe_file_name("caf\xc3\xa9"), "caf__");
  EXPECT_EQ(safe_file_name(std::string("a\0b", 3)), "a_b");
  EXPECT_EQ(safe_file_name(""), "_");
  EXPECT_EQ(safe_file_name("."), "_");
  EXPECT_EQ(safe_file_name(".."), "__");
  EXPECT_EQ(safe_file_name("..."), "...");
  EXPECT_EQ(safe_file_name(std::string(500, 'x')), std::string(200, 'x'));
  EXPECT_EQ(safe_file_name(std::string(300, '/')).size(), 200u);
}

}  // namespace
}  // namespace ferry
