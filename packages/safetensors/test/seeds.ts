import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { SafetensorsWriter } from "../src/index.js";
import { fileOf, tempDir } from "./helpers.js";

/** Valid seed files: writer output over many dtypes, metadata, escapes, and small reference fixtures. */
export function fuzzSeeds(): Uint8Array[] {
  const dir = tempDir("seeds");
  const seeds: Uint8Array[] = [];
  const w = new SafetensorsWriter(join(dir, "a.safetensors"), { metadata: { format: "pt", "k\"ey": "v\\al" } });
  w.add("language_model.model.layers.3.block_sparse_moe.experts.10.w1.weight_packed", "U8", [4, 2], new Uint8Array(8));
  w.add("language_model.model.layers.3.block_sparse_moe.experts.10.w1.weight_scale", "U8", [4, 1], new Uint8Array(4));
  w.add("model.layers.0.self_attn.A_log", "F32", [3], new Float32Array(3));
  w.add("x\u00e9\u{1f600}", "BF16", [2, 1], new Uint16Array(2));
  w.add("f4", "F4", [2, 2], new Uint8Array(2));
  w.add("f6", "F6_E2M3", [4], new Uint8Array(3));
  w.add("scalar", "F64", [], new Float64Array(1));
  w.add("empty", "I64", [0, 3], new Uint8Array(0));
  w.finish();
  seeds.push(readFileSync(join(dir, "a.safetensors")));
  seeds.push(fileOf(`{"__metadata__":null,"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"C64","shape":[1],"data_offsets":[2,10]}}`, 10));
  seeds.push(fileOf(`  {"b\\u0041":{"dtype":"I16","shape":[1,2],"data_offsets":[4,8]},"a":{"dtype":"F8_E8M0","shape":[4],"data_offsets":[0,4]}} `, 8));
  seeds.push(fileOf("{}"));
  const fixtures = join(import.meta.dirname, "..", "..", "..", "fixtures", "components");
  try {
    for (const f of readdirSync(fixtures).filter((f) => f.endsWith(".safetensors")).sort()) {
      if (statSync(join(fixtures, f)).size <= 40_000) seeds.push(readFileSync(join(fixtures, f)));
    }
  } catch {
    /* fixtures not generated yet */
  }
  return seeds;
}

