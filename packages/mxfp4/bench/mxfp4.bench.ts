// pnpm bench (in packages/mxfp4), under `flock /tmp/k3-bench.lock`.
// Packed MXFP4 matvec/matmul against the memory-read ceiling measured in the same process, bf16 GEMV
// against the same ceiling, batched GFLOP/s against the machine peak and ggml's anchors, and a naive
// dequantize + f32 GEMV. Weights stream from DRAM: many distinct copies, >= 512 MiB per shape.
import { gemmBf16, gemvBf16, gemvF32, memoryReadCeiling, setSimdLevel, setThreadCount, bestSimdLevel } from "@k3/dense";
import { dequantize, matmul, matrixBytes, matvec, matvecInt8, type Mxfp4Matrix } from "../src/index.js";
import { AdjacentCeiling, timeIt, writeReport } from "@k3/test-utils";

const MiB = 2 ** 20;
const quick = process.argv.includes("--quick");
// --compute-only: just the per-core compute table (CPU time, hot cache), robust on a busy machine
const computeOnly = process.argv.includes("--compute-only");
const TARGET_BYTES = (quick ? 64 : 512) * MiB;

function fillRandom(a: Uint8Array, seed: number): Uint8Array {
  let s = (seed * 2654435761) >>> 0 || 1;
  const words = new Uint32Array(a.buffer, a.byteOffset, a.length >> 2);
  for (let i = 0; i < words.length; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    words[i] = s;
  }
  return a;
}

function copies(rows: number, cols: number, bytesEach: number): number {
  return Math.max(2, Math.ceil(TARGET_BYTES / bytesEach));
}

function mxfp4Copies(rows: number, cols: number): Mxfp4Matrix[] {
  const n = copies(rows, cols, matrixBytes({ rows, cols }));
  const out: Mxfp4Matrix[] = [];
  for (let c = 0; c < n; c++) {
    const scales = fillRandom(new Uint8Array((rows * cols) / 32), c + 500).map((v) => 119 + (v % 8));
    out.push({ packed: fillRandom(new Uint8Array((rows * cols) / 2), c + 1), scales, rows, cols });
  }
  return out;
}

/** The read ceiling (512 MiB, best of 3) right before and after each row; the row uses their mean. */
const ceilings = new AdjacentCeiling((threads) => memoryReadCeiling({ threads, bytes: 2 ** 29, reps: 3 }).gbPerSec);
const againstCeiling = (threads: number, fn: () => void) => ceilings.time(threads, fn, { minRuns: 5, minMs: 1500 });

const rows: Array<Record<string, string | number>> = [];
const x3584 = new Float32Array(3584).map((_, i) => Math.sin(i));
const x3072 = new Float32Array(3072).map((_, i) => Math.cos(i));
const xFor = (cols: number) => (cols === 3584 ? x3584 : cols === 3072 ? x3072 : new Float32Array(cols).map((_, i) => Math.sin(i)));

setSimdLevel(bestSimdLevel());

