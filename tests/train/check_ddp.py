"""`ferry train` data parallel against PyTorch's own DDP on gloo: the small CNN with BatchNorm of
train_models.py, 2 ranks, 6 steps of SGD momentum: rank 0's per-step losses and the final weights
(BN statistics included) within 1e-4 relative, for `--nproc 2` and for the environment launch
(RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT); `--sync-bn` on 2 ranks against torch.nn.SyncBatchNorm's
math (see sync_bn_reference), on one process exactly plain BatchNorm, refused without
BatchNorm, and a peer killed mid-exchange stopping the survivor. Then the failures that must never hang: a missing
peer (exit 2 within a short --dist-timeout, naming the rank and the address), a peer killed by
SIGKILL mid-run (the survivor exits non-zero naming it; the last checkpoint resumes on one
process, and on two bit for bit as the uninterrupted run), a worker of --nproc killed (the
launcher names it).

usage: check_ddp.py FERRY WORKDIR"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_models as tm  # noqa: E402

FERRY, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
BATCH, STEPS, N, WORLD = 4, 6, 32, 2
OPT = ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "1e-4"]
failures = []
T0 = time.time()

# PyTorch's DDP, one process per rank: DistributedSampler(shuffle=False) order, batch per rank,
# K micro-batches per step (no_sync on all but the last).
REF = r'''
import contextlib, json, sys
import numpy as np, onnx, onnx.numpy_helper, torch, torch.distributed as dist, torch.nn.functional as F
sys.path.insert(0, HERE)
import train_models as tm
torch.set_num_threads(1)
rank, world, port, work, K = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
model, _, _ = tm.make("cnn")
init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(work + "/model.onnx").graph.initializer}
for key, v in model.state_dict().items():
    if key in init:
        v.copy_(torch.from_numpy(init[key].copy()))
ddp = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
d = np.load(work + "/data.npz")
x, y = d["x"], d["labels"]
shard = list(range(rank, len(x), world))
losses = []
for k in range(1, STEPS + 1):
    opt.zero_grad()
    total = 0.0
    for j in range(K):  # accumulation: gradients stay local (no_sync) but on the last micro-batch
        m = (k - 1) * K + j + 1
        rows = [shard[r % len(shard)] for r in range((m - 1) * BATCH, m * BATCH)]
        with ddp.no_sync() if j < K - 1 else contextlib.nullcontext():
            loss = F.cross_entropy(ddp(torch.from_numpy(x[rows])), torch.from_numpy(y[rows]))
            (loss / K).backward()
        total += loss.item()
    opt.step()
    losses.append(total / K)
if rank == 0:
    np.savez(f"{work}/ref_weights_{K}.npz", **{k: v.numpy() for k, v in model.state_dict().items()})
    json.dump(losses, open(f"{work}/ref_losses_{K}.json", "w"))
dist.destroy_process_group()
'''


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-12))


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rank_env(rank, port, world=WORLD):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    return env


def train_args(tag, steps=STEPS, out=True):
    return ["train", os.path.join(WORK, "model.onnx"), "--data", os.path.join(WORK, "data.npz"), "--batch-size",
            str(BATCH), "--steps", str(steps), "--no-shuffle", "-q", "--log", os.path.join(WORK, tag + ".jsonl"), *OPT,
            *(["--out", os.path.join(WORK, tag + ".onnx")] if out else [])]


def compare(tag, ref_losses, ref_weights):
    steps = [r for r in read_log(os.path.join(WORK, tag + ".jsonl")) if "loss" in r]
    if [r["step"] for r in steps] != list(range(1, STEPS + 1)):
        fail(f"{tag}: log steps {[r['step'] for r in steps]}")
        return
    if any(r.get("rank") != 0 or r.get("world_size") != WORLD for r in steps):
        fail(f"{tag}: log lines lack rank 0 / world_size {WORLD}: {steps[0]}")
    err = rel([r["loss"] for r in steps], ref_losses)
    print(f"{tag}: rank 0 losses vs PyTorch DDP max rel diff {err:.2e}")
    if err > 1e-4:
        fail(f"{tag}: losses {[r['loss'] for r in steps]} != PyTorch DDP {ref_losses}")
    trained = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(os.path.join(WORK, tag + ".onnx")).graph.initializer}
    worst, worst_name = 0.0, ""
    for key, v in ref_weights.items():
        if key.endswith("num_batches_tracked"):
            continue
        e = rel(trained[key], v)
        if e > worst:
            worst, worst_name = e, key
    print(f"{tag}: final weights vs PyTorch DDP max rel diff {worst:.2e} ({worst_name})")
    if worst > 1e-4:
        fail(f"{tag}: final weight '{worst_name}' differs from PyTorch DDP by {worst:.2e}")


def wait_all(procs, timeout):
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=max(1, timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            fail(f"a process hung ({' '.join(p.args[:3])}...)")
        out.append((p.returncode, e))
    return out


# --- setup and the PyTorch DDP reference ---
model, shape, classes = tm.make("cnn")
tm.export(model, shape, os.path.join(WORK, "model.onnx"))
x, y = tm.data(shape, classes, N, seed=1)
np.savez(os.path.join(WORK, "data.npz"), x=x, labels=y)
ref_py = os.path.join(WORK, "ddp_ref.py")
with open(ref_py, "w") as f:
    f.write(f"HERE = {HERE!r}\nSTEPS, BATCH = {STEPS}, {BATCH}\n" + REF)
HAS_ACCUMULATE = "--accumulate" in subprocess.run([FERRY, "train", "--help"], capture_output=True, text=True).stdout
refs = []
for K in [1, 2] if HAS_ACCUMULATE else [1]:
    port = free_port()
    refs += [subprocess.Popen([sys.executable, ref_py, str(r), str(WORLD), str(port), WORK, str(K)], stderr=subprocess.PIPE,
                              text=True) for r in range(WORLD)]
for rc, err in wait_all(refs, 120):
    if rc != 0:
        fail(f"PyTorch DDP reference failed:\n{err[-2000:]}")
if failures:
    sys.exit(1)
ref_losses = json.load(open(os.path.join(WORK, "ref_losses_1.json")))
ref_weights = dict(np.load(os.path.join(WORK, "ref_weights_1.npz")))

# --- --nproc 2 ---
p = subprocess.run([FERRY, *train_args("nproc"), "--nproc", "2", "--threads", "2"], capture_output=True, text=True, timeout=120)
if p.returncode != 0:
    fail(f"--nproc 2 exited {p.returncode}:\n{p.stderr[-2000:]}")
else:
    compare("nproc", ref_losses, ref_weights)

# --- gradient accumulation: no_sync on all micro-batches but the last ---
if HAS_ACCUMULATE:
    p = subprocess.run([FERRY, *train_args("accumulate"), "--accumulate", "2", "--nproc", "2", "--threads", "2"],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail(f"--nproc 2 --accumulate 2 exited {p.returncode}:\n{p.stderr[-2000:]}")
    else:
        compare("accumulate", json.load(open(os.path.join(WORK, "ref_losses_2.json"))),
                dict(np.load(os.path.join(WORK, "ref_weights_2.npz"))))

# --- the environment launch ---
port = free_port()
procs = [subprocess.Popen([FERRY, *train_args("env"), "--threads", "1"], env=rank_env(r, port), stderr=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) for r in range(WORLD)]
res = wait_all(procs, 120)
if any(rc != 0 for rc, _ in res):
    fail(f"environment launch exited {[rc for rc, _ in res]}:\n{res[0][1][-1500:]}\n{res[1][1][-1500:]}")
else:
    compare("env", ref_losses, ref_weights)

# --- --sync-bn: BatchNorm statistics over both ranks' batches ---
def sync_bn_reference():
    """torch.nn.SyncBatchNorm of python3-torch 1.13 refuses CPU tensors ("SyncBatchNorm expected input
    tensor to be on GPU") and its kernels (batch_norm_stats, ...) have no CPU implementation, so
    the reference is its math on one process: every step runs the 2 ranks' batches (the
    DistributedSampler shards of --no-shuffle) concatenated in rank order through plain BatchNorm
    in train mode, whose statistics are then SyncBatchNorm's global ones (running_var from the
    global unbiased variance); the loss is the mean of the ranks' local mean losses, whose
    gradient is DDP's average of the ranks' gradients (SyncBatchNorm's backward reduces sum(dy)
    and sum(dy * (x - mean)) over the ranks: exactly the chain rule of that loss). Rank 0's loss
    is the cross entropy of its own rows."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    net, _, _ = tm.make("cnn")
    init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(os.path.join(WORK, "model.onnx")).graph.initializer}
    with torch.no_grad():
        for key, v in net.state_dict().items():
            if key in init:
                v.copy_(torch.from_numpy(init[key].copy()))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    shards = [list(range(r, N, WORLD)) for r in range(WORLD)]
    losses = []
    for k in range(1, STEPS + 1):
        rows = [[sh[i % len(sh)] for i in range((k - 1) * BATCH, k * BATCH)] for sh in shards]
        out = net(torch.from_numpy(x[sum(rows, [])]))
        per_rank = [F.cross_entropy(out[r * BATCH:(r + 1) * BATCH], torch.from_numpy(y[rows[r]])) for r in range(WORLD)]
        opt.zero_grad()
        (sum(per_rank) / WORLD).backward()
        opt.step()
        losses.append(per_rank[0].item())
    return losses, {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}


