/**
 * KDA benchmarks, side by side with the physical limit measured in the same run:
 *  1. decode step at K3's state (96 x 128 x 128 fp32 = 6.29 MB) vs the memory floor of reading and
 *     writing that state once (2 x 6.29 MB at @k3/dense's measured read ceiling);
 *  2. chunked WY/UT prefill vs the token-by-token recurrence at T = 1024 (core only, K3 heads);
 *  3. a whole 48B-width layer on a 64-token chunk, cold, against its projections (batched GEMMs) alone;
 *  4. the shapes of ggml's GATED_DELTA_NET KDA rows (figures quoted from a test-backend-ops run in another sitting).
 * Run: flock /tmp/k3-bench.lock pnpm bench
 */
import { gemmF32, memoryReadCeiling, setThreadCount, simdLevel, threadCount, type Linear } from "@k3/dense";
import { f32ToBf16 } from "@k3/dense";
import { chunked, KdaLayer, KIMI_LINEAR_48B_KDA, recurrent, type KdaWeights } from "../src/index.js";
import { loadavg } from "node:os";
import { timeIt as time, uniform as rand, unitRows as unit, writeReport, type Timing } from "@k3/test-utils";

function inputs(T: number, H: number, d: number, seed: number) {
  return {
    q: unit(rand(T * H * d, -1, 1, seed), d, 1 / Math.sqrt(d)),
    k: unit(rand(T * H * d, -1, 1, seed + 1), d),
    v: rand(T * H * d, -1, 1, seed + 2),
    g: rand(T * H * d, -5, 0, seed + 3),
    beta: rand(T * H, 0, 1, seed + 4),
  };
}

const load0 = loadavg();
const rows: Record<string, string | number>[] = [];
const notes: string[] = [];
const H = 96, d = 128;
const stateBytes = H * d * d * 4;

// ---------------------------------------------------------------- decode step vs the memory floor
// The floor is measured at the same thread count as the kernel (the pool spins, so a busy machine
// hurts 2 threads far more than 1; both are shown).
const poolThreads = threadCount();
{
  const src = new Float32Array(64 << 20), dst = new Float32Array(64 << 20);
  const copy = await time(() => dst.set(src), { minRuns: 5, minMs: 500 });
  notes.push(`plain 256 MiB copy in this process: ${((2 * src.byteLength) / (copy.best * 1e6)).toFixed(1)} GB/s counting read + write bytes.`);
  const one = inputs(1, H, d, 1);
  const o = new Float32Array(H * d);
  const hot = rand(H * d * d, -0.1, 0.1, 9);
  // cold: rotate over 24 states (151 MB, far beyond L3), as decoding walks through 69 KDA layers
  const states = Array.from({ length: 24 }, (_, i) => rand(H * d * d, -0.1, 0.1, 100 + i));
  const s16 = Array.from({ length: 24 }, () => new Uint16Array(H * d * d).fill(0x3c00));
  const shape = { tokens: 1, heads: H, dk: d, dv: d };
  for (const threads of [1, poolThreads]) {
    setThreadCount(threads);
    const ceiling = memoryReadCeiling({ bytes: 1 << 30, reps: 5, threads }).gbPerSec;
    const floorUs = ((2 * stateBytes) / (ceiling * 1e9)) * 1e6;
    let i = 0, j = 0;
    const tCold = await time(() => { recurrent(one.q, one.k, one.v, one.g, one.beta, states[i], o, shape); i = (i + 1) % 24; }, { minRuns: 72, minMs: 1500 });
    const tHot = await time(() => recurrent(one.q, one.k, one.v, one.g, one.beta, hot, o, shape), { minRuns: 50, minMs: 1000 });
    const tCold16 = await time(() => { recurrent(one.q, one.k, one.v, one.g, one.beta, s16[j], o, shape); j = (j + 1) % 24; }, { minRuns: 72, minMs: 1500 });
    const us = (t: Timing) => t.median * 1000;
    const lim = `2 x 6.29 MB at ${ceiling.toFixed(1)} GB/s (${threads}T read ceiling)`;
    rows.push({ case: `decode step, K3 state 96x128x128 f32, cold (24 states, 151 MB), ${threads} thread(s)`, ours_us: us(tCold), limit: lim, limit_us: floorUs, "floor/ours": floorUs / us(tCold) });
    rows.push({ case: `decode step, same state every call (cache-resident), ${threads} thread(s)`, ours_us: us(tHot), limit: lim, limit_us: floorUs, "floor/ours": floorUs / us(tHot) });
    rows.push({ case: `decode step, bf16 state (3.15 MB), cold, ${threads} thread(s)`, ours_us: us(tCold16), limit: `2 x 3.15 MB at ${ceiling.toFixed(1)} GB/s`, limit_us: floorUs / 2, "floor/ours": floorUs / 2 / us(tCold16) });
  }
  setThreadCount(poolThreads);
}

