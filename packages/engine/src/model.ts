/**
 * The model: embeddings, 93 (or N) decoder layers of KDA or MLA mixers with a dense MLP (layer 0)
 * or MoE FFN, K3 block attention residuals or plain residuals, final norm, lm_head.
 *
 * fp32 activations. `forward(ids, state)` runs the next ids.length positions layer-major over
 * chunks of `chunkSize` tokens, carrying KDA/conv state and the MLA latent cache in `state`, so
 * prefill, chunked prefill and incremental decode are the same code and give the same bits.
 */
import { add, bf16ToF32, Linear, rmsNorm, type GluMlp } from "@k3/dense";
import { isMoeLayer, moeLayersOf, readConfig, withLayers, type ModelConfig } from "./config.js";
import { AbortError, UsageError } from "./errors.js";
import { findNonFiniteTensor, firstNonFinite, firstNonFiniteRaw, nonFiniteError, showValue } from "./finite.js";
import { attnResMix, fuseResWeights } from "./layers/attnres.js";
import { KdaMixer, KdaState, kdaConfigOf, type KdaCore } from "./layers/kda.js";
import { loadMlaCache, MlaCache, MlaMixer, newMlaCache } from "./layers/mla.js";
import { loadGluMlp } from "./layers/mlp.js";
import { MoeFfn } from "./layers/moe.js";
import type { ExpertTraceRecorder } from "./cache-trace.js";
import type { ReadPattern } from "./floor.js";
import { CancelledError, checkpointIndex, ExpertStore, MoeLayer, RangeReader, TrunkStreamer, type ExpertCachePolicy, type TrunkLayer, type WarmOptions, type WarmTask } from "@k3/moe-stream";
import { expertIoSlotsFor, HEAD_READ_SLOTS, prefetchSlotsFor, type PlanParts } from "./presets.js";
import { emptyCounters, type ReportKind, type Phase, type RunCounters } from "./report.js";
import { classifyName, KIND_SHARED, KIND_TRUNK } from "@k3/safetensors";
import { MIXER_PIECE } from "./census.js";
import { loadMatrix, loadVector, openWeights, preloadWeights, WeightError, type FreshCeilings, type PreloadOptions, type WeightSource } from "./weights.js";

/**
 * Calls run(t0, n) for each MIXER_PIECE-token piece of a T-token chunk, in order; `stop` is asked
 * between pieces, so a cancel lands within one piece of a large chunk, not at the layer's end.
 */
function forEachPiece(T: number, run: (t0: number, n: number) => void, stop?: () => boolean): void {
  for (let t0 = 0; t0 < T; t0 += MIXER_PIECE) {
    if (t0 > 0 && stop?.()) throw new AbortError();
    run(t0, Math.min(MIXER_PIECE, T - t0));
  }
}

export type LayerState = KdaState | MlaCache;

/** Everything that carries over between calls: one entry per layer, plus the position. */
export interface ModelState {
  layers: LayerState[];
  /** Positions consumed so far. */
  pos: number;
  /** The ids consumed so far (for state files and chat bookkeeping). */
  ids: number[];
}

interface Layer {
  inNorm: Float32Array;
  postNorm: Float32Array;
  attnRes?: Float32Array;
  mlpRes?: Float32Array;
  mixer: KdaMixer | MlaMixer;
  ffn: GluMlp | MoeFfn;
}

export interface ForwardOptions {
  /** Return logits for every position (teacher forcing) instead of the last only. */
  allLogits?: boolean;
  /**
   * Return logits for positions logitsFrom .. ids.length-1 of this call (speculative verification:
   * the drafted positions, not the prefix re-run before them). Ignored with allLogits.
   */
  logitsFrom?: number;
  /** Compute no logits at all (a prefix whose next-token scores nobody reads); returns an empty array. */
  noLogits?: boolean;
  /**
   * This call's KDA form, overriding the model's: "recurrent" makes a multi-token call bit-identical
   * to one-token calls (speculative verification must reproduce decode exactly).
   */
  kdaCore?: KdaCore;
  /** Tokens per prefill chunk (layer-major within a chunk); default 64. */
  chunkSize?: number;
  /** Checked between layers. */
  signal?: AbortSignal;
  /**
   * Also checked between layers, called each time (a read of a shared flag): a worker thread whose
   * prefill holds its event loop cannot turn a cancel message or timer into `signal` until it ends.
   */
  cancelled?: () => boolean;
  /** Called with each layer's output rows [T, D] (debugging / per-layer conformance). */
  onLayer?: (layer: number, hidden: Float32Array, T: number) => void;
  /** Called after each layer of each chunk: where this call is (a prefill's progress). */
  onProgress?: (p: ForwardProgress) => void;
  /** Called with the input of the final norm [T, D]. */
  onFinalHidden?: (hidden: Float32Array, T: number) => void;
}

/** Where a forward call is, after a layer of one of its chunks. */
export interface ForwardProgress {
  /** The call's tokens. */
  tokens: number;
  /** The chunk in flight: its first token (0-based in this call) and its length. */
  chunkStart: number;
  chunkTokens: number;
  /** Layers of this chunk done, of `layers`. */
  layersDone: number;
  layers: number;
}

export interface LoadOptions {
  /** lm_head rows per GEMV chunk (the chunked head used by low-memory presets); default all. */
  headChunkRows?: number;
  /**
   * Keep embed_tokens and lm_head on disk: each token reads its embedding row, and lm_head is read
   * in `headChunkRows`-row chunks through one reused buffer (the `ultra` preset).
   */
  streamEmbedHead?: boolean;
  /** KDA prefill form: chunked WY/UT for multi-token chunks (default "auto") or the recurrence everywhere. */
  kdaCore?: KdaCore;
  /** Expert cache slots per MoE layer (the memory plan's); default 0 = stream every expert. */
  cacheSlotsPerLayer?: number;
  /** Which experts a full cache layer keeps (ExpertStoreOptions.cachePolicy; default "lfu"). */
  cachePolicy?: ExpertCachePolicy;
  /** Read experts with O_DIRECT when the filesystem allows (default true). */
  directIo?: boolean;
  /**
   * Split each expert read into in-order pieces of this many bytes (default 4 MiB; 0 = one read per
   * expert). With many readers expert j then lands before j+1 instead of all of a layer's experts
   * finishing together, so compute starts earlier (moe-stream bench: overlap 0.26 -> 0.60).
   */
  pieceBytes?: number;
  /**
   * Lookahead prefetch (default true): while MoE layer L computes, layer L+1's router is applied to
   * L's FFN input and the experts it picks are read at low priority (see Model.predictNext).
   * Changes I/O only, never the output.
   */
  prefetch?: boolean;
  /** Streaming slots reserved for prefetched experts (default ceil(topK / 2)); added to the topK + 2 demand slots. */
  prefetchSlots?: number;
  /**
   * Run only the first N layers (then the final norm and lm_head): a smoke test of a partly
   * downloaded checkpoint, whose absent shards are then allowed. The output is not the model's.
   */
  layers?: number;
  /** Further directories holding shards (a checkpoint spread over several drives). */
  shardDirs?: readonly string[];
  /**
   * A routed expert whose read fails or whose bytes are refused (MXFP4 0xFF scale): "drop" (default,
   * the reference engine's behaviour) leaves it out of that layer's mix, counts it in the report and
   * the CLI exits 4; "fail" stops the run with the read's error.
   */
  onExpertError?: "drop" | "fail";
  /**
   * Stream the trunk from a packed trunk directory (`k3 pack`): `pinnedLayers` stay resident (read
   * from the checkpoint at load), every other layer is read into one of `ringSlots` slots when its
   * turn comes (2 slots: reading L+1 overlaps computing L). Needs Model.open (async).
   */
  trunk?: { dir: string; pinnedLayers: number[]; ringSlots: number; chunkBytes?: number };
  /**
   * How the resident weights are read: in one pass at disk speed (default; see preloadWeights), or
   * `false` for one positioned read per tensor into a fresh buffer (the former path, kept for comparison).
   */
  preload?: PreloadOptions | false;
}

