#!/usr/bin/python3
"""Per-layer-kind totals of a `ferry profile --json` run of a CNN (issue 22): 1x1 expand / project
convolutions, depthwise 3x3 / 5x5, squeeze-excite convolutions on 1x1 images, other convolutions, and
the other op types; with --nodes, every convolution's GFLOP/s and bytes/s (input + output + weights
over its wall ms), to see which layers are compute-bound and which memory-bound.

    build/ferry profile MODEL -t 1 --top 0 --duration 3 --json > /tmp/p.json
    bench/profile_groups.py /tmp/p.json [--nodes]

CPU ms per node in `ferry profile` counts from the end of the previous node (the executor's time in
between included); wall ms is the kernel's own. Read wall ms only when the run's on-CPU share
(printed first) is near 1: on a loaded machine the runs wait for a core.
"""
import collections
import json
import sys


def dims(s):
    return [int(x) for x in s[s.index('[') + 1:-1].split(',')] if '[' in s and s[s.index('[') + 1:-1] else []


def kind(n):
    if n['op_type'] not in ('FusedConv', 'Conv'):
        return n['op_type']
    w, y = dims(n['input_shapes'][1]), dims(n['output_shapes'][0])
    if len(w) != 4 or len(y) != 4:
        return 'conv'
    if y[1] == 1 and y[2] == 1:
        return 'se-conv'
    if w[1] == 1:
        return 'dw%dx%d' % (w[2], w[3])
    if w[2] == 1 and w[3] == 1:
        return '1x1-expand' if w[0] > w[1] else '1x1-project'
    return 'conv%dx%d' % (w[2], w[3])


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    d = json.load(open(sys.argv[1]))
    print('%s: %d thread(s), batch %s; run %.3f ms wall, %.3f ms CPU, on a core %.0f%% of the wall time'
          % (d['model'], d['threads'], d['batch'], d['run_mean_ms'], d['run_mean_cpu_ms'], 100 * d['on_cpu_share']))
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for n in d['nodes']:
        g = groups[kind(n)]
        g[0] += 1
        g[1] += n['mean_ms'] * n['calls'] / max(1, d['runs'])
        g[2] += n['cpu_mean_ms'] * n['calls'] / max(1, d['runs'])
    print('%-24s %5s %10s %10s' % ('kind', 'nodes', 'wall ms', 'CPU ms'))
    for k, (cnt, wall, cpu) in sorted(groups.items(), key=lambda kv: -kv[1][2]):
        print('%-24s %5d %10.3f %10.3f' % (k, cnt, wall, cpu))
    if '--nodes' in sys.argv:
        print()
        for n in d['nodes']:
            k = kind(n)
            if n['op_type'] not in ('FusedConv', 'Conv') or k == 'se-conv':
                continue
            x, w, y = dims(n['input_shapes'][0]), dims(n['input_shapes'][1]), dims(n['output_shapes'][0])
            if len(x) != 4 or len(w) != 4 or len(y) != 4:
                continue
            out = y[0] * y[1] * y[2] * y[3]
            flop = 2 * out * w[1] * w[2] * w[3]
            nbytes = 4 * (x[0] * x[1] * x[2] * x[3] + out + w[0] * w[1] * w[2] * w[3])
            act = 'silu' if any('Sigmoid' in c for c in n.get('covers', [])) else ''
            print('%-12s %-20s %-20s %-4s %7.3f ms %6.1f GFLOP/s %5.1f GB/s'
                  % (k, n['input_shapes'][0], n['output_shapes'][0], act, n['mean_ms'],
                     flop / n['mean_ms'] / 1e6, nbytes / n['mean_ms'] / 1e6))
    return 0


if __name__ == '__main__':
    sys.exit(main())
