// Writing and loading .ferry files; see compiled_model.h and docs/format.md.
#include "format/compiled_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/env_switch.h"
#include "format/file_header.h"
#include "format/graph_codec.h"
#include "io/file.h"
#include "ir/file_pages.h"

#ifndef FERRY_VERSION
#define FERRY_VERSION "dev"
#endif

namespace ferry {

using format::FileHeader;
using format::kHeaderSize;
using format::kWeightAlignment;

std::string host_isa() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

std::string ferry_version() { return FERRY_VERSION; }

const CompiledGear* CompiledModel::gear_for_batch(int64_t batch) const {
  if (gears.empty()) return nullptr;
  if (gears.size() == 1 && gears[0].batch == 0) return &gears[0];
  if (batch <= 0) return &gears[0];
  for (const CompiledGear& g : gears)
    if (g.batch >= batch) return &g;
  return nullptr;
}

bool has_compiled_magic(const void* data, size_t size) {
  return size >= sizeof format::kMagic && std::memcmp(data, format::kMagic, sizeof format::kMagic) == 0;
}

bool is_compiled_model_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[sizeof format::kMagic];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n == static_cast<ssize_t>(sizeof buf) && has_compiled_magic(buf, sizeof buf);
}

namespace {

// FERRY_LOAD_TRACE=1: the load's phases on stderr (map, header + checksum, verify + decode).
struct LoadTrace {
  bool on = env_value("FERRY_LOAD_TRACE") != nullptr;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  void mark(const char* phase, uint64_t bytes = 0) {
    if (!on) return;
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "ferry: load trace: %-18s %8.2f ms", phase, std::chrono::duration<double, std::milli>(now - last).count());
    if (bytes) std::fprintf(stderr, " (%.1f MB)", static_cast<double>(bytes) / 1e6);
    std::fprintf(stderr, "\n");
    last = now;
  }
};

uint64_t align_up(uint64_t v) { return (v + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment; }

}  // namespace

StatusOr<std::string> serialize_compiled_model(const CompiledModelSpec& spec) {
  if (spec.gears.empty() || !spec.gears[0].model) return internal_error("compiled model without a graph");
  format::GraphWriter w;
  auto& fbb = w.builder();
  const Model& first = *spec.gears[0].model;
  std::vector<flatbuffers::Offset<fb::Gear>> gears;
  for (const CompiledGear& g : spec.gears) {
    auto graph = w.graph(g.model->graph);
    gears.push_back(fb::CreateGear(fbb, g.batch, graph));
  }
  std::vector<flatbuffers::Offset<fb::OpsetImport>> opsets;
  for (const auto& [d, v] : first.opset_imports) opsets.push_back(fb::CreateOpsetImport(fbb, w.str(d), v));
  std::vector<flatbuffers::Offset<fb::KeyValue>> meta;
  for (const auto& [k, v] : first.metadata) {
    if (k == kOptimizedMetadataKey) continue;
    meta.push_back(fb::CreateKeyValue(fbb, w.str(k), fbb.CreateString(v)));
  }
  std::vector<flatbuffers::Offset<fb::TuningChoice>> tuning;
  for (const TuningChoice& c : spec.tuning)
    tuning.push_back(fb::CreateTuningChoice(fbb, w.str(c.node), w.str(c.op_type), w.str(c.impl), c.ms, c.reference_ms));
  auto root = fb::CreateModel(
      fbb, first.ir_version, fbb.CreateString(first.producer_name), fbb.CreateString(first.producer_version),
      fbb.CreateString(first.domain), first.model_version, fbb.CreateString(first.doc_string), fbb.CreateVector(opsets),
      fbb.CreateVector(meta), fbb.CreateString(spec.source), fbb.CreateString(spec.device), spec.opt_level,
      fbb.CreateString(spec.precision_mode), spec.threads, fbb.CreateVector(gears), fbb.CreateVector(tuning));
  fb::FinishModelBuffer(fbb, root);

  FileHeader h{};
  std::memcpy(h.magic, format::kMagic, sizeof h.magic);
  h.format_version = kCompiledFormatVersion;
  h.header_size = kHeaderSize;
  h.graph_offset = kHeaderSize;
  h.graph_size = fbb.GetSize();
  h.weights_offset = align_up(h.graph_offset + h.graph_size);
  h.weights_size = w.weights().size();
  h.file_size = h.weights_offset + h.weights_size;
  format::set_field(h.isa, sizeof h.isa, host_isa());
  format::set_field(h.ferry_version, sizeof h.ferry_version, ferry_version());
  format::set_field(h.device, sizeof h.device, spec.device);

  std::string file(static_cast<size_t>(h.file_size), '\0');
  std::memcpy(file.data() + h.graph_offset, fbb.GetBufferPointer(), h.graph_size);
  std::memcpy(file.data() + h.weights_offset, w.weights().data(), h.weights_size);
  std::memcpy(file.data(), &h, sizeof h);
  h.checksum = format::file_checksum(reinterpret_cast<const uint8_t*>(file.data()), file.size());
  std::memcpy(file.data(), &h, sizeof h);
  return file;
}

