#include "io/zip.h"

#include <zlib.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ferry {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kEnd64Size = 56;
constexpr size_t kEnd64LocatorSize = 20;
constexpr uint32_t kMax32 = 0xffffffffu;
constexpr uint16_t kMax16 = 0xffffu;
// Deflate cannot expand data more than ~1032:1; a member declaring more is corrupt or a bomb.
constexpr uint64_t kMaxDeflateRatio = 1032;

uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t rd32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t rd64(const uint8_t* p) { return rd32(p) | (static_cast<uint64_t>(rd32(p + 4)) << 32); }

void put16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xff));
  s->push_back(static_cast<char>(v >> 8));
}
void put32(std::string* s, uint32_t v) {
  put16(s, static_cast<uint16_t>(v & 0xffff));
  put16(s, static_cast<uint16_t>(v >> 16));
}
void put64(std::string* s, uint64_t v) {
  put32(s, static_cast<uint32_t>(v & kMax32));
  put32(s, static_cast<uint32_t>(v >> 32));
}

std::string printable(const std::string& name) {
  std::string out;
  for (unsigned char c : name.substr(0, 200)) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (name.size() > 200) out += "...";
  return out;
}

const char* method_name(uint16_t m) {
  switch (m) {
    case 1: return "Shrink";
    case 6: return "Implode";
    case 9: return "Deflate64";
    case 12: return "bzip2";
    case 14: return "LZMA";
    case 93: return "Zstandard";
    case 95: return "xz";
    case 98: return "PPMd";
    case 99: return "AES encryption";
    default: return "unknown";
  }
}

Status corrupt(const std::string& what, const std::string& problem) {
  return invalid_argument(what + ": " + problem +
                          "; the archive is corrupt or truncated (re-create it with numpy.savez)");
}

struct EndRecord {
  uint64_t entries = 0;
  uint64_t cd_size = 0;
  uint64_t cd_offset = 0;
  uint64_t cd_limit = 0;  // the central directory must end at or before this offset
};

StatusOr<EndRecord> find_end_record(const uint8_t* data, size_t size, const std::string& what) {
  if (size < kEndSize) {
    return invalid_argument(what + ": not a ZIP/.npz archive (only " + std::to_string(size) +
                            " bytes; an empty archive has 22)");
  }
  // The end record is the last thing in the file, followed only by a comment of up to 64 KiB.
  size_t lowest = size - kEndSize > 0xffff ? size - kEndSize - 0xffff : 0;
  size_t pos = size - kEndSize;
  bool found = false;
  for (;; --pos) {
    if (rd32(data + pos) == kEndSig && pos + kEndSize + rd16(data + pos + 20) <= size) {
      found = true;
      break;
    }
    if (pos == lowest) break;
  }
  if (!found) {
    std::string hint = size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0
                           ? " (it looks like a .npy file: load it with read_npy)"
                           : " (.npz files are ZIP archives written by numpy.savez)";
    return invalid_argument(what + ": not a ZIP/.npz archive: no end-of-central-directory record found" + hint);
  }
  const uint8_t* e = data + pos;
  uint16_t disk = rd16(e + 4), cd_disk = rd16(e + 6);
  EndRecord r;
  r.entries = rd16(e + 10);
  r.cd_size = rd32(e + 12);
  r.cd_offset = rd32(e + 16);
  r.cd_limit = pos;
  bool multi_disk = (disk != 0 && disk != kMax16) || (cd_disk != 0 && cd_disk != kMax16) ||
                    rd16(e + 8) != rd16(e + 10);

  // ZIP64: a locator right before the end record points at the ZIP64 end record.
  if (pos >= kEnd64LocatorSize && rd32(e - kEnd64LocatorSize) == kEnd64LocatorSig) {
    const uint8_t* loc = e - kEnd64LocatorSize;
    uint64_t off64 = rd64(loc + 8);
    if (rd32(loc + 16) > 1 || rd32(loc + 4) != 0) multi_disk = true;
    if (off64 > pos - kEnd64LocatorSize || pos - kEnd64LocatorSize - off64 < kEnd64Size)
      return corrupt(what, "the ZIP64 end record offset " + std::to_string(off64) + " is out of range");
    const uint8_t* z = data + off64;
    if (rd32(z) != kEnd64Sig) return corrupt(what, "no ZIP64 end record at offset " + std::to_string(off64));
    if (rd32(z + 16) != 0 || rd32(z + 20) != 0 || rd64(z + 24) != rd64(z + 32)) multi_disk = true;
    r.entries = rd64(z + 32);
    r.cd_size = rd64(z + 40);
    r.cd_offset = rd64(z + 48);
    r.cd_limit = off64;
  }
  if (multi_disk) return unsupported(what + ": multi-disk (split) ZIP archives are not supported");
  if (r.cd_offset > r.cd_limit || r.cd_size > r.cd_limit - r.cd_offset) {
    return corrupt(what, "the central directory (offset " + std::to_string(r.cd_offset) + ", " +
                             std::to_string(r.cd_size) + " bytes) lies outside the file (" +
                             std::to_string(size) + " bytes)");
  }
  if (r.entries > r.cd_size / kCentralHeaderSize) {
    return corrupt(what, "the end record announces " + std::to_string(r.entries) +
                             " members but the central directory only has room for " +
                             std::to_string(r.cd_size / kCentralHeaderSize));
  }
  return r;
}

