/** Comparisons: tolerances, relative error, byte identity. */

export interface Tol {
  atol: number;
  rtol: number;
}

/** Index of the first element outside atol + rtol*|expected| (0 on a length mismatch), or -1. */
export function firstMismatch(got: ArrayLike<number>, expected: ArrayLike<number>, tol: Tol): number {
  if (got.length !== expected.length) return 0;
  for (let i = 0; i < got.length; i++) {
    const e = expected[i];
    if (!(Math.abs(got[i] - e) <= tol.atol + tol.rtol * Math.abs(e))) return i;
  }
  return -1;
}

/** ok iff every element is within tolerance; otherwise `detail` names the first bad element. */
export function closeTo(got: ArrayLike<number>, expected: ArrayLike<number>, tol: Tol): { ok: boolean; detail: string } {
  if (got.length !== expected.length) return { ok: false, detail: `length ${got.length} vs ${expected.length}` };
  const i = firstMismatch(got, expected, tol);
  return { ok: i < 0, detail: i < 0 ? "ok" : `element ${i}: got ${got[i]}, expected ${expected[i]}` };
}

/** max |a - b| / max |b| (the absolute error when b is all zeros). */
export function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    num = Math.max(num, Math.abs(a[i] - b[i]));
    den = Math.max(den, Math.abs(b[i]));
  }
  return den === 0 ? num : num / den;
}

/** True iff the two views hold the same bytes. */
export function bytesEqual(a: ArrayBufferView, b: ArrayBufferView): boolean {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}
