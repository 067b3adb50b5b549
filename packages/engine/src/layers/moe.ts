/**
 * MoE FFN (architecture.md §4): sigmoid router whose bias only selects, renormalised unbiased
 * weights × routed_scaling_factor; routed experts (K3: in the latent, aggregate RMSNorm-ed once,
 * projected back up); shared experts at full width, unweighted.
 *
 * Prefill is chunk-union: each expert used by any token of the chunk runs once over all of its
 * tokens (a batched GEMM, bit-identical to per-token GEMV), then each token sums its experts in
 * router order, so the result does not depend on the chunking.
 *
 * Temporary: the experts are decoded from MXFP4 at load and kept resident as f32 here;
 * @k3/moe-stream (expert store + cache) and @k3/mxfp4 (packed matvec) replace this path.
 */
import { rmsNorm, sigmoid, topK } from "@k3/dense";
import type { ModelConfig } from "../config.js";
import type { RunCounters } from "../report.js";
import { loadMatrix, loadVector, matmul, WeightError, type Matrix, type WeightSource } from "../weights.js";
import { glu, GluMlp } from "./mlp.js";

const ROUTER_EPS = 1e-20;
const E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6];

/** Decodes a compressed-tensors MXFP4 matrix (low nibble = even element; scale 2^(s−127)). */
function decodeMxfp4(src: WeightSource, base: string, rows: number, cols: number): Matrix {
  const packedInfo = src.info(base + ".weight_packed");
  const scaleInfo = src.info(base + ".weight_scale");
  if (packedInfo.shape.join() !== `${rows},${cols / 2}` || scaleInfo.shape.join() !== `${rows},${cols / 32}`) {
    throw new WeightError(`${base}: packed ${JSON.stringify(packedInfo.shape)} / scale ${JSON.stringify(scaleInfo.shape)}, the config implies [${rows},${cols / 2}] / [${rows},${cols / 32}]`);
  }
  const packed = src.read(base + ".weight_packed");
  const scale = src.read(base + ".weight_scale");
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let b = 0; b < cols / 32; b++) {
      const s = scale[r * (cols / 32) + b];
      if (s === 255) throw new WeightError(`${base}.weight_scale: row ${r} block ${b} is 255 (NaN scale)`);
      const mult = Math.pow(2, s - 127);
      for (let j = 0; j < 16; j++) {
        const byte = packed[r * (cols / 2) + b * 16 + j];
        out[r * cols + b * 32 + 2 * j] = E2M1[byte & 15] * mult;
        out[r * cols + b * 32 + 2 * j + 1] = E2M1[byte >> 4] * mult;
      }
    }
  }
  return { name: base, rows, cols, f32: out };
}

interface Expert {
  w1: Matrix;
  w2: Matrix;
  w3: Matrix;
}

export class MoeFfn {
  private readonly gate: Matrix;
  private readonly bias: Float32Array;
  private readonly experts: Expert[] = [];
  private readonly shared?: GluMlp;
  private readonly down?: Matrix;
  private readonly up?: Matrix;
  private readonly norm?: Float32Array;
  /** Input width of the experts (latent or hidden). */
  private readonly ein: number;

  constructor(private readonly cfg: ModelConfig, src: WeightSource, prefix: string) {
    const D = cfg.hiddenSize;
    const m = cfg.moe;
    this.gate = loadMatrix(src, prefix + "gate.weight", m.numExperts, D);
    this.bias = loadVector(src, prefix + "gate.e_score_correction_bias", m.numExperts);
    this.ein = m.latentDim ?? D;
    if (m.latentDim !== null) {
      this.down = loadMatrix(src, prefix + "routed_expert_down_proj.weight", m.latentDim, D);
      this.up = loadMatrix(src, prefix + "routed_expert_up_proj.weight", D, m.latentDim);
      if (m.latentNorm) this.norm = loadVector(src, prefix + "routed_expert_norm.weight", m.latentDim);
    }
    if (m.numShared > 0) this.shared = new GluMlp(cfg, src, prefix + "shared_experts.", D, m.numShared * m.intermediate);
    for (let e = 0; e < m.numExperts; e++) {
      const b = `${prefix}experts.${e}.`;
      const load = (w: string, rows: number, cols: number) =>
        src.has(`${b}${w}.weight_packed`) ? decodeMxfp4(src, `${b}${w}`, rows, cols) : loadMatrix(src, `${b}${w}.weight`, rows, cols);
      this.experts.push({ w1: load("w1", m.intermediate, this.ein), w2: load("w2", this.ein, m.intermediate), w3: load("w3", m.intermediate, this.ein) });
    }
  }

