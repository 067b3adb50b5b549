/**
 * The dtypes of safetensors 0.8 and their sizes in bits. The numeric codes are ours (stable,
 * shared with the native parser in native/src/st_dtype.c); the order is the official enum order.
 */

export const DTYPES = [
  "BOOL",
  "F4",
  "F6_E2M3",
  "F6_E3M2",
  "U8",
  "I8",
  "F8_E5M2",
  "F8_E4M3",
  "F8_E8M0",
  "F8_E4M3FNUZ",
  "F8_E5M2FNUZ",
  "I16",
  "U16",
  "F16",
  "BF16",
  "I32",
  "U32",
  "F32",
  "C64",
  "F64",
  "I64",
  "U64",
] as const;

export type Dtype = (typeof DTYPES)[number];

/** Bits per element, indexed by dtype code. */
export const DTYPE_BITS: readonly number[] = [8, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8, 16, 16, 16, 16, 32, 32, 32, 64, 64, 64, 64];

const CODE_OF = new Map<string, number>(DTYPES.map((d, i) => [d, i]));

/** The code of a dtype name, or -1 when it is not a safetensors dtype (names are case-sensitive). */
export function dtypeCode(name: string): number {
  return CODE_OF.get(name) ?? -1;
}

export function isDtype(name: string): name is Dtype {
  return CODE_OF.has(name);
}

/** Bits per element of a dtype. */
export function dtypeBits(dtype: Dtype): number {
  const code = CODE_OF.get(dtype);
  if (code === undefined) throw new TypeError(`unknown dtype ${JSON.stringify(dtype)}`);
  return DTYPE_BITS[code];
}

export const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/**
 * Bytes of a tensor of `elements` elements, or a string saying why there is no such size:
 * "overflow" when it exceeds 2^53-1, "misaligned" when sub-byte elements do not fill whole bytes.
 */
export function tensorBytes(code: number, elements: number): number | "overflow" | "misaligned" {
  const bits = DTYPE_BITS[code];
  if (bits >= 8) {
    const per = bits / 8;
    if (elements > Math.floor(MAX_SAFE / per)) return "overflow";
    return elements * per;
  }
  if (bits === 4) return elements % 2 === 0 ? elements / 2 : "misaligned";
  /* 6 bits: 4 elements = 3 bytes */
  return elements % 4 === 0 ? (elements / 4) * 3 : "misaligned";
}

/** Element count of a shape, or -1 when the product exceeds 2^53-1. */
export function shapeElements(shape: ArrayLike<number>, start = 0, end = shape.length): number {
  let n = 1;
  for (let i = start; i < end; i++) {
    const d = shape[i];
    if (d === 0) {
      // Keep checking the remaining dims: the official reader multiplies left to right and
      // fails on the first overflow, even when a later dim is zero.
      n = 0;
      continue;
    }
    // n * d is exact when <= 2^53-1 and rounds to >= 2^53 otherwise, so this test is exact.
    if (n * d > MAX_SAFE) return -1;
    n *= d;
  }
  return n;
}
