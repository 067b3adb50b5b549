import { describe, expect, it } from "vitest";
import {
  add,
  l2Normalize,
  memoryReadCeiling,
  fmaPeak,
  rmsNorm,
  setSimdLevel,
  setThreadCount,
  sigmoid,
  mixRows,
  rmsNormDot,
  sigmoidMul,
  tanh,
  silu,
  siluGlu,
  situGlu,
  softmax,
  threadCount,
  topK,
} from "../src/index.js";
import * as dense from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so these dependency-free modules are imported by path.
import { bytesEqual, firstMismatch } from "../../test-utils/src/compare.js";
import { fixtureExists, readFixtureMinimal } from "../../test-utils/src/fixture-file.js";
import { componentsDir } from "../../test-utils/src/paths.js";
import { uniform } from "../../test-utils/src/random.js";
import { testedSimdLevels } from "../../test-utils/src/settings.js";

const available = testedSimdLevels(dense);

// Tolerance against float64 JS references: these ops are a handful of correctly rounded f32 steps
// plus libm expf/tanhf (< 2 ulp in glibc), so 1e-6 relative (about 8 ulp) + a tiny absolute floor.
const REL = 1e-6;
const ABS = 1e-30;

function expectClose(got: Float32Array, ref: ArrayLike<number>, rel = REL, abs = ABS) {
  const i = firstMismatch(got, ref, { atol: abs, rtol: rel });
  expect(i, i >= 0 ? `index ${i}: got ${got[i]}, expected ${ref[i]}` : "").toBe(-1);
}

function sameAtEveryLevel(run: () => Float32Array) {
  setSimdLevel("scalar");
  const expected = run();
  for (const level of available) {
    setSimdLevel(level);
    for (const threads of [1, 2, 3]) {
      setThreadCount(threads);
      expect(bytesEqual(run(), expected), `${level} x${threads}`).toBe(true);
    }
  }
}

const fixtureNote = (name: string) => `fixture ${name} absent from ${componentsDir}`;

describe("rmsNorm", () => {
  const dim = 96;
  const x = uniform(dim * 3, -3, 3, 81);
  const w = uniform(dim, -1, 1, 82);

  it("matches a float64 reference row by row", () => {
    const out = rmsNorm(x, w, 1e-5, new Float32Array(x.length), dim);
    const ref = new Float64Array(x.length);
    for (let r = 0; r < 3; r++) {
      let ss = 0;
      for (let k = 0; k < dim; k++) ss += x[r * dim + k] ** 2;
      const d = Math.sqrt(ss / dim + Math.fround(1e-5));
      for (let k = 0; k < dim; k++) ref[r * dim + k] = w[k] * (x[r * dim + k] / d);
    }
    expectClose(out, ref);
  });

  it("works in place and is identical at every SIMD level", () => {
    const copy = x.slice();
    rmsNorm(copy, w, 1e-5, copy, dim);
    expect(Array.from(copy)).toEqual(Array.from(rmsNorm(x, w, 1e-5, new Float32Array(x.length), dim)));
    sameAtEveryLevel(() => rmsNorm(x, w, 1e-5, new Float32Array(x.length), dim));
  });

  const fx = fixtureExists("rmsnorm.safetensors") ? readFixtureMinimal("rmsnorm.safetensors") : null;
  (fx ? it : it.skip)(`matches fixtures/components/rmsnorm (atol 1e-5, rtol 1e-4)${fx ? "" : ` [${fixtureNote("rmsnorm")}]`}`, () => {
    const t = fx!;
    const xs = t.get("x")!.data as Float32Array;
    const out = rmsNorm(xs, t.get("w")!.data as Float32Array, (t.get("eps")!.data as Float64Array)[0], new Float32Array(xs.length), 128);
    // The fixture's tolerance, and also our own 1e-5-relative standard on the non-zero rows.
    expectClose(out, t.get("y")!.data as Float64Array, 1e-4, 1e-5);
    expectClose(out, t.get("y")!.data as Float64Array, 1e-5, 1e-12);
  });

  it("names bad arguments", () => {
    expect(() => rmsNorm(new Float32Array(10), new Float32Array(4), 1e-5, new Float32Array(10), 4)).toThrow(
      /rmsNorm: x.length \(10\) is not a multiple of dim \(4\)/,
    );
    expect(() => rmsNorm(new Float32Array(8), new Float32Array(3), 1e-5, new Float32Array(8), 4)).toThrow(/weight is shorter than dim/);
    expect(() => rmsNorm(new Float32Array(8), new Float32Array(4), 1e-5, new Float32Array(7), 4)).toThrow(/out is shorter than x/);
    expect(() => rmsNorm(new Float32Array(8), new Float32Array(4), NaN, new Float32Array(8), 4)).toThrow(/'eps' must be finite/);
    expect(() => rmsNorm(new Float32Array(8), new Float32Array(4), 1e-5, new Float32Array(8), 0)).toThrow(/dim must be >= 1/);
  });
});

