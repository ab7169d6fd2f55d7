// The executor's run paths (see executor.h): a whole-batch run, a batch split into cache-sized parts
// (the graph's front only, or parts side by side), the phases they share, and subgraph runs.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "common/env_switch.h"
#include "common/heap_trim.h"
#include "runtime/batch_split_parts.h"
#include "runtime/executor.h"
#include "runtime/executor_internal.h"
#include "runtime/page_blocks.h"
#include "runtime/run_control.h"

namespace ferry {

namespace {
/// Serves one output from given memory (a part's rows of a whole-batch tensor), the rest from
/// `inner` (the arena, the recorder, or the heap when null).
class RowsAllocator : public OutputAllocator {
 public:
  RowsAllocator(OutputAllocator* inner, int64_t output, Tensor* dest) : inner_(inner), output_(output), dest_(dest) {}
  bool allocate(int64_t index, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out) override {
    if (index == output_ && !served_ && dtype == dest_->dtype() && *dims == dest_->dims()) {
      served_ = true;
      if (zero_fill) std::memset(dest_->mutable_raw(), 0, static_cast<size_t>(dest_->nbytes()));
      *out = *dest_;
      return true;
    }
    return inner_ && inner_->allocate(index, dtype, dims, zero_fill, out);
  }
  bool allocate_over(int64_t index, int64_t input, DType dtype, std::vector<int64_t>* dims, Tensor* out) override {
    if (index == output_) return allocate(index, dtype, dims, false, out);  // never over an input: it is the whole's
    return inner_ && inner_->allocate_over(index, input, dtype, dims, out);
  }

 private:
  OutputAllocator* inner_;
  int64_t output_;
  Tensor* dest_;
  bool served_ = false;
};
}  // namespace

Status Executor::run(const NamedTensors& feeds, NamedTensors* outputs) {
  NamedValues in, out;
  for (const auto& [name, t] : feeds) in.emplace_back(name, Value(t));
  RETURN_IF_ERROR(run_values(in, &out));
  outputs->clear();
  for (auto& [name, v] : out) {
    if (!v.is_tensor())
      return unsupported("output '" + name + "' is " + v.describe() + ", not a tensor; this caller handles tensors only");
    outputs->emplace_back(name, std::move(v.tensor));
  }
  return Status::ok();
}

int64_t Executor::sub_batch(const NamedValues& feeds) const {
  const int64_t forced = split_rows_option_;
  // An observer that keeps outputs (layer-by-layer compare) wants whole-batch tensors.
  if (!split_enabled_ || !split_info_.separable || feeds.empty() || (observer_ && observer_keeps_outputs_)) return 0;
  int64_t rows = -1;
  for (const auto& [name, v] : feeds) {
    if (!v.is_tensor() || v.tensor.rank() == 0 || v.tensor.dtype() == DType::kString) return 0;
    if (rows >= 0 && v.tensor.dim(0) != rows) return 0;
    rows = v.tensor.dim(0);
  }
  if (forced > 0) return rows > forced ? forced : 0;
  return batch_split_rows(split_info_, rows, last_level_cache_bytes());
}

Status Executor::run_values(const NamedValues& feeds, NamedValues* outputs) {
  const int64_t sub = sub_batch(feeds);
  last_split_rows_.store(sub);
  last_split_cut_.store(-1);
  if (sub <= 0) return run_whole(feeds, outputs);
  RETURN_IF_ERROR(check_feeds(feeds));
  const int64_t rows = feeds[0].second.tensor.dim(0);
  if (!split_cuts_.empty()) {
    // Only the front as parts: the first place after which every tensor of the whole batch fits.
    // A third of the LLC (as batch_split_rows sizes the parts) measured best of 4 / 11 / 16 MB
    // backs (b8, 1 thread, 32 MiB L3, process CPU ms medians of 4 interleaved rounds at load 3-4):
    // EfficientNet-B0 53.4 / 50.1 / 58.0 against 53.2 for the whole graph as parts, MobileNetV2
    // 33.4 / 33.8 / 59.0 (16 MB then paged the whole-batch cut value in every run; fixed since)
    // against 35.3, ResNet-50 within noise (286 / 289 / 308 against 285).
    const int64_t back_bytes = split_front_bytes_ > 0 ? split_front_bytes_ : last_level_cache_bytes() / 3;
    if (const BatchSplitCut* cut = choose_front_cut(split_cuts_, rows, back_bytes)) {
      last_split_cut_.store(cut->after);
      return run_split_front(feeds, sub, *cut, outputs);
    }
  }
  outputs->clear();
  const int64_t parts = (rows + sub - 1) / sub;
  // Parts side by side, one per intra-op thread (runtime/batch_split_parts.h), when the runs are
  // not watched node by node (an observer is called from one thread at a time).
  const int lanes = observer_ ? 1 : batch_split_lanes(parts);
  std::vector<NamedValues> part_outs(static_cast<size_t>(parts));
  std::vector<Status> part_status(static_cast<size_t>(parts), Status::ok());
  const std::atomic<bool>* terminate = run_terminate_flag();
  run_batch_parts(parts, lanes, [&](int64_t p) {
    ScopedRunTerminate on_lane(terminate);  // a lane's thread checks the caller's flag
    const int64_t begin = p * sub, count = std::min(sub, rows - begin);
    NamedValues part_feeds;
    for (const auto& [name, v] : feeds) part_feeds.emplace_back(name, Value(v.tensor.outer_slice(begin, count)));
    part_status[static_cast<size_t>(p)] = run_whole(part_feeds, &part_outs[static_cast<size_t>(p)]);
  });
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t begin = p * sub, count = std::min(sub, rows - begin);
    const NamedValues& part_out = part_outs[static_cast<size_t>(p)];
    if (!part_status[static_cast<size_t>(p)].is_ok()) {  // a part fails where the batch may not: run it whole
      last_split_rows_.store(0);
      outputs->clear();
      return run_whole(feeds, outputs);
    }
    for (size_t i = 0; i < part_out.size(); ++i) {
      const Tensor& t = part_out[i].second.tensor;
      // The analysis is conservative; should a part still come back with other rows than it was
      // given, the batch runs whole instead (its result is the model's own, only slower).
      if (!part_out[i].second.is_tensor() || t.rank() == 0 || t.dim(0) != count || t.dtype() == DType::kString ||
          (begin > 0 && (*outputs)[i].second.tensor.nbytes() / rows * count != t.nbytes())) {
        last_split_rows_.store(0);
        outputs->clear();
        return run_whole(feeds, outputs);
      }
      if (begin == 0) {
        std::vector<int64_t> dims = t.dims();
        dims[0] = rows;
        ASSIGN_OR_RETURN(Tensor whole, Tensor::try_allocate(t.dtype(), dims));
        outputs->emplace_back(part_out[i].first, Value(std::move(whole)));
      }
      Tensor& whole = (*outputs)[i].second.tensor;
      std::memcpy(static_cast<uint8_t*>(whole.mutable_raw()) + whole.nbytes() / rows * begin, t.raw(),
                  static_cast<size_t>(t.nbytes()));
    }
  }
  return Status::ok();
}

