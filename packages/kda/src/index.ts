/**
 * @k3/kda: Kimi Delta Attention (docs/architecture.md §2) for Kimi K3 and Kimi-Linear-48B.
 *
 * - `KdaLayer`: one layer's weights + config; `forward(x, state)` for a chunk of tokens or one.
 * - `KdaState`: conv tails + recurrent state, fp32 or bf16; `save()` / `KdaState.load()`.
 * - The core kernels on projected activations: `shortConv`, `forgetGate`, `recurrent`, `chunked`.
 *
 * Threads and SIMD level are @k3/dense's (one pool per process); every kernel is bit-identical at
 * every SIMD level and thread count.
 */
export { KdaError } from "./errors.js";
export { chunked, forgetGate, recurrent, shortConv, type CoreShape, type GateForm } from "./core.js";
export { checkConfig, headALog, K3_KDA, KIMI_LINEAR_48B_KDA, type KdaConfig } from "./config.js";
export { KdaState, type StateDtype } from "./state.js";
export { KdaLayer, type ForwardOptions, type KdaTrace, type KdaWeights } from "./layer.js";
export type { WeightTensor } from "./weights.js";
import { addon } from "./native.js";

/** Where the native addon was loaded from. */
export function nativeInfo(): { file: string; origin: "prebuilt" | "source" } {
  return { file: addon.file, origin: addon.origin };
}