describe("l2Normalize", () => {
  it("matches x / sqrt(sum x^2 + eps) in float64, per row", () => {
    const dim = 128;
    const x = uniform(dim * 4, -2, 2, 91);
    x.fill(0, dim, 2 * dim); // a zero row stays zero (eps keeps it finite)
    const out = l2Normalize(x, new Float32Array(x.length), dim, 1e-6);
    const ref = new Float64Array(x.length);
    for (let r = 0; r < 4; r++) {
      let ss = 0;
      for (let k = 0; k < dim; k++) ss += x[r * dim + k] ** 2;
      for (let k = 0; k < dim; k++) ref[r * dim + k] = x[r * dim + k] / Math.sqrt(ss + Math.fround(1e-6));
    }
    expectClose(out, ref);
    sameAtEveryLevel(() => l2Normalize(x, new Float32Array(x.length), dim, 1e-6));
  });

  it("with a scale is the unscaled norm then one f32 multiply, bit for bit, over rows split on the pool", () => {
    // 200 rows of 128 (several pool tasks) and 3 rows of 9000 (a task per row), zero and NaN rows included
    for (const [rows, dim] of [[200, 128], [3, 9000]]) {
      const x = uniform(rows * dim, -3, 3, 92 + dim);
      x.fill(0, 0, dim);
      x[dim + 5] = NaN;
      const scale = Math.fround(1 / Math.sqrt(128));
      const want = l2Normalize(x, new Float32Array(x.length), dim, 1e-6).map((v) => Math.fround(v * scale));
      expect(bytesEqual(l2Normalize(x, new Float32Array(x.length), dim, 1e-6, scale), want), `${rows}x${dim}`).toBe(true);
      const inPlace = x.slice();
      expect(bytesEqual(l2Normalize(inPlace, inPlace, dim, 1e-6, scale), want), `${rows}x${dim} in place`).toBe(true);
      expect(bytesEqual(l2Normalize(x, new Float32Array(x.length), dim, 1e-6, 1), l2Normalize(x, new Float32Array(x.length), dim, 1e-6))).toBe(true);
      sameAtEveryLevel(() => l2Normalize(x, new Float32Array(x.length), dim, 1e-6, scale));
      sameAtEveryLevel(() => rmsNorm(x, uniform(dim, 0.5, 1.5, 93), 1e-5, new Float32Array(x.length), dim));
    }
    expect(() => l2Normalize(new Float32Array(4), new Float32Array(4), 4, 1e-6, Infinity)).toThrow(/'scale' must be finite/);
  });
});

