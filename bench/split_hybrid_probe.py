#!/usr/bin/python3
"""Estimates a batch split of only the large-image front of a CNN (issue 22): the graph cut at one
tensor, the part before the cut run as batch parts, the part after it on the whole batch.

At batch 8, runtime/batch_split runs the whole graph as parts of 2 rows: that keeps the large
112x112 / 56x56 activations in cache, but the 14x14 / 7x7 layers then run on 2 images (GEMMs of 98-392
rows) with their weights (most of the model's 14-21 MB) read four times, and the classifier four
times. This probe cuts the model with onnx.utils.extract_model at CUT (a tensor name), times the
front at batch PART and the back at batch BATCH (`ferry profile --json`, FERRY_BATCH_SPLIT=0 for
both), and prints BATCH/PART x front + back (less the Transposes the cut adds: the front's output
back to NCHW) next to the whole model at BATCH with its batch split and without it.

    bench/split_hybrid_probe.py MODEL.onnx CUT [--threads 1] [--batch 8] [--part 2] [--rounds 3]
        [--ferry build/ferry] [--cpu]

--cpu compares process CPU ms per run instead of wall ms (a loaded machine: at 1 thread the CPU
time is what the run itself took). Example (EfficientNet-B0, the end of the 28x28 stage):
    bench/split_hybrid_probe.py /tmp/ferry_bench_models/efficientnet_b0/model.onnx \\
        /features/features.3/features.3.1/Add_output_0 --cpu
Findings (Dec 5, shared machine at load 4-5, process CPU ms, medians of 3 rounds, 1 thread, b8):
EfficientNet-B0 split 73.1, whole 72.7, front split at 28x28 58.8 (-20%), at 56x56 56.5;
MobileNetV2 split 44.6, whole 49.9, front split at 28x28 42.9, at 56x56 39.5 (rounds vary +-15%).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def cut_model(src, cut, out_dir):
    import onnx
    import onnx.utils
    m = onnx.load(src)
    inputs = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
    outputs = [o.name for o in m.graph.output]
    paths = []
    for tag, ins, outs in (('front', inputs, [cut]), ('back', [cut], outputs)):
        p = os.path.join(out_dir, tag + '.onnx')
        onnx.utils.extract_model(src, p, ins, outs)
        part = onnx.load(p)
        for v in list(part.graph.input) + list(part.graph.output):  # a symbolic batch on every edge
            d = v.type.tensor_type.shape.dim
            if len(d) > 0:
                d[0].ClearField('dim_value')
                d[0].dim_param = 'batch'
        onnx.save(part, p)
        paths.append(p)
    return paths


def profile(ferry, model, threads, batch, split, use_cpu):
    env = dict(os.environ, FERRY_BATCH_SPLIT='1' if split else '0')
    r = subprocess.run([ferry, 'profile', model, '-t', str(threads), '-b', str(batch), '--top', '0', '--duration', '2',
                        '--json'], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit('ferry profile %s failed: %s' % (model, r.stderr.strip()[-500:]))
    d = json.loads(r.stdout)
    key = 'cpu_mean_ms' if use_cpu else 'mean_ms'
    transposes = sum(n[key] * n['calls'] / d['runs'] for n in d['nodes'] if n['op_type'] == 'Transpose')
    return (d['run_mean_cpu_ms'] if use_cpu else d['run_mean_ms']), transposes, d['on_cpu_share']


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('model')
    ap.add_argument('cut')
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--batch', type=int, default=8)
    ap.add_argument('--part', type=int, default=2)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--ferry', default='build/ferry')
    ap.add_argument('--cpu', action='store_true')
    a = ap.parse_args()
    if a.batch % a.part:
        sys.exit('--batch must be a multiple of --part')
    with tempfile.TemporaryDirectory() as tmp:
        front, back = cut_model(a.model, a.cut, tmp)
        rows = []
        for r in range(a.rounds):
            split = profile(a.ferry, a.model, a.threads, a.batch, True, a.cpu)
            whole = profile(a.ferry, a.model, a.threads, a.batch, False, a.cpu)
            f = profile(a.ferry, front, a.threads, a.part, False, a.cpu)
            b = profile(a.ferry, back, a.threads, a.batch, False, a.cpu)
            # the whole model's own final Transpose stays; the two the cut adds go
            est = a.batch // a.part * (f[0] - f[1]) + b[0] - b[1] + split[1]
            rows.append((split[0], whole[0], est))
            print('round %d: split %.2f  whole %.2f  front split (est.) %.2f  [front b%d %.3f (Transpose %.3f), back b%d %.2f]'
                  '  lowest on-core share %.2f  load %.1f' % (r, split[0], whole[0], est, a.part, f[0], f[1], a.batch, b[0],
                                                              min(split[2], whole[2], f[2], b[2]), os.getloadavg()[0]),
                  flush=True)
        med = [statistics.median(x[i] for x in rows) for i in range(3)]
        print('medians (%s ms per run): split %.2f  whole %.2f  front split %.2f (%.2f of split)'
              % ('CPU' if a.cpu else 'wall', med[0], med[1], med[2], med[2] / med[0]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
