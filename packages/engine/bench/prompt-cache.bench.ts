/**
 * Prompt cache on the tiny K3-layout model: the prefill of a chat's turn 2 (which repeats turn 1's
 * prompt) cold, side by side with the same prefill restored from turn 1's snapshot, in the same run;
 * and what storing the snapshot costs turn 1 (the split forward + one state copy). The limit a hit
 * approaches is prefilling only the new tokens; the tiny model's figures say nothing about real K3
 * latency, only about the ratio of tokens prefilled.
 * Run: flock /tmp/k3-bench.lock node --import tsx bench/prompt-cache.bench.ts
 */
import { setThreadCount } from "@k3/dense";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { timeIt, writeReport } from "../../../scripts/bench-report.mjs";
import { embeddedModelDir, Engine, GB, PromptCache } from "../src/index.js";

type Timing = { best: number; median: number; runs: number };
const time = timeIt as (fn: () => unknown, o?: { minRuns?: number; minMs?: number; warmup?: number }) => Promise<Timing>;

const mem = { totalBytes: 64 * GB, availableBytes: 60 * GB };
const rows: Record<string, string | number>[] = [];
const prefillMs = async (engine: Engine, ids: number[], promptCache: PromptCache | null) =>
  (await engine.complete(ids, { maxTokens: 1, temperature: 0, promptCache })).report.prefill_seconds * 1e3;

for (const threads of [1, 2]) {
  setThreadCount(threads);
  const engine = await Engine.load(embeddedModelDir(), { mem, preset: "laptop", threads });
  for (const repeat of [6, 60]) {
    const system = "You are a careful assistant. ".repeat(repeat);
    const q1 = "Write a function that adds two numbers.";
    const turn1 = engine.encodeChat([{ role: "system", content: system }, { role: "user", content: q1 }]);
    const reply = (await engine.complete(turn1, { maxTokens: 16, temperature: 0, promptCache: null })).text;
    const turn2 = engine.encodeChat([{ role: "system", content: system }, { role: "user", content: q1 }, { role: "assistant", content: reply }, { role: "user", content: "Now make it subtract." }]);
    const warm = new PromptCache();
    await engine.complete(turn1, { maxTokens: 1, temperature: 0, promptCache: warm });
    const cached = (await engine.complete(turn2, { maxTokens: 1, temperature: 0, promptCache: warm })).cachedTokens;
    const samples = { cold: [] as number[], hit: [] as number[], t1cold: [] as number[], t1store: [] as number[] };
    await time(async () => {
      const cache = new PromptCache();
      samples.t1cold.push(await prefillMs(engine, turn1, null));
      samples.t1store.push(await prefillMs(engine, turn1, cache));
      samples.cold.push(await prefillMs(engine, turn2, null));
      samples.hit.push(await prefillMs(engine, turn2, cache));
    }, { minRuns: 7, minMs: 0, warmup: 1 });
    const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
    rows.push({
      threads,
      "turn 2 prompt": turn2.length,
      cached: cached,
      "cold prefill ms": med(samples.cold),
      "hit prefill ms": med(samples.hit),
      "speed-up": med(samples.cold) / med(samples.hit),
      "tokens prefilled (hit/cold)": `${turn2.length - cached}/${turn2.length}`,
      "turn 1 store overhead ms": med(samples.t1store) - med(samples.t1cold),
    });
  }
  engine.close();
}

writeReport("engine-prompt-cache", {
  title: "prompt cache: turn-2 prefill, cold vs restored from turn 1's snapshot (tiny-k3, chunk 64)",
  command: "flock /tmp/k3-bench.lock node --import tsx bench/prompt-cache.bench.ts",
  rows,
  notes: ["Medians of 7 runs (prefill_seconds of the run report). Overhead = turn-1 prefill with the split + snapshot copy minus without; noisy at the 5 ms level on a shared box."],
});
