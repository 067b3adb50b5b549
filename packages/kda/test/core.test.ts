import { describe, expect, it } from "vitest";
import { chunked, forgetGate, headALog, K3_KDA, KIMI_LINEAR_48B_KDA, nativeInfo, recurrent, shortConv } from "../src/index.js";
import { bytesEqual, closeTo, expectBitIdentical, f32, fixtureExists, get, manifestTol, readFixture, relErr, uniform, unitRows } from "@k3/test-utils";
import { recurrenceF64 } from "./reference.js";
import { setThreadCount, silu, threadCount } from "@k3/dense";

const threads0 = threadCount();

/** Random KDA core inputs with unit q/k rows, q scaled, gates in the K3 range (lb, 0) or 48B-like. */
function randomCore(T: number, H: number, dk: number, dv: number, seed: number, gateLo = -5, withState = true) {
  const q = unitRows(uniform(T * H * dk, -1, 1, seed), dk, 1 / Math.sqrt(dk));
  const k = unitRows(uniform(T * H * dk, -1, 1, seed + 1), dk);
  const v = uniform(T * H * dv, -1, 1, seed + 2);
  const g = uniform(T * H * dk, gateLo, 0, seed + 3);
  const beta = uniform(T * H, 0, 1, seed + 4);
  const S0 = withState ? uniform(H * dk * dv, -0.5, 0.5, seed + 5) : new Float32Array(H * dk * dv);
  return { q, k, v, g, beta, S0 };
}

describe("loading", () => {
  it("loads the prebuilt binary unless source mode is asked for", () => {
    expect(nativeInfo().origin).toBe(process.env.K3_SOURCE_BUILD ? "source" : "prebuilt");
  });
});

