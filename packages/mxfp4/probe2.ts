import { setSimdLevel, setThreadCount } from "@k3/dense";
import { matvec, matrixBytes, type Mxfp4Matrix } from "./src/index.js";
function rnd(n: number, seed: number) { const a = new Uint8Array(n); let s = seed >>> 0 || 1; for (let i = 0; i < n; i++) { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; a[i] = s & 255; } return a; }
const cols = 3584;
for (const rows of [64, 256, 3072]) {
const m: Mxfp4Matrix = { packed: rnd(rows*cols/2, 1), scales: rnd(rows*cols/32, 2).map(v => 120 + (v % 8)), rows, cols };
const x = new Float32Array(cols).map((_, i) => Math.sin(i)); const y = new Float32Array(rows);
setThreadCount(1); setSimdLevel("avx512");
const n = Math.round(2e9 / matrixBytes(m) / 10);
let best = Infinity;
for (let rep = 0; rep < 5; rep++) { const t0 = performance.now(); for (let i = 0; i < n; i++) matvec(m, x, y); best = Math.min(best, performance.now() - t0); }
const rb = rows * cols / 32 * n / (best / 1e3);
console.log(`rows ${rows}: ${(matrixBytes(m)*n/(best/1e3)/1e9).toFixed(1)} GB/s hot, ${(rb/1e9).toFixed(2)} G row-blocks/s, ${(3.0e9/rb).toFixed(2)} cycles/row-block @3GHz`);
}
