/**
 * The engine: a loaded model with its tokenizer, memory plan and generation loop.
 *
 *   const engine = await Engine.load("path/to/Kimi-K3", { preset: "auto" });
 *   for await (const ev of engine.generate("Hello", { maxTokens: 32, temperature: 0 })) process.stdout.write(ev.text);
 *
 * Greedy and seeded sampling are deterministic; K3 stops on both [EOS] and <|end_of_msg|>
 * (Kimi-Linear on [EOS] and <|im_end|>); an AbortSignal is honoured between layers.
 */
import { formatBytes, ProgressMeter } from "@k3/native";
import { existsSync, readFileSync, statSync } from "node:fs";
import { availableParallelism } from "node:os";
import { basename, join } from "node:path";
import { setSimdLevel, setThreadCount, simdLevel, threadCount, type SimdLevel } from "@k3/dense";
import { checkTrunkSource, readTrunkManifest, type WarmResult, type WarmTask } from "@k3/moe-stream";
import { encodeChat, loadKimiTokenizer, type ChatMessage, type Tokenizer } from "@k3/tiktoken-bpe";
import { censusOf, type Census } from "./census.js";
import { checkTokenizerMatch, configFingerprint, fnv1a64, isMoeLayer, moeLayersOf, readConfig, withLayers, type ModelConfig } from "./config.js";
import { AbortError, ContextError, UsageError } from "./errors.js";
import { hottestFirst, readExpertProfile, writeExpertProfile, type ExpertCounts } from "./expert-profile.js";
import { CHOICES, checkChoice, checkEngineOption, checkSamplingOption, DEFAULTS, ENGINE_RULES, MAX_PROMPT_TOKENS, SAMPLING_RULES } from "./options.js";
import type { KdaCore } from "./layers/kda.js";
import type { ExpertCachePolicy, Progress } from "@k3/moe-stream";
import { EXPERT_READERS, HEAD_PIECE_BYTES, HEAD_READERS, Model, TRUNK_READERS, type ForwardProgress, type ModelState } from "./model.js";
import { DEFAULT_PROMPT_CACHE_BYTES, PromptCache, snapshotGrain, snapshotPoint, type PromptCacheOptions } from "./prompt-cache.js";
import { allLogitsChunkSize, budgetsFor, checkContextFits, checkPlanFits, formatPlan, planMemory, readMemInfo, headChunkRowsFor, type Budgets, type MemInfo, type MemoryPlan, type PresetName } from "./presets.js";
import { afterPlans, measureCeilings, measureCeilingsAfter, MEM_CEILING_BYTES, type FloorSetup, type SourcePlan } from "./floor.js";
import { buildReport, emptyCounters, refloorReport, type Ceilings, type RunCounters, type RunReport, type WarmReport } from "./report.js";
import { Sampler, type SamplingOptions, type TokenConstraint } from "./sampler.js";
import { finishGemvProbe, gemvProbeEnabled, startGemvProbe, type GemvProbeReport } from "./gemv-probe.js";
import { cpuSnapshot, threadCpuBetween, type CpuSnapshot, type ThreadCpuReport } from "./thread-cpu.js";
import { SpeculativeDecoder, type Drafter } from "./speculative.js";
import { sequenceNll, type NllResult } from "./perplexity.js";

/**
 * Each layer's bytes in a packed trunk's manifest (the census estimate for a layer it lacks: the
 * streamer then names it), once the trunk is known to be packed from this checkpoint (its shard
 * names, sizes and headers' hash): a trunk of another or a changed model is refused (exit 2).
 */
function packedLayerBytes(trunkDir: string, census: Census, dir: string, shardDirs?: readonly string[]): number[] {
  let manifest;
  try {
    manifest = readTrunkManifest(trunkDir);
    checkTrunkSource(trunkDir, manifest, dir, shardDirs);
  } catch (e) {
    throw new UsageError(`--trunk ${trunkDir}: ${(e as Error).message}`, { cause: e });
  }
  const byLayer = new Map(manifest.groups.filter((g) => g.layer !== null).map((g) => [g.layer!, g.byteLength]));
  return census.layerTrunkBytes.map((b, l) => byLayer.get(l) ?? b);
}


/** Refuses a prompt longer than MAX_PROMPT_TOKENS (a ContextError: exit 2, a 400 from the server). */
export function checkPromptLength(tokens: number): void {
  if (tokens > MAX_PROMPT_TOKENS) throw new ContextError(`the prompt has ${tokens} tokens; at most ${MAX_PROMPT_TOKENS}`);
}

/**
 * Every EngineOptions value against options.ts, before anything loads (the CLI parses its flags
 * with the same rules; this is the check for library callers). `layers` is checked against the
 * config by withLayers, `preset` by budgetsFor, the prompt cache by PromptCache.
 */
function checkEngineOptions(o: EngineOptions): void {
  if (o.threads !== undefined) checkEngineOption(ENGINE_RULES.threads, o.threads);
  if (o.chunkSize !== undefined) checkEngineOption(ENGINE_RULES.chunkSize, o.chunkSize);
  if (o.pieceMb !== undefined) checkEngineOption(ENGINE_RULES.pieceMb, o.pieceMb);
  if (o.spec !== undefined) checkEngineOption(ENGINE_RULES.spec, o.spec);
  if (o.simd !== undefined) checkChoice("--simd", CHOICES.simd, o.simd);
  if (o.kdaCore !== undefined) checkChoice("--kda-core", CHOICES.kdaCore, o.kdaCore);
  if (o.loadMethod !== undefined) checkChoice("--load-method", CHOICES.loadMethod, o.loadMethod);
  if (o.warm !== undefined) checkChoice("--warm", CHOICES.warm, o.warm);
  if (o.cachePolicy !== undefined) checkChoice("--cache-policy", CHOICES.cachePolicy, o.cachePolicy);
  if (o.onExpertError !== undefined) checkChoice("--on-expert-error", CHOICES.onExpertError, o.onExpertError);
}