Status Executor::run_split_front(const NamedValues& feeds, int64_t sub, const BatchSplitCut& cut, NamedValues* outputs) {
  const Graph& g = model_->graph;
  const int64_t rows = feeds[0].second.tensor.dim(0);
  const int64_t parts = (rows + sub - 1) / sub;
  const TensorType* type = g.find_type(cut.value);
  if (!type || !type->shape) return internal_error("the split's cut value '" + cut.value + "' has no known type");
  std::vector<int64_t> dims{rows};
  for (size_t i = 1; i < type->shape->dims.size(); ++i) dims.push_back(type->shape->dims[i].value);
  Tensor whole;
  {
    std::lock_guard<std::mutex> lock(cut_mu_);
    for (auto it = cut_spares_.begin(); it != cut_spares_.end(); ++it)
      if (it->dtype() == type->dtype && it->dims() == dims) {
        whole = std::move(*it);
        cut_spares_.erase(it);
        break;
      }
  }
  if (!whole.raw()) {
    ASSIGN_OR_RETURN(whole, Tensor::try_allocate(type->dtype, dims));
  }
  const int64_t row_bytes = whole.nbytes() / rows;
  const Phase front{1, 0, static_cast<size_t>(cut.after) + 1, &cut};
  const Phase back{2, static_cast<size_t>(cut.after) + 1, g.nodes.size(), &cut};
  const int lanes = observer_ ? 1 : batch_split_lanes(parts);
  std::vector<Status> part_status(static_cast<size_t>(parts), Status::ok());
  std::vector<uint8_t> part_fits(static_cast<size_t>(parts), 0);
  const std::atomic<bool>* terminate = run_terminate_flag();
  run_batch_parts(parts, lanes, [&](int64_t p) {
    ScopedRunTerminate on_lane(terminate);
    const int64_t begin = p * sub, count = std::min(sub, rows - begin);
    NamedValues part_feeds, part_out;
    for (const auto& [name, v] : feeds) part_feeds.emplace_back(name, Value(v.tensor.outer_slice(begin, count)));
    const Tensor rows_of_part = whole.outer_slice(begin, count);
    Status st = run_phase(part_feeds, front, &part_out, &rows_of_part);
    if (st.is_ok() && part_out.size() == 1 && part_out[0].second.is_tensor()) {
      // The part's rows are one block of the whole (axis 0 outermost, dense): made there by the
      // producer, or copied when it made them elsewhere (a view op) with the type's shape.
      const Tensor& t = part_out[0].second.tensor;
      if (t.dtype() == whole.dtype() && t.dims() == rows_of_part.dims()) {
        if (t.raw() != rows_of_part.raw())
          std::memcpy(static_cast<uint8_t*>(whole.mutable_raw()) + row_bytes * begin, t.raw(), static_cast<size_t>(t.nbytes()));
        part_fits[static_cast<size_t>(p)] = 1;
      }
    }
    part_status[static_cast<size_t>(p)] = std::move(st);
  });
  for (int64_t p = 0; p < parts; ++p) {
    if (!part_status[static_cast<size_t>(p)].is_ok() || !part_fits[static_cast<size_t>(p)]) {
      // A part failed, or its cut value is not the type's (the analysis is conservative; should
      // it still be wrong): the batch runs whole, the model's own result, only slower.
      last_split_rows_.store(0);
      last_split_cut_.store(-1);
      outputs->clear();
      return run_whole(feeds, outputs);
    }
  }
  const Status st = run_phase({{cut.value, Value(whole)}}, back, outputs);
  // Kept for the next run unless an output still points into it (a view of the cut value).
  const auto* lo = static_cast<const uint8_t*>(whole.raw());
  bool shared = false;
  for (const auto& [name, v] : *outputs) {
    const auto* q = v.is_tensor() ? static_cast<const uint8_t*>(v.tensor.raw()) : nullptr;
    shared = shared || (q && q >= lo && q < lo + whole.nbytes());
  }
  if (st.is_ok() && !shared) {
    std::lock_guard<std::mutex> lock(cut_mu_);
    if (cut_spares_.size() < 4) cut_spares_.push_back(std::move(whole));
  }
  return st;
}

