/**
 * KDA's kernels flush subnormals (native/src/kda_fpmode.h): strong decays underflow into them and
 * Intel cores take ~100x per subnormal operation. The flush must stay inside the kernels: the
 * calling thread (JavaScript) and the pool's workers (every other kernel) keep IEEE subnormals.
 */
import { gemvF32, setSimdLevel, setThreadCount, simdLevel, threadCount } from "@k3/dense";
import { relErr, uniform } from "@k3/test-utils";
import { afterAll, describe, expect, it } from "vitest";
import { chunked, recurrent } from "../src/index.js";

const threads0 = threadCount();
const level0 = simdLevel();
afterAll(() => {
  setThreadCount(threads0);
  setSimdLevel(level0);
});

/** Strong decay (g down to -30 per token): products of the decay factors land in the subnormal range. */
function strongDecay(T: number, H: number, d: number) {
  return { q: uniform(T * H * d, -0.1, 0.1, 1), k: uniform(T * H * d, -0.1, 0.1, 2), v: uniform(T * H * d, -1, 1, 3), g: uniform(T * H * d, -30, 0, 4), beta: uniform(T * H, 0, 1, 5) };
}

describe("subnormals inside the KDA kernels", () => {
  it("leave the caller's and the workers' IEEE subnormals alone", () => {
    setThreadCount(2);
    const T = 40, H = 4, d = 16;
    const x = strongDecay(T, H, d);
    const o = new Float32Array(T * H * d);
    chunked(x.q, x.k, x.v, x.g, x.beta, new Float32Array(H * d * d), o, { tokens: T, heads: H, dk: d, dv: d }, 16);
    recurrent(x.q, x.k, x.v, x.g, x.beta, new Float32Array(H * d * d), o, { tokens: T, heads: H, dk: d, dv: d });
    // On this thread: a double -> float conversion that yields a subnormal (zero under FTZ).
    const tiny = Number(process.env.K3_TEST_TINY ?? "1e-40");
    expect(new Float32Array([tiny])[0]).toBeGreaterThan(0);
    expect(Math.abs(new Float32Array([tiny])[0] - 1e-40) / 1e-40).toBeLessThan(1e-3);
    // On the pool's threads: rows whose dot product is subnormal, computed by every task.
    const rows = 4096, cols = 64;
    const w = new Float32Array(rows * cols).fill(1e-20);
    const v = new Float32Array(cols).fill(1e-21);
    const y = gemvF32(w, v, new Float32Array(rows), { rows, cols });
    // 64 subnormal products: each keeps fewer bits than a normal float, so 1e-3 relative.
    expect(y.every((t) => Math.abs(t - 64e-41) < 64e-44)).toBe(true);
  });

  it("with decays deep into the subnormal range: chunked equals the recurrence to 1e-5, finite, the same at every level and thread count", () => {
    const T = 70, H = 3, d = 16;
    const x = strongDecay(T, H, d);
    const shape = { tokens: T, heads: H, dk: d, dv: d };
    const ref = recurrent(x.q, x.k, x.v, x.g, x.beta, new Float32Array(H * d * d), new Float32Array(T * H * d), shape);
    expect(ref.every(Number.isFinite)).toBe(true);
    const outs: Float32Array[] = [];
    for (const level of ["scalar", "avx2", "avx512"] as const) {
      try {
        setSimdLevel(level);
      } catch {
        continue; // the CPU lacks it
      }
      for (const t of [1, 2, 3]) {
        setThreadCount(t);
        outs.push(chunked(x.q, x.k, x.v, x.g, x.beta, new Float32Array(H * d * d), new Float32Array(T * H * d), shape, 16));
      }
    }
    expect(relErr(outs[0], ref)).toBeLessThan(1e-5);
    for (const o of outs) expect(Buffer.from(o.buffer).equals(Buffer.from(outs[0].buffer))).toBe(true);
  });
});