/** What loading the resident weights took (the run report's `load`). */
export interface LoadStats {
  /** Wall seconds from the first read to the model being ready (reads + building the layers). */
  seconds: number;
  /** Wall seconds of the reads alone. */
  readSeconds: number;
  /** Bytes read from the checkpoint (tensors plus the small gaps merged into blocks). */
  bytes: number;
  /** Tensor bytes resident. */
  tensorBytes: number;
  /** GB/s of the same reads by the same engine, page cache dropped (null when not measured). */
  ceilingGbps: number | null;
  pageFaultsMinor: number;
  userSeconds: number;
  systemSeconds: number;
  /** How it was read, e.g. "pool io_uring x8, 8 MiB pieces, O_DIRECT, prefault populate". */
  method: string;
  /** The ceiling's runs [before, after] in GB/s (empty unless measured). */
  ceilingRunsGbps?: number[];
  /** Threads that faulted the pages in ahead of the reads, and their summed seconds (pool path). */
  populateThreads?: number;
  populateSeconds?: number;
  /** Wall seconds with at least one read in flight (pool path). */
  readBusySeconds?: number;
  /** With the ceiling: the same bytes into fresh memory (read, backing alone, and the bound min(disk, backing)); see FreshCeilings. */
  fresh?: FreshCeilings | null;
}

/** Default expert read piece: 4 MiB (the moe-stream bench's overlap rows). */
export const DEFAULT_PIECE_BYTES = 4 << 20;
/** Reads in flight of the expert store, the trunk ring and the streamed embed/head (the floor's ceilings use the same). */
export const EXPERT_READERS = 16;
export const TRUNK_READERS = 8;
export const HEAD_READERS = 8;
/** Expert reads in flight that may be prefetches (the rest stay free for demand reads). */
export const PREFETCH_READERS = EXPERT_READERS / 2;
/** The streamed lm_head's chunk reads are split into pieces of this size. */
export const HEAD_PIECE_BYTES = 4 << 20;

export class Model {
  readonly cfg: ModelConfig;
  readonly dir: string;
  readonly counters: RunCounters = emptyCounters();
  /** Bytes read while loading. */
  readonly loadBytes: number;
  /** The resident load's time, bytes and read setup (set by Model.load). */
  loadStats: LoadStats | null = null;
  private readonly embed: Uint16Array | Float32Array | null;
  /** Open checkpoint for the streamed embed/head (null when resident). */
  /**
   * The streamed embed/head (null when resident): where each tensor is, and the reader that fetches
   * lm_head row chunks (two slots: chunk c+1 is read while chunk c's GEMV runs) and embedding rows
   * with O_DIRECT, so they never sit in the page cache.
   */
  private readonly stream: { reader: RangeReader; embed: { file: string; offset: number }; head: { file: string; offset: number } } | null;
  /** Bytes loaded resident for embed_tokens + lm_head (0 when streamed). */
  readonly embedHeadLoadBytes: number;
  /** The trunk streamer's bytesRead / ioBusyNs already counted (pinned loads at open are load, not run). */
  private trunkSeen = { bytes: 0, busyNs: 0 };
  private readonly finalNorm: Float32Array;
  private readonly outRes?: Float32Array;
  private readonly head: Linear | null;
  /** Resident layers; null = streamed through the trunk ring. */
  private readonly layers: (Layer | null)[] = [];
  private readonly streamer: TrunkStreamer | null;
  private readonly kdaCore: KdaCore;
  private readonly headChunkRows: number;
  private readonly onExpertError: "drop" | "fail";
  /** Streams routed experts from the shards into the per-layer cache. */
  readonly experts: ExpertStore | null;
  /** Lookahead prefetch on (and an expert store to prefetch into). */
  readonly prefetch: boolean;
  /** Expert read piece size in bytes (0 = one read per expert). */
  readonly pieceBytes: number;
  /** When set, every MoE layer forward's expert request is appended to it (`--dump-cache-trace`). */
  expertTrace: ExpertTraceRecorder | null = null;
  /** When set, every routed (layer, expert) is added as layer * 65536 + id (the floor's after-run expert ceiling reads them). */
  routedSeen: Set<number> | null = null;
  /** The prediction made for a later MoE layer, checked when that layer runs (accuracy counters). */
  private predicted: { layer: number; ids: Set<number> } | null = null;
  /** Which phase the per-kind counters charge (the engine sets it around prefill and decode). */
  phase: Phase = "prefill";
  /** The expert store's deviceBytes already counted (takeExpertReads). */
  private expertDeviceSeen = 0;
  /** The same for the store's warmBytes (a background warm's share of them). */
  private expertWarmSeen = 0;
  /** Bytes of one routed expert (its three matrices as stored), 0 without MoE layers. */
  private readonly expertBytes: number;
  /** Where the checkpoint's shards are (reopened only to name a non-finite weight). */
  private readonly shardDirs: readonly string[] | undefined;
  /** Gives the preloaded weights' pages back (set by Model.load; null once done or when not preloaded). */
  private releaseResident: (() => void) | null = null;
  private closed = false;
  /** Forwards running now: close() frees nothing they read until the last one ends. */
  private activeForwards = 0;