describe("sigmoidMul", () => {
  it("is sigmoid(gate) then one f32 multiply, bit for bit, at every level and thread count, in place too", () => {
    // lengths around the 8-lane tail and the 8192-value pool pieces
    for (const n of [1, 7, 9, 8192, 8193, 3 * 8192 + 5]) {
      const x = uniform(n, -4, 4, 94 + n);
      const gate = uniform(n, -30, 30, 95 + n);
      if (n > 8) (gate[3] = NaN), (gate[4] = 100), (gate[5] = -100), (x[6] = NaN);
      const s = sigmoid(gate, new Float32Array(n));
      const want = x.map((v, i) => Math.fround(v * s[i]));
      expect(bytesEqual(sigmoidMul(x, gate, new Float32Array(n)), want), `n=${n}`).toBe(true);
      const inPlace = x.slice();
      expect(bytesEqual(sigmoidMul(inPlace, gate, inPlace), want), `n=${n} in place`).toBe(true);
      sameAtEveryLevel(() => sigmoidMul(x, gate, new Float32Array(n)));
    }
    expect(() => sigmoidMul(new Float32Array(4), new Float32Array(3), new Float32Array(4))).toThrow(/x and gate must have the same length/);
    expect(() => sigmoidMul(new Float32Array(4), new Float32Array(4), new Float32Array(3))).toThrow(/out is shorter than x/);
  });
});

describe("add", () => {
  it("is the f32 sum, bit for bit, in place too, over pool pieces", () => {
    for (const n of [1, 8193, 64 * 7168 + 3]) {
      const a = uniform(n, -1e3, 1e3, 800 + n), b = uniform(n, -1e-3, 1e-3, 801 + n);
      if (n > 4) (a[1] = Infinity), (b[2] = NaN), (a[3] = -0), (b[3] = -0);
      const want = a.map((v, i) => Math.fround(v + b[i]));
      expect(bytesEqual(add(a, b, new Float32Array(n)), want), `n=${n}`).toBe(true);
      const inPlace = a.slice();
      expect(bytesEqual(add(inPlace, b, inPlace), want), `n=${n} in place`).toBe(true);
      sameAtEveryLevel(() => add(a, b, new Float32Array(n)));
    }
    expect(() => add(new Float32Array(4), new Float32Array(3), new Float32Array(4))).toThrow(/a and b must have the same length/);
    expect(() => add(new Float32Array(4), new Float32Array(4), new Float32Array(3))).toThrow(/out is shorter than a/);
  });
});

describe("rmsNormDot and mixRows (K3's attention residuals)", () => {
  it("rmsNormDot is rmsNorm's row summed in float64 then rounded, bit for bit, over pool-split rows", () => {
    for (const [rows, dim] of [[3, 7168], [70, 128], [1, 5]]) {
      const x = uniform(rows * dim, -3, 3, 400 + dim);
      const w = uniform(dim, -1.5, 1.5, 401 + dim);
      x.fill(0, 0, dim); // a zero row: eps keeps it finite
      const normed = rmsNorm(x, w, 1e-5, new Float32Array(x.length), dim);
      const want = new Float32Array(rows);
      for (let r = 0; r < rows; r++) {
        let s = 0;
        for (let d = 0; d < dim; d++) s += normed[r * dim + d];
        want[r] = Math.fround(s);
      }
      expect(bytesEqual(rmsNormDot(x, w, 1e-5, dim, new Float32Array(rows)), want), `${rows}x${dim}`).toBe(true);
      sameAtEveryLevel(() => rmsNormDot(x, w, 1e-5, dim, new Float32Array(rows)));
    }
    expect(() => rmsNormDot(new Float32Array(8), new Float32Array(4), 1e-5, 4, new Float32Array(1))).toThrow(/out holds fewer values than x has rows/);
    expect(() => rmsNormDot(new Float32Array(7), new Float32Array(4), 1e-5, 4, new Float32Array(2))).toThrow(/not a multiple of dim/);
  });

  it("mixRows is the float64-accumulated weighted sum in source order, bit for bit, and refuses an overlapping out", () => {
    for (const [n, rows, dim] of [[1, 3, 7168], [9, 64, 7168], [4, 70, 33]]) {
      const sources = Array.from({ length: n }, (_, i) => uniform(rows * dim, -50, 50, 500 + i));
      const pi = uniform(rows * n, 0, 1, 600 + n);
      const want = new Float32Array(rows * dim);
      for (let t = 0; t < rows; t++)
        for (let i = 0; i < n; i++)
          for (let d = 0; d < dim; d++) want[t * dim + d] += pi[t * n + i] * sources[i][t * dim + d];
      expect(bytesEqual(mixRows(sources, pi, dim, new Float32Array(rows * dim)), want), `${n} sources ${rows}x${dim}`).toBe(true);
      sameAtEveryLevel(() => mixRows(sources, pi, dim, new Float32Array(rows * dim)));
    }
    const a = new Float32Array(16), b = new Float32Array(16);
    expect(() => mixRows([a, b], new Float32Array(8), 4, a.subarray(2, 6))).toThrow(/out overlaps sources\[0\]/);
    expect(mixRows([a, b], new Float32Array(8), 4, a.subarray(4, 8))).toHaveLength(4); // a[0..4) is read, a[4..8) is free
    expect(() => mixRows([a, b.subarray(0, 3)], new Float32Array(8), 4, new Float32Array(4))).toThrow(/sources\[1\] is shorter than out/);
    expect(() => mixRows([a, b], new Float32Array(1), 4, new Float32Array(4))).toThrow(/pi holds fewer/);
    expect(() => mixRows([], new Float32Array(1), 4, new Float32Array(4))).toThrow(/1\.\.4096 arrays/);
  });
});