// Applies the ZIP64 extended-information extra field (id 1) of a central-directory entry.
Status apply_zip64_extra(const uint8_t* extra, size_t len, ZipEntry* e, const std::string& what) {
  size_t p = 0;
  while (p + 4 <= len) {
    uint16_t id = rd16(extra + p), n = rd16(extra + p + 2);
    if (n > len - p - 4) return corrupt(what, "member '" + printable(e->name) + "' has a malformed extra field");
    if (id == 0x0001) {
      const uint8_t* f = extra + p + 4;
      size_t q = 0;
      auto take = [&](uint64_t* v) -> bool {
        if (q + 8 > n) return false;
        *v = rd64(f + q);
        q += 8;
        return true;
      };
      bool ok = true;
      if (e->uncompressed_size == kMax32) ok = ok && take(&e->uncompressed_size);
      if (e->compressed_size == kMax32) ok = ok && take(&e->compressed_size);
      if (e->local_header_offset == kMax32) ok = ok && take(&e->local_header_offset);
      if (!ok) return corrupt(what, "member '" + printable(e->name) + "' has a ZIP64 extra field that is too short");
      return Status::ok();
    }
    p += 4 + n;
  }
  return Status::ok();
}

}  // namespace

uint32_t zip_crc32(uint32_t crc, const void* data, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

StatusOr<std::vector<ZipEntry>> list_zip_entries(const uint8_t* data, size_t size, const std::string& what) {
  ASSIGN_OR_RETURN(EndRecord end, find_end_record(data, size, what));
  std::vector<ZipEntry> entries;
  entries.reserve(static_cast<size_t>(end.entries));
  const uint64_t cd_end = end.cd_offset + end.cd_size;
  uint64_t p = end.cd_offset;
  for (uint64_t i = 0; i < end.entries; ++i) {
    if (cd_end - p < kCentralHeaderSize || rd32(data + p) != kCentralSig)
      return corrupt(what, "central directory entry " + std::to_string(i) + " is missing or damaged");
    const uint8_t* c = data + p;
    ZipEntry e;
    e.flags = rd16(c + 8);
    e.method = rd16(c + 10);
    e.crc32 = rd32(c + 16);
    e.compressed_size = rd32(c + 20);
    e.uncompressed_size = rd32(c + 24);
    uint16_t name_len = rd16(c + 28), extra_len = rd16(c + 30), comment_len = rd16(c + 32);
    uint16_t disk = rd16(c + 34);
    e.local_header_offset = rd32(c + 42);
    uint64_t entry_size = kCentralHeaderSize + uint64_t(name_len) + extra_len + comment_len;
    if (cd_end - p < entry_size)
      return corrupt(what, "central directory entry " + std::to_string(i) + " runs past the directory's end");
    e.name.assign(reinterpret_cast<const char*>(c + kCentralHeaderSize), name_len);
    RETURN_IF_ERROR(apply_zip64_extra(c + kCentralHeaderSize + name_len, extra_len, &e, what));
    p += entry_size;

    const std::string member = "member '" + printable(e.name) + "'";
    if (disk != 0 && disk != kMax16) return unsupported(what + ": " + member + " lives on another disk of a split archive");
    if (e.flags & 0x0041) {
      return unsupported(what + ": " + member +
                         " is encrypted; ferry cannot read password-protected archives (save it again with numpy.savez)");
    }
    if (e.method != 0 && e.method != 8) {
      return unsupported(what + ": " + member + " uses compression method " + std::to_string(e.method) + " (" +
                         method_name(e.method) +
                         "); ferry reads STORED and DEFLATE members, as written by numpy.savez and "
                         "numpy.savez_compressed");
    }
    // The local header repeats the name and has its own extra field; the data follows it.
    uint64_t lho = e.local_header_offset;
    if (lho > end.cd_offset || end.cd_offset - lho < kLocalHeaderSize || rd32(data + lho) != kLocalSig) {
      return corrupt(what, member + " has an invalid local header offset " + std::to_string(lho) +
                               " (the file has " + std::to_string(size) + " bytes)");
    }
    const uint8_t* l = data + lho;
    uint64_t local_name_len = rd16(l + 26), local_extra_len = rd16(l + 28);
    e.data_offset = lho + kLocalHeaderSize + local_name_len + local_extra_len;
    if (e.data_offset > end.cd_offset || e.compressed_size > end.cd_offset - e.data_offset) {
      return corrupt(what, member + " claims " + std::to_string(e.compressed_size) + " bytes at offset " +
                               std::to_string(e.data_offset) + ", past the end of the member data (" +
                               std::to_string(end.cd_offset) + " bytes)");
    }
    if (local_name_len != name_len || std::memcmp(l + kLocalHeaderSize, e.name.data(), name_len) != 0)
      return corrupt(what, member + ": the local header names a different member");
    if (rd16(l + 8) != e.method) return corrupt(what, member + ": local and central headers disagree on compression");
    entries.push_back(std::move(e));
  }

  // Members must not overlap (overlapping members are a known zip-bomb construction).
  std::vector<const ZipEntry*> order;
  order.reserve(entries.size());
  for (const ZipEntry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const ZipEntry* a, const ZipEntry* b) { return a->local_header_offset < b->local_header_offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (order[i - 1]->data_offset + order[i - 1]->compressed_size > order[i]->local_header_offset) {
      return corrupt(what, "members '" + printable(order[i - 1]->name) + "' and '" + printable(order[i]->name) +
                               "' overlap");
    }
  }
  return entries;
}

StatusOr<ZipMemberBytes> read_zip_entry(const FileBytes& archive, const ZipEntry& e, const std::string& what) {
  const std::string member = "member '" + printable(e.name) + "'";
  if (e.data_offset > archive.size || e.compressed_size > archive.size - e.data_offset)
    return corrupt(what, member + " lies outside the archive");
  const uint8_t* src = archive.data + e.data_offset;
  ZipMemberBytes out;
  if (e.method == 0) {
    if (e.uncompressed_size != e.compressed_size) {
      return corrupt(what, member + " is stored uncompressed but declares " + std::to_string(e.uncompressed_size) +
                               " bytes uncompressed and " + std::to_string(e.compressed_size) + " stored");
    }
    out.owner = archive.owner;
    out.data = src;
    out.size = static_cast<size_t>(e.compressed_size);
    out.writable = archive.writable;
  } else if (e.method == 8) {
    uint64_t declared = e.uncompressed_size;
    if (declared > e.compressed_size * kMaxDeflateRatio + 1024) {
      return invalid_argument(what + ": " + member + " declares " + std::to_string(declared) +
                              " bytes uncompressed from " + std::to_string(e.compressed_size) +
                              " compressed, more than deflate can produce; the archive is corrupt or a "
                              "compression bomb");
    }
    size_t alloc = static_cast<size_t>(std::max<uint64_t>((declared + 63) / 64 * 64, 64));
    void* buf = std::aligned_alloc(64, alloc);
    if (!buf) {
      return resource_exhausted(what + ": cannot allocate " + std::to_string(declared) + " bytes to decompress " +
                                member);
    }
    std::shared_ptr<void> owner(buf, [](void* q) { std::free(q); });
    uint8_t* dst = static_cast<uint8_t*>(buf);

    z_stream zs;
    std::memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return internal_error("zlib inflateInit2 failed");
    struct Ender {
      z_stream* z;
      ~Ender() { inflateEnd(z); }
    } ender{&zs};
    uint64_t in_left = e.compressed_size, out_done = 0;
    const uint8_t* in_ptr = src;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (zs.avail_in == 0 && in_left > 0) {
        uInt chunk = static_cast<uInt>(std::min<uint64_t>(in_left, UINT_MAX));
        zs.next_in = const_cast<Bytef*>(in_ptr);
        zs.avail_in = chunk;
        in_ptr += chunk;
        in_left -= chunk;
      }
      uint8_t overflow_probe[1];
      bool probing = out_done == declared;
      if (probing) {
        // All declared bytes are out; any further output means the member is larger than declared.
        zs.next_out = overflow_probe;
        zs.avail_out = 1;
      } else {
        zs.next_out = dst + out_done;
        zs.avail_out = static_cast<uInt>(std::min<uint64_t>(declared - out_done, UINT_MAX));
      }
      uInt out_before = zs.avail_out;
      uInt in_before = zs.avail_in;
      rc = inflate(&zs, Z_NO_FLUSH);
      uInt produced = out_before - zs.avail_out;
      if (probing && produced > 0) {
        return invalid_argument(what + ": " + member + " inflates to more than the declared " +
                                std::to_string(declared) + " bytes; the archive is corrupt or a compression bomb");
      }
      out_done += produced;
      if (rc == Z_STREAM_END) break;
      if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return corrupt(what, member + ": invalid deflate data (" +
                                 (zs.msg ? std::string(zs.msg) : "zlib error " + std::to_string(rc)) + ")");
      }
      if (produced == 0 && in_before == zs.avail_in) {
        if (zs.avail_in == 0 && in_left == 0)
          return corrupt(what, member + ": the compressed data ends before the deflate stream does");
        return corrupt(what, member + ": inflate made no progress");
      }
    }
    if (out_done != declared) {
      return corrupt(what, member + " inflates to " + std::to_string(out_done) + " bytes but declares " +
                               std::to_string(declared));
    }
    out.owner = std::move(owner);
    out.data = dst;
    out.size = static_cast<size_t>(declared);
    out.writable = true;
  } else {
    return unsupported(what + ": " + member + " uses compression method " + std::to_string(e.method));
  }
  uint32_t crc = zip_crc32(0, out.data, out.size);
  if (crc != e.crc32) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "CRC-32 mismatch (computed %08x, archive says %08x)", crc, e.crc32);
    return corrupt(what, member + ": " + buf);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// ZipWriter