t_sync = time.time()
sync_losses, sync_weights = sync_bn_reference()
# The check must be able to fail: with per-rank statistics (sync off) the run is PyTorch's plain DDP.
apart = rel(ref_losses, sync_losses)
print(f"sync-bn reference vs per-rank-statistics DDP: losses differ by {apart:.2e} relative")
if apart < 1e-3:
    fail(f"the sync-bn reference is too close to plain DDP ({apart:.2e}) to tell synchronized statistics apart")
p = subprocess.run([FERRY, *train_args("syncbn"), "--sync-bn", "--nproc", "2", "--threads", "2"], capture_output=True,
                   text=True, timeout=120)
if p.returncode != 0:
    fail(f"--nproc 2 --sync-bn exited {p.returncode}:\n{p.stderr[-2000:]}")
else:
    compare("syncbn", sync_losses, sync_weights)
# One process: exactly plain BatchNorm (SyncBatchNorm falls back to batch_norm in a world of one).
one = [subprocess.run([FERRY, *train_args(tag, steps=3), *extra, "--threads", "1"], capture_output=True, text=True, timeout=60)
       for tag, extra in (("plain1", []), ("syncbn1", ["--sync-bn"]))]
if any(q.returncode != 0 for q in one):
    fail(f"one process with/without --sync-bn exited {[q.returncode for q in one]}:\n{one[1].stderr[-1500:]}")