// ---------------------------------------------------------------- prefill: chunked vs token-by-token
{
  const T = 1024;
  const x = inputs(T, H, d, 2);
  const o = new Float32Array(T * H * d);
  const S = new Float32Array(H * d * d);
  const shape = { tokens: T, heads: H, dk: d, dv: d };
  const tChunk = await time(() => chunked(x.q, x.k, x.v, x.g, x.beta, S.fill(0), o, shape, 64), { minRuns: 3, minMs: 2000 });
  const tRec = await time(() => recurrent(x.q, x.k, x.v, x.g, x.beta, S.fill(0), o, shape), { minRuns: 3, minMs: 2000 });
  // decode loop: T separate one-token calls (what serving a prompt token by token costs)
  const one = (t: number) => ({ q: x.q.subarray(t * H * d, (t + 1) * H * d), k: x.k.subarray(t * H * d, (t + 1) * H * d), v: x.v.subarray(t * H * d, (t + 1) * H * d), g: x.g.subarray(t * H * d, (t + 1) * H * d), beta: x.beta.subarray(t * H, (t + 1) * H) });
  const o1 = new Float32Array(H * d);
  const tLoop = await time(() => {
    S.fill(0);
    for (let t = 0; t < T; t++) {
      const a = one(t);
      recurrent(a.q, a.k, a.v, a.g, a.beta, S, o1, { tokens: 1, heads: H, dk: d, dv: d });
    }
  }, { minRuns: 2, minMs: 2000 });
  const tps = (t: Timing) => T / (t.median / 1000);
  // FLOPs (an FMA = 2) per token and head at C = 64, dk = dv = d, from the products kda_chunked.c runs:
  // [Kg; Qg] S0 (2 d^2), S_end (d^2), M and P (2 x 16 x (16+32+48+64) x d per chunk), the forward
  // substitution (products 16 x (16+32+48) x d + in-block 4 x 120 x d) and P V_new (16 x 160 x d).
  const C = 64;
  const macChunk = 3 * d * d + (2 * 16 * 160 * d + 16 * 96 * d + 4 * 120 * d + 16 * 160 * d) / C;
  const flopChunk = 2 * macChunk * H, flopRec = 7 * d * d * H; // recurrence: decay mul + 3 FMA per state element
  // the measured dense rate: @k3/dense's f32 GEMM on an L2-resident problem (W 512 x 128, 256 tokens)
  const W = rand(512 * 128, -1, 1, 3), X = rand(256 * 128, -1, 1, 4), Y = new Float32Array(256 * 512);
  const tGemm = await time(() => gemmF32(W, X, Y, { rows: 512, cols: 128, batch: 256 }), { minRuns: 20, minMs: 1000 });
  const gemmRate = (2 * 512 * 128 * 256) / (tGemm.best * 1e6); // GFLOP/s
  const chunkRate = (flopChunk * T) / (tChunk.best * 1e6);
  rows.push({ case: "prefill T=1024, K3 96 heads: chunked (C=64) vs recurrence in one call (best)", ours_us: tChunk.best * 1000, limit: "recurrence, one call (head-major)", limit_us: tRec.best * 1000, "floor/ours": tRec.best / tChunk.best });
  rows.push({ case: "prefill T=1024: chunked (C=64) vs recurrence (medians)", ours_us: tChunk.median * 1000, limit: "recurrence, one call", limit_us: tRec.median * 1000, "floor/ours": tRec.median / tChunk.median });
  rows.push({ case: `prefill T=1024: chunked at ${chunkRate.toFixed(0)} GFLOP/s vs its FLOPs at @k3/dense's f32 GEMM rate (${gemmRate.toFixed(0)} GFLOP/s)`, ours_us: tChunk.best * 1000, limit: "FLOP floor at the GEMM rate", limit_us: ((flopChunk * T) / (gemmRate * 1e3)), "floor/ours": ((flopChunk * T) / (gemmRate * 1e3)) / (tChunk.best * 1000) });
  notes.push(`prefill T=1024 x ${H} heads (best): chunked ${((tChunk.best * 1000) / T).toFixed(1)} us/token (${chunkRate.toFixed(1)} GFLOP/s, ${(flopChunk / 1e6).toFixed(2)} MFLOP/token), recurrence ${((tRec.best * 1000) / T).toFixed(1)} us/token (${((flopRec * T) / (tRec.best * 1e6)).toFixed(1)} GFLOP/s, ${(flopRec / 1e6).toFixed(2)} MFLOP/token); @k3/dense f32 GEMM ${gemmRate.toFixed(1)} GFLOP/s at ${threadCount()} thread(s). (README: why 5x is out of reach at these FLOP counts.)`);
  rows.push({ case: "prefill T=1024: chunked vs 1024 one-token decode calls", ours_us: tChunk.median * 1000, limit: "decode loop", limit_us: tLoop.median * 1000, "floor/ours": tLoop.median / tChunk.median });
  notes.push(`prefill T=1024 x 96 heads (medians): chunked ${tps(tChunk).toFixed(0)} tok/s, recurrence (one call) ${tps(tRec).toFixed(0)} tok/s, one-token decode loop ${tps(tLoop).toFixed(0)} tok/s.`);
}

