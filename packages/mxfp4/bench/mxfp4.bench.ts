// pnpm bench (in packages/mxfp4), under `flock -x /tmp/k3-bench.lock`.
// Packed MXFP4 matvec (exact fp32 and opt-in int8) against the memory-read ceiling measured right
// before and after each row, batched matmul (n = 4..64) against the FMA peak measured in the same run,
// at the best SIMD level and at AVX2, and a naive dequantize + f32 GEMV. Weights stream from DRAM: many
// distinct copies, >= 512 MiB per shape. With K3_GGML_BIN (a ggml test-backend-ops binary you built),
// ggml's MUL_MAT for the same shape runs right after each of our rows and the row prints k3/ggml.
// K3_GGML_BIN_AVX2 may name a portable (GGML_NATIVE=OFF) build for the AVX2 rows.
import { gemmBf16, gemvBf16, gemvF32, memoryReadCeiling, fmaPeak, setSimdLevel, setThreadCount, bestSimdLevel, simdLevel, type SimdLevel } from "@k3/dense";
import { dequantize, matmul, matmulInt8, matrixBytes, matvec, matvecInt8, hasVnni, type Mxfp4Matrix } from "../src/index.js";
import { AdjacentCeiling, timeIt, writeReport } from "@k3/test-utils";
import { execFileSync } from "node:child_process";
// @ts-expect-error: plain .mjs helper shared by the dense and mxfp4 benches
import { ggmlBin, ggmlNote, runGgmlMulMat } from "../../../scripts/ggml-runner.mjs";

const MiB = 2 ** 20;
const quick = process.argv.includes("--quick");
// --compute-only: just the per-core compute table (CPU time, hot cache), robust on a busy machine
const computeOnly = process.argv.includes("--compute-only");
// --batched-only: just the batched matmul table (one short exclusive stretch)
const batchedOnly = process.argv.includes("--batched-only");
// --matvec-only: just the matvec table (the other short exclusive stretch)
const matvecOnly = process.argv.includes("--matvec-only");
const TARGET_BYTES = (quick ? 64 : 256) * MiB;

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
const ceilings = new AdjacentCeiling((threads) => memoryReadCeiling({ threads, bytes: 2 ** 28, reps: 3 }).gbPerSec);
const againstCeiling = (threads: number, fn: () => void) => ceilings.time(threads, fn, { minRuns: 5, minMs: 1500 });

const rows: Array<Record<string, string | number>> = [];
const x3584 = new Float32Array(3584).map((_, i) => Math.sin(i));
const x3072 = new Float32Array(3072).map((_, i) => Math.cos(i));
const xOther = new Map<number, Float32Array>();
const xFor = (cols: number) =>
  cols === 3584 ? x3584 : cols === 3072 ? x3072 : xOther.get(cols) ?? xOther.set(cols, new Float32Array(cols).map((_, i) => Math.sin(i))).get(cols)!;

setSimdLevel(bestSimdLevel());

// ---------------------------------------------------------------- (e) per-core compute, hot cache
// CPU time of one thread on an L2-resident matrix (256 x 3584): what one core can decode when memory
// is not the limit. CPU time (not wall time) keeps the figure meaningful when other processes share
// the cores; 2 x this is the most two threads can stream whatever the DRAM ceiling.
const computeRows: Array<Record<string, string | number>> = [];
if (!batchedOnly && !matvecOnly) {
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

// ---------------------------------------------------------------- ggml beside each row
const ggml: string | null = ggmlBin();
const ggmlAvx2: string | null = process.env.K3_GGML_BIN_AVX2 || null;
type GgmlCase = { type: "mxfp4"; m: number; k: number; n: number; experts: number };
/** ggml's time for the case (threads 1: pinned to one core with taskset), or null when not run / failed. */
function ggmlRun(bin: string | null, c: GgmlCase, threads: number): { us: number; gflops: number; gbPerSec: number } | null {
  if (!bin) return null;
  try {
    return runGgmlMulMat(bin, c, threads === 1 ? { cpus: "0" } : {});
  } catch (e) {
    console.error(String(e).slice(0, 400));
    return null;
  }
}
// K3_GGML_REPACK_BIN: optional program of yours that runs ggml's MUL_MAT through its public API with the
// weights in the CPU_REPACK buffer (llama.cpp's mxfp4_8x8 path, which test-backend-ops cannot reach):
// argv `m k n E threads repack(1) seconds`, E distinct weight copies per graph, prints one JSON line
// {"us": per matrix, "gflops", "gbPerSec"}. Not part of the project.
const ggmlRepack: string | null = process.env.K3_GGML_REPACK_BIN || null;
function ggmlRepackRun(m: number, k: number, n: number, experts: number, threads: number): { us: number; gflops: number; gbPerSec: number } | null {
  if (!ggmlRepack) return null;
  try {
    const out = execFileSync(ggmlRepack, [m, k, n, experts, threads, 1, 1].map(String), { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], timeout: 120_000 });
    return JSON.parse(out.trim().split("\n").pop() ?? "");
  } catch (e) {
    console.error(String(e).slice(0, 400));
    return null;
  }
}
const fmt = (v: number | undefined) => (v === undefined ? "-" : Number(v.toPrecision(4)));

