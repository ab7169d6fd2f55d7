#include "io/npy.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <set>
#include <string_view>

#include "io/file.h"
#include "io/npy_header.h"
#include "io/utf8.h"
#include "io/zip.h"

namespace ferry {

namespace {

// ---------------------------------------------------------------------------------------------
// Encoding

struct NpyPlan {
  std::string prefix;  // magic, version, header length and header: everything before the data
  uint64_t data_bytes = 0;
  size_t itemsize = 0;   // bytes per element in the file
  size_t max_chars = 0;  // string tensors: characters per element
};

using Sink = std::function<Status(const void*, size_t)>;

StatusOr<NpyPlan> plan_npy(const Tensor& t, const std::string& what) {
  NpyPlan plan;
  std::string descr;
  switch (t.dtype()) {
    case DType::kF32: descr = "<f4"; break;
    case DType::kF64: descr = "<f8"; break;
    case DType::kF16: descr = "<f2"; break;
    case DType::kBF16: descr = "<f4"; break;  // numpy has no bfloat16: widened to float32
    case DType::kI8: descr = "|i1"; break;
    case DType::kU8: descr = "|u1"; break;
    case DType::kI16: descr = "<i2"; break;
    case DType::kU16: descr = "<u2"; break;
    case DType::kI32: descr = "<i4"; break;
    case DType::kU32: descr = "<u4"; break;
    case DType::kI64: descr = "<i8"; break;
    case DType::kU64: descr = "<u8"; break;
    case DType::kBool: descr = "|b1"; break;
    case DType::kString: {
      size_t max_chars = 0;
      const std::vector<std::string>& strs = t.strings();
      for (size_t i = 0; i < strs.size(); ++i) {
        size_t chars = 0;
        int64_t bad = for_each_code_point(strs[i], [&](uint32_t) { ++chars; });
        if (bad >= 0) {
          return invalid_argument(what + ": string element " + std::to_string(i) + " is not valid UTF-8 (byte " +
                                  std::to_string(bad) + "); .npy stores text as Unicode");
        }
        max_chars = std::max(max_chars, chars);
      }
      plan.max_chars = std::max<size_t>(max_chars, 1);  // numpy uses '<U1' for empty strings too
      descr = "<U" + std::to_string(plan.max_chars);
      break;
    }
    case DType::kUndefined:
      return invalid_argument(what + ": cannot save an undefined tensor");
  }
  if (t.dtype() == DType::kString) {
    plan.itemsize = plan.max_chars * 4;
    if (static_cast<int64_t>(t.strings().size()) != t.numel())
      return internal_error(what + ": string tensor holds " + std::to_string(t.strings().size()) + " strings for " +
                            std::to_string(t.numel()) + " elements");
  } else {
    plan.itemsize = t.dtype() == DType::kBF16 ? 4 : static_cast<size_t>(dtype_size(t.dtype()));
    if (t.numel() > 0 && t.raw() == nullptr) return internal_error(what + ": tensor has no data");
  }
  if (__builtin_mul_overflow(static_cast<uint64_t>(t.numel()), static_cast<uint64_t>(plan.itemsize), &plan.data_bytes))
    return resource_exhausted(what + ": too large to save");

  // Byte-identical to numpy.save: the same dict text, the same spare room for growing the first
  // axis (21 digits), then spaces and '\n' so the data starts at a multiple of 64 bytes.
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape_string(t.dims()) + ", }";
  if (t.rank() > 0) dict.append(21 - std::min<size_t>(21, std::to_string(t.dim(0)).size()), ' ');
  for (int major : {1, 2}) {
    size_t prefix_len = kNpyMagicLen + 2 + (major == 1 ? 2 : 4);
    size_t unpadded = prefix_len + dict.size() + 1;  // + '\n'
    size_t pad = kNpyAlign - unpadded % kNpyAlign;  // 1..64, as numpy does
    size_t header_len = dict.size() + pad + 1;
    if (major == 1 && header_len > 0xffff) continue;
    plan.prefix.assign(kNpyMagic, kNpyMagicLen);
    plan.prefix.push_back(static_cast<char>(major));
    plan.prefix.push_back(0);
    for (size_t b = 0; b < (major == 1 ? 2u : 4u); ++b) plan.prefix.push_back(static_cast<char>((header_len >> (8 * b)) & 0xff));
    plan.prefix += dict;
    plan.prefix.append(pad, ' ');
    plan.prefix.push_back('\n');
    break;
  }
  return plan;
}

// Streams the data part of the .npy image through `sink` (little-endian, C order).
Status emit_npy_data(const Tensor& t, const NpyPlan& plan, const Sink& sink) {
  if (t.numel() == 0) return Status::ok();
  constexpr size_t kChunk = size_t(1) << 20;
  if (t.dtype() == DType::kString) {
    std::string buf;
    buf.reserve(kChunk + plan.itemsize);
    for (const std::string& s : t.strings()) {
      size_t chars = 0;
      (void)for_each_code_point(s, [&](uint32_t cp) {
        for (int b = 0; b < 4; ++b) buf.push_back(static_cast<char>((cp >> (8 * b)) & 0xff));
        ++chars;
      });
      buf.append((plan.max_chars - chars) * 4, '\0');
      if (buf.size() >= kChunk) {
        RETURN_IF_ERROR(sink(buf.data(), buf.size()));
        buf.clear();
      }
    }
    return buf.empty() ? Status::ok() : sink(buf.data(), buf.size());
  }
  const size_t elem = static_cast<size_t>(dtype_size(t.dtype()));
  const auto* src = static_cast<const uint8_t*>(t.raw());
  if (t.dtype() != DType::kBF16 && (kHostLittle || elem == 1)) return sink(src, static_cast<size_t>(plan.data_bytes));
  // Conversion needed (bf16 -> f32, or a big-endian host): go chunk by chunk.
  std::vector<uint8_t> buf;
  const size_t per_chunk = kChunk / plan.itemsize;
  const size_t n = static_cast<size_t>(t.numel());
  for (size_t start = 0; start < n; start += per_chunk) {
    size_t count = std::min(per_chunk, n - start);
    buf.resize(count * plan.itemsize);
    for (size_t i = 0; i < count; ++i) {
      const uint8_t* in = src + (start + i) * elem;
      uint8_t* out = buf.data() + i * plan.itemsize;
      if (t.dtype() == DType::kBF16) {
        uint16_t b;
        std::memcpy(&b, in, 2);
        float f = bf16_to_f32(b);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        for (int k = 0; k < 4; ++k) out[k] = static_cast<uint8_t>((u >> (8 * k)) & 0xff);
      } else {
        for (size_t k = 0; k < elem; ++k) out[k] = in[elem - 1 - k];  // big-endian host
      }
    }
    RETURN_IF_ERROR(sink(buf.data(), buf.size()));
  }
  return Status::ok();
}

std::string quoted(const std::string& path) { return "'" + path + "'"; }

StatusOr<std::vector<std::pair<std::string, Tensor>>> decode_npz(const FileBytes& archive, const std::string& what) {
  ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, list_zip_entries(archive.data, archive.size, what));
  // Names first, so duplicates are reported before any decompression.
  std::vector<std::string> names;
  std::vector<const ZipEntry*> members;
  std::set<std::string> seen;
  for (const ZipEntry& e : entries) {
    if (!e.name.empty() && e.name.back() == '/' && e.uncompressed_size == 0) continue;  // a folder entry
    std::string name = e.name;
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    if (!seen.insert(name).second) {
      return invalid_argument(what + ": the archive holds two arrays named '" + excerpt(name, 200) +
                              "' (member '" + excerpt(e.name, 200) + "' repeats it); re-create it with numpy.savez");
    }
    names.push_back(std::move(name));
    members.push_back(&e);
  }
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const ZipEntry& e = *members[i];
    ASSIGN_OR_RETURN(ZipMemberBytes bytes, read_zip_entry(archive, e, what));
    ASSIGN_OR_RETURN(Tensor t, decode_npy(bytes.data, bytes.size, what + " member '" + excerpt(e.name, 200) + "'",
                                          bytes.owner, bytes.writable));
    out.emplace_back(std::move(names[i]), std::move(t));
  }
  return out;
}

}  // namespace

