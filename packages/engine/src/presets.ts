/**
 * Memory presets (docs/io.md §6) and the pre-load memory plan.
 *
 * A preset maps to three budgets: trunk (pinned layers + streaming ring), expert cache, and KV.
 * The plan says, before anything is loaded, which layers are pinned, how many ring and cache slots
 * exist, what the KV cache can hold and how many bytes a token will read; it refuses with both
 * numbers when the total exceeds 95% of MemAvailable. Budgets never change the math: output is
 * byte-identical across presets (tested on the tiny model).
 */
import { readFileSync } from "node:fs";
import { freemem, totalmem } from "node:os";
import { join } from "node:path";
import { MIXER_PIECE, type Census } from "./census.js";
import { ContextError, PlanError, UsageError } from "./errors.js";
import { DEFAULTS } from "./options.js";
import { formatBytes } from "@k3/native";
// The readers' slot formulas, from the subpath that loads no addon (presets are imported by `k3 --help`).
import { DIRECT_ALIGN, ringSlotBytesFor, supersetBytes, trunkChunkBytesFor } from "@k3/moe-stream/sizing";

export { ringSlotBytesFor, trunkChunkBytesFor };

export const GB = 1e9;
export const PRESET_NAMES = ["ultra", "laptop", "desktop", "workstation", "server", "max", "auto"] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

export interface Budgets {
  /** Bytes for pinned trunk layers plus the streaming ring. */
  trunkBytes: number;
  /** Bytes for the routed-expert cache (all MoE layers together). */
  cacheBytes: number;
  /** Bytes for the MLA latent cache. */
  kvBytes: number;
  /** Ring slots when the trunk streams (1 = no async prefetch). */
  ringSlots: number;
  /** Stream embed and lm_head in chunks instead of keeping them resident. */
  streamEmbedHead: boolean;
  /** The prefill chunk the budget plans for (`auto` picks one; --chunk overrides; default 64). */
  chunkSize?: number;
}

interface PresetRow {
  trunkGb: number;
  cacheGb: number;
  kvGb: number;
  ringSlots: number;
  streamEmbedHead: boolean;
  note: string;
}

/** Trunk / cache from kimi-k3-in-c's table; KV budgets sized for the machine class. */
export const PRESETS: Record<Exclude<PresetName, "auto">, PresetRow> = {
  ultra: { trunkGb: 2.5, cacheGb: 0.31, kvGb: 0.25, ringSlots: 1, streamEmbedHead: true, note: "~3 GB; streams embed and lm_head; one ring slot" },
  laptop: { trunkGb: 3, cacheGb: 1, kvGb: 1, ringSlots: 2, streamEmbedHead: false, note: "~8 GB peak RSS" },
  desktop: { trunkGb: 16, cacheGb: 10, kvGb: 2, ringSlots: 2, streamEmbedHead: false, note: "~32 GB" },
  workstation: { trunkGb: 60, cacheGb: 30, kvGb: 4, ringSlots: 2, streamEmbedHead: false, note: "~96 GB" },
  server: { trunkGb: 110, cacheGb: 13, kvGb: 4, ringSlots: 2, streamEmbedHead: false, note: "~128 GB; 90/93 layers pinned" },
  max: { trunkGb: 110, cacheGb: 109, kvGb: 8, ringSlots: 2, streamEmbedHead: false, note: "~224 GB; no faster than server" },
};

export interface MemInfo {
  totalBytes: number;
  availableBytes: number;
  /** The memory cgroup limit that lowered the figures (a container's), when there is one. */
  cgroupLimitBytes?: number;
}

/**
 * The tightest memory cgroup limit on this process and the usage charged against it: v2
 * memory.max / memory.current, else v1 memory.limit_in_bytes / memory.usage_in_bytes, on the
 * process's own cgroup and every ancestor up to the (namespace) root. null when unlimited or unknown.
 * `root` lets tests point it at a fake /proc + /sys tree.
 */
