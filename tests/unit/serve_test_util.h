// What the ServedModel unit tests share: a tiny ONNX model of one elementwise op.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "onnx/onnx_pb.h"

namespace ferry::serve {

/// x [N, 4] (N symbolic) -> OP(x, x), or Relu(x), named `out`, written to dir/file; returns its path.
inline std::string write_elementwise_model(const std::filesystem::path& dir, const std::string& file, const std::string& op,
                                           const std::string& out) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* os = m.add_opset_import();
  os->set_domain("");
  os->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name(file);
  for (auto [vi, name] : {std::pair{g->add_input(), std::string("x")}, std::pair{g->add_output(), out}}) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("N");
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  auto* n = g->add_node();
  n->set_op_type(op);
  for (int i = 0; i < (op == "Relu" ? 1 : 2); ++i) n->add_input("x");
  n->add_output(out);
  const std::filesystem::path path = dir / file;
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path.string();
}

}  // namespace ferry::serve
