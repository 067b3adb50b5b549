// JSON mode, logprobs, n > 1 and the penalties on the embedded tiny K3 model (random weights: the
// text is junk, but JSON mode's output must parse and fit the schema), through the official
// `openai` client against `k3 serve`'s server with the model in its worker thread.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WorkerBackend } from "../src/backend.js";
import { Engine } from "../src/engine.js";
import { argmax } from "../src/sampler.js";
import { startServer, type RunningServer } from "../src/server.js";
import { loadKimiTokenizer } from "@k3/tiktoken-bpe";
import { TINY_K3 } from "./helpers.js";

let backend: WorkerBackend;
let srv: RunningServer;
let client: OpenAI;
beforeAll(async () => {
  backend = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop" } }, new URL("../src/worker.ts", import.meta.url));
  srv = await startServer(backend, { port: 0 });
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0 });
}, 60_000);
afterAll(async () => {
  await srv.close();
  await backend.close();
});

type Msg = { content: string | null; reasoning_content?: string };
const user = [{ role: "user" as const, content: "Reply in JSON." }];

const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string" },
    age: { type: "integer" },
    mood: { enum: ["happy", "sad"] },
    tags: { type: "array", items: { type: "boolean" } },
  },
  required: ["name", "age"],
  additionalProperties: false,
};

describe("response_format (JSON mode)", () => {
  it("json_object: the content parses as an object, with and without thinking, greedy and seeded", async () => {
    for (const thinking of [false, true]) {
      for (const [temperature, seed] of [[0, 0], [1, 1], [1, 2]]) {
        const r = await client.chat.completions.create({ model: "k3", messages: user, max_tokens: 48, temperature, seed, response_format: { type: "json_object" }, thinking } as never);
        const m = r.choices[0].message as Msg;
        const value = JSON.parse(m.content!);
        expect(typeof value === "object" && value !== null && !Array.isArray(value), m.content!).toBe(true);
        expect(["stop", "length"]).toContain(r.choices[0].finish_reason);
        // With thinking the think channel comes first, unconstrained, then the JSON.
        if (thinking) expect(m.reasoning_content!.length).toBeGreaterThan(0);
      }
    }
  });

  it("json_schema: the content fits the schema (required keys, types, enum, no other keys)", async () => {
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        model: "k3",
        messages: user,
        max_tokens: 64,
        temperature: 1,
        seed,
        thinking: false,
        response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: SCHEMA } },
      } as never);
      const v = JSON.parse(r.choices[0].message.content!);
      expect(typeof v.name).toBe("string");
      expect(Number.isInteger(v.age)).toBe(true);
      if ("mood" in v) expect(["happy", "sad"]).toContain(v.mood);
      if ("tags" in v) expect(v.tags.every((t: unknown) => typeof t === "boolean")).toBe(true);
      for (const k of Object.keys(v)) expect(["name", "age", "mood", "tags"]).toContain(k);
    }
  });

  it("text completions take response_format too: the whole text is the value", async () => {
    const r = await client.completions.create({ model: "k3", prompt: "{", max_tokens: 30, temperature: 1, seed: 2, response_format: { type: "json_object" } } as never);
    const v = JSON.parse((r as unknown as { choices: { text: string }[] }).choices[0].text);
    expect(typeof v).toBe("object");
  });

  it("streamed JSON mode: the content chunks join to the same JSON as the plain reply", async () => {
    const body = { model: "k3", messages: user, max_tokens: 40, temperature: 1, seed: 4, thinking: false, response_format: { type: "json_object" } };
    const plain = await client.chat.completions.create(body as never);
    const stream = await client.chat.completions.create({ ...body, stream: true } as never);
    let content = "";
    for await (const chunk of stream as unknown as AsyncIterable<{ choices: { delta?: { content?: string } }[] }>) content += chunk.choices[0]?.delta?.content ?? "";
    expect(content).toBe((plain as unknown as { choices: { message: Msg }[] }).choices[0].message.content);
    JSON.parse(content);
  });
});

