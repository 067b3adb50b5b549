/**
 * Kimi Delta Attention mixer (architecture.md §2), assembled from @k3/dense kernels with the
 * sequential recurrence written out. Temporary: @k3/kda's KdaLayer replaces this when it lands.
 *
 * Per token: q,k,v projections → causal depthwise conv (carried K−1 taps) + SiLU → L2 norm of
 * q,k per head (q pre-scaled by dk^−½) → decay gate (K3: lb·σ(e^A z); 48B: −e^A softplus(z))
 * → S ← diag(α)S; e = v − Sᵀk; S += βk eᵀ; o = Sᵀq → per-head RMSNorm then ⊙σ(gate) → o_proj.
 */
import { l2Normalize, rmsNorm, sigmoid, silu } from "@k3/dense";
import type { ModelConfig } from "../config.js";
import { loadMatrix, loadVector, matmul, WeightError, type Matrix, type WeightSource } from "../weights.js";

export interface KdaState {
  kind: "kda";
  /** [H, dk, dv] recurrent state, rows = key channels. */
  S: Float32Array;
  /** Last K−1 pre-conv inputs for q, k, v: [3, K−1, P], oldest first. */
  conv: Float32Array;
}

const L2_EPS = 1e-6;

export class KdaMixer {
  private readonly H: number;
  private readonly dk: number;
  private readonly P: number;
  private readonly K: number;
  private readonly q: Matrix;
  private readonly k: Matrix;
  private readonly v: Matrix;
  private readonly o: Matrix;
  private readonly fa: Matrix;
  private readonly fb: Matrix;
  private readonly b: Matrix;
  private readonly g?: Matrix;
  private readonly ga?: Matrix;
  private readonly gb?: Matrix;
  private readonly convW: Float32Array[];
  private readonly aLog: Float32Array;
  private readonly dtBias: Float32Array;
  private readonly oNorm: Float32Array;

  constructor(private readonly cfg: ModelConfig, src: WeightSource, prefix: string) {
    const D = cfg.hiddenSize;
    const H = (this.H = cfg.kda.numHeads);
    const dk = (this.dk = cfg.kda.headDim);
    const P = (this.P = H * dk);
    const K = (this.K = cfg.kda.convKernel);
    this.q = loadMatrix(src, prefix + "q_proj.weight", P, D);
    this.k = loadMatrix(src, prefix + "k_proj.weight", P, D);
    this.v = loadMatrix(src, prefix + "v_proj.weight", P, D);
    this.o = loadMatrix(src, prefix + "o_proj.weight", D, P);
    this.fa = loadMatrix(src, prefix + "f_a_proj.weight", dk, D);
    this.fb = loadMatrix(src, prefix + "f_b_proj.weight", P, dk);
    this.b = loadMatrix(src, prefix + "b_proj.weight", H, D);
    const hasFull = src.has(prefix + "g_proj.weight");
    if (hasFull !== cfg.kda.fullRankGate) {
      throw new WeightError(`${prefix}: use_full_rank_gate = ${cfg.kda.fullRankGate} but the checkpoint ${hasFull ? "has" : "lacks"} g_proj`);
    }
    if (hasFull) this.g = loadMatrix(src, prefix + "g_proj.weight", P, D);
    else {
      this.ga = loadMatrix(src, prefix + "g_a_proj.weight", dk, D);
      this.gb = loadMatrix(src, prefix + "g_b_proj.weight", P, dk);
    }
    this.convW = ["q", "k", "v"].map((n) => loadVector(src, `${prefix}${n}_conv1d.weight`, P * K, [[P, 1, K], [P, K]]));
    // A_log is per head: 48B stores [1,1,H,1]; K3 pads to head_dim with zeros (slice to H).
    const aInfo = src.info(prefix + "A_log");
    const aCount = aInfo.shape.reduce((a, x) => a * x, 1);
    const aAll = loadVector(src, prefix + "A_log", aCount);
    if (cfg.kda.gateLowerBound !== null) {
      if (aCount < H) throw new WeightError(`tensor ${prefix}A_log: ${aCount} entries, fewer than num_heads = ${H}`);
      for (let i = H; i < aCount; i++) if (aAll[i] !== 0) throw new WeightError(`tensor ${prefix}A_log: padding entry ${i} is ${aAll[i]}, expected 0 (only the first ${H} are per-head values)`);
    } else if (aCount !== H) {
      throw new WeightError(`tensor ${prefix}A_log: ${aCount} entries, expected num_heads = ${H}`);
    }
    this.aLog = aAll.slice(0, H);
    this.dtBias = loadVector(src, prefix + "dt_bias", P);
    this.oNorm = loadVector(src, prefix + "o_norm.weight", dk);
  }

  newState(): KdaState {
    return { kind: "kda", S: new Float32Array(this.H * this.dk * this.dk), conv: new Float32Array(3 * (this.K - 1) * this.P) };
  }