describe("tanh (k3_tanhf: SiTU's)", () => {
  /** Distance in float32 ulps between got and the float64 value want (at want's binade). */
  const ulps = (got: number, want: number) => {
    const w = Math.fround(want);
    const e = Math.max(Math.floor(Math.log2(Math.abs(w) || 2 ** -149)), -126);
    return Math.abs(got - want) / 2 ** (e - 23);
  };

  it("is within 3 ulp of tanh over every binade from 2^-20 to 2^4, and saturates to +-1 past 9", () => {
    const xs: number[] = [];
    for (let e = -20; e <= 4; e++) for (let i = 0; i < 512; i++) xs.push(Math.fround(2 ** e * (1 + i / 512)));
    for (const v of [0.6249999, 0.625, 0.6250001, 9, 9.1, 20, 44, 44.5, 88, 1e30]) xs.push(v);
    const x = new Float32Array([...xs, ...xs.map((v) => -v)]);
    let worst = 0;
    for (const level of available) {
      setSimdLevel(level);
      const got = tanh(x, new Float32Array(x.length));
      for (let i = 0; i < x.length; i++) {
        const d = ulps(got[i], Math.tanh(x[i]));
        worst = Math.max(worst, d);
        expect(d, `${level} tanh(${x[i]}) = ${got[i]}, float64 ${Math.tanh(x[i])}`).toBeLessThanOrEqual(3);
      }
    }
    expect(worst).toBeGreaterThan(0); // the comparison ran on real values
    const sat = tanh(new Float32Array([9.1, 50, 1e30, Infinity, -9.1, -Infinity]), new Float32Array(6));
    expect(Array.from(sat)).toEqual([1, 1, 1, 1, -1, -1]);
  });

  it("keeps +-0 and NaN, and has the same bits at every level on every length", () => {
    const special = tanh(new Float32Array([0, -0, NaN]), new Float32Array(3));
    expect(Object.is(special[0], 0) && Object.is(special[1], -0) && Number.isNaN(special[2])).toBe(true);
    for (const n of [1, 7, 8, 9, 200, 1031]) {
      const x = uniform(n, -12, 12, 300 + n);
      if (n > 8) (x[1] = 0.625), (x[2] = -0), (x[3] = NaN), (x[4] = 1e-30), (x[5] = -88);
      sameAtEveryLevel(() => tanh(x, new Float32Array(n)));
    }
  });
});

