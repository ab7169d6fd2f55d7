#include "runtime/arena.h"

#include "common/env_switch.h"
#include "runtime/page_blocks.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include <sys/mman.h>

namespace ferry {
namespace {

constexpr int32_t kStillAlive = INT32_MAX;

int64_t aligned_size(int64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

int64_t byte_size(DType dtype, const std::vector<int64_t>& dims) { return element_count(dims) * dtype_size(dtype); }

}  // namespace

// ---- recording ----------------------------------------------------------------------------

struct AllocationRecorder::State {
  struct Record {
    int32_t step = 0;
    int32_t output = 0;
    int64_t nbytes = 0;
    const void* data = nullptr;
    int32_t last = kStillAlive;  // step at which the buffer was released
    int32_t reuse = -1;          // record whose memory it may take over (in place)
  };
  std::mutex mu;
  bool open = true;
  int32_t step = 0;
  std::vector<Record> records;
  std::unordered_map<const void*, int32_t> live;  // buffer start -> record
  std::shared_ptr<PageBlocks> blocks;  // while open: the large tensors' pages go back here
};

namespace {
// The recording run's large tensors are mapped pages of their own, unmapped when released: from
// the heap they would leave it fragmented (glibc's mmap threshold rises to 32 MiB as large blocks
// are freed), and that heap stays resident under the arena of the runs that follow (ResNet-50 b8
// training: 1.49 GiB peak in the recording run against 1.31 with mapped tensors). With PageBlocks
// (the default) a released tensor's pages stay mapped for the next large tensor, and for the arena
// after the run: first touches cost a fault each, several microseconds on a VM (issue 18).
constexpr int64_t kRecordMapBytes = int64_t(256) << 10;

/// Frees (unmaps) a recorded buffer and notes the step at which its last reference went away.
struct ReleaseRecorded {
  std::shared_ptr<AllocationRecorder::State> state;
  int32_t id;
  size_t mapped;  // bytes mapped, 0: from the heap
  void operator()(void* p) const;
};
}  // namespace

void ReleaseRecorded::operator()(void* p) const {
  std::shared_ptr<PageBlocks> blocks;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    auto& r = state->records[static_cast<size_t>(id)];
    if (state->open) r.last = state->step;
    state->live.erase(r.data);
    blocks = state->blocks;
  }
  if (mapped && blocks) blocks->give(p, mapped);
  else if (mapped) munmap(p, mapped);
  else std::free(p);
}

AllocationRecorder::AllocationRecorder(int32_t num_steps, std::shared_ptr<PageBlocks> blocks)
    : state_(std::make_shared<State>()), num_steps_(num_steps) {
  state_->blocks = std::move(blocks);
}
AllocationRecorder::~AllocationRecorder() = default;

void AllocationRecorder::begin_step(int32_t step, const Node& node, const std::vector<const Value*>* inputs) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->step = step;
  in_place_op_ = op_may_run_in_place(node.domain, node.op_type);
  inputs_ = inputs;
}

bool AllocationRecorder::allocate(int64_t index, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out) {
  return record(index, index == 0 && in_place_op_ ? 0 : -1, true, dtype, dims, zero_fill, out);
}

bool AllocationRecorder::allocate_over(int64_t index, int64_t input, DType dtype, std::vector<int64_t>* dims,
                                       Tensor* out) {
  return record(index, input, false, dtype, dims, false, out);
}

