// Python literals as they appear in .npy headers (internal to io/): dicts, tuples, lists,
// strings, integers, True/False/None. numpy writes e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

struct PyValue {
  enum class Kind { kNone, kStr, kInt, kBool, kTuple, kList, kDict };
  Kind kind = Kind::kNone;
  std::string str;
  int64_t num = 0;
  bool flag = false;
  std::vector<std::string> keys;  // kDict
  std::vector<PyValue> items;     // kTuple / kList elements, kDict values
};

/// Parses the whole of `text` as one literal into `out`; returns "" on success, else what went
/// wrong and where (byte offset).
std::string parse_py_literal(std::string_view text, PyValue* out);

}  // namespace ferry
