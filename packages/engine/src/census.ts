/**
 * Byte census of a checkpoint computed from its config alone (docs/architecture.md §7): what the trunk,
 * embeddings, head, experts, recurrent state and KV cache cost. Used for the memory plan before
 * any weight is read; the loader cross-checks it against the real tensor headers.
 */
import { isMoeLayer, type ModelConfig } from "./config.js";
import type { ReportKind } from "./report.js";

const BF16 = 2;
const F32 = 4;

export interface Census {
  embedBytes: number;
  /** One embedding row (what a streamed embedding reads per token). */
  embedRowBytes: number;
  headBytes: number;
  /** Final norm + output AttnRes vectors. */
  modelVectorBytes: number;
  /** Non-expert bytes of each layer (attention, norms, router, shared/dense MLP, latent projections). */
  layerTrunkBytes: number[];
  trunkBytes: number;
  /** One routed expert (w1, w2, w3 with scales). */
  expertBytes: number;
  moeLayers: number;
  expertsTotal: number;
  /** KDA recurrent + conv state, fp32, all KDA layers. */
  recurrentStateBytes: number;
  /** MLA latent cache per token (fp32 latent + rope key, all MLA layers). */
  kvBytesPerToken: number;
  /** Routed expert bytes one token needs when nothing is cached. */
  expertBytesPerToken: number;
  /** Context limit (max_position_embeddings, else unbounded). */
  maxPositions: number;
  /** Work buffers per token of a prefill chunk (chunkScratchBytesPerToken). */
  chunkScratchBytesPerToken: number;
}

function mxfp4Matrix(rows: number, cols: number): number {
  return rows * (cols / 2) + rows * (cols / 32);
}

/** A KDA mixer's weights (q/k/v/o, convs, gates, decay). */
export function kdaLayerBytes(cfg: ModelConfig): number {
  const D = cfg.hiddenSize;
  const P = cfg.kda.numHeads * cfg.kda.headDim;
  let n = 3 * P * D * BF16; // q, k, v
  n += D * P * BF16; // o_proj
  n += 3 * P * cfg.kda.convKernel * F32;
  n += cfg.kda.headDim * D * BF16 + P * cfg.kda.headDim * BF16; // f_a, f_b
  n += cfg.kda.numHeads * D * BF16; // b_proj
  n += cfg.kda.fullRankGate ? P * D * BF16 : (cfg.kda.headDim * D + P * cfg.kda.headDim) * BF16;
  n += Math.max(cfg.kda.numHeads, cfg.kda.headDim) * F32 + P * F32 + cfg.kda.headDim * F32; // A_log, dt_bias, o_norm
  return n;
}

/** An MLA mixer's weights (low-rank q, kv latent, up/out projections, output gate). */
export function mlaLayerBytes(cfg: ModelConfig): number {
  const D = cfg.hiddenSize;
  const m = cfg.mla;
  const qHead = m.qkNopeHeadDim + m.qkRopeHeadDim;
  let n = 0;
  if (m.qLoraRank !== null) n += (m.qLoraRank * D + m.qLoraRank + m.numHeads * qHead * m.qLoraRank) * BF16;
  else n += m.numHeads * qHead * D * BF16;
  n += ((m.kvLoraRank + m.qkRopeHeadDim) * D + m.kvLoraRank) * BF16;
  n += m.numHeads * (m.qkNopeHeadDim + m.vHeadDim) * m.kvLoraRank * BF16;
  n += D * m.numHeads * m.vHeadDim * BF16;
  if (m.outputGate) n += m.numHeads * m.vHeadDim * D * BF16;
  return n;
}

/**
 * The mixers and the dense MLP run a prefill chunk in pieces of this many tokens (model.ts): the
 * KDA core's chunk, so the bits are those of one call (@k3/kda ForwardOptions.core; MLA and the MLP
 * are per token) and a prefill cut at any multiple of it gives the bits of an uncut one (the prompt
 * cache's snapshot grain); their work buffers stay those of one piece however large --chunk is.
 */
export const MIXER_PIECE = 64;

/**
 * Work buffers one token of a prefill chunk adds above a 64-token chunk: the mixers and the dense
 * MLP run in MIXER_PIECE-token pieces, so what grows with the chunk is the MoE
 * layer's per-(token, expert) rows (gathered input, gate, up, down and the mixed slot) and its
 * shared expert, and the model's hidden states (the chunk's residual stream, the mixer and FFN
 * inputs and outputs, and K3's attention-residual block snapshots: one per attn_res_block_size
 * layers, plus the embedding's). Over-counted as if every buffer were held at once.
 */
export function chunkScratchBytesPerToken(cfg: ModelConfig): number {
  const D = cfg.hiddenSize;
  const moe = cfg.moe;
  const expertIn = moe.latentDim ?? D;
  const moeRows = moe.topK * (expertIn + 2 * moe.intermediate + 2 * expertIn) + 2 * expertIn;
  const shared = moe.numShared > 0 ? 2 * D + 2 * moe.numShared * moe.intermediate : 0;
  const snapshots = cfg.attnResBlockSize !== null ? Math.ceil(cfg.numLayers / cfg.attnResBlockSize) + 1 : 0;
  return (moeRows + shared + (6 + snapshots) * D) * F32;
}