describe("forget gate (invariant 1: A_log per head, right family)", () => {
  it.skipIf(!fixtureExists("kda_gate_k3.safetensors"))("K3 form matches the reference, A_log sliced from its padded vector", () => {
    const m = readFixture("kda_gate_k3.safetensors");
    const H = 8, dk = 16;
    const cfg = { ...K3_KDA, numHeads: H, headDim: dk, hidden: 128 };
    const aLog = headALog(f32(m, "A_log"), cfg);
    expect(aLog.length).toBe(H);
    const g = forgetGate(f32(m, "z_raw"), f32(m, "dt_bias"), aLog, new Float32Array(3 * H * dk), H, dk, "k3-lowerbound", -5);
    const tol = manifestTol("kda_gate_k3.safetensors");
    expect(closeTo(g, get(m, "g").data, tol).detail).toBe("ok");
    const alpha = g.map(Math.exp);
    expect(closeTo(alpha, get(m, "alpha").data, tol).detail).toBe("ok");
    // the per-channel bug gives a different (plausible) gate: our output must not match it
    expect(closeTo(g, get(m, "g_wrong_per_channel").data, tol).ok).toBe(false);
  });

  it.skipIf(!fixtureExists("kda_gate_k3.safetensors"))("the fixture comparison rejects A_log indexed per channel (built here)", () => {
    const m = readFixture("kda_gate_k3.safetensors");
    const H = 8, dk = 16;
    const padded = f32(m, "A_log");
    // wrong variant: channel c of head h uses A_log[c % len] instead of A_log[h]
    const wrongPerChannel = new Float32Array(H * dk);
    for (let c = 0; c < H * dk; c++) wrongPerChannel[c] = padded[c % padded.length];
    const z = f32(m, "z_raw"), dt = f32(m, "dt_bias");
    const wrong = new Float64Array(3 * H * dk);
    for (let t = 0; t < 3; t++)
      for (let c = 0; c < H * dk; c++) wrong[t * H * dk + c] = -5 / (1 + Math.exp(-Math.exp(wrongPerChannel[c]) * (z[t * H * dk + c] + dt[c])));
    expect(closeTo(wrong, get(m, "g").data, manifestTol("kda_gate_k3.safetensors")).ok).toBe(false);
  });

  it.skipIf(!fixtureExists("kda_gate_48b.safetensors"))("48B softplus form matches; the K3 form on the same inputs is rejected", () => {
    const m = readFixture("kda_gate_48b.safetensors");
    const H = 8, dk = 16;
    const cfg = { ...KIMI_LINEAR_48B_KDA, numHeads: H, headDim: dk, hidden: 128 };
    const aLog = headALog(f32(m, "A_log"), cfg);
    const tol = manifestTol("kda_gate_48b.safetensors");
    const g = forgetGate(f32(m, "z_raw"), f32(m, "dt_bias"), aLog, new Float32Array(3 * H * dk), H, dk, "48b-softplus");
    expect(closeTo(g, get(m, "g").data, tol).detail).toBe("ok");
    const wrongFamily = forgetGate(f32(m, "z_raw"), f32(m, "dt_bias"), aLog, new Float32Array(3 * H * dk), H, dk, "k3-lowerbound", -5);
    expect(closeTo(wrongFamily, get(m, "g").data, tol).ok).toBe(false);
  });

  it("perturbing A_log[h] changes head h's gate only", () => {
    const H = 6, dk = 16, T = 3;
    const z = uniform(T * H * dk, -3, 3, 7), dt = uniform(H * dk, -1, 1, 8), aLog = uniform(H, -0.5, 1, 9);
    for (const form of ["k3-lowerbound", "48b-softplus"] as const) {
      const base = forgetGate(z, dt, aLog, new Float32Array(T * H * dk), H, dk, form);
      for (let h = 0; h < H; h++) {
        const a2 = aLog.slice();
        a2[h] += 0.25;
        const g = forgetGate(z, dt, a2, new Float32Array(T * H * dk), H, dk, form);
        for (let t = 0; t < T; t++)
          for (let hh = 0; hh < H; hh++) {
            const seg = (x: Float32Array) => Array.from(x.subarray((t * H + hh) * dk, (t * H + hh + 1) * dk));
            if (hh === h) expect(seg(g)).not.toEqual(seg(base));
            else expect(seg(g)).toEqual(seg(base));
          }
      }
    }
  });

  it("K3 gate stays in (lowerBound, 0); 48B gate is <= 0", () => {
    const H = 4, dk = 16;
    const z = uniform(50 * H * dk, -40, 40, 3), dt = new Float32Array(H * dk), aLog = uniform(H, -1, 2, 4);
    const g3 = forgetGate(z, dt, aLog, new Float32Array(z.length), H, dk, "k3-lowerbound", -5);
    expect(g3.every((x) => x >= -5 && x <= 0)).toBe(true);
    const g48 = forgetGate(z, dt, aLog, new Float32Array(z.length), H, dk, "48b-softplus");
    expect(g48.every((x) => x <= 0 && Number.isFinite(x))).toBe(true);
  });

  it("the A_log loader asserts used length == num_heads and zero K3 padding", () => {
    const cfg = { ...K3_KDA, numHeads: 4, headDim: 8 };
    expect(headALog(new Float32Array([1, 2, 3, 4, 0, 0, 0, 0]), cfg)).toEqual(new Float32Array([1, 2, 3, 4]));
    expect(() => headALog(new Float32Array([1, 2, 3, 4, 0, 0.5, 0, 0]), cfg)).toThrow(/A_log': K3 padding entry 5 is 0.5, expected 0/);
    expect(() => headALog(new Float32Array([1, 2, 3]), cfg)).toThrow(/A_log' has 3 entries, fewer than num_heads = 4/);
    const cfg48 = { ...KIMI_LINEAR_48B_KDA, numHeads: 4 };
    expect(() => headALog(new Float32Array(8), cfg48)).toThrow(/A_log' has 8 entries, expected num_heads = 4/);
    expect(() => forgetGate(new Float32Array(64), new Float32Array(64), new Float32Array(8), new Float32Array(64), 4, 16, "k3-lowerbound")).toThrow(/aLog has 8 entries, expected one per head \(4\)/);
  });
});

describe("short conv + SiLU", () => {
  it.skipIf(!fixtureExists("short_conv.safetensors"))("matches the reference from zero state, as a continuation, and from a non-zero state", () => {
    const m = readFixture("short_conv.safetensors");
    const tol = manifestTol("short_conv.safetensors");
    const C = 64, K = 4;
    const w = f32(m, "w");
    const state = new Float32Array(3 * C);
    const out1 = shortConv(f32(m, "x1"), w, state, new Float32Array(5 * C), C, K);
    expect(closeTo(out1, get(m, "out1").data, tol).detail).toBe("ok");
    expect(closeTo(state, get(m, "state1").data, tol).detail).toBe("ok");
    const out2 = shortConv(f32(m, "x2"), w, state, new Float32Array(3 * C), C, K);
    expect(closeTo(out2, get(m, "out2").data, tol).detail).toBe("ok");
    expect(closeTo(state, get(m, "state2").data, tol).detail).toBe("ok");
    const s0 = f32(m, "s0");
    const out3 = shortConv(f32(m, "x2"), w, s0, new Float32Array(3 * C), C, K);
    expect(closeTo(out3, get(m, "out3").data, tol).detail).toBe("ok");
    expect(closeTo(s0, get(m, "state3").data, tol).detail).toBe("ok");
  });

  it.skipIf(!fixtureExists("short_conv.safetensors"))("the fixture rejects a reversed tap order and a conv that ignores its state", () => {
    const m = readFixture("short_conv.safetensors");
    const tol = manifestTol("short_conv.safetensors");
    const C = 64, K = 4;
    const w = f32(m, "w");
    const reversed = new Float32Array(w.length);
    for (let c = 0; c < C; c++) for (let j = 0; j < K; j++) reversed[c * K + j] = w[c * K + (K - 1 - j)];
    expect(closeTo(shortConv(f32(m, "x1"), reversed, new Float32Array(3 * C), new Float32Array(5 * C), C, K), get(m, "out1").data, tol).ok).toBe(false);
    // continuation from a zeroed state instead of state1
    expect(closeTo(shortConv(f32(m, "x2"), w, new Float32Array(3 * C), new Float32Array(3 * C), C, K), get(m, "out2").data, tol).ok).toBe(false);
  });

  it("T shorter than K-1 keeps the older state rows", () => {
    const C = 3, K = 4;
    const w = uniform(C * K, -1, 1, 2);
    const xs = uniform(6 * C, -1, 1, 3);
    const full = shortConv(xs, w, new Float32Array(3 * C), new Float32Array(6 * C), C, K);
    const st = new Float32Array(3 * C);
    const parts = [1, 2, 1, 2].map((n, i, arr) => {
      const start = arr.slice(0, i).reduce((a, b) => a + b, 0);
      return shortConv(xs.slice(start * C, (start + n) * C), w, st, new Float32Array(n * C), C, K);
    });
    const joined = new Float32Array(6 * C);
    let off = 0;
    for (const p of parts) { joined.set(p, off); off += p.length; }
    expect(bytesEqual(joined, full)).toBe(true);
    expect(Array.from(st)).toEqual(Array.from(xs.slice(3 * C)));
  });
  it("is the exact float32 sum w[c][0]*x[t-K+1] + ... + w[c][K-1]*x[t] then @k3/dense's SiLU, bit for bit, across channel blocks", () => {
    // The kernel sums contiguous channels in blocks of 512 with transposed taps: C = 1100 spans three blocks.
    for (const [T, C, K] of [[1, 1100, 4], [7, 1100, 4], [5, 37, 3], [2, 600, 1]]) {
      const w = uniform(C * K, -1, 1, 11);
      const x = uniform(T * C, -2, 2, 12);
      const state = uniform((K - 1) * C, -2, 2, 13);
      const seq = new Float32Array([...state, ...x]);
      const want = new Float32Array(T * C);
      for (let t = 0; t < T; t++)
        for (let c = 0; c < C; c++) {
          let acc = 0;
          for (let j = 0; j < K; j++) acc = Math.fround(acc + Math.fround(w[c * K + j] * seq[(t + j) * C + c]));
          want[t * C + c] = acc;
        }
      silu(want, want);
      // Channel blocks run on the pool: any thread count gives these bits.
      for (const threads of [1, 2, 3]) {
        setThreadCount(threads);
        const s = state.slice();
        const got = shortConv(x, w, s, new Float32Array(T * C), C, K);
        expect(bytesEqual(got, want), `T=${T} C=${C} K=${K} threads=${threads}`).toBe(true);
        expect(Array.from(s)).toEqual(Array.from(seq.slice(seq.length - (K - 1) * C)));
      }
      setThreadCount(threads0);
    }
  });

  it("the forget gate gives the same bits at any thread count (rows of (token, head) split over the pool)", () => {
    for (const form of ["k3-lowerbound", "48b-softplus"] as const) {
      const T = 5, H = 6, dk = 16;
      const z = uniform(T * H * dk, -4, 4, 21), dt = uniform(H * dk, -1, 1, 22), aLog = uniform(H, -1, 1, 23);
      const runs = [1, 2, 3].map((threads) => {
        setThreadCount(threads);
        return forgetGate(z, dt, aLog, new Float32Array(T * H * dk), H, dk, form);
      });
      setThreadCount(threads0);
      expect(bytesEqual(runs[1], runs[0]) && bytesEqual(runs[2], runs[0]), form).toBe(true);
      expect(runs[0].every((v) => v <= 0 && Number.isFinite(v))).toBe(true);
    }
  });
});

describe("recurrence (invariant 2: decay, error, write, then read)", () => {
  it.skipIf(!fixtureExists("kda_recurrent.safetensors"))("matches naive_recurrent_kda at T=1 and T=70 with a non-zero S0", () => {
    const m = readFixture("kda_recurrent.safetensors");
    const tol = manifestTol("kda_recurrent.safetensors");
    for (const t of ["t1", "t70"]) {
      const T = get(m, `${t}.q`).shape[0], H = 4, dk = 16, dv = 16;
      const S = f32(m, `${t}.S0`);
      const o = recurrent(f32(m, `${t}.q`), f32(m, `${t}.k`), f32(m, `${t}.v`), f32(m, `${t}.g`), f32(m, `${t}.beta`), S, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv });
      expect(closeTo(o, get(m, `${t}.o`).data, tol).detail, t).toBe("ok");
      expect(closeTo(S, get(m, `${t}.S`).data, tol).detail, t).toBe("ok");
    }
  });

  it.skipIf(!fixtureExists("kda_recurrent.safetensors"))("the fixture rejects decay-after-write and read-before-write (built here)", () => {
    const m = readFixture("kda_recurrent.safetensors");
    const tol = manifestTol("kda_recurrent.safetensors");
    const T = 70, H = 4, dk = 16, dv = 16;
    const args = [f32(m, "t70.q"), f32(m, "t70.k"), f32(m, "t70.v"), f32(m, "t70.g"), f32(m, "t70.beta"), f32(m, "t70.S0")] as const;
    const good = recurrenceF64(...args, T, H, dk, dv, "spec");
    expect(closeTo(good.o, get(m, "t70.o").data, tol).detail).toBe("ok");
    for (const variant of ["decay_after_write", "read_before_write"] as const) {
      const bad = recurrenceF64(...args, T, H, dk, dv, variant);
      expect(closeTo(bad.o, get(m, "t70.o").data, tol).ok, variant).toBe(false);
    }
  });

  it.skipIf(!fixtureExists("kda_recurrent_k3.safetensors"))("matches the reference at K3's real head shape (96 x 128 x 128)", () => {
    const m = readFixture("kda_recurrent_k3.safetensors");
    const tol = manifestTol("kda_recurrent_k3.safetensors");
    const T = 3, H = 96, dk = 128, dv = 128;
    const u = get(m, "S0_u").data, w = get(m, "S0_w").data;
    const S = new Float32Array(H * dk * dv);
    for (let h = 0; h < H; h++)
      for (let d = 0; d < dk; d++)
        for (let j = 0; j < dv; j++) {
          const a = (h * dk + d) * 2, b = (h * dv + j) * 2;
          S[(h * dk + d) * dv + j] = u[a] * w[b] + u[a + 1] * w[b + 1];
        }
    const o = recurrent(f32(m, "q"), f32(m, "k"), f32(m, "v"), f32(m, "g"), f32(m, "beta"), S, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv });
    expect(closeTo(o, get(m, "o").data, tol).detail).toBe("ok");
    const heads = get(m, "S_heads").data;
    const sel = get(m, "S_sel").data;
    for (let i = 0; i < heads.length; i++) {
      const h = heads[i];
      expect(closeTo(S.subarray(h * dk * dv, (h + 1) * dk * dv), sel.subarray(i * dk * dv, (i + 1) * dk * dv), tol).detail, `head ${h}`).toBe("ok");
    }
    const sums = get(m, "S_head_sum").data, sumsq = get(m, "S_head_sumsq").data;
    for (let h = 0; h < H; h++) {
      let s = 0, s2 = 0;
      for (let x = h * dk * dv; x < (h + 1) * dk * dv; x++) { s += S[x]; s2 += S[x] * S[x]; }
      expect(Math.abs(s - sums[h])).toBeLessThanOrEqual(1e-3 + 1e-4 * Math.abs(sums[h]));
      expect(Math.abs(s2 - sumsq[h])).toBeLessThanOrEqual(1e-4 * Math.abs(sumsq[h]) + 1e-3);
    }
  });
});

describe("chunked WY/UT form (invariant 2: (I+M)^-1, M strictly lower, P keeps its diagonal)", () => {
  it.skipIf(!fixtureExists("kda_chunked.safetensors"))("matches the reference with chunk 16 and 64 at T=70, non-zero S0; the two classic bugs do not match", () => {
    const m = readFixture("kda_chunked.safetensors");
    const tol = manifestTol("kda_chunked.safetensors");
    const T = 70, H = 4, dk = 16, dv = 16;
    for (const c of [16, 64]) {
      const S = f32(m, "S0");
      const o = chunked(f32(m, "q"), f32(m, "k"), f32(m, "v"), f32(m, "g"), f32(m, "beta"), S, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv }, c);
      expect(closeTo(o, get(m, `c${c}.o`).data, tol).detail, `chunk ${c}`).toBe("ok");
      expect(closeTo(S, get(m, `c${c}.S`).data, tol).detail, `chunk ${c}`).toBe("ok");
      for (const bug of ["wrong.inv_sign.o", "wrong.p_no_diag.o"]) expect(closeTo(o, get(m, bug).data, tol).ok, bug).toBe(false);
    }
  });

  const shapes: Array<[string, number, number, number, number, number]> = [
    // label, T, H, dk, chunk, gate low
    ["K3 head shape, T=200, chunk 64, K3 gates", 200, 4, 128, 64, -5],
    ["T=70 (not a multiple), chunk 16", 70, 3, 128, 16, -5],
    ["strong 48B-like decay (g down to -12)", 130, 2, 128, 64, -12],
    ["chunk 1 (degenerate)", 9, 2, 32, 1, -5],
    ["chunk 100, odd dk", 150, 2, 40, 100, -2],
  ];
  it.each(shapes)("equals the recurrence to 1e-5 relative in fp32: %s", (_label, T, H, dk, chunk, lo) => {
    const dv = dk;
    const { q, k, v, g, beta, S0 } = randomCore(T, H, dk, dv, T + dk, lo);
    const Sr = S0.slice(), Sc = S0.slice();
    const or = recurrent(q, k, v, g, beta, Sr, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv });
    const oc = chunked(q, k, v, g, beta, Sc, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv }, chunk);
    expect(relErr(oc, or)).toBeLessThan(1e-5);
    expect(relErr(Sc, Sr)).toBeLessThan(1e-5);
  });

  it("equals the recurrence when some sub-blocks are factored and others too steep (span > 64) take direct exps", () => {
    const T = 160, H = 2, dk = 64, dv = 64;
    const { q, k, v, g, beta, S0 } = randomCore(T, H, dk, dv, 77, -1);
    // tokens 40..55 and 100..110 of head 1, channels 0..7: g = -9 (a 16-token span of about 140)
    for (const [a, b] of [[40, 56], [100, 111]]) for (let t = a; t < b; t++) for (let d = 0; d < 8; d++) g[(t * H + 1) * dk + d] = -9;
    const Sr = S0.slice(), Sc = S0.slice();
    const or = recurrent(q, k, v, g, beta, Sr, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv });
    const oc = chunked(q, k, v, g, beta, Sc, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv }, 64);
    expect(relErr(oc, or)).toBeLessThan(1e-5);
    expect(relErr(Sc, Sr)).toBeLessThan(1e-5);
  });

  it("a state split across calls equals one call (prefill in pieces)", () => {
    const T = 150, H = 2, dk = 64, dv = 64;
    const { q, k, v, g, beta, S0 } = randomCore(T, H, dk, dv, 5);
    const shape = (t: number) => ({ tokens: t, heads: H, dk, dv });
    const Sa = S0.slice();
    const oa = chunked(q, k, v, g, beta, Sa, new Float32Array(T * H * dv), shape(T));
    const Sb = S0.slice();
    const cut = 77;
    const sl = (x: Float32Array, w: number, a: number, b: number) => x.slice(a * H * w, b * H * w);
    const ob1 = chunked(sl(q, dk, 0, cut), sl(k, dk, 0, cut), sl(v, dv, 0, cut), sl(g, dk, 0, cut), sl(beta, 1, 0, cut), Sb, new Float32Array(cut * H * dv), shape(cut));
    const ob2 = chunked(sl(q, dk, cut, T), sl(k, dk, cut, T), sl(v, dv, cut, T), sl(g, dk, cut, T), sl(beta, 1, cut, T), Sb, new Float32Array((T - cut) * H * dv), shape(T - cut));
    const ob = new Float32Array(T * H * dv);
    ob.set(ob1);
    ob.set(ob2, ob1.length);
    expect(relErr(ob, oa)).toBeLessThan(1e-5);
    expect(relErr(Sb, Sa)).toBeLessThan(1e-5);
  });

  it("never overflows: 64 steps of g = -5 per channel (Gamma = -320) stay finite", () => {
    const T = 64, H = 1, dk = 32, dv = 32;
    const { q, k, v, beta, S0 } = randomCore(T, H, dk, dv, 11);
    const g = new Float32Array(T * H * dk).fill(-5);
    const Sc = S0.slice(), Sr = S0.slice();
    const oc = chunked(q, k, v, g, beta, Sc, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv });
    const or = recurrent(q, k, v, g, beta, Sr, new Float32Array(T * H * dv), { tokens: T, heads: H, dk, dv });
    expect(oc.every(Number.isFinite)).toBe(true);
    expect(relErr(oc, or)).toBeLessThan(1e-5);
  });
});

