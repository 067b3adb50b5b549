/**
 * The attention math of one KDA layer on already-projected activations (docs/architecture.md §2.1-2.6).
 * Layouts are row-major: q, k, g [T][H][dk], v, o [T][H][dv], beta [T][H], state S [H][dk][dv].
 */
import { KdaError } from "./errors.js";
import { native } from "./native.js";

/** Which forget gate: K3's bounded sigmoid form or Kimi-Linear-48B's softplus form. */
export type GateForm = "k3-lowerbound" | "48b-softplus";

/** Shape of the attention core. */
export interface CoreShape {
  tokens: number;
  heads: number;
  dk: number;
  dv: number;
}

/**
 * Depthwise causal conv (kernel K, tap K-1 = current token) + SiLU over x [T][C], weights w [C][K].
 * `state` [(K-1)][C] holds the last K-1 pre-conv inputs (oldest first); it is read, then replaced.
 */
export function shortConv(x: Float32Array, w: Float32Array, state: Float32Array, out: Float32Array, channels: number, kernel: number): Float32Array {
  if (channels <= 0 || x.length % channels !== 0) throw new KdaError("input", `shortConv: x has ${x.length} values, not a multiple of channels ${channels}`);
  native.shortConv(x, w, state, out, x.length / channels, channels, kernel);
  return out;
}

/**
 * The forget gate in log space, per channel, with A_log per HEAD (aLog has exactly `heads` entries).
 *   k3-lowerbound: g = lowerBound * sigmoid(exp(A_log[h]) * (z + dt_bias))
 *   48b-softplus:  g = -exp(A_log[h]) * softplus(z + dt_bias)
 * zRaw = f_b(f_a x) [T][H*dk] before dt_bias.
 */
export function forgetGate(zRaw: Float32Array, dtBias: Float32Array, aLog: Float32Array, g: Float32Array, heads: number, dk: number, form: GateForm, lowerBound = -5): Float32Array {
  if (aLog.length !== heads) throw new KdaError("input", `forgetGate: aLog has ${aLog.length} entries, expected one per head (${heads})`);
  if (dtBias.length !== heads * dk) throw new KdaError("input", `forgetGate: dtBias has ${dtBias.length} entries, expected heads*dk = ${heads * dk}`);
  const P = heads * dk;
  if (zRaw.length % P !== 0) throw new KdaError("input", `forgetGate: zRaw has ${zRaw.length} values, not a multiple of heads*dk = ${P}`);
  native.gate(zRaw, dtBias, aLog, g, zRaw.length / P, heads, dk, form === "k3-lowerbound" ? 0 : 1, lowerBound);
  return g;
}

function checkCore(fn: string, q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array | Uint16Array, o: Float32Array, s: CoreShape): void {
  const { tokens: T, heads: H, dk, dv } = s;
  const want: Array<[string, ArrayLike<number>, number]> = [
    ["q", q, T * H * dk], ["k", k, T * H * dk], ["g", g, T * H * dk], ["v", v, T * H * dv],
    ["beta", beta, T * H], ["S", S, H * dk * dv], ["o", o, T * H * dv],
  ];
  for (const [name, arr, n] of want)
    if (arr.length !== n) throw new KdaError("input", `${fn}: ${name} has ${arr.length} values, expected ${n} for T=${T} H=${H} dk=${dk} dv=${dv}`);
}

/**
 * Token-by-token recurrence: S <- diag(e^g) S; e = v - S^T k; S += beta k e^T; o = S^T q.
 * S is updated in place (Float32Array, or Uint16Array of bf16 bits re-rounded after every token).
 */
export function recurrent(q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array | Uint16Array, o: Float32Array, shape: CoreShape): Float32Array {
  checkCore("recurrent", q, k, v, g, beta, S, o, shape);
  native.recurrent(q, k, v, g, beta, S, o, shape.tokens, shape.heads, shape.dk, shape.dv);
  return o;
}

/**
 * Chunkwise WY/UT form of the same recurrence (any T, any chunk >= 1, default 64); S in place.
 * A bf16 state is widened once and rounded once per call.
 */
export function chunked(q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, beta: Float32Array, S: Float32Array | Uint16Array, o: Float32Array, shape: CoreShape, chunk = 64): Float32Array {
  checkCore("chunked", q, k, v, g, beta, S, o, shape);
  if (!Number.isInteger(chunk) || chunk < 1 || chunk > 1024) throw new KdaError("input", `chunked: chunk must be an integer in [1, 1024], got ${chunk}`);
  native.chunked(q, k, v, g, beta, S, o, shape.tokens, shape.heads, shape.dk, shape.dv, chunk);
  return o;
}
