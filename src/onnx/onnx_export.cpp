// Trained-model export; see onnx_export.h. The source ModelProto is edited in place (so
// metadata, doc strings, opsets and unknown fields survive), checked by loading a weightless
// copy with ferry's importer and shape inference, then written through a temporary file.
#include "onnx/onnx_export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>

#include <google/protobuf/io/zero_copy_stream_impl.h>

#include "io/file.h"
#include "onnx/onnx_import.h"
#include "onnx/onnx_pb.h"
#include "onnx/proto_names.h"
#include "onnx/tensor_proto.h"

namespace ferry {
namespace {

using Graphs = std::vector<onnx::GraphProto*>;

std::string base_name(const std::string& path) {
  const size_t p = path.find_last_of('/');
  return p == std::string::npos ? path : path.substr(p + 1);
}

// Calls fn on every subgraph held by the node's attributes.
void for_each_subgraph(onnx::NodeProto* n, const std::function<void(onnx::GraphProto*)>& fn) {
  for (auto& a : *n->mutable_attribute()) {
    if (a.has_g()) fn(a.mutable_g());
    for (auto& sg : *a.mutable_graphs()) fn(&sg);
  }
}

// Every TensorProto of a graph (initializers, tensor attributes), subgraphs included.
void for_each_tensor(onnx::GraphProto* g, const std::function<void(onnx::TensorProto*)>& fn) {
  for (auto& t : *g->mutable_initializer()) fn(&t);
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_t()) fn(a.mutable_t());
      for (auto& t : *a.mutable_tensors()) fn(&t);
    }
    for_each_subgraph(&n, [&](onnx::GraphProto* sg) { for_each_tensor(sg, fn); });
  }
}

// Node inputs (and subgraph outputs, which may name outer values) reading `from` read `to`,
// here and in every nested subgraph. The graph's own outputs are the caller's business.
void rename_uses(onnx::GraphProto* g, const std::string& from, const std::string& to) {
  for (auto& n : *g->mutable_node()) {
    for (auto& in : *n.mutable_input())
      if (in == from) in = to;
    for_each_subgraph(&n, [&](onnx::GraphProto* sg) {
      rename_uses(sg, from, to);
      for (auto& o : *sg->mutable_output())
        if (o.name() == from) o.set_name(to);
    });
  }
}

// Where `name` is read in g (nodes here or nested, and g's outputs); "" when nowhere.
std::string first_use(const onnx::GraphProto& g, const std::string& name, const std::set<int>& skip = {}) {
  for (const auto& o : g.output())
    if (o.name() == name) return "graph output '" + name + "'";
  for (int i = 0; i < g.node_size(); ++i) {
    if (skip.count(i)) continue;
    const onnx::NodeProto& n = g.node(i);
    for (const auto& in : n.input())
      if (in == name) return "node '" + n.name() + "' (" + n.op_type() + ")";
    for (const auto& a : n.attribute()) {
      std::vector<const onnx::GraphProto*> subs;
      if (a.has_g()) subs.push_back(&a.g());
      for (const auto& sg : a.graphs()) subs.push_back(&sg);
      for (const auto* sg : subs) {
        std::string u = first_use(*sg, name);
        if (!u.empty()) return u + " inside a subgraph of node '" + n.name() + "'";
      }
    }
  }
  return "";
}

std::string describe(const onnx::NodeProto& n) { return "node '" + n.name() + "' (" + n.op_type() + ")"; }

