/**
 * Non-finite values in the forward pass: a NaN or an infinity in a weight (a damaged download, a
 * bad conversion) spreads through the hidden state and the sampler then picks tokens from garbage
 * with nothing said. The model checks its hidden state once per layer (one pass over T x D floats,
 * noise next to the layer: see the engine README) and its logits once per chunk; on the rare path
 * where one is found, it names the first layer and, when it can tell, the tensor that holds it.
 */
import { NonFiniteError } from "./errors.js";
import type { WeightSource } from "./weights.js";

/**
 * Index of the first NaN or +-Inf in x[0..n), or -1. The fast path is one branch-free pass
 * (x - x is 0 for every finite x and NaN otherwise, and NaN sticks in the sum); only a sum that
 * is not 0 pays for the search.
 */
export function firstNonFinite(x: Float32Array, n = x.length): number {
  let s = 0;
  for (let i = 0; i < n; i++) s += x[i] - x[i];
  if (s === 0) return -1;
  for (let i = 0; i < n; i++) if (x[i] - x[i] !== 0) return i;
  return -1;
}

/** A float as a refusal shows it. */
export function showValue(v: number): string {
  return Number.isNaN(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
}

/** Index of the first non-finite element of a tensor's raw bytes in a float dtype, or -1 (other dtypes: -1). */
export function firstNonFiniteRaw(bytes: Uint8Array, dtype: string): number {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dtype === "BF16" || dtype === "F16") {
    // All-ones exponent: an infinity or a NaN.
    const exp = dtype === "BF16" ? 0x7f80 : 0x7c00;
    for (let i = 0; i + 1 < bytes.length; i += 2) if ((dv.getUint16(i, true) & exp) === exp) return i / 2;
  } else if (dtype === "F32") {
    for (let i = 0; i + 3 < bytes.length; i += 4) if ((dv.getUint32(i, true) & 0x7f800000) === 0x7f800000) return i / 4;
  }
  return -1;
}

/**
 * The first tensor among `names` (read from `src`) holding a non-finite value, as "NAME[i] = NaN",
 * or null. Only called once a non-finite value has been seen: it reads every tensor it is given.
 */
export function findNonFiniteTensor(src: WeightSource, names: string[]): string | null {
  for (const name of names) {
    const info = src.info(name);
    const bytes = src.read(name);
    const i = firstNonFiniteRaw(bytes, info.dtype);
    if (i < 0) continue;
    const f = new Float32Array(1);
    if (info.dtype === "F32") f[0] = new DataView(bytes.buffer, bytes.byteOffset).getFloat32(i * 4, true);
    else {
      const bits = new DataView(bytes.buffer, bytes.byteOffset).getUint16(i * 2, true);
      // Same class in either 16-bit format: the sign and whether the mantissa is zero.
      f[0] = (bits & (info.dtype === "BF16" ? 0x7f : 0x3ff)) !== 0 ? NaN : bits & 0x8000 ? -Infinity : Infinity;
    }
    return `${name}[${i}] = ${showValue(f[0])}`;
  }
  return null;
}

/** Where a non-finite value was first seen, and what is known of its source. */
export function nonFiniteError(where: string, x: Float32Array, at: number, width: number, pos0: number, cause: string | null): NonFiniteError {
  const t = Math.floor(at / width);
  return new NonFiniteError(
    `non-finite value (${showValue(x[at])}) in ${where} at position ${pos0 + t}, element ${at % width}${cause ? `: ${cause}` : " (no non-finite weight found: an overflow)"}; the run is stopped, its output would not be the model's`,
  );
}
