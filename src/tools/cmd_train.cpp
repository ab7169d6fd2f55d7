// `ferry train MODEL.onnx --data PATH ...`: fine-tune an exported PyTorch model (train/trainer.h).
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "common/env_switch.h"
#include "tools/command_registry.h"
#include "tools/cli_common.h"
#include "runtime/memory_estimate.h"
#include "tools/progress_bar.h"
#include "tools/train_launch.h"
#include "train/trainer.h"

namespace ferry::cli {
namespace {

// The process's malloc policy for training, set just before the training executor is made
// (TrainConfig::before_executor; the library sets no process state). The step's graph outputs
// (the parameter gradients, ~90 MB on ResNet-50) are heap tensors made and freed every step. glibc maps each block above its mmap threshold afresh and learns a higher
// threshold only as blocks are freed, so steps 2-3 first-touch them again: 23K page faults a step
// on this VM, ~9 us each. A fixed threshold above them keeps them in the heap, reused step after
// step, and a trim threshold above one step's outputs keeps the heap's top resident between steps.
// (The recording run's malloc_trim still gives its temporaries back once.) FERRY_TRAIN_MALLOPT=0
// leaves glibc's defaults.
void keep_freed_heap_pages() {
#if defined(__GLIBC__)
  const char* e = env_value("FERRY_TRAIN_MALLOPT");
  if (e && std::string(e) == "0") return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

struct TrainOptions {
  TrainConfig c;
  double lr = -1;
  double weight_decay = -1;
  std::string lr_schedule = "constant";
  bool no_shuffle = false;
  bool quiet = false;
  int nproc = 1;              // > 1: launch that many ranks on this machine (tools/train_launch.h)
  double dist_timeout = 300;  // seconds
  double init_scale = 0;   // > 0: given (turns loss scaling on)
  double loss_scale = 0;   // > 0: static scale
  bool recompute = false;
  std::string memory_limit;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// Ctrl-C: say where the run stopped and how to go on from there (async-signal-safe: write() only).
std::atomic<int64_t> g_step{0};
int64_t g_save_every = 0;
char g_interrupt_dir[1024] = "";  // --checkpoint-dir ("": none)

void write_str(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  ssize_t w = ::write(STDERR_FILENO, s, n);
  (void)w;
}

void write_int(int64_t v) {
  char buf[24];
  int i = 23;
  buf[i] = '\0';
  if (v == 0) buf[--i] = '0';
  while (v > 0 && i > 0) {
    buf[--i] = static_cast<char>('0' + v % 10);
    v /= 10;
  }
  write_str(buf + i);
}

void on_interrupt(int) {
  const int64_t step = g_step.load();
  write_str("\r\033[K\nferry train: interrupted after step ");
  write_int(step);
  if (g_interrupt_dir[0] != '\0' && g_save_every > 0) {
    const int64_t saved = step / g_save_every * g_save_every;
    if (saved > 0) {
      write_str("; the latest checkpoint is at step ");
      write_int(saved);
      write_str(". Resume: run the same command with --resume ");
      write_str(g_interrupt_dir);
      write_str("\n");
    } else {
      write_str("; no checkpoint was written yet (--save-every ");
      write_int(g_save_every);
      write_str("): nothing to resume\n");
    }
  } else {
    write_str("; nothing was saved. To be able to resume, train with --checkpoint-dir DIR --save-every N, then --resume DIR\n");
  }
  ::_exit(130);
}

void print_start(const TrainStart& b, const TrainConfig& c) {
  std::string data = std::to_string(b.samples) + (b.image_size > 0 ? " images" : " samples");
  if (b.image_size > 0) data += " (" + std::to_string(b.image_size) + "x" + std::to_string(b.image_size) + ")";
  if (b.classes > 0) {
    data += ", " + std::to_string(b.classes) + " classes";
    if (!b.class_names.empty()) {
      std::string names;
      for (size_t i = 0; i < b.class_names.size() && i < 8; ++i) names += (i ? ", " : "") + b.class_names[i];
      if (b.class_names.size() > 8) names += ", ... (" + std::to_string(b.class_names.size() - 8) + " more)";
      data += " (" + names + ")";
    }
  }
  if (b.eval_samples > 0) data += "; eval " + std::to_string(b.eval_samples);
  std::fprintf(stderr, "ferry train: %s: %s\n", c.model.c_str(), data.c_str());
  std::string batch = std::to_string(b.batch_size);
  if (b.accumulate > 1) batch += " x " + std::to_string(b.accumulate) + " accumulated";
  if (b.world_size > 1) batch += " x " + std::to_string(b.world_size) + " ranks";
  std::fprintf(stderr, "  %lld steps of batch %s on %s; %s lr %g%s%s\n", static_cast<long long>(b.total_steps), batch.c_str(),
               b.device.c_str(), b.optimizer.c_str(), b.lr, c.amp.empty() ? "" : ("; --amp " + c.amp).c_str(),
               c.checkpoint_dir.empty() ? "; no checkpoints (--checkpoint-dir)" : ("; checkpoints in " + c.checkpoint_dir).c_str());
  if (!b.resumed_from.empty())
    std::fprintf(stderr, "  resumed at step %lld from '%s'\n", static_cast<long long>(b.start_step), b.resumed_from.c_str());
}

int cmd_train(TrainOptions& o) {
  TrainConfig& c = o.c;
  c.shuffle = !o.no_shuffle;
  if (o.lr >= 0) c.optimizer.lr = o.lr;
  if (o.weight_decay >= 0) c.optimizer.weight_decay = o.weight_decay;
  c.schedule.kind = o.lr_schedule;
  if (o.init_scale > 0 && o.loss_scale > 0) return report(invalid_argument("give --init-scale (dynamic) or --loss-scale (static), not both"));
  if (o.init_scale > 0) c.scaler.init_scale = o.init_scale;
  if (o.loss_scale > 0) {
    c.scaler.init_scale = o.loss_scale;
    c.scaler.dynamic = false;
  }
  if (!c.amp.empty() && c.amp != "bf16" && c.amp != "fp16") return report(invalid_argument("--amp '" + c.amp + "': use bf16 or fp16"));
  if (!c.keep_fp32.empty() && c.amp.empty()) return report(invalid_argument("--keep-fp32 needs --amp bf16|fp16"));
  // fp16 turns GradScaler on (65536), as torch.cuda.amp with GradScaler; bf16 needs none.
  c.loss_scaling = c.loss_scaling || o.init_scale > 0 || o.loss_scale > 0 || c.amp == "fp16";
  if (!o.recompute && c.recompute_segments >= 0) return report(invalid_argument("--recompute-segments needs --recompute"));
  if (o.recompute && c.recompute_segments < 0) c.recompute_segments = 0;
  if (!o.memory_limit.empty()) {
    StatusOr<int64_t> limit = parse_byte_size(o.memory_limit);
    if (!limit.is_ok()) return report(limit.status().with_context("--memory-limit"));
    c.memory_limit = limit.value();
  }
  if ((c.steps > 0) == (c.epochs > 0)) return report(invalid_argument("give exactly one of --steps N and --epochs N"));
  if (o.nproc > 1) return launch_train_workers(o.nproc, c.threads);
  StatusOr<DistConfig> dist = dist_config_from_env(o.dist_timeout);
  if (!dist.is_ok()) return report(dist.status());
  c.dist = dist.value();
  const bool rank0 = c.dist.rank == 0;
  if (!rank0) o.quiet = true;  // rank 0 reports, as a DDP script prints on rank 0
  const std::string who =
      c.dist.distributed() ? "rank " + std::to_string(c.dist.rank) + " of " + std::to_string(c.dist.world_size) : "";
  ProgressBar bar;
  std::optional<double> last_accuracy;
  auto on_step = [&](const StepReport& r) {
    if (!r.eval) g_step.store(r.step);
    if (r.eval && c.loss == "cross_entropy") last_accuracy = r.eval_accuracy;
    if (o.quiet) return;
    if (r.eval) {
      bar.finish();
      std::fprintf(stderr, "epoch %lld step %lld: eval_loss %.4f eval_accuracy %.4f\n", static_cast<long long>(r.epoch),
                   static_cast<long long>(r.step), r.eval_loss, r.eval_accuracy);
      return;
    }
    const double remaining_s = r.time_ms * static_cast<double>(r.total_steps - r.step) / 1000.0;
    bar.update("train", r.step, r.total_steps,
               "epoch " + std::to_string(r.epoch) + "  loss " + fmt("%.4f", r.loss) + "  lr " + fmt("%.3g", r.lr) + "  " +
                   fmt("%.1f samples/s", r.samples_per_s) + "  ETA " + fmt("%.0f s", remaining_s));
  };
  auto on_start = [&](const TrainStart& b) {
    g_step.store(b.start_step);
    if (!o.quiet && !c.plan_memory) print_start(b, c);
  };
  if (!c.plan_memory && rank0) {
    g_save_every = c.checkpoint_dir.empty() ? 0 : (c.save_every > 0 ? c.save_every : 0);
    std::snprintf(g_interrupt_dir, sizeof g_interrupt_dir, "%s", c.checkpoint_dir.c_str());
    std::signal(SIGINT, on_interrupt);
  }
  // A rank writes to its peers' sockets: when a peer dies, the write must fail with EPIPE (Gloo
  // reports the lost rank, named) rather than kill this rank with SIGPIPE, which made the launcher
  // blame the surviving rank (train_ddp's "--nproc, rank 1 killed" case, under load).
  if (c.dist.distributed()) std::signal(SIGPIPE, SIG_IGN);
  c.before_executor = keep_freed_heap_pages;
  StatusOr<TrainSummary> s = run_training(c, on_step, on_start);
  bar.finish();
  if (!s.is_ok()) return report(who.empty() ? s.status() : s.status().with_context(who));
  if (!rank0) return kExitOk;
  if (c.plan_memory) {
    std::fputs(s.value().memory_plan.c_str(), stdout);
    if (!s.value().memory_fits) {
      std::fprintf(stderr, "ferry train: the plan does not fit the memory limit (exit 2): see 'largest batch that fits'\n");
      return kExitBadInput;
    }
    return kExitOk;
  }
  for (const auto& note : s.value().notes) std::fprintf(stderr, "ferry train: %s\n", note.c_str());
  std::string tail;
  if (last_accuracy) tail += fmt(", eval accuracy %.4f", *last_accuracy);
  tail += fmt(", %.1f ms/step", s.value().mean_step_ms);
  if (!c.out_path.empty()) tail += "; wrote " + c.out_path;
  if (!c.checkpoint_dir.empty()) tail += "; checkpoints in " + c.checkpoint_dir;
  std::printf("trained %lld steps: last loss %.6f%s\n", static_cast<long long>(s.value().steps_done), s.value().last_loss,
              tail.c_str());
  return kExitOk;
}

const bool kRegistered = register_command({"train", 35, [](CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  TrainConfig& c = o->c;
  CLI::App* cmd = app.add_subcommand("train", "Fine-tune an exported PyTorch model (ONNX) on an .npz or an ImageFolder, as PyTorch would");
  cmd->add_option("model", c.model, "ONNX model exported from PyTorch (training or eval mode)")->required();
  cmd->add_option("--data", c.data, ".npz (one array per model input + 'labels') or ImageFolder directory")->required();
  cmd->add_option("--eval", c.eval_data, "Evaluation data (same forms), run after each epoch and at the end");
  cmd->add_option("--image-size", c.image_size, "ImageFolder: crop size S (train RandomResizedCrop(S), eval Resize+CenterCrop)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch-size", c.batch_size, "Samples per step")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--steps", c.steps, "Optimizer steps (no default: give --steps or --epochs)")->check(CLI::PositiveNumber);
  cmd->add_option("--epochs", c.epochs, "Passes over the data (no default: give --steps or --epochs)")->check(CLI::PositiveNumber);
  cmd->add_flag("--no-shuffle", o->no_shuffle, "Step k takes rows (k-1)*B .. k*B-1, wrapping around");
  cmd->add_option("--seed", c.seed, "Seed of every random choice (shuffle, crops, dropout, fresh classifier)");
  cmd->add_option("--threads", c.threads, "Intra-op threads (default: the machine's cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--data-workers", c.data_workers, "Image decoding threads (default: half the cores; 0: in the step)");
  cmd->add_option("--device", c.device, "cpu (default), cpu-ref");
  std::string kinds;
  for (const std::string& k : optimizer_names()) kinds += (kinds.empty() ? "" : " | ") + k;
  cmd->add_option("--optimizer", c.optimizer.kind, kinds + " (default: sgd)")->check(CLI::IsMember(optimizer_names()));
  cmd->add_option("--lr", o->lr, "Learning rate (default: 0.01 for sgd, 0.001 for adam/adamw)");
  cmd->add_option("--momentum", c.optimizer.momentum, "SGD momentum");
  cmd->add_flag("--nesterov", c.optimizer.nesterov, "SGD Nesterov momentum");
  cmd->add_option("--dampening", c.optimizer.dampening, "SGD dampening");
  cmd->add_option("--weight-decay", o->weight_decay, "Weight decay (sgd/adam: coupled L2, default 0; adamw: decoupled, default 0.01)");
  cmd->add_option("--beta1", c.optimizer.beta1, "Adam beta1");
  cmd->add_option("--beta2", c.optimizer.beta2, "Adam beta2");
  cmd->add_option("--eps", c.optimizer.eps, "Adam eps");
  cmd->add_option("--lr-schedule", o->lr_schedule, "constant | step | cosine | onecycle")
      ->check(CLI::IsMember({"constant", "step", "cosine", "onecycle"}));
  cmd->add_option("--warmup-steps", c.schedule.warmup_steps, "Linear warm-up steps before the schedule");
  cmd->add_option("--step-size", c.schedule.step_size, "step schedule: steps between decays (required by --lr-schedule step; no default)");
  cmd->add_option("--gamma", c.schedule.gamma, "step schedule: decay factor");
  cmd->add_option("--clip-grad-norm", c.clip_grad_norm, "Clip the global gradient norm to X (torch.nn.utils.clip_grad_norm_; default: no clipping)");
  cmd->add_option("--loss", c.loss, "cross_entropy (labels are class indices) | mse")->check(CLI::IsMember({"cross_entropy", "mse"}));
  cmd->add_option("--label-smoothing", c.label_smoothing, "cross_entropy label smoothing");
  cmd->add_option("--freeze", c.freeze, "Freeze parameters whose name matches this regex");
  cmd->add_option("--num-classes", c.num_classes, "Replace the last Gemm/MatMul classifier with a fresh one of N classes (default: keep the model's)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--log", c.log_path, "JSONL log: one object per step and per evaluation");
  cmd->add_option("--out", c.out_path, "Write the trained inference model (.onnx)");
  cmd->add_option("--checkpoint-dir", c.checkpoint_dir, "Directory for checkpoints");
  cmd->add_option("--save-every", c.save_every, "Checkpoint every N steps and at the end (default: only at the end)")->check(CLI::PositiveNumber);
  cmd->add_option("--keep-checkpoints", c.keep_checkpoints, "Checkpoints kept")->check(CLI::PositiveNumber);
  cmd->add_option("--resume", c.resume, "Continue from a checkpoint file, or a directory's latest");
  cmd->add_flag("--skip-bad-images", c.skip_bad_images, "Skip unreadable images (counted) instead of stopping");
  cmd->add_option("-O,--opt-level", c.opt_level, "Graph optimization level of the training graph (default: 2; 0 on cpu-ref)");
  cmd->add_flag("-q,--quiet", o->quiet, "No progress bar");
  cmd->add_option("--nproc", o->nproc, "Data parallel: start N ranks on this machine (threads divided among them); "
                  "without it, RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT in the environment make this process one rank")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--sync-bn", c.sync_bn, "Data parallel: BatchNorm statistics over every rank's batch, as "
                "torch.nn.SyncBatchNorm (with one rank: plain BatchNorm)");
  cmd->add_option("--dist-timeout", o->dist_timeout, "Data parallel: seconds to wait for the ranks to arrive and for each "
                  "collective before failing")->check(CLI::PositiveNumber);
  cmd->add_option("--amp", c.amp, "Mixed precision as torch.autocast: Conv/ConvTranspose/Gemm/MatMul in bf16 or fp16, the rest "
                  "and the optimizer in f32 (fp16 turns loss scaling on)")->check(CLI::IsMember({"bf16", "fp16"}));
  cmd->add_option("--keep-fp32", c.keep_fp32, "--amp: nodes (ONNX names) kept in f32")->delimiter(',');
  cmd->add_option("--init-scale", o->init_scale, "Dynamic loss scaling (torch GradScaler) from this scale (default: off; 65536 with --amp fp16)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--growth-interval", c.scaler.growth_interval, "Loss scaling: good steps before the scale doubles")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--loss-scale", o->loss_scale, "Static loss scale (overflowing steps are still skipped; default: off)")->check(CLI::PositiveNumber);
  cmd->add_option("--accumulate", c.accumulate, "Micro-batches of --batch-size per optimizer step (gradient accumulation)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--memory-limit", o->memory_limit, "Refuse (exit 2) a run whose memory plan exceeds SIZE (512M, 3G; default: available now)");
  cmd->add_flag("--plan-memory", c.plan_memory, "Print the training memory plan and the largest batch that fits, without training");
  cmd->add_flag("--json", c.plan_json, "--plan-memory: as JSON");
  cmd->add_flag("--recompute", o->recompute, "Activation checkpointing: keep segment boundaries, recompute the rest in backward");
  cmd->add_option("--recompute-segments", c.recompute_segments, "Segments for --recompute (default: about sqrt(forward nodes))")
      ->check(CLI::PositiveNumber);
  return CommandRun{cmd, [o] { return cmd_train(*o); }};
}});

}  // namespace
}  // namespace ferry::cli
