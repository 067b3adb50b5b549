// node --import tsx bench/kernels.bench.ts [--quick] [--gemv | --gemm | --gemm-exact], under `flock -x /tmp/k3-bench.lock`
// (--gemv: only the GEMV rows, every K3 decode shape at 1 and 2 threads beside ggml; --shapes=MxK,...;
// --gemm: every GEMM and two-core row, no GEMV; --gemm-exact: only the exact batched GEMM rows at
// n = 16 / 32 / 64, one short exclusive stretch; with it --ns=4,8,.. and --threads=1,2 pick the batch
// sizes and thread counts, --shapes=MxK,.. the shapes; --level=avx2|avx512|scalar: every row at that SIMD
// level, and at avx2 on an AVX-512 CPU the ggml column comes from K3_GGML_BIN_AVX2, a portable build).
// Issue 18 rows for @k3/dense, each beside the ceiling measured right next to it in the same run:
//   - exact batched bf16 GEMM (prefill) at n = 4..64, the opt-in rounded one (vdpbf16ps), f32 GEMM:
//     GFLOP/s against the FMA peak (fmaPeak at the same thread count and SIMD level);
//   - bf16 GEMV (decode) from DRAM: weight GB/s against the memory-read ceiling;
//   - two cores worth two: 2-thread / 1-thread rate, idle and with another process spinning, with
//     the pool's counters (jobs a worker helped with, worker sleeps);
//   - with K3_GGML_BIN (a ggml test-backend-ops binary the user built): ggml's MUL_MAT for the same
//     shape right after our row (scripts/ggml-runner.mjs), and k3/ggml.
import { spawn } from "node:child_process";
import {
  bestSimdLevel,
  fmaPeak,
  gemmBf16,
  gemmBf16Rounded,
  gemmF32,
  gemvBf16,
  memoryReadCeiling,
  poolStats,
  roundedGemmUsesDpbf16,
  setSimdLevel,
  setThreadCount,
  simdLevel,
  type SimdLevel,
} from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so its dependency-free bench module is imported by path.
import { AdjacentCeiling, timeIt, writeReport } from "../../test-utils/src/bench.js";
// @ts-expect-error: plain .mjs helper shared with @k3/mxfp4's bench
import { ggmlBin, ggmlNote, runGgmlMulMat } from "../../../scripts/ggml-runner.mjs";

const quick = process.argv.includes("--quick");
const gemvOnly = process.argv.includes("--gemv");
const gemmExactOnly = process.argv.includes("--gemm-exact");
const gemmOnly = process.argv.includes("--gemm");
const MiB = 2 ** 20;
const LEVELS: SimdLevel[] = ["scalar", "avx2", "avx512"];
const levelArg = process.argv.find((a) => a.startsWith("--level="))?.slice("--level=".length);
if (levelArg !== undefined && !LEVELS.includes(levelArg as SimdLevel)) throw new Error(`--level=${levelArg}: expected one of ${LEVELS.join(", ")}`);
const level: SimdLevel = (levelArg as SimdLevel | undefined) ?? bestSimdLevel();
// ggml's native build runs its best level: beside our AVX2 rows on an AVX-512 CPU it would not compare like with like.
const portable = level !== bestSimdLevel();
const bin: string | null = portable ? process.env.K3_GGML_BIN_AVX2 || null : ggmlBin();
type Row = Record<string, string | number>;
const rows: Row[] = [];
const notes: string[] = [];

function bf16Weights(n: number, seed: number): Uint16Array {
  const w = new Uint16Array(n);
  let s = (seed * 2654435761) >>> 0;
  const block = Math.min(n, 1 << 16);
  for (let i = 0; i < block; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    w[i] = (s & 0x80ff) | 0x3c00; // finite values around +-0.01
  }
  for (let filled = block; filled < n; filled *= 2) w.copyWithin(filled, 0, Math.min(filled, n - filled));
  return w;
}
const activations = (n: number) => new Float32Array(n).map((_, i) => Math.sin(i * 0.37));

const ggmlSeen = new Map<string, { gflops: number; gbPerSec: number }>();
function ggml(kase: { type: string; m: number; k: number; n: number; experts?: number }, threads?: number): { gflops: number; gbPerSec: number } | null {
  if (!bin) return null;
  const key = JSON.stringify([kase, threads ?? null]);
  if (ggmlSeen.has(key)) return ggmlSeen.get(key)!; // the exact and rounded rows of one shape share one ggml run
  try {
    const g = runGgmlMulMat(bin, kase, { threads });
    ggmlSeen.set(key, g);
    return g;
  } catch (e) {
    notes.push(`ggml failed on ${JSON.stringify(kase)}: ${(e as Error).message.split("\n")[0]}`);
    return null;
  }
}
const fmt = (v: number | undefined) => (v === undefined || !Number.isFinite(v) ? "-" : v);

