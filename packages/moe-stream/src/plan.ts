/**
 * planMemory: splits a byte budget between the trunk (pinned layers + a ring) and the expert
 * store (streaming slots + a per-layer cache), trunk first: one pinned GB removes ~1 GB of reads
 * from every token, one GB of expert cache saves far less under K3's flat routing (docs/io.md §1).
 *
 * Order: fixed costs (caller's reserve, runtime overhead, the expert streaming slots, one ring
 * slot) must fit or the plan fails with a BudgetError carrying both numbers. Then a second ring
 * slot (so reading layer L+1 overlaps computing L), then the global tensors (embeddings, lm_head),
 * then layers are pinned largest first, and whatever is left becomes expert cache slots per layer.
 */
import { BudgetError, MoeStreamError, formatBytes } from "./errors.js";
import type { TrunkManifest } from "./trunk/trunk-pack.js";

/** The census the plan needs; `censusFromConfig` derives it from a K3 / Kimi-Linear config. */
export interface ModelCensus {
  layers: number;
  /** Trunk bytes of each layer (bf16 weights; routed experts excluded). */
  layerTrunkBytes: number[];
  /** Embeddings + final norm + lm_head (+ output AttnRes). */
  globalBytes: number;
  /** lm_head alone (read every token when the global tensors are streamed). */
  headBytes: number;
  moeLayers: number[];
  numExperts: number;
  topK: number;
  /** One routed expert's bytes (K3: 17,547,264). */
  expertBytes: number;
}

export interface PlanOptions {
  /** A config.json object (top level or its text_config), or a census. */
  config?: Record<string, unknown>;
  census?: ModelCensus;
  /** Exact per-layer trunk sizes from a packed trunk (overrides the config estimate). */
  trunk?: TrunkManifest;
  budgetBytes: number;
  /** Bytes the caller needs besides weights: KV cache, recurrent state, activations. Default 0. */
  reservedBytes?: number;
  /** Node/V8 + scratch headroom. Default 256 MiB. */
  overheadBytes?: number;
  /** Ring slots wanted (default 2; 1 is used only when 2 do not fit). */
  ringSlots?: number;
  /** Expert streaming slots (default topK + 2). */
  ioSlots?: number;
}

export interface MemoryPlan {
  budgetBytes: number;
  pinnedLayers: number[];
  streamedLayers: number[];
  ringSlots: number;
  ringSlotBytes: number;
  /** True when ringSlots >= 2 (reads of L+1 overlap compute of L). */
  trunkOverlap: boolean;
  globalResident: boolean;
  ioSlots: number;
  expertSlotBytes: number;
  cacheSlotsPerLayer: number;
  /** Uniform-routing estimate of the resident hit rate (cacheSlotsPerLayer / numExperts). */
  expectedHitRate: number;
  /** Disk bytes per decoded token with no expert cache, and with the uniform-routing estimate. */
  bytesPerTokenNoCache: number;
  expectedBytesPerToken: number;
  parts: Array<{ name: string; bytes: number }>;
  totalBytes: number;
}

const MiB = 1 << 20;

function num(cfg: Record<string, unknown>, key: string, fallback?: number): number {
  const v = cfg[key];
  if (typeof v === "number" && Number.isFinite(v)) return v;
  if (fallback !== undefined) return fallback;
  throw new MoeStreamError(`config: ${key} must be a number, got ${JSON.stringify(v)}`);
}

/** Expert bytes for MXFP4 (K3: packed + one E8M0 scale per 32) or bf16 (48B). */
function expertBytesOf(inDim: number, inter: number, mxfp4: boolean): number {
  const params = 3 * inDim * inter;
  return mxfp4 ? params / 2 + params / 32 : params * 2;
}

/**
 * Per-layer trunk sizes from a K3 / Kimi-Linear config (bf16 matrices and norms, f32 conv/A_log/
 * dt_bias/o_norm/bias), matching the released checkpoints' byte counts (docs/architecture.md §7).
 */
