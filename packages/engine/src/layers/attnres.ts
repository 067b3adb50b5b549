/**
 * K3 block attention residuals (docs/architecture.md §6.2), token-local:
 * R(p, [b_1..b_n]; w_n, w_p): V = (b_1..b_n, p); score_i = Σ_d (V_i/rms(V_i))[d]·w_n[d]·w_p[d];
 * π = softmax(score); return Σ π_i V_i over the RAW sources (fp32).
 */
import { mixRows, rmsNormDot, Scratch } from "@k3/dense";

/** The fused weight w_n ⊙ w_p (only the product matters). */
export function fuseResWeights(norm: Float32Array, proj: Float32Array): Float32Array {
  const w = new Float32Array(norm.length);
  for (let i = 0; i < w.length; i++) w[i] = Math.fround(norm[i] * proj[i]);
  return w;
}

/** Work buffers of attnResMix (its calls are synchronous). */
const work = new Scratch();

/**
 * Mixes, for each of T tokens, the sources blocks[0..n-1] and p (each [T, D]) into out [T, D]
 * (out must not overlap a source). Each score is the source row's RMSNorm values against w summed
 * in float64 in index order (@k3/dense rmsNormDot: one pass per source over the chunk, on the pool);
 * the softmax runs here in float64; the mix is @k3/dense mixRows (float64 accumulation per value,
 * source after source). Token-local, so the result is the same for any chunking of the tokens.
 * `weights`, when given ([T, n + 1] floats), receives each token's softmax weights π over
 * (blocks..., p): the mix is Σ_i π_i V_i with exactly these values.
 */
export function attnResMix(
  blocks: Float32Array[],
  p: Float32Array,
  w: Float32Array,
  eps: number,
  T: number,
  D: number,
  out: Float32Array,
  weights?: Float32Array,
): void {
  const sources = [...blocks, p].map((s) => s.subarray(0, T * D));
  const n = sources.length;
  if (weights && weights.length < T * n) throw new RangeError(`attnResMix: weights holds ${weights.length} values, need T=${T} x ${n} sources`);
  const scores = work.get("scores", n * T);
  for (let i = 0; i < n; i++) rmsNormDot(sources[i], w, eps, D, scores.subarray(i * T, (i + 1) * T));
  const pi = work.get("pi", T * n);
  const e = new Float64Array(n);
  for (let t = 0; t < T; t++) {
    let max = -Infinity;
    for (let i = 0; i < n; i++) if (scores[i * T + t] > max) max = scores[i * T + t];
    let total = 0;
    for (let i = 0; i < n; i++) {
      e[i] = Math.exp(scores[i * T + t] - max);
      total += e[i];
    }
    for (let i = 0; i < n; i++) pi[t * n + i] = Math.fround(e[i] / total);
  }
  if (weights) weights.set(pi.subarray(0, T * n));
  mixRows(sources, pi.subarray(0, T * n), D, out.subarray(0, T * D));
}
