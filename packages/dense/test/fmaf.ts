// An fmaf independent of the native code, for the exact references of gemm-acc and dot-rows tests.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The float32 next to r (a float32, not 0) in the direction of `toward`. */
function nextF32(r: number, toward: number): number {
  f32[0] = r;
  const away = toward > r === r > 0; // moving away from zero grows the magnitude bits
  u32[0] = away ? u32[0] + 1 : u32[0] - 1;
  return f32[0];
}

/**
 * fmaf(a, b, c) on float32 values, rounded once, from float64 arithmetic: a*b is exact in a double
 * (48 significant bits), p + c is rounded to a double s with error e (TwoSum), and s rounds to the
 * right float32 unless it sits exactly on a float32 tie, where e decides. Normal-range values only.
 */
export function fmaf(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const e = p - (s - bb) + (c - bb);
  const r = Math.fround(s);
  if (e === 0 || r === s || r === 0) return r;
  const other = nextF32(r, s);
  if (s - r !== other - s) return r; // not a tie: s's float32 is the exact value's
  return e > 0 === other > r ? other : r;
}