  private constructor(dir: string, cfg: ModelConfig, src: WeightSource, options: LoadOptions, store: ExpertStore | null, streamer: TrunkStreamer | null, expertBytes = 0) {
    this.experts = store;
    this.expertBytes = expertBytes;
    this.prefetch = store !== null && (options.prefetch ?? true);
    this.pieceBytes = store?.pieceBytes ?? 0;
    this.onExpertError = options.onExpertError ?? "drop";
    this.streamer = streamer;
    this.kdaCore = options.kdaCore ?? "auto";
    this.dir = dir;
    this.shardDirs = options.shardDirs;
    this.cfg = cfg;
    const P = cfg.tensorPrefix;
    const D = cfg.hiddenSize;
    const V = cfg.vocabSize;
    this.headChunkRows = Math.max(1, Math.min(options.headChunkRows ?? V, V));
    if (options.streamEmbedHead) {
      const [embed, head] = ["model.embed_tokens.weight", "lm_head.weight"].map((n) => {
        const info = src.info(P + n);
        if (info.shape.join() !== `${V},${D}` || info.dtype !== "BF16") throw new WeightError(`tensor ${P + n}: ${info.dtype} ${JSON.stringify(info.shape)}, expected BF16 [${V},${D}]`);
        return { file: info.file, offset: info.offset };
      });
      const reader = RangeReader.open({ files: [...new Set([embed.file, head.file])], maxRangeBytes: this.headChunkRows * D * 2, slots: HEAD_READ_SLOTS, direct: options.directIo ?? true, readers: HEAD_READERS, pieceBytes: HEAD_PIECE_BYTES });
      this.stream = { reader, embed, head };
      this.embed = null;
      this.head = null;
    } else {
      this.stream = null;
      const emb = loadMatrix(src, P + "model.embed_tokens.weight", V, D);
      this.embed = emb.raw;
      this.head = loadMatrix(src, P + "lm_head.weight", V, D);
    }
    // Their tensors' own sizes (a preloaded source counts every resident byte at once).
    this.embedHeadLoadBytes = options.streamEmbedHead ? 0 : src.info(P + "model.embed_tokens.weight").nbytes + src.info(P + "lm_head.weight").nbytes;
    this.finalNorm = loadVector(src, P + "model.norm.weight", D);
    if (cfg.attnResBlockSize !== null) {
      this.outRes = fuseResWeights(loadVector(src, P + "model.output_attn_res_norm.weight", D), loadVector(src, P + "model.output_attn_res_proj.weight", D));
    }
    const pinned = new Set(options.trunk?.pinnedLayers ?? []);
    for (let l = 0; l < cfg.numLayers; l++) {
      this.layers.push(streamer && !pinned.has(l) ? null : this.buildLayer(l, src));
    }
    this.loadBytes = src.bytesRead;
    if (streamer) {
      const st = streamer.stats();
      this.trunkSeen = { bytes: st.bytesRead, busyNs: st.ioBusyNs };
    }
  }

  /**
   * How the run reads each disk source, from the live readers (the floor's ceilings must match):
   * files, piece size, request size, reads in flight, O_DIRECT (every file).
   */
  ioPatterns(): ReadPattern[] {
    const out: ReadPattern[] = [];
    if (this.experts) {
      const info = this.experts.fileInfo();
      out.push({ source: "experts", files: info.map((f) => f.file), pieceBytes: this.experts.pieceBytes, requestBytes: this.expertBytes, queueDepth: this.experts.readers, direct: info.every((f) => f.direct) });
    }
    if (this.streamer && this.streamer.streamedLayers().length > 0) {
      const f = this.streamer.fileInfo();
      out.push({ source: "trunk", files: [f.file], pieceBytes: this.streamer.chunkBytes, requestBytes: this.streamer.chunkBytes, queueDepth: this.streamer.readers, direct: f.direct });
    }
    if (this.stream) {
      const r = this.stream.reader;
      const direct = (file: string) => r.fileInfo().find((f) => f.file === file)!.direct;
      const D = this.cfg.hiddenSize;
      out.push({ source: "lm_head", files: [this.stream.head.file], pieceBytes: r.pieceBytes, requestBytes: this.headChunkRows * D * 2, queueDepth: r.readers, direct: direct(this.stream.head.file) });
      // Rows are read one at a time (each awaited before the next).
      out.push({ source: "embed", files: [this.stream.embed.file], pieceBytes: 0, requestBytes: D * 2, queueDepth: 1, direct: direct(this.stream.embed.file) });
    }
    return out;
  }

  /** The streamed embed/head's reads: how many, and whether its files are read with O_DIRECT (null when resident). */
  embedHeadIo(): { reads: number; directReads: number; bufferedReads: number; direct: boolean; engine: string } | null {
    if (!this.stream) return null;
    const st = this.stream.reader.stats();
    return { reads: st.reads, directReads: st.directReads, bufferedReads: st.bufferedReads, direct: this.stream.reader.fileInfo().every((f) => f.direct), engine: st.engine };
  }

  /**
   * What the model allocated, by memory-plan part (bytes): the resident trunk and embed/head
   * (bytes loaded), the trunk ring arena, the expert store's cache and streaming slots, and the
   * streamed embed/head's read slots. Parts the model cannot measure are absent.
   */
  allocations(): Partial<PlanParts> {
    const out: Partial<PlanParts> = {
      // Tensor bytes (the preload's blocks also hold the small gaps it merged across: peak RSS counts those).
      pinnedTrunk: (this.loadStats?.tensorBytes ?? this.loadBytes) - this.embedHeadLoadBytes,
      embedHead: this.embedHeadLoadBytes,
      trunkRing: this.streamer ? this.streamer.stats().arenaBytes : 0,
      embedHeadReadSlots: this.stream ? this.stream.reader.arenaBytes : 0,
    };
    if (this.experts) {
      const layers = this.cfg.layerKinds.filter((_, l) => isMoeLayer(this.cfg, l)).length;
      out.expertCache = this.experts.slotsPerLayer * layers * this.experts.slotBytes;
      out.expertReadSlots = this.experts.ioSlots * this.experts.slotBytes;
    }
    return out;
  }

  /** Builds layer l from a weight source (the checkpoint, or a trunk ring slot: views, no copies). */
  private buildLayer(l: number, src: WeightSource): Layer {
    const cfg = this.cfg;
    const D = cfg.hiddenSize;
    const p = `${cfg.tensorPrefix}model.layers.${l}.`;
    const kind = cfg.layerKinds[l];
    const hasKda = src.has(p + "self_attn.q_conv1d.weight");
    if (hasKda !== (kind === "kda")) {
      throw new WeightError(`layer ${l}: the config makes it ${kind.toUpperCase()} (full_attn_layers is ONE-based) but the checkpoint holds ${hasKda ? "KDA" : "MLA"} tensors`);
    }
    const layer: Layer = {
      inNorm: loadVector(src, p + "input_layernorm.weight", D),
      postNorm: loadVector(src, p + "post_attention_layernorm.weight", D),
      mixer: kind === "kda" ? new KdaMixer(cfg, src, p + "self_attn.", this.kdaCore) : new MlaMixer(cfg, src, p + "self_attn."),
      ffn: isMoeLayer(cfg, l) ? new MoeFfn(cfg, src, p + "block_sparse_moe.", l, this.experts!, this.onExpertError) : loadGluMlp(cfg, src, p + "mlp.", D, cfg.denseIntermediate),
    };
    if (cfg.attnResBlockSize !== null) {
      layer.attnRes = fuseResWeights(loadVector(src, p + "self_attention_res_norm.weight", D), loadVector(src, p + "self_attention_res_proj.weight", D));
      layer.mlpRes = fuseResWeights(loadVector(src, p + "mlp_res_norm.weight", D), loadVector(src, p + "mlp_res_proj.weight", D));
    }
    return layer;
  }

  /** What made the final norm's output non-finite: its weight, the output attention-residual weights, or an overflow. */
  private finalCause(): string | null {
    const P = this.cfg.tensorPrefix;
    const i = firstNonFinite(this.finalNorm);
    if (i >= 0) return `${P}model.norm.weight[${i}] = ${showValue(this.finalNorm[i])}`;
    if (this.outRes && firstNonFinite(this.outRes) >= 0) return `${P}model.output_attn_res_norm.weight or ${P}model.output_attn_res_proj.weight holds it`;
    return null;
  }

