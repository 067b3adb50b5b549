/**
 * `k3 plan --project`: seconds per decoded token of the published Kimi K3 (93 layers: 69 KDA,
 * 24 MLA, 1 dense, 92 MoE, 16 experts per token) at each preset, from rates a smaller run measured.
 *
 * - Compute: a run's --json report times each layer kind (report.per_kind.<kind>.decode: seconds,
 *   bytes_touched, bytes_read, tokens). A kind's compute rate is bytes_touched / compute seconds,
 *   where compute seconds = seconds - bytes_read / the run's disk ceiling (report.floor): the I/O
 *   the kind waited for at most (reads that overlapped compute are subtracted too, so a rate above the
 *   memory ceiling is capped at it). K3's compute per token is
 *   the sum over kinds of (its layers x weight bytes a token touches per layer) / that rate.
 * - I/O: the plan's cold-cache bytes read per decoded token at the preset (packed trunk, as K3 runs
 *   below its trunk size) / the disk bandwidth (--disk-gbps, else the report's disk ceiling, else a
 *   probe of --model's shards with the engine's own pattern).
 * - s/token is given as a range: compute and I/O fully overlapped (max) .. not at all (sum).
 *
 * Anchors (streaming.md §1a, §2.2): kimi-k3-in-c measured 26-33 s/token at its 8 GB preset
 * (32.69 s, 2x EPYC 7763, NVMe ~3.2-6 GB/s) and 5.59 s/token with the trunk resident (4.6 GB/s NVMe).
 */
import { censusOf, kindCensus } from "./census.js";
import { REPORT_KINDS as LAYER_KINDS, type ReportKind } from "./report.js";
import { parseConfig, type ModelConfig } from "./config.js";
import { UsageError } from "./errors.js";
import { budgetsFor, fmtBytes, GB, planMemory, PRESET_NAMES, type MemInfo, type PresetName } from "./presets.js";
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
  per_kind?: Partial<Record<string, { prefill?: KindPhase; decode?: KindPhase }>>;
  floor?: { mem_ceiling_gbps?: number; disk_ceiling_gbps?: number } | null;
}

export interface KindRate {
  /** Weight bytes touched per second of compute (GB/s, 1e9). */
  gbps: number;
  /** Compute seconds per decoded token in the run, and how they were had. */
  runSecondsPerToken: number;
  note: string;
}

/** The published K3 config (the projection's target). */
export function publishedK3(): ModelConfig {
  return parseConfig(publishedK3Config());
}

