/**
 * One KDA mixer layer (docs/architecture.md §2): x [T][D] (already input-normed) -> out [T][D].
 * Projections run on @k3/dense (batched GEMM for T > 1, bit-identical per row to the one-token
 * GEMV); the attention math (conv, gate, recurrence / chunked prefill) is this package's native code.
 */
import { l2Normalize, rmsNorm, Scratch, sigmoid, sigmoidMul } from "@k3/dense";
import { checkConfig, headALog, type KdaConfig } from "./config.js";
import { chunked, forgetGate, recurrent, shortConv } from "./core.js";
import { KdaError } from "./errors.js";
import { KdaState, type StateDtype } from "./state.js";
import type { Linear } from "@k3/dense";
import { anyVectorF32, linear, rowsOf, vectorF32, type WeightTensor } from "./weights.js";

/** Work buffers of every KdaLayer.forward (synchronous, so one set serves all layers). */
const scratch = new Scratch(32 << 20);

/** One layer's tensors, by checkpoint suffix (`...self_attn.<name>.weight` or `A_log`/`dt_bias`). */
export interface KdaWeights {
  q_proj: WeightTensor;
  k_proj: WeightTensor;
  v_proj: WeightTensor;
  q_conv1d: WeightTensor;
  k_conv1d: WeightTensor;
  v_conv1d: WeightTensor;
  f_a_proj: WeightTensor;
  f_b_proj: WeightTensor;
  b_proj: WeightTensor;
  A_log: WeightTensor;
  dt_bias: WeightTensor;
  o_norm: WeightTensor;
  /** K3: full-rank output gate [H*dv, D]. */
  g_proj?: WeightTensor;
  /** 48B: low-rank output gate, no bias. */
  g_a_proj?: WeightTensor;
  g_b_proj?: WeightTensor;
  o_proj: WeightTensor;
}

export interface ForwardOptions {
  /**
   * 'auto' (default): recurrence for one token, chunked WY/UT form for more, with a trailing
   * one-token piece (T mod chunk = 1) as the recurrence, so forward over T tokens gives the bits of
   * forward over its chunk-sized pieces in turn.
   */
  core?: "auto" | "chunked" | "recurrent";
  /** Chunk length of the chunked form (default 64). */
  chunk?: number;
}

/** Intermediates of the last call (for tests and debugging). */
export interface KdaTrace {
  q: Float32Array;
  k: Float32Array;
  v: Float32Array;
  g: Float32Array;
  beta: Float32Array;
  oCore: Float32Array;
}

export class KdaLayer {
  readonly config: KdaConfig;
  private readonly qProj: Linear;
  private readonly kProj: Linear;
  private readonly vProj: Linear;
  private readonly fA: Linear;
  private readonly fB: Linear;
  private readonly bProj: Linear;
  private readonly gProj?: Linear;
  private readonly gA?: Linear;
  private readonly gB?: Linear;
  private readonly oProj: Linear;
  private readonly convQ: Float32Array;
  private readonly convK: Float32Array;
  private readonly convV: Float32Array;
  /** A_log per head (sliced and checked). */
  readonly aLog: Float32Array;
  private readonly dtBias: Float32Array;
  private readonly oNorm: Float32Array;
  /** Set by forward when `trace` is on. */
  lastTrace?: KdaTrace;
  trace = false;

  constructor(weights: KdaWeights, config: KdaConfig) {
    this.config = checkConfig(config);
    if (typeof weights !== "object" || weights === null) throw new KdaError("weight", "weights must be an object of tensors");
    const { hidden: D, numHeads: H, headDim: dk, convKernel: K } = this.config;
    const P = H * dk;
    this.qProj = linear("q_proj", weights.q_proj, P, D);
    this.kProj = linear("k_proj", weights.k_proj, P, D);
    this.vProj = linear("v_proj", weights.v_proj, P, D);
    this.convQ = vectorF32("q_conv1d", weights.q_conv1d, [P, 1, K]);
    this.convK = vectorF32("k_conv1d", weights.k_conv1d, [P, 1, K]);
    this.convV = vectorF32("v_conv1d", weights.v_conv1d, [P, 1, K]);
    const rank = rowsOf("f_a_proj", weights.f_a_proj, D);
    this.fA = linear("f_a_proj", weights.f_a_proj, rank, D);
    this.fB = linear("f_b_proj", weights.f_b_proj, P, rank);
    this.bProj = linear("b_proj", weights.b_proj, H, D);
    this.aLog = headALog(anyVectorF32("A_log", weights.A_log).values, this.config);
    this.dtBias = vectorF32("dt_bias", weights.dt_bias, [P]);
    this.oNorm = vectorF32("o_norm", weights.o_norm, [dk]);
    const lowRank = weights.g_a_proj !== undefined || weights.g_b_proj !== undefined;
    if (weights.g_proj !== undefined && lowRank) throw new KdaError("weight", "both g_proj (full-rank gate) and g_a_proj/g_b_proj (low-rank gate) given; expected one");
    if (weights.g_proj !== undefined) {
      this.gProj = linear("g_proj", weights.g_proj, P, D);
    } else if (lowRank) {
      const gRank = rowsOf("g_a_proj", weights.g_a_proj, D);
      this.gA = linear("g_a_proj", weights.g_a_proj, gRank, D);
      this.gB = linear("g_b_proj", weights.g_b_proj, P, gRank);
    } else {
      throw new KdaError("weight", "missing output gate: g_proj (K3) or g_a_proj + g_b_proj (48B)");
    }
    this.oProj = linear("o_proj", weights.o_proj, D, P);
  }