export interface EngineOptions {
  /** Memory preset (default auto). */
  preset?: PresetName;
  /** Override budgets of the preset (bytes). */
  budgets?: Partial<Budgets>;
  /** Threads of the shared pool (default: the machine's; at most options.ts MAX_THREADS, the pool's limit). */
  threads?: number;
  /** Force a SIMD level (default: the best the CPU has). */
  simd?: SimdLevel;
  /** Prefill chunk size in tokens (default 64, at most 4096). */
  chunkSize?: number;
  /** KDA form for multi-token chunks: "auto" (chunked WY/UT, fast) or "recurrent" (bit-equal to decode). */
  kdaCore?: KdaCore;
  /** Where the plan and notes go (default: nowhere). */
  log?: (line: string) => void;
  /** Memory figures for planning (default: /proc/meminfo). */
  mem?: MemInfo;
  /** Packed trunk directory (`k3 pack`): layers the plan does not pin stream through its ring. */
  trunkDir?: string;
  /** Expert reads in in-order pieces of this many MiB (default 4; 0 = one read per expert). */
  pieceMb?: number;
  /** Lookahead prefetch of the next MoE layer's predicted experts (default true). I/O only: output is unchanged. */
  prefetch?: boolean;
  /**
   * A prompt cache owned by the engine (`engine.promptCache`), used by every generate() without
   * its own `promptCache` or `state`: {slots, maxBytes} (slots 0 = none). Default: none.
   */
  promptCache?: PromptCacheOptions;
  /**
   * Run only the first N layers, then the final norm and lm_head (`--layers N`): a smoke test of a
   * partly downloaded checkpoint (absent shards are allowed). The output is not the model's.
   */
  layers?: number;
  /**
   * Further directories holding shards (`--shard-dirs`): a checkpoint spread over several drives,
   * each shard in exactly one of the checkpoint directory and these. Reads then run on all drives.
   */
  shardDirs?: readonly string[];
  /**
   * Exact n-gram speculative decoding: up to this many tokens guessed from earlier text are
   * verified in the same forward pass as each sampled token (0 = off, the default; at most 8). The
   * output is bit-identical with and without it; see speculative.ts. GenerateOptions.spec overrides.
   */
  spec?: number;
  /**
   * A routed expert that cannot be read (I/O error, short read) or whose bytes are refused (MXFP4
   * 0xFF scale): "drop" (default, as the reference engine) leaves it out of the layer's mix, lists it
   * in the report (expert_drops, expert_drop_details) and `k3` exits 4; "fail" stops at the first.
   */
  onExpertError?: "drop" | "fail";
  /**
   * How the resident weights are read: "pool" (default: one pass through the read pool in large
   * aligned pieces, O_DIRECT, straight into pre-faulted huge-page memory) or "per-tensor" (one
   * positioned read per tensor into a fresh buffer; the former path, kept for comparison).
   */
  loadMethod?: "pool" | "per-tensor";
  /** Also measure the load's ceiling: the same reads by the same engine, page cache dropped, before and after (report.load.ceiling_gbps). */
  loadCeiling?: boolean;
  /** Progress of long loads (at least 512 MiB) and of a warm that load() waits for: bytes, rate, ETA (`progressPrinter` from @k3/native draws a bar). */
  onLoadProgress?: (p: Progress) => void;
  /**
   * Fill the expert cache ahead of use (`--warm`): each MoE layer's empty cache slots take that
   * layer's experts in disk order (all of them where the plan's cache holds every expert: decode
   * then reads nothing from disk). "auto" (default) reads them in the background, two at a time
   * behind the run's own reads, when the cache holds at least half of each layer's experts
   * (AUTO_WARM_SHARE: below that a warmed expert is more likely evicted than used, and the warm's
   * reads would only compete with the run's); "wait" fills any cache before load() returns, at full
   * queue depth, with progress; "off" never. A warm never evicts: experts the run routes to
   * replace unused warmed ones. I/O only: the output is unchanged.
   */
  warm?: "auto" | "wait" | "off";
  /**
   * Which experts a full layer of the expert cache keeps (`--cache-policy`; @k3/moe-stream
   * cache-policy.ts): "lfu" (default) the most requested (a miss joins only when requested more
   * often than the least-requested resident expert), "lru" the most recent. I/O only: the output
   * is unchanged.
   */
  cachePolicy?: ExpertCachePolicy;
  /**
   * A file of how often each MoE layer's experts were requested in earlier runs of this checkpoint
   * (`--expert-profile`; expert-profile.ts). Read at load when it exists: the counts seed the lfu
   * cache and the warm reads each layer's most requested experts; written back at close(). I/O
   * only: the output is unchanged.
   */
  expertProfile?: string;
  /**
   * Measure the memory-read and disk-read ceilings before loading (a few seconds; `--floor`, on by
   * default for `k3 bench`): every run report then has its floor and ratio (report.floor).
   */
  floor?: boolean;
}

