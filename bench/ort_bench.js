#!/usr/bin/env node
// ONNX Runtime's side of the side-by-side benchmark (onnxruntime-node, CPU execution provider).
//
//   node bench/ort_bench.js --model M.onnx --input name=FILE.npy ... [--threads N] [--warmup W]
//        [--iterations I | --duration S] [--output-dir DIR] [--no-spin]
//
// Session: intra_op_num_threads = N, inter_op_num_threads = 1, sequential execution, all graph
// optimizations; --no-spin: idle intra-op threads block instead of spinning
// (session.intra_op.allow_spinning = 0). Prints one JSON object: create_ms (session create), first_run_ms, latency_ms
// {min, mean, p50, p90, p99, max}, iterations, cpu_ms (process CPU time per run, the same stats) and
// on_cpu_share (CPU time / (wall time x threads): below 1 the runs waited for a core). --output-dir writes the last run's outputs as
// DIR/<output name>.npy so the driver can compare them with ferry's.
'use strict';
const fs = require('fs');
const path = require('path');
const ort = require(path.join(__dirname, 'node_modules', 'onnxruntime-node'));

const NPY_TYPES = {
  '<f4': ['float32', Float32Array], '<f8': ['float64', Float64Array], '<i8': ['int64', BigInt64Array],
  '<i4': ['int32', Int32Array], '|b1': ['bool', Uint8Array], '|u1': ['uint8', Uint8Array], '|i1': ['int8', Int8Array],
};

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${file}: not a .npy file`);
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order is not supported`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const kind = NPY_TYPES[descr];
  if (!kind) throw new Error(`${file}: dtype ${descr} is not supported`);
  const offset = start + headerLen;
  const bytes = buf.subarray(offset);
  const copy = new ArrayBuffer(bytes.length);
  new Uint8Array(copy).set(bytes);
  let data = new kind[1](copy);
  if (kind[0] === 'bool') data = new Uint8Array(copy);
  return new ort.Tensor(kind[0], data, shape);
}

function writeNpy(file, tensor) {
  const descr = { float32: '<f4', float64: '<f8', int64: '<i8', int32: '<i4', bool: '|b1', uint8: '|u1', int8: '|i1' }[tensor.type];
  if (!descr) return;
  const shape = tensor.dims.length === 1 ? `(${tensor.dims[0]},)` : `(${tensor.dims.join(', ')})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  const data = tensor.data;
  const body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), body]));
}

function stats(samples) {
  const v = samples.slice().sort((a, b) => a - b);
  const pct = (p) => {
    const pos = (p / 100) * (v.length - 1);
    const lo = Math.floor(pos);
    const hi = Math.min(lo + 1, v.length - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
  };
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  return { min: v[0], mean, p50: pct(50), p90: pct(90), p99: pct(99), max: v[v.length - 1] };
}

function parseArgs(argv) {
  const a = { inputs: [], threads: 1, warmup: 2, iterations: 0, duration: 3, outputDir: '', spin: true };
  for (let i = 0; i < argv.length; ++i) {
    const k = argv[i];
    const next = () => argv[++i];
    if (k === '--model') a.model = next();
    else if (k === '--input') a.inputs.push(next());
    else if (k === '--threads') a.threads = Number(next());
    else if (k === '--warmup') a.warmup = Number(next());
    else if (k === '--iterations') a.iterations = Number(next());
    else if (k === '--duration') a.duration = Number(next());
    else if (k === '--output-dir') a.outputDir = next();
    else if (k === '--no-spin') a.spin = false;
    else throw new Error(`unknown option ${k}`);
  }
  if (!a.model) throw new Error('--model is required');
  return a;
}

const msSince = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const feeds = {};
  for (const spec of a.inputs) {
    const eq = spec.indexOf('=');
    feeds[spec.slice(0, eq)] = readNpy(spec.slice(eq + 1));
  }
  const t0 = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(a.model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, executionMode: 'sequential',
    graphOptimizationLevel: 'all', executionProviders: ['cpu'],
    extra: { session: { intra_op: { allow_spinning: a.spin ? '1' : '0' } } },
  });
  const createMs = msSince(t0);
  let t1 = process.hrtime.bigint();
  let out = await session.run(feeds);
  const firstMs = msSince(t1);
  for (let i = 1; i < a.warmup; ++i) out = await session.run(feeds);
  const times = [];
  const cpu = [];  // each timed run's process CPU time (user + system, all threads), ms
  const begin = process.hrtime.bigint();
  for (let i = 0; ; ++i) {
    if (a.iterations > 0 && i >= a.iterations) break;
    if (a.iterations <= 0 && i >= 3 && msSince(begin) >= a.duration * 1000) break;
    const c0 = process.cpuUsage();
    t1 = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(msSince(t1));
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
  }
  if (a.outputDir) {
    fs.mkdirSync(a.outputDir, { recursive: true });
    for (const name of session.outputNames) writeNpy(path.join(a.outputDir, `${name.replace(/[^A-Za-z0-9_.-]/g, '_')}.npy`), out[name]);
  }
  const total = times.reduce((x, y) => x + y, 0);
  const totalCpu = cpu.reduce((x, y) => x + y, 0);
  process.stdout.write(JSON.stringify({
    engine: 'onnxruntime', version: ort.env.versions.common, threads: a.threads, create_ms: createMs,
    first_run_ms: firstMs, latency_ms: stats(times), iterations: times.length, throughput_per_s: (1000 * times.length) / total,
    cpu_ms: stats(cpu), on_cpu_share: total > 0 ? totalCpu / (total * Math.max(1, a.threads)) : 0,
  }) + '\n');
}

main().catch((e) => {
  process.stderr.write(`ort_bench: ${e.message}\n`);
  process.exit(2);
});
