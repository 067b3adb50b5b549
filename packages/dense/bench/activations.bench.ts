// node --import tsx bench/activations.bench.ts, under /work/bin/k3-excl (or flock -x /tmp/k3-bench.lock)
// sigmoid / silu / siluGlu / tanh / situGlu / sigmoidMul in ns per element at every SIMD level this CPU
// has, 1 thread (sigmoidMul and the GLUs above 8192 values would otherwise split over the pool), best
// of 30: the vector forms (k3_expf8 / k3_tanhf8, include/k3_exp_avx2.h, k3_tanh_avx2.h) against the
// scalar k3_expf / k3_tanhf loop that gives the same bits (the peer here: the same function one
// element at a time). Sizes: a 48B expert's and
// dense MLP's intermediate (1024, 9216), K3's dense MLP (33,792) and a prefill chunk's worth (1 Mi).
import { bestSimdLevel, setSimdLevel, setThreadCount, sigmoid, sigmoidMul, silu, siluGlu, situGlu, tanh } from "../src/index.js";

const levels = (["scalar", "avx2", "avx512"] as const).slice(0, ["scalar", "avx2", "avx512"].indexOf(bestSimdLevel()) + 1);
const sizes = [1024, 9216, 33792, 1 << 20];
const REPS = 30;

function bestNs(fn: () => unknown): number {
  let best = Infinity;
  for (let r = 0; r < REPS; r++) {
    const t0 = process.hrtime.bigint();
    fn();
    best = Math.min(best, Number(process.hrtime.bigint() - t0));
  }
  return best;
}

setThreadCount(1);
console.log(`activations, 1 thread, ns/element (best of ${REPS}), ${new Date().toISOString().slice(0, 16)} UTC`);
console.log(`| op | n | ${levels.join(" | ")} | ${levels.slice(1).map((l) => `scalar / ${l}`).join(" | ")} |`);
console.log(`|---|---:|${levels.map(() => "---:").join("|")}|${levels.slice(1).map(() => "---:").join("|")}|`);
for (const op of ["sigmoid", "silu", "siluGlu", "tanh", "situGlu", "sigmoidMul"] as const) {
  for (const n of sizes) {
    const g = new Float32Array(n).map((_, i) => 20 * Math.sin(i * 0.37));
    const u = g.slice().reverse();
    const out = new Float32Array(n);
    const runs = {
      sigmoid: () => sigmoid(g, out),
      silu: () => silu(g, out),
      siluGlu: () => siluGlu(g, u, out),
      tanh: () => tanh(g, out),
      situGlu: () => situGlu(g, u, out),
      sigmoidMul: () => sigmoidMul(u, g, out),
    };
    const run = runs[op];
    const ns = levels.map((l) => {
      setSimdLevel(l);
      return bestNs(run) / n;
    });
    console.log(`| ${op} | ${n} | ${ns.map((v) => v.toFixed(2)).join(" | ")} | ${ns.slice(1).map((v) => (ns[0] / v).toFixed(1) + "x").join(" | ")} |`);
  }
}
setSimdLevel(bestSimdLevel());