export function cgroupMemory(root = "/"): { limitBytes: number; usageBytes: number } | null {
  let best: { limitBytes: number; usageBytes: number } | null = null;
  const read = (f: string) => readFileSync(join(root, f), "utf8").trim();
  const consider = (limit: number, usage: number) => {
    if (!Number.isFinite(limit) || !Number.isFinite(usage) || limit <= 0) return;
    if (!best || limit - usage < best.limitBytes - best.usageBytes) best = { limitBytes: limit, usageBytes: usage };
  };
  let lines: string[];
  try {
    lines = read("proc/self/cgroup").split("\n");
  } catch {
    return null;
  }
  for (const line of lines) {
    const [, ctl, path] = line.split(":");
    if (path === undefined) continue;
    const v2 = line.startsWith("0::");
    if (!v2 && !ctl.split(",").includes("memory")) continue;
    const base = v2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory";
    for (let dir = path; ; dir = dir.slice(0, Math.max(0, dir.lastIndexOf("/")))) {
      try {
        if (v2) {
          const max = read(join(base, dir, "memory.max"));
          if (max !== "max") consider(Number(max), Number(read(join(base, dir, "memory.current"))));
        } else {
          const max = Number(read(join(base, dir, "memory.limit_in_bytes")));
          // v1 says "unlimited" with a page-rounded 2^63.
          if (max < 2 ** 60) consider(max, Number(read(join(base, dir, "memory.usage_in_bytes"))));
        }
      } catch {
        /* no memory controller at this level */
      }
      if (dir === "" || dir === "/") break;
    }
  }
  return best;
}

/**
 * MemTotal / MemAvailable from /proc/meminfo (Linux), lowered to a memory cgroup's limit and
 * headroom (inside a container /proc/meminfo shows the host, and a plan sized to it was
 * OOM-killed); a fallback from os when absent.
 */
export function readMemInfo(root = "/"): MemInfo {
  let info: MemInfo = { totalBytes: totalmem(), availableBytes: freemem() };
  try {
    const text = readFileSync(join(root, "proc/meminfo"), "utf8");
    const field = (name: string) => {
      const m = new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(text);
      return m ? Number(m[1]) * 1024 : NaN;
    };
    const total = field("MemTotal");
    const avail = field("MemAvailable");
    if (Number.isFinite(total) && Number.isFinite(avail)) info = { totalBytes: total, availableBytes: avail };
  } catch {
    /* not Linux: keep the os figures */
  }
  const cg = cgroupMemory(root);
  if (cg && (cg.limitBytes < info.totalBytes || cg.limitBytes - cg.usageBytes < info.availableBytes)) {
    info = {
      totalBytes: Math.min(info.totalBytes, cg.limitBytes),
      availableBytes: Math.max(0, Math.min(info.availableBytes, cg.limitBytes - cg.usageBytes)),
      cgroupLimitBytes: cg.limitBytes,
    };
  }
  return info;
}

/** The preset doctor would suggest for this much available memory (docs/io.md §6). */
export function presetForMemory(availableBytes: number): Exclude<PresetName, "auto"> {
  const gb = availableBytes / GB;
  if (gb >= 192) return "server";
  if (gb >= 96) return "workstation";
  if (gb >= 32) return "desktop";
  if (gb >= 10) return "laptop";
  return "ultra";
}

/** The prefill chunks `auto` picks from, largest first: multiples of 64, so each gives the same output. */
export const AUTO_CHUNKS = [1024, 512, 256, 128] as const;
/** The share of auto's usable memory its prefill chunk's work buffers may take. */
export const AUTO_CHUNK_SHARE = 0.1;

/**
 * `auto`'s prefill chunk: the largest of AUTO_CHUNKS whose work buffers beyond the default chunk's
 * fit in AUTO_CHUNK_SHARE of the usable memory, else the default. A chunk reads each streamed expert
 * once for all its tokens: at the published K3's widths and 3 GB/s, 5.7 s of expert reads per
 * prefilled token at 64, 1.0 s at 512, 0.51 s at 1024 (k3 plan --published-k3 --project --chunk T).
 */