export interface GenerateOptions extends SamplingOptions {
  /** Tokens to generate at most (default 256, at most options.ts MAX_NEW_TOKENS = 4096). */
  maxTokens?: number;
  /** Extra stop strings (the text before them is returned). */
  stop?: string[];
  /** Extra stop ids, on top of the model's end ids. */
  stopIds?: number[];
  signal?: AbortSignal;
  /**
   * Checked between layers and tokens next to `signal`, on every check (the server's worker reads
   * its shared cancel flag here: no timer can run while a prefill holds the thread).
   */
  cancelled?: () => boolean;
  /** Continue this state instead of a fresh one (chat); it is advanced in place. */
  state?: ModelState;
  /** Random stream id (chat turns use their turn number). */
  stream?: number;
  /**
   * Reuse and store chunk-aligned prompt-prefill snapshots (see PromptCache): the output is
   * bit-identical to a cold run. Default: the engine's own cache (EngineOptions.promptCache);
   * null = none. Ignored when `state` is given (that state is already the conversation).
   */
  promptCache?: PromptCache | null;
  /** Speculative draft length for this call (default EngineOptions.spec; 0 = off). */
  spec?: number;
  /** Called with the logits each token is sampled from (step 0 = the prompt's last position), before sampling. */
  onLogits?: (logits: Float32Array, step: number) => void;
  /**
   * Called after each draw with the id and the row it was drawn from: the model's logits after the
   * penalties and the constraint's mask, before temperature / top-k / top-p (logprobs come from it).
   */
  onSample?: (id: number, row: Float32Array, step: number) => void;
  /** Restricts each draw (JSON mode); generation stops with "stop" once it says the output is complete. */
  constraint?: TokenConstraint;
  /** Where speculative drafts come from (default: n-gram lookup in the context; any source keeps the output exact). */
  drafter?: Drafter;
  /** Called after each layer of each prefill chunk (the CLI draws it as a bar: `prefillPrinter`). */
  onPrefillProgress?: (p: PrefillProgress) => void;
}

/** A prefill's progress, after a layer of one of its chunks. */
export interface PrefillProgress {
  /** Prompt tokens this prefill runs (those restored from the prompt cache are not counted). */
  tokens: number;
  /** Of them, the tokens through every layer. */
  tokensDone: number;
  /** The layer work done, 0..1 (1 once the last chunk's last layer ran). */
  fraction: number;
  /** The chunk in flight: its layers done, of `layers`. */
  layersDone: number;
  layers: number;
  seconds: number;
  /** From the rate so far; null before any layer ran. */
  etaSeconds: number | null;
}

/**
 * The prefill's model calls (one, or two around a prompt-cache snapshot) as one progress: `at(offset)`
 * is the model's onProgress for a call whose first token is `offset` tokens into the prefill.
 */
function prefillTracker(tokens: number, report: (p: PrefillProgress) => void) {
  const t0 = performance.now();
  return (offset: number) => (p: ForwardProgress) => {
    const start = offset + p.chunkStart;
    const fraction = (start * p.layers + p.chunkTokens * p.layersDone) / (tokens * p.layers);
    const seconds = (performance.now() - t0) / 1000;
    report({
      tokens,
      tokensDone: p.layersDone === p.layers ? start + p.chunkTokens : start,
      fraction,
      layersDone: p.layersDone,
      layers: p.layers,
      seconds,
      etaSeconds: fraction > 0 ? (seconds * (1 - fraction)) / fraction : null,
    });
  };
}

export interface TokenEvent {
  /** The sampled id. */
  token: number;
  /** Text completed by this token (UTF-8 safe: never half a character; held back near a stop string). */
  text: string;
  stats: { index: number; promptTokens: number; elapsedSeconds: number; tokensPerSecond: number };
}

export type ChatFormat = "k3" | "kimi-linear";

/** Everything `generate` finished with. */
export interface GenerationResult {
  ids: number[];
  text: string;
  stopReason: "stop" | "length" | "abort";
  /** The stop id that ended it, if any. */
  stopId: number | null;
  /** Ids sampled but not yet fed to the state (the last token, or the stop id): a chat feeds them next turn. */
  unfed: number[];
  /** Prompt tokens restored from the prompt cache instead of prefilled (0 without a hit). */
  cachedTokens: number;
  report: RunReport;
}

/** --piece-mb (MiB, default 4, 0 = off) in bytes; a usage error outside options.ts ENGINE_RULES.pieceMb. */
export function pieceBytesOf(mb: number | undefined): number {
  return checkEngineOption(ENGINE_RULES.pieceMb, mb ?? DEFAULTS.pieceMb) << 20;
}

function checkpointFingerprint(dir: string, cfg: ModelConfig): string {
  const index = join(dir, "model.safetensors.index.json");
  const weights = existsSync(index) ? readFileSync(index, "utf8") : existsSync(join(dir, "model.safetensors")) ? String(statSync(join(dir, "model.safetensors")).size) : "";
  return `${configFingerprint(cfg)}-${fnv1a64(weights)}`;
}

/**
 * The ids that end a reply: the config's eos plus the tokenizer's [EOS] and turn-end special
 * (K3 <|end_of_msg|>, Kimi-Linear <|im_end|>). Real K3: 163585 and 163586.
 */
export function stopIdsFor(cfg: ModelConfig, tok: Tokenizer): number[] {
  const names = cfg.family === "k3" ? ["[EOS]", "<|end_of_msg|>"] : ["[EOS]", "<|im_end|>"];
  const ids = new Set<number>([cfg.eosTokenId]);
  for (const n of names) {
    const id = tok.specialTokens.get(n);
    if (id !== undefined) ids.add(id);
  }
  return [...ids].sort((a, b) => a - b);
}

/** The counters a run's decode phase is measured from (the plan check takes decode-phase deltas). */
interface DecodeStart {
  trunk: number;
  experts: number;
  embedHead: number;
  requests: number;
  hits: number;
  prefetchIssued: number;
  prefetchHits: number;
  warmBytes: number;
}

/** `warm: "auto"` fills a cache in the background only when it holds at least this share of each layer's experts. */
export const AUTO_WARM_SHARE = 0.5;