  /** Layer l ready to run, and how to give its ring slot back. */
  private async acquire(l: number): Promise<{ layer: Layer; release: () => void }> {
    const resident = this.layers[l];
    if (resident) return { layer: resident, release: () => {} };
    const t0 = performance.now();
    const tl = await this.streamer!.acquire(l);
    // Everything the streamer read since the last acquire: read-ahead loads finish while the
    // previous layer computes, outside any acquire, and must count too.
    const after = this.streamer!.stats();
    const read = after.bytesRead - this.trunkSeen.bytes;
    this.counters.bytesRead.trunk += read;
    this.counters.ioSeconds += (after.ioBusyNs - this.trunkSeen.busyNs) / 1e9;
    this.trunkSeen = { bytes: after.bytesRead, busyNs: after.ioBusyNs };
    let layer: Layer;
    try {
      layer = this.buildLayer(l, new TrunkLayerSource(tl));
    } catch (err) {
      tl.release();
      throw err;
    }
    // The wait for the ring slot and its bytes go to the layer's kinds in proportion to their bytes.
    const seconds = (performance.now() - t0) / 1000;
    const [mk, mb] = this.mixerKind(layer);
    const [fk, fb] = this.ffnKind(layer);
    const share = mb + fb > 0 ? mb / (mb + fb) : 0.5;
    this.tally(mk, seconds * share, 0, read * share);
    this.tally(fk, seconds * (1 - share), 0, read * (1 - share));
    return { layer, release: () => tl.release() };
  }

  /**
   * Expert device bytes the store completed since the last call (demand and lookahead reads alike),
   * added to counters.bytesRead.experts; returns them.
   */
  private takeExpertReads(): number {
    if (!this.experts) return 0;
    const st = this.experts.stats();
    const d = st.deviceBytes - this.expertDeviceSeen;
    this.expertDeviceSeen = st.deviceBytes;
    this.counters.bytesRead.experts += d;
    this.counters.warmBytesRead += st.warmBytes - this.expertWarmSeen;
    this.expertWarmSeen = st.warmBytes;
    return d;
  }

  /** Every routed expert of every MoE layer into the expert cache, ahead of use (ExpertStore.warm); null without an expert store. */
  warmExperts(opts: WarmOptions, pick?: (layer: number) => number[]): WarmTask | null {
    if (!this.experts) return null;
    const n = this.cfg.moe.numExperts;
    const ids = (layer: number) => pick?.(layer) ?? Array.from({ length: n }, (_, id) => id);
    const list = moeLayersOf(this.cfg).flatMap((layer) => ids(layer).map((id) => ({ layer, id })));
    return this.experts.warm(list, opts);
  }

  /** The expert reads so far are charged to no layer (a warm the load waited for is not part of any run). */
  forgetExpertReads(): void {
    if (!this.experts) return;
    const st = this.experts.stats();
    this.expertDeviceSeen = st.deviceBytes;
    this.expertWarmSeen = st.warmBytes;
  }

  /** Adds to the per-kind counters of the current phase. */
  private tally(kind: ReportKind, seconds: number, touched: number, read = 0): void {
    const k = this.counters.perKind[kind][this.phase];
    k.seconds += seconds;
    k.bytesTouched += touched;
    k.bytesRead += read;
  }

  /** The mixer's kind and its weight bytes. */
  private mixerKind(L: Layer): [ReportKind, number] {
    return L.mixer instanceof KdaMixer ? ["kda", L.mixer.bytes] : ["mla", L.mixer.bytes];
  }

  /** The FFN's kind and its trunk (non-expert) weight bytes. */
  private ffnKind(L: Layer): [ReportKind, number] {
    return L.ffn instanceof MoeFfn ? ["moe_trunk", L.ffn.trunkBytes] : ["dense_mlp", L.ffn.bytes];
  }

  /** Opens a model, streaming the trunk when `options.trunk` says so. */
  static async open(dir: string, options: LoadOptions = {}): Promise<Model> {
    if (!options.trunk) return Model.load(dir, options);
    const t = options.trunk;
    const all = new Set(t.pinnedLayers);
    const streamed = [...Array(withLayers(readConfig(dir), options.layers).numLayers).keys()].filter((l) => !all.has(l));
    // Every ring read is checked against the manifest's crc32 on the reader threads. K3_TRUNK_VERIFY=pinned
    // turns that off (for measuring its cost: the trunk's bytes are then trusted as they are).
    const verify = process.env.K3_TRUNK_VERIFY === "pinned" ? "pinned" : "all";
    const streamer = await TrunkStreamer.open({ dir: t.dir, pinnedLayers: [], ringSlots: Math.max(1, t.ringSlots), schedule: streamed, chunkBytes: t.chunkBytes, direct: options.directIo ?? true, readers: TRUNK_READERS, verify });
    try {
      return Model.load(dir, options, streamer);
    } catch (err) {
      streamer.close();
      throw err;
    }
  }