export function autoChunkSize(census: Census, usableBytes: number): number {
  for (const T of AUTO_CHUNKS) {
    if ((T - DEFAULTS.chunkSize) * census.chunkScratchBytesPerToken <= AUTO_CHUNK_SHARE * usableBytes) return T;
  }
  return DEFAULTS.chunkSize;
}

/**
 * Budgets for a preset. `auto` reserves 2 GB + 2% + 6.4 GB, takes its prefill chunk's work buffers
 * (`chunkSize`, the --chunk given, else autoChunkSize) from the rest, gives the trunk everything when it fits, else caps pinning at
 * 0.55·MemTotal (pinning near the ceiling measured slower) with a 0.5 GB cache. The named presets
 * keep the default chunk (64): they are memory classes.
 */
export function budgetsFor(preset: PresetName, census: Census, mem: MemInfo = readMemInfo(), chunkSize?: number): Budgets {
  if (!(PRESET_NAMES as readonly string[]).includes(preset)) {
    throw new UsageError(`--preset ${preset}: expected one of ${PRESET_NAMES.join(", ")}`);
  }
  if (preset !== "auto") {
    const p = PRESETS[preset];
    return { trunkBytes: p.trunkGb * GB, cacheBytes: p.cacheGb * GB, kvBytes: p.kvGb * GB, ringSlots: p.ringSlots, streamEmbedHead: p.streamEmbedHead };
  }
  const reserve = 2 * GB + 0.02 * mem.totalBytes + 6.4 * GB;
  // --chunk given: its buffers, as planMemory will count them; else auto's pick
  const chunk = chunkSize ?? autoChunkSize(census, Math.max(0, mem.availableBytes - reserve));
  const usable = Math.max(0, mem.availableBytes - reserve - Math.max(0, chunk - DEFAULTS.chunkSize) * census.chunkScratchBytesPerToken);
  const kvBytes = Math.min(8 * GB, Math.max(0.25 * GB, usable * 0.05));
  const resident = census.trunkBytes + census.embedBytes + census.headBytes;
  if (usable - kvBytes >= resident) {
    return { trunkBytes: census.trunkBytes, cacheBytes: usable - kvBytes - resident, kvBytes, ringSlots: 2, streamEmbedHead: false, chunkSize: chunk };
  }
  const trunkBytes = Math.max(0, Math.min(usable - kvBytes - 0.5 * GB - census.embedBytes - census.headBytes, 0.55 * mem.totalBytes));
  return { trunkBytes, cacheBytes: 0.5 * GB, kvBytes, ringSlots: 2, streamEmbedHead: trunkBytes <= 0, chunkSize: chunk };
}

/** The resident bytes a plan counts, one field per part. */
export interface PlanParts {
  pinnedTrunk: number;
  trunkRing: number;
  /** Embedding + lm_head when resident (0 when they stream). */
  embedHead: number;
  /** A streamed embed/head's read slots (0 when resident). */
  embedHeadReadSlots: number;
  expertCache: number;
  /** The expert store's streaming slots: demand (topK + 2) and the lookahead share. */
  expertReadSlots: number;
  recurrentState: number;
  kvCache: number;
  runtime: number;
  /** Only with a prompt cache. */
  promptCache?: number;
  /** Only with speculative decoding (its rollback copy of the KDA states). */
  specCheckpoint?: number;
}
export type PlanPart = keyof PlanParts;

/**
 * How each part is named wherever a plan is shown (the printed plan, the run report's memory
 * rows, the plan check's mismatches), in print order.
 */
export const PLAN_PART_NAMES: Readonly<Record<PlanPart, string>> = {
  pinnedTrunk: "pinned trunk",
  trunkRing: "trunk ring",
  embedHead: "embed + lm_head",
  embedHeadReadSlots: "embed/head read slots",
  expertCache: "expert cache",
  expertReadSlots: "expert read slots",
  recurrentState: "recurrent state",
  kvCache: "KV cache",
  runtime: "runtime + scratch",
  promptCache: "prompt cache",
  specCheckpoint: "spec checkpoint",
};

