import { describe, expect, it } from "vitest";
import {
  E2M1_VALUES,
  Mxfp4Error,
  blockExponent,
  dequantize,
  e8m0ToNumber,
  fromGgml,
  fromGptOss,
  matvec,
  quantize,
  quantizeBf16,
  quantizeReference,
  toGgml,
  toGptOss,
  validateScales,
  type Mxfp4Matrix,
} from "../src/index.js";
import { f32ToBf16, bf16ToF32 } from "@k3/dense";
import { componentsDir, fixtureExists, randomBytes, readFixture, uniform } from "@k3/test-utils";
import { randomMatrix } from "./helpers.js";

const fixture = fixtureExists("mxfp4.safetensors") ? readFixture("mxfp4.safetensors") : null;
const fixtureIt = fixture ? it : it.skip;
const fixtureNote = fixture ? "" : ` [skipped: mxfp4.safetensors absent from ${componentsDir}]`;

describe("decoding", () => {
  it("byte 0x21 with scale 127 gives [0.5, 1.0]; scale 126 halves it", () => {
    const packed = new Uint8Array(16);
    packed[0] = 0x21;
    expect(Array.from(dequantize({ packed, scales: new Uint8Array([127]), rows: 1, cols: 32 }).subarray(0, 3))).toEqual([0.5, 1, 0]);
    expect(Array.from(dequantize({ packed, scales: new Uint8Array([126]), rows: 1, cols: 32 }).subarray(0, 2))).toEqual([0.25, 0.5]);
  });

  it("puts the even element in the low nibble", () => {
    const packed = new Uint8Array(16);
    packed[3] = 0xf7; // element 6 = code 7 (6.0), element 7 = code 15 (-6.0)
    const w = dequantize({ packed, scales: new Uint8Array([127]), rows: 1, cols: 32 });
    expect([w[6], w[7]]).toEqual([6, -6]);
  });

  it("decodes every code in both nibbles under scales 0, 1, 64, 126, 127, 128, 200, 254", () => {
    for (const s of [0, 1, 64, 126, 127, 128, 200, 254]) {
      const packed = new Uint8Array(16);
      for (let j = 0; j < 16; j++) packed[j] = j | ((15 - j) << 4);
      const w = dequantize({ packed, scales: new Uint8Array([s]), rows: 1, cols: 32 });
      for (let j = 0; j < 16; j++) {
        const even = Math.fround(E2M1_VALUES[j] * 2 ** (s - 127));
        const odd = Math.fround(E2M1_VALUES[15 - j] * 2 ** (s - 127));
        expect(Object.is(w[2 * j], even), `s ${s} code ${j}`).toBe(true);
        expect(Object.is(w[2 * j + 1], odd), `s ${s} code ${15 - j}`).toBe(true);
      }
    }
    expect(e8m0ToNumber(0)).toBe(2 ** -127);
    expect(() => e8m0ToNumber(255)).toThrow(/0xFF/);
  });

  fixtureIt(`matches fixtures/components/mxfp4 hand and codes cases exactly${fixtureNote}`, () => {
    const t = fixture!;
    for (const group of ["hand", "codes"]) {
      const packed = t.get(`${group}.packed`)!;
      const m: Mxfp4Matrix = {
        packed: packed.data as Uint8Array,
        scales: t.get(`${group}.scale`)!.data as Uint8Array,
        rows: packed.shape[0],
        cols: packed.shape[1] * 2,
      };
      const expected = t.get(`${group}.expected`)!.data as Float64Array;
      const w = dequantize(m);
      for (let i = 0; i < w.length; i++) expect(Object.is(w[i], expected[i]), `${group}[${i}]`).toBe(true);
      if (group === "codes") {
        const swapped = t.get("codes.nibble_swapped_expected")!.data as Float64Array;
        expect(Array.from(w).some((v, i) => v !== swapped[i])).toBe(true);
      }
    }
  });

  fixtureIt(`matches the fixture matvec within its tolerance (atol 1e-6, rtol 1e-5)${fixtureNote}`, () => {
    const t = fixture!;
    const m: Mxfp4Matrix = { packed: t.get("matvec.packed")!.data as Uint8Array, scales: t.get("matvec.scale")!.data as Uint8Array, rows: 64, cols: 128 };
    const y = matvec(m, t.get("matvec.x")!.data as Float32Array, new Float32Array(64));
    const dq = dequantize(m);
    const ref = t.get("matvec.dequant")!.data as Float64Array;
    for (let i = 0; i < dq.length; i++) expect(dq[i]).toBe(ref[i]);
    for (const name of ["matvec.y", "matvec.y_blockwise"]) {
      const e = t.get(name)!.data as Float64Array;
      for (let r = 0; r < 64; r++) expect(Math.abs(y[r] - e[r]), `${name}[${r}]`).toBeLessThanOrEqual(1e-6 + 1e-5 * Math.abs(e[r]));
    }
  });
});

