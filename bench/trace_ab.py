#!/usr/bin/python3
"""Two ferry builds alternated on one model: each node's call durations from `ferry profile --trace`,
a low percentile per node (interference on a shared host only adds time), summed per group of nodes.

    /usr/bin/python3 bench/trace_ab.py --new build/ferry --old OLD/build/ferry --model M.onnx
        --input input=X.npy [--threads 1] [--rounds 8] [--duration 1] [--percentile 0.1 0.5] [--nodes REGEX]

Groups: depthwise 3x3 QConvFused / Conv / FusedConv nodes by input shape and output height
("HxWxC->OH"), everything else "other"; "ALLDW" is the depthwise sum. The order of the two builds
alternates every round; the percentiles are taken over all of a build's calls of a node. --nodes also
prints each node whose name matches REGEX (re.search) on its own.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import tempfile


def dims(s):
    return [int(x) for x in s[s.index('[') + 1:-1].split(',')] if '[' in s and s[s.index('[') + 1:-1] else []


def group(e):
    a = e.get('args', {})
    ins = a.get('inputs', [])
    if e.get('cat') in ('QConvFused', 'Conv', 'FusedConv'):
        w = dims(ins[3] if e.get('cat') == 'QConvFused' and len(ins) > 3 else ins[1] if len(ins) > 1 else '')
        x, y = dims(ins[0]) if ins else [], dims(a.get('outputs', [''])[0])
        if len(w) == 4 and w[1] == 1 and w[2] == 3 and w[3] == 3 and len(x) == 4 and len(y) == 4:
            nhwc = e.get('cat') == 'QConvFused'  # ferry's int8 convolutions run channels last
            h, wd, c = (x[1], x[2], x[3]) if nhwc else (x[2], x[3], x[1])
            return '%dx%dx%d->%d' % (h, wd, c, y[1] if nhwc else y[2])
    return 'other'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--new', required=True)
    ap.add_argument('--old', required=True)
    ap.add_argument('--model', required=True)
    ap.add_argument('--input', action='append', default=[])
    ap.add_argument('--threads', default='1')
    ap.add_argument('--rounds', type=int, default=8)
    ap.add_argument('--duration', default='1')
    ap.add_argument('--percentile', type=float, nargs='+', default=[0.1, 0.5])
    ap.add_argument('--nodes', help='also print each node whose name matches this regex')
    args = ap.parse_args()
    durs = {'new': collections.defaultdict(list), 'old': collections.defaultdict(list)}
    grp = {}
    trace = os.path.join(tempfile.mkdtemp(), 'trace.json')
    loads = []
    for r in range(args.rounds):
        order = [('new', args.new), ('old', args.old)][::1 if r % 2 == 0 else -1]
        for k, b in order:
            cmd = [b, 'profile', args.model, '-t', args.threads, '--duration', args.duration, '--top', '0', '--trace', trace]
            for i in args.input:
                cmd += ['-i', i]
            subprocess.run(cmd, capture_output=True, check=True)
            with open(trace) as f:
                d = json.load(f)
            for e in d['traceEvents'] if isinstance(d, dict) else d:
                if e.get('ph') == 'X' and e.get('tid') == 1:
                    durs[k][e['name']].append(e['dur'])
                    grp[e['name']] = group(e)
        with open('/proc/loadavg') as f:
            loads.append(float(f.read().split()[0]))
    print('%d rounds, load %.2f-%.2f' % (args.rounds, min(loads), max(loads)))
    for q in args.percentile:
        tot = {k: collections.defaultdict(float) for k in durs}
        for k in durs:
            for n, v in durs[k].items():
                v = sorted(v)
                t = v[int(q * (len(v) - 1))]
                if args.nodes and re.search(args.nodes, n):
                    tot[k]['node ' + n] = t
                tot[k][grp[n]] += t
                tot[k]['ALL'] += t
                if grp[n] != 'other':
                    tot[k]['ALLDW'] += t
        print('percentile %.2f of each node\'s calls, us summed per group:' % q)
        for g in sorted(tot['old'], key=lambda g: -tot['old'][g]):
            print('  %-18s new %8.1f  old %8.1f  new/old %.3f' % (g, tot['new'][g], tot['old'][g], tot['new'][g] / tot['old'][g]))
        print('  (%d nodes)' % len(durs['old']))


if __name__ == '__main__':
    main()