/** The plan's parts as printed rows, in PLAN_PART_NAMES order; optional parts only when planned. */
export function planPartRows(parts: PlanParts): { part: PlanPart; name: string; bytes: number }[] {
  return (Object.keys(PLAN_PART_NAMES) as PlanPart[]).flatMap((part) => (parts[part] === undefined ? [] : [{ part, name: PLAN_PART_NAMES[part], bytes: parts[part]! }]));
}

export interface MemoryPlan {
  preset: PresetName | "custom";
  /** The memory cgroup limit that lowered availableBytes, when there is one. */
  cgroupLimitBytes?: number;
  budgets: Budgets;
  /** Zero-based layers whose trunk stays resident. */
  pinnedLayers: number[];
  /** Layers streamed through the ring every token. */
  streamedLayers: number[];
  ringSlots: number;
  ringSlotBytes: number;
  /** The ring's read piece (trunkChunkBytesFor the largest layer; 0 when the trunk is resident). */
  trunkChunkBytes: number;
  /** Expert cache slots per MoE layer. */
  cacheSlotsPerLayer: number;
  /** Streaming slots the lookahead prefetch may hold (prefetchSlotsFor; 0 with prefetch off). */
  prefetchSlots: number;
  /** Tokens the KV budget holds. */
  kvCapacityTokens: number;
  embedHeadResident: boolean;
  /**
   * Where the trunk lives: "streamed" (a packed trunk is given and not every layer is pinned: the
   * rest go through the ring), or "resident" (every layer loaded at start: all fit the budget, or
   * there is no packed trunk to stream from, in which case the whole trunk is resident whatever
   * the budget says).
   */
  trunkMode: "streamed" | "resident";
  /** Why the trunk is resident although the budget does not hold it (no packed trunk), else null. */
  trunkNote: string | null;
  /** Bytes read from disk per decoded token when no expert is cached (= the sum of expectedReads). */
  expectedBytesPerToken: number;
  /** The prefill chunk the plan holds work buffers for (--chunk, else the budget's, else 64). */
  chunkSize: number;
  /** The same, by source: streamed trunk layers, routed experts (cold), embed row + lm_head when streamed. */
  expectedReads: { trunk: number; experts: number; embedHead: number };
  /** One routed expert read as the device moves it on average (the expert plus its aligned-superset page); 0 without experts. */
  expertReadBytes: number;
  /** Planned resident bytes, by part (printed through PLAN_PART_NAMES, in their order). */
  parts: PlanParts;
  totalBytes: number;
  availableBytes: number;
}

/**
 * Streaming slots the lookahead prefetch may hold, on top of the topK + 2 demand slots: topK (16 for
 * K3, 280.8 MB), so a whole predicted layer can be read ahead (ceil(topK / 2) capped it at half a
 * layer: at real widths most of a token's expert reads then waited behind the router); ultra, whose
 * plan must stay under 4 GB, keeps ceil(topK / 2).
 */
export function prefetchSlotsFor(topK: number, preset?: PresetName | "custom"): number {
  return preset === "ultra" ? Math.ceil(topK / 2) : topK;
}

/** The expert store's streaming slots: topK + 2 of their own for demand reads, the prefetch share on top. */
export function expertIoSlotsFor(topK: number, prefetchSlots: number): number {
  return topK + 2 + prefetchSlots;
}

/** Node/V8 and scratch headroom counted in every plan (measured with the default prefill chunk, DEFAULTS.chunkSize). */
export const RUNTIME_OVERHEAD_BYTES = 0.25 * GB;

/**
 * Builds the plan for given budgets. Largest layers are pinned first (they save the most reads per
 * pinned byte only when sizes differ; ties go to the lower layer so plans are stable).
 */