Status write_compiled_model(const std::string& path, const CompiledModelSpec& spec) {
  ASSIGN_OR_RETURN(std::string bytes, serialize_compiled_model(spec));
  ASSIGN_OR_RETURN(auto writer, AtomicFileWriter::create(path));
  RETURN_IF_ERROR(writer->write(bytes.data(), bytes.size()));
  return writer->commit();
}

namespace {
// `mapped`: `data` is a read-only file mapping, whose pages may be dropped and come back from the file.
StatusOr<CompiledModel> parse_impl(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                   const std::string& what, bool mapped);
}  // namespace

StatusOr<CompiledModel> parse_compiled_model(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                             const std::string& what) {
  return parse_impl(std::move(owner), data, size, what, false);
}

namespace {
StatusOr<CompiledModel> parse_impl(std::shared_ptr<const void> owner, const uint8_t* data, size_t size,
                                   const std::string& what, bool mapped) {
  LoadTrace trace;
  FileHeader h;
  RETURN_IF_ERROR(format::check_header(data, size, what, &h));
  trace.mark("header + checksum", size);
  if (reinterpret_cast<uintptr_t>(data) % kWeightAlignment != 0)
    return internal_error(what + ": the bytes are not 64-byte aligned");
  if (h.graph_offset % 8 != 0)  // flatbuffers reads 8-byte scalars in place: the section must be aligned
    return invalid_model(what + ": the graph section starts at offset " + std::to_string(h.graph_offset) +
                         ", not a multiple of 8 (the file is corrupted)");
  const uint8_t* graph_bytes = data + h.graph_offset;
  if (h.graph_size >= FLATBUFFERS_MAX_BUFFER_SIZE)
    return invalid_model(what + ": the graph section is over 2 GiB (the file is corrupted)");
  flatbuffers::Verifier::Options vo;
  vo.max_depth = 1024;  // nested subgraphs: 32 levels x a few tables each
  vo.max_tables = 1u << 26;
  flatbuffers::Verifier verifier(graph_bytes, static_cast<size_t>(h.graph_size), vo);
  if (!fb::VerifyModelBuffer(verifier))
    return invalid_model(what + ": the graph section is malformed (the file is corrupted)");
  const fb::Model* m = fb::GetModel(graph_bytes);

  CompiledModel cm;
  cm.format_version = h.format_version;
  cm.ferry_version = format::get_field(h.ferry_version, sizeof h.ferry_version);
  cm.isa = format::get_field(h.isa, sizeof h.isa);
  cm.device = format::get_field(h.device, sizeof h.device);
  cm.file_size = h.file_size;
  cm.checksum = h.checksum;
  cm.weights_bytes = h.weights_size;
  cm.source = m->source() ? m->source()->str() : "";
  cm.opt_level = m->opt_level();
  cm.precision_mode = m->precision_mode() ? m->precision_mode()->str() : "";
  cm.threads = m->threads();
  if (m->tuning())
    for (const fb::TuningChoice* c : *m->tuning())
      cm.tuning.push_back({c->node() ? c->node()->str() : "", c->op_type() ? c->op_type()->str() : "",
                           c->impl() ? c->impl()->str() : "", c->ms(), c->reference_ms()});

  Model base;
  base.ir_version = m->ir_version();
  base.producer_name = m->producer_name() ? m->producer_name()->str() : "";
  base.producer_version = m->producer_version() ? m->producer_version()->str() : "";
  base.domain = m->domain() ? m->domain()->str() : "";
  base.model_version = m->model_version();
  base.doc_string = m->doc_string() ? m->doc_string()->str() : "";
  if (m->opset_imports())
    for (const fb::OpsetImport* o : *m->opset_imports())
      base.opset_imports[o->domain() ? o->domain()->str() : ""] = o->version();
  if (m->metadata())
    for (const fb::KeyValue* kv : *m->metadata())
      base.metadata[kv->key() ? kv->key()->str() : ""] = kv->value() ? kv->value()->str() : "";
  base.metadata[kOptimizedMetadataKey] = std::to_string(cm.opt_level);
  base.path = what;

  if (!m->gears() || m->gears()->size() == 0) return invalid_model(what + ": the compiled model holds no graph");
  // A mapped file's weights may have their pages dropped by a kernel that packed them (ir/file_pages.h).
  std::shared_ptr<const void> weights_owner =
      mapped ? register_file_pages(owner, data + h.weights_offset, static_cast<size_t>(h.weights_size)) : owner;
  format::WeightsView weights{weights_owner, data + h.weights_offset, h.weights_size, mapped};
  for (const fb::Gear* g : *m->gears()) {
    if (!g->graph()) return invalid_model(what + ": a gear without a graph (the file is corrupted)");
    if (g->batch() < 0 || (g->batch() == 0 && m->gears()->size() > 1))
      return invalid_model(what + ": invalid gear batch " + std::to_string(g->batch()));
    auto model = std::make_shared<Model>(base);
    RETURN_IF_ERROR(format::read_graph(*g->graph(), weights, nullptr, &model->graph).with_context(what));
    cm.gears.push_back({g->batch(), std::move(model)});
  }
  std::sort(cm.gears.begin(), cm.gears.end(), [](const auto& a, const auto& b) { return a.batch < b.batch; });
  for (size_t i = 1; i < cm.gears.size(); ++i)
    if (cm.gears[i].batch == cm.gears[i - 1].batch)
      return invalid_model(what + ": two gears for batch " + std::to_string(cm.gears[i].batch));
  trace.mark("verify + decode");
  return cm;
}
}  // namespace

