/** `k3 plan`: the memory plan a run would make, and --project: the published K3's seconds per token by preset. */
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { EXIT_OK, UsageError } from "../errors.js";
import { PRESET_NAMES, type PresetName } from "../presets.js";
import type { Args, Command } from "./command.js";
import { engineOptions, shardDirsOf, writeJson } from "./shared.js";

export const command: Command = {
  usage: `usage: k3 plan (--model DIR | --published-k3) [--preset P|all] [--trunk DIR | --packed]
               [--project] [--from-report run.json] [--disk-gbps X] [--probe-mb N] [--json FILE]`,
  about: `Prints the memory plan a run would make, before loading anything: parts, pinned layers, ring,
cache slots, and the bytes read per decoded token by source. Without a packed trunk (--trunk DIR
from \`k3 pack\`) the whole trunk is resident, as in the run; --packed plans as if one were given
(the default with --published-k3, the released K3 being larger than every preset but max).

--project: seconds per decoded and per prefilled token of the published K3 (93 layers: 69 KDA,
24 MLA, 1 dense, 92 MoE, 16 experts/token) at each preset (default all), next to kimi-k3-in-c's
published figures (26-33 s/token at 8 GB, 5.59 s with the trunk resident). Compute comes from the
per-layer-kind rates of a run report, resident or streamed (--from-report: k3 run --json's per_kind
and floor; each kind's reads charged at its source's ceiling); I/O is each preset's cold-cache plan
reads by source over the disk bandwidth: --disk-gbps for all, else the report's ceiling of each
source, else a probe of --model's shards with the engine's read pattern (as k3 doctor). Prefill is
at a chunk of T tokens (trunk and lm_head read once, the distinct experts of T; the plan holds its
work buffers): --chunk T, else the report's chunk (its prompt when shorter), else the chunk each
preset's run would plan (auto's pick by memory, the named presets 64).`,
  sections: [
    {
      options: [
        "model",
        "published-k3",
        ["preset", { help: `${PRESET_NAMES.join("|")}|all`, shows: "auto; all with --project", parse: undefined }],
        "trunk",
        "packed",
        "project",
        "from-report",
        "disk-gbps",
        "probe-mb",
        ["json", { help: 'write the plans (or the projection) as JSON ("-" = stdout)' }],
        "layers",
        "trunk-gb",
        "cache-gb",
        "kv-gb",
        "chunk",
        "no-prefetch",
        "shard-dirs",
      ],
    },
  ],
  run,
};

async function run(args: Args): Promise<number> {
  const values = args.values;
  const { censusOf } = await import("../census.js");
  const { readConfig, withLayers } = await import("../config.js");
  const { budgetsFor, formatPlan, planMemory, readMemInfo } = await import("../presets.js");
  const { formatProjection, projectK3, publishedK3, ratesFromReport } = await import("../projection.js");
  const published = values["published-k3"] === true;
  if (published === (typeof values.model === "string")) throw new UsageError("k3 plan: give exactly one of --model DIR and --published-k3");
  const dir = typeof values.model === "string" ? resolve(values.model) : null;
  const cfg = dir ? withLayers(readConfig(dir), values.layers) : publishedK3();
  const presetArg: string = values.preset ?? (values.project ? "all" : "auto");
  if (presetArg !== "all" && !(PRESET_NAMES as readonly string[]).includes(presetArg)) throw new UsageError(`--preset ${presetArg}: expected all or one of ${PRESET_NAMES.join(", ")}`);
  const presets = presetArg === "all" ? [...PRESET_NAMES] : [presetArg as PresetName];
  const mem = readMemInfo();
  const census = censusOf(cfg);
  const { preset: _preset, ...eo } = engineOptions({ ...args, values: { ...values, preset: undefined } }, () => {});
  const packed = values.packed === true || values.trunk !== undefined || published;
  if (!values.project) {
    const plans = presets.map((p) => {
      const plan = planMemory(census, { ...budgetsFor(p, census, mem, eo.chunkSize), ...eo.budgets }, eo.budgets ? "custom" : p, mem, { prefetch: eo.prefetch ?? true, packedTrunk: packed, chunkSize: eo.chunkSize });
      process.stdout.write(formatPlan(plan, cfg.numLayers) + "\n");
      return plan;
    });
    writeJson(values.json, { model: dir ?? "published K3", plans });
    return EXIT_OK;
  }
  let report: Parameters<typeof ratesFromReport>[0] | null = null;
  if (values["from-report"] !== undefined) {
    try {
      report = JSON.parse(readFileSync(resolve(String(values["from-report"])), "utf8"));
    } catch (e) {
      throw new UsageError(`--from-report ${values["from-report"]}: ${(e as Error).message}`);
    }
  }
  const fromReport = report ? ratesFromReport(report) : { rates: {}, prefill: {}, prefillTokens: null, prefillChunk: null, memCeilingGbps: null, diskCeilingGbps: null, sourceCeilings: {} };
  let diskGbps: number;
  let diskSource: string;
  let sourceGbps: { trunk?: number; experts?: number; embedHead?: number } | undefined;
  const sc = fromReport.sourceCeilings;
  if (values["disk-gbps"] !== undefined) {
    diskGbps = values["disk-gbps"];
    diskSource = "--disk-gbps";
  } else if (fromReport.diskCeilingGbps !== null) {
    diskGbps = fromReport.diskCeilingGbps;
    sourceGbps = { trunk: sc.trunk, experts: sc.experts, embedHead: sc.lm_head };
    const named = Object.entries(sourceGbps).filter(([, v]) => v !== undefined).map(([k]) => k);
    diskSource = `the report's measured ceilings${named.length ? ` (${named.join(", ")}: their own; the rest at its overall disk ceiling)` : ""}`;
  } else if (dir) {
    const { probeDisk, PROBE_QUEUE_DEPTH } = await import("../doctor.js");
    const { readdirSync } = await import("node:fs");
    const files = readdirSync(dir).filter((f) => f.endsWith(".safetensors")).map((f) => join(dir, f));
    const p = probeDisk(dir, files, values["probe-mb"] * 1e6, shardDirsOf(values));
    if (!p) throw new UsageError(`k3 plan --project: ${dir}'s shards are too small to probe the disk; give --disk-gbps X`);
    diskGbps = Math.max(p.engine.gbPerSec, p.ceiling.gbPerSec);
    diskSource = `measured here: ${p.reads} expert-sized O_DIRECT reads of ${dir}, ${PROBE_QUEUE_DEPTH} in flight`;
  } else throw new UsageError("k3 plan --project: give --disk-gbps X, a --from-report with floor.disk_ceiling_gbps, or --model DIR to measure the disk");
  // The prefill chunk projected: --chunk, else the report's chunk (its prompt when shorter), else each preset's own.
  const reportChunk = !report ? undefined : fromReport.prefillChunk !== null && fromReport.prefillTokens !== null ? Math.min(fromReport.prefillChunk, fromReport.prefillTokens) : (fromReport.prefillTokens ?? 64);
  const prefillT = eo.chunkSize ?? reportChunk;
  const projection = projectK3({ rates: fromReport.rates, prefill: fromReport.prefill, prefillT, diskGbps, sourceGbps, diskSource, mem, presets });
  process.stdout.write(formatProjection(projection) + "\n");
  writeJson(values.json, projection);
  return EXIT_OK;
}