// ---------------------------------------------------------------- (e) per-core compute, hot cache
// CPU time of one thread on an L2-resident matrix (256 x 3584): what one core can decode when memory
// is not the limit. CPU time (not wall time) keeps the figure meaningful when other processes share
// the cores; 2 x this is the most two threads can stream whatever the DRAM ceiling.
const computeRows: Array<Record<string, string | number>> = [];
{
  const [r, c] = [256, 3584];
  const m = mxfp4Copies(r, c).slice(0, 1)[0];
  const w = fillRandom(new Uint8Array(r * c * 2), 77);
  const wb = new Uint16Array(w.buffer).map((v) => (v & 0x80ff) | 0x3c00);
  setThreadCount(1);
  const cpuBest = (fn: () => void, n: number) => {
    let best = Infinity;
    for (let rep = 0; rep < 7; rep++) {
      const c0 = process.cpuUsage();
      for (let i = 0; i < n; i++) fn();
      const u = process.cpuUsage(c0);
      best = Math.min(best, (u.user + u.system) / 1e6);
    }
    return best / n;
  };
  const cases: Array<[string, number, number, () => void]> = [];
  for (const batch of [1, 8, 32]) {
    const X = new Float32Array(batch * c).map((_, i) => Math.sin(i * 0.37));
    const Y = new Float32Array(batch * r);
    cases.push([`mxfp4 ${batch === 1 ? "matvec" : "matmul"} fp32, batch ${batch}`, batch, matrixBytes(m), () => matmul(m, X, Y, batch)]);
    if (batch === 1) cases.push(["mxfp4 matvecInt8 (opt-in), batch 1", 1, matrixBytes(m), () => matvecInt8(m, X, Y)]);
    cases.push([`bf16 ${batch === 1 ? "gemv" : "gemm"} (@k3/dense), batch ${batch}`, batch, r * c * 2, () => (batch === 1 ? gemvBf16(wb, X, Y, { rows: r, cols: c }) : gemmBf16(wb, X, Y, { rows: r, cols: c, batch }))]);
  }
  for (const [name, batch, bytes, fn] of cases) {
    const s = cpuBest(fn, Math.max(20, Math.round(400 / batch)));
    computeRows.push({ kernel: name, "weight GB/s per core": bytes / s / 1e9, "GFLOP/s per core": (2 * r * c * batch) / s / 1e9 });
  }
  writeReport("mxfp4-compute", {
    title: "@k3/mxfp4 per-core compute (1 thread, CPU time, 256x3584 hot in cache)",
    command: "flock /tmp/k3-bench.lock pnpm bench -- --compute-only",
    rows: computeRows,
    notes: ["CPU time of the calling thread's process, so other load on the machine does not inflate it (cache sharing still can)."],
  });
}
if (computeOnly) process.exit(0);

// ---------------------------------------------------------------- (a) packed matvec vs the ceiling
const shapes: Array<[number, number, string]> = [
  [3072, 3584, "K3 w1/w3"],
  [3584, 3072, "K3 w2"],
  [quick ? 8192 : 65536, 7168, "large (one matrix)"],
];
for (const [r, c, label] of shapes) {
  const mats = label.startsWith("large") ? mxfp4Copies(r, c).slice(0, 1) : mxfp4Copies(r, c);
  const x = xFor(c);
  const y = new Float32Array(r);
  const bytes = matrixBytes(mats[0]) * mats.length;
  for (const threads of [1, 2]) {
    setThreadCount(threads);
    const kernels: Array<[string, () => void]> = [[`mxfp4 matvec ${r}x${c} (${label})`, () => { for (const m of mats) matvec(m, x, y); }]];
    if (!label.startsWith("large")) kernels.push([`mxfp4 matvecInt8 ${r}x${c} (${label}, opt-in)`, () => { for (const m of mats) matvecInt8(m, x, y); }]);
    for (const [kernel, fn] of kernels) {
      const { seconds, ceiling } = await againstCeiling(threads, fn);
      const gb = bytes / seconds / 1e9;
      rows.push({
        kernel,
        threads,
        "us/matrix": (seconds * 1e6) / mats.length,
        "GB/s": gb,
        "ceiling GB/s (adjacent)": ceiling,
        "ratio": gb / ceiling,
        "working set MiB": Math.round(bytes / MiB),
      });
    }
  }
}

// ---------------------------------------------------------------- (b) bf16 GEMV vs the ceiling
for (const [r, c] of [[3072, 3584], [3584, 3072]] as const) {
  const each = r * c * 2;
  const n = copies(r, c, each);
  const ws = Array.from({ length: n }, (_, i) => fillRandom(new Uint8Array(each), i + 900)).map((b) => {
    const u = new Uint16Array(b.buffer);
    for (let i = 0; i < u.length; i++) u[i] = (u[i] & 0x80ff) | 0x3c00; // finite bf16 around 0.01
    return u;
  });
  const x = xFor(c);
  const y = new Float32Array(r);
  for (const threads of [1, 2]) {
    setThreadCount(threads);
    const { seconds, ceiling } = await againstCeiling(threads, () => { for (const w of ws) gemvBf16(w, x, y, { rows: r, cols: c }); });
    const gb = (each * n) / seconds / 1e9;
    rows.push({
      kernel: `bf16 gemv ${r}x${c} (@k3/dense)`,
      threads,
      "us/matrix": (seconds * 1e6) / n,
      "GB/s": gb,
      "ceiling GB/s (adjacent)": ceiling,
      "ratio": gb / ceiling,
      "working set MiB": Math.round((each * n) / MiB),
    });
  }
}

