// ferry.Trainer's engine (python/ferry/train.py holds the Python class): train/StepTrainer with
// numpy batches read in place and the GIL released while a step runs.
#include <pybind11/stl.h>

#include "python/py_common.h"
#include "train/step_trainer.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

class PyTrainer {
 public:
  explicit PyTrainer(std::unique_ptr<StepTrainer> t) : t_(std::move(t)) {}

  static std::shared_ptr<PyTrainer> create(const py::dict& cfg) {
    TrainConfig c;
    c.model = cfg["model"].cast<std::string>();
    c.batch_size = cfg["batch_size"].cast<int64_t>();
    c.steps = cfg["steps"].cast<int64_t>();
    c.seed = cfg["seed"].cast<uint64_t>();
    c.threads = cfg["threads"].cast<int>();
    c.device = cfg["device"].cast<std::string>();
    c.opt_level = cfg["opt_level"].cast<int>();
    c.optimizer.kind = cfg["optimizer"].cast<std::string>();
    if (!cfg["lr"].is_none()) c.optimizer.lr = cfg["lr"].cast<double>();
    c.optimizer.momentum = cfg["momentum"].cast<double>();
    c.optimizer.dampening = cfg["dampening"].cast<double>();
    c.optimizer.nesterov = cfg["nesterov"].cast<bool>();
    if (!cfg["weight_decay"].is_none()) c.optimizer.weight_decay = cfg["weight_decay"].cast<double>();
    auto betas = cfg["betas"].cast<std::pair<double, double>>();
    c.optimizer.beta1 = betas.first;
    c.optimizer.beta2 = betas.second;
    c.optimizer.eps = cfg["eps"].cast<double>();
    c.optimizer.amsgrad = cfg["amsgrad"].cast<bool>();
    c.schedule.kind = cfg["schedule"].cast<std::string>();
    c.schedule.warmup_steps = cfg["warmup_steps"].cast<int64_t>();
    c.schedule.step_size = cfg["step_size"].cast<int64_t>();
    c.schedule.gamma = cfg["gamma"].cast<double>();
    c.schedule.eta_min = cfg["eta_min"].cast<double>();
    if (!cfg["max_lr"].is_none()) c.schedule.max_lr = cfg["max_lr"].cast<double>();
    c.clip_grad_norm = cfg["clip_grad_norm"].cast<double>();
    c.loss = cfg["loss"].cast<std::string>();
    c.label_smoothing = cfg["label_smoothing"].cast<double>();
    c.freeze = cfg["freeze"].cast<std::string>();
    c.num_classes = cfg["num_classes"].cast<int64_t>();
    c.amp = cfg["amp"].cast<std::string>();
    c.keep_fp32 = cfg["keep_fp32"].cast<std::vector<std::string>>();
    if (!cfg["loss_scale"].is_none()) {
      c.loss_scaling = true;
      c.scaler.init_scale = cfg["loss_scale"].cast<double>();
      c.scaler.dynamic = cfg["dynamic_loss_scale"].cast<bool>();
    }
    c.recompute_segments = cfg["recompute_segments"].cast<int64_t>();
    StatusOr<std::unique_ptr<StepTrainer>> t = [&] {
      py::gil_scoped_release nogil;
      return StepTrainer::create(c);
    }();
    return std::make_shared<PyTrainer>(unwrap(std::move(t)));
  }

  static std::shared_ptr<PyTrainer> resume(const std::string& path) {
    StatusOr<std::unique_ptr<StepTrainer>> t = [&] {
      py::gil_scoped_release nogil;
      return StepTrainer::resume(path);
    }();
    return std::make_shared<PyTrainer>(unwrap(std::move(t)));
  }