// ---------------------------------------------------------------- GEMM (prefill)

const peakOf = (threads: number) => fmaPeak({ threads, reps: 3 }).gflops;
const loopPeakOf = (threads: number) => fmaPeak({ threads, reps: 3, loop: "gemm" }).gflops;
const ceilings = new AdjacentCeiling((threads) => memoryReadCeiling({ threads, bytes: 2 ** 29, reps: 3 }).gbPerSec);

/**
 * The exact rows also carry the roofline of the same run: the time floor max(flops / FMA peak, weight bytes / read
 * ceiling): at n = 16 the weight bytes alone take 0.9 of the flops' time at this machine's peak and read ceiling.
 */
async function gemmRow(kind: "exact" | "rounded" | "f32", m: number, k: number, n: number, threads: number, withGgml: boolean) {
  setThreadCount(threads);
  const w = bf16Weights(m * k, m + k);
  const wf = kind === "f32" ? new Float32Array(new Uint32Array(w).map((b) => b << 16).buffer) : null;
  const X = activations(n * k);
  const Y = new Float32Array(n * m);
  const fn = kind === "exact" ? () => gemmBf16(w, X, Y, { rows: m, cols: k, batch: n })
    : kind === "rounded" ? () => gemmBf16Rounded(w, X, Y, { rows: m, cols: k, batch: n })
    : () => gemmF32(wf!, X, Y, { rows: m, cols: k, batch: n });
  const roofline = kind === "exact";
  const p0 = peakOf(threads);
  const r0 = roofline ? ceilings.now(threads) : 0;
  const l0 = roofline ? loopPeakOf(threads) : 0;
  const t = await timeIt(fn, { minRuns: 3, minMs: quick ? 100 : 300 });
  const peak = (p0 + peakOf(threads)) / 2;
  const gflops = (2 * m * k * n) / (t.best / 1e3) / 1e9;
  const g = withGgml ? ggml({ type: kind === "f32" ? "f32" : "bf16", m, k, n }) : null;
  let floor: Row = {};
  if (roofline) {
    const read = (r0 + ceilings.now(threads)) / 2;
    const loopPeak = (l0 + loopPeakOf(threads)) / 2;
    const floorSeconds = Math.max((2 * m * k * n) / (peak * 1e9), (2 * m * k) / (read * 1e9));
    floor = { "roofline GB/s read": read, "k3/roofline": floorSeconds / (t.best / 1e3), "GEMM loop in L1": loopPeak, "k3/loop": gflops / loopPeak };
  }
  rows.push({
    workload: `${kind === "f32" ? "f32" : "bf16"} gemm ${kind === "rounded" ? "ROUNDED (vdpbf16ps)" : "exact"}`,
    "m x k": `${m}x${k}`,
    n,
    level: simdLevel(),
    threads,
    unit: "GFLOP/s",
    k3: gflops,
    "ceiling (same run)": `${peak.toFixed(0)} FMA peak`,
    "k3/ceiling": gflops / peak,
    ...floor,
    ggml: fmt(g?.gflops),
    "k3/ggml": g ? gflops / g.gflops : "-",
  });
  return gflops;
}

setSimdLevel(level);
if (!gemvOnly) {
// K3's dense shapes (attention/shared-expert projections, dense FFN up/down, the expert-sized pair); the
// 163840x7168 lm_head is left out of the default run (2.3 GB of weights for us and again for ggml).
const listArg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3).split(",");
const gemmShapeArg = gemmExactOnly ? listArg("shapes") : undefined;
const gemmShapes: Array<[number, number]> = gemmShapeArg ? gemmShapeArg.map((s) => s.split("x").map(Number) as [number, number])
  : quick ? [[3072, 3584]]
  : [[12288, 7168], [7168, 12288], [33792, 7168], [7168, 33792], [3072, 3584], [3584, 3072]];