function decodeStart(c: RunCounters): DecodeStart {
  return { ...c.bytesRead, requests: c.expertRequests, hits: c.expertResidentHits, prefetchIssued: c.prefetchIssued, prefetchHits: c.expertPrefetchHits, warmBytes: c.warmBytesRead };
}

export class Engine {
  readonly dir: string;
  readonly config: ModelConfig;
  readonly census: Census;
  readonly plan: MemoryPlan;
  readonly model: Model;
  readonly tokenizer: Tokenizer;
  readonly chatFormat: ChatFormat;
  /** Ids that end a generation: the model's end ids from the tokenizer and config. */
  readonly stopIds: number[];
  /** Identifies model + config (state files carry it). */
  readonly fingerprint: string;
  readonly modelId: string;
  /** The prefill chunk in tokens (--chunk). */
  readonly chunkSize: number;
  private readonly spec: number;
  /** The prompt cache generate() uses by default (EngineOptions.promptCache), or null. */
  readonly promptCache: PromptCache | null;
  /**
   * What a prompt-cache snapshot's bits depend on besides the ids: the checkpoint, the prefill
   * chunk size and the KDA form (threads, SIMD level and memory plan never change bits).
   */
  readonly promptCacheKey: string;
  private readonly log: (line: string) => void;
  lastResult: GenerationResult | null = null;
  /** The ceilings measured at load (EngineOptions.floor) and, after floorAfterRun, after a run; or null. */
  ceilings: Ceilings | null = null;
  /** The reads each disk source's ceiling makes (the same again after a run). */
  ceilingPlans: SourcePlan[] = [];
  /** What the ceilings were planned from (null without --floor). */
  floorSetup: FloorSetup | null = null;

  /**
   * Measures every ceiling again now (after a run: the same reads as before loading) and returns
   * the run's report with its floor judged against the higher of before and after, so a run faster
   * than a ceiling measured at a slow moment is caught (report.floor.warnings when it still is).
   * The report's peak RSS is kept (taken before these buffers). Without --floor: the report as is.
   */
  floorAfterRun(report: RunReport): RunReport {
    if (!this.ceilings || !report.floor) return report;
    const store = this.model.experts;
    const routed = this.floorSetup && store && this.model.routedSeen ? [...this.model.routedSeen].map((k) => store.location(Math.floor(k / 65536), k % 65536)) : [];
    const plans = this.floorSetup ? afterPlans(this.floorSetup, this.ceilingPlans, routed) : this.ceilingPlans;
    this.ceilings = measureCeilingsAfter(this.ceilings, plans);
    return refloorReport(report, this.ceilings);
  }

  private constructor(dir: string, cfg: ModelConfig, tok: Tokenizer, plan: MemoryPlan, census: Census, model: Model, options: EngineOptions) {
    this.dir = dir;
    this.config = cfg;
    this.tokenizer = tok;
    this.plan = plan;
    this.census = census;
    this.model = model;
    this.chunkSize = plan.chunkSize;
    this.spec = options.spec ?? DEFAULTS.spec;
    this.log = options.log ?? (() => {});
    this.chatFormat = cfg.family === "k3" ? "k3" : "kimi-linear";
    this.stopIds = stopIdsFor(cfg, tok);
    this.fingerprint = checkpointFingerprint(dir, cfg);
    this.modelId = basename(dir.replace(/\/+$/, ""));
    this.promptCacheKey = `${this.fingerprint}/chunk${this.chunkSize}/${options.kdaCore ?? "auto"}`;
    const pc = options.promptCache;
    this.promptCache = pc && (pc.slots ?? 1) > 0 ? new PromptCache(pc) : null;
  }

