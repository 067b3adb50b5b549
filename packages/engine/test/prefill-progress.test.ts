// Prefill progress: GenerateOptions.onPrefillProgress after each layer of each chunk (prompt-cache
// restores not counted, decode never reported) and the CLI's bar (cli/shared.ts prefillPrinter).
import { setThreadCount } from "@k3/dense";
import { afterAll, describe, expect, it } from "vitest";
import { Engine, type PrefillProgress } from "../src/engine.js";
import { prefillPrinter } from "../src/cli/shared.js";
import { GB } from "../src/presets.js";
import { PromptCache } from "../src/prompt-cache.js";
import { WorkerBackend } from "../src/backend.js";
import { startServer } from "../src/server.js";
import { TINY_K3 } from "./helpers.js";

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
setThreadCount(1);
const engine = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", chunkSize: 64 });
afterAll(() => engine.close());
const V = engine.config.vocabSize;
const L = engine.config.numLayers;
const promptOf = (n: number, salt: number) => Array.from({ length: n }, (_, i) => (i * 7919 + salt) % (V - 300));
const opts = { maxTokens: 3, temperature: 0, stopIds: [] as number[] };

/** The events in order, checked for what holds in every prefill. */
function checked(events: PrefillProgress[], tokens: number, chunks: number[]): void {
  expect(events.length).toBe(chunks.length * L); // one per layer per chunk; the decode steps report nothing
  let at = 0;
  for (let c = 0; c < chunks.length; c++) {
    for (let l = 1; l <= L; l++) {
      const e = events[c * L + l - 1];
      expect(e.tokens).toBe(tokens);
      expect(e.layers).toBe(L);
      expect(e.layersDone).toBe(l);
      expect(e.tokensDone).toBe(l === L ? at + chunks[c] : at);
      expect(e.fraction).toBeCloseTo((at * L + chunks[c] * l) / (tokens * L), 12);
      expect(e.etaSeconds).not.toBeNull();
    }
    at += chunks[c];
  }
  for (let i = 1; i < events.length; i++) {
    expect(events[i].fraction).toBeGreaterThan(events[i - 1].fraction);
    expect(events[i].seconds).toBeGreaterThanOrEqual(events[i - 1].seconds);
  }
  expect(events.at(-1)!.fraction).toBe(1);
  expect(events.at(-1)!.tokensDone).toBe(tokens);
}

describe("prefill progress", () => {
  it("a 200-token prompt at chunk 64: 4 chunks x every layer, the fraction rising to exactly 1", async () => {
    const events: PrefillProgress[] = [];
    await engine.complete(promptOf(200, 13), { ...opts, promptCache: null, onPrefillProgress: (p) => events.push(p) });
    checked(events, 200, [64, 64, 64, 8]);
  });

  it("a prompt-cache hit counts only the tokens it prefills, across the snapshot's two calls", async () => {
    const cache = new PromptCache({ slots: 2 });
    const first = promptOf(200, 29);
    await engine.complete(first, { ...opts, promptCache: cache });
    const events: PrefillProgress[] = [];
    const turn2 = [...first, ...promptOf(71, 5)];
    const r = await engine.complete(turn2, { ...opts, promptCache: cache, onPrefillProgress: (p) => events.push(p) });
    expect(r.cachedTokens).toBe(192);
    // 192..256 (to the next snapshot point, no logits), then 256..271
    checked(events, 79, [64, 15]);
  });
});

describe("cancelling a large chunk", () => {
  it("is noticed between the 64-token pieces of a layer, not only between layers", async () => {
    const big = await Engine.load(TINY_K3, { mem: bigBox, preset: "laptop", chunkSize: 1024 });
    try {
      let asked = 0;
      const events: PrefillProgress[] = [];
      // the first question comes before layer 0, the second between layer 0's first and second pieces
      const r = await big.complete(promptOf(300, 41), { ...opts, promptCache: null, cancelled: () => ++asked >= 2, onPrefillProgress: (p) => events.push(p) });
      expect(r.stopReason).toBe("abort");
      expect(r.ids).toEqual([]);
      expect(asked).toBe(2);
      expect(events).toEqual([]); // layer 0 never finished
    } finally {
      big.close();
    }
  });
});

