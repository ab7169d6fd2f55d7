#!/usr/bin/env python3
"""References for tests/unit/test_train_optimizer.cpp, computed with PyTorch (1.13).

Usage: gen_optim_refs.py OUTDIR

Writes into OUTDIR:
  optim_cases.txt   one line per optimizer case:
                    name kind lr momentum dampening weight_decay|default nesterov beta1 beta2 eps amsgrad nparams
  optim_<name>.npz  p<i> (initial params), g<step>_<i> (gradient; absent = None), lr (per step, f64),
                    mid.<kind>.p<i> (torch's state after 5 steps), final_p<i> (params after 10 steps)
  sched_cases.txt   name kind base_lr total warmup step_size gamma eta_min max_lr|none pct_start nsteps
  sched_<name>.npy  get_last_lr() after 0..nsteps-1 scheduler steps (f64)
  clip_cases.txt    name max_norm ngrads
  clip_<name>.npz   g<i> (input), c<i> (clipped), total_norm
"""
import os
import sys

import numpy as np
import torch

STEPS = 10
MID = 5

# name, kind, lr, momentum, dampening, weight_decay (None: torch's default), nesterov, beta1, beta2, eps, amsgrad,
# large (adds a 40000-element parameter: several chunks, so the threaded path runs)
OPTIM_CASES = [
    ("sgd_plain", "sgd", 0.1, 0.0, 0.0, None, False, 0.9, 0.999, 1e-8, False, False),
    ("sgd_weight_decay", "sgd", 0.05, 0.0, 0.0, 0.05, False, 0.9, 0.999, 1e-8, False, False),
    ("sgd_momentum", "sgd", 0.05, 0.9, 0.0, None, False, 0.9, 0.999, 1e-8, False, True),
    ("sgd_dampening", "sgd", 0.05, 0.9, 0.3, 0.01, False, 0.9, 0.999, 1e-8, False, False),
    ("sgd_nesterov", "sgd", 0.03, 0.8, 0.0, 1e-3, True, 0.9, 0.999, 1e-8, False, True),
    ("adam_default", "adam", 1e-3, 0.0, 0.0, None, False, 0.9, 0.999, 1e-8, False, True),
    ("adam_weight_decay", "adam", 3e-3, 0.0, 0.0, 0.1, False, 0.8, 0.99, 1e-6, False, False),
    ("adam_amsgrad", "adam", 2e-3, 0.0, 0.0, 0.01, False, 0.9, 0.999, 1e-8, True, False),
    ("adamw_default", "adamw", 1e-3, 0.0, 0.0, None, False, 0.9, 0.999, 1e-8, False, False),
    ("adamw_weight_decay", "adamw", 5e-3, 0.0, 0.0, 0.2, False, 0.85, 0.995, 1e-7, False, True),
    ("adamw_amsgrad", "adamw", 1e-3, 0.0, 0.0, 0.05, False, 0.9, 0.999, 1e-8, True, True),
]

SHAPES = [(4, 9), (101,), (3, 5, 7)]
NONE_GRAD = {1: {0, 1, 6}}  # param index -> steps where its grad is None


def make_optimizer(kind, params, lr, momentum, dampening, wd, nesterov, b1, b2, eps, amsgrad):
    kw = {} if wd is None else {"weight_decay": wd}
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov, **kw)
    cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
    return cls(params, lr=lr, betas=(b1, b2), eps=eps, amsgrad=amsgrad, foreach=False, **kw)