else:
    logs = [[r["loss"] for r in read_log(os.path.join(WORK, t + ".jsonl")) if "loss" in r] for t in ("plain1", "syncbn1")]
    outs = [{t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(os.path.join(WORK, f + ".onnx")).graph.initializer}
            for f in ("plain1", "syncbn1")]
    if logs[0] != logs[1] or any(not np.array_equal(outs[0][k], outs[1][k]) for k in outs[0]):
        fail(f"--sync-bn on one process differs from plain BatchNorm: losses {logs[1]} vs {logs[0]}")
    else:
        print("--sync-bn on one process: bit for bit plain BatchNorm")
# A model without BatchNorm: refused, exit 2, saying so.
block, bshape, bclasses = tm.make("block")
tm.export(block, bshape, os.path.join(WORK, "nobn.onnx"))
bx, by = tm.data(bshape, bclasses, 8, seed=2)
np.savez(os.path.join(WORK, "nobn.npz"), x=bx, labels=by)
p = subprocess.run([FERRY, "train", os.path.join(WORK, "nobn.onnx"), "--data", os.path.join(WORK, "nobn.npz"), "--batch-size",
                    "2", "--steps", "1", "-q", "--sync-bn", *OPT], capture_output=True, text=True, timeout=60)
if p.returncode != 2 or "--sync-bn" not in p.stderr or "no BatchNormalization" not in p.stderr:
    fail(f"--sync-bn without BatchNorm: exit {p.returncode}, expected 2 saying the model has no BatchNormalization:\n{p.stderr}")
