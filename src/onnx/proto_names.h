// Names in an ONNX proto made printable (internal to onnx/): every graph, node, value, initializer
// and attribute name, op type and domain, through escape_name (common/utf8.h: bytes that are not
// UTF-8, and control characters, as \xHH). The importer calls it once on every model it reads, and
// the trained-model export on the source it re-reads, so both see the same names.
#pragma once

#include "onnx/onnx_pb.h"

namespace ferry {

void escape_model_names(onnx::ModelProto* mp);

}  // namespace ferry