  /** Loads config and weights from a checkpoint directory (the whole trunk resident unless a streamer is given). */
  static load(dir: string, options: LoadOptions = {}, streamer: TrunkStreamer | null = null): Model {
    const cfg = withLayers(readConfig(dir), options.layers);
    const partial = options.layers !== undefined;
    const src = openWeights(dir, { allowMissingShards: partial, shardDirs: options.shardDirs });
    let store: ExpertStore | null = null;
    let expertBytes = 0;
    try {
      // A partial checkpoint: fail on the first needed layer whose shard is absent, naming the shard.
      if (partial) for (let l = 0; l < cfg.numLayers; l++) src.info(`${cfg.tensorPrefix}model.layers.${l}.input_layernorm.weight`);
      const moeLayers = moeLayersOf(cfg);
      if (moeLayers.length > 0) {
        // The weight source's checkpoint: its headers are already parsed, its shards already found.
        const index = checkpointIndex(src.ckpt, dir);
        const experts = moeLayers.flatMap((l) => {
          const list = index.experts(l);
          if (list.length !== cfg.moe.numExperts) throw new WeightError(`layer ${l}: the checkpoint has ${list.length} routed experts, the config says ${cfg.moe.numExperts}`);
          return list;
        });
        expertBytes = experts[0]?.byteLength ?? 0;
        const pieceBytes = options.pieceBytes ?? DEFAULT_PIECE_BYTES;
        if (!Number.isSafeInteger(pieceBytes) || pieceBytes < 0 || pieceBytes % 4096 !== 0)
          throw new UsageError(`expert read pieces of ${pieceBytes} bytes: expected 0 (off) or a multiple of 4096`);
        const prefetchSlots = options.prefetch === false ? 0 : (options.prefetchSlots ?? prefetchSlotsFor(cfg.moe.topK));
        if (!Number.isInteger(prefetchSlots) || prefetchSlots < 0) throw new UsageError(`prefetch slots ${prefetchSlots}: expected an integer >= 0`);
        store = ExpertStore.open({
          experts,
          slotsPerLayer: Math.min(cfg.moe.numExperts, options.cacheSlotsPerLayer ?? 0),
          cachePolicy: options.cachePolicy,
          ioSlots: expertIoSlotsFor(cfg.moe.topK, prefetchSlots),
          prefetchSlots,
          direct: options.directIo ?? true,
          pieceBytes,
          readers: EXPERT_READERS,
          // Half the readers may serve prefetches (the store's default is a quarter): at 4 in flight
          // 8 predicted experts took longer to read than the compute they were meant to hide behind.
          // Demand reads still go first and keep the other half.
          maxPrefetchInflight: PREFETCH_READERS,
        });
      }
      const t0 = performance.now();
      const ru0 = process.resourceUsage();
      let source: WeightSource = src;
      let release: (() => void) | null = null;
      let method = "per-tensor positioned reads (node fs)";
      let readSeconds = 0;
      let tensorBytes = 0;
      let ceilingGbps: number | null = null;
      let ceilingSeconds = 0;
      let phases: Pick<LoadStats, "ceilingRunsGbps" | "populateThreads" | "populateSeconds" | "readBusySeconds" | "fresh"> = {};
      if (options.preload !== false) {
        const pinned = new Set(options.trunk?.pinnedLayers ?? []);
        const names = residentNames(src, cfg, (l) => !streamer || pinned.has(l), !options.streamEmbedHead);
        const pre = preloadWeights(src, names, options.preload ?? {});
        source = pre.source;
        release = pre.release;
        const s = pre.stats;
        readSeconds = s.seconds;
        tensorBytes = s.bytes;
        ceilingGbps = pre.ceilingGbps;
        ceilingSeconds = pre.ceilingSeconds;
        phases = { ceilingRunsGbps: pre.ceilingRunsGbps, fresh: pre.fresh, populateThreads: s.populateThreads, populateSeconds: s.populateSeconds, readBusySeconds: s.readBusySeconds };
        method = `read pool ${s.engine} x${s.readers}, ${s.pieceBytes / 2 ** 20} MiB pieces, ${s.directReads > 0 && s.bufferedReads === 0 ? "O_DIRECT" : s.directReads > 0 ? "O_DIRECT + buffered" : "buffered"}, prefault ${s.prefault}${s.populateThreads > 0 ? ` x${s.populateThreads} (${s.populateSeconds.toFixed(2)} s faulting)` : ""}, reads in flight ${s.readBusySeconds.toFixed(2)} s, ${s.blocks} blocks`;
      }
      const model = new Model(dir, cfg, source, options, store, streamer, expertBytes);
      model.releaseResident = release;
      source.close();
      const ru1 = process.resourceUsage();
      // The ceiling runs are not part of the load; their CPU and faults are (small: reused buffers).
      const seconds = (performance.now() - t0) / 1000 - ceilingSeconds;
      model.loadStats = {
        seconds,
        readSeconds: options.preload === false ? seconds : readSeconds,
        bytes: model.loadBytes,
        tensorBytes: options.preload === false ? model.loadBytes : tensorBytes,
        ceilingGbps,
        pageFaultsMinor: ru1.minorPageFault - ru0.minorPageFault,
        userSeconds: (ru1.userCPUTime - ru0.userCPUTime) / 1e6,
        systemSeconds: (ru1.systemCPUTime - ru0.systemCPUTime) / 1e6,
        method,
        ...phases,
      };
      return model;
    } catch (err) {
      store?.close();
      src.close();
      throw err;
    }
  }

  /**
   * Releases the stores (arenas, reader threads, file handles) and gives the resident weights'
   * memory back to the kernel at once, not when their views are collected (a second load in the
   * same process then plans with that memory: a 48B-shaped `auto` load after close() planned 6
   * expert slots per layer instead of 256 while 13 GB still waited for the GC). A forward in
   * flight finishes first (its weights must not turn to zeros under it); later forwards throw.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.activeForwards === 0) this.release();
  }

  private release(): void {
    this.experts?.close();
    this.streamer?.close();
    this.stream?.reader.close();
    this.releaseResident?.();
    this.releaseResident = null;
  }

  newState(): ModelState {
    return { layers: this.cfg.layerKinds.map((k) => (k === "kda" ? new KdaState(kdaConfigOf(this.cfg)) : newMlaCache(this.cfg))), pos: 0, ids: [] };
  }

  /** Copies a state (so a conversation can branch or be compared). */
  cloneState(s: ModelState): ModelState {
    return {
      pos: s.pos,
      ids: [...s.ids],
      layers: s.layers.map((l) => (l instanceof KdaState ? l.clone() : MlaCache.load(l.save(), l.config, l.capacity))),
    };
  }

  /** Serialises one layer's state (@k3/kda's and @k3/mla's checked formats). */
  saveLayerState(s: LayerState): Uint8Array {
    return s.save();
  }

  /** Restores layer l's state from saveLayerState bytes; throws a message naming what is wrong. */
  loadLayerState(l: number, bytes: Uint8Array): LayerState {
    if (this.cfg.layerKinds[l] === "kda") return KdaState.load(bytes, kdaConfigOf(this.cfg));
    return loadMlaCache(this.cfg, bytes);
  }

  private async embedRows(ids: number[], out: Float32Array): Promise<void> {
    const D = this.cfg.hiddenSize;
    const V = this.cfg.vocabSize;
    for (const id of ids) if (!Number.isInteger(id) || id < 0 || id >= V) throw new UsageError(`token id ${id} is outside the vocabulary (0..${V - 1})`);
    const s = this.stream;
    const before = s?.reader.stats();
    for (let t = 0; t < ids.length; t++) {
      const id = ids[t];
      const row = out.subarray(t * D, (t + 1) * D);
      if (s) {
        // One O_DIRECT read per row into a head slot (the head is not being read while rows are).
        const bytes = await s.reader.read(s.embed.file, s.embed.offset + id * D * 2, D * 2, t & 1);
        bf16ToF32(bytes.subarray(0, D * 2), row);
      } else if (this.embed instanceof Float32Array) row.set(this.embed.subarray(id * D, (id + 1) * D));
      else bf16ToF32(this.embed!.subarray(id * D, (id + 1) * D), row);
    }
    if (s && before) {
      const after = s.reader.stats();
      this.counters.bytesRead.embedHead += after.deviceBytes - before.deviceBytes;
      this.counters.ioSeconds += (after.busyNs - before.busyNs) / 1e9;
    }
  }