describe("bf16 state storage", () => {
  it("stays close to the fp32 state (error measured and bounded)", () => {
    const T = 256, H = 2, dk = 128, dv = 128;
    const { q, k, v, g, beta } = randomCore(T, H, dk, dv, 21, -1, false);
    const S32 = new Float32Array(H * dk * dv), S16 = new Uint16Array(H * dk * dv);
    const shape = { tokens: T, heads: H, dk, dv };
    const o32 = recurrent(q, k, v, g, beta, S32, new Float32Array(T * H * dv), shape);
    const o16 = recurrent(q, k, v, g, beta, S16, new Float32Array(T * H * dv), shape);
    const oc16 = chunked(q, k, v, g, beta, new Uint16Array(H * dk * dv), new Float32Array(T * H * dv), shape);
    const errDecode = relErr(o16, o32), errPrefill = relErr(oc16, o32);
    console.log(`bf16 state, ${T} tokens: decode (re-rounded every token) rel err ${errDecode.toExponential(2)}, chunked prefill (rounded once) ${errPrefill.toExponential(2)}`);
    expect(errDecode).toBeGreaterThan(0);
    expect(errDecode).toBeLessThan(3e-2);
    expect(errPrefill).toBeLessThan(1e-2);
  });
});

describe("determinism", () => {
  it("recurrent, chunked (f32 and bf16 state), conv and gate are bit-identical at every SIMD level and thread count", () => {
    const T = 67, H = 5, dk = 128, dv = 128;
    const { q, k, v, g, beta, S0 } = randomCore(T, H, dk, dv, 31);
    const shape = { tokens: T, heads: H, dk, dv };
    expectBitIdentical("recurrent", () => {
      const S = S0.slice();
      return [recurrent(q, k, v, g, beta, S, new Float32Array(T * H * dv), shape), S];
    });
    expectBitIdentical("chunked", () => {
      const S = S0.slice();
      return [chunked(q, k, v, g, beta, S, new Float32Array(T * H * dv), shape, 64), S];
    });
    expectBitIdentical("recurrent bf16", () => {
      const S = new Uint16Array(H * dk * dv).fill(0x3c00);
      return [recurrent(q, k, v, g, beta, S, new Float32Array(T * H * dv), shape), S];
    });
    expectBitIdentical("chunked bf16", () => {
      const S = new Uint16Array(H * dk * dv).fill(0x3c00);
      return [chunked(q, k, v, g, beta, S, new Float32Array(T * H * dv), shape, 32), S];
    });
    expectBitIdentical("odd shapes", () => {
      const t = 13, h = 3, a = 37, b = 21;
      const r = randomCore(t, h, a, b, 41);
      const S = r.S0.slice(0, h * a * b), S2 = S.slice(), S3 = new Uint16Array(h * a * b).fill(0xbd00);
      const s = { tokens: t, heads: h, dk: a, dv: b };
      return [recurrent(r.q, r.k, r.v, r.g, r.beta, S, new Float32Array(t * h * b), s), chunked(r.q, r.k, r.v, r.g, r.beta, S2, new Float32Array(t * h * b), s, 5), S, S2,
        recurrent(r.q, r.k, r.v, r.g, r.beta, S3, new Float32Array(t * h * b), s), S3];
    });
    expectBitIdentical("conv + gate", () => {
      const C = 96, st = uniform(3 * C, -1, 1, 3);
      const conv = shortConv(uniform(9 * C, -2, 2, 4), uniform(4 * C, -1, 1, 5), st, new Float32Array(9 * C), C, 4);
      const gate = forgetGate(uniform(9 * C, -3, 3, 6), uniform(C, -1, 1, 7), uniform(6, -1, 1, 8), new Float32Array(9 * C), 6, 16, "k3-lowerbound");
      return [conv, st, gate];
    });
  });
});

