// Reads the shipped target profiles (see profiles.h).
#include "scan/profiles.h"

#include <sstream>

namespace ferry::scan {

const ProfileEntry* Profile::find(std::string_view op) const {
  auto it = ops.find(op);
  return it == ops.end() ? nullptr : &it->second;
}

Profile parse_profile(const std::string& name, std::string_view tsv) {
  Profile p;
  p.name = name;
  const bool tensorrt = name.rfind("tensorrt", 0) == 0;
  const bool openvino = name.rfind("openvino", 0) == 0;
  std::istringstream in{std::string(tsv)};
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols;
    size_t b = 0;
    while (true) {
      const size_t t = line.find('\t', b);
      cols.push_back(line.substr(b, t == std::string::npos ? std::string::npos : t - b));
      if (t == std::string::npos) break;
      b = t + 1;
    }
    ProfileEntry e;
    if (tensorrt) {
      e.supported = cols.size() > 1 && cols[1] == "Y";
      if (cols.size() > 3) e.restrictions = cols[3];
    } else if (openvino) {
      e.supported = cols.size() > 1 && !cols[1].empty();
      if (cols.size() > 3) e.restrictions = cols[3];
    } else {  // ascend-atc-2025: op min max opsets domains ascend_op repo; 2022: no domains column
      e.supported = true;
      const size_t col = cols.size() >= 7 ? 5 : 4;
      if (cols.size() > col) e.converted_to = cols[col];
    }
    p.ops[cols[0]] = std::move(e);
  }
  return p;
}

const std::map<std::string, Profile>& builtin_profiles() {
  static const std::map<std::string, Profile> profiles = [] {
    std::map<std::string, Profile> m;
    for (const EmbeddedFile& f : scan_embedded_files()) {
      std::string n = f.name;
      if (n.rfind("profiles/", 0) != 0 || n.size() < 13 || n.substr(n.size() - 4) != ".tsv") continue;
      n = n.substr(9, n.size() - 13);
      m[n] = parse_profile(n, std::string_view(reinterpret_cast<const char*>(f.data), f.size));
    }
    return m;
  }();
  return profiles;
}

}  // namespace ferry::scan