  /** Reads config + tokenizer, plans memory (printing the plan), refuses if it cannot fit, loads. */
  static async load(dir: string, options: EngineOptions = {}): Promise<Engine> {
    checkEngineOptions(options);
    if (options.threads !== undefined) setThreadCount(options.threads);
    if (options.simd) setSimdLevel(options.simd);
    // Checked before anything loads: a bad prompt cache setting is a usage error, not a late crash
    // (and the cache's snapshot points need a whole chunk size).
    if (options.promptCache) new PromptCache(options.promptCache);
    const full = readConfig(dir);
    const cfg = withLayers(full, options.layers);
    if (cfg !== full) options.log?.(`note: --layers ${cfg.numLayers}: running layers 0..${cfg.numLayers - 1} of ${full.numLayers}, then the final norm and lm_head; shards not on disk are allowed; the output is NOT the model's`);
    const census = censusOf(cfg);
    const mem = options.mem ?? readMemInfo();
    const preset = options.preset ?? "auto";
    const budgets = { ...budgetsFor(preset, census, mem, options.chunkSize), ...options.budgets };
    const pc = options.promptCache;
    const plan = planMemory(census, budgets, options.budgets ? "custom" : preset, mem, {
      prefetch: options.prefetch ?? true,
      promptCache: pc && (pc.slots ?? 1) > 0 ? { slots: pc.slots ?? 1, maxBytes: pc.maxBytes ?? DEFAULT_PROMPT_CACHE_BYTES } : undefined,
      spec: (options.spec ?? 0) > 0,
      // Without a packed trunk every layer is loaded resident: the plan says so and counts no ring.
      packedTrunk: options.trunkDir !== undefined,
      packedLayerBytes: options.trunkDir !== undefined ? packedLayerBytes(options.trunkDir, census, dir, options.shardDirs) : undefined,
      chunkSize: options.chunkSize,
    });
    options.log?.(formatPlan(plan, cfg.numLayers));
    checkPlanFits(plan);
    const streaming = plan.trunkMode === "streamed";
    const tok = loadKimiTokenizer(dir, { specials: cfg.family === "k3" ? "k3" : "k2" });
    checkTokenizerMatch(cfg, tok, join(dir, "config.json"));
    // Low-memory presets stream lm_head in row chunks of at most 4 MiB (presets.ts headChunkRowsFor).
    const headChunkRows = plan.embedHeadResident ? undefined : headChunkRowsFor(cfg.vocabSize, cfg.hiddenSize * 2);
    const pieceBytes = pieceBytesOf(options.pieceMb);
    // Before the model loads (the ceilings' buffers are freed before the run's memory is taken):
    // one ceiling per disk source the run will read, with the run's own pattern (floor.ts).
    let ceilings: Ceilings | null = null;
    let ceilingPlans: SourcePlan[] = [];
    let setup: FloorSetup | null = null;
    if (options.floor) {
      setup = {
        dir,
        cfg,
        shardDirs: options.shardDirs,
        allowMissingShards: options.layers !== undefined,
        experts: census.expertBytes > 0 && cfg.layerKinds.some((_, l) => isMoeLayer(cfg, l)) ? { pieceBytes, readers: EXPERT_READERS, direct: true } : null,
        trunk: streaming ? { dir: options.trunkDir!, streamedLayers: plan.streamedLayers, chunkBytes: plan.trunkChunkBytes, readers: TRUNK_READERS, direct: true } : null,
        embedHead: headChunkRows !== undefined ? { headChunkRows, pieceBytes: HEAD_PIECE_BYTES, readers: HEAD_READERS, direct: true } : null,
      };
      // The memory ceiling's buffer counts in peak RSS: at most half the plan.
      const m = measureCeilings(setup, { memMaxBytes: plan.totalBytes / 2 });
      ceilings = m.ceilings;
      ceilingPlans = m.plans;
      options.log?.(`ceilings (measured now, before loading): memory read ${ceilings.mem_before_gbps.toFixed(1)} GB/s (2 threads, ${formatBytes(ceilings.mem_buffer_bytes ?? MEM_CEILING_BYTES)} buffer); disk read, per source with the run's own pattern: ${ceilings.sources.map((x) => `${x.source} ${x.before_gbps.toFixed(2)} GB/s (${formatBytes(x.piece_bytes || x.request_bytes)} reads, ${x.queue_depth} in flight)`).join(", ") || "none (nothing is read during the run)"}`);
    }
    const model = await Model.open(dir, {
      headChunkRows,
      streamEmbedHead: !plan.embedHeadResident,
      kdaCore: options.kdaCore,
      cacheSlotsPerLayer: plan.cacheSlotsPerLayer,
      cachePolicy: options.cachePolicy,
      pieceBytes,
      prefetch: options.prefetch ?? true,
      // The plan's lookahead share (ultra keeps half a layer's worth to stay under 4 GB).
      ...(plan.prefetchSlots > 0 ? { prefetchSlots: plan.prefetchSlots } : {}),
      onExpertError: options.onExpertError ?? "drop",
      layers: options.layers,
      shardDirs: options.shardDirs,
      preload: options.loadMethod === "per-tensor" ? false : { ceiling: options.loadCeiling, onProgress: options.onLoadProgress },
      // Read pieces: 64 MiB, or the largest layer rounded up to 1 MiB when smaller (no oversized slots).
      trunk: streaming
        ? { dir: options.trunkDir!, pinnedLayers: plan.pinnedLayers, ringSlots: plan.ringSlots, chunkBytes: plan.trunkChunkBytes }
        : undefined,
    });
    const engine = new Engine(dir, cfg, tok, plan, census, model, options);
    engine.ceilings = ceilings;
    engine.ceilingPlans = ceilingPlans;
    engine.floorSetup = setup;
    // The after-run expert ceiling reads the experts the run was routed to.
    if (setup) model.routedSeen = new Set();
    engine.loadExpertProfile(options);
    await engine.startWarm(options);
    return engine;
  }

  /** The expert-cache warm (EngineOptions.warm): its task, and how it ended once it has; null when none was started. */
  warm: { mode: WarmReport["mode"]; task: WarmTask; result: WarmResult | null } | null = null;

  /** The counts read from EngineOptions.expertProfile (null without one, or on a first run). */
  private profile: ExpertCounts | null = null;
  private profileFile: string | null = null;
  private profileSaved = false;

  private loadExpertProfile(options: EngineOptions): void {
    const store = this.model.experts;
    if (!options.expertProfile || !store) return;
    this.profileFile = options.expertProfile;
    this.profile = readExpertProfile(options.expertProfile, { fingerprint: this.fingerprint, moeLayers: moeLayersOf(this.config), numExperts: this.config.moe.numExperts });
    if (!this.profile) {
      options.log?.(`expert profile: ${options.expertProfile} does not exist yet; it is written at the end of this run`);
      return;
    }
    let experts = 0;
    for (const [layer, counts] of this.profile) {
      store.seedCounts(layer, counts);
      experts += counts.size;
    }
    options.log?.(`expert profile: ${options.expertProfile} (${experts} experts counted over ${this.profile.size} MoE layers) seeds the expert cache and chooses what it warms`);
  }