  /** Router: ids [T, k] (descending biased score) and weights [T, k]. */
  route(x: Float32Array, T: number): { ids: Int32Array; weights: Float32Array } {
    const { numExperts: E, topK: k, renormalize, routedScalingFactor } = this.cfg.moe;
    const s = new Float32Array(T * E);
    matmul(this.gate, x, s, T);
    sigmoid(s, s);
    const ids = new Int32Array(T * k);
    const weights = new Float32Array(T * k);
    const biased = new Float32Array(E);
    for (let t = 0; t < T; t++) {
      const row = s.subarray(t * E, (t + 1) * E);
      for (let e = 0; e < E; e++) biased[e] = row[e] + this.bias[e];
      const top = topK(biased, k);
      let sum = 0;
      for (let j = 0; j < k; j++) sum += row[top.indices[j]];
      for (let j = 0; j < k; j++) {
        const e = top.indices[j];
        ids[t * k + j] = e;
        weights[t * k + j] = (renormalize ? row[e] / (sum + ROUTER_EPS) : row[e]) * routedScalingFactor;
      }
    }
    return { ids, weights };
  }

  /** out[T, D] = MoE(x[T, D]). */
  forward(x: Float32Array, T: number, out: Float32Array, counters?: RunCounters): void {
    const D = this.cfg.hiddenSize;
    const { topK: k, intermediate: I } = this.cfg.moe;
    const { ids, weights } = this.route(x, T);
    let u = x;
    if (this.down) {
      u = new Float32Array(T * this.ein);
      matmul(this.down, x, u, T);
    }
    // Chunk union: each used expert runs once over the tokens that chose it.
    const y = new Float32Array(T * k * this.ein);
    const users = new Map<number, number[]>();
    for (let i = 0; i < T * k; i++) {
      const list = users.get(ids[i]);
      if (list) list.push(i);
      else users.set(ids[i], [i]);
    }
    for (const e of [...users.keys()].sort((a, b) => a - b)) {
      const slots = users.get(e)!;
      const n = slots.length;
      const X = new Float32Array(n * this.ein);
      slots.forEach((slot, r) => X.set(u.subarray(Math.floor(slot / k) * this.ein, (Math.floor(slot / k) + 1) * this.ein), r * this.ein));
      const ex = this.experts[e];
      const g = new Float32Array(n * I);
      const up = new Float32Array(n * I);
      matmul(ex.w1, X, g, n);
      matmul(ex.w3, X, up, n);
      glu(this.cfg, g, up, g);
      const Y = new Float32Array(n * this.ein);
      matmul(ex.w2, g, Y, n);
      slots.forEach((slot, r) => y.set(Y.subarray(r * this.ein, (r + 1) * this.ein), slot * this.ein));
    }
    if (counters) {
      counters.expertRequests += users.size;
      counters.expertResidentHits += users.size;
    }
    // Per token, sum in router order.
    const agg = new Float32Array(T * this.ein);
    for (let t = 0; t < T; t++) {
      const a = agg.subarray(t * this.ein, (t + 1) * this.ein);
      for (let j = 0; j < k; j++) {
        const w = weights[t * k + j];
        const yy = y.subarray((t * k + j) * this.ein, (t * k + j + 1) * this.ein);
        for (let d = 0; d < this.ein; d++) a[d] += w * yy[d];
      }
    }
    if (this.up) {
      if (this.norm) rmsNorm(agg, this.norm, this.cfg.rmsNormEps, agg, this.ein);
      matmul(this.up, agg, out, T);
    } else {
      out.set(agg.subarray(0, T * D));
    }
    if (this.shared) {
      const sh = new Float32Array(T * D);
      this.shared.forward(x, T, sh);
      for (let i = 0; i < T * D; i++) out[i] += sh[i];
    }
  }
}