describe("logprobs from the model", () => {
  it("chat: one entry per content token, greedy picks the top alternative, bytes rebuild the content, streamed = plain", async () => {
    const body = { model: "k3", messages: user, max_tokens: 12, temperature: 0, thinking: false, logprobs: true, top_logprobs: 3 };
    const r = await client.chat.completions.create(body as never);
    const choice = (r as OpenAI.Chat.ChatCompletion).choices[0];
    const entries = choice.logprobs!.content!;
    expect(entries.length).toBeGreaterThan(0);
    for (const e of entries) {
      expect(e.top_logprobs).toHaveLength(3);
      expect(e.top_logprobs[0].logprob).toBe(e.logprob);
      expect(e.top_logprobs[0].bytes).toEqual(e.bytes);
      expect(e.logprob).toBeLessThanOrEqual(0);
      expect(e.top_logprobs[1].logprob).toBeLessThanOrEqual(e.top_logprobs[0].logprob);
      // A token that is not UTF-8 on its own is named by its bytes.
      if (e.token.startsWith("bytes:")) expect(e.token).toBe("bytes:" + e.bytes!.map((b) => "\\x" + b.toString(16).padStart(2, "0")).join(""));
      else expect(Buffer.from(e.bytes!).toString("utf8")).toBe(e.token);
    }
    expect(Buffer.from(entries.flatMap((e) => e.bytes!)).toString("utf8")).toBe(choice.message.content);
    const stream = await client.chat.completions.create({ ...body, stream: true } as never);
    const streamed: unknown[] = [];
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    expect(streamed).toEqual(entries);
  });

  it("seeded sampling: the probabilities of the alternatives add up to at most 1, and JSON mode's logprobs cover only allowed tokens", async () => {
    const r = await client.chat.completions.create({ model: "k3", messages: user, max_tokens: 16, temperature: 1, seed: 9, thinking: false, logprobs: true, top_logprobs: 20, response_format: { type: "json_object" } } as never);
    const choice = (r as OpenAI.Chat.ChatCompletion).choices[0];
    JSON.parse(choice.message.content!);
    const first = choice.logprobs!.content![0];
    const mass = first.top_logprobs.reduce((a, t) => a + Math.exp(t.logprob), 0);
    expect(mass).toBeLessThanOrEqual(1 + 1e-9);
    // The first token of a JSON object is whitespace or "{" (possibly with more after it).
    for (const t of first.top_logprobs) expect(t.token).toMatch(/^[\s]*(\{|$)/);
  });

  it("completions: tokens, token_logprobs, top_logprobs (with the drawn token) and text_offset line up with the text", async () => {
    const r = await client.completions.create({ model: "k3", prompt: "Once upon a time", max_tokens: 8, temperature: 1, seed: 3, logprobs: 2 });
    const c = r.choices[0];
    const lp = c.logprobs!;
    expect(lp.tokens!.length).toBe(r.usage!.completion_tokens);
    expect(lp.token_logprobs!.length).toBe(lp.tokens!.length);
    expect(lp.text_offset![0]).toBe(0);
    for (let i = 0; i < lp.tokens!.length; i++) {
      const top = lp.top_logprobs![i];
      expect(top[lp.tokens![i]]).toBe(lp.token_logprobs![i]);
      expect(Object.keys(top).length).toBeGreaterThanOrEqual(2);
      expect(Object.keys(top).length).toBeLessThanOrEqual(3);
      if (i > 0) expect(lp.text_offset![i]).toBeGreaterThanOrEqual(lp.text_offset![i - 1]);
    }
    // Offsets count whole characters: a token that is plain text starts exactly there.
    lp.tokens!.forEach((t, i) => {
      if (!t.startsWith("bytes:")) expect(c.text.slice(lp.text_offset![i], lp.text_offset![i] + t.length)).toBe(t);
    });
  });
});

describe("logit_bias", () => {
  it("+100 on one token makes greedy decoding write only it; an id past the vocabulary is a 400 naming logit_bias", async () => {
    const tok = loadKimiTokenizer(TINY_K3, { specials: "k3" });
    const [a] = tok.encodeOrdinary("a");
    const r = await client.completions.create({ model: "k3", prompt: "x", max_tokens: 3, temperature: 0, logit_bias: { [a]: 100 } });
    expect(r.choices[0].text).toBe("aaa");
    await expect(client.completions.create({ model: "k3", prompt: "x", max_tokens: 3, logit_bias: { "999999": 1 } })).rejects.toMatchObject({ status: 400, param: "logit_bias" });
  });
});

describe("n > 1", () => {
  it("n choices are independent seeded draws: choice 0 is the n = 1 reply, each repeats exactly, streamed = plain", async () => {
    const body = { model: "k3", messages: user, max_tokens: 10, temperature: 1, seed: 5, thinking: false };
    const one = await client.chat.completions.create(body);
    const three = await client.chat.completions.create({ ...body, n: 3 });
    expect(three.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    expect(three.choices[0].message.content).toBe(one.choices[0].message.content);
    expect(new Set(three.choices.map((c) => c.message.content)).size).toBeGreaterThan(1);
    const again = await client.chat.completions.create({ ...body, n: 3 });
    expect(again.choices.map((c) => c.message.content)).toEqual(three.choices.map((c) => c.message.content));
    const stream = await client.chat.completions.create({ ...body, n: 3, stream: true });
    const texts = ["", "", ""];
    for await (const chunk of stream) for (const c of chunk.choices) texts[c.index] += c.delta?.content ?? "";
    expect(texts).toEqual(three.choices.map((c) => c.message.content));
  });
});

describe("presence / frequency penalties in the engine", () => {
  it("every draw's row is the model's logits minus count * frequency + presence for each generated token; seeded runs repeat", async () => {
    const engine = await Engine.load(TINY_K3, { threads: 1, preset: "laptop" });
    try {
      const prompt = engine.encodeText("the the the the");
      const run = async (presencePenalty: number, frequencyPenalty: number, temperature = 0) => {
        const checks: number[] = [];
        const counts = new Map<number, number>();
        let raw: Float32Array | null = null;
        const r = await engine.complete(prompt, {
          maxTokens: 12,
          temperature,
          seed: 11,
          presencePenalty,
          frequencyPenalty,
          onLogits: (l) => (raw = l.slice()),
          onSample: (id, row) => {
            for (let j = 0; j < row.length; j++) {
              const c = counts.get(j) ?? 0;
              const want = c > 0 ? Math.fround(raw![j] - c * frequencyPenalty - presencePenalty) : raw![j];
              if (row[j] !== want) throw new Error(`token ${j}: row ${row[j]}, expected ${want}`);
            }
            // Greedy draws the row's best token: the penalized row is what decides.
            if (temperature === 0 && id !== argmax(row)) throw new Error(`drew ${id}, the row's best is ${argmax(row)}`);
            checks.push(id);
            counts.set(id, (counts.get(id) ?? 0) + 1);
          },
        });
        return { ids: r.ids, checks };
      };
      const penalized = await run(1.5, 0.75);
      expect(penalized.checks).toEqual(penalized.ids);
      expect(penalized.ids.length).toBe(12);
      // A negative presence penalty is allowed too (it favours repeats).
      await run(-2, 0);
      const seeded = await run(0.4, 1.1, 1);
      expect((await run(0.4, 1.1, 1)).ids).toEqual(seeded.ids);
    } finally {
      engine.close();
    }
  });
});