/** Compute rates per layer kind from a report's decode phase (kinds the report lacks are absent). */
export function ratesFromReport(r: RatesReport): { rates: Partial<Record<ReportKind, KindRate>>; memCeilingGbps: number | null; diskCeilingGbps: number | null } {
  if (!r.per_kind || typeof r.per_kind !== "object") throw new UsageError("--from-report: the report has no per_kind figures (a k3 run --json report from a build that times each layer kind)");
  const mem = Number(r.floor?.mem_ceiling_gbps) > 0 ? Number(r.floor!.mem_ceiling_gbps) : null;
  const disk = Number(r.floor?.disk_ceiling_gbps) > 0 ? Number(r.floor!.disk_ceiling_gbps) : null;
  const rates: Partial<Record<ReportKind, KindRate>> = {};
  for (const kind of LAYER_KINDS) {
    const d = r.per_kind[kind]?.decode;
    if (!d) continue;
    for (const k of ["seconds", "bytes_touched", "bytes_read"] as const)
      if (!Number.isFinite(d[k]) || d[k] < 0) throw new UsageError(`--from-report: per_kind.${kind}.decode.${k} is ${JSON.stringify(d[k])}, expected a number >= 0`);
    const tokens = d.tokens ?? 0;
    if (!Number.isInteger(tokens) || tokens < 1) throw new UsageError(`--from-report: per_kind.${kind}.decode.tokens is ${JSON.stringify(d.tokens)}, expected an integer >= 1`);
    if (d.bytes_touched === 0) continue;
    const io = disk && d.bytes_read > 0 ? d.bytes_read / (disk * GB) : 0;
    const compute = d.seconds - io;
    if (compute > 0) {
      const gbps = d.bytes_touched / compute / GB;
      const how = io > 0 ? `${d.seconds.toFixed(3)} s less ${io.toFixed(3)} s of reads at ${disk!.toFixed(2)} GB/s` : `${d.seconds.toFixed(3)} s`;
      // Reads that overlapped compute were subtracted too: no kind touches memory faster than its ceiling.
      if (mem && gbps > mem) rates[kind] = { gbps: mem, runSecondsPerToken: d.bytes_touched / (mem * GB) / tokens, note: `${how}: ${gbps.toFixed(1)} GB/s, above the memory ceiling (reads overlapped): taken at ${mem.toFixed(2)} GB/s` };
      else rates[kind] = { gbps, runSecondsPerToken: compute / tokens, note: how };
    } else if (mem) {
      // All of its time was reading: its compute is not measurable here; count it at the memory ceiling.
      rates[kind] = { gbps: mem, runSecondsPerToken: d.bytes_touched / (mem * GB) / tokens, note: `I/O-bound in the run: compute taken at the memory ceiling ${mem.toFixed(2)} GB/s` };
    }
  }
  return { rates, memCeilingGbps: mem, diskCeilingGbps: disk };
}

export interface ProjectionRow {
  preset: PresetName | "resident";
  memoryBytes: number;
  readBytesPerToken: number;
  ioSeconds: number;
  /** Null when some kind has no measured rate. */
  computeSeconds: number | null;
  /** max(compute, I/O) .. compute + I/O; I/O alone when compute is unknown. */
  overlappedSeconds: number;
  serialSeconds: number | null;
  anchor: string;
}

export interface Projection {
  model: string;
  diskGbps: number;
  diskSource: string;
  /** Kinds: layers of the target, weight bytes per layer per token, the rate used, K3 seconds per token. */
  kinds: { kind: ReportKind; layers: number; bytesPerLayer: number; gbps: number | null; seconds: number | null; note: string }[];
  computeSeconds: number | null;
  rows: ProjectionRow[];
}

const ANCHORS: Partial<Record<PresetName | "resident", string>> = {
  laptop: "kimi-k3-in-c 8 GB preset: 26-33 s/token (32.69 s measured)",
  resident: "kimi-k3-in-c trunk resident: 5.59 s/token (4.6 GB/s NVMe)",
};