/** What the run adds on top of the model's own memory (all off by default). */
export interface PlanExtras {
  /** Lookahead prefetch slots (default on). */
  prefetch?: boolean;
  /** A prompt cache: each snapshot holds the KDA states and the MLA cache up to its position. */
  promptCache?: { slots: number; maxBytes: number };
  /** Speculative decoding keeps one copy of the KDA states as its rollback checkpoint. */
  spec?: boolean;
  /**
   * A packed trunk (`k3 pack`, `--trunk DIR`) is there to stream from. Without one (the default,
   * as Model.load) every layer is loaded resident: the plan pins them all, has no ring and counts
   * no trunk reads, whatever the trunk budget.
   */
  packedTrunk?: boolean;
  /**
   * Each layer's bytes in the packed trunk (its manifest's groups, 4 KiB-aligned): what the ring
   * reads per streamed layer and what sizes its slots. Default: the census estimate.
   */
  packedLayerBytes?: number[];
  /**
   * The prefill chunk (--chunk; default the budget's, `auto`'s pick, else DEFAULTS.chunkSize): a chunk above the default adds its
   * extra tokens' work buffers (census.chunkScratchBytesPerToken) to "runtime + scratch".
   */
  chunkSize?: number;
}

/** What an O_DIRECT read at an unaligned offset moves beyond the bytes asked, on average (one page). */
export const ALIGN_SLACK = DIRECT_ALIGN;

/**
 * Read slots of a streamed embed/head: the chunk being multiplied plus three in flight, each chunk
 * one read of at most HEAD_CHUNK_BYTES: the ring is 16.8 MB for K3 instead of 117.5 MB for two
 * 4096-row chunks, and on the VM measured here it streamed K3's head faster in 3 of 4 interleaved
 * rounds (bench/stream-shapes.bench.ts, 2026-12-03 01:56 UTC: 1.86-1.88 vs 1.70-1.73 GB/s, then
 * 1.60 vs 1.67; the C-driven ceiling of the same reads 2.00-2.38).
 */
export const HEAD_READ_SLOTS = 4;
/** Most bytes of one streamed lm_head chunk (one read). */
export const HEAD_CHUNK_BYTES = 4 << 20;

/** lm_head rows per chunk when embed/head stream: rows of `rowBytes` filling HEAD_CHUNK_BYTES, at least 16 chunks. */
export function headChunkRowsFor(vocab: number, rowBytes: number): number {
  return Math.max(1, Math.min(Math.floor(HEAD_CHUNK_BYTES / Math.max(1, rowBytes)), Math.ceil(vocab / 16)));
}

/** Bytes of one streamed lm_head chunk of this census's checkpoint (headChunkRowsFor its vocabulary and rows). */
function headChunkBytesOf(census: Census): number {
  const vocab = Math.round(census.embedBytes / Math.max(1, census.embedRowBytes));
  return headChunkRowsFor(vocab, census.embedRowBytes) * census.embedRowBytes;
}

/** A streamed embed/head's read slots: HEAD_READ_SLOTS lm_head chunks, each its aligned superset (RangeReader.arenaBytesFor). */
export function headReadSlotBytes(census: Census): number {
  return HEAD_READ_SLOTS * supersetBytes(headChunkBytesOf(census));
}

