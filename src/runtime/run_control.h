// Controls of a run in progress, as ONNX Runtime's RunOptions.terminate: a flag that another
// thread sets to end the runs that use it. Session::run (compiler/session.h) makes it the calling
// thread's for the duration of a run; the executor checks it before every node of the main graph
// and of subgraphs (also on the threads that run a split batch's parts), so a set flag ends the
// run within one node's time.
#pragma once

#include <atomic>

namespace ferry {

/// The calling thread's terminate flag (nullptr: none).
const std::atomic<bool>* run_terminate_flag();

/// Makes `flag` the calling thread's terminate flag until destroyed (then the previous one again).
class ScopedRunTerminate {
 public:
  explicit ScopedRunTerminate(const std::atomic<bool>* flag);
  ~ScopedRunTerminate();
  ScopedRunTerminate(const ScopedRunTerminate&) = delete;
  ScopedRunTerminate& operator=(const ScopedRunTerminate&) = delete;

 private:
  const std::atomic<bool>* saved_;
};

/// The message of a run ended by its terminate flag (callers tell it from other failures by the flag).
inline constexpr const char* kRunTerminatedMessage = "the run was terminated: RunOptions.terminate was set";

}  // namespace ferry
