/**
 * @k3/mla: Multi-head Latent Attention as Kimi K3 and Kimi-Linear-48B use it (NoPE,
 * docs/architecture.md §3), in absorbed form over a latent cache of kvLora + rope (576) values per position.
 *
 * - `MlaLayer`: one layer's weights + config; `forward(x, cache)` for a prompt chunk or one token.
 * - `MlaCache`: f32 or bf16 latent rows; `bytesPerPosition`, `save()` / `MlaCache.load()`.
 * - `attend`, `attendLatent`, `attendExpanded`: the native causal softmax core (both cache forms).
 */
export { MlaError } from "./errors.js";
export { checkConfig, K3_MLA, KIMI_LINEAR_48B_MLA, softmaxScale, type MlaConfig } from "./config.js";
export { MlaCache, type CacheDtype } from "./cache.js";
export { attend, attendExpanded, attendLatent, type AttendShape, type RowLayout } from "./core.js";
export { MlaLayer, type MlaTrace, type MlaWeights } from "./layer.js";
export type { WeightTensor } from "./weights.js";
import { addon } from "./native.js";

/** Where the native addon was loaded from. */
export function nativeInfo(): { file: string; origin: "prebuilt" | "source" } {
  return { file: addon.file, origin: addon.origin };
}