export function censusFromConfig(config: Record<string, unknown>): ModelCensus {
  const c = (config.text_config as Record<string, unknown>) ?? config;
  const D = num(c, "hidden_size");
  const L = num(c, "num_hidden_layers");
  const V = num(c, "vocab_size");
  const lac = (c.linear_attn_config as Record<string, unknown>) ?? {};
  const kdaLayers = new Set(((lac.kda_layers as number[]) ?? []).map((l) => l - 1));
  const H = num(lac, "num_heads", 0);
  const hd = num(lac, "head_dim", 0);
  const convK = num(lac, "short_conv_kernel_size", 4);
  const fullGate = lac.use_full_rank_gate === true;
  const E = num(c, "num_experts");
  const k = num(c, "num_experts_per_token");
  const inter = num(c, "moe_intermediate_size");
  const latent = typeof c.routed_expert_hidden_size === "number" ? (c.routed_expert_hidden_size as number) : null;
  const shared = num(c, "num_shared_experts", 0) * inter;
  const firstDense = num(c, "first_k_dense_replace", 1);
  const denseInter = num(c, "intermediate_size");
  const mha = num(c, "num_attention_heads");
  const qLora = typeof c.q_lora_rank === "number" ? (c.q_lora_rank as number) : null;
  const kvLora = num(c, "kv_lora_rank");
  const nope = num(c, "qk_nope_head_dim");
  const rope = num(c, "qk_rope_head_dim");
  const vdim = num(c, "v_head_dim");
  const outGate = c.mla_use_output_gate === true;
  const mxfp4 = JSON.stringify(config.quantization_config ?? c.quantization_config ?? "").includes("mxfp4");
  const bf = 2;
  const norms = 6 * D * bf; // input/post norms + 4 AttnRes vectors (K3); 48B has 2 (small either way)
  const Hk = H * hd;
  const kda = (5 - (fullGate ? 0 : 1)) * Hk * D * bf + (fullGate ? 0 : (hd * D + Hk * hd) * bf) + hd * D * bf + Hk * hd * bf + H * D * bf + 3 * Hk * convK * 4 + 128 * 4 + Hk * 4 + hd * 4;
  const qHead = nope + rope;
  const mla =
    (qLora ? (qLora * D + qLora + mha * qHead * qLora) * bf : mha * qHead * D * bf) +
    ((kvLora + rope) * D + kvLora + mha * (nope + vdim) * kvLora + D * mha * vdim + (outGate ? mha * vdim * D : 0)) * bf;
  const router = E * D * bf + E * 4;
  const latentProj = latent ? (2 * latent * D + latent) * bf : 0;
  const sharedBytes = 3 * shared * D * bf;
  const layerTrunkBytes: number[] = [];
  const moeLayers: number[] = [];
  for (let l = 0; l < L; l++) {
    const attn = kdaLayers.has(l) ? kda : mla;
    const isMoe = l >= firstDense;
    if (isMoe) moeLayers.push(l);
    layerTrunkBytes.push(norms + attn + (isMoe ? router + latentProj + sharedBytes : 3 * denseInter * D * bf));
  }
  const headBytes = V * D * bf;
  return {
    layers: L,
    layerTrunkBytes,
    globalBytes: 2 * headBytes + 3 * D * bf,
    headBytes,
    moeLayers,
    numExperts: E,
    topK: k,
    expertBytes: expertBytesOf(latent ?? D, inter, mxfp4),
  };
}

const roundSlot = (n: number) => Math.ceil(n / 4096) * 4096 + 4096; // one expert slot: aligned superset