/** Projects s/token of `cfg` (default: the published K3) at each preset from per-kind rates and a disk bandwidth. */
export function projectK3(o: { rates: Partial<Record<ReportKind, KindRate>>; diskGbps: number; diskSource: string; mem: MemInfo; presets?: readonly PresetName[]; cfg?: ModelConfig }): Projection {
  if (!(o.diskGbps > 0) || !Number.isFinite(o.diskGbps)) throw new UsageError(`--disk-gbps ${o.diskGbps}: expected a bandwidth in GB/s > 0`);
  const cfg = o.cfg ?? publishedK3();
  const kc = kindCensus(cfg);
  const kinds = LAYER_KINDS.map((kind) => {
    const { layers, bytesPerLayer } = kc[kind];
    const rate = o.rates[kind];
    const bytes = layers * bytesPerLayer;
    return { kind, layers, bytesPerLayer, gbps: rate?.gbps ?? null, seconds: bytes === 0 ? 0 : rate ? bytes / (rate.gbps * GB) : null, note: rate?.note ?? (bytes === 0 ? "none in this model" : "not in the report") };
  });
  const computeSeconds = kinds.every((k) => k.seconds !== null) ? kinds.reduce((a, k) => a + k.seconds!, 0) : null;
  const census = censusOf(cfg);
  const row = (preset: ProjectionRow["preset"], plan: ReturnType<typeof planMemory>): ProjectionRow => {
    const io = plan.expectedBytesPerToken / (o.diskGbps * GB);
    return {
      preset,
      memoryBytes: plan.totalBytes,
      readBytesPerToken: plan.expectedBytesPerToken,
      ioSeconds: io,
      computeSeconds,
      overlappedSeconds: computeSeconds === null ? io : Math.max(io, computeSeconds),
      serialSeconds: computeSeconds === null ? null : io + computeSeconds,
      anchor: ANCHORS[preset] ?? "",
    };
  };
  const rows = (o.presets ?? PRESET_NAMES).map((p) => row(p, planMemory(census, budgetsFor(p, census, o.mem), p, o.mem, { packedTrunk: true })));
  // The whole trunk and embed/head resident, no expert cache: only the experts stream.
  const resident = planMemory(census, { trunkBytes: census.trunkBytes, cacheBytes: 0, kvBytes: GB, ringSlots: 2, streamEmbedHead: false }, "custom", o.mem, { packedTrunk: true });
  rows.push(row("resident", resident));
  return { model: `${cfg.family === "k3" ? "Kimi K3" : "Kimi-Linear"} (${cfg.numLayers} layers: ${kc.kda.layers} KDA, ${kc.mla.layers} MLA, ${kc.dense_mlp.layers} dense, ${kc.moe_trunk.layers} MoE, ${cfg.moe.topK} experts/token)`, diskGbps: o.diskGbps, diskSource: o.diskSource, kinds, computeSeconds, rows };
}

const s = (x: number | null, d = 2) => (x === null ? "n/a" : x.toFixed(d));

/** The projection as printed by `k3 plan --project`. */
export function formatProjection(p: Projection): string {
  const lines = [`projection for ${p.model}, disk ${p.diskGbps.toFixed(2)} GB/s (${p.diskSource}):`];
  lines.push("  compute per decoded token, by layer kind (rates from the report):");
  lines.push(`    ${"kind".padEnd(12)} ${"layers".padStart(6)} ${"bytes/layer".padStart(12)} ${"GB/s".padStart(7)} ${"s/token".padStart(8)}  how`);
  for (const k of p.kinds) lines.push(`    ${k.kind.padEnd(12)} ${String(k.layers).padStart(6)} ${fmtBytes(k.bytesPerLayer).padStart(12)} ${s(k.gbps).padStart(7)} ${s(k.seconds, 3).padStart(8)}  ${k.note}`);
  lines.push(`    ${"total".padEnd(12)} ${"".padStart(6)} ${"".padStart(12)} ${"".padStart(7)} ${s(p.computeSeconds, 3).padStart(8)}${p.computeSeconds === null ? "  (give --from-report run.json with per_kind for compute; s/token below is the I/O floor)" : ""}`);
  lines.push("  s/token = max(compute, I/O) (fully overlapped) .. compute + I/O (not overlapped); I/O = cold-cache plan reads / disk:");
  lines.push(`    ${"preset".padEnd(12)} ${"memory".padStart(10)} ${"read/token".padStart(11)} ${"I/O s".padStart(7)} ${"compute s".padStart(9)}  ${"s/token".padEnd(15)} reference`);
  for (const r of p.rows) {
    const range = r.serialSeconds === null ? `>= ${r.overlappedSeconds.toFixed(1)}` : `${r.overlappedSeconds.toFixed(1)} .. ${r.serialSeconds.toFixed(1)}`;
    lines.push(`    ${r.preset.padEnd(12)} ${fmtBytes(r.memoryBytes).padStart(10)} ${fmtBytes(r.readBytesPerToken).padStart(11)} ${r.ioSeconds.toFixed(2).padStart(7)} ${s(r.computeSeconds).padStart(9)}  ${range.padEnd(15)} ${r.anchor}`);
  }
  return lines.join("\n");
}