  /**
   * logits[n][V] = lm_head · h[n][D] for n final-normed rows, every weight byte read once for all n
   * (a batched GEMM, bit-identical per row to the GEMV), in row chunks when streamed (bit-identical
   * for any chunk size: rows are independent).
   */
  private async headLogits(h: Float32Array, n: number, out: Float32Array): Promise<void> {
    const D = this.cfg.hiddenSize;
    const V = this.cfg.vocabSize;
    const s = this.stream;
    if (!s) {
      this.head!.apply(h, n, out);
      return;
    }
    // Streamed: row chunks read with O_DIRECT into the reader's HEAD_READ_SLOTS slots, the next
    // chunks in flight while chunk c's GEMV/GEMM runs (chunk c + slots - 1 goes into the slot of
    // chunk c - 1, done by then). Same rows, same kernels, same bits as the resident head.
    const R = this.headChunkRows;
    const chunks = Math.ceil(V / R);
    const before = s.reader.stats();
    const read = (c: number) => {
      const p = s.reader.read(s.head.file, s.head.offset + c * R * D * 2, Math.min(R, V - c * R) * D * 2, c % HEAD_READ_SLOTS);
      p.catch(() => {}); // awaited in turn; one failing while an earlier chunk throws must not go unhandled
      return p;
    };
    const pending: Promise<Uint8Array>[] = [];
    for (let c = 0; c < Math.min(HEAD_READ_SLOTS - 1, chunks); c++) pending.push(read(c));
    let waitMs = 0;
    const tmp = n > 1 ? new Float32Array(n * R) : null;
    for (let c = 0; c < chunks; c++) {
      const r0 = c * R;
      const rows = Math.min(R, V - r0);
      const ahead = c + HEAD_READ_SLOTS - 1;
      if (ahead < chunks) pending.push(read(ahead));
      const w0 = performance.now();
      const bytes = await pending[c];
      waitMs += performance.now() - w0;
      // The view starts at the tensor's offset within the aligned slot (copied in the rare odd case).
      const w = new Linear("lm_head.weight", { dtype: "BF16", data: bytes.subarray(0, rows * D * 2) }, rows, D, (m) => new WeightError(m));
      if (n === 1) {
        w.apply(h, 1, out.subarray(r0, r0 + rows));
        continue;
      }
      const y = tmp!.subarray(0, n * rows);
      w.apply(h, n, y);
      for (let t = 0; t < n; t++) out.set(y.subarray(t * rows, (t + 1) * rows), t * V + r0);
    }
    const after = s.reader.stats();
    const busy = (after.busyNs - before.busyNs) / 1e9;
    this.counters.bytesRead.embedHead += after.deviceBytes - before.deviceBytes;
    this.counters.ioSeconds += busy;
    this.counters.ioOverlappedSeconds += Math.max(0, busy - waitMs / 1000);
  }

  /** One chunk of T tokens through every layer; returns the final-norm input rows [T, D]. */
  private async runChunk(ids: number[], state: ModelState, opts: ForwardOptions): Promise<Float32Array> {
    const cfg = this.cfg;
    const D = cfg.hiddenSize;
    const T = ids.length;
    let h: Float32Array = new Float32Array(T * D);
    const te = performance.now();
    const readBefore = this.counters.bytesRead.embedHead;
    await this.embedRows(ids, h);
    const badRow = firstNonFinite(h);
    if (badRow >= 0) throw nonFiniteError("the embedding rows", h, badRow, D, state.pos, `model.embed_tokens.weight row ${ids[Math.floor(badRow / D)]} (token id) holds it`);
    this.tally("embed", (performance.now() - te) / 1000, T * D * (this.embed instanceof Float32Array ? 4 : 2), this.counters.bytesRead.embedHead - readBefore);
    const blocks: Float32Array[] = [];
    const normed = new Float32Array(T * D);
    const mixed = new Float32Array(T * D);
    const a = new Float32Array(T * D);
    const f = new Float32Array(T * D);
    const B = cfg.attnResBlockSize;
    try {
      h = await this.runLayers(h, T, state, opts, blocks, normed, mixed, a, f);
    } finally {
      // Nothing is predicted past the last MoE layer: drop queued prefetches and unused prefetched experts.
      this.predicted = null;
      if (this.prefetch) this.experts!.cancelPrefetch();
    }
    if (B !== null) {
      const tr = performance.now();
      const out = new Float32Array(T * D);
      attnResMix(blocks, h, this.outRes!, cfg.rmsNormEps, T, D, out);
      h = out;
      this.tally("attn_res", (performance.now() - tr) / 1000, D * 4);
    }
    opts.onFinalHidden?.(h, T);
    return h;
  }

  /** The decoder layers over one chunk (runChunk's body). */
  private async runLayers(
    h: Float32Array, T: number, state: ModelState, opts: ForwardOptions, blocks: Float32Array[],
    normed: Float32Array, mixed: Float32Array, a: Float32Array, f: Float32Array,
  ): Promise<Float32Array> {
    const cfg = this.cfg;
    const D = cfg.hiddenSize;
    const B = cfg.attnResBlockSize;
    // Asked between layers, between a chunk's 64-token pieces and between groups of experts.
    const stop = () => !!(opts.signal?.aborted || opts.cancelled?.());
    for (let l = 0; l < cfg.numLayers; l++) {
      if (stop()) throw new AbortError();
      const { layer: L, release } = await this.acquire(l);
      try {
        const [mk] = this.mixerKind(L);
        const [fk] = this.ffnKind(L);
        const resBytes = 2 * D * 4;
        let t = performance.now();
        // Seconds since the last lap, charged to `kind` (null: charged elsewhere already).
        const lap = (kind: ReportKind | null, touched: number): void => {
          const n = performance.now();
          if (kind) this.tally(kind, (n - t) / 1000, touched);
          t = n;
        };
        if (B !== null) {
          // Attention residuals: snapshot stack `blocks`, running prefix p = h.
          let p: Float32Array | null = h;
          let aIn = h;
          if (blocks.length > 0) {
            attnResMix(blocks, p, L.attnRes!, cfg.rmsNormEps, T, D, mixed);
            aIn = mixed;
          }
          if (l % B === 0) {
            blocks.push(p);
            p = null;
          }
          lap("attn_res", resBytes / 2);
          rmsNorm(aIn, L.inNorm, cfg.rmsNormEps, normed, D);
          this.prefetchBeforeMixer(L, l, normed, T, lap);
          this.mix(L, l, normed, T, state, a, opts.kdaCore, stop);
          lap(mk, this.mixTouched(L, l, state));
          const n = T * D;
          const next: Float32Array = p === null ? a.slice(0, n) : add(p.subarray(0, n), a.subarray(0, n), new Float32Array(n));
          attnResMix(blocks, next, L.mlpRes!, cfg.rmsNormEps, T, D, mixed);
          lap("attn_res", resBytes / 2);
          rmsNorm(mixed, L.postNorm, cfg.rmsNormEps, normed, D);
          await this.ffn(L, l, normed, T, f, lap, stop);
          add(next, f.subarray(0, n), next);
          h = next;
          lap("attn_res", 0);
        } else {
          rmsNorm(h, L.inNorm, cfg.rmsNormEps, normed, D);
          this.prefetchBeforeMixer(L, l, normed, T, lap);
          this.mix(L, l, normed, T, state, a, opts.kdaCore, stop);
          lap(mk, this.mixTouched(L, l, state));
          const n = T * D;
          const next = add(h.subarray(0, n), a.subarray(0, n), new Float32Array(n));
          lap("attn_res", 0);
          rmsNorm(next, L.postNorm, cfg.rmsNormEps, normed, D);
          await this.ffn(L, l, normed, T, f, lap, stop);
          add(next, f.subarray(0, n), next);
          h = next;
          lap("attn_res", 0);
        }
        // One pass over the layer's output: a NaN or an infinity stops the run here, named.
        const bad = firstNonFinite(h, T * D);
        if (bad >= 0) throw nonFiniteError(`the hidden state after layer ${l}`, h, bad, D, state.pos, this.nonFiniteCause(l, L, a, f, T * D));
      } finally {
        release();
      }
      opts.onLayer?.(l, h, T);
    }
    return h;
  }