StatusOr<CompiledModel> parse_compiled_model_copy(const void* data, size_t size, const std::string& what) {
  const size_t rounded = (size + kWeightAlignment - 1) / kWeightAlignment * kWeightAlignment;
  void* p = std::aligned_alloc(kWeightAlignment, rounded ? rounded : kWeightAlignment);
  if (!p) return resource_exhausted(what + ": cannot allocate " + std::to_string(size) + " bytes");
  std::shared_ptr<const void> owner(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  if (size) std::memcpy(p, data, size);
  return parse_compiled_model(std::move(owner), static_cast<const uint8_t*>(p), size, what);
}

StatusOr<CompiledModel> load_compiled_model(const std::string& path) {
  LoadTrace trace;
  ASSIGN_OR_RETURN(FileBytes bytes, map_file(path));
  trace.mark("map", bytes.size);
  if (reinterpret_cast<uintptr_t>(bytes.data) % kWeightAlignment != 0)  // read into a heap buffer (a pipe)
    return parse_compiled_model_copy(bytes.data, bytes.size, path);
  ASSIGN_OR_RETURN(CompiledModel cm, parse_impl(bytes.owner, bytes.data, bytes.size, path, bytes.mapped));
  // The checksum read every page of the file into this process; nothing has written to them yet.
  // Drop them: the weights a kernel reads come back from the page cache on first touch, and the
  // rest (the original of a weight whose packed form is used in place, the gears not run) no
  // longer count in the process's memory.
  if (bytes.mapped) (void)::madvise(const_cast<uint8_t*>(bytes.data), bytes.size, MADV_DONTNEED);
  return cm;
}

}  // namespace ferry