bool is_graph_output(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& o : g.output())
    if (o.name() == name) return true;
  return false;
}
bool is_graph_input(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& i : g.input())
    if (i.name() == name) return true;
  return false;
}
onnx::TensorProto* find_initializer(onnx::GraphProto* g, const std::string& name) {
  for (auto& t : *g->mutable_initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

void set_tensor(onnx::TensorProto* tp, const Tensor& t) {
  const std::string name = tp->name(), doc = tp->doc_string();
  std::string().swap(*tp->mutable_raw_data());  // Clear() keeps the old bytes' buffer: freed before the new one
  tp->Clear();
  tp->set_name(name);
  if (!doc.empty()) tp->set_doc_string(doc);
  tp->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) tp->add_dims(d);
  if (t.dtype() == DType::kString) {
    for (const std::string& s : t.strings()) tp->add_string_data(s);
  } else {
    tp->mutable_raw_data()->assign(static_cast<const char*>(t.raw()), static_cast<size_t>(t.nbytes()));
  }
}

// The state of one export: the source's folder and the external files it reads.
struct ExportState {
  std::string source;
  std::string base_dir;
  int64_t opset = 0;
  std::set<std::string> external_files;  // real paths
};

// Replaces external data of `tp` (relative to the source's folder) by raw_data.
Status inline_external(ExportState& st, onnx::TensorProto* tp) {
  if (tp->data_location() != onnx::TensorProto::EXTERNAL) return Status::ok();
  const std::string what = "tensor '" + tp->name() + "' of '" + st.source + "'";
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp->external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset" || kv.key() == "length") {
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(kv.value().c_str(), &end, 10);
      if (kv.value().empty() || *end != '\0' || errno != 0 || x < 0)
        return invalid_model(what + ": external data " + kv.key() + " '" + kv.value() + "' is not a non-negative integer");
      (kv.key() == "offset" ? offset : length) = x;
    }
  }
  ASSIGN_OR_RETURN(std::string path, resolve_inside(st.base_dir, location, what));
  st.external_files.insert(path);
  ASSIGN_OR_RETURN(FileBytes f, map_file(path, INT64_MAX, what + " external data"));
  const int64_t size = static_cast<int64_t>(f.size);
  if (length < 0) length = size - offset;
  if (offset > size || length > size - offset)
    return invalid_model(what + ": external data [offset " + std::to_string(offset) + ", length " +
                         std::to_string(length) + "] runs past the end of '" + location + "'");
  tp->set_raw_data(std::string(reinterpret_cast<const char*>(f.data) + offset, static_cast<size_t>(length)));
  tp->clear_external_data();
  tp->clear_data_location();
  return Status::ok();
}

// Initializers: trained values, new ones, renames. `shapes_changed` is set when anything may
// change a value's shape.
Status apply_weights(onnx::GraphProto* g, const TrainedExport& e, const std::string& source, bool* shapes_changed,
                     std::set<std::string>* dropped_candidates) {
  for (const auto& [name, t] : e.weights) {
    onnx::TensorProto* tp = find_initializer(g, name);
    if (!tp)
      return not_found("weight '" + name + "' is not an initializer of '" + source +
                       "'; export from the model the training started from, or pass it in 'added'");
    if (!t.defined()) return invalid_argument("weight '" + name + "' is undefined");
    if (tp->data_type() != static_cast<int32_t>(t.dtype())) {
      DType old = DType::kUndefined;
      const bool known = dtype_from_onnx(tp->data_type(), &old);
      return invalid_argument("weight '" + name + "' is " + dtype_name(t.dtype()) + " but the initializer in '" + source +
                              "' is " + (known ? dtype_name(old) : std::to_string(tp->data_type())) +
                              "; convert it back before exporting (the dtype of a model's weights cannot change)");
    }
    const std::vector<int64_t> old_dims(tp->dims().begin(), tp->dims().end());
    if (old_dims != t.dims()) *shapes_changed = true;
    set_tensor(tp, t);
    for (auto& in : *g->mutable_input()) {  // IR < 4: initializers are also listed as inputs
      if (in.name() != name || !in.type().has_tensor_type()) continue;
      auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
      shape->Clear();
      for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    }
  }
  std::set<std::string> defined;
  for (const auto& t : g->initializer()) defined.insert(t.name());
  for (const auto& i : g->input()) defined.insert(i.name());
  for (const auto& n : g->node())
    for (const auto& o : n.output()) defined.insert(o);
  for (const auto& [name, t] : e.added) {
    if (name.empty() || defined.count(name))
      return invalid_argument("added initializer '" + name + "' already names a value of '" + source +
                              "'; give it a new name (or pass it in 'weights' to replace that initializer)");
    if (!t.defined()) return invalid_argument("added initializer '" + name + "' is undefined");
    onnx::TensorProto* tp = g->add_initializer();
    tp->set_name(name);
    set_tensor(tp, t);
    defined.insert(name);
    *shapes_changed = true;
  }
  for (const auto& [from, to] : e.renames) {
    if (!defined.count(from)) return not_found("rename '" + from + "' -> '" + to + "': '" + from + "' is not a value of '" + source + "'");
    if (to.empty() || from == to) return invalid_argument("rename '" + from + "' -> '" + to + "': give a new, non-empty name");
    onnx::TensorProto* tp = find_initializer(g, from);
    const bool to_defined = defined.count(to) > 0;
    if (tp && !to_defined) {
      tp->set_name(to);
      for (auto& in : *g->mutable_input())
        if (in.name() == from) in.set_name(to);
      defined.insert(to);
    } else if (tp) {
      dropped_candidates->insert(from);
    }
    rename_uses(g, from, to);
    for (auto& o : *g->mutable_output())
      if (o.name() == from) o.set_name(to);
    *shapes_changed = true;
  }
  return Status::ok();
}

