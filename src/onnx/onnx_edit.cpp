// Graph edits written back into an .onnx file; see onnx_edit.h.
#include "onnx/onnx_edit.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "io/file.h"
#include "onnx/onnx_pb.h"
#include "onnx/tensor_proto.h"

namespace ferry {
namespace {

void set_tensor(onnx::TensorProto* tp, const std::string& name, const Tensor& t) {
  tp->set_name(name);
  tp->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) tp->add_dims(d);
  tp->set_raw_data(std::string(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes())));
}

Status inline_external(const std::string& base_dir, const std::string& source, onnx::TensorProto* tp) {
  if (tp->data_location() != onnx::TensorProto::EXTERNAL) return Status::ok();
  const std::string what = "tensor '" + tp->name() + "' of '" + source + "'";
  std::string location;
  long long offset = 0, length = -1;
  for (const auto& kv : tp->external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = std::atoll(kv.value().c_str());
    if (kv.key() == "length") length = std::atoll(kv.value().c_str());
  }
  ASSIGN_OR_RETURN(std::string path, resolve_inside(base_dir, location, what));
  ASSIGN_OR_RETURN(FileBytes f, map_file(path, INT64_MAX, what + " external data"));
  const long long size = static_cast<long long>(f.size);
  if (length < 0) length = size - offset;
  if (offset < 0 || offset > size || length > size - offset)
    return invalid_model(what + ": external data runs past the end of '" + location + "'");
  tp->set_raw_data(std::string(reinterpret_cast<const char*>(f.data) + offset, static_cast<size_t>(length)));
  tp->clear_external_data();
  tp->clear_data_location();
  return Status::ok();
}

// Stable topological sort: repeatedly emits the first node (in current order) whose inputs are ready.
Status sort_nodes(onnx::GraphProto* g) {
  std::unordered_map<std::string, int> producer;
  const int n = g->node_size();
  for (int i = 0; i < n; ++i)
    for (const auto& o : g->node(i).output())
      if (!o.empty()) producer[o] = i;
  std::vector<std::vector<int>> users(static_cast<size_t>(n));
  std::vector<int> pending(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i)
    for (const auto& in : g->node(i).input()) {
      auto it = producer.find(in);
      if (in.empty() || it == producer.end()) continue;
      users[static_cast<size_t>(it->second)].push_back(i);
      ++pending[static_cast<size_t>(i)];
    }
  std::set<int> ready;
  for (int i = 0; i < n; ++i)
    if (pending[static_cast<size_t>(i)] == 0) ready.insert(i);
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (int u : users[static_cast<size_t>(i)])
      if (--pending[static_cast<size_t>(u)] == 0) ready.insert(u);
  }
  if (static_cast<int>(order.size()) != n) return internal_error("the edited graph has a cycle");
  google::protobuf::RepeatedPtrField<onnx::NodeProto> sorted;
  for (int i : order) *sorted.Add() = g->node(i);
  g->mutable_node()->Swap(&sorted);
  return Status::ok();
}

}  // namespace

Status write_edited_onnx(const std::string& source_onnx, const OnnxGraphEdit& edit, const std::string& out_path) {
  if (out_path.empty()) return invalid_argument("no output path given");
  struct stat sa, sb;
  if (out_path == source_onnx || (::stat(source_onnx.c_str(), &sa) == 0 && ::stat(out_path.c_str(), &sb) == 0 &&
                                  sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino))
    return invalid_argument("output '" + out_path + "' is the source model '" + source_onnx + "'; write to a new file");
  ASSIGN_OR_RETURN(FileBytes f, map_file(source_onnx, INT_MAX, "model file"));
  onnx::ModelProto mp;
  if (f.size == 0 || !parse_model_proto(f.data, f.size, &mp) || !mp.has_graph())
    return invalid_model("model '" + source_onnx + "' is not a valid ONNX model (protobuf parse failed)");
  onnx::GraphProto* g = mp.mutable_graph();
  const std::string base_dir = dir_name(source_onnx);
  for (auto& t : *g->mutable_initializer()) RETURN_IF_ERROR(inline_external(base_dir, source_onnx, &t));

  // Initializers.
  if (!edit.remove_initializers.empty()) {
    google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
    for (auto& t : *g->mutable_initializer())
      if (!edit.remove_initializers.count(t.name())) *kept.Add() = std::move(t);
    g->mutable_initializer()->Swap(&kept);
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
    for (auto& v : *g->mutable_input())
      if (!edit.remove_initializers.count(v.name())) *inputs.Add() = std::move(v);
    g->mutable_input()->Swap(&inputs);
  }
  for (const auto& [name, t] : edit.add_initializers) set_tensor(g->add_initializer(), name, t);

  // Existing nodes: rewired inputs, renamed outputs.
  for (auto& n : *g->mutable_node()) {
    if (n.output_size() > 0) {
      auto it = edit.rewire.find(n.output(0));
      if (it != edit.rewire.end())
        for (const auto& [slot, value] : it->second)
          if (slot >= 0 && slot < n.input_size()) n.set_input(slot, value);
    }
    for (int i = 0; i < n.output_size(); ++i) {
      auto it = edit.rename_outputs.find(n.output(i));
      if (it != edit.rename_outputs.end()) n.set_output(i, it->second);
    }
  }
  for (const OnnxNewNode& nn : edit.add_nodes) {
    onnx::NodeProto* n = g->add_node();
    n->set_name(nn.name);
    n->set_op_type(nn.op_type);
    for (const auto& i : nn.inputs) n->add_input(i);
    for (const auto& o : nn.outputs) n->add_output(o);
    for (const auto& [k, v] : nn.int_attrs) {
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name(k);
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(v);
    }
  }
  RETURN_IF_ERROR(sort_nodes(g).with_context("writing '" + out_path + "'"));
  if (edit.min_opset > 0) {
    bool found = false;
    for (auto& os : *mp.mutable_opset_import())
      if (os.domain().empty() || os.domain() == "ai.onnx") {
        found = true;
        if (os.version() < edit.min_opset) os.set_version(edit.min_opset);
      }
    if (!found) {
      auto* os = mp.add_opset_import();
      os->set_version(edit.min_opset);
    }
  }
  std::string bytes;
  if (mp.ByteSizeLong() > static_cast<size_t>(INT_MAX) || !mp.SerializeToString(&bytes))
    return resource_exhausted("the quantized model '" + out_path + "' is over protobuf's 2 GiB limit");
  const std::string tmp = out_path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) return invalid_argument("cannot create '" + tmp + "' to write '" + out_path + "': " + std::strerror(errno));
    os.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    os.close();
    if (!os) {
      std::remove(tmp.c_str());
      return resource_exhausted("writing '" + out_path + "' failed; nothing was written");
    }
  }
  if (std::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return invalid_argument("cannot move the model into place at '" + out_path + "': " + std::strerror(err));
  }
  return Status::ok();
}

}  // namespace ferry
