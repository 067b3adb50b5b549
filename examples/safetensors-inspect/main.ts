// Lists a checkpoint with @k3/safetensors, then loads one expert with a single read.
//   pnpm --filter example-safetensors-inspect start [checkpoint-dir]
// Without an argument it uses fixtures/models/tiny-k3 when present, otherwise it writes a small
// checkpoint in the K3 layout (experts in lexicographic id order, 6 adjacent tensors each).
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ShardedCheckpointWriter, formatSummary, openCheckpoint, summarize } from "@k3/safetensors";

const quick = process.argv.includes("--quick");
const arg = process.argv.slice(2).find((a) => !a.startsWith("--"));
const fixture = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "fixtures", "models", "tiny-k3");

/** A 2-layer checkpoint in the K3 layout, written with the streaming sharded writer. */
function writeDemo(dir: string): void {
  const w = new ShardedCheckpointWriter(dir, { shardMetadata: { format: "pt" } });
  const bytes = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * 31 + seed) & 255);
  w.add("language_model.model.embed_tokens.weight", "BF16", [64, 16], bytes(64 * 16 * 2, 1));
  for (let l = 0; l < 2; l++) {
    const p = `language_model.model.layers.${l}.`;
    w.add(`${p}input_layernorm.weight`, "BF16", [16], bytes(32, l));
    w.add(`${p}block_sparse_moe.gate.weight`, "BF16", [12, 16], bytes(12 * 16 * 2, l));
    for (const e of Array.from({ length: 12 }, (_, i) => String(i)).sort()) {
      for (const m of ["w1", "w2", "w3"]) {
        w.add(`${p}block_sparse_moe.experts.${e}.${m}.weight_packed`, "U8", [8, 4], bytes(32, Number(e)));
        w.add(`${p}block_sparse_moe.experts.${e}.${m}.weight_scale`, "U8", [8, 1], bytes(8, Number(e)));
      }
    }
    w.nextShard();
  }
  w.add("language_model.lm_head.weight", "BF16", [64, 16], bytes(64 * 16 * 2, 2));
  w.finish();
}

let dir = arg ?? (!process.argv.includes("--demo") && existsSync(join(fixture, "model.safetensors.index.json")) ? fixture : "");
if (!dir) {
  dir = mkdtempSync(join(tmpdir(), "k3-inspect-"));
  writeDemo(dir);
  console.log(`(no fixtures/models/tiny-k3 yet: wrote a demo checkpoint to ${dir})\n`);
}

const t0 = performance.now();
const ck = await openCheckpoint(dir);
const ms = performance.now() - t0;
const summary = summarize(ck);
console.log(formatSummary(summary, dir));
console.log(`\nindexed ${ck.size} tensors in ${ms.toFixed(1)} ms with the ${ck.backend} parser`);

// One expert = one contiguous byte range = one read.
const moeLayer = ck.layerNumbers().find((l) => ck.layer(l).expertIds.length > 0);
if (moeLayer !== undefined) {
  const experts = ck.experts(moeLayer);
  const last = experts[experts.length - 1];
  console.log(`\nlayer ${moeLayer}: ${experts.length} experts; expert ${last.id} is ${last.byteLength} bytes at ${last.file.split("/").pop()}:${last.offset} (${last.tensors.length} tensors, contiguous: ${last.contiguous})`);
  const run = await ck.readRun(last.tensors.map((t) => t.name));
  let at = 0;
  for (const t of last.tensors) {
    const alone = await ck.read(t.name);
    if (Buffer.compare(Buffer.from(alone), Buffer.from(run.subarray(at, at + t.byteLength))) !== 0) throw new Error(`run bytes differ for ${t.name}`);
    at += t.byteLength;
  }
  console.log(`read it with one readRun (${run.byteLength} bytes) and checked it against ${last.tensors.length} separate reads`);
  if (summary.layers.some((l) => l.scatteredExperts > 0)) throw new Error("some experts are not contiguous");
}
await ck.close();
if (quick) console.log("\nsmoke test ok");