bool AllocationRecorder::record(int64_t index, int64_t over, bool elementwise, DType dtype, std::vector<int64_t>* dims, bool zero_fill,
                                Tensor* out) {
  const int64_t nbytes = byte_size(dtype, *dims);
  if (nbytes == 0) return false;
  State& st = *state_;
  std::unique_lock<std::mutex> lock(st.mu);
  for (size_t i = st.records.size(); i-- > 0 && st.records[i].step == st.step;)
    if (st.records[i].output == index) return false;  // a second allocation of one output: heap
  State::Record rec;
  rec.step = st.step;
  rec.output = static_cast<int32_t>(index);
  rec.nbytes = nbytes;
  // In place: output 0 of an elementwise op over input 0's whole buffer, or an output a kernel
  // asked to have over an input (allocate_over), when no other input reads that buffer at another
  // offset or size. The planner checks that the buffer dies here.
  if (over >= 0 && inputs_ && static_cast<size_t>(over) < inputs_->size() && (*inputs_)[over] &&
      (*inputs_)[over]->is_tensor()) {
    const Tensor& x = (*inputs_)[over]->tensor;
    auto it = st.live.find(x.raw());
    if (it != st.live.end() && x.nbytes() == nbytes && st.records[static_cast<size_t>(it->second)].nbytes == nbytes) {
      const auto* begin = static_cast<const uint8_t*>(x.raw());
      bool clean = true;
      for (size_t j = 0; j < inputs_->size(); ++j) {
        if (j == static_cast<size_t>(over)) continue;
        const Value* v = (*inputs_)[j];
        // A weight a .ferry file stores only packed and nothing has read yet (Tensor::pending) is in
        // no arena buffer, and reading its address here would unpack it (ir/tensor.h LazyBytes).
        if (!v || !v->is_tensor() || v->tensor.pending() || !v->tensor.raw()) continue;
        const auto* p = static_cast<const uint8_t*>(v->tensor.raw());
        // An elementwise op may read the same whole buffer twice (Add(x, x)); other kernels may not
        // share it at all (a convolution reading x while its sum post-op writes over x).
        const bool same_whole = p == begin && v->tensor.nbytes() == nbytes && elementwise;
        if (p >= begin && p < begin + nbytes && !same_whole) clean = false;
      }
      if (clean) rec.reuse = it->second;
    }
  }
  const size_t size = static_cast<size_t>(aligned_size(nbytes));
  size_t mapped = 0;
  void* mem = nullptr;
  if (nbytes >= kRecordMapBytes && st.blocks) {
    bool reused = false;
    mem = st.blocks->take(size, &mapped, &reused);
    if (!mem) return false;
    if (reused && zero_fill) std::memset(mem, 0, static_cast<size_t>(nbytes));
  } else if (nbytes >= kRecordMapBytes) {
    void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return false;  // the heap path tries again and reports the size when it fails too
    mem = m, mapped = size;             // zero pages: no fill needed
  } else {
    mem = std::aligned_alloc(static_cast<size_t>(kArenaAlignment), size);
    if (!mem) return false;
    if (zero_fill) std::memset(mem, 0, static_cast<size_t>(nbytes));
  }
  const int32_t id = static_cast<int32_t>(st.records.size());
  rec.data = mem;
  st.records.push_back(rec);
  st.live[mem] = id;
  lock.unlock();
  std::shared_ptr<void> owner(mem, ReleaseRecorded{state_, id, mapped});
  *out = Tensor::wrap(dtype, std::move(*dims), std::move(owner), mem);
  return true;
}

std::shared_ptr<const ArenaPlan> AllocationRecorder::finish() {
  std::vector<State::Record> records;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->open = false;
    records = state_->records;
  }
  auto plan = std::make_shared<ArenaPlan>();
  std::vector<BufferRequest> requests;
  std::vector<int32_t> request_of(records.size(), -1);
  for (size_t i = 0; i < records.size(); ++i) {
    const State::Record& r = records[i];
    if (r.last == kStillAlive) {  // a graph output, or kept by someone past the run
      plan->unplanned_bytes += r.nbytes;
      ++plan->unplanned;
      continue;
    }
    request_of[i] = static_cast<int32_t>(requests.size());
    BufferRequest q;
    q.nbytes = r.nbytes;
    q.first = r.step;
    q.last = r.last;
    q.reuse = r.reuse >= 0 ? request_of[static_cast<size_t>(r.reuse)] : -1;
    requests.push_back(q);
    plan->allocs.push_back(PlannedAllocation{r.step, r.output, r.nbytes, 0, false});
  }
  const MemoryPlan mp = plan_memory(requests);
  for (size_t i = 0; i < plan->allocs.size(); ++i) {
    plan->allocs[i].offset = mp.offsets[i];
    plan->allocs[i].in_place = mp.in_place[i];
  }
  plan->arena_bytes = mp.arena_bytes;
  plan->planned_bytes = mp.total_bytes;
  plan->in_place = mp.in_place_count;
  // Index the allocations by step and by the step that releases them.
  plan->step_begin.assign(static_cast<size_t>(num_steps_) + 1, 0);
  plan->dying_begin.assign(static_cast<size_t>(num_steps_) + 1, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    ++plan->step_begin[static_cast<size_t>(requests[i].first) + 1];
    ++plan->dying_begin[static_cast<size_t>(requests[i].last) + 1];
  }
  for (size_t s = 0; s < static_cast<size_t>(num_steps_); ++s) {
    plan->step_begin[s + 1] += plan->step_begin[s];
    plan->dying_begin[s + 1] += plan->dying_begin[s];
  }
  plan->dying.assign(requests.size(), 0);
  std::vector<int32_t> fill(plan->dying_begin.begin(), plan->dying_begin.end() - 1);
  for (size_t i = 0; i < requests.size(); ++i)
    plan->dying[static_cast<size_t>(fill[static_cast<size_t>(requests[i].last)]++)] = static_cast<int32_t>(i);
  return plan;
}

std::shared_ptr<PageBlocks> AllocationRecorder::take_blocks(int64_t keep_bytes) {
  std::shared_ptr<PageBlocks> blocks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    blocks = std::move(state_->blocks);
    state_->blocks = nullptr;
  }
  if (blocks) blocks->trim(static_cast<size_t>(std::max<int64_t>(keep_bytes, 0)));
  return blocks;
}

// ---- serving from the arena ---------------------------------------------------------------

