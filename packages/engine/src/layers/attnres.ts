/**
 * K3 block attention residuals (docs/architecture.md §6.2), token-local:
 * R(p, [b_1..b_n]; w_n, w_p): V = (b_1..b_n, p); score_i = Σ_d (V_i/rms(V_i))[d]·w_n[d]·w_p[d];
 * π = softmax(score); return Σ π_i V_i over the RAW sources (fp32).
 */
import { rmsNorm } from "@k3/dense";

/** The fused weight w_n ⊙ w_p (only the product matters). */
export function fuseResWeights(norm: Float32Array, proj: Float32Array): Float32Array {
  const w = new Float32Array(norm.length);
  for (let i = 0; i < w.length; i++) w[i] = Math.fround(norm[i] * proj[i]);
  return w;
}

/**
 * Mixes, for each of T tokens, the sources blocks[0..n-1] and p (each [T, D]) into out [T, D].
 * `scratch` needs D floats. Scores are summed in index order (a fixed order: same result for any
 * chunking of the tokens). `weights`, when given ([T, n + 1] floats), receives each token's softmax
 * weights π over (blocks..., p): the mix is Σ_i π_i V_i with exactly these values.
 */
export function attnResMix(
  blocks: Float32Array[],
  p: Float32Array,
  w: Float32Array,
  eps: number,
  T: number,
  D: number,
  out: Float32Array,
  scratch: Float32Array,
  weights?: Float32Array,
): void {
  const sources = [...blocks, p];
  const n = sources.length;
  if (weights && weights.length < T * n) throw new RangeError(`attnResMix: weights holds ${weights.length} values, need T=${T} x ${n} sources`);
  const score = new Float64Array(n);
  for (let t = 0; t < T; t++) {
    let max = -Infinity;
    for (let i = 0; i < n; i++) {
      const row = sources[i].subarray(t * D, (t + 1) * D);
      rmsNorm(row, w, eps, scratch, D);
      let s = 0;
      for (let d = 0; d < D; d++) s += scratch[d];
      score[i] = Math.fround(s);
      if (score[i] > max) max = score[i];
    }
    let total = 0;
    for (let i = 0; i < n; i++) {
      score[i] = Math.exp(score[i] - max);
      total += score[i];
    }
    const o = out.subarray(t * D, (t + 1) * D);
    o.fill(0);
    for (let i = 0; i < n; i++) {
      const pi = Math.fround(score[i] / total);
      if (weights) weights[t * n + i] = pi;
      const row = sources[i].subarray(t * D, (t + 1) * D);
      for (let d = 0; d < D; d++) o[d] += pi * row[d];
    }
  }
}
