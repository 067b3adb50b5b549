/**
 * A summary of a checkpoint (used by the `k3-safetensors` CLI and the inspect example): tensor
 * and byte counts by dtype and by layer, and the layout facts a streaming engine relies on
 * (is every expert one contiguous range? is every layer's trunk one run?).
 */
import type { Checkpoint } from "./checkpoint.js";
import { DTYPES } from "./dtypes.js";
import { KIND_EXPERT, KIND_GLOBAL } from "./table.js";
import { formatBytes } from "@k3/native";

export interface LayerSummary {
  layer: number;
  tensors: number;
  trunkBytes: number;
  trunkRuns: number;
  experts: number;
  expertBytes: number;
  /** Experts whose tensors are not one contiguous byte range. */
  scatteredExperts: number;
}

export interface CheckpointSummary {
  files: number;
  tensors: number;
  dataBytes: number;
  byDtype: Record<string, { tensors: number; bytes: number }>;
  globals: { tensors: number; bytes: number };
  layers: LayerSummary[];
  warnings: string[];
}

/** Counts from the column tables (no per-tensor objects except for trunk runs and experts). */
export function summarize(ck: Checkpoint): CheckpointSummary {
  const byDtype: Record<string, { tensors: number; bytes: number }> = {};
  const globals = { tensors: 0, bytes: 0 };
  for (const t of ck.headerTables) {
    for (let i = 0; i < t.count; i++) {
      const d = DTYPES[t.dtype[i]];
      const bytes = t.end[i] - t.begin[i];
      const slot = (byDtype[d] ??= { tensors: 0, bytes: 0 });
      slot.tensors++;
      slot.bytes += bytes;
      if (t.kind[i] === KIND_GLOBAL) {
        globals.tensors++;
        globals.bytes += bytes;
      }
    }
  }
  const layers = ck.layerNumbers().map((l): LayerSummary => {
    const info = ck.layer(l);
    const experts = info.expertIds.length ? ck.experts(l) : [];
    const expertTensors = experts.reduce((a, e) => a + e.tensors.length, 0);
    return {
      layer: l,
      tensors: info.trunk.length + expertTensors,
      trunkBytes: info.trunk.reduce((a, t) => a + t.byteLength, 0),
      trunkRuns: info.trunkRuns.length,
      experts: experts.length,
      expertBytes: info.expertBytes,
      scatteredExperts: experts.filter((e) => !e.contiguous).length,
    };
  });
  let dataBytes = 0;
  for (const v of Object.values(byDtype)) dataBytes += v.bytes;
  return { files: ck.files.length, tensors: ck.size, dataBytes, byDtype, globals, layers, warnings: [...ck.warnings] };
}

export { formatBytes };

/** The summary as text. */
export function formatSummary(s: CheckpointSummary, title: string): string {
  const lines = [`${title}: ${s.tensors} tensors in ${s.files} file(s), ${formatBytes(s.dataBytes)} of tensor data`, "", "by dtype:"];
  for (const [d, v] of Object.entries(s.byDtype).sort((a, b) => b[1].bytes - a[1].bytes)) {
    lines.push(`  ${d.padEnd(12)} ${String(v.tensors).padStart(8)} tensors  ${formatBytes(v.bytes).padStart(10)}`);
  }
  lines.push("", `outside layers: ${s.globals.tensors} tensors, ${formatBytes(s.globals.bytes)}`);
  if (s.layers.length) {
    lines.push("", "by layer:  layer  tensors  trunk (runs)          experts  expert bytes  scattered");
    for (const l of s.layers) {
      lines.push(
        `           ${String(l.layer).padStart(5)}  ${String(l.tensors).padStart(7)}  ${formatBytes(l.trunkBytes).padStart(10)} (${l.trunkRuns})${" ".repeat(Math.max(1, 9 - String(l.trunkRuns).length))}${String(l.experts).padStart(7)}  ${formatBytes(l.expertBytes).padStart(12)}  ${String(l.scatteredExperts).padStart(9)}`,
      );
    }
  }
  for (const w of s.warnings) lines.push(`warning: ${w}`);
  return lines.join("\n");
}