StatusOr<std::unique_ptr<ZipWriter>> ZipWriter::create(const std::string& path, ZipWriteOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> file, AtomicFileWriter::create(path));
  return std::unique_ptr<ZipWriter>(new ZipWriter(std::move(file), options));
}

namespace {
constexpr uint16_t kDosDate1980 = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, like numpy.savez
bool needs_utf8_flag(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return true;
  return false;
}
}  // namespace

Status ZipWriter::begin_entry(const std::string& name, uint64_t size) {
  if (in_entry_) return internal_error("ZipWriter::begin_entry while '" + entries_.back().name + "' is open");
  if (name.empty() || name.size() > 0xffff)
    return invalid_argument("cannot write '" + file_->path() + "': member name is empty or longer than 65535 bytes");
  for (const ZipEntry& e : entries_)
    if (e.name == name)
      return invalid_argument("cannot write '" + file_->path() + "': duplicate member '" + printable(name) + "'");
  ZipEntry e;
  e.name = name;
  e.method = 0;
  e.flags = needs_utf8_flag(name) ? 0x0800 : 0;
  e.compressed_size = e.uncompressed_size = size;
  e.local_header_offset = file_->size();
  bool zip64 = options_.force_zip64 || size >= kMax32;
  std::string h;
  put32(&h, kLocalSig);
  put16(&h, zip64 ? 45 : 20);
  put16(&h, e.flags);
  put16(&h, 0);  // STORED
  put16(&h, 0);  // time 00:00
  put16(&h, kDosDate1980);
  put32(&h, 0);  // CRC, patched by end_entry()
  put32(&h, zip64 ? kMax32 : static_cast<uint32_t>(size));
  put32(&h, zip64 ? kMax32 : static_cast<uint32_t>(size));
  put16(&h, static_cast<uint16_t>(name.size()));
  put16(&h, zip64 ? 20 : 0);
  h += name;
  if (zip64) {
    put16(&h, 0x0001);
    put16(&h, 16);
    put64(&h, size);
    put64(&h, size);
  }
  RETURN_IF_ERROR(file_->write(h.data(), h.size()));
  e.data_offset = file_->size();
  entries_.push_back(std::move(e));
  in_entry_ = true;
  written_ = 0;
  crc_ = 0;
  return Status::ok();
}