// ---------------------------------------------------------------- whole layer: batched prefill vs decode calls
{
  // Kimi-Linear-48B dims (hidden 2304, 32 heads; 76 MB of bf16 weights) keep this bench light
  const c = KIMI_LINEAR_48B_KDA;
  const D = c.hidden, P = c.numHeads * c.headDim;
  let seed = 50;
  const mat = (rows: number, cols: number) => ({ dtype: "BF16", shape: [rows, cols], data: f32ToBf16(rand(rows * cols, -1 / Math.sqrt(cols), 1 / Math.sqrt(cols), seed++)) });
  const vec = (n: number, lo: number, hi: number, shape = [n]) => ({ dtype: "F32", shape, data: rand(n, lo, hi, seed++) });
  const w = {
    q_proj: mat(P, D), k_proj: mat(P, D), v_proj: mat(P, D), o_proj: mat(D, P),
    q_conv1d: vec(P * 4, -0.5, 0.5, [P, 1, 4]), k_conv1d: vec(P * 4, -0.5, 0.5, [P, 1, 4]), v_conv1d: vec(P * 4, -0.5, 0.5, [P, 1, 4]),
    f_a_proj: mat(128, D), f_b_proj: mat(P, 128), b_proj: mat(c.numHeads, D),
    A_log: vec(c.numHeads, -0.5, 1), dt_bias: vec(P, -1, 1), o_norm: vec(128, 0.5, 1.5),
    g_a_proj: mat(128, D), g_b_proj: mat(P, 128),
  } as unknown as KdaWeights;
  const layer = new KdaLayer(w, c);
  const T = 1024;
  const x = rand(T * D, -1, 1, 77);
  const tPre = await time(() => layer.forward(x, layer.newState()), { minRuns: 2, minMs: 1500 });
  const steps = 64;
  const tDec = await time(() => {
    const st = layer.newState();
    for (let t = 0; t < steps; t++) layer.forward(x.subarray(t * D, (t + 1) * D), st);
  }, { minRuns: 2, minMs: 1500 });
  const prefillTps = T / (tPre.median / 1000), decodeTps = steps / (tDec.median / 1000);
  rows.push({ case: "KdaLayer, 48B dims, T=1024 prefill (batched GEMM + chunked) vs one-token forwards", ours_us: (tPre.median * 1000) / T, limit: "decode forward per token", limit_us: (tDec.median * 1000) / steps, "floor/ours": prefillTps / decodeTps });
  notes.push(`KdaLayer at 48B dims (${(layer.weightBytes / 1e6).toFixed(0)} MB bf16 weights): prefill ${prefillTps.toFixed(0)} tok/s, decode ${decodeTps.toFixed(1)} tok/s (per-token us in the table).`);
}

