/** MLA layer configuration (docs/architecture.md §3). */
import { MlaError } from "./errors.js";

export interface MlaConfig {
  /** Model width D. */
  hidden: number;
  numHeads: number;
  /** K3: 1536 (q_a_proj -> q_a_layernorm -> q_b_proj); 48B: null (plain q_proj). */
  qLoraRank: number | null;
  /** Latent width (512). */
  kvLoraRank: number;
  /** Per-head no-position query/key dims (128). */
  qkNope: number;
  /** The 64 "rope" dims: cached and scored, never rotated (NoPE). */
  qkRope: number;
  /** Per-head value dims (128). */
  vHead: number;
  /** K3's sigmoid output gate g_proj. */
  outputGate: boolean;
  /** q_a_layernorm / kv_a_layernorm epsilon (1e-6). */
  normEps: number;
}

export const K3_MLA: MlaConfig = { hidden: 7168, numHeads: 96, qLoraRank: 1536, kvLoraRank: 512, qkNope: 128, qkRope: 64, vHead: 128, outputGate: true, normEps: 1e-6 };
export const KIMI_LINEAR_48B_MLA: MlaConfig = { hidden: 2304, numHeads: 32, qLoraRank: null, kvLoraRank: 512, qkNope: 128, qkRope: 64, vHead: 128, outputGate: false, normEps: 1e-6 };

function positiveInt(name: string, v: unknown, max: number): void {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > max)
    throw new MlaError("config", `config.${name} must be an integer in [1, ${max}], got ${JSON.stringify(v)}`);
}

export function checkConfig(c: MlaConfig): MlaConfig {
  if (typeof c !== "object" || c === null) throw new MlaError("config", "config must be an object");
  positiveInt("hidden", c.hidden, 1 << 20);
  positiveInt("numHeads", c.numHeads, 4096);
  if (c.qLoraRank !== null) positiveInt("qLoraRank", c.qLoraRank, 1 << 16);
  positiveInt("kvLoraRank", c.kvLoraRank, 1 << 16);
  positiveInt("qkNope", c.qkNope, 4096);
  positiveInt("qkRope", c.qkRope, 4096);
  positiveInt("vHead", c.vHead, 4096);
  if (typeof c.outputGate !== "boolean") throw new MlaError("config", `config.outputGate must be a boolean, got ${JSON.stringify(c.outputGate)}`);
  if (typeof c.normEps !== "number" || !(c.normEps > 0) || !Number.isFinite(c.normEps))
    throw new MlaError("config", `config.normEps must be a positive number, got ${JSON.stringify(c.normEps)}`);
  return { ...c };
}

/** The softmax scale: (qk_nope + qk_rope)^-1/2 (192^-1/2 = 0.0722 for K3), never 128^-1/2 or 576^-1/2. */
export function softmaxScale(c: MlaConfig): number {
  return 1 / Math.sqrt(c.qkNope + c.qkRope);
}