const nsArg = gemmExactOnly ? listArg("ns")?.map(Number) : undefined;
const gemmNs = nsArg ?? (gemmExactOnly ? [16, 32, 64] : quick ? [8, 32] : [4, 8, 16, 32, 64]);
const gemmThreads = (gemmExactOnly ? listArg("threads")?.map(Number) : undefined) ?? [2];
for (const [m, k] of gemmShapes) for (const n of gemmNs) for (const threads of gemmThreads) await gemmRow("exact", m, k, n, threads, threads === 2 && (n === 8 || n === 32));
notes.push("Exact GEMM rows: k3/roofline is the time floor max(2mkn / FMA peak, 2mk weight bytes / read ceiling, both measured beside the row) over the row's time; the weights are one buffer (a shape under the last-level cache size may be served from it, above the read ceiling). GEMM loop in L1: fmaPeak({ loop: \"gemm\" }) beside the row, the exact kernel's register loop (6 weight + 4 activation vector loads per 24 FMAs on AVX-512) with every operand in L1: the most the exact summation order reaches on this core; k3/loop is the row over it.");
if (!gemmExactOnly) {
for (const [m, k] of gemmShapes) for (const n of [8, 32]) await gemmRow("rounded", m, k, n, 2, true);
await gemmRow("f32", 3072, 3584, 32, 2, true);
setSimdLevel("avx2");
await gemmRow("exact", 3072, 3584, 32, 2, false);
await gemmRow("exact", 3072, 3584, 32, 1, false);
setSimdLevel(level);
notes.push(`Rounded rows: vdpbf16ps ${roundedGemmUsesDpbf16() ? "in use" : "NOT available here (exact kernels on the rounded X)"}; the ggml column of the exact rows is ggml's bf16 matmul, which itself rounds X to bf16 (compare the rounded row of the same shape).`);
}
}

// ---------------------------------------------------------------- GEMV (decode) from DRAM

// K3's decode shapes (rows x cols): dense layer 0 w1/w3 and w2, the MLA/KDA projections, MLA q_a /
// kv_a, lm_head, and the Kimi-Linear shapes of the ggml anchors.
// --shapes=MxK,MxK picks some of them (to split a run into short exclusive stretches).
const shapeArg = process.argv.find((a) => a.startsWith("--shapes="))?.slice(9);
const gemvShapes: Array<[number, number]> = shapeArg ? shapeArg.split(",").map((s) => s.split("x").map(Number) as [number, number])
  : quick ? [[3072, 3584]] : [
    [12288, 7168], [7168, 12288], [33792, 7168], [7168, 33792], [163840, 7168],
    [1536, 7168], [512, 7168], [3072, 3584], [3584, 3072],
  ];
for (const [m, k] of gemmExactOnly || gemmOnly ? [] : gemvShapes) {
  const bytes1 = m * k * 2;
  const copies = Math.max(1, Math.ceil((quick ? 128 : 512) * MiB / bytes1));
  const ws = Array.from({ length: copies }, (_, c) => bf16Weights(m * k, c + 1));
  const x = activations(k), y = new Float32Array(m);
  const rate: number[] = [], rateRounded: number[] = [];
  for (const threads of [1, 2]) {
    setThreadCount(threads);
    const { seconds, ceiling } = await ceilings.time(threads, () => { for (const w of ws) gemvBf16(w, x, y, { rows: m, cols: k }); }, { minRuns: 3, minMs: quick ? 200 : 600 });
    const gb = (bytes1 * copies) / seconds / 1e9;
    rate.push(gb);
    const g = ggml({ type: "bf16", m, k, n: 1, experts: Math.max(1, Math.ceil(256 * MiB / bytes1)) }, threads);
    rows.push({
      workload: "bf16 gemv (DRAM)",
      "m x k": `${m}x${k}`,
      n: 1,
      level: simdLevel(),
      threads,
      unit: "GB/s",
      k3: gb,
      "ceiling (same run)": `${ceiling.toFixed(1)} read`,
      "k3/ceiling": gb / ceiling,
      ggml: fmt(g?.gbPerSec),
      "k3/ggml": g ? gb / g.gbPerSec : "-",
      "2T/1T": threads === 2 ? rate[1] / rate[0] : "-",
    });
    // The opt-in rounded path at batch 1 (X rounded to bf16, vdpbf16ps: what ggml's bf16 GEMV computes),
    // beside the same ggml figure; its error is bounded in test/gemm-blocked.test.ts.
    const yr = new Float32Array(m);
    const r = await ceilings.time(threads, () => { for (const w of ws) gemmBf16Rounded(w, x, yr, { rows: m, cols: k, batch: 1 }); }, { minRuns: 3, minMs: quick ? 200 : 600 });
    const gbr = (bytes1 * copies) / r.seconds / 1e9;
    rateRounded.push(gbr);
    rows.push({
      workload: "bf16 gemv ROUNDED (opt-in, gemmBf16Rounded n=1)",
      "m x k": `${m}x${k}`,
      n: 1,
      level: simdLevel(),
      threads,
      unit: "GB/s",
      k3: gbr,
      "ceiling (same run)": `${r.ceiling.toFixed(1)} read`,
      "k3/ceiling": gbr / r.ceiling,
      ggml: fmt(g?.gbPerSec),
      "k3/ggml": g ? gbr / g.gbPerSec : "-",
      "2T/1T": threads === 2 ? rateRounded[1] / rateRounded[0] : "-",
    });
  }
}

