/**
 * The run report printed after every run (and written as JSON with --json): tokens, prefill and
 * decode speed separately, peak RSS, bytes read per token, resident hit rate, I/O share, overlap.
 */
import type { LoadStats } from "./model.js";
import { fmtBytes } from "./presets.js";

/** Counters the model accumulates while it runs. */
export interface RunCounters {
  promptTokens: number;
  /** Prompt tokens restored from the prompt cache instead of prefilled. */
  promptCachedTokens: number;
  generatedTokens: number;
  prefillSeconds: number;
  decodeSeconds: number;
  /** Bytes read from disk (trunk + experts + embed/head), by source. */
  bytesRead: { trunk: number; experts: number; embedHead: number };
  /** Expert requests and how many were already resident (not counting prefetched-then-hit). */
  expertRequests: number;
  expertResidentHits: number;
  /** Expert requests served by a lookahead prefetch (never counted as resident). */
  expertPrefetchHits: number;
  /** Lookahead: experts predicted for the next MoE layer, how many of them it then used, reads issued. */
  prefetchPredicted: number;
  prefetchUsed: number;
  prefetchIssued: number;
  /** Seconds spent waiting for or doing I/O, and how much of it overlapped compute. */
  ioSeconds: number;
  ioOverlappedSeconds: number;
  /** Routed experts left out of a layer's mix because their bytes could not be had (exit 4). */
  expertDrops: number;
  /** The first MAX_DROP_DETAILS of them: which layer and expert, and why. */
  expertDropDetails: ExpertDrop[];
  /** Decode forward passes (one per fed token without speculation). */
  decodeForwards: number;
  /** Speculative decoding: draft bound (0 = off), verification passes with drafts, drafted and confirmed tokens. */
  specDraftMax: number;
  specRounds: number;
  specDrafted: number;
  specAccepted: number;
}

export interface ExpertDrop {
  layer: number;
  expert: number;
  /** How many of the forward's tokens had selected it. */
  tokens: number;
  reason: string;
}

/** Drops listed one by one in the report (the count is always exact). */
export const MAX_DROP_DETAILS = 32;

export function emptyCounters(): RunCounters {
  return {
    promptTokens: 0,
    promptCachedTokens: 0,
    generatedTokens: 0,
    prefillSeconds: 0,
    decodeSeconds: 0,
    bytesRead: { trunk: 0, experts: 0, embedHead: 0 },
    expertRequests: 0,
    expertResidentHits: 0,
    expertPrefetchHits: 0,
    prefetchPredicted: 0,
    prefetchUsed: 0,
    prefetchIssued: 0,
    ioSeconds: 0,
    ioOverlappedSeconds: 0,
    expertDrops: 0,
    expertDropDetails: [],
    decodeForwards: 0,
    specDraftMax: 0,
    specRounds: 0,
    specDrafted: 0,
    specAccepted: 0,
  };
}

export interface RunReport {
  model: string;
  preset: string;
  threads: number;
  simd: string;
  prompt_ids: number[];
  generated_ids: number[];
  generated_text: string;
  stop_reason: "stop" | "length" | "abort";
  prompt_tokens: number;
  generated_tokens: number;
  prefill_seconds: number;
  decode_seconds: number;
  /** Prefilled (not cache-restored) prompt tokens per second. */
  prefill_tokens_per_second: number;
  prompt_cached_tokens: number;
  decode_tokens_per_second: number;
  wall_seconds: number;
  peak_rss_bytes: number;
  bytes_read: { trunk: number; experts: number; embed_head: number; total: number };
  bytes_read_per_token: number;
  expert_requests: number;
  resident_hit_rate: number | null;
  /** Expert requests served by a lookahead prefetch / expert_requests (disjoint from resident hits). */
  prefetch_hit_rate: number | null;
  /** Lookahead prefetch on; expert read piece size (0 = one read per expert). */
  prefetch: boolean;
  piece_bytes: number;
  /** The expert store's read engine ("io_uring", "io_uring+sqpoll", "pread"; null without experts) and why io_uring is not in use. */
  io_engine: string | null;
  io_engine_note: string | null;
  /** Experts predicted for the next MoE layer (summed over layers and chunks) and how many it used. */
  prefetch_predicted: number;
  prefetch_used: number;
  /** prefetch_used / prefetch_predicted: the predictor's accuracy, whatever the slots allowed to read. */
  prefetch_accuracy: number | null;
  /** Prefetch reads issued (at most the prefetch slot share per layer). */
  prefetch_issued: number;
  io_share: number;
  io_overlap: number | null;
  expert_drops: number;
  expert_drop_details: ExpertDrop[];
  decode_forwards: number;
  spec: { max_draft: number; rounds: number; drafted: number; accepted: number; acceptance: number | null };
  /**
   * Loading the resident weights: wall seconds (reads + building the layers), bytes read, GB/s, the
   * ceiling (the same reads by the same engine, page cache dropped with POSIX_FADV_DONTNEED, O_DIRECT
   * where allowed; null unless measured: --load-ceiling), gbps / ceiling, minor page faults, CPU, method.
   */
  load: {
    seconds: number;
    read_seconds: number;
    bytes: number;
    gbps: number;
    ceiling_gbps: number | null;
    ratio: number | null;
    page_faults_minor: number;
    user_seconds: number;
    system_seconds: number;
    method: string;
  } | null;
}