  /** Starts the warm EngineOptions.warm asks for; with "wait", returns when it is done. */
  private async startWarm(options: EngineOptions): Promise<void> {
    const mode = options.warm ?? "auto";
    const n = this.config.moe.numExperts;
    if (mode === "off" || !this.model.experts) return;
    const slots = Math.min(n, this.plan.cacheSlotsPerLayer);
    if (slots === 0) {
      if (mode === "wait") options.log?.("expert cache warm: nothing to warm: the plan has no expert cache (0 slots per MoE layer)");
      return;
    }
    // In the background a warm shares the disk with the run's own reads; it pays for that only where
    // a warmed expert is likely to be routed to before the run's misses replace it.
    if (mode === "auto" && slots < AUTO_WARM_SHARE * n) return;
    const wait = mode === "wait";
    const meter = new ProgressMeter("warming the expert cache", this.census.moeLayers * slots * this.census.expertBytes);
    let shown = 0;
    const onProgress = wait && options.onLoadProgress
      ? (p: { experts: number; total: number; bytes: number }) => {
          meter.add(p.bytes - shown);
          shown = p.bytes;
          options.onLoadProgress!(meter.snapshot(`${p.experts}/${this.census.moeLayers * slots} experts`, p.experts === this.census.moeLayers * slots));
        }
      : undefined;
    // With a profile, each layer's `slots` most requested experts; else whatever the store reaches first on disk.
    const profile = this.profile;
    const pick = profile ? (layer: number) => hottestFirst(profile.get(layer), n).slice(0, slots) : undefined;
    const task = this.model.warmExperts({ priority: wait ? "demand" : "low", inflight: wait ? EXPERT_READERS : 2, onProgress }, pick)!;
    const warm = (this.warm = { mode: wait ? "wait" : "background", task, result: null as WarmResult | null });
    const ended = task.done.then((r) => (warm.result = r));
    if (!wait) return;
    const r = await ended;
    this.model.forgetExpertReads();
    options.log?.(`expert cache warm: ${r.experts} experts (${slots} of ${n} per MoE layer, ${formatBytes(r.bytes)}) in ${r.seconds.toFixed(2)} s = ${(r.bytes / Math.max(r.seconds, 1e-9) / 1e9).toFixed(2)} GB/s${r.failed ? `; ${r.failed} reads failed (${r.error}): those experts are read on demand` : ""}`);
  }

  /** The warm's figures for a run report (null when none was started). */
  private warmReport(): WarmReport | null {
    const w = this.warm;
    if (!w) return null;
    const r = w.result;
    const p = r ?? { ...w.task.progress(), failed: 0, cancelled: false, seconds: 0 };
    return { mode: w.mode, done: r !== null, experts: p.experts, total: p.total, bytes: p.bytes, seconds: r ? r.seconds : null, gbps: r ? r.bytes / Math.max(r.seconds, 1e-9) / 1e9 : null, failed: p.failed, cancelled: p.cancelled };
  }

  /** Encodes plain text (specials are NOT interpreted: literal "<|open|>" stays text). */
  encodeText(text: string, bos = true): number[] {
    const ids = Array.from(this.tokenizer.encode(text, { disallowedSpecial: [] }));
    return bos ? [this.config.bosTokenId, ...ids] : ids;
  }

  /** Renders a conversation in the model's chat format (user text with specials disabled). */
  encodeChat(messages: ChatMessage[], options: { thinking?: boolean; effort?: "low" | "high" | "max" | null; addGenerationPrompt?: boolean } = {}): number[] {
    return encodeChat(this.tokenizer, messages, { format: this.chatFormat, ...options });
  }

  newState(): ModelState {
    return this.model.newState();
  }

  /** Writes the expert profile (EngineOptions.expertProfile) and releases the expert store. */
  close(): void {
    const store = this.model.experts;
    if (this.profileFile && store && !this.profileSaved) {
      this.profileSaved = true;
      try {
        writeExpertProfile(this.profileFile, this.fingerprint, store.requestCounts());
      } catch (e) {
        this.log(`expert profile: could not write ${this.profileFile}: ${(e as Error).message}`);
      }
    }
    this.model.close();
  }