// BatchNormalization in inference mode: no training_mode, only Y; is_test/spatial per opset.
Status fix_batch_norms(onnx::GraphProto* g, int64_t opset) {
  for (auto& n : *g->mutable_node()) {
    Status sub = Status::ok();
    for_each_subgraph(&n, [&](onnx::GraphProto* sg) {
      if (sub.is_ok()) sub = fix_batch_norms(sg, opset);
    });
    RETURN_IF_ERROR(sub);
    if (n.op_type() != "BatchNormalization" || !(n.domain().empty() || n.domain() == "ai.onnx")) continue;
    auto* attrs = n.mutable_attribute();
    for (int i = attrs->size() - 1; i >= 0; --i) {
      const onnx::AttributeProto& a = attrs->Get(i);
      bool drop = a.name() == "training_mode" || a.name() == "is_test";  // is_test: re-added below opset 7
      if (a.name() == "spatial" && opset >= 9) {
        if (a.i() == 0)
          return unsupported(describe(n) + ": spatial=0 (per-activation statistics) has no equivalent at opset " +
                             std::to_string(opset) + "; re-export the model with spatial=1 or opset 8");
        drop = true;
      }
      if (drop) attrs->DeleteSubrange(i, 1);
    }
    if (opset < 7) {
      auto* is_test = n.add_attribute();
      is_test->set_name("is_test");
      is_test->set_type(onnx::AttributeProto::INT);
      is_test->set_i(1);
    }
    for (int k = 1; k < n.output_size(); ++k) {
      if (n.output(k).empty()) continue;
      const std::string use = first_use(*g, n.output(k));
      if (!use.empty())
        return invalid_model(describe(n) + ": training output '" + n.output(k) + "' (running statistics) is read by " +
                             use + "; in inference mode BatchNormalization has only output Y: remove that use "
                             "from the model before training");
    }
    if (n.output_size() > 1) n.mutable_output()->DeleteSubrange(1, n.output_size() - 1);
  }
  return Status::ok();
}

