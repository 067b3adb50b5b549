/**
 * `k3 plan --project`: seconds per decoded token and per prefilled token of the published Kimi K3
 * (93 layers: 69 KDA, 24 MLA, 1 dense, 92 MoE, 16 experts per token) at each preset, from rates a
 * smaller run measured, resident or with the trunk streamed.
 *
 * - Compute: a run's --json report times each layer kind (report.per_kind.<kind>.<phase>: seconds,
 *   bytes_touched, bytes_read). A kind's compute seconds are its seconds less its reads at the
 *   ceiling of the source it reads (report.floor.sources, KIND_SOURCE: trunk reads at the trunk
 *   ceiling, experts at the experts', lm_head/embed at theirs; an older report's single
 *   disk_ceiling_gbps otherwise). Decode: the rate is bytes_touched / compute seconds (capped at
 *   the memory ceiling: reads that overlapped compute are subtracted too); K3's compute per token is
 *   the sum over kinds of (its layers x weight bytes a token touches per layer) / that rate.
 *   Prefill: compute seconds per prefilled token, scaled by K3's weight bytes of the kind over the
 *   run's (decode bytes touched per token: the same widths, so FLOPs scale with them), at the run's
 *   prefill chunk (its prefilled tokens, e.g. T = 64).
 * - I/O: the plan's cold-cache bytes per decoded token at the preset (packed trunk, as K3 runs below
 *   its trunk size), by source, each over its bandwidth: --disk-gbps for all, else the report's
 *   ceiling of that source (else its overall disk ceiling, else a probe of --model's shards).
 *   Prefill with a chunk of T tokens reads the streamed trunk and lm_head once per chunk and, per
 *   MoE layer, the distinct experts of T tokens: E (1 - (1 - k/E)^T) (flat routing, as K3's).
 * - s/token is given as a range: compute and I/O fully overlapped (max) .. not at all (sum).
 *
 * Anchors (docs/io.md §1): kimi-k3-in-c measured 26-33 s/token at its 8 GB preset
 * (32.69 s, 2x EPYC 7763, NVMe ~3.2-6 GB/s) and 5.59 s/token with the trunk resident (4.6 GB/s NVMe).
 */
import { formatBytes } from "@k3/native";
import { censusOf, kindCensus } from "./census.js";
import { REPORT_KINDS as LAYER_KINDS, type ReportKind } from "./report.js";
import { DISK_SOURCES, KIND_SOURCE, type DiskSource } from "./floor.js";
import { parseConfig, type ModelConfig } from "./config.js";
import { UsageError } from "./errors.js";
import { budgetsFor, GB, planMemory, PRESET_NAMES, type MemInfo, type PresetName } from "./presets.js";
import { publishedK3Config } from "./published.js";

/** One phase of one kind in report.per_kind (the perf report's shape). */
export interface KindPhase {
  seconds: number;
  bytes_touched: number;
  bytes_read: number;
  tokens?: number;
}

/** The parts of a run's --json report the projection reads. */
export interface RatesReport {
  /** The run's prefill chunk (reports before it was recorded have none). */
  chunk_size?: number;
  prompt_tokens?: number;
  prompt_cached_tokens?: number;
  per_kind?: Partial<Record<string, { prefill?: KindPhase; decode?: KindPhase }>>;
  floor?: {
    mem_ceiling_gbps?: number;
    disk_ceiling_gbps?: number;
    prefill_tokens?: number;
    sources?: { source: string; ceiling_gbps: number }[];
  } | null;
}

export interface KindRate {
  /** Weight bytes touched per second of compute (GB/s, 1e9). */
  gbps: number;
  /** Compute seconds per decoded token in the run, and how they were had. */
  runSecondsPerToken: number;
  note: string;
}

/** A kind's prefill compute: seconds per prefilled token per weight byte a decoded token touches. */
export interface PrefillRate {
  /** Compute seconds per prefilled token / the run's weight bytes per (decoded) token of the kind. */
  secondsPerTokenPerByte: number;
  runSecondsPerToken: number;
  note: string;
}

/** Disk bandwidth by plan source (GB/s). */
export interface SourceGbps {
  trunk: number;
  experts: number;
  embedHead: number;
}

