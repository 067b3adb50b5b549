/**
 * Float64 TypeScript references for the tests: the KDA recurrence (and deliberately wrong variants
 * that docs/invariants.md §2 warns about), so a test can show the fixture comparison rejects each bug.
 */
export type RecurrenceVariant = "spec" | "decay_after_write" | "read_before_write";

/** q,k,g [T][H][dk], v [T][H][dv], beta [T][H], S0 [H][dk][dv] -> { o, S } in float64. */
export function recurrenceF64(
  q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, g: ArrayLike<number>, beta: ArrayLike<number>, S0: ArrayLike<number>,
  T: number, H: number, dk: number, dv: number, variant: RecurrenceVariant = "spec",
): { o: Float64Array; S: Float64Array } {
  const S = Float64Array.from(S0);
  const o = new Float64Array(T * H * dv);
  const e = new Float64Array(dv);
  for (let t = 0; t < T; t++)
    for (let h = 0; h < H; h++) {
      const base = h * dk * dv;
      const at = t * H + h;
      const decay = () => {
        for (let d = 0; d < dk; d++) {
          const a = Math.exp(g[at * dk + d]);
          for (let j = 0; j < dv; j++) S[base + d * dv + j] *= a;
        }
      };
      const read = () => {
        for (let j = 0; j < dv; j++) {
          let s = 0;
          for (let d = 0; d < dk; d++) s += S[base + d * dv + j] * q[at * dk + d];
          o[at * dv + j] = s;
        }
      };
      if (variant !== "decay_after_write") decay();
      for (let j = 0; j < dv; j++) {
        let s = 0;
        for (let d = 0; d < dk; d++) s += S[base + d * dv + j] * k[at * dk + d];
        e[j] = v[at * dv + j] - s;
      }
      if (variant === "read_before_write") read();
      for (let d = 0; d < dk; d++) {
        const bk = beta[at] * k[at * dk + d];
        for (let j = 0; j < dv; j++) S[base + d * dv + j] += bk * e[j];
      }
      if (variant === "decay_after_write") decay();
      if (variant !== "read_before_write") read();
    }
  return { o, S };
}