# A peer killed while the ranks exchange BatchNorm statistics inside the step: the survivor stops at once.
port = free_port()
log = os.path.join(WORK, "syncbn_killed.jsonl")
if os.path.exists(log):
    os.remove(log)
procs = [subprocess.Popen([FERRY, *train_args("syncbn_killed", steps=100000, out=False), "--sync-bn", "--threads", "1",
                           "--dist-timeout", "20"], env=rank_env(r, port), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) for r in range(WORLD)]
deadline = time.time() + 30
while time.time() < deadline and not (os.path.exists(log) and sum(1 for _ in open(log)) >= 10):
    time.sleep(0.05)
procs[1].send_signal(signal.SIGKILL)
t = time.time()
(rc0, err0), _ = wait_all(procs, 30)
took = time.time() - t
print(f"--sync-bn, rank 1 killed: rank 0 exit {rc0} after {took:.1f} s: {err0.strip()[:300]}")
if rc0 == 0 or "rank 1 was lost" not in err0 or took > 25:
    fail(f"--sync-bn, rank 1 killed: rank 0 exited {rc0} after {took:.1f} s, expected non-zero naming 'rank 1 was lost':\n{err0}")
print(f"sync-bn checks: {time.time() - t_sync:.1f} s")

# --- a missing peer: rank 0 alone, then rank 1 alone ---
port = free_port()
t = time.time()
p = subprocess.run([FERRY, *train_args("missing"), "--threads", "1", "--dist-timeout", "2"], env=rank_env(0, port),
                   capture_output=True, text=True, timeout=60)
took = time.time() - t
print(f"missing rank 1: exit {p.returncode} after {took:.1f} s: {p.stderr.strip()[:300]}")
if p.returncode != 2 or "rank 1" not in p.stderr or str(port) not in p.stderr or took > 15:
    fail(f"a missing rank 1: exit {p.returncode} after {took:.1f} s, expected 2 naming 'rank 1' and port {port}:\n{p.stderr}")
p = subprocess.run([FERRY, *train_args("missing0"), "--threads", "1", "--dist-timeout", "2"], env=rank_env(1, port),
                   capture_output=True, text=True, timeout=60)
if p.returncode != 2 or "rank 0" not in p.stderr or f"127.0.0.1:{port}" not in p.stderr:
    fail(f"a missing rank 0: exit {p.returncode}, expected 2 naming rank 0 and the address:\n{p.stderr}")

# --- a peer killed by SIGKILL mid-run; the checkpoint resumes, on another world size too ---
ck = os.path.join(WORK, "ck")
for f in os.listdir(ck) if os.path.isdir(ck) else []:
    os.remove(os.path.join(ck, f))
port = free_port()
long_run = train_args("killed", steps=100000, out=False) + ["--threads", "1", "--dist-timeout", "20", "--checkpoint-dir", ck,
                                                      "--save-every", "20"]
procs = [subprocess.Popen([FERRY, *long_run], env=rank_env(r, port), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) for r in range(WORLD)]
log = os.path.join(WORK, "killed.jsonl")
if os.path.exists(log):
    os.remove(log)
deadline = time.time() + 30
while time.time() < deadline and not (os.path.exists(log) and sum(1 for _ in open(log)) >= 45):
    time.sleep(0.1)