  /**
   * Generates after `input` (text is encoded with a BOS, ids are used verbatim). Yields one event
   * per token; the return value holds the ids, text, stop reason and the run report.
   */
  async *generate(input: string | number[], options: GenerateOptions = {}): AsyncGenerator<TokenEvent, GenerationResult, void> {
    const t0 = performance.now();
    const maxTokens = checkSamplingOption(SAMPLING_RULES.maxTokens, options.maxTokens ?? DEFAULTS.maxTokens.engine);
    const sampler = new Sampler(options, options.stream ?? 0);
    for (const k of Object.keys(sampler.options.logitBias)) {
      if (Number(k) >= this.config.vocabSize) throw new UsageError(`logit_bias: token id ${k} is not in the vocabulary (0..${this.config.vocabSize - 1})`);
    }
    const promptIds = typeof input === "string" ? this.encodeText(input) : input;
    if (promptIds.length === 0) throw new UsageError("the prompt is empty");
    checkPromptLength(promptIds.length);
    // The prompt cache serves fresh prompts only: a given state is already a conversation.
    const cache = options.state ? null : options.promptCache === undefined ? this.promptCache : options.promptCache;
    const useCache = cache !== null && cache.enabled;
    const hit = useCache ? cache.lookup(this.promptCacheKey, promptIds) : null;
    const cachedTokens = hit ? hit.ids.length : 0;
    // MLA room for the rest of the prompt; decode grows it by doubling, as from a fresh state.
    const state = options.state ?? (hit ? cache!.restore(hit, promptIds.length - cachedTokens) : this.newState());
    // A restored state already holds the first cachedTokens of this prompt: count them once.
    checkContextFits(this.plan, state.pos - cachedTokens + promptIds.length + maxTokens, this.census.kvBytesPerToken);
    const stopIds = new Set([...this.stopIds, ...(options.stopIds ?? [])]);
    const stops = (options.stop ?? []).filter((s) => s.length > 0);
    const counters = this.model.counters;
    Object.assign(counters, emptyCounters());
    counters.promptTokens = promptIds.length;
    counters.promptCachedTokens = cachedTokens;
    const decoder = this.tokenizer.streamDecoder();
    const generated: number[] = [];
    let text = "";
    let emitted = 0;
    let stopReason: GenerationResult["stopReason"] = "length";
    let stopId: number | null = null;
    let cutByString = false;
    let unfed: number[] = [];
    const signal = options.signal;
    const cancelled = options.cancelled;
    const fwd = { chunkSize: this.chunkSize, signal, cancelled };
    const specN = options.spec === undefined ? this.spec : checkEngineOption(ENGINE_RULES.spec, options.spec);
    const spec = specN > 0 ? new SpeculativeDecoder(this.model, state, fwd, specN, options.drafter) : null;
    // What drafts are looked up in: the conversation so far, this prompt, then each generated token.
    const context = spec ? [...(options.state ? options.state.ids : []), ...promptIds] : [];

    let logits: Float32Array;
    // The counters when decoding starts: the plan check compares the decode phase only.
    let atDecode: DecodeStart | null = null;
    let cpuAtDecode: CpuSnapshot | null = null;
    let decodeThreads: ThreadCpuReport | null = null;
    const probeGemv = gemvProbeEnabled();
    let gemvProbe: GemvProbeReport | null = null;
    try {
      this.model.phase = "prefill";
      const tp = performance.now();
      const track = options.onPrefillProgress ? prefillTracker(promptIds.length - cachedTokens, options.onPrefillProgress) : null;
      logits = useCache
        ? await this.prefillCached(promptIds, state, cache!, fwd, track)
        : await this.model.forward(promptIds, state, track ? { ...fwd, onProgress: track(0) } : fwd);
      counters.prefillSeconds = (performance.now() - tp) / 1000;
      this.model.phase = "decode";
      atDecode = decodeStart(counters);
      cpuAtDecode = cpuSnapshot();
      if (probeGemv) startGemvProbe();
      const td = performance.now();
      for (let i = 0; i < maxTokens; i++) {
        options.onLogits?.(logits, i);
        let row = sampler.adjust(logits);
        if (options.constraint) {
          // The model's row may be kept by the speculative decoder: mask a copy.
          if (row === logits) row = logits.slice();
          options.constraint.mask(row, maxTokens - i);
        }
        const id = sampler.sample(row);
        sampler.accept(id);
        options.onSample?.(id, row, i);
        const complete = options.constraint ? options.constraint.accept(id) : false;
        unfed = [id];
        if (stopIds.has(id)) {
          stopReason = "stop";
          stopId = id;
          break;
        }
        generated.push(id);
        counters.generatedTokens = generated.length;
        text += decoder.push(id);
        // Stop strings: cut at the first match; hold back a tail that could start one.
        let cut = -1;
        for (const s of stops) {
          const at = text.indexOf(s, Math.max(0, emitted - s.length + 1));
          if (at >= 0 && (cut < 0 || at < cut)) cut = at;
        }
        if (cut >= 0) {
          text = text.slice(0, cut);
          stopReason = "stop";
          cutByString = true;
        }
        if (complete) stopReason = "stop";
        let safe = text.length;
        if (cut < 0) {
          for (const s of stops) {
            for (let k = Math.min(s.length - 1, text.length); k > 0; k--) {
              if (text.endsWith(s.slice(0, k))) {
                safe = Math.min(safe, text.length - k);
                break;
              }
            }
          }
        }
        const piece = text.slice(emitted, Math.max(emitted, safe));
        emitted = Math.max(emitted, safe);
        const elapsed = (performance.now() - t0) / 1000;
        yield { token: id, text: piece, stats: { index: i, promptTokens: promptIds.length, elapsedSeconds: elapsed, tokensPerSecond: (i + 1) / elapsed } };
        if (cut >= 0 || complete || i === maxTokens - 1) break;
        if (signal?.aborted || cancelled?.()) throw new AbortError();
        if (spec) context.push(id);
        // Rows past the last token that may still be sampled are not worth verifying.
        if (spec) logits = await spec.next(id, context, maxTokens - i - 2);
        else {
          counters.decodeForwards++;
          logits = await this.model.forward([id], state, fwd);
        }
        unfed = [];
        counters.decodeSeconds = (performance.now() - td) / 1000;
      }
      counters.decodeSeconds = (performance.now() - td) / 1000;
      const cpuEnd = cpuAtDecode ? cpuSnapshot() : null;
      if (cpuAtDecode && cpuEnd) decodeThreads = threadCpuBetween(cpuAtDecode, cpuEnd, availableParallelism());
      // Outside decode's timed span, with every traced weight still loaded.
      if (probeGemv) gemvProbe = finishGemvProbe();
      // Unconfirmed drafts leave the state: it holds exactly the fed tokens (a chat continues from it).
      if (spec) await spec.settle();
    } catch (err) {
      if (!(err instanceof AbortError) && !signal?.aborted && !cancelled?.()) throw err;
      stopReason = "abort";
    } finally {
      this.model.phase = "prefill";
    }
    if (spec) Object.assign(counters, { specDraftMax: specN, specRounds: spec.stats.rounds, specDrafted: spec.stats.drafted, specAccepted: spec.stats.accepted, decodeForwards: spec.stats.forwards });
    if (!cutByString) text += decoder.flush();
    const rest = text.slice(emitted);
    if (rest && stopReason !== "abort") {
      const elapsed = (performance.now() - t0) / 1000;
      yield { token: -1, text: rest, stats: { index: generated.length, promptTokens: promptIds.length, elapsedSeconds: elapsed, tokensPerSecond: generated.length / elapsed } };
    }
    const report = this.report(promptIds, generated, text, stopReason, counters, (performance.now() - t0) / 1000, atDecode, decodeThreads, gemvProbe);
    const result: GenerationResult = { ids: generated, text, stopReason, stopId, unfed, cachedTokens, report };
    this.lastResult = result;
    return result;
  }

