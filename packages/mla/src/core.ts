/**
 * The attention core (native): causal softmax attention with online (blockwise) softmax, over the
 * absorbed latent cache or an expanded per-head cache. Position enters only through causality: the
 * 64 "rope" dims are plain dot-product dims (NoPE), so a score never depends on absolute position.
 */
import type { MlaCache } from "./cache.js";
import { MlaError } from "./errors.js";
import { native } from "./native.js";

/** Where keys or values sit: element (s, h) starts at offset + s*stride + h*head (head 0 = shared). */
export interface RowLayout {
  data: Float32Array | Uint16Array;
  offset?: number;
  stride: number;
  head: number;
}

export interface AttendShape {
  tokens: number;
  heads: number;
  /** Query/key width. */
  dq: number;
  /** Value width. */
  dv: number;
  /** Absolute position of the first query; query t attends positions <= qPos0 + t. */
  qPos0: number;
}

/** out [T][H][dv] = softmax(scale * q . keys) values, causal. Bounds are checked natively. */
export function attend(q: Float32Array, shape: AttendShape, keys: RowLayout, values: RowLayout, scale: number, out?: Float32Array): Float32Array {
  const { tokens: T, heads: H, dq, dv, qPos0 } = shape;
  if (q.length !== T * H * dq) throw new MlaError("input", `attend: q has ${q.length} values, expected T*H*dq = ${T * H * dq}`);
  const o: Float32Array = out ?? new Float32Array(T * H * dv);
  if (o.length !== T * H * dv) throw new MlaError("input", `attend: out has ${o.length} values, expected ${T * H * dv}`);
  if (!Number.isFinite(scale)) throw new MlaError("input", `attend: scale must be finite, got ${scale}`);
  native.attend(q, T, H, dq, dv, keys.data, keys.offset ?? 0, keys.stride, keys.head, values.data, values.offset ?? 0, values.stride, values.head, qPos0, scale, o);
  return o;
}

/**
 * Absorbed attention over the latent cache: q rows [T][H][kvLora + rope] = [q~ | q_pe] against
 * cache rows [c | k_pe] (shared by all heads); returns the latent sums o~ [T][H][kvLora].
 * Queries sit at positions qPos0.. (their own rows must already be in the cache).
 */
export function attendLatent(q: Float32Array, tokens: number, heads: number, cache: MlaCache, qPos0: number, scale: number, out?: Float32Array): Float32Array {
  if (qPos0 + tokens > cache.length) throw new MlaError("input", `attendLatent: queries reach position ${qPos0 + tokens - 1}, the cache holds ${cache.length}`);
  const w = cache.width;
  return attend(q, { tokens, heads, dq: w, dv: cache.config.kvLoraRank, qPos0 }, { data: cache.data, stride: w, head: 0 }, { data: cache.data, stride: w, head: 0 }, scale, out);
}

/**
 * Expanded attention (the naive cache the "53x" compares against): q [T][H][nope + rope],
 * keys [S][H][nope + rope] (k_pe copied into every head), values [S][H][vHead].
 */
export function attendExpanded(q: Float32Array, shape: AttendShape, keys: Float32Array | Uint16Array, values: Float32Array | Uint16Array, scale: number, out?: Float32Array): Float32Array {
  const { heads: H, dq, dv } = shape;
  return attend(q, shape, { data: keys, stride: H * dq, head: dq }, { data: values, stride: H * dv, head: dv }, scale, out);
}