// Removes every Dropout; its readers read its input instead. A Dropout whose output is a graph
// output keeps that name: the producer of its input is renamed, or it becomes an Identity.
Status remove_dropouts(onnx::GraphProto* g, std::set<std::string>* training_only) {
  std::set<int> removed;
  for (int i = 0; i < g->node_size(); ++i) {
    onnx::NodeProto* d = g->mutable_node(i);
    if (d->op_type() != "Dropout" || !(d->domain().empty() || d->domain() == "ai.onnx") || d->input_size() < 1) continue;
    if (d->output_size() > 1 && !d->output(1).empty()) {
      const std::string use = first_use(*g, d->output(1), {i});
      if (!use.empty())
        return invalid_model(describe(*d) + ": its mask output '" + d->output(1) + "' is read by " + use +
                             "; the mask exists only in training, so the Dropout cannot be removed: remove that use "
                             "from the model before training");
    }
    for (int k = 1; k < d->input_size(); ++k)
      if (!d->input(k).empty()) training_only->insert(d->input(k));
    const std::string x = d->input(0);
    const std::string y = d->output_size() > 0 ? d->output(0) : "";
    if (y.empty()) {
      removed.insert(i);
      continue;
    }
    if (!is_graph_output(*g, y)) {
      rename_uses(g, y, x);
      removed.insert(i);
      continue;
    }
    int producer = -1;
    for (int j = 0; j < g->node_size() && producer < 0; ++j)
      if (!removed.count(j) && j != i)
        for (const auto& o : g->node(j).output())
          if (o == x) producer = j;
    if (producer >= 0 && !is_graph_output(*g, x) && !is_graph_input(*g, x)) {
      for (auto& o : *g->mutable_node(producer)->mutable_output())
        if (o == x) o = y;
      rename_uses(g, x, y);
      removed.insert(i);
      continue;
    }
    d->set_op_type("Identity");  // the input is a graph input, initializer or another output
    d->set_domain("");
    d->clear_attribute();
    d->mutable_input()->DeleteSubrange(1, d->input_size() - 1);
    d->mutable_output()->DeleteSubrange(1, d->output_size() - 1);
  }
  if (!removed.empty()) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
    for (int i = 0; i < g->node_size(); ++i)
      if (!removed.count(i)) kept.Add()->Swap(g->mutable_node(i));
    g->mutable_node()->Swap(&kept);
  }
  Status sub = Status::ok();
  for (auto& n : *g->mutable_node())
    for_each_subgraph(&n, [&](onnx::GraphProto* sg) {
      if (sub.is_ok()) sub = remove_dropouts(sg, training_only);
    });
  return sub;
}

// Drops Constant nodes and initializers in `candidates` that nothing reads any more.
void drop_unused(onnx::GraphProto* g, const std::set<std::string>& candidates) {
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (int i = 0; i < g->node_size(); ++i) {
    const onnx::NodeProto& n = g->node(i);
    const bool dead = n.op_type() == "Constant" && n.output_size() == 1 && candidates.count(n.output(0)) &&
                      first_use(*g, n.output(0)).empty();
    if (!dead) kept.Add()->Swap(g->mutable_node(i));
  }
  g->mutable_node()->Swap(&kept);
  auto* inits = g->mutable_initializer();
  for (int i = inits->size() - 1; i >= 0; --i) {
    const std::string name = inits->Get(i).name();
    if (!candidates.count(name) || !first_use(*g, name).empty()) continue;
    inits->DeleteSubrange(i, 1);
    auto* inputs = g->mutable_input();
    for (int k = inputs->size() - 1; k >= 0; --k)
      if (inputs->Get(k).name() == name) inputs->DeleteSubrange(k, 1);
  }
  for (auto& n : *g->mutable_node()) for_each_subgraph(&n, [&](onnx::GraphProto* sg) { drop_unused(sg, candidates); });
}

// Removes value_info of values no longer defined (Dropout and BatchNorm training outputs).
void prune_value_info(onnx::GraphProto* g, std::set<std::string> outer) {
  for (const auto& t : g->initializer()) outer.insert(t.name());
  for (const auto& i : g->input()) outer.insert(i.name());
  for (const auto& n : g->node())
    for (const auto& o : n.output()) outer.insert(o);
  auto* vi = g->mutable_value_info();
  for (int i = vi->size() - 1; i >= 0; --i)
    if (!outer.count(vi->Get(i).name())) vi->DeleteSubrange(i, 1);
  for (auto& n : *g->mutable_node()) for_each_subgraph(&n, [&](onnx::GraphProto* sg) { prune_value_info(sg, outer); });
}

