/**
 * JSON mode's token mask on the real K3 vocabulary (163,840 ids): ms per mask in typical grammar
 * states, side by side in the same run with (a) the naive mask (every token's bytes stepped
 * through the recognizer), (b) one sampler draw over the same row (temperature 1, top-p 0.95: what
 * a token costs the sampler without JSON mode), and (c) writing the row once (a mask's floor).
 * Also: building the vocabulary's tries, and a 256-token generation from random logits (mean ms
 * per token for mask + accept).
 * Run: /work/bin/k3-excl node --import tsx bench/json-mask.bench.ts   (K3_TEST_DATA: dir with kimi-tokenizer/)
 */
import { join } from "node:path";
import { loadKimiTokenizer } from "@k3/tiktoken-bpe";
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { timeIt, writeReport } from "../../../scripts/bench-report.mjs";
import { ANY_OBJECT, initialState, stepBytes, minCompletion, type JsonState } from "../src/json-grammar.js";
import { allowedTokens, JsonConstraint, JsonVocab } from "../src/json-mask.js";
import { compileSchema } from "../src/json-schema.js";
import { Pcg32, Sampler } from "../src/sampler.js";

type Timing = { best: number; median: number; runs: number };
const time = timeIt as (fn: () => unknown, o?: { minRuns?: number; minMs?: number; warmup?: number }) => Promise<Timing>;

const data = process.env.K3_TEST_DATA ?? join(import.meta.dirname, "..", "..", "..", "..", "shared", "data");
const tok = loadKimiTokenizer(join(data, "kimi-tokenizer"), { specials: "k3" });
const V = 163840;
const t0 = performance.now();
const vocab = JsonVocab.fromTokenizer(tok, V);
const buildMs = performance.now() - t0;
const enc = new TextEncoder();
const schema = compileSchema({ type: "object", properties: { name: { type: "string" }, age: { type: "integer" }, tags: { type: "array", items: { type: "string" } } }, required: ["name", "age"] });

const rng = new Pcg32(1, 1);
const row = new Float32Array(V).map(() => (rng.nextUnit() - 0.5) * 10);
const sampler = new Sampler({ temperature: 1, topP: 0.95, seed: 3 });
const sampleMs = await time(() => sampler.sample(row), { minRuns: 20 });
const scratch = new Float32Array(V);
const fillMs = await time(() => scratch.set(row), { minRuns: 50 });

function naive(state: JsonState, budget: number): number {
  let n = 0;
  vocab.tokens.forEach((t) => {
    if (!t) return;
    const s = stepBytes(state, t);
    if (s && minCompletion(s) <= budget) n++;
  });
  return n;
}

const rows: Record<string, string | number>[] = [];
const cases: [string, typeof schema, string][] = [
  ["json_object start", ANY_OBJECT, ""],
  ["after {", ANY_OBJECT, "{"],
  ["in a key", ANY_OBJECT, '{"na'],
  ["after a colon", ANY_OBJECT, '{"name":'],
  ["in a string value", ANY_OBJECT, '{"name":"Ann is a'],
  ["in a number", ANY_OBJECT, '{"n":12'],
  ["in an array", ANY_OBJECT, '{"a":[1,'],
  ["schema: next key", schema, '{"name":"x",'],
  ["schema: in a string", schema, '{"name":"Ann'],
];
const allowed = new Uint8Array(V);
for (const [label, s, prefix] of cases) {
  const state = stepBytes(initialState(s), enc.encode(prefix))!;
  const count = allowedTokens(vocab, state, 1000, allowed).allowed.reduce((a, b) => a + b, 0);
  const mask = await time(() => allowedTokens(vocab, state, 1000, allowed), { minRuns: 10 });
  const ref = await time(() => naive(state, 1000), { minRuns: 3, minMs: 100 });
  rows.push({
    state: label,
    "allowed ids": count,
    "mask ms (best)": mask.best,
    "mask ms (median)": mask.median,
    "naive ms": ref.best,
    "naive / mask": ref.best / mask.best,
    "mask / one draw": mask.best / sampleMs.best,
    "mask / row write": mask.best / fillMs.best,
  });
}

// A generation from random logits: every token's mask + accept (the draw is not timed).
const gen = async (sch: typeof schema) => {
  const c = new JsonConstraint(vocab, sch);
  const s = new Sampler({ temperature: 1, seed: 9 });
  const r = new Pcg32(5, 2);
  let n = 0;
  const work = new Float32Array(V);
  const start = performance.now();
  for (let i = 0; i < 256; i++) {
    for (let k = 0; k < V; k++) work[k] = (r.nextUnit() - 0.5) * 10;
    let t = performance.now();
    c.mask(work, 256 - i);
    masked += performance.now() - t;
    const id = s.sample(work);
    n++;
    t = performance.now();
    const done = c.accept(id);
    masked += performance.now() - t;
    if (done) break;
  }
  return { tokens: n, ms: masked / n, wall: performance.now() - start };
};
let masked = 0;
const g1 = await gen(ANY_OBJECT);
masked = 0;
const g2 = await gen(schema);
rows.push({ state: `json_object generation (${g1.tokens} tokens, random logits)`, "mask ms (best)": "-", "mask ms (median)": g1.ms, "mask / one draw": g1.ms / sampleMs.best });
rows.push({ state: `json_schema generation (${g2.tokens} tokens, random logits)`, "mask ms (best)": "-", "mask ms (median)": g2.ms, "mask / one draw": g2.ms / sampleMs.best });

writeReport("json-mask", {
  title: "JSON mode token mask on the K3 vocabulary (163,840 ids)",
  command: "/work/bin/k3-excl node --import tsx bench/json-mask.bench.ts",
  rows,
  notes: [
    `Vocabulary tries built in ${buildMs.toFixed(0)} ms (${vocab.trie.nodes} + ${vocab.exitTrie.nodes} trie nodes, ${vocab.stringSafe.length} ids that stay in a string). One sampler draw (temperature 1, top-p 0.95): ${sampleMs.best.toFixed(2)} ms best, ${sampleMs.median.toFixed(2)} median; writing the row once: ${fillMs.best.toFixed(3)} ms.`,
    "Generation rows: mean ms per token for mask + accept (the draw excluded), random logits; masked rows make the draw cheaper, not dearer.",
  ],
});