Status ZipWriter::write(const void* data, size_t n) {
  if (!in_entry_) return internal_error("ZipWriter::write outside an entry");
  if (n > entries_.back().uncompressed_size - written_)
    return internal_error("ZipWriter: member '" + entries_.back().name + "' got more bytes than announced");
  crc_ = zip_crc32(crc_, data, n);
  written_ += n;
  return file_->write(data, n);
}

Status ZipWriter::end_entry() {
  if (!in_entry_) return internal_error("ZipWriter::end_entry outside an entry");
  ZipEntry& e = entries_.back();
  if (written_ != e.uncompressed_size)
    return internal_error("ZipWriter: member '" + e.name + "' got " + std::to_string(written_) + " of " +
                          std::to_string(e.uncompressed_size) + " bytes");
  e.crc32 = crc_;
  std::string c;
  put32(&c, crc_);
  RETURN_IF_ERROR(file_->write_at(e.local_header_offset + 14, c.data(), c.size()));
  in_entry_ = false;
  return Status::ok();
}

Status ZipWriter::finish() {
  if (in_entry_) return internal_error("ZipWriter::finish while member '" + entries_.back().name + "' is open");
  const uint64_t cd_offset = file_->size();
  bool any_zip64 = options_.force_zip64;
  std::string cd;
  for (const ZipEntry& e : entries_) {
    bool big_size = options_.force_zip64 || e.uncompressed_size >= kMax32;
    bool big_offset = options_.force_zip64 || e.local_header_offset >= kMax32;
    std::string extra;
    if (big_size) {
      put64(&extra, e.uncompressed_size);
      put64(&extra, e.compressed_size);
    }
    if (big_offset) put64(&extra, e.local_header_offset);
    bool zip64 = big_size || big_offset;
    any_zip64 = any_zip64 || zip64;
    put32(&cd, kCentralSig);
    put16(&cd, (3 << 8) | (zip64 ? 45 : 20));  // made by Unix
    put16(&cd, zip64 ? 45 : 20);
    put16(&cd, e.flags);
    put16(&cd, 0);
    put16(&cd, 0);
    put16(&cd, kDosDate1980);
    put32(&cd, e.crc32);
    put32(&cd, big_size ? kMax32 : static_cast<uint32_t>(e.compressed_size));
    put32(&cd, big_size ? kMax32 : static_cast<uint32_t>(e.uncompressed_size));
    put16(&cd, static_cast<uint16_t>(e.name.size()));
    put16(&cd, static_cast<uint16_t>(extra.empty() ? 0 : extra.size() + 4));
    put16(&cd, 0);  // comment
    put16(&cd, 0);  // disk
    put16(&cd, 0);  // internal attributes
    put32(&cd, 0644u << 16);  // rw-r--r--
    put32(&cd, big_offset ? kMax32 : static_cast<uint32_t>(e.local_header_offset));
    cd += e.name;
    if (!extra.empty()) {
      put16(&cd, 0x0001);
      put16(&cd, static_cast<uint16_t>(extra.size()));
      cd += extra;
    }
  }
  const uint64_t cd_size = cd.size();
  const uint64_t count = entries_.size();
  any_zip64 = any_zip64 || count >= kMax16 || cd_offset >= kMax32 || cd_size >= kMax32;
  std::string tail;
  if (any_zip64) {
    uint64_t end64_offset = cd_offset + cd_size;
    put32(&tail, kEnd64Sig);
    put64(&tail, kEnd64Size - 12);
    put16(&tail, (3 << 8) | 45);
    put16(&tail, 45);
    put32(&tail, 0);
    put32(&tail, 0);
    put64(&tail, count);
    put64(&tail, count);
    put64(&tail, cd_size);
    put64(&tail, cd_offset);
    put32(&tail, kEnd64LocatorSig);
    put32(&tail, 0);
    put64(&tail, end64_offset);
    put32(&tail, 1);
  }
  put32(&tail, kEndSig);
  put16(&tail, 0);
  put16(&tail, 0);
  put16(&tail, count >= kMax16 ? kMax16 : static_cast<uint16_t>(count));
  put16(&tail, count >= kMax16 ? kMax16 : static_cast<uint16_t>(count));
  put32(&tail, cd_size >= kMax32 ? kMax32 : static_cast<uint32_t>(cd_size));
  put32(&tail, cd_offset >= kMax32 ? kMax32 : static_cast<uint32_t>(cd_offset));
  put16(&tail, 0);
  RETURN_IF_ERROR(file_->write(cd.data(), cd.size()));
  RETURN_IF_ERROR(file_->write(tail.data(), tail.size()));
  return file_->commit();
}

}  // namespace ferry