// A copy without weight bytes (large initializers become typed graph inputs) and without
// stale shapes, loaded by ferry's importer: validates the edited graph and infers its shapes.
StatusOr<std::shared_ptr<Model>> load_skeleton(onnx::ModelProto* mp, bool strip_shapes, const std::string& what) {
  google::protobuf::RepeatedPtrField<onnx::TensorProto> inits;  // not copied with the rest
  inits.Swap(mp->mutable_graph()->mutable_initializer());
  onnx::ModelProto sk = *mp;
  inits.Swap(mp->mutable_graph()->mutable_initializer());
  onnx::GraphProto* g = sk.mutable_graph();
  for (const onnx::TensorProto& t : mp->graph().initializer()) {
    if (t.raw_data().size() <= 4096 && t.data_location() != onnx::TensorProto::EXTERNAL) {
      *g->add_initializer() = t;
      continue;
    }
    if (!is_graph_input(*g, t.name())) {
      onnx::ValueInfoProto* in = g->add_input();
      in->set_name(t.name());
      auto* tt = in->mutable_type()->mutable_tensor_type();
      tt->set_elem_type(t.data_type());
      for (int64_t d : t.dims()) tt->mutable_shape()->add_dim()->set_dim_value(d);
    }
  }
  if (strip_shapes) {
    g->clear_value_info();
    for (auto& o : *g->mutable_output()) {
      if (!o.type().has_tensor_type() || !o.type().tensor_type().has_shape()) continue;
      for (auto& d : *o.mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim())
        if (d.has_dim_value()) d.clear_dim_value();
    }
  }
  const std::string bytes = sk.SerializeAsString();
  ImportOptions opt;
  opt.require_known_ops = false;
  return parse_onnx_model(bytes.data(), bytes.size(), "", what, opt);
}

void set_shape(onnx::TypeProto_Tensor* tt, const Shape& s) {
  onnx::TensorShapeProto old = tt->shape();
  auto* shape = tt->mutable_shape();
  shape->clear_dim();
  for (int64_t i = 0; i < s.rank(); ++i) {
    auto* d = shape->add_dim();
    const Dim& x = s.dims[i];
    const bool old_param = old.dim_size() == s.rank() && old.dim(static_cast<int>(i)).has_dim_param();
    if (x.is_known()) d->set_dim_value(x.value);
    else if (old_param) d->set_dim_param(old.dim(static_cast<int>(i)).dim_param());  // the user's name
    else if (!x.symbol.empty()) d->set_dim_param(x.symbol);
  }
}

// After a shape change: graph outputs and value_info of the main graph take the inferred shapes
// (unknown dims become unset, never stale); without inference, static dims are cleared.
void refresh_shapes(onnx::GraphProto* g, const Model* inferred) {
  for (auto& o : *g->mutable_output()) {
    if (!o.type().has_tensor_type()) continue;
    auto* tt = o.mutable_type()->mutable_tensor_type();
    const ValueInfo* vi = nullptr;
    if (inferred)
      for (const ValueInfo& v : inferred->graph.outputs)
        if (v.name == o.name()) vi = &v;
    if (vi && vi->type.shape) {
      set_shape(tt, *vi->type.shape);
    } else if (tt->has_shape()) {
      for (auto& d : *tt->mutable_shape()->mutable_dim())
        if (d.has_dim_value()) d.clear_dim_value();
    }
  }
  auto* vis = g->mutable_value_info();
  for (int i = vis->size() - 1; i >= 0; --i) {
    onnx::ValueInfoProto* v = vis->Mutable(i);
    const TensorType* t = inferred ? inferred->graph.find_type(v->name()) : nullptr;
    if (t && t->shape && v->type().has_tensor_type()) set_shape(v->mutable_type()->mutable_tensor_type(), *t->shape);
    else vis->DeleteSubrange(i, 1);
  }
}

