/** Paths shared by the engine tests. */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const TINY_K3 = join(REPO, "fixtures", "models", "tiny-k3");
export const TINY_48B = join(REPO, "fixtures", "models", "tiny-kimi-linear");

export function rawConfig(dir: string): Record<string, any> {
  return JSON.parse(readFileSync(join(dir, "config.json"), "utf8"));
}

/** The tiny K3 config scaled to the published K3 dimensions (anchor.md §1). */
export function publishedK3Config() {
  const raw = JSON.parse(readFileSync(join(TINY_K3, "config.json"), "utf8"));
  const t = raw.text_config;
  Object.assign(t, {
    hidden_size: 7168, num_hidden_layers: 93, vocab_size: 163840, bos_token_id: 163584, eos_token_id: 163586, pad_token_id: 163839,
    num_attention_heads: 96, num_key_value_heads: 96, q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64,
    v_head_dim: 128, num_experts: 896, num_experts_per_token: 16, moe_intermediate_size: 3072, routed_expert_hidden_size: 3584,
    intermediate_size: 33792, attn_res_block_size: 12,
  });
  Object.assign(raw, { bos_token_id: 163584, eos_token_id: 163586, pad_token_id: 163839 });
  const full: number[] = [];
  for (let l = 4; l <= 92; l += 4) full.push(l);
  full.push(93);
  t.linear_attn_config = { ...t.linear_attn_config, num_heads: 96, head_dim: 128, full_attn_layers: full };
  delete t.linear_attn_config.kda_layers;
  return raw;
}

/** Runs the `k3` CLI in this process and captures what it writes (stdout, stderr) and its exit code. */
export async function captureCli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { main } = await import("../src/cli.js");
  let stdout = "";
  let stderr = "";
  const o = process.stdout.write.bind(process.stdout);
  const e = process.stderr.write.bind(process.stderr);
  process.stdout.write = ((c: string | Uint8Array) => ((stdout += String(c)), true)) as typeof process.stdout.write;
  process.stderr.write = ((c: string | Uint8Array) => ((stderr += String(c)), true)) as typeof process.stderr.write;
  try {
    return { code: await main(args), stdout, stderr };
  } finally {
    process.stdout.write = o;
    process.stderr.write = e;
  }
}