def gen_optim(out, rng):
    lines = []
    for case in OPTIM_CASES:
        name, kind, lr, momentum, dampening, wd, nesterov, b1, b2, eps, amsgrad, large = case
        shapes = SHAPES + ([(40000,)] if large else [])
        arrays = {}
        params = []
        for i, shape in enumerate(shapes):
            p0 = rng.standard_normal(shape).astype(np.float32)
            arrays[f"p{i}"] = p0
            params.append(torch.nn.Parameter(torch.from_numpy(p0.copy())))
        opt = make_optimizer(kind, params, lr, momentum, dampening, wd, nesterov, b1, b2, eps, amsgrad)
        lrs = np.array([lr * (1 - 0.03 * s) for s in range(STEPS)], dtype=np.float64)
        arrays["lr"] = lrs
        for s in range(STEPS):
            for i, p in enumerate(params):
                if s in NONE_GRAD.get(i, ()):
                    p.grad = None
                    continue
                g = (rng.standard_normal(shapes[i]) * (0.5 + s * 0.1)).astype(np.float32)
                arrays[f"g{s}_{i}"] = g
                p.grad = torch.from_numpy(g.copy())
            for group in opt.param_groups:
                group["lr"] = float(lrs[s])
            opt.step()
            if s + 1 == MID:
                for i, p in enumerate(params):
                    for key, value in opt.state.get(p, {}).items():
                        if value is not None:
                            arrays[f"mid.{key}.p{i}"] = value.detach().numpy().astype(np.float32)
        for i, p in enumerate(params):
            arrays[f"final_p{i}"] = p.detach().numpy()
        np.savez(os.path.join(out, f"optim_{name}.npz"), **arrays)
        wd_text = "default" if wd is None else repr(wd)
        lines.append(f"{name} {kind} {lr!r} {momentum!r} {dampening!r} {wd_text} {int(nesterov)} {b1!r} {b2!r} "
                     f"{eps!r} {int(amsgrad)} {len(shapes)}")
    with open(os.path.join(out, "optim_cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


# name, kind, base_lr, total_steps, warmup, step_size, gamma, eta_min, max_lr (None: base), pct_start, nsteps
SCHED_CASES = [
    ("constant", "constant", 0.1, 0, 0, 0, 0.1, 0.0, None, 0.3, 30),
    ("constant_warmup", "constant", 0.1, 0, 5, 0, 0.1, 0.0, None, 0.3, 30),
    ("step", "step", 0.3, 0, 0, 7, 0.5, 0.0, None, 0.3, 30),
    ("step_warmup", "step", 0.05, 0, 4, 3, 0.1, 0.0, None, 0.3, 30),
    ("cosine", "cosine", 0.1, 30, 0, 0, 0.1, 0.0, None, 0.3, 30),
    ("cosine_eta_min", "cosine", 0.1, 30, 0, 0, 0.1, 1e-3, None, 0.3, 30),
    ("cosine_warmup", "cosine", 0.07, 40, 6, 0, 0.1, 1e-4, None, 0.3, 40),
    ("cosine_past_end", "cosine", 0.1, 12, 2, 0, 0.1, 0.01, None, 0.3, 45),
    ("onecycle", "onecycle", 0.01, 30, 0, 0, 0.1, 0.0, 0.1, 0.3, 30),
    ("onecycle_base_as_max", "onecycle", 0.05, 50, 0, 0, 0.1, 0.0, None, 0.25, 50),
    ("onecycle_short_rise", "onecycle", 0.05, 7, 0, 0, 0.1, 0.0, 0.2, 0.1, 7),
]


def torch_schedule(opt, kind, total, warmup, step_size, gamma, eta_min, max_lr, base_lr, pct_start):
    """The torch composition each ferry schedule is documented to equal (src/train/lr_schedule.h)."""
    S = torch.optim.lr_scheduler
    if kind == "onecycle":
        return S.OneCycleLR(opt, max_lr=base_lr if max_lr is None else max_lr, total_steps=total,
                            pct_start=pct_start, anneal_strategy="cos", div_factor=25.0, final_div_factor=1e4,
                            three_phase=False, cycle_momentum=False)
    warm = None
    if warmup > 0:
        warm = S.LinearLR(opt, start_factor=1.0 / (warmup + 1), end_factor=1.0, total_iters=warmup)
    if kind == "constant":
        main = S.LambdaLR(opt, lambda s: 1.0)
    elif kind == "step":
        main = S.StepLR(opt, step_size=step_size, gamma=gamma)
    else:
        main = S.CosineAnnealingLR(opt, T_max=total - warmup, eta_min=eta_min)
    if warm is None:
        return main
    return S.SequentialLR(opt, schedulers=[warm, main], milestones=[warmup])


def gen_sched(out):
    import warnings
    warnings.simplefilter("ignore")
    lines = []
    for name, kind, base_lr, total, warmup, step_size, gamma, eta_min, max_lr, pct, nsteps in SCHED_CASES:
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=base_lr)
        sched = torch_schedule(opt, kind, total, warmup, step_size, gamma, eta_min, max_lr, base_lr, pct)
        values = []
        for _ in range(nsteps):
            values.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        np.save(os.path.join(out, f"sched_{name}.npy"), np.array(values, dtype=np.float64))
        max_text = "none" if max_lr is None else repr(max_lr)
        lines.append(f"{name} {kind} {base_lr!r} {total} {warmup} {step_size} {gamma!r} {eta_min!r} {max_text} "
                     f"{pct!r} {nsteps}")
    with open(os.path.join(out, "sched_cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


# name, max_norm, shapes, scale
CLIP_CASES = [
    ("clipped", 1.0, [(4, 9), (101,), (3, 5, 7)], 1.0),
    ("not_clipped", 100.0, [(4, 9), (101,)], 1.0),
    ("large", 5.0, [(70000,), (3,)], 0.3),
    ("tiny_max", 1e-3, [(17,)], 10.0),
]


def gen_clip(out, rng):
    lines = []
    for name, max_norm, shapes, scale in CLIP_CASES:
        arrays = {}
        params = []
        for i, shape in enumerate(shapes):
            g = (rng.standard_normal(shape) * scale).astype(np.float32)
            arrays[f"g{i}"] = g
            p = torch.nn.Parameter(torch.zeros(shape))
            p.grad = torch.from_numpy(g.copy())
            params.append(p)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm)
        for i, p in enumerate(params):
            arrays[f"c{i}"] = p.grad.numpy()
        arrays["total_norm"] = np.array(total.item(), dtype=np.float32)
        np.savez(os.path.join(out, f"clip_{name}.npz"), **arrays)
        lines.append(f"{name} {max_norm!r} {len(shapes)}")
    with open(os.path.join(out, "clip_cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_optim_refs.py OUTDIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(1234)
    gen_optim(out, rng)
    gen_sched(out)
    gen_clip(out, rng)
    with open(os.path.join(out, "torch_version.txt"), "w") as f:
        f.write(torch.__version__ + "\n")


if __name__ == "__main__":
    main()
