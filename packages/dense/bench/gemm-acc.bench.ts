// pnpm bench (in packages/dense), under `flock /tmp/k3-bench.lock`: the two small products other
// addons call from inside their own tasks, gemmAcc (C += A B) and dotRows (C = A B^T), at the shapes
// @k3/kda and @k3/mla run them with, at 1 thread (they run on the calling thread), next to
// @k3/dense's own f32 GEMM on an L2-resident problem at 1 thread in the same run (the dense FMA rate
// this machine gives now).
import { bestSimdLevel, dotRowsBf16, dotRowsF32, f32ToBf16, gemmAccBf16, gemmAccF32, gemmF32, setSimdLevel, setThreadCount, simdLevel, type SimdLevel } from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so its dependency-free modules are imported by path.
import { timeIt, writeReport } from "../../test-utils/src/bench.js";
import { uniform } from "../../test-utils/src/random.js";
import { simdLevelsUpTo } from "../../test-utils/src/settings.js";

interface Shape { name: string; m: number; n: number; k: number; lda: number; ldb: number; ldc: number; bf16: boolean; dot?: boolean }
const shapes: Shape[] = [
  { name: "KDA [Kg; Qg] S0 (2 x 64 tokens, dk = dv = 128)", m: 128, n: 128, k: 128, lda: 128, ldb: 128, ldc: 128, bf16: false },
  { name: "KDA M/P block (16 rows x 64 columns, dk 128)", m: 16, n: 64, k: 128, lda: 128, ldb: 64, ldc: 64, bf16: false },
  { name: "MLA prefill P.V (96 heads x 64 positions, latent 512, bf16 cache)", m: 96, n: 512, k: 64, lda: 64, ldb: 576, ldc: 512, bf16: true },
  { name: "MLA decode P.V (24 heads, f32 cache)", m: 24, n: 512, k: 64, lda: 64, ldb: 576, ldc: 512, bf16: false },
  { name: "MLA decode absorb q~ = W_UK^T q (1 token, bf16 kv_b)", m: 1, n: 512, k: 128, lda: 192, ldb: 512, ldc: 576, bf16: true },
  { name: "dotRows: MLA decode scores (24 heads x 64 positions, latent 576, bf16 cache)", m: 24, n: 64, k: 576, lda: 576, ldb: 576, ldc: 64, bf16: true, dot: true },
  { name: "dotRows: MLA decode scores (24 heads x 64 positions, latent 576, f32 cache)", m: 24, n: 64, k: 576, lda: 576, ldb: 576, ldc: 64, bf16: false, dot: true },
  { name: "dotRows: MLA expanded scores (1 head x 64 positions, 192, bf16 cache)", m: 1, n: 64, k: 192, lda: 192, ldb: 96 * 192, ldc: 64, bf16: true, dot: true },
  { name: "dotRows: MLA project o = W_UV o~ (1 token, bf16 kv_b)", m: 1, n: 128, k: 512, lda: 512, ldb: 512, ldc: 128, bf16: true, dot: true },
  { name: "dotRows: KDA direct dots of a steep block row (16 x dk 128)", m: 1, n: 16, k: 128, lda: 128, ldb: 128, ldc: 16, bf16: false, dot: true },
];

setThreadCount(1);
const levels = simdLevelsUpTo(bestSimdLevel()) as SimdLevel[];
const rows: Array<Record<string, string | number>> = [];
for (const level of levels) {
  setSimdLevel(level);
  // the reference rate: gemmF32 W [512 x 128] x 256 activation rows, 1 thread, same level
  const W = uniform(512 * 128, -1, 1, 3), X = uniform(256 * 128, -1, 1, 4), Y = new Float32Array(256 * 512);
  const tGemm = await timeIt(() => gemmF32(W, X, Y, { rows: 512, cols: 128, batch: 256 }), { minRuns: 5, minMs: 500 });
  const gemmRate = (2 * 512 * 128 * 256) / (tGemm.best * 1e6);
  for (const s of shapes) {
    const A = uniform((s.m - 1) * s.lda + s.k, -0.01, 0.01, 5);
    const Bf = uniform(s.dot ? (s.n - 1) * s.ldb + s.k : (s.k - 1) * s.ldb + s.n, -1, 1, 6), B16 = f32ToBf16(Bf);
    const C = new Float32Array((s.m - 1) * s.ldc + s.n);
    const flop = 2 * s.m * s.n * s.k;
    const reps = Math.max(1, Math.round(2e7 / flop)); // ~20 MFLOP per timed run: the N-API call is noise
    const t = await timeIt(() => {
      for (let r = 0; r < reps; r++)
        if (s.dot) s.bf16 ? dotRowsBf16(A, B16, C, s) : dotRowsF32(A, Bf, C, s);
        else s.bf16 ? gemmAccBf16(A, B16, C, s) : gemmAccF32(A, Bf, C, s);
    }, { minRuns: 5, minMs: 400 });
    const rate = (flop * reps) / (t.best * 1e6);
    rows.push({ level, shape: `${s.name}: ${s.m}x${s.n}x${s.k}${s.bf16 ? " bf16 B" : ""}`, "us/call": (t.best * 1e3) / reps, "GFLOP/s": rate, "gemmF32 GFLOP/s (same run)": gemmRate, ratio: rate / gemmRate });
  }
}
writeReport("dense-gemm-acc", {
  title: "@k3/dense gemmAcc and dotRows at the kda/mla shapes vs @k3/dense's f32 GEMM rate (1 thread)",
  command: "flock /tmp/k3-bench.lock pnpm --filter @k3/dense bench",
  rows,
  notes: [`best of >= 5 runs; 1 thread; gemmF32 = W [512 x 128] x 256 rows, L2-resident, same level. Final level restored to ${simdLevel()}.`],
});
setSimdLevel(bestSimdLevel());
