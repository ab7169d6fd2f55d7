// Operator support profiles of external targets (data/profiles/*.tsv, embedded in the binary),
// as `ferry scan` reads them: is an ONNX op converted, and by what.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::scan {

struct ProfileEntry {
  bool supported = false;
  std::string converted_to;  // the target op(s) it becomes ("PartitionedCall": a composed subgraph)
  std::string restrictions;  // free text from the source, shown verbatim
};

struct Profile {
  std::string name;  // file stem: "ascend-atc-2025"
  std::map<std::string, ProfileEntry, std::less<>> ops;

  /// The entry for `op`, or nullptr when the profile does not list it.
  const ProfileEntry* find(std::string_view op) const;
};

/// Parses one profile; the column layout is chosen from the file's name (ascend-atc-*, tensorrt-*,
/// openvino). Lines starting with '#' are comments.
Profile parse_profile(const std::string& name, std::string_view tsv);

/// The profiles compiled into ferry, by name.
const std::map<std::string, Profile>& builtin_profiles();

/// Embedded data files (generated at build time from data/): name -> contents.
struct EmbeddedFile {
  const char* name;
  const unsigned char* data;
  unsigned long size;
};
/// Every file embedded for the scanner: "scan_rules.json", "profiles/<name>.tsv".
std::vector<EmbeddedFile> scan_embedded_files();

}  // namespace ferry::scan
