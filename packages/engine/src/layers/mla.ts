/**
 * Multi-head Latent Attention mixer, NoPE, absorbed form over a latent cache (architecture.md §3),
 * assembled from @k3/dense kernels. Temporary: @k3/mla's MlaLayer replaces this when it lands.
 *
 * Cache per position: the normalised latent c (kv_lora) and the shared k_pe (rope), fp32.
 * score_h(t,s) = (q̃_h·c_s + q_pe,h·k_pe,s)·(nope+rope)^−½ with q̃_h = W_UK^hᵀ q_nope,h; causal softmax;
 * o_h = W_UV^h Σ_s p c_s; K3: o ⊙ σ(g_proj x); then o_proj.
 */
import { gemvBf16, gemvF32, rmsNorm, sigmoid } from "@k3/dense";
import type { ModelConfig } from "../config.js";
import { loadMatrix, loadVector, matmul, type Matrix, type WeightSource } from "../weights.js";

export interface MlaState {
  kind: "mla";
  /** Positions cached. */
  len: number;
  /** [capacity, kv_lora] latents. */
  c: Float32Array;
  /** [capacity, rope] shared rope keys. */
  kpe: Float32Array;
}

/** q_a_layernorm / kv_a_layernorm epsilon (Moonshot and NeMo code use the class default). */
const MLA_NORM_EPS = 1e-6;

export class MlaMixer {
  private readonly qa?: Matrix;
  private readonly qaNorm?: Float32Array;
  private readonly qb: Matrix;
  private readonly kva: Matrix;
  private readonly kvaNorm: Float32Array;
  private readonly kvb: Matrix;
  private readonly o: Matrix;
  private readonly g?: Matrix;

  constructor(private readonly cfg: ModelConfig, src: WeightSource, prefix: string) {
    const D = cfg.hiddenSize;
    const m = cfg.mla;
    const qw = m.numHeads * (m.qkNopeHeadDim + m.qkRopeHeadDim);
    if (m.qLoraRank !== null) {
      this.qa = loadMatrix(src, prefix + "q_a_proj.weight", m.qLoraRank, D);
      this.qaNorm = loadVector(src, prefix + "q_a_layernorm.weight", m.qLoraRank);
      this.qb = loadMatrix(src, prefix + "q_b_proj.weight", qw, m.qLoraRank);
    } else {
      this.qb = loadMatrix(src, prefix + "q_proj.weight", qw, D);
    }
    this.kva = loadMatrix(src, prefix + "kv_a_proj_with_mqa.weight", m.kvLoraRank + m.qkRopeHeadDim, D);
    this.kvaNorm = loadVector(src, prefix + "kv_a_layernorm.weight", m.kvLoraRank);
    this.kvb = loadMatrix(src, prefix + "kv_b_proj.weight", m.numHeads * (m.qkNopeHeadDim + m.vHeadDim), m.kvLoraRank);
    this.o = loadMatrix(src, prefix + "o_proj.weight", D, m.numHeads * m.vHeadDim);
    if (m.outputGate) this.g = loadMatrix(src, prefix + "g_proj.weight", m.numHeads * m.vHeadDim, D);
  }

  newState(capacity = 64): MlaState {
    const m = this.cfg.mla;
    return { kind: "mla", len: 0, c: new Float32Array(capacity * m.kvLoraRank), kpe: new Float32Array(capacity * m.qkRopeHeadDim) };
  }

  private reserve(state: MlaState, positions: number): void {
    const m = this.cfg.mla;
    const cap = state.c.length / m.kvLoraRank;
    if (positions <= cap) return;
    let next = Math.max(cap * 2, 16);
    while (next < positions) next *= 2;
    const c = new Float32Array(next * m.kvLoraRank);
    c.set(state.c.subarray(0, state.len * m.kvLoraRank));
    const kpe = new Float32Array(next * m.qkRopeHeadDim);
    kpe.set(state.kpe.subarray(0, state.len * m.qkRopeHeadDim));
    state.c = c;
    state.kpe = kpe;
  }

