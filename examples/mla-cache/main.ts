/**
 * The MLA latent cache: layer 3 of the tiny K3 checkpoint (an MLA layer: full_attn_layers is
 * 1-based) prefills a prompt into a cache of kv_lora + rope values per position, decodes more
 * tokens, saves and restores the cache, and shows what a bf16 cache and K3's real dims cost.
 *   pnpm --filter example-mla-cache start        (--quick: fewer tokens, used by `test`)
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { openCheckpointSync } from "@k3/safetensors";
import { K3_MLA, MlaCache, MlaLayer, type MlaConfig, type MlaWeights } from "@k3/mla";

const quick = process.argv.includes("--quick");
const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "fixtures", "models", "tiny-k3");
const t = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")).text_config;
const config: MlaConfig = {
  hidden: t.hidden_size, numHeads: t.num_attention_heads, qLoraRank: t.q_lora_rank ?? null, kvLoraRank: t.kv_lora_rank,
  qkNope: t.qk_nope_head_dim, qkRope: t.qk_rope_head_dim, vHead: t.v_head_dim, outputGate: t.mla_use_output_gate === true, normEps: 1e-6,
};

const ckpt = openCheckpointSync(dir, { backend: "ts" }); // the pure-TS header parser: no native code needed here
const prefix = "language_model.model.layers.3.self_attn.";
const weights: Record<string, unknown> = {};
for (const n of ["q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_proj_with_mqa", "kv_a_layernorm", "kv_b_proj", "g_proj", "o_proj"]) {
  const name = `${prefix}${n}.weight`;
  if (!ckpt.has(name)) continue;
  const info = ckpt.get(name);
  weights[n] = { dtype: info.dtype, shape: info.shape, data: ckpt.readSync(name) };
}
const layer = new MlaLayer(weights as unknown as MlaWeights, config);
console.log(`MLA layer 3: ${config.numHeads} heads, kv_lora ${config.kvLoraRank} + rope ${config.qkRope}, scale (nope+rope)^-1/2 = ${layer.scale.toFixed(6)}, output gate ${config.outputGate}`);

const D = config.hidden, promptLen = quick ? 12 : 80, decodeLen = quick ? 4 : 20;
const xs = new Float32Array((promptLen + decodeLen) * D).map((_, i) => Math.sin(i * 0.21) + 0.2 * Math.cos(i * 0.003));

for (const dtype of ["f32", "bf16"] as const) {
  const cache = layer.newCache(promptLen + decodeLen, { dtype });
  layer.forward(xs.subarray(0, promptLen * D), cache); // causal prefill, appends promptLen positions
  const saved = cache.save();
  const restored = MlaCache.load(saved, config, promptLen + decodeLen);
  const a = new Float32Array(decodeLen * D), b = new Float32Array(decodeLen * D);
  for (let i = 0; i < decodeLen; i++) {
    const x = xs.subarray((promptLen + i) * D, (promptLen + i + 1) * D);
    a.set(layer.forward(x, cache), i * D);
    b.set(layer.forward(x, restored), i * D);
  }
  const same = Buffer.from(a.buffer).equals(Buffer.from(b.buffer));
  console.log(`${dtype} cache: ${cache.bytesPerPosition} B/position, ${cache.length} positions = ${cache.length * cache.bytesPerPosition} B; saved ${saved.length} B; restored decode ${same ? "bit-identical" : "DIFFERENT"}`);
  if (!same) process.exit(1);
}

// what the same cache costs at K3's real dims (per MLA layer, per position)
const k3 = new MlaCache(K3_MLA, 1, "bf16");
const expanded = K3_MLA.numHeads * (K3_MLA.qkNope + K3_MLA.qkRope + K3_MLA.vHead) * 2;
console.log(`K3: latent ${k3.width} values = ${k3.bytesPerPosition} B bf16 per position per layer; an expanded 96-head cache needs ${expanded} B (${(expanded / k3.bytesPerPosition).toFixed(1)}x); 24 MLA layers x 128K tokens = ${((24 * 131072 * k3.bytesPerPosition) / 1e9).toFixed(2)} GB bf16`);