Status Executor::run_whole(const NamedValues& feeds, NamedValues* outputs) {
  RETURN_IF_ERROR(check_feeds(feeds));
  return run_phase(feeds, Phase{0, 0, model_->graph.nodes.size(), nullptr}, outputs);
}

Status Executor::run_phase(const NamedValues& feeds, const Phase& phase, NamedValues* outputs, const Tensor* cut_rows) {
  const Graph& g = model_->graph;
  const PreparedGraph& pg = *graphs_.at(&g);
  std::unique_ptr<RunState> state = acquire_state();
  state->slots.resize(static_cast<size_t>(pg.num_slots));
  std::vector<int64_t> shapes_key{phase.tag};
  bool plannable = plan_memory_ && (!observer_ || !observer_keeps_outputs_);
  const auto bind = [&](int32_t slot, const Value& v) {
    state->slots[static_cast<size_t>(slot)] = v;
    plannable = plannable && v.kind == ValueKind::kTensor;
    shapes_key.push_back(v.tensor.rank());
    shapes_key.insert(shapes_key.end(), v.tensor.dims().begin(), v.tensor.dims().end());
  };
  if (phase.tag == 2) {
    for (const auto& [name, v] : feeds) bind(pg.slot_of.at(name), v);
  } else {
    for (size_t i = 0; i < g.inputs.size(); ++i)
      for (const auto& [name, v] : feeds)
        if (name == g.inputs[i].name) bind(pg.input_slots[i], v);
  }
  RunMemory memory;
  if (cut_rows && phase.cut && phase.cut->producer >= 0) {
    memory.rows_step = static_cast<int32_t>(phase.cut->producer);
    memory.rows_output = static_cast<int32_t>(phase.cut->producer_output);
    memory.rows_dest = *cut_rows;
  }
  for (const auto& [name, t] : feeds) {
    auto c = crossing_count_.find(name);
    if (c != crossing_count_.end() && t.is_tensor()) {
      memory.transfers.boundaries += c->second;
      memory.transfers.bytes += c->second * t.tensor.nbytes();
    }
  }
  std::unique_ptr<AllocationRecorder> recorder;
  if (plannable) {
    std::shared_ptr<const ArenaPlan> plan = find_plan(shapes_key);
    if (plan) {
      Status bound = state->arena.bind(std::move(plan));
      if (!bound.is_ok()) {
        for (Value& v : state->slots) v = Value();
        release_state(std::move(state));
        return bound;
      }
      memory.arena = &state->arena;
    } else {
      // The recording run's large tensors reuse each other's pages, and leave them to the arena
      // of the next run (runtime/page_blocks.h; FERRY_ARENA_REUSE=0: mapped one by one).
      std::shared_ptr<PageBlocks> blocks;
      if (page_reuse_enabled()) {
        blocks = state->arena.take_spare();
        // Huge pages even where the arena would not have them fresh (`ferry train`): a fault per
        // 2 MiB instead of per 4 KiB, and the arena takes them over without faults.
        if (!blocks)
          blocks = std::make_shared<PageBlocks>(huge_pages_allowed() ? PageBlocks::Huge::kWhole : PageBlocks::Huge::kNone);
      }
      recorder = std::make_unique<AllocationRecorder>(static_cast<int32_t>(g.nodes.size()), std::move(blocks));
      memory.recorder = recorder.get();
    }
  }
  Frame frame;
  frame.graph = &pg;
  frame.slots = &state->slots;
  Status st = run_graph(g, pg, frame, &memory, phase.begin, phase.end);
  if (st.is_ok() && phase.tag == 1) {
    outputs->clear();
    Value& v = state->slots[static_cast<size_t>(pg.slot_of.at(phase.cut->value))];
    if (!v.defined()) st = internal_error("the split's cut value '" + phase.cut->value + "' was not computed");
    else outputs->emplace_back(phase.cut->value, v);  // alive past the run: the plan leaves it on the heap
    if (st.is_ok()) copy_out_of_arena(state->arena, &outputs->back().second);
  } else if (st.is_ok()) {
    outputs->clear();
    for (size_t i = 0; i < g.outputs.size(); ++i) {
      const Value* v = frame.get(pg.outputs[i]);
      if (!v || !v->defined()) {
        st = internal_error("graph output '" + g.outputs[i].name + "' was not computed");
        break;
      }
      outputs->emplace_back(g.outputs[i].name, *v);
      copy_out_of_arena(state->arena, &outputs->back().second);
    }
  }
  if (recorder) {
    std::shared_ptr<const ArenaPlan> plan = recorder->finish();  // before the slots go: what is left escapes
    std::shared_ptr<PageBlocks> spare = recorder->take_blocks(plan->arena_bytes);  // the rest is unmapped
    if (st.is_ok()) {
      state->arena.set_spare(std::move(spare));
      store_plan(shapes_key, std::move(plan));
    }
  }
  if (memory.violated) store_plan(shapes_key, nullptr);  // the plan did not hold: record again next run
  for (Value& v : state->slots) v = Value();
  release_state(std::move(state));
  // The recording run's small tensors and its kernels' temporaries were heap allocations, freed by
  // now (its large tensors are mapped and gone: arena.cpp). glibc keeps freed chunks below its
  // mmap threshold as resident heap, under the arena of the next runs: give those pages back once.
  // (ResNet-50 b8 training peaked at 2.1 GiB with both on the heap and no trim, 1.31 GiB now.)
  if (recorder) trim_heap();
  {
    std::lock_guard<std::mutex> lock(stats_mu_);  // concurrent runs: the last one to finish wins
    last_transfers_ = memory.transfers;
  }
  return st;
}