  /**
   * Which part of layer l made its output non-finite (the mixer's output `a` or the FFN's `f`,
   * still in their buffers) and the first weight of that part holding a NaN or an infinity: the
   * norm in memory, else the part's tensors read again from the checkpoint (never its routed
   * experts: gigabytes, and MXFP4 nibbles are always finite). Runs only once a value was found.
   */
  private nonFiniteCause(l: number, L: Layer, a: Float32Array, f: Float32Array, n: number): string {
    const mixer = firstNonFinite(a, n) >= 0;
    if (!mixer && firstNonFinite(f, n) < 0) return "both the mixer's and the FFN's outputs are finite (the residual sum overflowed)";
    const p = `${this.cfg.tensorPrefix}model.layers.${l}.`;
    const part = mixer ? `the ${L.mixer instanceof KdaMixer ? "KDA" : "MLA"} mixer's output` : `the ${L.ffn instanceof MoeFfn ? "MoE" : "MLP"} output`;
    const norm = mixer ? "input_layernorm.weight" : "post_attention_layernorm.weight";
    const v = mixer ? L.inNorm : L.postNorm;
    const i = firstNonFinite(v);
    if (i >= 0) return `${part} is non-finite; ${p}${norm}[${i}] = ${showValue(v[i])}`;
    let found: string | null = null;
    try {
      const src = openWeights(this.dir, { allowMissingShards: true, shardDirs: this.shardDirs });
      try {
        const prefixes = mixer ? [p + "self_attn."] : [p + "mlp.", p + "block_sparse_moe."];
        const names = src.names().filter((x) => prefixes.some((q) => x.startsWith(q)) && !/\.experts\.\d+\./.test(x)).sort();
        found = findNonFiniteTensor(src, names);
      } finally {
        src.close();
      }
    } catch {
      // Naming the tensor is a courtesy: the layer is known either way.
    }
    return `${part} is non-finite; ${found ?? "no non-finite weight in its dense tensors (a routed expert's, or an overflow)"}`;
  }

  /** Bytes a mixer call reads from memory: its weights and its recurrent state (KDA S, or the MLA latent cache so far). */
  private mixTouched(L: Layer, l: number, state: ModelState): number {
    const m = L.mixer;
    if (m instanceof KdaMixer) return m.bytes + m.stateBytes;
    const cache = state.layers[l] as MlaCache;
    return m.bytes + cache.length * cache.width * 4;
  }

  /** Layer l's mixer over the chunk, in pieces of MIXER_PIECE tokens (same bits as one call). */
  private mix(L: Layer, l: number, x: Float32Array, T: number, state: ModelState, out: Float32Array, core?: KdaCore, stop?: () => boolean): void {
    const mixer = L.mixer;
    const D = this.cfg.hiddenSize;
    forEachPiece(T, (t0, n) => {
      const xs = x.subarray(t0 * D, (t0 + n) * D);
      const os = out.subarray(t0 * D, (t0 + n) * D);
      if (mixer instanceof KdaMixer) mixer.forward(xs, n, state.layers[l] as KdaState, os, core);
      else state.layers[l] = mixer.forward(xs, n, state.layers[l] as MlaCache, os);
    }, stop);
  }

  /**
   * The FFN of layer l. `lap(kind, touched)` charges the time since the previous lap: the dense
   * MLP all to dense_mlp; the MoE's trunk compute (router, latent projections, shared experts, the
   * lookahead router) to moe_trunk and the rest (expert matmuls, waiting for their reads) to moe_experts.
   */
  private async ffn(L: Layer, l: number, x: Float32Array, T: number, out: Float32Array, lap?: (kind: ReportKind | null, touched: number) => void, stop?: () => boolean): Promise<void> {
    if (!(L.ffn instanceof MoeFfn)) {
      // (A dense layer's prediction for the next MoE layer was issued before its mixer.)
      const D = this.cfg.hiddenSize;
      const mlp = L.ffn;
      forEachPiece(T, (t0, n) => mlp.forward(x.subarray(t0 * D, (t0 + n) * D), n, out.subarray(t0 * D, (t0 + n) * D)), stop);
      lap?.("dense_mlp", L.ffn.bytes);
      return;
    }
    lap?.("moe_trunk", 0); // the norm before it
    const t0 = performance.now();
    const prefetch = this.prefetch ? this.predictNext(l, x, T) : undefined;
    const predictSeconds = (performance.now() - t0) / 1000;
    try {
      await L.ffn.forward(x, T, out, this.counters, prefetch, stop);
    } catch (err) {
      // One abort out of the model, wherever the cancel was seen.
      if (err instanceof CancelledError) throw new AbortError();
      throw err;
    }
    // Reads completed since the last MoE layer's: this layer's, and lookahead reads issued earlier.
    const read = this.takeExpertReads();
    const st = L.ffn.layer.lastStats;
    if (lap && st) {
      const wall = (performance.now() - t0) / 1000;
      const trunk = Math.min(wall, predictSeconds + (st.cpuNs - st.expertCpuNs) / 1e9);
      const computed = st.uniqueExperts - st.dropped.length;
      // The lookahead router reads the next MoE layer's gate weight as well.
      const next = prefetch ? this.layers[prefetch.layer]?.ffn : undefined;
      const predictBytes = next instanceof MoeFfn ? next.layer.opts.router.weight.bytes : 0;
      this.tally("moe_trunk", trunk, L.ffn.trunkBytes + predictBytes);
      this.tally("moe_experts", wall - trunk, computed * this.expertBytes, read);
      lap(null, 0);
    }
    const routing = st?.routing;
    if (this.expertTrace && routing) this.expertTrace.record(l, routing.ids);
    if (this.routedSeen && routing) for (const id of routing.ids) this.routedSeen.add(l * 65536 + id);
    const c = this.counters;
    if (st) c.prefetchIssued += st.prefetchIssued;
    // Score the prediction made for this layer against the experts its router actually chose.
    const guess = this.predicted;
    this.predicted = prefetch ? { layer: prefetch.layer, ids: new Set(prefetch.ids) } : null;
    if (guess && guess.layer === l && routing) {
      const used = new Set(routing.ids);
      c.prefetchPredicted += guess.ids.size;
      for (const id of guess.ids) if (used.has(id)) c.prefetchUsed++;
    }
  }

  /**
   * A dense layer before an MoE layer (K3's layer 0) starts that MoE layer's predicted reads before
   * its own mixer, from the mixer's (normed) input: they then run behind this mixer, this MLP and the
   * next mixer (~90 ms at K3's widths) instead of starting after the mixer (from the FFN input, the
   * former point, which left ~30 ms less to hide the reads behind: issue 13, realwidth laptop).
   */
  private prefetchBeforeMixer(L: Layer, l: number, x: Float32Array, T: number, lap: (kind: ReportKind | null, touched: number) => void): void {
    if (!this.prefetch || L.ffn instanceof MoeFfn) return;
    const prefetch = this.predictNext(l, x, T);
    if (!prefetch) return;
    this.counters.prefetchIssued += this.experts!.prefetch(prefetch.layer, prefetch.ids);
    this.predicted = { layer: prefetch.layer, ids: new Set(prefetch.ids) };
    const next = this.layers[prefetch.layer]?.ffn;
    lap("moe_trunk", next instanceof MoeFfn ? next.layer.opts.router.weight.bytes : 0); // the lookahead router
  }