describe("0xFF scales", () => {
  it("are refused, naming the row and block", () => {
    const m = randomMatrix(3, 96, 1);
    m.scales[1 * 3 + 2] = 0xff;
    expect(() => validateScales(m, "blk.7.w2")).toThrow(/blk\.7\.w2: scale 0xFF .* at row 1, block 2 \(columns 64\.\.95\)/);
    expect(() => matvec(m, new Float32Array(96), new Float32Array(3))).toThrow(Mxfp4Error);
    expect(() => dequantize(m)).toThrow(/row 1, block 2/);
    expect(() => toGgml(m)).toThrow(/row 1, block 2/);
    expect(() => toGptOss(m)).toThrow(/row 1, block 2/);
  });

  it("are caught even when written after a view was validated (an expert arena reusing its slots)", async () => {
    const { matvecInt8, matmul } = await import("../src/index.js");
    const m = randomMatrix(8, 64, 11);
    const x = new Float32Array(64).fill(0.5);
    matvec(m, x, new Float32Array(8)); // validates and caches this range
    m.scales[5 * 2 + 1] = 0xff; // new bytes land in the same range
    expect(() => matvec(m, x, new Float32Array(8))).toThrow(/scale 0xFF .* row 5, block 1/);
    expect(() => matmul(m, new Float32Array(5 * 64), new Float32Array(5 * 8), 5)).toThrow(/row 5, block 1/);
    expect(() => matvecInt8(m, x, new Float32Array(8))).toThrow(/row 5, block 1/);
    m.scales[5 * 2 + 1] = 127;
    const nanX = x.slice();
    nanX[3] = NaN; // NaN activations are passed through, not mistaken for a bad scale
    expect(matvec(m, nanX, new Float32Array(8)).every(Number.isNaN)).toBe(true);
  });

  fixtureIt(`rejects the fixture's reject case${fixtureNote}`, () => {
    const t = fixture!;
    const m: Mxfp4Matrix = { packed: t.get("reject.packed")!.data as Uint8Array, scales: t.get("reject.scale")!.data as Uint8Array, rows: 1, cols: 32 };
    expect(() => matvec(m, new Float32Array(32), new Float32Array(1))).toThrow(/0xFF/);
  });

  it("are refused by fromGgml even though ggml itself would read them as 2^127", () => {
    const g = toGgml(randomMatrix(2, 64, 2));
    g[17] = 0xff;
    expect(() => fromGgml(g, 2, 64)).toThrow(/fromGgml: scale 0xFF .* row 0, block 1/);
  });
});