describe("prefillPrinter", () => {
  const event = (fraction: number, seconds: number): PrefillProgress => ({
    tokens: 584, tokensDone: Math.floor(584 * fraction), fraction, layersDone: 3, layers: 4, seconds, etaSeconds: fraction > 0 ? (seconds * (1 - fraction)) / fraction : null,
  });
  const sink = (isTTY: boolean) => {
    const out: string[] = [];
    return { out, stream: { isTTY, columns: 200, write: (t: string) => out.push(t) } };
  };

  it("on a TTY: nothing in the first second, then at most every 250 ms, and a last line ended by a newline", () => {
    const { out, stream } = sink(true);
    const print = prefillPrinter(stream);
    print(event(0.1, 0.5));
    expect(out).toEqual([]);
    print(event(0.2, 1.0));
    expect(out.join("")).toContain("prefill [######........................] 20.0% 116/584 tokens, layer 3/4, 116.8 tok/s, ETA 4s");
    const n = out.length;
    print(event(0.25, 1.1));
    expect(out.length).toBe(n); // within 250 ms of the last draw
    print(event(0.3, 1.3));
    expect(out.length).toBeGreaterThan(n);
    print(event(1, 2.0));
    expect(out.join("")).toContain("100.0% 584/584 tokens");
    expect(out.at(-1)!.endsWith("\n")).toBe(true);
  });

  it("draws nothing off a TTY, nor for a prefill over within the first second", () => {
    for (const [tty, times] of [[false, [0.5, 1.5, 3]], [true, [0.2, 0.5, 0.9]]] as const) {
      const { out, stream } = sink(tty);
      const print = prefillPrinter(stream);
      print(event(0.3, times[0]));
      print(event(0.6, times[1]));
      print(event(1, times[2]));
      expect(out, `tty ${tty}`).toEqual([]);
    }
  });
});

describe("prefill progress through the server", () => {
  it("a streamed completion carries it as SSE comments, rising to 100%, before the text; a plain one is plain JSON", async () => {
    // every layer's event posted (the default waits one second and posts once a second)
    const backend = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop", promptCache: { slots: 0 } }, prefillProgress: { afterSeconds: 0, everySeconds: 0 } }, new URL("../src/worker.ts", import.meta.url));
    const srv = await startServer(backend, { port: 0 });
    try {
      const prompt = Array.from({ length: 150 }, (_, i) => `w${i}`).join(" ");
      const res = await fetch(srv.url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt, max_tokens: 2, temperature: 0, stream: true }) });
      const events = (await res.text()).split("\n\n").filter(Boolean);
      const comments = events.filter((e) => e.startsWith(": prefill "));
      const percents = comments.map((c) => Number(/: prefill ([\d.]+)%/.exec(c)![1]));
      expect(comments.length).toBeGreaterThanOrEqual(2 * L); // two or more 64-token chunks, each layer
      for (let i = 1; i < percents.length; i++) expect(percents[i]).toBeGreaterThanOrEqual(percents[i - 1]); // printed to 0.1 %
      expect(percents[0]).toBeLessThan(50);
      expect(comments.at(-1)).toMatch(/^: prefill 100\.0% (\d+)\/\1 tokens, [\d.]+ s, ETA 0 s$/);
      const firstText = events.findIndex((e) => e.startsWith("data: {"));
      expect(events.findIndex((e) => e.startsWith(": prefill 100.0%"))).toBeLessThan(firstText);
      const plain = await fetch(srv.url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt, max_tokens: 2, temperature: 0 }) });
      const body = await plain.text();
      expect(body.startsWith("{")).toBe(true);
      expect(JSON.parse(body).choices[0].text.length).toBeGreaterThan(0);
    } finally {
      await srv.close();
      await backend.close();
    }
  });
});