// ---------------------------------------------------------------- (a) packed matvec vs the ceiling and ggml
// Levels: the best one, then AVX2 (most laptops). 65536 x 7168 (238 MiB, one matrix) only at the best level.
// --level=avx2: that level's rows alone (with K3_GGML_BIN_AVX2 beside them), all matvec shapes
const levelArg = process.argv.find((a) => a.startsWith("--level="))?.slice("--level=".length) as SimdLevel | undefined;
// --shapes=2048x7168,7168x2048: only those matvec shapes (short exclusive holds); --threads=1: one thread count
const shapeArg = process.argv.find((a) => a.startsWith("--shapes="))?.slice("--shapes=".length).split(",");
const threadArg = process.argv.find((a) => a.startsWith("--threads="))?.slice("--threads=".length);
const threadCounts = threadArg ? threadArg.split(",").map(Number) : [1, 2];
const levels: SimdLevel[] = levelArg ? [levelArg] : bestSimdLevel() === "avx512" ? ["avx512", "avx2"] : [bestSimdLevel()];
for (const level of batchedOnly ? [] : levels) {
  setSimdLevel(level);
  const bin = level === "avx2" && bestSimdLevel() !== "avx2" ? ggmlAvx2 : ggml;
  const shapes: Array<[number, number, string]> = [
    [3072, 3584, "K3 w1/w3"],
    [3584, 3072, "K3 w2"],
    [2048, 7168, "K3 expert gate/up"],
    [7168, 2048, "K3 expert down"],
  ];
  if (level === levels[0]) shapes.push([quick ? 8192 : 65536, 7168, "large (one matrix)"]);
  for (const [r, c, label] of shapes.filter(([r, c]) => !shapeArg || shapeArg.includes(`${r}x${c}`))) {
    const large = label.startsWith("large");
    const mats = large ? mxfp4Copies(r, c).slice(0, 1) : mxfp4Copies(r, c);
    const x = xFor(c);
    const y = new Float32Array(r);
    const bytes = matrixBytes(mats[0]) * mats.length;
    // ggml: 16 distinct experts per call (94 MB, past the L3) for the expert shapes; the large one as is
    const g: GgmlCase = { type: "mxfp4", m: r, k: c, n: 1, experts: large ? 1 : 16 };
    for (const threads of threadCounts) {
      setThreadCount(threads);
      const kernels: Array<[string, () => void]> = [
        [`matvec exact fp32`, () => { for (const m of mats) matvec(m, x, y); }],
        [`matvecInt8 (opt-in${level === "avx512" && hasVnni() ? ", VNNI" : ", vpmaddubsw"})`, () => { for (const m of mats) matvecInt8(m, x, y); }],
      ];
      const gg = ggmlRun(bin, g, threads);
      // ggml repacked: >= 256 MiB of distinct copies per graph, like ours (DRAM); only for the native build
      const gr = level === levels[0] ? ggmlRepackRun(r, c, 1, large ? 1 : Math.ceil(TARGET_BYTES / matrixBytes(mats[0])), threads) : null;
      for (const [kernel, fn] of kernels) {
        const { seconds, ceiling } = await againstCeiling(threads, fn);
        const gb = bytes / seconds / 1e9;
        rows.push({
          level,
          kernel: `${kernel} ${r}x${c} (${label})`,
          threads,
          "us/matrix": fmt((seconds * 1e6) / mats.length),
          "GB/s": fmt(gb),
          "ceiling GB/s (adjacent)": fmt(ceiling),
          "k3/ceiling": fmt(gb / ceiling),
          "ggml plain GB/s": gg ? fmt(gg.gbPerSec) : "not run",
          "k3/ggml plain": gg ? fmt(gb / gg.gbPerSec) : "-",
          "ggml repacked GB/s": gr ? fmt(gr.gbPerSec) : "not run",
          "k3/ggml repacked": gr ? fmt(gb / gr.gbPerSec) : "-",
        });
      }
    }
  }
}