// Moves large initializers into `data` (64-byte aligned) and points them at `location`.
Status externalize(onnx::ModelProto* mp, const ExportOptions& o, const std::string& location, std::string* data) {
  for (auto& t : *mp->mutable_graph()->mutable_initializer()) {
    if (static_cast<int64_t>(t.raw_data().size()) < o.external_min_bytes) continue;
    data->resize((data->size() + 63) / 64 * 64, '\0');
    const size_t offset = data->size();
    data->append(t.raw_data());
    const size_t length = t.raw_data().size();
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* k, const std::string& v) {
      auto* kv = t.add_external_data();
      kv->set_key(k);
      kv->set_value(v);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    add("length", std::to_string(length));
  }
  if (mp->ByteSizeLong() > static_cast<size_t>(INT_MAX))
    return resource_exhausted("the model is still " + std::to_string(mp->ByteSizeLong()) +
                              " bytes with its initializers in external data (large Constant nodes?); over protobuf's 2 GiB limit");
  return Status::ok();
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Parses the model file at `path` through a read buffer, not a mapping: the process holds its
// bytes once, parsed (a mapping's pages would stay resident beside the parse until it is done).
// Errors as map_file's ('model file' ...); false when the bytes are not a model.
StatusOr<bool> read_model_proto(const std::string& path, onnx::ModelProto* mp) {
  ASSIGN_OR_RETURN(const OpenedFile opened, open_regular_file(path, INT_MAX, "model file"));
  const int fd = opened.fd;
  bool ok = opened.size > 0;
  if (ok) {
    google::protobuf::io::FileInputStream in(fd, 1 << 20);
    ok = parse_model_proto(&in, mp) && in.GetErrno() == 0;
  }
  ::close(fd);
  return ok;
}

// A temporary sibling of `final_path` filled by `fill(fd)` (0, or the errno of the failed write)
// and fsynced; returns its path.
StatusOr<std::string> write_temp_with(const std::string& final_path, const std::function<int(int)>& fill) {
  const std::string tmp = dir_name(final_path) + "/." + base_name(final_path) + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return invalid_argument("cannot create '" + tmp + "' to write '" + final_path + "': " + std::strerror(errno));
  int err = fill(fd);
  if (!err && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && !err) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    return resource_exhausted("writing '" + final_path + "' failed: " + std::strerror(err) + "; nothing was written");
  }
  return tmp;
}

// Writes `bytes` to a new temporary file next to `final_path`, synced; returns its path.
StatusOr<std::string> write_temp(const std::string& final_path, const std::string& bytes) {
  return write_temp_with(final_path, [&bytes](int fd) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = ::write(fd, bytes.data() + done, std::min<size_t>(bytes.size() - done, size_t(1) << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return w < 0 ? errno : EIO;
      done += static_cast<size_t>(w);
    }
    return 0;
  });
}

// The model serialized straight into the file: no second copy of its weights in a string.
StatusOr<std::string> write_temp(const std::string& final_path, const onnx::ModelProto& mp) {
  return write_temp_with(final_path, [&mp](int fd) {
    google::protobuf::io::FileOutputStream out(fd);
    const bool written = mp.SerializeToZeroCopyStream(&out);
    const bool flushed = out.Flush();
    if (out.GetErrno() != 0) return out.GetErrno();
    return written && flushed ? 0 : EIO;
  });
}

}  // namespace

