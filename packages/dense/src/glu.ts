/**
 * The GLU MLP, the one implementation every k3 MLP runs (dense layer 0, shared experts, routed
 * experts; docs/architecture.md §4.2):
 *
 *   MLP(x) = down( φ(gate x, up x) )     experts: w1 = gate, w3 = up, w2 = down
 *
 * φ is SiTU-GLU for K3 (with the config's two bounds, activation_situ_beta / _linear_beta) and
 * SiLU-GLU for Kimi-Linear-48B. The matrices are anything with `apply(X, T, out)`: a `Linear`
 * (f32/bf16) or an MXFP4 view of an expert's packed bytes.
 */
import { native } from "./native.js";
import { Scratch } from "./scratch.js";

export type GluActivation = "situ" | "silu";

/** SiTU's two bounds: config `activation_situ_beta` (gate) and `activation_situ_linear_beta` (up). */
export interface SituBetas {
  beta: number;
  linearBeta: number;
}

/** K3's published SiTU bounds, for a config that does not name its own. */
export const K3_SITU_BETAS: Readonly<SituBetas> = Object.freeze({ beta: 4, linearBeta: 25 });

/** out = φ(g, u) elementwise; out may be g. SiLU-GLU ignores the bounds. */
export function applyGlu(activation: GluActivation, g: Float32Array, u: Float32Array, out: Float32Array, betas: SituBetas): Float32Array {
  if (activation === "situ") native.situGlu(g, u, out, betas.beta, betas.linearBeta);
  else native.siluGlu(g, u, out);
  return out;
}

/** A matrix an MLP multiplies by: Y [T][rows] = X [T][cols] W^T, Y[t] bit-identical for any T. */
export interface LinearMap {
  readonly rows: number;
  readonly cols: number;
  /** Bytes of weights one call reads (a `Linear`'s; absent when unknown). */
  readonly bytes?: number;
  apply(X: Float32Array, T: number, out: Float32Array): unknown;
}

/** Work buffers of GluMlp.forward when the caller gives none (forward is synchronous: one set serves every MLP). */
const sharedScratch = new Scratch(64 << 20);

export class GluMlp {
  /** Input and output width, and the intermediate width of gate/up. */
  readonly inDim: number;
  readonly outDim: number;
  readonly hidden: number;

  constructor(
    readonly gate: LinearMap,
    readonly up: LinearMap,
    readonly down: LinearMap,
    readonly activation: GluActivation,
    readonly betas: SituBetas,
  ) {
    if (up.rows !== gate.rows || up.cols !== gate.cols || down.cols !== gate.rows)
      throw new RangeError(`GluMlp: gate [${gate.rows}, ${gate.cols}], up [${up.rows}, ${up.cols}] and down [${down.rows}, ${down.cols}] do not chain`);
    if (activation !== "situ" && activation !== "silu") throw new RangeError(`GluMlp: activation ${String(activation)} is not situ or silu`);
    this.inDim = gate.cols;
    this.outDim = down.rows;
    this.hidden = gate.rows;
  }

  /** Bytes of the three matrices (what one forward call reads from memory). */
  get bytes(): number {
    return (this.gate.bytes ?? 0) + (this.up.bytes ?? 0) + (this.down.bytes ?? 0);
  }

  /** out [T, outDim] = MLP(x [T, inDim]); `scratch` holds the two [T, hidden] intermediates. */
  forward(x: Float32Array, T: number, out: Float32Array, scratch: Scratch = sharedScratch): Float32Array {
    const g = scratch.get("glu.gate", T * this.hidden);
    const u = scratch.get("glu.up", T * this.hidden);
    this.gate.apply(x, T, g);
    this.up.apply(x, T, u);
    applyGlu(this.activation, g, u, g, this.betas);
    this.down.apply(g, T, out);
    return out;
  }
}