// ---------------------------------------------------------------- (c) batched matmul vs the FMA peak and ggml
const batchRows: Array<Record<string, string | number>> = [];
const peaks = new Map<string, number[]>();
const peakNow = () => {
  const p = fmaPeak({ threads: 2, reps: 3 }).gflops;
  const level = simdLevel();
  peaks.set(level, [...(peaks.get(level) ?? []), p]);
  return p;
};
for (const level of matvecOnly ? [] : levels) {
  setSimdLevel(level);
  const bin = level === "avx2" && bestSimdLevel() !== "avx2" ? ggmlAvx2 : ggml;
  const mats = mxfp4Copies(3072, 3584).slice(0, 16);
  setThreadCount(2);
  for (const batch of level === levels[0] && !levelArg ? [4, 8, 16, 32, 64] : [8, 32]) {
    const X = new Float32Array(batch * 3584).map((_, i) => Math.sin(i * 0.37));
    const Y = new Float32Array(batch * 3072);
    const gg = ggmlRun(bin, { type: "mxfp4", m: 3072, k: 3584, n: batch, experts: 1 }, 2);
    const gr = level === levels[0] ? ggmlRepackRun(3072, 3584, batch, 4, 2) : null;
    for (const [kernel, fn] of [
      ["matmul exact fp32", () => { for (const m of mats) matmul(m, X, Y, batch); }],
      [`matmulInt8 (opt-in${level === "avx512" && hasVnni() ? ", VNNI" : ", vpmaddubsw"})`, () => { for (const m of mats) matmulInt8(m, X, Y, batch); }],
    ] as Array<[string, () => void]>) {
      // the peak at the row's level (ymm FMA chains for the AVX2 rows, zmm on AVX-512)
      setSimdLevel(level);
      const p0 = peakNow();
      const t = await timeIt(fn, { minRuns: 3, minMs: 1000 });
      const peak = (p0 + peakNow()) / 2;
      const us = (t.best * 1e3) / mats.length;
      const gflops = (2 * 3072 * 3584 * batch) / (us * 1e3);
      batchRows.push({
        level,
        kernel: `${kernel} 3072x3584, n=${batch}`,
        threads: 2,
        "us/matrix": fmt(us),
        "GFLOP/s": fmt(gflops),
        "2-thread FMA peak (adjacent)": fmt(peak),
        "k3/peak": fmt(gflops / peak),
        "ggml plain GFLOP/s": gg ? fmt(gg.gflops) : "not run",
        "k3/ggml plain": gg ? fmt(gflops / gg.gflops) : "-",
        "ggml repacked GFLOP/s": gr ? fmt(gr.gflops) : "not run",
        "k3/ggml repacked": gr ? fmt(gflops / gr.gflops) : "-",
      });
    }
  }
}
setSimdLevel(bestSimdLevel());