/** The published K3 config (the projection's target). */
export function publishedK3(): ModelConfig {
  return parseConfig(publishedK3Config());
}

function checkPhase(kind: string, phase: string, d: KindPhase): void {
  for (const k of ["seconds", "bytes_touched", "bytes_read"] as const)
    if (!Number.isFinite(d[k]) || d[k] < 0) throw new UsageError(`--from-report: per_kind.${kind}.${phase}.${k} is ${JSON.stringify(d[k])}, expected a number >= 0`);
}

/** Compute rates per layer kind from a report's decode and prefill phases (kinds the report lacks are absent). */
export function ratesFromReport(r: RatesReport): {
  rates: Partial<Record<ReportKind, KindRate>>;
  prefill: Partial<Record<ReportKind, PrefillRate>>;
  prefillTokens: number | null;
  /** The run's prefill chunk, when the report records it. */
  prefillChunk: number | null;
  memCeilingGbps: number | null;
  diskCeilingGbps: number | null;
  sourceCeilings: Partial<Record<DiskSource, number>>;
} {
  if (!r.per_kind || typeof r.per_kind !== "object") throw new UsageError("--from-report: the report has no per_kind figures (a k3 run --json report from a build that times each layer kind)");
  const mem = Number(r.floor?.mem_ceiling_gbps) > 0 ? Number(r.floor!.mem_ceiling_gbps) : null;
  const disk = Number(r.floor?.disk_ceiling_gbps) > 0 ? Number(r.floor!.disk_ceiling_gbps) : null;
  const sourceCeilings: Partial<Record<DiskSource, number>> = {};
  for (const x of r.floor?.sources ?? []) if ((DISK_SOURCES as readonly string[]).includes(x.source) && Number(x.ceiling_gbps) > 0) sourceCeilings[x.source as DiskSource] = Number(x.ceiling_gbps);
  /** The ceiling a kind's reads are charged at: its source's, else the report's single disk figure. */
  const ceilingOf = (kind: ReportKind) => {
    const src = KIND_SOURCE[kind];
    const g = src ? sourceCeilings[src] : undefined;
    return g ? { gbps: g, name: `the ${src} ceiling` } : disk ? { gbps: disk, name: "the disk ceiling" } : null;
  };
  const rates: Partial<Record<ReportKind, KindRate>> = {};
  const prefill: Partial<Record<ReportKind, PrefillRate>> = {};
  const pt = Number(r.floor?.prefill_tokens) > 0 ? Number(r.floor!.prefill_tokens) : r.prompt_tokens !== undefined ? r.prompt_tokens - (r.prompt_cached_tokens ?? 0) : 0;
  for (const kind of LAYER_KINDS) {
    const d = r.per_kind[kind]?.decode;
    if (!d) continue;
    checkPhase(kind, "decode", d);
    const tokens = d.tokens ?? 0;
    if (!Number.isInteger(tokens) || tokens < 1) throw new UsageError(`--from-report: per_kind.${kind}.decode.tokens is ${JSON.stringify(d.tokens)}, expected an integer >= 1`);
    if (d.bytes_touched === 0) continue;
    const c = ceilingOf(kind);
    const io = c && d.bytes_read > 0 ? d.bytes_read / (c.gbps * GB) : 0;
    const compute = d.seconds - io;
    if (compute > 0) {
      const gbps = d.bytes_touched / compute / GB;
      const how = io > 0 ? `${d.seconds.toFixed(3)} s less ${io.toFixed(3)} s of reads at ${c!.name} ${c!.gbps.toFixed(2)} GB/s` : `${d.seconds.toFixed(3)} s`;
      // Reads that overlapped compute were subtracted too: no kind touches memory faster than its ceiling.
      if (mem && gbps > mem) rates[kind] = { gbps: mem, runSecondsPerToken: d.bytes_touched / (mem * GB) / tokens, note: `${how}: ${gbps.toFixed(1)} GB/s, above the memory ceiling (reads overlapped): taken at ${mem.toFixed(2)} GB/s` };
      else rates[kind] = { gbps, runSecondsPerToken: compute / tokens, note: how };
    } else if (mem) {
      // All of its time was reading: its compute is not measurable here; count it at the memory ceiling.
      rates[kind] = { gbps: mem, runSecondsPerToken: d.bytes_touched / (mem * GB) / tokens, note: `I/O-bound in the run: compute taken at the memory ceiling ${mem.toFixed(2)} GB/s` };
    }
    const p = r.per_kind[kind]?.prefill;
    if (!p || pt < 1) continue;
    checkPhase(kind, "prefill", p);
    const pio = c && p.bytes_read > 0 ? p.bytes_read / (c.gbps * GB) : 0;
    const perToken = Math.max(0, p.seconds - pio) / pt;
    const bytesPerToken = d.bytes_touched / tokens;
    prefill[kind] = { secondsPerTokenPerByte: perToken / bytesPerToken, runSecondsPerToken: perToken, note: pio > 0 ? `${(p.seconds / pt * 1000).toFixed(2)} ms/token less ${(pio / pt * 1000).toFixed(2)} of reads` : `${(p.seconds / pt * 1000).toFixed(2)} ms/token` };
  }
  const chunk = Number(r.chunk_size) > 0 ? Number(r.chunk_size) : null;
  return { rates, prefill, prefillTokens: pt > 0 ? pt : null, prefillChunk: chunk, memCeilingGbps: mem, diskCeilingGbps: disk, sourceCeilings };
}

