/**
 * The streaming figures on the trained tiny K3 (the embedded default), over held-out text: what the
 * random tiny models could not say. For each of --prompts windows of the held-out slice (a --prompt-
 * tokens prompt, then --gen greedy tokens, raw completion):
 *   - lookahead: predictor accuracy (used / predicted) and prefetch hit rate with no expert cache,
 *     against the random guess topK / experts; resident hit rate at the laptop preset;
 *   - cache-sim: the run's expert trace replayed through LRU, S3-FIFO, Belady and pinned caches;
 *   - n-gram speculation at --spec 2/4/8: acceptance, decode forwards, decode speed-up vs --spec 0
 *     (the ids must equal plain decoding's, or the bench fails);
 *   - prefill and decode tok/s at 1 and 2 threads;
 *   - held-out perplexity over the first 1024 tokens.
 * Held-out text: --heldout FILE (train_tiny.py writes DIR/heldout.txt), else the end of
 * $K3_TEST_DATA/corpus/en.txt cut as train_tiny.py cuts it (the last 5%, from a line start).
 * Timed: run under the bench lock with nothing else running.
 *   node --import tsx bench/trained.bench.ts [--model DIR] [--heldout FILE] [--prompts 8]
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { simulateCacheSizes, CACHE_POLICIES } from "@k3/moe-stream";
import { embeddedModelDir, Engine, GB } from "../src/index.js";
import { ExpertTraceRecorder } from "../src/cache-trace.js";

const { values } = parseArgs({
  options: {
    model: { type: "string" },
    heldout: { type: "string" },
    prompts: { type: "string", default: "8" },
    "prompt-tokens": { type: "string", default: "128" },
    gen: { type: "string", default: "64" },
  },
});
const dir = values.model ?? embeddedModelDir();
const nPrompts = Number(values.prompts);
const promptTokens = Number(values["prompt-tokens"]);
const gen = Number(values.gen);
const repo = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const testDataDir = process.env.K3_TEST_DATA ?? join(repo, "..", "shared", "data");
const mem = { totalBytes: 64 * GB, availableBytes: 60 * GB };

// ---------------------------------------------------------------- held-out text

/** The held-out slice as reference/train_tiny.py's split_corpus cuts it (indices in code points). */
function heldoutFromCorpus(): string {
  const corpus = join(testDataDir, "corpus", "en.txt");
  if (!existsSync(corpus)) {
    console.log(`trained.bench: no held-out text (give --heldout FILE, or set K3_TEST_DATA; ${corpus} is missing)`);
    process.exit(0);
  }
  const chars = Array.from(readFileSync(corpus, "utf8"));
  const limit = Math.floor(chars.length * (1 - 0.05));
  const cut = chars.lastIndexOf("\n", limit - 1) + 1;
  return chars.slice(cut).join("");
}

const heldout = values.heldout ? readFileSync(values.heldout, "utf8") : heldoutFromCorpus();

// ---------------------------------------------------------------- runs

interface RunFigures {
  ids: number[][];
  predicted: number;
  used: number;
  prefetchHits: number;
  residentHits: number;
  requests: number;
  drafted: number;
  accepted: number;
  forwards: number;
  generated: number;
  decodeSeconds: number;
  prefillSeconds: number;
  prefillTokens: number;
}

function windows(engine: Engine): number[][] {
  const ids = engine.encodeText(heldout, false);
  const stride = Math.floor((ids.length - promptTokens) / nPrompts);
  if (stride < 1) throw new Error(`held-out text too short: ${ids.length} tokens for ${nPrompts} prompts of ${promptTokens}`);
  const bos = engine.config.bosTokenId;
  return Array.from({ length: nPrompts }, (_, i) => [bos, ...ids.slice(i * stride, i * stride + promptTokens)]);
}

async function runAll(opts: { preset?: "laptop" | "ultra"; cacheBytes?: number; spec?: number; threads?: number; trace?: ExpertTraceRecorder }): Promise<RunFigures> {
  const engine = await Engine.load(dir, {
    mem,
    preset: opts.preset ?? "laptop",
    threads: opts.threads ?? 1,
    spec: opts.spec ?? 0,
    ...(opts.cacheBytes !== undefined ? { budgets: { cacheBytes: opts.cacheBytes } } : {}),
  });
  const f: RunFigures = { ids: [], predicted: 0, used: 0, prefetchHits: 0, residentHits: 0, requests: 0, drafted: 0, accepted: 0, forwards: 0, generated: 0, decodeSeconds: 0, prefillSeconds: 0, prefillTokens: 0 };
  try {
    if (opts.trace) engine.model.expertTrace = opts.trace;
    for (const prompt of windows(engine)) {
      const r = await engine.complete(prompt, { maxTokens: gen, stopIds: [], temperature: 0 });
      const rep = r.report;
      f.ids.push(r.ids);
      f.predicted += rep.prefetch_predicted ?? 0;
      f.used += rep.prefetch_used ?? 0;
      f.requests += rep.expert_requests ?? 0;
      f.prefetchHits += Math.round((rep.prefetch_hit_rate ?? 0) * (rep.expert_requests ?? 0));
      f.residentHits += Math.round((rep.resident_hit_rate ?? 0) * (rep.expert_requests ?? 0));
      f.drafted += rep.spec.drafted;
      f.accepted += rep.spec.accepted;
      f.forwards += rep.decode_forwards;
      f.generated += rep.generated_tokens;
      f.decodeSeconds += rep.decode_seconds;
      f.prefillSeconds += rep.prefill_seconds;
      f.prefillTokens += rep.prompt_tokens;
    }
  } finally {
    engine.close();
  }
  return f;
}