StatusOr<Tensor> read_npy(const std::string& path) {
  ASSIGN_OR_RETURN(FileBytes file, map_file(path));
  return decode_npy(file.data, file.size, quoted(path), file.owner, file.writable);
}

StatusOr<Tensor> parse_npy(const uint8_t* data, size_t size, const std::string& what) {
  static const uint8_t kEmpty[1] = {0};
  if (data == nullptr) {
    if (size != 0) return invalid_argument(what + ": null data pointer");
    data = kEmpty;
  }
  return decode_npy(data, size, what, nullptr, false);
}

StatusOr<std::vector<uint8_t>> encode_npy(const Tensor& t, const std::string& what) {
  ASSIGN_OR_RETURN(NpyPlan plan, plan_npy(t, what));
  std::vector<uint8_t> out;
  out.reserve(plan.prefix.size() + static_cast<size_t>(plan.data_bytes));
  out.insert(out.end(), plan.prefix.begin(), plan.prefix.end());
  RETURN_IF_ERROR(emit_npy_data(t, plan, [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
    return Status::ok();
  }));
  return out;
}

Status write_npy(const std::string& path, const Tensor& t) {
  ASSIGN_OR_RETURN(NpyPlan plan, plan_npy(t, "cannot save " + quoted(path)));
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> file, AtomicFileWriter::create(path));
  RETURN_IF_ERROR(file->write(plan.prefix.data(), plan.prefix.size()));
  RETURN_IF_ERROR(emit_npy_data(t, plan, [&](const void* p, size_t n) { return file->write(p, n); }));
  return file->commit();
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> read_npz(const std::string& path) {
  ASSIGN_OR_RETURN(FileBytes file, map_file(path));
  return decode_npz(file, quoted(path));
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> parse_npz(const uint8_t* data, size_t size,
                                                                const std::string& what) {
  static const uint8_t kEmpty[1] = {0};
  if (data == nullptr) {
    if (size != 0) return invalid_argument(what + ": null data pointer");
    data = kEmpty;
  }
  FileBytes bytes;
  bytes.data = data;
  bytes.size = size;
  return decode_npz(bytes, what);
}

Status write_npz(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& arrays,
                 const NpzWriteOptions& options) {
  const std::string what = "cannot save " + quoted(path);
  std::set<std::string> seen;
  std::vector<NpyPlan> plans;
  plans.reserve(arrays.size());
  for (const auto& [name, tensor] : arrays) {
    if (name.empty()) return invalid_argument(what + ": an array has an empty name");
    if (name.size() > 0xffff - 4) return invalid_argument(what + ": array name '" + excerpt(name) + "' is too long");
    if (name.find('\0') != std::string::npos)
      return invalid_argument(what + ": array name '" + excerpt(name) + "' contains a NUL byte");
    if (!seen.insert(name).second) return invalid_argument(what + ": two arrays are named '" + excerpt(name) + "'");
    ASSIGN_OR_RETURN(NpyPlan plan, plan_npy(tensor, what + ": array '" + excerpt(name) + "'"));
    plans.push_back(std::move(plan));
  }
  ZipWriteOptions zip_options;
  zip_options.force_zip64 = options.force_zip64;
  ASSIGN_OR_RETURN(std::unique_ptr<ZipWriter> zip, ZipWriter::create(path, zip_options));
  for (size_t i = 0; i < arrays.size(); ++i) {
    const NpyPlan& plan = plans[i];
    RETURN_IF_ERROR(zip->begin_entry(arrays[i].first + ".npy", plan.prefix.size() + plan.data_bytes));
    RETURN_IF_ERROR(zip->write(plan.prefix.data(), plan.prefix.size()));
    RETURN_IF_ERROR(emit_npy_data(arrays[i].second, plan, [&](const void* p, size_t n) { return zip->write(p, n); }));
    RETURN_IF_ERROR(zip->end_entry());
  }
  return zip->finish();
}

std::string safe_file_name(const std::string& tensor_name) {
  constexpr size_t kMaxLen = 200;
  std::string out;
  out.reserve(std::min(tensor_name.size(), kMaxLen));
  for (char c : tensor_name) {
    if (out.size() == kMaxLen) break;
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out == ".") return "_";
  if (out == "..") return "__";
  return out;
}

}  // namespace ferry