Status Executor::run_graph(const Graph& g, const PreparedGraph& pg, Frame& frame, RunMemory* memory, size_t begin,
                           size_t end) {
  std::vector<Value>& slots = *frame.slots;
  // Reused by every node (KernelContext views them): no allocation per node on the run path.
  std::vector<Value> results;
  std::vector<const Value*> inputs;
  const bool observe = memory != nullptr;  // the main graph
  const std::atomic<bool>* terminate = run_terminate_flag();
  if (end == 0) end = g.nodes.size();
  for (size_t i = begin; i < end; ++i) {
    const Node& node = g.nodes[i];
    if (terminate && terminate->load(std::memory_order_relaxed))
      return invalid_argument(std::string(kRunTerminatedMessage) + " (before " + node.describe() + ")");
    const PreparedNode& pn = pg.nodes[i];
    const size_t num_inputs = pn.inputs.size();
    inputs.resize(num_inputs);
    for (size_t k = 0; k < num_inputs; ++k) {
      const ValueRef& ref = pn.inputs[k];
      if (ref.index < 0) {
        inputs[k] = nullptr;
        continue;
      }
      const Value* t = ref.depth == 0 ? (ref.constant ? &pg.constants[static_cast<size_t>(ref.index)]
                                                      : &slots[static_cast<size_t>(ref.index)])
                                      : frame.get(ref);
      // A plain tensor (nearly every edge) passes both checks below; the rest is checked in full.
      if (!t || t->kind != ValueKind::kTensor || !t->tensor.defined()) {
        if (ref.constant && ref.depth == 0 && pg.released.count(ref.index)) {  // the kernel holds its own form
          inputs[k] = nullptr;
          continue;
        }
        if (!t || !t->defined()) return internal_error(node.describe() + ": input '" + node.inputs[k] + "' is not available");
        if (!t->is_tensor() && !pn.schema->accepts_sequences)
          return invalid_argument(node.describe() + ": input " + std::to_string(k) + " ('" + node.inputs[k] + "') is " +
                                  t->describe() + ", but " + node.op_type + " takes tensors");
      }
      inputs[k] = t;
    }
    const size_t num_outputs = pn.outputs.size();
    results.resize(num_outputs);  // every entry empty: moved out, or reset, after the previous node
    if (memory && memory->recorder) memory->recorder->begin_step(static_cast<int32_t>(i), node, &inputs);
    KernelContext ctx(node, pn.opset, inputs.data(), num_inputs, &results);
    if (memory && memory->recorder) ctx.allocator = memory->recorder;
    if (memory && memory->arena && memory->arena->active()) {
      memory->arena->begin_step(static_cast<int32_t>(i));
      ctx.allocator = memory->arena;
    }
    std::optional<RowsAllocator> rows;
    if (memory && memory->rows_step == static_cast<int32_t>(i)) {
      rows.emplace(ctx.allocator, memory->rows_output, &memory->rows_dest);
      ctx.allocator = &*rows;
    }
    if (pn.has_subgraphs) {
      ctx.run_subgraph = [this, &frame](const Graph& body, const std::vector<Value>& body_inputs,
                                        std::vector<Value>* body_outputs) {
        return run_body(body, frame, body_inputs, body_outputs);
      };
    }
    const bool timed = observe && observer_;
    std::chrono::steady_clock::time_point start;
    if (timed) start = std::chrono::steady_clock::now();
    Status st = pn.kernel->compute(ctx);
    if (!st.is_ok()) {
      if (st.message().rfind("node '", 0) != 0) st = st.with_context(node.describe());
      return st;
    }
    for (size_t k = 0; k < num_outputs; ++k) {
      if (pn.outputs[k] < 0 || results[k].defined()) continue;  // -1: an omitted output
      return internal_error(node.describe() + ": the kernel did not produce output " + std::to_string(k) + " ('" +
                            node.outputs[k] + "')");
    }
    if (timed) {
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      observer_(node, results, ms);
    }
    if (observe && !crossing_count_.empty()) count_crossings(node, results, &memory->transfers);
    for (size_t k = 0; k < num_outputs; ++k) {
      if (pn.outputs[k] >= 0) slots[static_cast<size_t>(pn.outputs[k])] = std::move(results[k]);
      results[k] = Value();  // moved-from, or an omitted output a kernel may have set
    }
    for (int32_t s : pn.frees) slots[static_cast<size_t>(s)] = Value();
    if (memory && memory->arena && memory->arena->active() && !memory->arena->end_step(static_cast<int32_t>(i))) {
      memory->arena->abandon();  // a tensor outlived its planned step: keep it intact, use the heap from here
      memory->violated = true;
    }
  }
  return Status::ok();
}