Status export_trained_onnx(const std::string& source_onnx, const TrainedExport& e, const std::string& out_path,
                           const ExportOptions& options) {
  if (out_path.empty()) return invalid_argument("no output path given for the trained model");
  if (out_path == source_onnx || same_file(source_onnx, out_path))
    return invalid_argument("output '" + out_path + "' is the source model '" + source_onnx +
                            "'; write the trained model to a new file");
  onnx::ModelProto mp;
  ASSIGN_OR_RETURN(const bool parsed, read_model_proto(source_onnx, &mp));
  if (!parsed || !mp.has_graph())
    return invalid_model("model '" + source_onnx + "' is not a valid ONNX model (protobuf parse failed)");
  escape_model_names(&mp);  // the names the importer gave the trained weights
  for (const auto& [key, value] : e.metadata) {
    onnx::StringStringEntryProto* entry = nullptr;
    for (onnx::StringStringEntryProto& kv : *mp.mutable_metadata_props())
      if (kv.key() == key) entry = &kv;
    if (entry == nullptr) entry = mp.add_metadata_props();
    entry->set_key(key);
    entry->set_value(value);
  }
  ExportState st{source_onnx, dir_name(source_onnx), 0, {}};
  st.opset = mp.opset_import_size() == 0 ? 1 : 0;
  for (const auto& os : mp.opset_import())
    if (os.domain().empty() || os.domain() == "ai.onnx") st.opset = os.version();
  onnx::GraphProto* g = mp.mutable_graph();
  const std::string what = "trained model '" + out_path + "' (from '" + source_onnx + "')";

  auto source_model = load_skeleton(&mp, false, "model '" + source_onnx + "'");
  Status inlined = Status::ok();
  for_each_tensor(g, [&](onnx::TensorProto* tp) {
    if (inlined.is_ok()) inlined = inline_external(st, tp);
  });
  RETURN_IF_ERROR(inlined);
  for (const std::string& ext : st.external_files)
    if (same_file(ext, out_path))
      return invalid_argument("output '" + out_path + "' is an external data file of the source model '" + source_onnx +
                              "'; write the trained model to a new file");

  std::set<std::string> training_only;
  RETURN_IF_ERROR(fix_batch_norms(g, st.opset).with_context(what));
  RETURN_IF_ERROR(remove_dropouts(g, &training_only).with_context(what));
  drop_unused(g, training_only);
  prune_value_info(g, {});
  const bool inference_loads = source_model.is_ok() || load_skeleton(&mp, false, what).is_ok();

  bool shapes_changed = false;
  std::set<std::string> renamed_away;
  RETURN_IF_ERROR(apply_weights(g, e, source_onnx, &shapes_changed, &renamed_away));
  drop_unused(g, renamed_away);
  prune_value_info(g, {});
  auto edited = load_skeleton(&mp, shapes_changed, what);
  // When ferry cannot load the model even before the new weights (ops or opsets it lacks), its
  // verdict is not trusted; otherwise a failure is the export's (a weight of the wrong shape?).
  if (!edited.is_ok() && inference_loads) return edited.status();
  if (shapes_changed) refresh_shapes(g, edited.is_ok() ? edited.value().get() : nullptr);

  std::string data;
  const std::string data_path = out_path + ".data";
  if (static_cast<int64_t>(mp.ByteSizeLong()) > options.max_inline_bytes) {
    bool clash = same_file(data_path, source_onnx);
    for (const std::string& x : st.external_files) clash |= same_file(x, data_path);
    if (clash)
      return invalid_argument("the trained model's external data '" + data_path + "' would overwrite a file of the "
                              "source model '" + source_onnx + "'; choose another output name");
    RETURN_IF_ERROR(externalize(&mp, options, base_name(data_path), &data).with_context(what));
  }
  if (static_cast<int64_t>(mp.ByteSizeLong()) > INT_MAX) return internal_error(what + ": protobuf serialization failed (over 2 GiB)");
  std::string data_tmp;
  if (!data.empty()) {
    ASSIGN_OR_RETURN(data_tmp, write_temp(data_path, data));
  }
  auto model_tmp = write_temp(out_path, mp);
  if (!model_tmp.is_ok()) {
    if (!data_tmp.empty()) ::unlink(data_tmp.c_str());
    return model_tmp.status();
  }
  if ((!data_tmp.empty() && ::rename(data_tmp.c_str(), data_path.c_str()) != 0) ||
      ::rename(model_tmp.value().c_str(), out_path.c_str()) != 0) {
    const int err = errno;
    if (!data_tmp.empty()) ::unlink(data_tmp.c_str());
    ::unlink(model_tmp.value().c_str());
    return invalid_argument("cannot move the trained model into place at '" + out_path + "': " + std::strerror(err));
  }
  const int dfd = ::open(dir_name(out_path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return Status::ok();
}

}  // namespace ferry