describe("activations", () => {
  const x = new Float32Array([...uniform(200, -30, 30, 101), 0, -0, 88, -88, 100, -100, 1e-30, -1e-30]);
  const u = uniform(x.length, -50, 50, 102);
  const sig = (v: number) => 1 / (1 + Math.exp(-v));

  it("sigmoid, silu and siluGlu match float64", () => {
    expectClose(sigmoid(x, new Float32Array(x.length)), Array.from(x, sig));
    expectClose(silu(x, new Float32Array(x.length)), Array.from(x, (v) => v * sig(v)));
    expectClose(siluGlu(x, u, new Float32Array(x.length)), Array.from(x, (v, i) => v * sig(v) * u[i]));
  });

  it("situGlu matches [4 tanh(g/4) sigma(g)] [25 tanh(u/25)] and stays within 100", () => {
    const out = situGlu(x, u, new Float32Array(x.length));
    expectClose(out, Array.from(x, (g, i) => 4 * Math.tanh(g / 4) * sig(g) * (25 * Math.tanh(u[i] / 25))), 2e-6);
    for (const v of out) expect(Math.abs(v)).toBeLessThanOrEqual(100);
    const custom = situGlu(x, u, new Float32Array(x.length), 2, 10);
    expectClose(custom, Array.from(x, (g, i) => 2 * Math.tanh(g / 2) * sig(g) * (10 * Math.tanh(u[i] / 10))), 2e-6);
  });

  it("is identical at every SIMD level", () => {
    sameAtEveryLevel(() => situGlu(x, u, new Float32Array(x.length)));
    sameAtEveryLevel(() => silu(x, new Float32Array(x.length)));
  });

  // k3_expf (ops_exp.h) replaced libm expf so sigmoid/SiLU/SiLU-GLU vectorise: its 8-lane form
  // must give the scalar function's bits on every edge (clamps, overflow to inf, the subnormal
  // results below e^-87.3, NaN, -0) and ragged lengths (the scalar tail after the last 8 lanes).
  const edges = new Float32Array([
    0, -0, 1e-30, -1e-30, 88, 88.7, 88.72, 88.73, 89, 90, 1e30, Infinity, -Infinity, NaN, -NaN,
    -87, -87.33, -87.4, -88, -90, -95, -100, -103.2, -103.97, -104, -105, -1e30,
    ...uniform(993, -110, 95, 103),
  ]);
  const sigmoid64 = (v: number) => (Number.isNaN(v) ? NaN : 1 / (1 + Math.exp(-v)));

  it("sigmoid, silu and siluGlu keep their bits at every SIMD level on every edge and length", () => {
    const up = uniform(edges.length, -4, 4, 104);
    for (const n of [1, 7, 8, 9, 15, 16, 17, edges.length]) {
      const e = edges.subarray(0, n), w = up.subarray(0, n);
      sameAtEveryLevel(() => sigmoid(e, new Float32Array(n)));
      sameAtEveryLevel(() => silu(e, new Float32Array(n)));
      sameAtEveryLevel(() => siluGlu(e, w, new Float32Array(n)));
    }
  });

  it("sigmoid is within 2 ulp of float64 wherever it is a normal float, NaN stays NaN", () => {
    // sigmoid(x) = 1 / (1 + e^-x): for x <= -20 it is 1 / e^-x to far below f32 precision, so this
    // checks k3_expf over [20, 88.7] up to its overflow (beyond, e^-x = inf and sigmoid is 0, as
    // with libm, where the true value is below 2^-126).
    for (const level of available) {
      setSimdLevel(level);
      const got = sigmoid(edges, new Float32Array(edges.length));
      for (let i = 0; i < edges.length; i++) {
        const want = sigmoid64(edges[i]);
        if (Number.isNaN(want)) {
          expect(Number.isNaN(got[i]), `${level} sigmoid(${edges[i]})`).toBe(true);
          continue;
        }
        const tol = want < 2 ** -126 ? 2 ** -126 : 2 * want * 2 ** -23;
        expect(Math.abs(got[i] - want), `${level} sigmoid(${edges[i]}) = ${got[i]}, float64 ${want}`).toBeLessThanOrEqual(tol);
      }
    }
    setSimdLevel("scalar");
    expect(sigmoid(new Float32Array([89, 1e30, -104, -1e30]), new Float32Array(4))).toEqual(new Float32Array([1, 1, 0, 0]));
  });

  it("GLU activations split over the pool give the same bits at 1/2/3 threads, in place too", () => {
    // 3 pieces of the kernel's 8192 and a ragged tail, so every task boundary is crossed.
    const n = 3 * 8192 + 77;
    const g = uniform(n, -30, 30, 11), up = uniform(n, -60, 60, 12);
    const before = threadCount();
    try {
      setThreadCount(1);
      const situ1 = situGlu(g, up, new Float32Array(n), 4, 25);
      const silu1 = siluGlu(g, up, new Float32Array(n));
      expectClose(situ1.subarray(n - 77), Array.from(g.subarray(n - 77), (v, i) => 4 * Math.tanh(v / 4) * sig(v) * (25 * Math.tanh(up[n - 77 + i] / 25))), 2e-6);
      for (const t of [2, 3]) {
        setThreadCount(t);
        expect(bytesEqual(situGlu(g, up, new Float32Array(n), 4, 25), situ1), `situGlu at ${t} threads`).toBe(true);
        expect(bytesEqual(siluGlu(g, up, new Float32Array(n)), silu1), `siluGlu at ${t} threads`).toBe(true);
        const inPlace = g.slice();
        situGlu(inPlace, up, inPlace, 4, 25);
        expect(bytesEqual(inPlace, situ1), `situGlu in place at ${t} threads`).toBe(true);
      }
    } finally {
      setThreadCount(before);
    }
  });

  const fx = fixtureExists("situ_glu.safetensors") ? readFixtureMinimal("situ_glu.safetensors") : null;
  (fx ? it : it.skip)(`matches fixtures/components/situ_glu (atol 1e-5, rtol 1e-5)${fx ? "" : ` [${fixtureNote("situ_glu")}]`}`, () => {
    const t = fx!;
    const a = t.get("a")!.data as Float32Array;
    const b = t.get("b")!.data as Float32Array;
    expectClose(situGlu(a, b, new Float32Array(a.length)), t.get("out")!.data as Float64Array, 1e-5, 1e-5);
    expectClose(siluGlu(a, b, new Float32Array(a.length)), t.get("silu_glu_out")!.data as Float64Array, 1e-5, 1e-5);
  });

  it("names bad arguments", () => {
    expect(() => siluGlu(new Float32Array(3), new Float32Array(4), new Float32Array(4))).toThrow(/siluGlu: gate and up must have the same length/);
    expect(() => situGlu(new Float32Array(3), new Float32Array(3), new Float32Array(3), 0)).toThrow(/beta1 and beta2 must be > 0/);
    expect(() => silu(new Float32Array(3), new Float32Array(2))).toThrow(/silu: out is shorter than x/);
  });
});