Status Executor::run_body(const Graph& body, const Frame& outer, const std::vector<Value>& body_inputs,
                          std::vector<Value>* body_outputs) {
  auto it = graphs_.find(&body);
  if (it == graphs_.end()) return internal_error("subgraph '" + body.name + "' was not prepared");
  const PreparedGraph& pg = *it->second;
  if (body_inputs.size() != body.inputs.size())
    return invalid_model("subgraph '" + body.name + "' takes " + std::to_string(body.inputs.size()) +
                         " inputs, given " + std::to_string(body_inputs.size()));
  std::vector<Value> slots(static_cast<size_t>(pg.num_slots));
  for (size_t k = 0; k < body_inputs.size(); ++k) slots[static_cast<size_t>(pg.input_slots[k])] = body_inputs[k];
  Frame frame;
  frame.graph = &pg;
  frame.slots = &slots;
  frame.parent = &outer;
  RETURN_IF_ERROR(run_graph(body, pg, frame, nullptr));
  body_outputs->clear();
  for (size_t k = 0; k < body.outputs.size(); ++k) {
    const Value* v = frame.get(pg.outputs[k]);
    if (!v || !v->defined()) return internal_error("subgraph output '" + body.outputs[k].name + "' was not computed");
    body_outputs->push_back(*v);
  }
  return Status::ok();
}

}  // namespace ferry
