/**
 * KDA mixer: @k3/kda's KdaLayer (native core: short conv, K3/48B gates, recurrence and chunked
 * WY/UT prefill, bit-identical across SIMD levels and threads) fed from the checkpoint.
 */
import { KdaLayer, KdaState, type KdaConfig, type KdaWeights } from "@k3/kda";
import type { ModelConfig } from "../config.js";
import { weightTensor, WeightError, type WeightSource } from "../weights.js";

export { KdaState };

/** How KDA runs a multi-token chunk: the chunked WY/UT form (fast) or the recurrence (bit-equal to decode). */
export type KdaCore = "auto" | "chunked" | "recurrent";

/** @k3/kda's layer config for a model config. */
export function kdaConfigOf(cfg: ModelConfig): KdaConfig {
  return {
    hidden: cfg.hiddenSize,
    numHeads: cfg.kda.numHeads,
    headDim: cfg.kda.headDim,
    convKernel: cfg.kda.convKernel,
    gate: cfg.kda.gateLowerBound !== null ? "k3-lowerbound" : "48b-softplus",
    lowerBound: cfg.kda.gateLowerBound ?? -5,
    rmsNormEps: cfg.rmsNormEps,
  };
}

export class KdaMixer {
  readonly layer: KdaLayer;
  /** Bytes of this mixer's checkpoint tensors (what one forward call reads from memory). */
  readonly bytes: number;
  /** Bytes of the recurrent state a forward call reads (the fp32 S matrices). */
  readonly stateBytes: number;

  constructor(cfg: ModelConfig, src: WeightSource, prefix: string, private readonly core: KdaCore = "auto") {
    const hasFull = src.has(prefix + "g_proj.weight");
    if (hasFull !== cfg.kda.fullRankGate) {
      throw new WeightError(`${prefix}: use_full_rank_gate = ${cfg.kda.fullRankGate} but the checkpoint ${hasFull ? "has" : "lacks"} g_proj`);
    }
    let bytes = 0;
    const w = (n: string) => {
      const t = weightTensor(src, prefix + n);
      bytes += t.data.byteLength;
      return t;
    };
    const weights: KdaWeights = {
      q_proj: w("q_proj.weight"),
      k_proj: w("k_proj.weight"),
      v_proj: w("v_proj.weight"),
      q_conv1d: w("q_conv1d.weight"),
      k_conv1d: w("k_conv1d.weight"),
      v_conv1d: w("v_conv1d.weight"),
      f_a_proj: w("f_a_proj.weight"),
      f_b_proj: w("f_b_proj.weight"),
      b_proj: w("b_proj.weight"),
      A_log: w("A_log"),
      dt_bias: w("dt_bias"),
      o_norm: w("o_norm.weight"),
      o_proj: w("o_proj.weight"),
      ...(hasFull ? { g_proj: w("g_proj.weight") } : { g_a_proj: w("g_a_proj.weight"), g_b_proj: w("g_b_proj.weight") }),
    };
    this.bytes = bytes;
    this.stateBytes = cfg.kda.numHeads * cfg.kda.headDim * cfg.kda.headDim * 4;
    try {
      this.layer = new KdaLayer(weights, kdaConfigOf(cfg));
    } catch (err) {
      throw new WeightError(`${prefix}: ${(err as Error).message}`, "config", { cause: err });
    }
  }

  newState(): KdaState {
    return this.layer.newState();
  }

  /** out[T, D] = KDA(x[T, D]), advancing `state`; `core` overrides the mixer's form for this call. */
  forward(x: Float32Array, T: number, state: KdaState, out: Float32Array, core: KdaCore = this.core): void {
    this.layer.forward(x.subarray(0, T * this.layer.config.hidden), state, { core }, out.subarray(0, T * this.layer.config.hidden));
  }
}