/** Plans the split; throws BudgetError (both numbers) when even the minimum does not fit. */
export function planMemory(opts: PlanOptions): MemoryPlan {
  let census = opts.census ?? (opts.config ? censusFromConfig(opts.config) : undefined);
  if (!census) throw new MoeStreamError("planMemory: pass config or census");
  if (opts.trunk) {
    const sizes = [...census.layerTrunkBytes];
    let globalBytes = census.globalBytes;
    for (const g of opts.trunk.groups) {
      if (g.layer === null) globalBytes = g.byteLength;
      else if (g.layer < sizes.length) sizes[g.layer] = g.byteLength;
    }
    census = { ...census, layerTrunkBytes: sizes, globalBytes };
  }
  const budget = opts.budgetBytes;
  if (!(budget > 0)) throw new MoeStreamError(`planMemory: budgetBytes must be positive, got ${budget}`);
  const reserved = opts.reservedBytes ?? 0;
  const overhead = opts.overheadBytes ?? 256 * MiB;
  const ioSlots = opts.ioSlots ?? census.topK + 2;
  const expertSlotBytes = roundSlot(census.expertBytes);
  const largest = Math.max(...census.layerTrunkBytes);
  const trunkTotal = census.layerTrunkBytes.reduce((a, b) => a + b, 0);
  const fixed = reserved + overhead + ioSlots * expertSlotBytes;
  const minimum = fixed + largest;
  if (budget < minimum)
    throw new BudgetError(
      `memory plan minimum (reserve ${formatBytes(reserved)} + overhead ${formatBytes(overhead)} + ${ioSlots} expert slots of ${formatBytes(expertSlotBytes)} + one ring slot of ${formatBytes(largest)})`,
      minimum,
      budget,
    );
  let room = budget - fixed;
  let ringSlots = 0;
  let ringSlotBytes = 0;
  const pinned: number[] = [];
  let globalResident = false;
  if (room >= trunkTotal + census.globalBytes) {
    for (let l = 0; l < census.layers; l++) pinned.push(l);
    room -= trunkTotal + census.globalBytes;
    globalResident = true;
  } else {
    // Ring slots are sized to the largest STREAMED layer, so pinning the largest layers also
    // shrinks the ring. Try pinning the p largest (p = 0, 1, ...), then fill what is left with
    // smaller layers; keep the split that pins the most bytes (fewest bytes read per token).
    const want = Math.max(1, opts.ringSlots ?? 2);
    const sizes = census.layerTrunkBytes;
    const order = [...sizes.keys()].sort((a, b) => sizes[b] - sizes[a] || a - b);
    let best: { slots: number; slotBytes: number; pinned: number[]; pinnedBytes: number; rest: number } | null = null;
    for (const slots of want >= 2 ? [want, 1] : [1]) {
      for (let p = 0; p < order.length; p++) {
        const slotBytes = sizes[order[p]];
        let rest = room - slots * slotBytes;
        const chosen: number[] = [];
        for (let i = 0; i < p && rest >= 0; i++) {
          chosen.push(order[i]);
          rest -= sizes[order[i]];
        }
        if (rest < 0) break;
        for (let i = p + 1; i < order.length; i++)
          if (sizes[order[i]] <= rest) {
            chosen.push(order[i]);
            rest -= sizes[order[i]];
          }
        const pinnedBytes = chosen.reduce((a, l) => a + sizes[l], 0);
        if (!best || pinnedBytes > best.pinnedBytes) best = { slots, slotBytes, pinned: chosen, pinnedBytes, rest };
      }
      if (best) break; // two slots fit in some split: keep the overlap
    }
    if (!best) throw new BudgetError("memory plan: no ring slot fits", minimum, budget);
    ringSlots = best.slots;
    ringSlotBytes = best.slotBytes;
    pinned.push(...best.pinned.sort((a, b) => a - b));
    room = best.rest;
    if (room >= census.globalBytes) {
      globalResident = true;
      room -= census.globalBytes;
    }
  }
  const moe = census.moeLayers.length;
  const cacheSlotsPerLayer = moe > 0 ? Math.min(census.numExperts, Math.floor(room / (moe * expertSlotBytes))) : 0;
  const pinnedSet = new Set(pinned);
  const streamed = [...Array(census.layers).keys()].filter((l) => !pinnedSet.has(l));
  const streamedTrunk = streamed.reduce((a, l) => a + census!.layerTrunkBytes[l], 0) + (globalResident ? 0 : census.headBytes);
  const expertPerToken = moe * census.topK * census.expertBytes;
  const hit = census.numExperts > 0 ? cacheSlotsPerLayer / census.numExperts : 0;
  const parts = [
    { name: "reserved (KV, state, activations)", bytes: reserved },
    { name: "runtime overhead", bytes: overhead },
    { name: "expert streaming slots", bytes: ioSlots * expertSlotBytes },
    { name: "trunk ring", bytes: ringSlots * ringSlotBytes },
    { name: "pinned trunk", bytes: pinned.reduce((a, l) => a + census!.layerTrunkBytes[l], 0) },
    { name: "global tensors (embed, lm_head)", bytes: globalResident ? census.globalBytes : 0 },
    { name: "expert cache", bytes: cacheSlotsPerLayer * moe * expertSlotBytes },
  ];
  return {
    budgetBytes: budget,
    pinnedLayers: pinned,
    streamedLayers: streamed,
    ringSlots,
    ringSlotBytes,
    trunkOverlap: ringSlots >= 2,
    globalResident,
    ioSlots,
    expertSlotBytes,
    cacheSlotsPerLayer,
    expectedHitRate: hit,
    bytesPerTokenNoCache: streamedTrunk + expertPerToken,
    expectedBytesPerToken: streamedTrunk + expertPerToken * (1 - hit),
    parts,
    totalBytes: parts.reduce((a, p) => a + p.bytes, 0),
  };
}