// ---------------------------------------------------------------- two cores worth two

function spinner(): { stop: () => void } {
  const child = spawn(process.execPath, ["-e", "for(;;){}"], { stdio: "ignore" });
  return { stop: () => child.kill("SIGKILL") };
}

async function scaling(label: string, fn: () => unknown, work: number, unit: string, load: boolean) {
  const load1 = load ? spinner() : null;
  try {
    await new Promise((r) => setTimeout(r, 100));
    const rate: number[] = [], rateRounded: number[] = [];
    let helped = "-", sleeps = "-";
    for (const threads of [1, 2]) {
      setThreadCount(threads);
      const s0 = poolStats();
      const t = await timeIt(fn, { minRuns: 5, minMs: quick ? 200 : 500 });
      const s1 = poolStats();
      rate.push(work / (t.median / 1e3));
      if (threads === 2) {
        helped = `${s1.helped - s0.helped}/${s1.jobs - s0.jobs}`;
        sleeps = String(s1.sleeps - s0.sleeps);
      }
    }
    rows.push({
      workload: `2 threads vs 1: ${label}`,
      "m x k": load ? "loaded (1 spinning process)" : "idle",
      n: "-",
      level: simdLevel(),
      threads: "1 -> 2",
      unit,
      k3: `${rate[0].toFixed(1)} -> ${rate[1].toFixed(1)} (2T/1T ${(rate[1] / rate[0]).toFixed(2)})`,
      "ceiling (same run)": `worker helped ${helped} jobs, slept ${sleeps}x`,
      "k3/ceiling": "-",
      ggml: "-",
      "k3/ggml": "-",
    });
  } finally {
    load1?.stop();
  }
}

if (!gemvOnly && !gemmExactOnly) {
  const m = 3072, k = 3584, n = 32;
  const w = bf16Weights(m * k, 7), X = activations(n * k), Y = new Float32Array(n * m);
  const wg = bf16Weights(1024 * 1024, 8), xg = activations(1024), yg = new Float32Array(1024);
  for (const load of [false, true]) {
    await scaling("bf16 gemm 3072x3584 n=32 (median)", () => gemmBf16(w, X, Y, { rows: m, cols: k, batch: n }), 2 * m * k * n / 1e9, "GFLOP/s", load);
    await scaling("bf16 gemv 1024x1024 L2-hot, 50 calls (median)", () => { for (let i = 0; i < 50; i++) gemvBf16(wg, xg, yg, { rows: 1024, cols: 1024 }); }, 50 * 2 * 1024 * 1024 / 1e9, "GB/s", load);
  }
}
setThreadCount(2);

notes.push(
  `FMA peak: fmaPeak (independent FMA chains per thread at the row's SIMD level: 16 zmm on AVX-512, 12 ymm on AVX2) right before and after each GEMM row, mean of the two. GEMM weights are one matrix reused (like ggml's test-backend-ops, which repeats one op on one tensor).`,
  `GEMV read ceiling: memoryReadCeiling (512 MiB, best of 3 x {1, 4 interleaved streams per thread}) right before and after each row, mean; range this run: ${ceilings.range()}. Our GEMV weights cycle through >= 512 MiB of copies (DRAM), best of >= 3 passes; ggml's GEMV rows use E distinct matrices in one batched MUL_MAT (E x the matrix >= 256 MiB), its us/run; 1-thread ggml runs under OMP_THREAD_LIMIT=1. 2T/1T: our 2-thread over our 1-thread GB/s for the shape.`,
  ggmlNote(bin),
);
writeReport("dense-kernels", {
  title: "@k3/dense issue-18 kernels: batched GEMM vs FMA peak, GEMV vs read ceiling, ggml beside",
  command: `${bin ? (portable ? "K3_GGML_BIN_AVX2=<portable test-backend-ops> " : "K3_GGML_BIN=<test-backend-ops> ") : ""}flock -x /tmp/k3-bench.lock node --import tsx bench/kernels.bench.ts ${process.argv.slice(2).join(" ")}`,
  rows,
  notes,
});