procs[1].send_signal(signal.SIGKILL)
t = time.time()
(rc0, err0), (_, err1) = wait_all(procs, 30)
took = time.time() - t
print(f"rank 1 killed: rank 0 exit {rc0} after {took:.1f} s: {err0.strip()[:400]}")
if rc0 == 0 or "rank 1 was lost" not in err0 or took > 25:
    fail(f"rank 1 killed: rank 0 exited {rc0} after {took:.1f} s, expected non-zero naming 'rank 1 was lost':\n{err0}\nrank 1: {err1}")
kept = sorted(os.listdir(ck)) if os.path.isdir(ck) else []
if not kept or any(not f.endswith(".fckpt") for f in kept):
    fail(f"rank 1 killed: checkpoints {kept}")
else:
    resumed_step = int(kept[-1].split("-")[1].split(".")[0])
    resume = train_args("resumed1", steps=resumed_step + 2, out=False) + ["--threads", "1", "--resume", ck]
    p = subprocess.run([FERRY, *resume], capture_output=True, text=True, timeout=60)
    steps = [r["step"] for r in read_log(os.path.join(WORK, "resumed1.jsonl")) if "loss" in r] if p.returncode == 0 else []
    if p.returncode != 0 or steps[-2:] != [resumed_step + 1, resumed_step + 2]:
        fail(f"resume on 1 process from step {resumed_step}: exit {p.returncode}, steps {steps[-3:]}:\n{p.stderr[-1500:]}")
    else:
        print(f"resume from the step-{resumed_step} checkpoint of the killed 2-rank run: 1 process continues")
    # The same world size: bit for bit the uninterrupted 2-rank run.
    full = train_args("full2", steps=resumed_step + 2, out=False) + ["--nproc", "2", "--threads", "2"]
    again = train_args("resumed2", steps=resumed_step + 2, out=False) + ["--nproc", "2", "--threads", "2", "--resume", ck]
    ps = [subprocess.run([FERRY, *a], capture_output=True, text=True, timeout=60) for a in (full, again)]
    losses = [[(r["step"], r["loss"]) for r in read_log(os.path.join(WORK, t + ".jsonl")) if "loss" in r][-2:]
              for t in ("full2", "resumed2")] if all(q.returncode == 0 for q in ps) else None
    if not losses or losses[0] != losses[1]:
        fail(f"resume on 2 ranks: {losses} (exits {[q.returncode for q in ps]}):\n{ps[1].stderr[-1500:]}")
    else:
        print(f"resume on 2 ranks: steps {resumed_step + 1}-{resumed_step + 2} equal the uninterrupted run bit for bit")

# --- a worker of --nproc killed: the launcher names it and stops the other ---
log = os.path.join(WORK, "launcher.jsonl")
if os.path.exists(log):
    os.remove(log)
p = subprocess.Popen([FERRY, *train_args("launcher", steps=100000, out=False), "--nproc", "2", "--threads", "2", "--dist-timeout", "20"],
                     stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
deadline = time.time() + 30
while time.time() < deadline and not (os.path.exists(log) and sum(1 for _ in open(log)) >= 5):
    time.sleep(0.1)
children = [int(d) for d in os.listdir("/proc") if d.isdigit() and os.path.exists(f"/proc/{d}/stat")
            and open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1] == str(p.pid)]
victim = next((c for c in children if "RANK=1" in open(f"/proc/{c}/environ").read().split("\0")), None)
if victim is None:
    fail(f"--nproc: no rank 1 among the launcher's children {children}")
    p.kill()
else:
    os.kill(victim, signal.SIGKILL)
(rc, err), = wait_all([p], 30)
print(f"--nproc, rank 1 killed: launcher exit {rc}: {err.strip()[-300:]}")
if rc == 0 or "rank 1" not in err:
    fail(f"--nproc with rank 1 killed: launcher exited {rc}, expected non-zero naming rank 1:\n{err}")

print(f"check_ddp: {time.time() - T0:.1f} s")
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all data-parallel checks passed")
