/** KDA layer configuration and the per-head A_log check (docs/architecture.md §2.3, docs/invariants.md §1). */
import type { GateForm } from "./core.js";
import { KdaError } from "./errors.js";

export interface KdaConfig {
  /** Model width D (K3 7168, 48B 2304). */
  hidden: number;
  /** H (K3 96, 48B 32). */
  numHeads: number;
  /** dk = dv (128 in both models). */
  headDim: number;
  /** Short conv kernel (4). */
  convKernel: number;
  /** Forget gate family: K3's bounded sigmoid or 48B's softplus. */
  gate: GateForm;
  /** K3's gate_lower_bound (-5); unused by the 48B form. */
  lowerBound: number;
  /** o_norm epsilon (rms_norm_eps, 1e-5). */
  rmsNormEps: number;
}

/** K3's linear_attn_config (text_config) as a KdaConfig. */
export const K3_KDA: KdaConfig = { hidden: 7168, numHeads: 96, headDim: 128, convKernel: 4, gate: "k3-lowerbound", lowerBound: -5, rmsNormEps: 1e-5 };
/** Kimi-Linear-48B-A3B's. */
export const KIMI_LINEAR_48B_KDA: KdaConfig = { hidden: 2304, numHeads: 32, headDim: 128, convKernel: 4, gate: "48b-softplus", lowerBound: -5, rmsNormEps: 1e-5 };

function positiveInt(name: string, v: unknown, max: number): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < 1 || v > max)
    throw new KdaError("config", `config.${name} must be an integer in [1, ${max}], got ${JSON.stringify(v)}`);
  return v;
}

/** Validates every field (a defaulted config would silently compute something else). */
export function checkConfig(c: KdaConfig): KdaConfig {
  if (typeof c !== "object" || c === null) throw new KdaError("config", "config must be an object");
  positiveInt("hidden", c.hidden, 1 << 20);
  positiveInt("numHeads", c.numHeads, 4096);
  positiveInt("headDim", c.headDim, 4096);
  positiveInt("convKernel", c.convKernel, 64);
  if (c.gate !== "k3-lowerbound" && c.gate !== "48b-softplus")
    throw new KdaError("config", `config.gate must be 'k3-lowerbound' or '48b-softplus', got ${JSON.stringify(c.gate)}`);
  if (typeof c.lowerBound !== "number" || !Number.isFinite(c.lowerBound) || (c.gate === "k3-lowerbound" && !(c.lowerBound < 0)))
    throw new KdaError("config", `config.lowerBound must be a finite negative number for the k3 gate, got ${JSON.stringify(c.lowerBound)}`);
  if (typeof c.rmsNormEps !== "number" || !(c.rmsNormEps > 0) || !Number.isFinite(c.rmsNormEps))
    throw new KdaError("config", `config.rmsNormEps must be a positive number, got ${JSON.stringify(c.rmsNormEps)}`);
  return { ...c };
}

/**
 * The per-head decay rates A_log[h]. 48B stores exactly H values ([1,1,H,1]); K3 stores a vector
 * padded to head_dim (128) whose first H entries are real and the rest zero (llama.cpp slices
 * [:num_heads]). Refuses a vector of the wrong length or with non-zero padding.
 */
export function headALog(values: Float32Array, config: KdaConfig, name = "A_log"): Float32Array {
  const H = config.numHeads;
  if (config.gate === "48b-softplus") {
    if (values.length !== H) throw new KdaError("weight", `weight '${name}' has ${values.length} entries, expected num_heads = ${H} (48B stores [1,1,H,1])`);
    return values.slice();
  }
  if (values.length < H) throw new KdaError("weight", `weight '${name}' has ${values.length} entries, fewer than num_heads = ${H}`);
  for (let i = H; i < values.length; i++)
    if (values[i] !== 0)
      throw new KdaError("weight", `weight '${name}': K3 padding entry ${i} is ${values[i]}, expected 0 (only the first num_heads = ${H} entries are real)`);
  return values.slice(0, H);
}