  /** out[T, D] = MLA(x[T, D]); appends T positions to the cache. */
  forward(x: Float32Array, T: number, state: MlaState, out: Float32Array): void {
    const m = this.cfg.mla;
    const H = m.numHeads;
    const n = m.qkNopeHeadDim;
    const r = m.qkRopeHeadDim;
    const dv = m.vHeadDim;
    const L = m.kvLoraRank;
    const qw = H * (n + r);
    const q = new Float32Array(T * qw);
    if (this.qa) {
      const qa = new Float32Array(T * this.qa.rows);
      matmul(this.qa, x, qa, T);
      rmsNorm(qa, this.qaNorm!, MLA_NORM_EPS, qa, this.qa.rows);
      matmul(this.qb, qa, q, T);
    } else {
      matmul(this.qb, x, q, T);
    }
    const a = new Float32Array(T * (L + r));
    matmul(this.kva, x, a, T);
    const pos0 = state.len;
    this.reserve(state, pos0 + T);
    for (let t = 0; t < T; t++) {
      const row = a.subarray(t * (L + r), (t + 1) * (L + r));
      rmsNorm(row.subarray(0, L), this.kvaNorm, MLA_NORM_EPS, state.c.subarray((pos0 + t) * L, (pos0 + t + 1) * L), L);
      state.kpe.set(row.subarray(L, L + r), (pos0 + t) * r);
    }
    state.len = pos0 + T;

    const scale = 1 / Math.sqrt(n + r);
    const attn = new Float32Array(T * H * dv);
    const qt = new Float32Array(L);
    const cbar = new Float32Array(L);
    const kvbBits = this.kvb.bf16;
    const kvbF32 = this.kvb.f32;
    for (let t = 0; t < T; t++) {
      const S = pos0 + t + 1;
      const p = new Float64Array(S);
      for (let h = 0; h < H; h++) {
        const qn = q.subarray(t * qw + h * (n + r), t * qw + h * (n + r) + n);
        const qp = q.subarray(t * qw + h * (n + r) + n, t * qw + (h + 1) * (n + r));
        // q̃ = W_UKᵀ q_nope: rows [h(n+dv), h(n+dv)+n) of kv_b.
        const acc = new Float64Array(L);
        for (let i = 0; i < n; i++) {
          const rowOff = (h * (n + dv) + i) * L;
          const qi = qn[i];
          if (kvbBits) {
            for (let j = 0; j < L; j++) acc[j] += bf16(kvbBits[rowOff + j]) * qi;
          } else {
            for (let j = 0; j < L; j++) acc[j] += kvbF32![rowOff + j] * qi;
          }
        }
        for (let j = 0; j < L; j++) qt[j] = acc[j];
        let max = -Infinity;
        for (let s = 0; s < S; s++) {
          let dot = 0;
          const cs = s * L;
          for (let j = 0; j < L; j++) dot += qt[j] * state.c[cs + j];
          const ks = s * r;
          for (let j = 0; j < r; j++) dot += qp[j] * state.kpe[ks + j];
          p[s] = dot * scale;
          if (p[s] > max) max = p[s];
        }
        let total = 0;
        for (let s = 0; s < S; s++) {
          p[s] = Math.exp(p[s] - max);
          total += p[s];
        }
        const ob = new Float64Array(L);
        for (let s = 0; s < S; s++) {
          const w = p[s] / total;
          const cs = s * L;
          for (let j = 0; j < L; j++) ob[j] += w * state.c[cs + j];
        }
        for (let j = 0; j < L; j++) cbar[j] = ob[j];
        // o_h = W_UV^h c̄: rows [h(n+dv)+n, (h+1)(n+dv)) of kv_b.
        const vOff = (h * (n + dv) + n) * L;
        const oh = attn.subarray((t * H + h) * dv, (t * H + h + 1) * dv);
        if (kvbBits) gemvBf16(kvbBits.subarray(vOff, vOff + dv * L), cbar, oh, { rows: dv, cols: L });
        else gemvF32(kvbF32!.subarray(vOff, vOff + dv * L), cbar, oh, { rows: dv, cols: L });
      }
    }
    if (this.g) {
      const gate = new Float32Array(T * H * dv);
      matmul(this.g, x, gate, T);
      sigmoid(gate, gate);
      for (let i = 0; i < attn.length; i++) attn[i] *= gate[i];
    }
    matmul(this.o, attn, out, T);
  }
}

const bf16Scratch = new Float32Array(1);
const bf16Bits = new Uint32Array(bf16Scratch.buffer);
function bf16(bits: number): number {
  bf16Bits[0] = bits << 16;
  return bf16Scratch[0];
}