export function planMemory(census: Census, budgets: Budgets, preset: PresetName | "custom", mem: MemInfo = readMemInfo(), io: PlanExtras = {}): MemoryPlan {
  const L = census.layerTrunkBytes.length;
  const packed = io.packedLayerBytes;
  if (packed && packed.length !== L) throw new UsageError(`packed trunk sizes for ${packed.length} layers, the model has ${L}`);
  // What a streamed layer reads (and occupies in a ring slot): its packed group when known.
  const streamBytes = (l: number) => (packed ? packed[l] : census.layerTrunkBytes[l]);
  const largest = Math.max(0, ...[...Array(L).keys()].map(streamBytes));
  const fits = census.trunkBytes <= budgets.trunkBytes;
  // No packed trunk: nothing can stream, so every layer is loaded (Model.load) whatever the budget.
  const allFit = fits || !io.packedTrunk;
  const slotBytes = ringSlotBytesFor(largest);
  // The ring needs at least one slot of the largest layer; a second one only when the budget holds it.
  const ringSlots = allFit ? 0 : Math.max(1, Math.min(budgets.ringSlots, Math.floor(budgets.trunkBytes / Math.max(1, slotBytes))));
  const ringBytes = ringSlots * slotBytes;
  const pinned: number[] = [];
  if (allFit) {
    for (let l = 0; l < L; l++) pinned.push(l);
  } else {
    let room = budgets.trunkBytes - ringBytes;
    const order = [...census.layerTrunkBytes.keys()].sort((a, b) => census.layerTrunkBytes[b] - census.layerTrunkBytes[a] || a - b);
    for (const l of order) {
      if (census.layerTrunkBytes[l] <= room) {
        pinned.push(l);
        room -= census.layerTrunkBytes[l];
      }
    }
    pinned.sort((a, b) => a - b);
  }
  const pinnedSet = new Set(pinned);
  const streamed = [...Array(L).keys()].filter((l) => !pinnedSet.has(l));
  const pinnedBytes = pinned.reduce((a, l) => a + census.layerTrunkBytes[l], 0);
  // Never plan more cache slots than a layer has experts, nor more KV than the context limit.
  const expertsPerLayer = census.moeLayers > 0 ? census.expertsTotal / census.moeLayers : 0;
  // Every expert store slot (cache or streaming) holds one expert's aligned superset (ExpertStore.arenaBytesFor).
  const expertSlot = supersetBytes(census.expertBytes);
  const cacheSlotsPerLayer =
    census.moeLayers > 0 && census.expertBytes > 0 ? Math.min(expertsPerLayer, Math.floor(budgets.cacheBytes / census.moeLayers / expertSlot)) : 0;
  const kvCapacityTokens =
    census.kvBytesPerToken > 0 ? Math.min(census.maxPositions, Math.floor(budgets.kvBytes / census.kvBytesPerToken)) : census.maxPositions;
  const embedHeadResident = !budgets.streamEmbedHead;
  const streamedTrunk = streamed.reduce((a, l) => a + streamBytes(l), 0);
  // A streamed embed/head reads one embedding row and all of lm_head per decoded token.
  // Every O_DIRECT read moves its 4 KiB-aligned superset: about one page more than asked at an
  // unaligned offset (exactly one for a K3 expert, whose 17,547,264 B are whole pages).
  const reads = census.expertBytes > 0 ? census.expertBytesPerToken / census.expertBytes : 0;
  const headReads = Math.ceil(census.headBytes / Math.max(1, headChunkBytesOf(census)));
  const expectedReads = {
    // A lone streamed layer is read once and then found in its ring slot every token (no other
    // streamed layer ever takes the slot; TrunkStreamer.acquire), so decode reads none of it.
    trunk: streamed.length === 1 ? 0 : streamedTrunk,
    experts: census.expertBytesPerToken + reads * ALIGN_SLACK,
    embedHead: embedHeadResident ? 0 : census.headBytes + census.embedRowBytes + (headReads + 1) * ALIGN_SLACK,
  };
  const expectedBytesPerToken = expectedReads.trunk + expectedReads.experts + expectedReads.embedHead;
  const trunkNote =
    !fits && !io.packedTrunk
      ? `no packed trunk (--trunk DIR from \`k3 pack\`): the whole trunk is loaded resident (${formatBytes(census.trunkBytes)}, over the ${formatBytes(budgets.trunkBytes)} trunk budget)`
      : null;
  // The expert store's streaming slots (topK + 2 for demand reads, plus the lookahead share), each
  // one expert slot; faulted in at open.
  const topK = census.moeLayers > 0 && census.expertBytes > 0 ? Math.round(census.expertBytesPerToken / (census.moeLayers * census.expertBytes)) : 0;
  const prefetchSlots = topK > 0 && io.prefetch !== false ? prefetchSlotsFor(topK, preset) : 0;
  const streamSlots = topK > 0 ? expertIoSlotsFor(topK, prefetchSlots) : 0;
  const chunkSize = io.chunkSize ?? budgets.chunkSize ?? DEFAULTS.chunkSize;
  const parts: PlanParts = {
    pinnedTrunk: pinnedBytes,
    trunkRing: ringBytes,
    embedHead: embedHeadResident ? census.embedBytes + census.headBytes : 0,
    embedHeadReadSlots: embedHeadResident ? 0 : headReadSlotBytes(census),
    expertCache: cacheSlotsPerLayer * census.moeLayers * expertSlot,
    expertReadSlots: streamSlots * expertSlot,
    recurrentState: census.recurrentStateBytes,
    kvCache: Math.min(budgets.kvBytes, kvCapacityTokens * census.kvBytesPerToken),
    runtime: RUNTIME_OVERHEAD_BYTES + Math.max(0, chunkSize - DEFAULTS.chunkSize) * census.chunkScratchBytesPerToken,
  };
  const pc = io.promptCache;
  if (pc && pc.slots > 0) {
    const snapshot = census.recurrentStateBytes + kvCapacityTokens * census.kvBytesPerToken;
    parts.promptCache = Math.min(pc.maxBytes, pc.slots * snapshot);
  }
  if (io.spec) parts.specCheckpoint = census.recurrentStateBytes;
  const totalBytes = planPartRows(parts).reduce((a, p) => a + p.bytes, 0);
  return {
    preset,
    budgets,
    pinnedLayers: pinned,
    streamedLayers: streamed,
    ringSlots,
    ringSlotBytes: ringSlots ? slotBytes : 0,
    trunkChunkBytes: ringSlots ? trunkChunkBytesFor(largest) : 0,
    cacheSlotsPerLayer,
    prefetchSlots,
    kvCapacityTokens,
    embedHeadResident,
    trunkMode: streamed.length > 0 ? "streamed" : "resident",
    trunkNote,
    expectedBytesPerToken,
    chunkSize,
    expectedReads,
    expertReadBytes: census.expertBytes > 0 ? census.expertBytes + ALIGN_SLACK : 0,
    parts,
    totalBytes,
    availableBytes: mem.availableBytes,
    ...(mem.cgroupLimitBytes !== undefined ? { cgroupLimitBytes: mem.cgroupLimitBytes } : {}),
  };
}

