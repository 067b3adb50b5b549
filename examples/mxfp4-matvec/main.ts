// Quantise a K3-expert-sized matrix (3072 x 3584) to MXFP4, multiply on the packed bytes, and check
// the result against "dequantize, then a dense f32 GEMV". `--quick` uses a smaller matrix (smoke test).
import { gemvF32, simdLevel, threadCount } from "@k3/dense";
import { dequantize, matmul, matrixBytes, matvec, quantize, toGgml, fromGgml } from "@k3/mxfp4";

const quick = process.argv.includes("--quick");
const rows = quick ? 256 : 3072;
const cols = quick ? 512 : 3584;

// Deterministic "weights" with a few outliers, like a trained projection.
const w = new Float32Array(rows * cols);
for (let i = 0; i < w.length; i++) w[i] = Math.sin(i * 0.618) * (i % 97 === 0 ? 8 : 0.05);
const x = new Float32Array(cols).map((_, i) => Math.cos(i * 0.37));

const m = quantize(w, rows, cols);
console.log(`quantised ${rows} x ${cols}: ${matrixBytes(m)} bytes (bf16 would be ${rows * cols * 2})`);

const y = matvec(m, x, new Float32Array(rows));
const W = dequantize(m);
const dense = gemvF32(W, x, new Float32Array(rows), { rows, cols });
// The two sum in different orders: compare against the size of the terms, sum |w x|.
let worst = 0;
for (let r = 0; r < rows; r++) {
  let magnitude = 0;
  for (let k = 0; k < cols; k++) magnitude += Math.abs(W[r * cols + k] * x[k]);
  worst = Math.max(worst, Math.abs(y[r] - dense[r]) / magnitude);
}
console.log(`packed matvec vs dequantize + gemvF32: worst |difference| / sum|w x| = ${worst.toExponential(2)}`);

const batch = 8;
const X = new Float32Array(batch * cols).map((_, i) => Math.sin(i * 0.11));
const Y = matmul(m, X, new Float32Array(batch * rows), batch);
const y3 = matvec(m, X.subarray(3 * cols, 4 * cols), new Float32Array(rows));
const same = Buffer.from(Y.buffer, 3 * rows * 4, rows * 4).equals(Buffer.from(y3.buffer));
console.log(`matmul batch ${batch}: row 3 bit-identical to matvec: ${same}`);

const back = fromGgml(toGgml(m), rows, cols);
console.log(`ggml block_mxfp4 round trip byte-exact: ${Buffer.from(back.packed).equals(Buffer.from(m.packed))}`);

const t0 = performance.now();
const reps = quick ? 20 : 100;
for (let i = 0; i < reps; i++) matvec(m, x, y);
const us = ((performance.now() - t0) / reps) * 1000;
console.log(`matvec: ${us.toFixed(0)} us (${(matrixBytes(m) / us / 1e3).toFixed(1)} GB/s, cache-warm) on ${threadCount()} threads, ${simdLevel()}`);
if (!same || worst > 1e-5) process.exit(1);
