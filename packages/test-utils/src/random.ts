/** Deterministic test data: the same seed gives the same values on every machine. */

/** A xorshift32 stream from `state` (0 taken as 1): each call gives the next 32-bit state in [1, 2^32). */
export function xorshift32(state: number): () => number {
  let s = state >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s;
  };
}

/** A mulberry32 stream seeded by `seed`: each call gives the next value in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n uniform values in [lo, hi) from a xorshift32 stream seeded by `seed`. */
export function uniform(n: number, lo: number, hi: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  const next = xorshift32(seed * 2654435761);
  for (let i = 0; i < n; i++) out[i] = lo + (next() / 4294967296) * (hi - lo);
  return out;
}

/** n bytes (the low 8 bits of the same xorshift32 stream as `uniform`). */
export function randomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  const next = xorshift32(seed * 2654435761);
  for (let i = 0; i < n; i++) out[i] = next() & 255;
  return out;
}

/** Scales each row of `dim` values of x (in place) to L2 norm `scale`; returns x. */
export function unitRows(x: Float32Array, dim: number, scale = 1): Float32Array {
  for (let r = 0; r < x.length / dim; r++) {
    let s = 0;
    for (let d = 0; d < dim; d++) s += x[r * dim + d] ** 2;
    const f = scale / Math.sqrt(s + 1e-6);
    for (let d = 0; d < dim; d++) x[r * dim + d] *= f;
  }
  return x;
}
