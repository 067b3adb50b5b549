/**
 * A synthetic checkpoint with Kimi K3's exact text layout (docs/architecture.md §7): 96 shards, 497,220
 * tensors with the real names, shapes and dtypes, experts stored in lexicographic id order with
 * each expert's 6 tensors adjacent, each layer's trunk one run. Tensor data are sparse holes
 * (ftruncate), so the 1.56 TB checkpoint costs only its ~65 MB of headers on disk.
 * Vision/mm_projector tensor names are stand-ins (165 + 3 tensors in the last shards).
 */
import { closeSync, existsSync, ftruncateSync, mkdirSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";

type Dt = "BF16" | "F32" | "U8";
interface T {
  name: string;
  dtype: Dt;
  shape: number[];
}
const BYTES: Record<Dt, number> = { BF16: 2, F32: 4, U8: 1 };
const H = 7168;

const MLA_LAYERS = new Set<number>();
for (let l = 3; l < 92; l += 4) MLA_LAYERS.add(l);
MLA_LAYERS.add(91);
MLA_LAYERS.add(92);

function layerTrunk(l: number): T[] {
  const p = `language_model.model.layers.${l}.`;
  const out: T[] = [];
  const bf = (n: string, shape: number[]) => out.push({ name: p + n, dtype: "BF16", shape });
  const f32 = (n: string, shape: number[]) => out.push({ name: p + n, dtype: "F32", shape });
  for (const n of ["input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"]) bf(`${n}.weight`, [H]);
  if (MLA_LAYERS.has(l)) {
    bf("self_attn.q_a_proj.weight", [1536, H]);
    bf("self_attn.q_a_layernorm.weight", [1536]);
    bf("self_attn.q_b_proj.weight", [18432, 1536]);
    bf("self_attn.kv_a_proj_with_mqa.weight", [576, H]);
    bf("self_attn.kv_a_layernorm.weight", [512]);
    bf("self_attn.kv_b_proj.weight", [24576, 512]);
    bf("self_attn.o_proj.weight", [H, 12288]);
    bf("self_attn.g_proj.weight", [12288, H]);
  } else {
    for (const m of ["q", "k", "v", "g"]) bf(`self_attn.${m}_proj.weight`, [12288, H]);
    bf("self_attn.o_proj.weight", [H, 12288]);
    for (const m of ["q", "k", "v"]) f32(`self_attn.${m}_conv1d.weight`, [12288, 1, 4]);
    bf("self_attn.f_a_proj.weight", [128, H]);
    bf("self_attn.f_b_proj.weight", [12288, 128]);
    bf("self_attn.b_proj.weight", [96, H]);
    f32("self_attn.A_log", [128]);
    f32("self_attn.dt_bias", [12288]);
    f32("self_attn.o_norm.weight", [128]);
  }
  if (l === 0) {
    bf("mlp.gate_proj.weight", [33792, H]);
    bf("mlp.up_proj.weight", [33792, H]);
    bf("mlp.down_proj.weight", [H, 33792]);
  } else {
    const m = "block_sparse_moe.";
    bf(`${m}gate.weight`, [896, H]);
    f32(`${m}gate.e_score_correction_bias`, [896]);
    bf(`${m}routed_expert_down_proj.weight`, [3584, H]);
    bf(`${m}routed_expert_up_proj.weight`, [H, 3584]);
    bf(`${m}routed_expert_norm.weight`, [3584]);
    bf(`${m}shared_experts.gate_proj.weight`, [6144, H]);
    bf(`${m}shared_experts.up_proj.weight`, [6144, H]);
    bf(`${m}shared_experts.down_proj.weight`, [H, 6144]);
  }
  return out;
}

/** Layer l's experts, ids in lexicographic order, each expert's 6 tensors adjacent. */
function layerExperts(l: number): T[] {
  const out: T[] = [];
  const ids = Array.from({ length: 896 }, (_, i) => String(i)).sort();
  for (const e of ids) {
    const p = `language_model.model.layers.${l}.block_sparse_moe.experts.${e}.`;
    out.push({ name: `${p}w1.weight_packed`, dtype: "U8", shape: [3072, 1792] });
    out.push({ name: `${p}w1.weight_scale`, dtype: "U8", shape: [3072, 112] });
    out.push({ name: `${p}w2.weight_packed`, dtype: "U8", shape: [3584, 1536] });
    out.push({ name: `${p}w2.weight_scale`, dtype: "U8", shape: [3584, 96] });
    out.push({ name: `${p}w3.weight_packed`, dtype: "U8", shape: [3072, 1792] });
    out.push({ name: `${p}w3.weight_scale`, dtype: "U8", shape: [3072, 112] });
  }
  return out;
}

/** The 96 shards' tensor lists, in file order. */
export function k3Shards(): T[][] {
  const shards: T[][] = [];
  shards.push([{ name: "language_model.model.embed_tokens.weight", dtype: "BF16", shape: [163840, H] }, ...layerTrunk(0)]);
  for (let l = 1; l <= 92; l++) shards.push([...layerTrunk(l), ...layerExperts(l)]);
  shards.push([
    { name: "language_model.model.norm.weight", dtype: "BF16", shape: [H] },
    { name: "language_model.model.output_attn_res_norm.weight", dtype: "BF16", shape: [H] },
    { name: "language_model.model.output_attn_res_proj.weight", dtype: "BF16", shape: [H] },
    { name: "language_model.lm_head.weight", dtype: "BF16", shape: [163840, H] },
  ]);
  const vision: T[] = [
    { name: "vision_tower.patch_embed.proj.weight", dtype: "BF16", shape: [1152, 3, 14, 14] },
    { name: "vision_tower.patch_embed.proj.bias", dtype: "BF16", shape: [1152] },
    { name: "vision_tower.encoder.final_layernorm.weight", dtype: "BF16", shape: [1152] },
  ];
  for (let b = 0; b < 27; b++) {
    const p = `vision_tower.encoder.blocks.${b}.`;
    vision.push({ name: `${p}attn.qkv.weight`, dtype: "BF16", shape: [3456, 1152] });
    vision.push({ name: `${p}attn.proj.weight`, dtype: "BF16", shape: [1152, 1152] });
    vision.push({ name: `${p}mlp.fc1.weight`, dtype: "BF16", shape: [4304, 1152] });
    vision.push({ name: `${p}mlp.fc2.weight`, dtype: "BF16", shape: [1152, 4304] });
    vision.push({ name: `${p}norm1.weight`, dtype: "BF16", shape: [1152] });
    vision.push({ name: `${p}norm2.weight`, dtype: "BF16", shape: [1152] });
  }
  shards.push(vision);
  shards.push([
    { name: "mm_projector.pre_norm.weight", dtype: "BF16", shape: [1152] },
    { name: "mm_projector.linear_1.weight", dtype: "BF16", shape: [4608, 4608] },
    { name: "mm_projector.linear_2.weight", dtype: "BF16", shape: [H, 4608] },
  ]);
  return shards;
}

export const K3_SHARD_COUNT = 96;
export const K3_TENSOR_COUNT = 497_220;

const shardName = (i: number) => `model-${String(i + 1).padStart(5, "0")}-of-000096.safetensors`;

/**
 * Writes the checkpoint into `dir` once (a marker file records completion) and returns
 * { dir, shards, tensors, headerBytes, fileBytes }.
 */
export function ensureSyntheticK3(dir: string): { dir: string; tensors: number; headerBytes: number; fileBytes: number; indexBytes: number } {
  const marker = join(dir, ".complete.json");
  if (existsSync(marker)) return JSON.parse(readFileSync(marker, "utf8"));
  mkdirSync(dir, { recursive: true });
  const shards = k3Shards();
  if (shards.length !== K3_SHARD_COUNT) throw new Error(`layout has ${shards.length} shards`);
  const weightMap: [string, string][] = [];
  let tensors = 0;
  let headerBytes = 0;
  let fileBytes = 0;
  let totalSize = 0;
  shards.forEach((list, s) => {
    const parts: string[] = ['"__metadata__":{"format":"pt"}'];
    let at = 0;
    for (const t of list) {
      const bytes = t.shape.reduce((a, b) => a * b, 1) * BYTES[t.dtype];
      parts.push(`${JSON.stringify(t.name)}:{"dtype":"${t.dtype}","shape":[${t.shape.join(",")}],"data_offsets":[${at},${at + bytes}]}`);
      at += bytes;
      weightMap.push([t.name, shardName(s)]);
    }
    const json = Buffer.from(`{${parts.join(",")}}`);
    const n = Math.ceil(json.length / 8) * 8;
    const head = Buffer.alloc(8 + n, 0x20);
    head.writeBigUInt64LE(BigInt(n));
    json.copy(head, 8);
    const fd = openSync(join(dir, shardName(s)), "w");
    writeSync(fd, head);
    ftruncateSync(fd, 8 + n + at);
    closeSync(fd);
    tensors += list.length;
    headerBytes += n;
    fileBytes += 8 + n + at;
    totalSize += at;
  });
  if (tensors !== K3_TENSOR_COUNT) throw new Error(`layout has ${tensors} tensors, expected ${K3_TENSOR_COUNT}`);
  weightMap.sort((a, b) => (a[0] < b[0] ? -1 : 1));
  const index = JSON.stringify({ metadata: { total_size: totalSize }, weight_map: Object.fromEntries(weightMap) }, null, 2);
  writeFileSync(join(dir, "model.safetensors.index.json"), index);
  const info = { dir, tensors, headerBytes, fileBytes, indexBytes: Buffer.byteLength(index) };
  writeFileSync(marker, JSON.stringify(info));
  return info;
}