/** The run report's `load` from the model's load stats. GB = 1e9 bytes. */
export function loadReport(l: LoadStats | null | undefined): RunReport["load"] {
  if (!l) return null;
  const gbps = l.seconds > 0 ? l.bytes / l.seconds / 1e9 : 0;
  return {
    seconds: l.seconds,
    read_seconds: l.readSeconds,
    bytes: l.bytes,
    gbps,
    ceiling_gbps: l.ceilingGbps,
    ratio: l.ceilingGbps ? gbps / l.ceilingGbps : null,
    page_faults_minor: l.pageFaultsMinor,
    user_seconds: l.userSeconds,
    system_seconds: l.systemSeconds,
    method: l.method,
  };
}

/** Peak resident set size of this process in bytes (getrusage ru_maxrss). */
export function peakRssBytes(): number {
  return process.resourceUsage().maxRSS * 1024;
}

export function buildReport(args: {
  model: string;
  preset: string;
  threads: number;
  simd: string;
  promptIds: number[];
  generatedIds: number[];
  text: string;
  stopReason: RunReport["stop_reason"];
  counters: RunCounters;
  wallSeconds: number;
  /** The expert I/O setup (default: no prefetch, one read per expert). */
  io?: { prefetch: boolean; pieceBytes: number; engine?: string; engineNote?: string | null };
  /** The resident load (Model.loadStats). */
  load?: LoadStats | null;
}): RunReport {
  const c = args.counters;
  const total = c.bytesRead.trunk + c.bytesRead.experts + c.bytesRead.embedHead;
  const tokens = c.promptTokens + c.generatedTokens;
  return {
    model: args.model,
    preset: args.preset,
    threads: args.threads,
    simd: args.simd,
    prompt_ids: args.promptIds,
    generated_ids: args.generatedIds,
    generated_text: args.text,
    stop_reason: args.stopReason,
    prompt_tokens: c.promptTokens,
    generated_tokens: c.generatedTokens,
    prefill_seconds: c.prefillSeconds,
    decode_seconds: c.decodeSeconds,
    prefill_tokens_per_second: c.prefillSeconds > 0 ? (c.promptTokens - c.promptCachedTokens) / c.prefillSeconds : 0,
    prompt_cached_tokens: c.promptCachedTokens,
    // The first generated token comes out of prefill; decode covers the rest.
    decode_tokens_per_second: c.decodeSeconds > 0 ? Math.max(0, c.generatedTokens - 1) / c.decodeSeconds : 0,
    wall_seconds: args.wallSeconds,
    peak_rss_bytes: peakRssBytes(),
    bytes_read: { trunk: c.bytesRead.trunk, experts: c.bytesRead.experts, embed_head: c.bytesRead.embedHead, total },
    bytes_read_per_token: tokens > 0 ? total / tokens : 0,
    expert_requests: c.expertRequests,
    resident_hit_rate: c.expertRequests > 0 ? c.expertResidentHits / c.expertRequests : null,
    prefetch_hit_rate: c.expertRequests > 0 ? c.expertPrefetchHits / c.expertRequests : null,
    prefetch: args.io?.prefetch ?? false,
    piece_bytes: args.io?.pieceBytes ?? 0,
    io_engine: args.io?.engine ?? null,
    io_engine_note: args.io?.engineNote ?? null,
    prefetch_predicted: c.prefetchPredicted,
    prefetch_used: c.prefetchUsed,
    prefetch_accuracy: c.prefetchPredicted > 0 ? c.prefetchUsed / c.prefetchPredicted : null,
    prefetch_issued: c.prefetchIssued,
    io_share: args.wallSeconds > 0 ? c.ioSeconds / args.wallSeconds : 0,
    io_overlap: c.ioSeconds > 0 ? c.ioOverlappedSeconds / c.ioSeconds : null,
    expert_drops: c.expertDrops,
    expert_drop_details: c.expertDropDetails.map((d) => ({ ...d })),
    decode_forwards: c.decodeForwards,
    spec: { max_draft: c.specDraftMax, rounds: c.specRounds, drafted: c.specDrafted, accepted: c.specAccepted, acceptance: c.specDrafted > 0 ? c.specAccepted / c.specDrafted : null },
    load: loadReport(args.load),
  };
}