// ---------------------------------------------------------------- (c) batched matmul GFLOP/s
const batchRows: Array<Record<string, string | number>> = [];
{
  const mats = mxfp4Copies(3072, 3584).slice(0, 16);
  setThreadCount(2);
  for (const batch of [1, 8, 32]) {
    const X = new Float32Array(batch * 3584).map((_, i) => Math.sin(i * 0.37));
    const Y = new Float32Array(batch * 3072);
    const t = await timeIt(() => { for (const m of mats) matmul(m, X, Y, batch); }, { minRuns: 3, minMs: 1500 });
    const us = (t.best * 1e3) / mats.length;
    const gflops = (2 * 3072 * 3584 * batch) / (us * 1e3);
    batchRows.push({
      kernel: `mxfp4 matmul 3072x3584, batch ${batch}`,
      threads: 2,
      "us/matrix": us,
      "GFLOP/s": gflops,
      "ggml anchor GFLOP/s (other sitting)": batch === 32 ? "263 (repacked mxfp4, n=32)" : batch === 8 ? "187 (repacked, n=8)" : "112 (repacked, n=1)",
      "ratio to anchor": gflops / (batch === 32 ? 263 : batch === 8 ? 187 : 112),
    });
  }
}

// ---------------------------------------------------------------- (d) naive dequantize + f32 GEMV
{
  const mats = mxfp4Copies(3072, 3584).slice(0, 8);
  const x = x3584;
  const y = new Float32Array(3072);
  setThreadCount(2);
  const packed = await timeIt(() => { for (const m of mats) matvec(m, x, y); }, { minRuns: 3, minMs: 800 });
  const naive = await timeIt(() => {
    for (const m of mats) gemvF32(dequantize(m), x, y, { rows: 3072, cols: 3584 });
  }, { minRuns: 3, minMs: 800 });
  batchRows.push({
    kernel: "naive dequantize + gemvF32, 3072x3584",
    threads: 2,
    "us/matrix": (naive.best * 1e3) / mats.length,
    "GFLOP/s": (2 * 3072 * 3584) / ((naive.best * 1e3) / mats.length) / 1e3,
    "ggml anchor GFLOP/s (other sitting)": "-",
    "ratio to anchor": `packed is ${(naive.best / packed.best).toFixed(1)}x faster`,
  });
}

const notes = [
  `Ceiling: @k3/dense memoryReadCeiling (512 MiB, AVX-512 loads, 8 accumulators, best of 3) measured right before and after each row; the row uses their mean. Range over this run: ${ceilings.range()}.`,
  "GB/s counts packed + scale bytes (MXFP4: 17 bytes per 32 weights) or bf16 bytes, 1 GB = 1e9 B. Weights cycle through >= 512 MiB of distinct copies, so they come from DRAM.",
  "ggml anchors come from /work/shared/spec/ggml-anchors.md: a different sitting, on a Zen 4 VM (this run's CPU is reported above), with -march=native; compare shapes, not absolute numbers.",
];
writeReport("mxfp4", { title: "@k3/mxfp4 packed kernels vs the memory-read ceiling", command: "flock /tmp/k3-bench.lock pnpm bench", rows, notes: notes.slice(0, 2) });
writeReport("mxfp4-batch", { title: "@k3/mxfp4 batched matmul and naive baseline", command: "flock /tmp/k3-bench.lock pnpm bench", rows: batchRows, notes });