// ---------------------------------------------------------------- (d) naive dequantize + f32 GEMV
{
  const mats = mxfp4Copies(3072, 3584).slice(0, 8);
  const x = x3584;
  const y = new Float32Array(3072);
  setThreadCount(2);
  const packed = await timeIt(() => { for (const m of mats) matvec(m, x, y); }, { minRuns: 3, minMs: 500 });
  const naive = await timeIt(() => {
    for (const m of mats) gemvF32(dequantize(m), x, y, { rows: 3072, cols: 3584 });
  }, { minRuns: 2, minMs: 500 });
  batchRows.push({
    level: bestSimdLevel(),
    kernel: "naive dequantize + gemvF32, 3072x3584",
    threads: 2,
    "us/matrix": fmt((naive.best * 1e3) / mats.length),
    "GFLOP/s": fmt((2 * 3072 * 3584) / ((naive.best * 1e3) / mats.length) / 1e3),
    "2-thread FMA peak (adjacent)": "-",
    "k3/peak": "-",
    "ggml plain GFLOP/s": "-",
    "k3/ggml plain": `packed matvec is ${(naive.best / packed.best).toFixed(1)}x faster`,
    "ggml repacked GFLOP/s": "-",
    "k3/ggml repacked": "-",
  });
}

const ggmlNotes = [
  ggmlNote(ggml) + (ggmlAvx2 ? ` AVX2 rows: ggml ${ggmlAvx2}.` : " AVX2 rows: no portable ggml build given (K3_GGML_BIN_AVX2), so they print ours alone."),
  "ggml path measured: test-backend-ops puts weights in the plain CPU buffer, so its MXFP4 rows are the NON-repacked path (q8_0 activations, vec_dot); llama.cpp's repacked mxfp4_8x8 path is not reachable through test-backend-ops. ggml rounds the activations to int8 (q8_0) in every row; our exact rows keep fp32, our Int8 rows round like ggml. ggml 1-thread rows: the process pinned to cpu 0 with taskset (its thread count is hardware_concurrency = 2). ggml matvec rows use 16 distinct experts per call (94 MB, DRAM); its batched rows reuse one matrix (L3-hot; compute-bound at n >= 4).",
  ggmlRepack
    ? `ggml repacked: ${ggmlRepack} (ggml's public API, weights in CPU_REPACK = mxfp4_8x8, q8_0 activations; matvec rows >= 256 MiB of distinct copies per graph, batched rows 4 copies; best graph time / copies).`
    : "ggml repacked: not run (K3_GGML_REPACK_BIN not set).",
  "Our weights need no repack: the kernels read the K3 (compressed-tensors) bytes as they come from disk, so a streamed expert pays nothing per read.",
];
const notes = [
  `Ceiling: @k3/dense memoryReadCeiling (256 MiB, 8 accumulators, best of 3) right before and after each row; the row uses their mean. Range over this run: ${ceilings.range()}.`,
  "GB/s counts packed + scale bytes (MXFP4: 17 bytes per 32 weights), 1 GB = 1e9 B. Our weights cycle through >= 256 MiB of distinct copies (8x the L3), so they come from DRAM.",
  ...ggmlNotes,
];
if (!batchedOnly) writeReport("mxfp4", { title: "@k3/mxfp4 matvec (decode) vs the memory-read ceiling and ggml", command: "flock -x /tmp/k3-bench.lock pnpm bench  (K3_GGML_BIN=/path/to/test-backend-ops to add ggml)", rows, notes });
if (!matvecOnly) writeReport("mxfp4-batch", {
  title: "@k3/mxfp4 batched matmul (prefill, T tokens x one expert) vs the FMA peak and ggml",
  command: "flock -x /tmp/k3-bench.lock pnpm bench  (K3_GGML_BIN=/path/to/test-backend-ops to add ggml)",
  rows: batchRows,
  notes: [`FMA peak: @k3/dense fmaPeak (2 threads, independent FMA chains per thread at the row's level: 16 zmm for avx512, 12 ymm for avx2 (from 2026-12-02 10:50 UTC; 16 ymm spilled and read 0.57 of the ymm ceiling); best of 3) right before and after each row; range over this run ${[...peaks].map(([l, p]) => `${l} ${Math.min(...p).toFixed(0)}-${Math.max(...p).toFixed(0)}`).join(", ")} GFLOP/s. 16 distinct 3072x3584 matrices per timed pass.`, ...ggmlNotes],
});