// The run arena: 2 MiB aligned and marked for transparent huge pages when it spans several of
// them, so the memory-bound layers of a large batch walk it without a TLB miss every 4 KiB.
static void* allocate_arena(int64_t bytes, bool want_huge) {
  static const bool huge = [] {
    const char* e = env_value("FERRY_ARENA_HUGEPAGES");
    return !(e && std::string(e) == "0");
  }();
  constexpr int64_t kHuge = int64_t{2} << 20;
  if (!huge || !want_huge || bytes < 2 * kHuge) return std::aligned_alloc(static_cast<size_t>(kArenaAlignment), static_cast<size_t>(bytes));
  const int64_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* mem = std::aligned_alloc(static_cast<size_t>(kHuge), static_cast<size_t>(rounded));
  if (mem) ::madvise(mem, static_cast<size_t>(rounded), MADV_HUGEPAGE);
  return mem;
}

/// Shared by every tensor made from one planned allocation: its use count says whether the
/// allocation is still referenced. Keeps the arena alive for tensors that outlive a run.
struct ArenaAllocator::Token {
  std::shared_ptr<uint8_t> arena;
};

ArenaAllocator::ArenaAllocator() = default;
ArenaAllocator::~ArenaAllocator() = default;

Status ArenaAllocator::bind(std::shared_ptr<const ArenaPlan> plan) {
  bool reusable = arena_ && arena_bytes_ >= plan->arena_bytes && tokens_.size() >= plan->allocs.size();
  for (const auto& t : tokens_) reusable = reusable && t.use_count() == 1;
  std::shared_ptr<PageBlocks> spare = std::move(spare_);  // unmapped on return, what is left of it
  if (!reusable) {
    const int64_t bytes = std::max<int64_t>(aligned_size(plan->arena_bytes), kArenaAlignment);
    void* mem = nullptr;
    size_t mapped = 0;
    if (spare && spare->kept_bytes() > 0) {  // the recording run's pages, moved into place, then fresh ones
      bool reused = false;
      mem = spare->take(static_cast<size_t>(bytes), &mapped, &reused);
    } else {
      mem = allocate_arena(bytes, huge_pages_);
    }
    if (!mem)
      return resource_exhausted("out of memory: cannot allocate the run's arena of " + std::to_string(bytes) +
                                " bytes (try a smaller batch, or --memory-limit to see what fits)");
    if (mapped) arena_.reset(static_cast<uint8_t*>(mem), [mapped](uint8_t* p) { munmap(p, mapped); });
    else arena_.reset(static_cast<uint8_t*>(mem), [](uint8_t* p) { std::free(p); });
    arena_bytes_ = bytes;
    tokens_.clear();
  }
  while (tokens_.size() < plan->allocs.size()) tokens_.push_back(std::make_shared<Token>(Token{arena_}));
  served_.assign(plan->allocs.size(), 0);
  range_begin_ = arena_.get();
  range_end_ = arena_.get() + arena_bytes_;
  plan_ = std::move(plan);
  active_ = true;
  return Status::ok();
}

void ArenaAllocator::begin_step(int32_t step) { step_ = step; }

bool ArenaAllocator::allocate(int64_t index, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out) {
  if (!active_ || static_cast<size_t>(step_) + 1 >= plan_->step_begin.size()) return false;
  const int32_t end = plan_->step_begin[static_cast<size_t>(step_) + 1];
  for (int32_t i = plan_->step_begin[static_cast<size_t>(step_)]; i < end; ++i) {
    const PlannedAllocation& a = plan_->allocs[static_cast<size_t>(i)];
    if (a.output != index || served_[static_cast<size_t>(i)]) continue;
    const int64_t nbytes = byte_size(dtype, *dims);
    if (nbytes != a.nbytes) return false;  // a shape the plan did not see (data-dependent): heap
    served_[static_cast<size_t>(i)] = 1;
    uint8_t* p = arena_.get() + a.offset;
    if (zero_fill && !a.in_place) std::memset(p, 0, static_cast<size_t>(nbytes));
    *out = Tensor::wrap(dtype, std::move(*dims), std::shared_ptr<const void>(tokens_[static_cast<size_t>(i)], p), p);
    return true;
  }
  return false;
}

bool ArenaAllocator::end_step(int32_t step) {
  if (!active_) return true;
  const size_t s = static_cast<size_t>(step);
  for (int32_t k = plan_->dying_begin[s]; k < plan_->dying_begin[s + 1]; ++k) {
    const size_t i = static_cast<size_t>(plan_->dying[static_cast<size_t>(k)]);
    if (served_[i] && tokens_[i].use_count() > 1) return false;
  }
  // Allocations served at this step that the plan releases later are checked then.
  return true;
}

void ArenaAllocator::abandon() {
  active_ = false;
  arena_.reset();
  arena_bytes_ = 0;
  tokens_.clear();
}

bool ArenaAllocator::contains(const void* p) const {
  const auto* q = static_cast<const uint8_t*>(p);
  return q && q >= range_begin_ && q < range_end_;
}

}  // namespace ferry
