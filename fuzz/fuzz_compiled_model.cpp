// libFuzzer target: the .ferry compiled-model loader (header, flatbuffers graph, weights).
// A mutated file would almost always stop at the checksum, so the target re-stamps the checksum
// of every input with a valid header size: the mutations then reach the section checks, the
// flatbuffers verifier and the graph decoder, which are what must hold against a hostile file.
// (The checksum check itself is covered by the unit tests and the bad-file ctest.)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "format/compiled_model.h"
#include "format/file_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  constexpr size_t kAt = offsetof(ferry::format::FileHeader, checksum);
  if (bytes.size() >= sizeof(ferry::format::FileHeader)) {
    const uint64_t sum = ferry::format::file_checksum(bytes.data(), bytes.size());
    std::memcpy(bytes.data() + kAt, &sum, sizeof sum);
  }
  auto model = ferry::parse_compiled_model_copy(bytes.data(), bytes.size(), "fuzz input");
  if (!model.is_ok()) return 0;
  // Weights stored only packed (ir/packed_layout.h) are unpacked on first read: read them, so
  // a layout the loader let through is unpacked within its bytes.
  for (const ferry::CompiledGear& g : model.value().gears)
    for (const auto& [name, t] : g.model->graph.initializers)
      if (t.pending() && t.nbytes() > 0) (void)*static_cast<const volatile uint8_t*>(t.raw());
  return 0;
}
