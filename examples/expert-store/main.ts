// Example: the pieces of @k3/moe-stream on the tiny K3 checkpoint in fixtures/models/tiny-k3
// (the released layout, random weights). How many layers, ring and cache slots the real Kimi K3
// gets under a budget is the engine's memory plan: `k3 plan --published-k3 --preset laptop`.
//   pnpm --filter example-expert-store start          (--quick: fewer tokens, for the smoke test)
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ExpertStore,
  TrunkStreamer,
  formatBytes,
  openCheckpointIndex,
  packTrunk,
  progressPrinter,
} from "@k3/moe-stream";

const quick = process.argv.includes("--quick");
const modelDir = join(import.meta.dirname, "..", "..", "fixtures", "models", "tiny-k3");
const config = JSON.parse(readFileSync(join(modelDir, "config.json"), "utf8"));

// 1. Where every expert lives: one contiguous run per expert, offsets from the shard headers.
const ckpt = openCheckpointIndex(modelDir);
const moeLayers = [...Array(config.text_config.num_hidden_layers).keys()].filter((l) => ckpt.experts(l).length > 0);
const experts = moeLayers.flatMap((l) => ckpt.experts(l));
console.log(`${experts.length} experts in ${moeLayers.length} MoE layers, ${experts[0].byteLength} B each`);

// 2. The store: O_DIRECT reads on its own threads, 4 cache slots per layer, 6 streaming slots.
const store = ExpertStore.open({ experts, slotsPerLayer: 4, ioSlots: 6, readers: 4 });
let seed = 1;
const rand = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
for (let token = 0; token < (quick ? 3 : 20); token++) {
  for (const layer of moeLayers) {
    const ids = new Set<number>();
    while (ids.size < config.text_config.num_experts_per_token) ids.add(Math.floor(rand() * config.text_config.num_experts));
    for await (const e of store.request(layer, [...ids]).completed()) {
      // e.bytes is a zero-copy view of the expert's six MXFP4 tensors; hand it to the kernels here.
      e.release();
    }
  }
}
const s = store.stats();
console.log(
  `expert store: ${s.requests} requests, resident hit rate ${(s.residentHitRate * 100).toFixed(1)} %, ` +
    `${s.reads} reads (${s.directReads} O_DIRECT), ${formatBytes(s.bytesRequested)} requested, ${formatBytes(s.deviceBytes)} from the device`,
);
store.close();

// 3. Pack the trunk (every non-expert weight) into one 4 KiB-aligned file, then stream it.
const out = mkdtempSync(join(tmpdir(), "k3-example-trunk-"));
try {
  const packed = await packTrunk(modelDir, out, { onProgress: progressPrinter(process.stderr) });
  console.log(`trunk: ${packed.manifest.groups.length} groups, ${formatBytes(packed.manifest.bytes)}`);
  const trunk = await TrunkStreamer.open({ dir: out, pinnedLayers: [0], ringSlots: 2, chunkBytes: 64 << 10 });
  for (let l = 0; l < config.text_config.num_hidden_layers; l++) {
    const layer = await trunk.acquire(l);
    layer.release();
  }
  const ts = trunk.stats();
  console.log(`trunk streamer: ${ts.layerLoads} layer loads, ${ts.aheadLoads} started ahead (ring of ${ts.ringSlots})`);
  trunk.close();
} finally {
  rmSync(out, { recursive: true, force: true });
}