export interface ProjectionRow {
  preset: PresetName | "resident";
  memoryBytes: number;
  readBytesPerToken: number;
  /** Decode I/O seconds per token (each plan source over its bandwidth). */
  ioSeconds: number;
  /** Null when some kind has no measured rate. */
  computeSeconds: number | null;
  /** max(compute, I/O) .. compute + I/O; I/O alone when compute is unknown. */
  overlappedSeconds: number;
  serialSeconds: number | null;
  /** The prefill chunk this row assumes: the one given, else the one its preset's run plans (auto's pick, else 64). */
  prefillT: number;
  /** Prefill per token at a chunk of prefillT tokens: bytes read, I/O, compute (null without prefill rates), range. */
  prefill: { readBytesPerToken: number; ioSeconds: number; computeSeconds: number | null; overlappedSeconds: number; serialSeconds: number | null };
  anchor: string;
}

export interface Projection {
  model: string;
  diskGbps: number;
  diskSource: string;
  /** Bandwidth used per plan source (GB/s). */
  sourceGbps: SourceGbps;
  /** The prefill chunk every row assumes (--chunk, or the report's); null: each row's own (ProjectionRow.prefillT). */
  prefillT: number | null;
  /** Kinds: layers of the target, weight bytes per layer per token, the rate used, K3 seconds per token. */
  kinds: { kind: ReportKind; layers: number; bytesPerLayer: number; gbps: number | null; seconds: number | null; prefillSeconds: number | null; note: string }[];
  computeSeconds: number | null;
  prefillComputeSeconds: number | null;
  rows: ProjectionRow[];
}

const ANCHORS: Partial<Record<PresetName | "resident", string>> = {
  laptop: "kimi-k3-in-c 8 GB preset: 26-33 s/token (32.69 s measured)",
  resident: "kimi-k3-in-c trunk resident: 5.59 s/token (4.6 GB/s NVMe)",
};

/** Distinct experts per MoE layer that T tokens select (top-k of E, flat routing). */
export function distinctExperts(E: number, k: number, T: number): number {
  return E * (1 - Math.pow(1 - k / E, T));
}