/**
 * The chunk a pass keeping every position's logits (`k3 eval`) runs at: `chunk`, lowered to the
 * largest multiple of MIXER_PIECE whose [T, V] f32 logits fit, beside its work buffers, in what the
 * plan holds for `chunk` (the default chunk's 64 rows sit in the runtime overhead). A chunk that is
 * not a multiple of MIXER_PIECE is kept: a cut anywhere else would change the output's bits.
 */
export function allLogitsChunkSize(chunk: number, census: Census, vocabSize: number): number {
  if (chunk <= DEFAULTS.chunkSize || chunk % MIXER_PIECE !== 0) return chunk;
  const held = (chunk - DEFAULTS.chunkSize) * census.chunkScratchBytesPerToken;
  const extra = Math.floor(held / (census.chunkScratchBytesPerToken + 4 * vocabSize) / MIXER_PIECE) * MIXER_PIECE;
  return Math.min(chunk, DEFAULTS.chunkSize + extra);
}

/** The largest prefill chunk chunkHint suggests (the prompt's length, in whole 64-token pieces, up to this). */
export const HINT_CHUNK_MAX = 1024;

/**
 * A one-line note when a prompt will prefill in several chunks while the plan streams experts
 * (its cache holds fewer than a layer's experts) and no --chunk was given: each chunk reads the
 * experts it needs, so a chunk the prompt's size reads them once; it names the chunk, what it adds
 * to the plan, and that the output stays the same. null when there is nothing to gain.
 */
