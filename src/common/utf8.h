// Text that reaches a terminal, a JSON document or an HTML report must be valid UTF-8. Model
// files hold names in proto2 / flatbuffer strings that nobody validates (a node named "r\xf9lu"
// runs fine), so the importers escape every name once, when the model is read (onnx/onnx_import.cpp,
// format/graph_reader.cpp), and the CLI escapes its error messages (tools/cli_common.cpp report()):
// everything that prints or writes a name afterwards can take it as it is.
#pragma once

#include <string>
#include <string_view>

namespace ferry {

/// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points over U+10FFFF).
bool is_valid_utf8(std::string_view s);

/// `s` with each byte that is not part of a well-formed UTF-8 sequence written as the four
/// characters \xHH (upper-case hex); valid text, '\n' and '\t' included, is returned unchanged.
std::string escape_non_utf8(std::string_view s);

/// A name from a model file made printable: escape_non_utf8, and control characters (C0, DEL) as
/// \xHH too, so a name cannot move the terminal's cursor or break a line of a report.
std::string escape_name(std::string_view s);

}  // namespace ferry