/** The read piece size as given on the command line (--piece-mb: MiB). */
function pieces(bytes: number): string {
  return bytes === 0 ? "off (one read per expert)" : `${+(bytes / 2 ** 20).toFixed(3)} MiB`;
}

function pct(x: number | null): string {
  return x === null ? "n/a" : `${(100 * x).toFixed(1)}%`;
}

/** The human-readable report. */
export function formatReport(r: RunReport): string {
  const lines = [
    "run report:",
    `  tokens: ${r.prompt_tokens} prompt + ${r.generated_tokens} generated (stop: ${r.stop_reason})`,
    `  prefill: ${r.prefill_seconds.toFixed(3)} s, ${r.prefill_tokens_per_second.toFixed(2)} tok/s${r.prompt_cached_tokens > 0 ? ` (${r.prompt_tokens - r.prompt_cached_tokens} tokens; ${r.prompt_cached_tokens} restored from the prompt cache)` : ""}`,
    `  decode:  ${r.decode_seconds.toFixed(3)} s, ${r.decode_tokens_per_second.toFixed(2)} tok/s`,
    `  wall: ${r.wall_seconds.toFixed(3)} s; threads ${r.threads}; SIMD ${r.simd}; preset ${r.preset}`,
    `  peak RSS: ${fmtBytes(r.peak_rss_bytes)}`,
    `  read: ${fmtBytes(r.bytes_read.total)} (trunk ${fmtBytes(r.bytes_read.trunk)}, experts ${fmtBytes(r.bytes_read.experts)}, embed/head ${fmtBytes(r.bytes_read.embed_head)}), ${fmtBytes(r.bytes_read_per_token)}/token`,
    `  experts: ${r.expert_requests} requests, resident hit rate ${pct(r.resident_hit_rate)}, prefetch hit rate ${pct(r.prefetch_hit_rate)}, drops ${r.expert_drops}`,
    r.prefetch
      ? `  lookahead prefetch: accuracy ${pct(r.prefetch_accuracy)} (${r.prefetch_used} of ${r.prefetch_predicted} predicted experts used), ${r.prefetch_issued} reads issued; pieces ${pieces(r.piece_bytes)}`
      : `  lookahead prefetch: off; pieces ${pieces(r.piece_bytes)}`,
    `  I/O share of wall clock: ${pct(r.io_share)}; overlapped with compute: ${pct(r.io_overlap)}${r.io_engine ? `; reads: ${r.io_engine}${r.io_engine_note ? ` (${r.io_engine_note})` : ""}` : ""}`,
  ];
  if (r.load)
    lines.push(
      `  load: ${fmtBytes(r.load.bytes)} in ${r.load.seconds.toFixed(2)} s = ${r.load.gbps.toFixed(2)} GB/s` +
        (r.load.ceiling_gbps !== null ? ` (ceiling ${r.load.ceiling_gbps.toFixed(2)} GB/s, ${(100 * r.load.ratio!).toFixed(0)}%)` : "") +
        `; ${r.load.page_faults_minor} minor faults; CPU ${r.load.user_seconds.toFixed(2)} s user + ${r.load.system_seconds.toFixed(2)} s sys; ${r.load.method}`,
    );
  if (r.spec.max_draft > 0)
    lines.push(`  speculation (n-gram, up to ${r.spec.max_draft}): ${r.spec.accepted} of ${r.spec.drafted} drafted tokens confirmed (${pct(r.spec.acceptance)}) in ${r.spec.rounds} verification passes; ${r.decode_forwards} decode forwards for ${r.generated_tokens} tokens`);
  for (const d of r.expert_drop_details.slice(0, 3)) lines.push(`  DROPPED layer ${d.layer} expert ${d.expert} (${d.tokens} token(s)): ${d.reason}`);
  if (r.expert_drops > 3) lines.push(`  ... ${r.expert_drops - 3} more drop(s)${r.expert_drops > r.expert_drop_details.length ? ` (the JSON report lists the first ${r.expert_drop_details.length})` : " in the JSON report"}`);
  return lines.join("\n");
}