  py::dict step(const py::dict& inputs, py::handle labels) {
    std::vector<py::object> keep;
    NamedTensors feeds = batch(inputs, &keep);
    Tensor y = tensor_view("labels", labels, DType::kUndefined, &keep);
    StatusOr<StepResult> r = [&] {
      py::gil_scoped_release nogil;
      return t_->step(feeds, y);
    }();
    StepResult s = unwrap(std::move(r));
    py::dict d;
    d["step"] = s.step;
    d["loss"] = s.loss;
    d["lr"] = s.lr;
    d["time"] = s.time_ms / 1000.0;
    d["time_ms"] = s.time_ms;
    d["skipped"] = s.skipped;
    if (s.loss_scale > 0) d["loss_scale"] = s.loss_scale;
    return d;
  }

  py::dict evaluate(const py::dict& inputs, py::handle labels) {
    std::vector<py::object> keep;
    NamedTensors feeds = batch(inputs, &keep);
    Tensor y = tensor_view("labels", labels, DType::kUndefined, &keep);
    StatusOr<EvalResult> r = [&] {
      py::gil_scoped_release nogil;
      return t_->evaluate(feeds, y);
    }();
    EvalResult e = unwrap(std::move(r));
    py::dict d;
    d["loss"] = e.loss;
    d["samples"] = e.samples;
    if (t_->config().loss == "cross_entropy") d["accuracy"] = e.accuracy;
    return d;
  }

  void export_model(const std::string& path) {
    Status st;
    {
      py::gil_scoped_release nogil;
      st = t_->export_model(path);
    }
    check(st);
  }

  void save_checkpoint(const std::string& dir, int keep) {
    Status st;
    {
      py::gil_scoped_release nogil;
      st = t_->save_checkpoint(dir, keep);
    }
    check(st);
  }

  py::list data_inputs() const {
    py::list out;
    for (const ValueInfo& v : t_->data_inputs()) out.append(py::make_tuple(v.name, onnx_type_name(v.type.dtype)));
    return out;
  }

  py::dict weights() const {
    py::dict d;
    for (const auto& [name, t] : t_->weights()) d[py::str(name)] = tensor_to_numpy(t, /*copy=*/true);
    return d;
  }

  int64_t steps_done() const { return t_->steps_done(); }
  int64_t batch_size() const { return t_->config().batch_size; }

 private:
  NamedTensors batch(const py::dict& inputs, std::vector<py::object>* keep) {
    NamedTensors feeds;
    for (const auto& [k, v] : inputs) {
      const std::string name = py::str(k);
      const ValueInfo* info = nullptr;
      for (const ValueInfo& d : t_->data_inputs())
        if (d.name == name) info = &d;
      if (!info) {
        std::string names;
        for (const ValueInfo& d : t_->data_inputs()) names += (names.empty() ? "'" : ", '") + d.name + "'";
        raise_status(invalid_argument("no model input named '" + name + "'; the model's inputs: " + names));
      }
      feeds.emplace_back(name, tensor_view("input '" + name + "'", v, info->type.dtype, keep));
    }
    return feeds;
  }
  std::unique_ptr<StepTrainer> t_;
};

}  // namespace

void register_trainer(py::module_& m) {
  py::class_<PyTrainer, std::shared_ptr<PyTrainer>>(m, "_Trainer")
      .def(py::init(&PyTrainer::create), py::arg("config"))
      .def_static("resume", &PyTrainer::resume, py::arg("path"))
      .def("step", &PyTrainer::step, py::arg("inputs"), py::arg("labels"))
      .def("evaluate", &PyTrainer::evaluate, py::arg("inputs"), py::arg("labels"))
      .def("export", &PyTrainer::export_model, py::arg("path"))
      .def("save_checkpoint", &PyTrainer::save_checkpoint, py::arg("dir"), py::arg("keep"))
      .def("data_inputs", &PyTrainer::data_inputs)
      .def("weights", &PyTrainer::weights)
      .def_property_readonly("steps_done", &PyTrainer::steps_done)
      .def_property_readonly("batch_size", &PyTrainer::batch_size);
}

}  // namespace ferry::python
