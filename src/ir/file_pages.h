// Bytes of file mappings that may leave the process and come back (issue 40): a .ferry file's
// weights section is a private mapping nothing writes, so a page of it dropped from the process
// (madvise(MADV_DONTNEED)) is read again from the file, the same bytes, by whoever touches it next.
// The loader registers the section for as long as its weights are in use; a kernel that has made
// its own (packed) form of a weight read from there drops the weight's pages, so the file's copy
// does not stay resident beside the packed one (ViT-B/16's .ferry at 1 thread: 767 MiB peak).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ferry {

/// Registers [begin, begin + size), which must lie in a private file mapping that nothing writes
/// while `owner` (the mapping) lives. Returns the owner to hand to the tensors viewing those bytes:
/// it keeps `owner` alive and unregisters the range before letting it go.
std::shared_ptr<const void> register_file_pages(std::shared_ptr<const void> owner, const void* begin, size_t size);

/// When [p, p + n) lies inside a registered range: drops the whole pages it covers from the process
/// and returns their bytes (the next read faults them in from the file). 0, touching nothing, for
/// any other memory (heap bytes: their contents would be lost).
int64_t drop_file_pages(const void* p, int64_t n);

/// Pages dropped by drop_file_pages in this process, in bytes (tests check that a path fires).
int64_t file_pages_dropped();

}  // namespace ferry