export function chunkHint(plan: MemoryPlan, census: Census, numExperts: number, promptTokens: number, chunkSize: number): string | null {
  if (promptTokens <= chunkSize || census.moeLayers === 0 || plan.cacheSlotsPerLayer >= numExperts) return null;
  // A multiple of MIXER_PIECE, so the suggestion leaves the output as it is.
  const suggest = Math.min(HINT_CHUNK_MAX, Math.ceil(promptTokens / MIXER_PIECE) * MIXER_PIECE);
  if (suggest <= chunkSize) return null;
  const extra = (suggest - Math.max(chunkSize, DEFAULTS.chunkSize)) * census.chunkScratchBytesPerToken;
  const chunks = (c: number) => Math.ceil(promptTokens / c);
  return `note: the ${promptTokens}-token prompt prefills in ${chunks(chunkSize)} chunks of ${chunkSize}, each reading the experts it needs from disk; --chunk ${suggest} reads them ${chunks(suggest) === 1 ? "once" : `${chunks(suggest)} times`} per layer for ${formatBytes(extra)} more work buffers (k3 plan --chunk ${suggest}), with the same output`;
}

/** Refuses (exit 1) when the plan exceeds 95% of MemAvailable, naming both numbers. */
export function checkPlanFits(plan: MemoryPlan): void {
  const limit = 0.95 * plan.availableBytes;
  if (plan.totalBytes > limit) {
    throw new PlanError(
      `memory plan needs ${formatBytes(plan.totalBytes)} but only ${formatBytes(limit)} is usable (95% of ${plan.cgroupLimitBytes !== undefined ? `the headroom under the memory cgroup limit ${formatBytes(plan.cgroupLimitBytes)},` : "MemAvailable"} ${formatBytes(plan.availableBytes)}); choose a smaller --preset`,
      plan.totalBytes,
      limit,
    );
  }
}

/** Refuses (exit 2) a context that the KV budget cannot hold, naming both numbers. */
export function checkContextFits(plan: MemoryPlan, tokens: number, kvBytesPerToken: number): void {
  if (tokens > plan.kvCapacityTokens) {
    throw new ContextError(
      `context of ${tokens} tokens needs ${formatBytes(tokens * kvBytesPerToken)} of KV cache but the ${plan.preset} plan holds ${plan.kvCapacityTokens} tokens (${formatBytes(plan.budgets.kvBytes)})`,
    );
  }
}

/** The plan as printed before loading. */
export function formatPlan(plan: MemoryPlan, layers: number): string {
  const lines = [`memory plan (${plan.preset}):`];
  for (const p of planPartRows(plan.parts)) lines.push(`  ${p.name.padEnd(22)} ${formatBytes(p.bytes).padStart(10)}`);
  lines.push(`  ${"TOTAL".padEnd(22)} ${formatBytes(plan.totalBytes).padStart(10)}   (available ${formatBytes(plan.availableBytes)})`);
  const pinned = plan.pinnedLayers.length === layers ? `all ${layers} layers pinned (trunk resident)` : `${plan.pinnedLayers.length}/${layers} layers pinned`;
  const ring = plan.ringSlots ? `, ring ${plan.ringSlots} x ${formatBytes(plan.ringSlotBytes)}${plan.ringSlots >= 2 ? " (async prefetch)" : " (no prefetch)"}` : "";
  lines.push(`  trunk: ${pinned}${ring}`);
  if (plan.trunkNote) lines.push(`  note: ${plan.trunkNote}`);
  lines.push(`  expert cache: ${plan.cacheSlotsPerLayer} slots per MoE layer; KV capacity ${plan.kvCapacityTokens === Number.MAX_SAFE_INTEGER ? "unbounded" : plan.kvCapacityTokens + " tokens"}`);
  const r = plan.expectedReads;
  lines.push(`  embed/lm_head: ${plan.embedHeadResident ? "resident" : "streamed in chunks (O_DIRECT)"}`);
  lines.push(`  prefill chunk: ${plan.chunkSize} tokens${plan.chunkSize === DEFAULTS.chunkSize ? "" : ` (its work buffers: ${formatBytes(plan.parts.runtime - RUNTIME_OVERHEAD_BYTES)} of runtime + scratch)`}`);
  lines.push(`  expected read per decoded token (cold cache): ${formatBytes(plan.expectedBytesPerToken)} = trunk ${formatBytes(r.trunk)} + experts ${formatBytes(r.experts)} + embed/head ${formatBytes(r.embedHead)}`);
  return lines.join("\n");
}