/** Computes the census for a config. */
export function censusOf(cfg: ModelConfig): Census {
  const D = cfg.hiddenSize;
  const V = cfg.vocabSize;
  const moe = cfg.moe;
  const expertIn = moe.latentDim ?? D;
  const expertBytes = moe.mxfp4
    ? 2 * mxfp4Matrix(moe.intermediate, expertIn) + mxfp4Matrix(expertIn, moe.intermediate)
    : 3 * moe.intermediate * expertIn * BF16;
  const layerTrunkBytes: number[] = [];
  let moeLayers = 0;
  for (let l = 0; l < cfg.numLayers; l++) {
    let n = 2 * D * BF16; // input / post-attention norms
    if (cfg.attnResBlockSize !== null) n += 4 * D * BF16;
    n += cfg.layerKinds[l] === "kda" ? kdaLayerBytes(cfg) : mlaLayerBytes(cfg);
    if (isMoeLayer(cfg, l)) {
      moeLayers++;
      n += moe.numExperts * D * BF16 + moe.numExperts * F32; // router + bias
      if (moe.numShared > 0) n += 3 * moe.numShared * moe.intermediate * D * BF16;
      if (moe.latentDim !== null) n += 2 * moe.latentDim * D * BF16 + (moe.latentNorm ? moe.latentDim * BF16 : 0);
    } else {
      n += 3 * cfg.denseIntermediate * D * BF16;
    }
    layerTrunkBytes.push(n);
  }
  const kdaLayers = cfg.layerKinds.filter((k) => k === "kda").length;
  const mlaLayers = cfg.numLayers - kdaLayers;
  const P = cfg.kda.numHeads * cfg.kda.headDim;
  const recurrentStateBytes =
    kdaLayers * (cfg.kda.numHeads * cfg.kda.headDim * cfg.kda.headDim + 3 * P * (cfg.kda.convKernel - 1)) * F32;
  return {
    embedBytes: V * D * BF16,
    embedRowBytes: D * BF16,
    headBytes: V * D * BF16,
    modelVectorBytes: D * BF16 * (cfg.attnResBlockSize !== null ? 3 : 1),
    layerTrunkBytes,
    trunkBytes: layerTrunkBytes.reduce((a, b) => a + b, 0),
    expertBytes,
    moeLayers,
    expertsTotal: moeLayers * moe.numExperts,
    recurrentStateBytes,
    kvBytesPerToken: mlaLayers * (cfg.mla.kvLoraRank + cfg.mla.qkRopeHeadDim) * F32,
    expertBytesPerToken: moeLayers * moe.topK * expertBytes,
    maxPositions: cfg.maxPositionEmbeddings ?? Number.MAX_SAFE_INTEGER,
    chunkScratchBytesPerToken: chunkScratchBytesPerToken(cfg),
  };
}

/**
 * Weight bytes one decoded token touches per layer kind, and how many layers of each kind the
 * model has: the census split the way the run report times it.
 */
export function kindCensus(cfg: ModelConfig): Record<ReportKind, { layers: number; bytesPerLayer: number }> {
  const D = cfg.hiddenSize;
  const moe = cfg.moe;
  const c = censusOf(cfg);
  const kda = cfg.layerKinds.filter((k) => k === "kda").length;
  const moeLayers = c.moeLayers;
  let moeTrunk = moe.numExperts * D * BF16 + moe.numExperts * F32;
  if (moe.numShared > 0) moeTrunk += 3 * moe.numShared * moe.intermediate * D * BF16;
  if (moe.latentDim !== null) moeTrunk += 2 * moe.latentDim * D * BF16 + (moe.latentNorm ? moe.latentDim * BF16 : 0);
  return {
    embed: { layers: 1, bytesPerLayer: c.embedRowBytes },
    kda: { layers: kda, bytesPerLayer: kdaLayerBytes(cfg) },
    mla: { layers: cfg.numLayers - kda, bytesPerLayer: mlaLayerBytes(cfg) },
    dense_mlp: { layers: cfg.numLayers - moeLayers, bytesPerLayer: 3 * cfg.denseIntermediate * D * BF16 },
    moe_trunk: { layers: moeLayers, bytesPerLayer: moeTrunk },
    // One MoE layer's routed experts for one token: top-k experts.
    moe_experts: { layers: moeLayers, bytesPerLayer: moe.topK * c.expertBytes },
    attn_res: { layers: cfg.numLayers, bytesPerLayer: (2 + (cfg.attnResBlockSize !== null ? 4 : 0)) * D * BF16 },
    lm_head: { layers: 1, bytesPerLayer: c.headBytes },
  };
}