  /** A zeroed state for this layer (fp32 by default). */
  newState(dtype: StateDtype = "f32"): KdaState {
    return new KdaState(this.config, dtype);
  }

  /** Bytes of weights read per forward call (the decode memory traffic). */
  get weightBytes(): number {
    const lin = [this.qProj, this.kProj, this.vProj, this.fA, this.fB, this.bProj, this.oProj, this.gProj, this.gA, this.gB];
    return lin.reduce((a, l) => a + (l ? l.bytes : 0), 0);
  }

  /**
   * Runs T = x.length / hidden tokens, carrying `state` (updated in place). Returns out [T][hidden].
   */
  forward(x: Float32Array, state: KdaState, options: ForwardOptions = {}, out?: Float32Array): Float32Array {
    const { hidden: D, numHeads: H, headDim: dk, convKernel: K } = this.config;
    if (!(x instanceof Float32Array)) throw new KdaError("input", "forward: x must be a Float32Array");
    if (x.length === 0 || x.length % D !== 0) throw new KdaError("input", `forward: x has ${x.length} values, expected a positive multiple of hidden = ${D}`);
    if (!(state instanceof KdaState)) throw new KdaError("input", "forward: state must be a KdaState (layer.newState())");
    const sc = state.config;
    if (sc.numHeads !== H || sc.headDim !== dk || sc.convKernel !== K || sc.hidden !== D || sc.gate !== this.config.gate)
      throw new KdaError("input", `forward: state is for numHeads=${sc.numHeads} headDim=${sc.headDim} hidden=${sc.hidden}, layer has ${H}/${dk}/${D}`);
    const T = x.length / D;
    const P = H * dk;
    if (out && out.length !== T * D) throw new KdaError("input", `forward: out has ${out.length} values, expected ${T * D}`);
    const core = options.core ?? "auto";
    if (core !== "auto" && core !== "chunked" && core !== "recurrent") throw new KdaError("input", `forward: options.core must be auto, chunked or recurrent, got ${JSON.stringify(core)}`);

    // q, k, v: projection, short conv + SiLU, then L2 norm of q and k per head; q scaled by dk^-1/2.
    // Work buffers are reused across calls (module scratch: forward is synchronous); `raw` takes
    // each projection in turn, then z and the output gate.
    const raw = scratch.get("raw", T * P);
    const q = shortConv(this.qProj.apply(x, T, raw), this.convQ, state.convQ, scratch.get("q", T * P), P, K);
    const k = shortConv(this.kProj.apply(x, T, raw), this.convK, state.convK, scratch.get("k", T * P), P, K);
    const v = shortConv(this.vProj.apply(x, T, raw), this.convV, state.convV, scratch.get("v", T * P), P, K);
    l2Normalize(q, q, dk, 1e-6, Math.fround(1 / Math.sqrt(dk)));
    l2Normalize(k, k, dk, 1e-6);

    // forget gate (per channel, A_log per head) and beta
    const zRaw = this.fB.apply(this.fA.apply(x, T, scratch.get("za", T * this.fA.rows)), T, raw);
    const g = forgetGate(zRaw, this.dtBias, this.aLog, scratch.get("g", T * P), H, dk, this.config.gate, this.config.lowerBound);
    const beta = this.bProj.apply(x, T, scratch.get("beta", T * H));
    sigmoid(beta, beta);

    // the recurrence (decode) or the chunked WY/UT form (prefill)
    const o = scratch.get("o", T * P);
    const shape = { tokens: T, heads: H, dk, dv: dk };
    const C = options.chunk ?? 64;
    if (core === "recurrent" || (core === "auto" && T === 1)) recurrent(q, k, v, g, beta, state.S, o, shape);
    else if (core === "auto" && T % C === 1) {
      // A trailing one-token piece runs as the recurrence, as it would in a one-token call (the
      // WY/UT form of a single token rounds differently): so forward over T tokens has the bits of
      // forward over its C-token pieces in turn, and a caller may cut a prompt at any multiple of C.
      const n = T - 1;
      chunked(q.subarray(0, n * P), k.subarray(0, n * P), v.subarray(0, n * P), g.subarray(0, n * P), beta.subarray(0, n * H), state.S, o.subarray(0, n * P), { ...shape, tokens: n }, C);
      recurrent(q.subarray(n * P), k.subarray(n * P), v.subarray(n * P), g.subarray(n * P), beta.subarray(n * H), state.S, o.subarray(n * P), { ...shape, tokens: 1 });
    } else chunked(q, k, v, g, beta, state.S, o, shape, C);
    if (this.trace) this.lastTrace = { q: q.slice(), k: k.slice(), v: v.slice(), g: g.slice(), beta: beta.slice(), oCore: o.slice() };

    // per-head RMSNorm first, then the sigmoid output gate, then o_proj
    rmsNorm(o, this.oNorm, this.config.rmsNormEps, o, dk);
    const gate = this.gProj ? this.gProj.apply(x, T, raw) : this.gB!.apply(this.gA!.apply(x, T, scratch.get("ga", T * this.gA!.rows)), T, raw);
    sigmoidMul(o, gate, o);
    const y = this.oProj.apply(o, T, out);
    state.tokens += T;
    return y;
  }
}