/** Projects s/token of `cfg` (default: the published K3) at each preset from per-kind rates and disk bandwidths. */
export function projectK3(o: {
  rates: Partial<Record<ReportKind, KindRate>>;
  prefill?: Partial<Record<ReportKind, PrefillRate>>;
  prefillT?: number;
  diskGbps: number;
  /** Per-source bandwidths overriding diskGbps (the report's measured ceilings). */
  sourceGbps?: Partial<SourceGbps>;
  diskSource: string;
  mem: MemInfo;
  presets?: readonly PresetName[];
  cfg?: ModelConfig;
}): Projection {
  if (!(o.diskGbps > 0) || !Number.isFinite(o.diskGbps)) throw new UsageError(`--disk-gbps ${o.diskGbps}: expected a bandwidth in GB/s > 0`);
  const cfg = o.cfg ?? publishedK3();
  const kc = kindCensus(cfg);
  const bw: SourceGbps = { trunk: o.sourceGbps?.trunk ?? o.diskGbps, experts: o.sourceGbps?.experts ?? o.diskGbps, embedHead: o.sourceGbps?.embedHead ?? o.diskGbps };
  const kinds = LAYER_KINDS.map((kind) => {
    const { layers, bytesPerLayer } = kc[kind];
    const rate = o.rates[kind];
    const pre = o.prefill?.[kind];
    const bytes = layers * bytesPerLayer;
    return {
      kind,
      layers,
      bytesPerLayer,
      gbps: rate?.gbps ?? null,
      seconds: bytes === 0 ? 0 : rate ? bytes / (rate.gbps * GB) : null,
      prefillSeconds: bytes === 0 ? 0 : pre ? pre.secondsPerTokenPerByte * bytes : null,
      note: rate?.note ?? (bytes === 0 ? "none in this model" : "not in the report"),
    };
  });
  const total = (key: "seconds" | "prefillSeconds") => (kinds.every((k) => k[key] !== null) ? kinds.reduce((a, k) => a + k[key]!, 0) : null);
  const computeSeconds = total("seconds");
  const prefillComputeSeconds = total("prefillSeconds");
  const census = censusOf(cfg);
  const E = cfg.moe.numExperts;
  const k = cfg.moe.topK;
  const expertShare = (T: number) => (E > 0 && k > 0 ? distinctExperts(E, k, T) / (T * k) : 0);
  const io = (r: { trunk: number; experts: number; embedHead: number }) => r.trunk / (bw.trunk * GB) + r.experts / (bw.experts * GB) + r.embedHead / (bw.embedHead * GB);
  const range = (ioS: number, c: number | null) => ({ overlappedSeconds: c === null ? ioS : Math.max(ioS, c), serialSeconds: c === null ? null : ioS + c });
  const row = (preset: ProjectionRow["preset"], plan: ReturnType<typeof planMemory>): ProjectionRow => {
    const r = plan.expectedReads;
    const ioS = io(r);
    const T = plan.chunkSize;
    // Prefill: trunk and lm_head once per chunk, the chunk's distinct experts, one embedding row per token.
    const pr = { trunk: r.trunk / T, experts: r.experts * expertShare(T), embedHead: r.embedHead > 0 ? census.headBytes / T + census.embedRowBytes : 0 };
    const pio = io(pr);
    return {
      preset,
      memoryBytes: plan.totalBytes,
      readBytesPerToken: plan.expectedBytesPerToken,
      ioSeconds: ioS,
      computeSeconds,
      ...range(ioS, computeSeconds),
      prefillT: T,
      prefill: { readBytesPerToken: pr.trunk + pr.experts + pr.embedHead, ioSeconds: pio, computeSeconds: prefillComputeSeconds, ...range(pio, prefillComputeSeconds) },
      anchor: ANCHORS[preset] ?? "",
    };
  };
  // Each plan with the work buffers of its prefill chunk, as k3 run plans it: --chunk T when given,
  // else the preset's own (auto picks one by memory, the named presets keep the default).
  const rows = (o.presets ?? PRESET_NAMES).map((p) => {
    const budgets = budgetsFor(p, census, o.mem, o.prefillT);
    return row(p, planMemory(census, budgets, p, o.mem, { packedTrunk: true, chunkSize: o.prefillT ?? budgets.chunkSize }));
  });
  // The whole trunk and embed/head resident, no expert cache: only the experts stream.
  const resident = planMemory(census, { trunkBytes: census.trunkBytes, cacheBytes: 0, kvBytes: GB, ringSlots: 2, streamEmbedHead: false }, "custom", o.mem, { packedTrunk: true, chunkSize: o.prefillT });
  rows.push(row("resident", resident));
  return {
    model: `${cfg.family === "k3" ? "Kimi K3" : "Kimi-Linear"} (${cfg.numLayers} layers: ${kc.kda.layers} KDA, ${kc.mla.layers} MLA, ${kc.dense_mlp.layers} dense, ${kc.moe_trunk.layers} MoE, ${cfg.moe.topK} experts/token)`,
    diskGbps: o.diskGbps,
    diskSource: o.diskSource,
    sourceGbps: bw,
    prefillT: o.prefillT ?? null,
    kinds,
    computeSeconds,
    prefillComputeSeconds,
    rows,
  };
}