  /**
   * Prefills the rest of a prompt (state is fresh or a restored snapshot, so state.pos is a
   * multiple of the chunk size) in two calls split at the snapshot point, storing the state in
   * between. Both calls start at multiples of the chunk size, so every chunk boundary is where one
   * forward(prompt) from position 0 puts it: the logits are the same bits as a cold prefill.
   */
  /**
   * Perplexity of `input` (text is encoded with a BOS, ids are used verbatim): one chunked prefill
   * with every position's logits, each scoring the next token (perplexity.ts). The run report counts
   * the sequence as prompt tokens and its time as prefill.
   */
  async evaluate(input: string | number[], options: { signal?: AbortSignal } = {}): Promise<NllResult & { report: RunReport }> {
    const t0 = performance.now();
    const ids = typeof input === "string" ? this.encodeText(input) : input;
    checkContextFits(this.plan, ids.length, this.census.kvBytesPerToken);
    const counters = this.model.counters;
    Object.assign(counters, emptyCounters());
    counters.promptTokens = ids.length;
    this.model.phase = "prefill";
    const chunkSize = allLogitsChunkSize(this.chunkSize, this.census, this.config.vocabSize);
    const result = await sequenceNll(this.model, ids, { chunkSize, signal: options.signal });
    counters.prefillSeconds = (performance.now() - t0) / 1000;
    const report = this.report(ids, [], "", "length", counters, (performance.now() - t0) / 1000, null, null, null, chunkSize);
    return { ...result, report };
  }

  private async prefillCached(
    promptIds: number[], state: ModelState, cache: PromptCache, fwd: { chunkSize: number; signal?: AbortSignal; cancelled?: () => boolean },
    track: ((offset: number) => (p: ForwardProgress) => void) | null,
  ): Promise<Float32Array> {
    const start = state.pos;
    const grain = snapshotGrain(this.chunkSize);
    if (start % grain !== 0) throw new Error(`prompt cache: a restored state at position ${start} is not a multiple of ${grain} (chunk size ${this.chunkSize})`);
    const split = snapshotPoint(promptIds.length, grain);
    let note = "";
    if (split > start) {
      const drops = this.model.counters.expertDrops;
      await this.model.forward(promptIds.slice(start, split), state, { ...fwd, noLogits: true, onProgress: track?.(0) });
      if (this.model.counters.expertDrops !== drops) {
        // An expert left out of the mix (I/O error) makes this state differ from a clean prefill: never reuse it.
        note = `; no snapshot (${this.model.counters.expertDrops - drops} expert drop(s) in this prefill)`;
      } else {
        const snap = cache.store(this.promptCacheKey, state);
        note = snap
          ? `; snapshot at ${split} tokens (${formatBytes(snap.bytes)}; cache ${cache.size}/${cache.slots} slots, ${formatBytes(cache.bytes)})`
          : `; the ${split}-token snapshot exceeds the cache's ${formatBytes(cache.maxBytes)}: not stored`;
      }
    }
    const logits = await this.model.forward(promptIds.slice(Math.max(start, split)), state, track ? { ...fwd, onProgress: track(Math.max(0, split - start)) } : fwd);
    this.log(`prompt cache: ${start} of ${promptIds.length} prompt tokens reused, ${promptIds.length - start} prefilled${note}`);
    return logits;
  }

  /** Runs a generation to the end and returns its result (convenience for scripts and tests). */
  async complete(input: string | number[], options: GenerateOptions = {}): Promise<GenerationResult> {
    const it = this.generate(input, options);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
    }
  }

  private report(
    promptIds: number[], ids: number[], text: string, stop: RunReport["stop_reason"], counters: RunCounters, wall: number,
    atDecode: DecodeStart | null = null, decodeThreads: ThreadCpuReport | null = null, gemvProbe: GemvProbeReport | null = null,
    chunkSize = this.chunkSize,
  ): RunReport {
    const store = this.model.experts?.stats();
    const d = atDecode ?? decodeStart(counters);
    const b = counters.bytesRead;
    const planCheck = {
      plan: this.plan,
      decodeForwards: atDecode ? counters.decodeForwards : 0,
      decodeBytes: { trunk: b.trunk - d.trunk, experts: b.experts - d.experts, embedHead: b.embedHead - d.embedHead },
      decodeExpertRequests: counters.expertRequests - d.requests,
      decodeExpertHits: counters.expertResidentHits - d.hits,
      decodeUnusedPrefetches: Math.max(0, counters.prefetchIssued - d.prefetchIssued - (counters.expertPrefetchHits - d.prefetchHits)),
      decodeWarmBytes: counters.warmBytesRead - d.warmBytes,
      allocated: this.model.allocations(),
    };
    return buildReport({
      model: this.dir,
      preset: this.plan.preset,
      threads: threadCount(),
      simd: simdLevel(),
      chunkSize,
      promptIds,
      generatedIds: ids,
      text,
      stopReason: stop,
      counters,
      wallSeconds: wall,
      io: { prefetch: this.model.prefetch, pieceBytes: this.model.pieceBytes, engine: store?.engine, engineNote: store?.engineNote, cachePolicy: this.model.experts && this.model.experts.slotsPerLayer > 0 ? this.model.experts.cachePolicy : null },
      load: this.model.loadStats,
      warm: this.warmReport(),
      ceilings: this.ceilings,
      planCheck,
      decodeThreads,
      gemvProbe,
    });
  }
}
