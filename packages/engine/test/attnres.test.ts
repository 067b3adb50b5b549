/**
 * The attention-residual mix alone (docs/architecture.md §6.2), against the float64 PyTorch reference
 * (fixtures/components/attn_res.safetensors, k3ref.attnres.mix): the mixed rows and the softmax
 * weights π it hands back, for 0, 1, 3 and 8 block snapshots.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { rmsNorm, setThreadCount, threadCount } from "@k3/dense";
import { attnResMix, fuseResWeights } from "../src/index.js";

const threads0 = threadCount();
import { openSafetensorsFile } from "../src/weights.js";
import { REPO } from "./helpers.js";

const DIR = join(REPO, "fixtures", "components");
const manifest = JSON.parse(readFileSync(join(DIR, "MANIFEST.json"), "utf8"));
const tol: { atol: number; rtol: number } = manifest.fixtures.find((f: { name: string }) => f.name === "attn_res").tolerance;

/** The worst |got - want| / (atol + rtol |want|) over all elements (<= 1 passes). */
function worstRatio(got: ArrayLike<number>, want: ArrayLike<number>): number {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / (tol.atol + tol.rtol * Math.abs(want[i])));
  return worst;
}

describe("attnResMix against the reference (attn_res)", () => {
  const src = openSafetensorsFile(join(DIR, "attn_res.safetensors"));
  afterAll(() => src.close());
  const f32 = (name: string) => {
    const b = src.read(name);
    return new Float32Array(b.slice().buffer);
  };
  const f64 = (name: string) => {
    const b = src.read(name);
    return new Float64Array(b.slice().buffer);
  };
  const w = fuseResWeights(f32("w_norm"), f32("w_proj"));
  const D = w.length;

  for (const n of [0, 1, 3, 8]) {
    it(`${n} block snapshots: the mix and its softmax weights π match`, () => {
      const p = f32(`n${n}.p`);
      const T = p.length / D;
      const all = f32(`n${n}.blocks`);
      const blocks = Array.from({ length: n }, (_, i) => all.subarray(i * T * D, (i + 1) * T * D));
      const out = new Float32Array(T * D);
      const pi = new Float32Array(T * (n + 1)).fill(Number.NaN);
      attnResMix(blocks, p, w, 1e-5, T, D, out, pi);
      const ratioOut = worstRatio(out, f64(`n${n}.out`));
      const ratioPi = worstRatio(pi, f64(`n${n}.pi`));
      expect(ratioOut, "mixed rows").toBeLessThanOrEqual(1);
      expect(ratioPi, "softmax weights").toBeLessThanOrEqual(1);
      // π is what the mix used: Σ_i π_i V_i recomputed from the returned weights gives `out` bit for bit.
      for (let t = 0; t < T; t++)
        for (let d = 0; d < D; d++) {
          let o = 0;
          for (let i = 0; i <= n; i++) o = Math.fround(o + pi[t * (n + 1) + i] * (i < n ? blocks[i] : p)[t * D + d]);
          expect(o).toBe(out[t * D + d]);
        }
      // Without the weights argument the mix is the same.
      const again = new Float32Array(T * D);
      attnResMix(blocks, p, w, 1e-5, T, D, again);
      expect(Buffer.from(again.buffer).equals(Buffer.from(out.buffer))).toBe(true);
    });
  }

  it("has the bits of the float64 JS mix it replaced (scores, π and rows), at 1, 2 and 3 threads", () => {
    // The previous attnResMix, verbatim in its arithmetic: rmsNorm per row, scores summed in float64.
    const jsMix = (blocks: Float32Array[], p: Float32Array, T: number, out: Float32Array, pi: Float32Array) => {
      const sources = [...blocks, p];
      const n = sources.length;
      const scratch = new Float32Array(D);
      const score = new Float64Array(n);
      for (let t = 0; t < T; t++) {
        let max = -Infinity;
        for (let i = 0; i < n; i++) {
          rmsNorm(sources[i].subarray(t * D, (t + 1) * D), w, 1e-5, scratch, D);
          let s = 0;
          for (let d = 0; d < D; d++) s += scratch[d];
          score[i] = Math.fround(s);
          if (score[i] > max) max = score[i];
        }
        let total = 0;
        for (let i = 0; i < n; i++) (score[i] = Math.exp(score[i] - max)), (total += score[i]);
        const o = out.subarray(t * D, (t + 1) * D);
        o.fill(0);
        for (let i = 0; i < n; i++) {
          pi[t * n + i] = Math.fround(score[i] / total);
          const row = sources[i].subarray(t * D, (t + 1) * D);
          for (let d = 0; d < D; d++) o[d] += pi[t * n + i] * row[d];
        }
      }
    };
    const T = 37;
    const rand = (seed: number, scale: number) => { let x = seed >>> 0; return Float32Array.from({ length: T * D }, () => ((x = (x * 1103515245 + 12345) >>> 0) / 2 ** 32 - 0.5) * scale); };
    for (const n of [0, 1, 8]) {
      const blocks = Array.from({ length: n }, (_, i) => rand(700 + i, 4 + i));
      const p = rand(799, 3);
      const want = new Float32Array(T * D), wantPi = new Float32Array(T * (n + 1));
      jsMix(blocks, p, T, want, wantPi);
      for (const threads of [1, 2, 3]) {
        setThreadCount(threads);
        const out = new Float32Array(T * D), pi = new Float32Array(T * (n + 1));
        attnResMix(blocks, p, w, 1e-5, T, D, out, pi);
        expect(Buffer.from(out.buffer).equals(Buffer.from(want.buffer)), `${n} blocks, ${threads} threads: rows`).toBe(true);
        expect(Buffer.from(pi.buffer).equals(Buffer.from(wantPi.buffer)), `${n} blocks, ${threads} threads: π`).toBe(true);
      }
    }
    setThreadCount(threads0);
  });

  it("refuses a weights buffer too short for T x (n + 1)", () => {
    const p = f32("n3.p");
    const T = p.length / D;
    expect(() => attnResMix([p, p, p], p, w, 1e-5, T, D, new Float32Array(T * D), new Float32Array(T * 4 - 1))).toThrow(/weights holds 11 values, need T=3 x 4 sources/);
  });
});