const s = (x: number | null, d = 2) => (x === null ? "n/a" : x.toFixed(d));

/** The projection as printed by `k3 plan --project`. */
export function formatProjection(p: Projection): string {
  const b = p.sourceGbps;
  const same = b.trunk === b.experts && b.experts === b.embedHead;
  const lines = [`projection for ${p.model}, disk ${same ? `${p.diskGbps.toFixed(2)} GB/s` : `trunk ${b.trunk.toFixed(2)}, experts ${b.experts.toFixed(2)}, embed/head ${b.embedHead.toFixed(2)} GB/s`} (${p.diskSource}):`];
  lines.push(`  compute per token, by layer kind (rates from the report; prefill at ${p.prefillT === null ? "each preset's chunk: auto's pick by memory, else 64" : `a chunk of ${p.prefillT} tokens`}):`);
  lines.push(`    ${"kind".padEnd(12)} ${"layers".padStart(6)} ${"bytes/layer".padStart(12)} ${"GB/s".padStart(7)} ${"decode s".padStart(8)} ${"prefill s".padStart(9)}  how (decode)`);
  for (const k of p.kinds) lines.push(`    ${k.kind.padEnd(12)} ${String(k.layers).padStart(6)} ${formatBytes(k.bytesPerLayer).padStart(12)} ${s(k.gbps).padStart(7)} ${s(k.seconds, 3).padStart(8)} ${s(k.prefillSeconds, 3).padStart(9)}  ${k.note}`);
  lines.push(`    ${"total".padEnd(12)} ${"".padStart(6)} ${"".padStart(12)} ${"".padStart(7)} ${s(p.computeSeconds, 3).padStart(8)} ${s(p.prefillComputeSeconds, 3).padStart(9)}${p.computeSeconds === null ? "  (give --from-report run.json with per_kind for compute; s/token below is the I/O floor)" : ""}`);
  lines.push("  s/token = max(compute, I/O) (fully overlapped) .. compute + I/O (not overlapped); I/O = cold-cache plan reads / disk:");
  lines.push(`    ${"preset".padEnd(12)} ${"memory".padStart(10)} ${"read/token".padStart(11)} ${"I/O s".padStart(7)} ${"compute s".padStart(9)}  ${"decode s/token".padEnd(15)} ${"chunk".padStart(5)} ${"prefill read".padStart(12)} ${"I/O s".padStart(6)} ${"compute".padStart(7)}  ${"prefill s/token".padEnd(15)} reference`);
  const rng = (lo: number, hi: number | null) => (hi === null ? `>= ${lo.toFixed(1)}` : `${lo.toFixed(1)} .. ${hi.toFixed(1)}`);
  const rngP = (lo: number, hi: number | null) => (hi === null ? `>= ${lo.toFixed(2)}` : `${lo.toFixed(2)} .. ${hi.toFixed(2)}`);
  for (const r of p.rows) {
    lines.push(
      `    ${r.preset.padEnd(12)} ${formatBytes(r.memoryBytes).padStart(10)} ${formatBytes(r.readBytesPerToken).padStart(11)} ${r.ioSeconds.toFixed(2).padStart(7)} ${s(r.computeSeconds).padStart(9)}  ${rng(r.overlappedSeconds, r.serialSeconds).padEnd(15)} ` +
        `${String(r.prefillT).padStart(5)} ${formatBytes(r.prefill.readBytesPerToken).padStart(12)} ${r.prefill.ioSeconds.toFixed(2).padStart(6)} ${s(r.prefill.computeSeconds).padStart(7)}  ${rngP(r.prefill.overlappedSeconds, r.prefill.serialSeconds).padEnd(15)} ${r.anchor}`,
    );
  }
  return lines.join("\n");
}