  /**
   * The lookahead predictor: the next MoE layer's router applied to THIS layer's FFN input
   * (post-attention-normed hidden state). It is the cheapest predictor there is (one router GEMV,
   * no extra weights): in a residual stream the next layer's input differs from this one by one
   * mixer + FFN update, so its router mostly picks the same experts. Only resident next layers are
   * predicted (a layer streamed through the trunk ring has no router in memory yet).
   */
  private predictNext(l: number, x: Float32Array, T: number): { layer: number; ids: number[] } | undefined {
    for (let n = l + 1; n < this.cfg.numLayers; n++) {
      if (!isMoeLayer(this.cfg, n)) continue;
      const next = this.layers[n];
      if (!next || !(next.ffn instanceof MoeFfn)) return undefined;
      return MoeLayer.predict(next.ffn.layer, x, T);
    }
    return undefined;
  }

  /**
   * Runs `ids` as the next positions of `state` (mutated). Returns the logits of the last
   * position [V], of every position [T·V] with `allLogits`, or of positions logitsFrom.. with `logitsFrom`.
   */
  async forward(ids: number[], state: ModelState, opts: ForwardOptions = {}): Promise<Float32Array> {
    if (this.closed) throw new UsageError("the model is closed (close() was called)");
    this.activeForwards++;
    try {
      return await this.forwardOpen(ids, state, opts);
    } finally {
      if (--this.activeForwards === 0 && this.closed) this.release();
    }
  }

  private async forwardOpen(ids: number[], state: ModelState, opts: ForwardOptions): Promise<Float32Array> {
    if (ids.length === 0) throw new UsageError("forward needs at least one token id");
    const from = opts.noLogits ? ids.length : opts.allLogits ? 0 : (opts.logitsFrom ?? ids.length - 1);
    if (!Number.isInteger(from) || from < 0 || from > ids.length) throw new UsageError(`forward: logitsFrom ${opts.logitsFrom} is outside [0, ${ids.length - 1}]`);
    const D = this.cfg.hiddenSize;
    const V = this.cfg.vocabSize;
    const chunk = Math.max(1, opts.chunkSize ?? 64);
    const logits = new Float32Array((ids.length - from) * V);
    this.counters.phaseTokens[this.phase] += ids.length;
    for (let c0 = 0; c0 < ids.length; c0 += chunk) {
      const part = ids.slice(c0, c0 + chunk);
      const onProgress = opts.onProgress;
      const layers = this.cfg.numLayers;
      const chunkOpts: ForwardOptions = onProgress
        ? { ...opts, onLayer: (l, hl, T) => (opts.onLayer?.(l, hl, T), onProgress({ tokens: ids.length, chunkStart: c0, chunkTokens: part.length, layersDone: l + 1, layers })) }
        : opts;
      const h = await this.runChunk(part, state, chunkOpts);
      state.pos += part.length;
      state.ids.push(...part);
      // The rows of this chunk whose logits are wanted: final norm, then lm_head over all of them at once.
      const t0 = Math.max(0, from - c0);
      const n = part.length - t0;
      if (n <= 0) continue;
      const tl = performance.now();
      const read0 = this.counters.bytesRead.embedHead;
      const normed = new Float32Array(n * D);
      for (let t = 0; t < n; t++) rmsNorm(h.subarray((t0 + t) * D, (t0 + t + 1) * D), this.finalNorm, this.cfg.rmsNormEps, normed.subarray(t * D, (t + 1) * D), D);
      const badNorm = firstNonFinite(normed);
      if (badNorm >= 0) throw nonFiniteError("the final norm's output", normed, badNorm, D, state.pos - part.length + t0, this.finalCause());
      const at = c0 + t0 - from;
      const rows = logits.subarray(at * V, (at + n) * V);
      await this.headLogits(normed, n, rows);
      const badLogit = firstNonFinite(rows);
      if (badLogit >= 0) {
        const row = badLogit % V;
        const raw = this.head?.raw;
        const w = raw instanceof Uint16Array ? firstNonFiniteRaw(new Uint8Array(raw.buffer, raw.byteOffset + row * D * 2, D * 2), "BF16") : raw ? firstNonFinite(raw.subarray(row * D, (row + 1) * D)) : -1;
        const cause = w >= 0 ? `${this.cfg.tensorPrefix}lm_head.weight row ${row} holds it (element ${w})` : `the logit of token ${row} (lm_head.weight row ${row}${this.head ? " is finite: an overflow" : ", streamed: not checked"})`;
        throw nonFiniteError("the logits", rows, badLogit, V, state.pos - part.length + t0, cause);
      }
      this.tally("lm_head", (performance.now() - tl) / 1000, V * D * (this.head?.dtype === "F32" ? 4 : 2), this.counters.bytesRead.embedHead - read0);
    }
    // Expert reads that completed after the last MoE layer (a lookahead read in flight when it was
    // cancelled) are the experts' bytes of this call.
    this.tally("moe_experts", 0, 0, this.takeExpertReads());
    return logits;
  }
}

/** A trunk ring slot seen as a weight source: tensors are views into the slot (valid until release). */
class TrunkLayerSource implements WeightSource {
  readonly dir: string;
  bytesRead = 0;
  private readonly set: Set<string>;
  constructor(private readonly tl: TrunkLayer) {
    this.dir = `trunk layer ${tl.layer}`;
    this.set = new Set(tl.names());
  }
  has(name: string): boolean {
    return this.set.has(name);
  }
  names(): string[] {
    return [...this.set];
  }
  info(name: string) {
    if (!this.set.has(name)) throw new WeightError(`${this.dir}: tensor ${name} is missing from the packed trunk`);
    const t = this.tl.info(name);
    return { name, dtype: t.dtype, shape: t.shape, file: "", offset: t.offset, nbytes: t.byteLength };
  }
  read(name: string): Uint8Array {
    this.info(name);
    return this.tl.tensor(name);
  }
  close(): void {}
}

/**
 * The tensors a Model reads at load: the globals it keeps (embed and lm_head unless streamed, the
 * final norm, the output AttnRes weights), and every trunk and shared-expert tensor of each
 * resident layer below the config's layer count; routed experts stay on disk (the ExpertStore).
 */
export function residentNames(src: WeightSource, cfg: ModelConfig, resident: (layer: number) => boolean, embedHead: boolean): string[] {
  const P = cfg.tensorPrefix;
  const globals = [...(embedHead ? ["model.embed_tokens.weight", "lm_head.weight"] : []), "model.norm.weight", "model.output_attn_res_norm.weight", "model.output_attn_res_proj.weight"].map((n) => P + n);
  const out = globals.filter((n) => src.has(n));
  for (const n of src.names()) {
    const c = classifyName(n);
    if ((c.kind === KIND_TRUNK || c.kind === KIND_SHARED) && c.layer >= 0 && c.layer < cfg.numLayers && n.startsWith(P) && resident(c.layer)) out.push(n);
  }
  return out;
}
