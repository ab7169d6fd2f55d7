// `ferry train ... --nproc N`: the launcher, as torchrun --standalone. It starts N copies of this
// very command (without --nproc) with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a
// free MASTER_PORT set, the threads divided among them, waits for all, and when one fails stops
// the others and exits non-zero naming it.
#pragma once

namespace ferry::cli {

/// Runs the workers; returns the process exit code (0, or the failed rank's code: 2 for its
/// input, 1 otherwise). `threads`: the job's intra-op threads (0: the machine's cores).
int launch_train_workers(int nproc, int threads);

}  // namespace ferry::cli
