/**
 * MLA mixer: @k3/mla's MlaLayer (NoPE, absorbed decode over a latent cache of kv_lora + rope values
 * per position, scale (nope+rope)^−½, K3 output gate) fed from the checkpoint. The cache grows by
 * doubling up to the plan's KV capacity (the context is refused before it could exceed it).
 */
import { MlaCache, MlaLayer, type MlaConfig, type MlaWeights } from "@k3/mla";
import type { ModelConfig } from "../config.js";
import { weightTensor, WeightError, type WeightSource } from "../weights.js";

export { MlaCache };

/** q_a_layernorm / kv_a_layernorm epsilon (Moonshot 48B and NeMo K3 code use the class default). */
const MLA_NORM_EPS = 1e-6;
const INITIAL_CAPACITY = 256;

/** @k3/mla's layer config for a model config. */
export function mlaConfigOf(cfg: ModelConfig): MlaConfig {
  const m = cfg.mla;
  return { hidden: cfg.hiddenSize, numHeads: m.numHeads, qLoraRank: m.qLoraRank, kvLoraRank: m.kvLoraRank, qkNope: m.qkNopeHeadDim, qkRope: m.qkRopeHeadDim, vHead: m.vHeadDim, outputGate: m.outputGate, normEps: MLA_NORM_EPS };
}

/** An empty cache for a model config (no layer needed). */
export function newMlaCache(cfg: ModelConfig): MlaCache {
  return new MlaCache(mlaConfigOf(cfg), INITIAL_CAPACITY);
}

/** Restores a saved cache with room to grow. */
export function loadMlaCache(cfg: ModelConfig, bytes: Uint8Array): MlaCache {
  const c = mlaConfigOf(cfg);
  const probe = MlaCache.load(bytes, c);
  return MlaCache.load(bytes, c, Math.max(INITIAL_CAPACITY, (probe.length + 1) * 2));
}

export class MlaMixer {
  readonly layer: MlaLayer;
  /** Bytes of this mixer's checkpoint tensors (what one forward call reads from memory). */
  readonly bytes: number;

  constructor(cfg: ModelConfig, src: WeightSource, prefix: string) {
    const m = cfg.mla;
    let bytes = 0;
    const w = (n: string) => {
      const t = weightTensor(src, prefix + n);
      bytes += t.data.byteLength;
      return t;
    };
    const weights: MlaWeights = {
      ...(m.qLoraRank !== null
        ? { q_a_proj: w("q_a_proj.weight"), q_a_layernorm: w("q_a_layernorm.weight"), q_b_proj: w("q_b_proj.weight") }
        : { q_proj: w("q_proj.weight") }),
      kv_a_proj_with_mqa: w("kv_a_proj_with_mqa.weight"),
      kv_a_layernorm: w("kv_a_layernorm.weight"),
      kv_b_proj: w("kv_b_proj.weight"),
      o_proj: w("o_proj.weight"),
      ...(m.outputGate ? { g_proj: w("g_proj.weight") } : {}),
    };
    this.bytes = bytes;
    try {
      this.layer = new MlaLayer(weights, mlaConfigOf(cfg));
    } catch (err) {
      throw new WeightError(`${prefix}: ${(err as Error).message}`, "config", { cause: err });
    }
  }

  /** out[T, D] = MLA(x[T, D]); appends T positions to the cache, which grows by doubling. Returns the cache in use. */
  forward(x: Float32Array, T: number, cache: MlaCache, out: Float32Array): MlaCache {
    if (cache.length + T > cache.capacity) {
      let cap = Math.max(cache.capacity * 2, INITIAL_CAPACITY);
      while (cap < cache.length + T) cap *= 2;
      cache = MlaCache.load(cache.save(), this.layer.config, cap);
    }
    const D = this.layer.config.hidden;
    this.layer.forward(x.subarray(0, T * D), cache, out.subarray(0, T * D));
    return cache;
  }
}
