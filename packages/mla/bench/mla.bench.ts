/**
 * MLA decode benchmarks at K3's head shapes (96 heads, nope 128, rope 64, v 128, kv_lora 512):
 * time and memory per token against context length, absorbed latent cache (576 values/position,
 * f32 or bf16) next to the expanded per-head cache (96 x (192 + 128) = 30,720 values/position), in
 * the same run. Both use this package's native attention core; the absorbed side also pays for the
 * per-token absorption (q~ = W_UK^T q_nope and o = W_UV o~, 2 x 6.3 M MACs on the 25.2 MB bf16 kv_b_proj, natively).
 * Run: flock /tmp/k3-bench.lock pnpm bench
 */
import { f32ToBf16, simdLevel, threadCount } from "@k3/dense";
import { attendExpanded, attendLatent, K3_MLA, MlaCache } from "../src/index.js";
import { native } from "../src/native.js";
import { timeIt as time, uniform as rand, writeReport } from "@k3/test-utils";

const H = 96, n = 128, r = 64, dv = 128, L = 512, W = L + r;
const scale = 1 / Math.sqrt(n + r);
const rows: Record<string, string | number>[] = [];
const notes: string[] = [];

// per-token absorption cost (independent of context): q~_h = W_UK^h^T q_nope_h, o_h = W_UV^h o~_h,
// straight on a bf16 kv_b_proj [96*256, 512] as MlaLayer does
const kvb = f32ToBf16(rand(H * (n + dv) * L, -0.05, 0.05, 1));
const qn = rand(H * (n + r), -1, 1, 3), qt = new Float32Array(H * W), ol = rand(H * L, -1, 1, 4), oh = new Float32Array(H * dv);
const absorb = await time(() => {
  native.absorb(qn, 1, H, H * (n + r), n + r, kvb, n, dv, L, qt, H * W, W);
  native.project(ol, 1, H, H * L, L, kvb, n, dv, L, oh, H * dv, dv);
}, { minRuns: 20, minMs: 500 });
const absorbUs = absorb.median * 1000;
notes.push(`absorption (q~ and W_UV for 96 heads, bf16 kv_b_proj, 25.2 MB of weights): ${absorbUs.toFixed(0)} us per token, included in the absorbed totals.`);

const qAbs = rand(H * W, -0.2, 0.2, 5);
const qExp = rand(H * (n + r), -0.2, 0.2, 6);
for (const S of [512, 2048, 8192, 32768]) {
  const lat = rand(S * W, -1, 1, 10 + S);
  const row: Record<string, string | number> = { context: S };
  for (const dtype of ["f32", "bf16"] as const) {
    const cache = new MlaCache({ ...K3_MLA }, S, dtype);
    cache.append(lat);
    const t = await time(() => attendLatent(qAbs, 1, H, cache, S - 1, scale), { minRuns: 5, minMs: 400 });
    row[`absorbed_${dtype}_us`] = t.median * 1000 + absorbUs;
    row[`absorbed_${dtype}_MB`] = (S * cache.bytesPerPosition) / 1e6;
  }
  if (S <= 4096 || S === 8192) {
    // expanded bf16 cache (f32 would be 1 GB at 8K): k [S][H][192] (k_pe copied per head), v [S][H][128]
    const K = f32ToBf16(rand(S * H * (n + r), -1, 1, 20 + S)), V = f32ToBf16(rand(S * H * dv, -1, 1, 30 + S));
    const t = await time(() => attendExpanded(qExp, { tokens: 1, heads: H, dq: n + r, dv, qPos0: S - 1 }, K, V, scale), { minRuns: 3, minMs: 400 });
    row.expanded_bf16_us = t.median * 1000;
    row.expanded_bf16_MB = (K.byteLength + V.byteLength) / 1e6;
    row["memory ratio"] = (K.byteLength + V.byteLength) / (S * W * 2);
    row["speed ratio (expanded/absorbed bf16)"] = (t.median * 1000) / (row.absorbed_bf16_us as number);
  } else {
    row.expanded_bf16_us = "-";
    row.expanded_bf16_MB = (S * H * (n + r + dv) * 2) / 1e6;
    row["memory ratio"] = (H * (n + r + dv)) / W;
    row["speed ratio (expanded/absorbed bf16)"] = "- (4 GB)";
  }
  rows.push(row);
}
notes.push("Per MLA layer, one decode token against a cache of `context` positions. Expanded = the naive per-head cache (96 x 320 values/position): 30,720 / 576 = 53.3x the latent cache in bytes at the same dtype. The absorbed form does 96 x (576 + 512) MACs per position against the expanded 96 x (192 + 128), so it trades ~3.4x the attention arithmetic for 53x less memory traffic.");
notes.push(`SIMD level ${simdLevel()}, ${threadCount()} threads. Medians. Busy machine (other engineers on the same 2 cores): treat ratios as +-30%.`);
writeReport("mla", { title: "@k3/mla: absorbed latent decode vs an expanded 96-head cache", command: "flock /tmp/k3-bench.lock pnpm --filter @k3/mla bench", rows, notes });
