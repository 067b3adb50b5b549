// node --import tsx bench/dot-rows.bench.ts, under /work/bin/k3-excl (or flock -x /tmp/k3-bench.lock)
// dotRowsBf16 (C[i][j] = A[i] . B[j] on the calling thread, the product @k3/moe-stream's dense experts,
// MLA's absorption and the KDA core call inside pool tasks) in GFLOP/s for m = 1..64 A rows, against
// gemmBf16 on one pool thread over the same operands (the same blocked kernel from m = 2 on: the
// two columns should agree). Weights cycle through distinct copies (>= 64 MiB) so they come from DRAM.
import { dotRowsBf16, f32ToBf16, gemmBf16, setThreadCount } from "../src/index.js";

const REPS = 5;
setThreadCount(1);
console.log(`dotRowsBf16 vs gemmBf16 (1 thread), GFLOP/s (best of ${REPS} passes), ${new Date().toISOString().slice(0, 16)} UTC`);
console.log("| k | n (B rows) | m (A rows) | dotRowsBf16 | gemmBf16 | dot / gemm |");
console.log("|---:|---:|---:|---:|---:|---:|");
for (const [k, n] of [[7168, 256], [2304, 704]]) {
  const copies = Math.max(2, Math.ceil((64 << 20) / (n * k * 2)));
  const W = Array.from({ length: copies }, (_, c) => f32ToBf16(new Float32Array(n * k).map((_, i) => Math.sin(i * 0.37 + c))));
  for (const m of [1, 2, 4, 8, 16, 64]) {
    const A = new Float32Array(m * k).map((_, i) => Math.cos(i * 0.11));
    const C = new Float32Array(m * n);
    const best = (run: (w: Uint16Array) => void) => {
      let t = Infinity;
      for (let r = 0; r < REPS; r++) {
        const t0 = performance.now();
        for (const w of W) run(w);
        t = Math.min(t, performance.now() - t0);
      }
      return (2 * m * n * k * copies) / (t * 1e6);
    };
    const dot = best((w) => dotRowsBf16(A, w, C, { m, n, k }));
    const gemm = best((w) => gemmBf16(w, A, C, { rows: n, cols: k, batch: m }));
    console.log(`| ${k} | ${n} | ${m} | ${dot.toFixed(1)} | ${gemm.toFixed(1)} | ${(dot / gemm).toFixed(2)} |`);
  }
}