describe("bad input", () => {
  it("names the argument and the expected size", () => {
    const shape = { tokens: 2, heads: 2, dk: 4, dv: 4 };
    const a = (n: number) => new Float32Array(n);
    expect(() => recurrent(a(16), a(16), a(16), a(16), a(4), a(16), a(16), shape)).toThrow(/recurrent: S has 16 values, expected 32/);
    expect(() => recurrent(a(15), a(16), a(16), a(16), a(4), a(32), a(16), shape)).toThrow(/recurrent: q has 15 values, expected 16/);
    expect(() => chunked(a(16), a(16), a(16), a(16), a(4), a(32), a(16), shape, 0)).toThrow(/chunk must be an integer in \[1, 1024\]/);
    expect(() => chunked(a(16), a(16), a(16), a(16), a(3), a(32), a(16), shape)).toThrow(/beta has 3 values, expected 4/);
    expect(() => shortConv(a(10), a(12), a(9), a(10), 3, 4)).toThrow(/not a multiple of channels 3/);
    expect(() => shortConv(a(9), a(11), a(9), a(9), 3, 4)).toThrow(/argument 'w' has 11 values, needs at least 12/);
    expect(() => recurrent(a(16), a(16), a(16), a(16), a(4), new Int32Array(32) as unknown as Float32Array, a(16), shape)).toThrow(/'S' must be a Float32Array \(fp32 state\) or Uint16Array/);
  });
});