const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
const same = (a: number[][], b: number[][]) => JSON.stringify(a) === JSON.stringify(b);

// ---------------------------------------------------------------- perplexity

{
  const engine = await Engine.load(dir, { mem, threads: 1 });
  try {
    const ids = engine.encodeText(heldout).slice(0, 1025);
    const r = await engine.evaluate(ids);
    console.log(`held-out perplexity (first ${r.nll.length} tokens): ${r.perplexity.toFixed(3)} (mean NLL ${r.meanNll.toFixed(6)} nats)`);
    console.log(`model: ${dir}; ${nPrompts} held-out prompts of ${promptTokens} tokens + ${gen} greedy tokens each, raw completion\n`);
  } finally {
    engine.close();
  }
}

// ---------------------------------------------------------------- lookahead and the expert cache

const trace = new ExpertTraceRecorder();
const noCache = await runAll({ cacheBytes: 0, trace });
const laptop = await runAll({});
const probe = await Engine.load(dir, { mem, threads: 1 });
const { numExperts, topK } = probe.config.moe;
const expertBytes = probe.census.expertBytes;
probe.close();
if (!same(noCache.ids, laptop.ids)) throw new Error("trained.bench: the cache size changed the generated ids");
console.log("| predictor accuracy (used / predicted) | random guess | prefetch hit rate, cache 0 | resident hit rate, laptop cache |");
console.log("|---:|---:|---:|---:|");
console.log(`| ${pct(noCache.used / noCache.predicted)} (${noCache.used} / ${noCache.predicted}) | ${pct(topK / numExperts)} | ${pct(noCache.prefetchHits / noCache.requests)} | ${pct(laptop.residentHits / laptop.requests)} |\n`);

const slots = [1, 2, 4, 8, 16].filter((s) => s < numExperts);
const sim = simulateCacheSizes(trace.requests, slots);
console.log(`cache-sim over the same runs' trace (${trace.requests.length} layer requests, ${numExperts} experts/layer, top-${topK}):`);
console.log(`| slots/layer | cache | ${CACHE_POLICIES.join(" | ")} |`);
console.log(`|---:|---:|${CACHE_POLICIES.map(() => "---:").join("|")}|`);
const layersWithExperts = new Set(trace.requests.map((r) => r.layer)).size;
for (const s of slots) {
  const cells = CACHE_POLICIES.map((p) => pct(sim.find((r) => r.slotsPerLayer === s && r.policy === p)!.hitRate));
  console.log(`| ${s} | ${((s * layersWithExperts * expertBytes) / 1e3).toFixed(1)} kB | ${cells.join(" | ")} |`);
}
console.log("");

// ---------------------------------------------------------------- speculation

const plain = await runAll({ spec: 0 });
console.log("| --spec | acceptance (confirmed / drafted) | decode forwards / tokens | decode tok/s | speed-up vs --spec 0 | ids = plain |");
console.log("|---:|---:|---:|---:|---:|---|");
const tokS = (f: RunFigures) => (f.generated - nPrompts) / f.decodeSeconds;
console.log(`| 0 | - | ${plain.forwards} / ${plain.generated} | ${tokS(plain).toFixed(1)} | 1.00 | yes |`);
for (const spec of [2, 4, 8]) {
  const f = await runAll({ spec });
  if (!same(f.ids, plain.ids)) throw new Error(`trained.bench: --spec ${spec} changed the generated ids`);
  console.log(`| ${spec} | ${pct(f.accepted / Math.max(1, f.drafted))} (${f.accepted} / ${f.drafted}) | ${f.forwards} / ${f.generated} | ${tokS(f).toFixed(1)} | ${(tokS(f) / tokS(plain)).toFixed(2)} | yes |`);
}
console.log("");

// ---------------------------------------------------------------- threads

console.log("| threads | prefill tok/s | decode tok/s |");
console.log("|---:|---:|---:|");
let oneThread: number[][] | null = null;
for (const threads of [1, 2]) {
  const f = await runAll({ threads });
  if (oneThread && !same(f.ids, oneThread)) throw new Error("trained.bench: 2 threads changed the generated ids");
  oneThread ??= f.ids;
  console.log(`| ${threads} | ${(f.prefillTokens / f.prefillSeconds).toFixed(1)} | ${tokS(f).toFixed(1)} |`);
}
