// Example: the pieces of @k3/moe-stream on the tiny K3 checkpoint in fixtures/models/tiny-k3
// (the released layout, random weights), plus a memory plan for the real Kimi K3 at 8 GB.
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
  planMemory,
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

// 4. What the real Kimi K3 would get at 8 GB (config shape from the published text_config).
const tc = config.text_config;
const k3 = {
  quantization_config: config.quantization_config,
  text_config: {
    ...tc, hidden_size: 7168, num_hidden_layers: 93, vocab_size: 163840, num_experts: 896, num_experts_per_token: 16,
    moe_intermediate_size: 3072, routed_expert_hidden_size: 3584, intermediate_size: 33792, num_attention_heads: 96,
    q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128,
    linear_attn_config: { ...tc.linear_attn_config, num_heads: 96, head_dim: 128,
      full_attn_layers: [...Array.from({ length: 23 }, (_, i) => 4 * (i + 1)), 93],
      kda_layers: Array.from({ length: 93 }, (_, i) => i + 1).filter((l) => l % 4 !== 0 && l !== 93) },
  },
};
const plan = planMemory({ config: k3, budgetBytes: 8e9, reservedBytes: 1e9 });
console.log(
  `K3 at 8 GB: ${plan.pinnedLayers.length} pinned layers, ring ${plan.ringSlots} x ${formatBytes(plan.ringSlotBytes)} (overlap ${plan.trunkOverlap}), ` +
    `${plan.cacheSlotsPerLayer} cache slots/layer, ${(plan.bytesPerTokenNoCache / 1e9).toFixed(1)} GB read per token`,
);
