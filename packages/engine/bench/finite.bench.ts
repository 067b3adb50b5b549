/**
 * What the per-layer non-finite check costs (issue #15): the time of firstNonFinite over a layer's
 * output [T, D] against the time of the layer itself, in the same process, on the tiny model
 * (hidden 128) and on a real-width checkpoint (K3_RW_MODEL, hidden 7168), for a decode step (T=1)
 * and a prefill chunk (T=64). Each layer's time is the gap between its onLayer call and the
 * previous one (the check included); the check is timed on the same output buffer, 200 calls per
 * layer, median.
 * Run: /work/bin/k3-excl node --import tsx bench/finite.bench.ts  [K3_RW_MODEL=DIR, K3_RW_PRESET=ultra]
 */
import { setThreadCount, simdLevel } from "@k3/dense";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";
import { embeddedModelDir, Engine } from "../src/index.js";
import { firstNonFinite } from "../src/finite.js";

const median = (xs: number[]) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rows: Record<string, string | number>[] = [];
const threads = Number(process.env.K3_THREADS ?? 2);
setThreadCount(threads);

async function measure(label: string, dir: string, preset: "laptop" | "ultra" | "auto"): Promise<void> {
  const engine = await Engine.load(dir, { preset, threads });
  const D = engine.config.hiddenSize;
  try {
    for (const T of [1, 64]) {
      const layerMs: number[] = [];
      const checkUs: number[] = [];
      let last = 0;
      const onLayer = (_l: number, h: Float32Array) => {
        const now = performance.now();
        if (last > 0) layerMs.push(now - last);
        const t0 = performance.now();
        let found = 0;
        for (let r = 0; r < 200; r++) found += firstNonFinite(h, T * D);
        checkUs.push(((performance.now() - t0) / 200) * 1e3);
        if (found !== -200) throw new Error("a non-finite hidden state in the bench run");
        last = performance.now();
      };
      const state = engine.newState();
      const prompt = Array.from({ length: 64 }, (_, i) => (i * 7919 + 13) % engine.tokenizer.nRanks);
      // Warm-up, then the measured calls: T=64 chunks, or single-token decode steps.
      await engine.model.forward(prompt.slice(0, 8), state, { noLogits: true });
      const reps = T === 1 ? 8 : 2;
      for (let r = 0; r < reps; r++) {
        last = performance.now();
        await engine.model.forward(T === 1 ? [prompt[r]] : prompt, state, { noLogits: true, onLayer });
      }
      const lm = median(layerMs);
      const cu = median(checkUs);
      rows.push({ model: label, "hidden D": D, T, layers: engine.config.numLayers, "layer ms (median)": lm.toFixed(3), "check us (median)": cu.toFixed(2), "check / layer": ((cu / 1e3 / lm) * 100).toFixed(3) + " %", "check GB/s": ((T * D * 4) / (cu * 1e3)).toFixed(1) });
    }
  } finally {
    engine.close();
  }
}

await measure("tiny-k3", embeddedModelDir(), "laptop");
if (process.env.K3_RW_MODEL) await measure(process.env.K3_RW_MODEL.split("/").pop()!, process.env.K3_RW_MODEL, (process.env.K3_RW_PRESET as "ultra") ?? "ultra");

writeReport("finite-check", {
  title: `Per-layer non-finite check vs the layer (${threads} threads, ${simdLevel()})`,
  command: "/work/bin/k3-excl node --import tsx bench/finite.bench.ts",
  rows,
  notes: ["layer ms: gap between consecutive onLayer calls (the check included); check us: firstNonFinite over the layer output [T, D], 200 calls, median"],
});