describe("softmax", () => {
  it("matches a float64 max-subtracted softmax per row and sums to 1", () => {
    const dim = 50;
    const x = uniform(dim * 3, -40, 40, 111);
    x[7] = -Infinity;
    const out = softmax(x, new Float32Array(x.length), dim);
    for (let r = 0; r < 3; r++) {
      const row = Array.from(x.subarray(r * dim, (r + 1) * dim));
      const m = Math.max(...row);
      // x - max is rounded to f32 first, as the kernel does (that rounding, not expf, dominates the error)
      const e = row.map((v) => Math.exp(Math.fround(v - m)));
      const s = e.reduce((p, q) => p + q, 0);
      expectClose(out.subarray(r * dim, (r + 1) * dim), e.map((v) => v / s), 2e-6, 1e-30);
    }
    expect(out[7]).toBe(0);
  });

  it("turns a row with NaN, or only -inf, into NaN and leaves other rows alone", () => {
    const x = new Float32Array([1, NaN, 2, -Infinity, -Infinity, -Infinity, 0, 0, 0]);
    const out = softmax(x, new Float32Array(9), 3);
    expect(out.subarray(0, 6).every(Number.isNaN)).toBe(true);
    expect(Array.from(out.subarray(6))).toEqual([1 / 3, 1 / 3, 1 / 3].map(Math.fround));
  });
});