  /** Causal depthwise conv + SiLU over T rows of x [T, P], carrying `taps` [K−1, P] (updated). */
  private conv(x: Float32Array, T: number, w: Float32Array, taps: Float32Array): void {
    const { K, P } = this;
    const hist = new Float32Array((K - 1 + T) * P);
    hist.set(taps, 0);
    hist.set(x.subarray(0, T * P), (K - 1) * P);
    for (let t = 0; t < T; t++) {
      for (let c = 0; c < P; c++) {
        let acc = 0;
        for (let j = 0; j < K; j++) acc += w[c * K + j] * hist[(t + j) * P + c];
        x[t * P + c] = acc;
      }
    }
    silu(x.subarray(0, T * P), x.subarray(0, T * P));
    taps.set(hist.subarray(T * P, (T + K - 1) * P));
  }

  /** out[T, D] = KDA(x[T, D]), advancing `state`. */
  forward(x: Float32Array, T: number, state: KdaState, out: Float32Array): void {
    const { H, dk, P, K } = this;
    const q = new Float32Array(T * P);
    const k = new Float32Array(T * P);
    const v = new Float32Array(T * P);
    matmul(this.q, x, q, T);
    matmul(this.k, x, k, T);
    matmul(this.v, x, v, T);
    const tapLen = (K - 1) * P;
    this.conv(q, T, this.convW[0], state.conv.subarray(0, tapLen));
    this.conv(k, T, this.convW[1], state.conv.subarray(tapLen, 2 * tapLen));
    this.conv(v, T, this.convW[2], state.conv.subarray(2 * tapLen, 3 * tapLen));
    l2Normalize(q, q, dk, L2_EPS);
    l2Normalize(k, k, dk, L2_EPS);
    const qScale = 1 / Math.sqrt(dk);
    for (let i = 0; i < q.length; i++) q[i] *= qScale;

    // Decay gate, per channel, in log space.
    const za = new Float32Array(T * dk);
    const z = new Float32Array(T * P);
    matmul(this.fa, x, za, T);
    matmul(this.fb, za, z, T);
    const alpha = new Float32Array(T * P);
    const lb = this.cfg.kda.gateLowerBound;
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const a = Math.exp(this.aLog[h]);
        for (let d = 0; d < dk; d++) {
          const i = t * P + h * dk + d;
          const zz = Math.fround(z[i] + this.dtBias[h * dk + d]);
          const g = lb !== null ? lb / (1 + Math.exp(-a * zz)) : -a * softplus(zz);
          alpha[i] = Math.exp(Math.fround(g));
        }
      }
    }
    const beta = new Float32Array(T * H);
    matmul(this.b, x, beta, T);
    sigmoid(beta, beta);

    // The recurrence, token by token, head by head.
    const o = new Float32Array(T * P);
    const S = state.S;
    const err = new Float64Array(dk);
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < H; h++) {
        const base = h * dk * dk;
        const off = t * P + h * dk;
        for (let d = 0; d < dk; d++) {
          const a = alpha[off + d];
          const row = base + d * dk;
          for (let j = 0; j < dk; j++) S[row + j] *= a;
        }
        err.fill(0);
        for (let d = 0; d < dk; d++) {
          const kd = k[off + d];
          const row = base + d * dk;
          for (let j = 0; j < dk; j++) err[j] += S[row + j] * kd;
        }
        const bt = beta[t * H + h];
        for (let j = 0; j < dk; j++) err[j] = bt * (v[off + j] - Math.fround(err[j]));
        for (let d = 0; d < dk; d++) {
          const kd = k[off + d];
          const row = base + d * dk;
          for (let j = 0; j < dk; j++) S[row + j] += kd * err[j];
        }
        const acc = new Float64Array(dk);
        for (let d = 0; d < dk; d++) {
          const qd = q[off + d];
          const row = base + d * dk;
          for (let j = 0; j < dk; j++) acc[j] += S[row + j] * qd;
        }
        for (let j = 0; j < dk; j++) o[off + j] = acc[j];
      }
    }

    // Output: per-head RMSNorm first, then the sigmoid gate, then o_proj.
    rmsNorm(o, this.oNorm, this.cfg.rmsNormEps, o, dk);
    const gate = new Float32Array(T * P);
    if (this.g) matmul(this.g, x, gate, T);
    else {
      const ga = new Float32Array(T * dk);
      matmul(this.ga!, x, ga, T);
      matmul(this.gb!, ga, gate, T);
    }
    sigmoid(gate, gate);
    for (let i = 0; i < o.length; i++) o[i] *= gate[i];
    matmul(this.o, o, out, T);
  }
}

/** ln(1 + e^x) without a cut-off, stable for large |x|. */
function softplus(x: number): number {
  return Math.max(x, 0) + Math.log1p(Math.exp(-Math.abs(x)));
}