describe("quantize", () => {
  it("chooses the smallest e with 6 * 2^e >= block max", () => {
    expect(blockExponent(6)).toBe(0);
    expect(blockExponent(6.000001)).toBe(1);
    expect(blockExponent(3)).toBe(-1);
    expect(blockExponent(3.0000002)).toBe(0);
    expect(blockExponent(0)).toBe(0);
    expect(blockExponent(1e-40)).toBeLessThan(-130);
  });

  it("rounds to nearest, ties to the even code, and saturates", () => {
    // block max 6 -> s = 127; values on ties between grid points
    const v = new Float32Array(32);
    v.set([6, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, -0.25, -5, 5.9, -0]);
    const m = quantize(v, 1, 32);
    expect(m.scales[0]).toBe(127);
    expect(Array.from(dequantize(m).subarray(0, 12))).toEqual([6, 0, 1, 1, 2, 2, 4, 4, -0, -4, 6, 0]);
    expect(Object.is(dequantize(m)[8], -0)).toBe(true); // a small negative keeps its sign (code 8)
  });

  it("keeps the error within half a step (<= max/5 per block) over random data, and re-quantises its own output to the same values", () => {
    const rows = 8, cols = 256;
    const v = uniform(rows * cols, -1, 1, 3);
    for (let i = 0; i < v.length; i += 97) v[i] *= 1000; // blocks with very different ranges
    const m = quantize(v, rows, cols);
    const d = dequantize(m);
    let worst = 0;
    for (let blk = 0; blk < (rows * cols) / 32; blk++) {
      let amax = 0;
      for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(v[blk * 32 + i]));
      const step = 2 ** (m.scales[blk] - 127);
      for (let i = 0; i < 32; i++) {
        const err = Math.abs(d[blk * 32 + i] - v[blk * 32 + i]);
        expect(err).toBeLessThanOrEqual(step); // half of the widest step (2 * 2^(s-127))
        expect(err).toBeLessThanOrEqual(amax / 5 + 1e-30);
        worst = Math.max(worst, err / amax);
      }
    }
    expect(worst).toBeGreaterThan(0.01); // the bound is not vacuous
    // Re-quantising the decoded values gives the same values (bytes may differ: a block whose max
    // rounded down to 3 * 2^e is re-encoded one exponent lower, with every code doubled).
    // (-0 re-encodes as +0, like the reference: the sign bit comes from v < 0)
    expect(Array.from(dequantize(quantize(d, rows, cols)), (v) => v + 0)).toEqual(Array.from(d, (v) => v + 0));
  });

  it("native quantize equals the TypeScript definition byte for byte (random, tiny, huge, zero and tie-heavy blocks)", () => {
    const rows = 16, cols = 320;
    const v = uniform(rows * cols, -1, 1, 31);
    for (let i = 0; i < v.length; i += 7) v[i] *= 2 ** ((i % 270) - 150); // block maxima from subnormal to ~2^119
    v.fill(0, 64, 96); // an all-zero block
    for (let i = 96; i < 128; i++) v[i] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5, 6][i % 8] * (i % 2 ? -1 : 1);
    for (let i = 128; i < 160; i++) v[i] = (i - 140) * 1e-41; // an all-subnormal block: s clamps to 0
    v[200] = 3e38;
    v[201] = -1e-45;
    const a = quantize(v, rows, cols);
    const b = quantizeReference(v, rows, cols);
    expect(Buffer.from(a.packed).equals(Buffer.from(b.packed))).toBe(true);
    expect(Buffer.from(a.scales).equals(Buffer.from(b.scales))).toBe(true);
    expect(a.scales.includes(0)).toBe(true); // the low clamp is exercised (f32 cannot reach s = 255)
    expect(Math.max(...a.scales)).toBe(253); // 3e38 -> e = 126
  });

  it("accepts bf16 input (a Kimi-Linear-48B tensor) with the same result as its f32 value", () => {
    const v = uniform(4 * 64, -2, 2, 4);
    const bits = f32ToBf16(v);
    const a = quantizeBf16(bits, 4, 64);
    const b = quantize(bf16ToF32(bits), 4, 64);
    expect(Buffer.from(a.packed).equals(Buffer.from(b.packed)) && Buffer.from(a.scales).equals(Buffer.from(b.scales))).toBe(true);
  });

  fixtureIt(`reproduces the fixture quantiser byte for byte${fixtureNote}`, () => {
    const t = fixture!;
    const input = t.get("quant.input")!.data as Float32Array;
    const r = quantizeReference(input, 8, 64);
    expect(Buffer.from(r.packed).equals(Buffer.from(t.get("quant.packed")!.data as Uint8Array))).toBe(true);
    const m = quantize(input, 8, 64);
    expect(Buffer.from(m.packed).equals(Buffer.from(t.get("quant.packed")!.data as Uint8Array))).toBe(true);
    expect(Buffer.from(m.scales).equals(Buffer.from(t.get("quant.scale")!.data as Uint8Array))).toBe(true);
    const decoded = t.get("quant.decoded")!.data as Float64Array;
    const d = dequantize(m);
    for (let i = 0; i < d.length; i++) expect(Object.is(d[i], decoded[i]) || d[i] === decoded[i]).toBe(true);
  });

  it("refuses bad shapes and non-finite values by position", () => {
    expect(() => quantize(new Float32Array(48), 1, 48)).toThrow(/cols \(48\) is not a multiple of 32/);
    expect(() => quantize(new Float32Array(60), 2, 32)).toThrow(/values has 60 elements, expected rows x cols = 64/);
    const v = new Float32Array(128);
    v[64 + 45] = NaN;
    v[120] = Infinity;
    expect(() => quantize(v, 2, 64)).toThrow(/non-finite value NaN at row 1, column 45/);
    expect(() => quantizeReference(v, 2, 64)).toThrow(/non-finite value NaN at row 1, column 45/);
  });
});