describe("topK", () => {
  it("returns the k largest in descending order, ties to the lower index", () => {
    const v = new Float32Array([3, 1, 3, 7, -2, 7, 0, -0]);
    const r = topK(v, 5);
    expect(Array.from(r.indices)).toEqual([3, 5, 0, 2, 1]);
    expect(Array.from(r.values)).toEqual([7, 7, 3, 3, 1]);
    expect(Array.from(topK(v, 7).indices)).toEqual([3, 5, 0, 2, 1, 6, 7]);
    const zeros = topK(new Float32Array([-0, 0, -0]), 2);
    expect(Array.from(zeros.indices)).toEqual([0, 1]);
  });

  it("ranks NaN below -Infinity (lower index first among NaNs)", () => {
    const v = new Float32Array([NaN, -Infinity, 5, NaN, 1]);
    expect(Array.from(topK(v, 3).indices)).toEqual([2, 4, 1]);
    expect(Array.from(topK(v, 5).indices)).toEqual([2, 4, 1, 0, 3]);
  });

  it("agrees with a full sort on a vocabulary-sized vector", () => {
    const v = uniform(163840, -10, 10, 121);
    for (let i = 0; i < 1000; i++) v[(i * 7919) % v.length] = 9.5; // many ties
    const k = 64;
    const r = topK(v, k);
    const order = Array.from(v.keys()).sort((a, b) => v[b] - v[a] || a - b);
    expect(Array.from(r.indices)).toEqual(order.slice(0, k));
    expect(topK(v, 0).indices.length).toBe(0);
  });

  it("refuses k larger than the input", () => {
    expect(() => topK(new Float32Array(3), 4)).toThrow(/topK: k \(4\) exceeds values.length \(3\)/);
    expect(() => topK(new Float32Array(3), -1)).toThrow(/'k' must be a non-negative integer/);
  });
});

describe("memoryReadCeiling", () => {
  it("streams a buffer and reports a plausible GB/s", () => {
    const { gbPerSec } = memoryReadCeiling({ bytes: 64 * 2 ** 20, threads: 1, reps: 2 });
    expect(gbPerSec).toBeGreaterThan(0.5);
    expect(gbPerSec).toBeLessThan(2000);
    expect(threadCount()).toBe(threadCount());
    expect(() => memoryReadCeiling({ bytes: 10 })).toThrow(/bytes must be >= 4096/);
  });
});

describe("fmaPeak", () => {
  it("reports a plausible GFLOP/s and names bad arguments", () => {
    const { gflops } = fmaPeak({ threads: 1, reps: 1 });
    expect(gflops).toBeGreaterThan(0.1);
    expect(gflops).toBeLessThan(10000);
    expect(() => fmaPeak({ threads: 0 })).toThrow(/threads must be between 1 and 256/);
    expect(() => fmaPeak({ threads: 1, reps: 0 })).toThrow(/reps must be between 1 and 1000/);
  });

  it("times the exact GEMM's register loop at every SIMD level", () => {
    for (const level of available) {
      setSimdLevel(level);
      const { gflops } = fmaPeak({ threads: 1, reps: 1, loop: "gemm" });
      expect(gflops, level).toBeGreaterThan(0.1);
      expect(gflops, level).toBeLessThan(10000);
    }
    expect(() => fmaPeak({ loop: "fast" as "gemm" })).toThrow(/loop must be "chains" or "gemm", got "fast"/);
  });
});
