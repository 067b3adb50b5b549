/**
 * MoE FFN: @k3/moe-stream's MoeLayer (sigmoid router whose bias only selects, renormalised
 * unbiased weights × routed_scaling_factor; chunk-union expert reads; K3 latent MoE with the
 * aggregate RMSNorm-ed once; shared experts unweighted) over an ExpertStore that streams experts
 * from the checkpoint's shards into a per-layer cache (the memory plan's slots) and computes on
 * the packed bytes (MXFP4 for K3, bf16 for Kimi-Linear).
 */
import type { Linear } from "@k3/dense";
import { denseExpertCompute, ExpertStore, MoeLayer, mxfp4ExpertCompute, Router } from "@k3/moe-stream";
import type { ModelConfig } from "../config.js";
import { MAX_DROP_DETAILS, type RunCounters } from "../report.js";
import { loadMatrix, loadVector, WeightError, type WeightSource } from "../weights.js";
import { gluOf } from "./mlp.js";

export class MoeFfn {
  readonly layer: MoeLayer;
  /** Bytes of the layer's non-expert matrices (router, latent down/up, shared experts): read once per forward. */
  readonly trunkBytes: number;

  constructor(cfg: ModelConfig, src: WeightSource, prefix: string, layer: number, store: ExpertStore, onExpertError: "drop" | "fail" = "drop") {
    let trunkBytes = 0;
    const matrix = (s: WeightSource, name: string, rows: number, cols: number): Linear => {
      const mat = loadMatrix(s, name, rows, cols);
      trunkBytes += mat.bytes;
      return mat;
    };
    const D = cfg.hiddenSize;
    const m = cfg.moe;
    const router = new Router(
      { numExperts: m.numExperts, topK: m.topK, routedScalingFactor: m.routedScalingFactor, renormalize: m.renormalize },
      matrix(src, prefix + "gate.weight", m.numExperts, D),
      loadVector(src, prefix + "gate.e_score_correction_bias", m.numExperts),
    );
    const inDim = m.latentDim ?? D;
    // The config's activation and SiTU bounds reach every GLU: dense layer 0, shared and routed experts alike.
    const { activation, betas: situBetas } = gluOf(cfg);
    const expertOpts = { inDim, interDim: m.intermediate, activation, situBetas };
    const compute = m.mxfp4 ? mxfp4ExpertCompute(expertOpts) : denseExpertCompute(expertOpts);
    const S = m.numShared * m.intermediate;
    try {
      this.layer = new MoeLayer({
        layer,
        hidden: D,
        router,
        experts: store,
        compute,
        latent:
          m.latentDim !== null
            ? {
                down: matrix(src, prefix + "routed_expert_down_proj.weight", m.latentDim, D),
                up: matrix(src, prefix + "routed_expert_up_proj.weight", D, m.latentDim),
                norm: m.latentNorm ? loadVector(src, prefix + "routed_expert_norm.weight", m.latentDim) : new Float32Array(m.latentDim).fill(1),
                eps: cfg.rmsNormEps,
              }
            : undefined,
        shared:
          m.numShared > 0
            ? {
                gate: matrix(src, prefix + "shared_experts.gate_proj.weight", S, D),
                up: matrix(src, prefix + "shared_experts.up_proj.weight", S, D),
                down: matrix(src, prefix + "shared_experts.down_proj.weight", D, S),
              }
            : undefined,
        activation,
        situBetas,
        onExpertError,
      });
    } catch (err) {
      throw new WeightError(`${prefix}: ${(err as Error).message}`, "config", { cause: err });
    }
    this.trunkBytes = trunkBytes;
  }

  /**
   * out[T, D] = MoE(x[T, D]); adds the layer's I/O and cache figures to `counters`. `prefetch`:
   * a later layer's experts to read at low priority while this one computes (I/O only). `cancelled`:
   * asked between groups of experts (the forward then rejects, @k3/moe-stream's CancelledError).
   */
  async forward(x: Float32Array, T: number, out: Float32Array, counters?: RunCounters, prefetch?: { layer: number; ids: number[] }, cancelled?: () => boolean): Promise<void> {
    await this.layer.forward(x.subarray(0, T * this.layer.opts.hidden), T, { prefetch, out, cancelled });
    const s = this.layer.lastStats;
    if (counters && s) {
      counters.expertRequests += s.uniqueExperts;
      counters.expertResidentHits += s.residentHits;
      counters.expertPrefetchHits += s.prefetchHits;
      // Device bytes are counted by the model from the store's totals: a lookahead read that
      // completes before this layer's forward (issued a layer ahead) is in no layer's deviceBytes.
      counters.ioSeconds += s.ioNs / 1e9;
      counters.ioOverlappedSeconds += Math.max(0, (s.ioNs + s.cpuNs - s.wallNs) / 1e9);
      counters.expertDrops += s.dropped.length;
      for (const d of s.dropped) if (counters.expertDropDetails.length < MAX_DROP_DETAILS) counters.expertDropDetails.push(d);
    }
  }
}