describe("layout conversions", () => {
  it("ggml block_mxfp4: element j in the low nibble of qs[j], j+16 in the high nibble, e first", () => {
    const packed = new Uint8Array(16);
    packed[0] = 0x21; // elements 0 (code 1) and 1 (code 2)
    packed[8] = 0x73; // elements 16 (code 3) and 17 (code 7)
    const g = toGgml({ packed, scales: new Uint8Array([130]), rows: 1, cols: 32 });
    expect(g.length).toBe(17);
    expect(g[0]).toBe(130);
    expect(g[1]).toBe(0x31); // qs[0] = element 0 | element 16 << 4
    expect(g[2]).toBe(0x72); // qs[1] = element 1 | element 17 << 4
  });

  it("round-trips byte-exactly through ggml and gpt-oss", () => {
    const m = randomMatrix(7, 160, 5, 0, 254);
    const back = fromGgml(toGgml(m), 7, 160);
    expect(Buffer.from(back.packed).equals(Buffer.from(m.packed))).toBe(true);
    expect(Buffer.from(back.scales).equals(Buffer.from(m.scales))).toBe(true);
    const g = toGptOss(m);
    expect(g.blocksShape).toEqual([7, 5, 16]);
    const m2 = fromGptOss(g.blocks, g.scales, g.blocksShape);
    expect(m2.packed).toBe(m.packed); // zero-copy
    expect([m2.rows, m2.cols]).toEqual([7, 160]);
    const experts = fromGptOss(randomBytes(2 * 3 * 2 * 16, 6), new Uint8Array(2 * 3 * 2).fill(127), [2, 3, 2, 16]);
    expect([experts.rows, experts.cols]).toEqual([6, 64]);
  });

  it("ggml decoding with its doubled int table and 2^(e-128) gives the same values", () => {
    const m = randomMatrix(3, 64, 7, 1, 254);
    const g = toGgml(m);
    const doubled = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];
    const d = dequantize(m);
    for (let blk = 0; blk < 6; blk++) {
      const e = g[blk * 17];
      for (let j = 0; j < 16; j++) {
        const q = g[blk * 17 + 1 + j];
        expect(doubled[q & 15] * 2 ** (e - 128)).toBe(d[blk * 32 + j] + 0);
        expect(doubled[q >> 4] * 2 ** (e - 128)).toBe(d[blk * 32 + j + 16] + 0);
      }
    }
  });

  it("names shape errors", () => {
    expect(() => fromGgml(new Uint8Array(16), 1, 32)).toThrow(/fromGgml: 16 bytes, expected 1 blocks x 17 = 17/);
    expect(() => fromGptOss(new Uint8Array(32), new Uint8Array(2), [2, 16])).toThrow(/must end in \[out, in\/32, 16\]/);
    expect(() => fromGptOss(new Uint8Array(32), new Uint8Array(3), [2, 1, 16])).toThrow(/scales has 3 bytes, expected 2 x 1 = 2/);
  });
});