// ---------------------------------------------------------------- whole layer: a 64-token chunk, cold, against its own GEMMs
{
  // The engine's prefill chunk: 12 layers of 48B-width weights (12 x 76 MB, beyond the L3) run in
  // turn, as a chunk walks the layer stack; the limit is the same layers' projections alone
  // (Linear.apply at T = 64, same order): what the layer adds on top of its batched GEMMs.
  const c = KIMI_LINEAR_48B_KDA;
  const D = c.hidden, P = c.numHeads * c.headDim, T = 64, L = 12;
  let seed = 300;
  const mat = (rows: number, cols: number) => ({ dtype: "BF16", shape: [rows, cols], data: f32ToBf16(rand(rows * cols, -1 / Math.sqrt(cols), 1 / Math.sqrt(cols), seed++)) });
  const vec = (n: number, lo: number, hi: number, shape = [n]) => ({ dtype: "F32", shape, data: rand(n, lo, hi, seed++) });
  const layers = Array.from({ length: L }, () => new KdaLayer({
    q_proj: mat(P, D), k_proj: mat(P, D), v_proj: mat(P, D), o_proj: mat(D, P),
    q_conv1d: vec(P * 4, -0.5, 0.5, [P, 1, 4]), k_conv1d: vec(P * 4, -0.5, 0.5, [P, 1, 4]), v_conv1d: vec(P * 4, -0.5, 0.5, [P, 1, 4]),
    f_a_proj: mat(128, D), f_b_proj: mat(P, 128), b_proj: mat(c.numHeads, D),
    A_log: vec(c.numHeads, -0.5, 1), dt_bias: vec(P, -1, 1), o_norm: vec(128, 0.5, 1.5),
    g_a_proj: mat(128, D), g_b_proj: mat(P, 128),
  } as unknown as KdaWeights, c));
  const x = rand(T * D, -1, 1, 301);
  const states = layers.map((l) => l.newState());
  const projections = layers.map((l) => {
    const p = l as unknown as Record<string, Linear>;
    return [["qProj", x], ["kProj", x], ["vProj", x], ["fA", x], ["bProj", x], ["gA", x], ["fB", new Float32Array(T * 128)], ["gB", new Float32Array(T * 128)], ["oProj", new Float32Array(T * P)]].map(([k, input]) => ({ lin: p[k as string], input: input as Float32Array, out: new Float32Array(T * p[k as string].rows) }));
  });
  const tLayer = await time(() => layers.forEach((l, i) => l.forward(x, states[i])), { minRuns: 3, minMs: 1500 });
  const tGemm = await time(() => projections.forEach((ps) => ps.forEach((q) => q.lin.apply(q.input, T, q.out))), { minRuns: 3, minMs: 1500 });
  rows.push({ case: "KdaLayer, 48B dims, a 64-token chunk, 12 cold layers (per layer)", ours_us: (tLayer.median * 1000) / L, limit: "its projections alone (batched GEMM, T=64)", limit_us: (tGemm.median * 1000) / L, "floor/ours": tGemm.median / tLayer.median });
}

// ---------------------------------------------------------------- ggml GATED_DELTA_NET (KDA) shapes
{
  const h = 32;
  const one = inputs(1, h, d, 3);
  const S = rand(h * d * d, -0.1, 0.1, 5);
  const o = new Float32Array(h * d);
  for (const threads of [1, poolThreads]) {
    setThreadCount(threads);
    const t1 = await time(() => recurrent(one.q, one.k, one.v, one.g, one.beta, S, o, { tokens: 1, heads: h, dk: d, dv: d }), { minRuns: 100, minMs: 1000 });
    rows.push({ case: `32 heads d=128, 1 token (decode), hot state, ${threads} thread(s)`, ours_us: t1.median * 1000, limit: "ggml GATED_DELTA_NET kda=1, 2 threads (quoted, other sitting)", limit_us: 100.7, "floor/ours": 100.7 / (t1.median * 1000) });
  }
  setThreadCount(poolThreads);
  const x = inputs(64, h, d, 4);
  const o64 = new Float32Array(64 * h * d);
  const t64 = await time(() => chunked(x.q, x.k, x.v, x.g, x.beta, S.fill(0), o64, { tokens: 64, heads: h, dk: d, dv: d }), { minRuns: 10, minMs: 1000 });
  rows.push({ case: "32 heads d=128, 64 tokens (chunked)", ours_us: t64.median * 1000, limit: "ggml GATED_DELTA_NET kda=1 (quoted)", limit_us: 6585, "floor/ours": 6585 / (t64.median * 1000) });
  const x2 = inputs(1024, h, d, 6);
  const o2 = new Float32Array(1024 * h * d);
  const t1024 = await time(() => chunked(x2.q, x2.k, x2.v, x2.g, x2.beta, S.fill(0), o2, { tokens: 1024, heads: h, dk: d, dv: d }), { minRuns: 3, minMs: 1500 });
  rows.push({ case: "32 heads d=128, 1024 tokens (chunked)", ours_us: t1024.median * 1000, limit: "ggml GATED_DELTA_NET (GDN, not KDA; quoted)", limit_us: 87875, "floor/ours": 87875 / (t1024.median * 1000) });
  notes.push("ggml figures are quoted from a test-backend-ops run (another sitting on the same VM type, -march=native build, 2 threads, includes a small l2_norm); ours are measured here. 'floor/ours' > 1 means we are faster than the reference figure.");
}

notes.push(`load average (1/5/15 min) at the start: ${load0.map((x) => x.toFixed(1)).join(" / ")}, at the end: ${loadavg().map((x) => x.toFixed(1)).join(" / ")} (2 cores).`);
const busy = Math.max(load0[0], loadavg()[0]) > 1.5; // the bench itself keeps ~1 core busy on average
notes.push(
  `SIMD level ${simdLevel()}, ${threadCount()} threads. Medians unless marked best.` +
    (busy ? " Other work shared the cores (1-min load above 1.5): treat ratios as +-30%." : ""),
);
writeReport("kda", { title: "@k3/kda: KDA decode and prefill vs the memory floor and ggml", command: "flock /tmp/k3-bench.lock pnpm --filter @k3/kda bench", rows, notes });
