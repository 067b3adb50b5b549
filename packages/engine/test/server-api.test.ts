// What an OpenAI client expects of `k3 serve` beyond the basics (issue #17): the official `openai`
// npm client end to end, /v1/models/{id}, developer role, refused-not-ignored parameters,
// Retry-After, an API key, /metrics, and a busy port.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type CompletionBackend, type CompletionJob, type CompletionResult, type LogprobEntry, type RunningServer, type TextExtra } from "../src/server.js";
import { ServerMetrics } from "../src/metrics.js";
import type { PrefillProgress } from "../src/engine.js";

/** Replies "Hi there" after a short think, and reports stats like the engine's worker does. */
class StatsBackend implements CompletionBackend {
  readonly modelId = "tiny-test";
  readonly contextLength = 2048;
  jobs: CompletionJob[] = [];
  delayMs = 2;
  async complete(
    job: CompletionJob,
    onText: (t: string, channel?: "content" | "reasoning", extra?: TextExtra) => void,
    signal: AbortSignal,
    onPrefill?: (p: PrefillProgress) => void,
  ): Promise<CompletionResult> {
    this.jobs.push(job);
    // a prefill's progress first: a streamed reply carries it as SSE comments, which clients skip
    for (const fraction of [0.5, 1]) onPrefill?.({ tokens: 4, tokensDone: 4 * fraction, fraction, layersDone: 2, layers: 2, seconds: 2 * fraction, etaSeconds: 2 - 2 * fraction });
    const pieces: [string, "content" | "reasoning"][] = [["hmm", "reasoning"], ["Hi", "content"], [" there", "content"]];
    const count = Math.min(3, job.maxTokens);
    const choices = job.n ?? 1;
    for (let index = 0; index < choices; index++) {
      let offset = 0;
      for (const [text, channel] of pieces.slice(0, job.maxTokens)) {
        if (signal.aborted) throw new Error("aborted");
        await new Promise((r) => setTimeout(r, this.delayMs));
        // Choice i says "Hi there" with i exclamation marks; each content piece is one token.
        const t = channel === "content" && text === " there" ? text + "!".repeat(index) : text;
        const logprobs = job.logprobs != null && channel === "content" ? [entry(t, offset, job.logprobs)] : undefined;
        if (channel === "content") offset += t.length;
        onText(t, channel, { index, logprobs });
      }
    }
    return {
      finishReason: count < 3 ? "length" : "stop",
      promptTokens: 5,
      completionTokens: count * choices,
      expertDrops: 0,
      stats: { prefillTokensPerSecond: 50, decodeTokensPerSecond: 4, bytesRead: { trunk: 100, experts: 2000, embedHead: 30 }, expertRequests: 10, expertResidentHits: 7 },
      choices: Array.from({ length: choices }, (_, index) => ({ index, finishReason: count < 3 ? "length" : "stop", completionTokens: count })),
    };
  }
}

/** A made-up logprob entry: the token at -0.5, then `top` alternatives at -1, -2, ... */
function entry(token: string, offset: number, top: number): LogprobEntry {
  const bytes = Array.from(new TextEncoder().encode(token));
  return { token, bytes, logprob: -0.5, offset, top: Array.from({ length: top }, (_, k) => ({ token: `alt${k}`, bytes: Array.from(new TextEncoder().encode(`alt${k}`)), logprob: -1 - k })) };
}

const backend = new StatsBackend();
let srv: RunningServer;
let client: OpenAI;
beforeAll(async () => {
  srv = await startServer(backend, { port: 0, maxQueue: 0 });
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(async () => srv.close());

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(srv.url + path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: (await res.json()) as any };
}

describe("the official openai client", () => {
  it("chat completion, plain", async () => {
    const r = await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], max_tokens: 10 });
    expect(r.choices[0].message.content).toBe("Hi there");
    expect((r.choices[0].message as unknown as { reasoning_content: string }).reasoning_content).toBe("hmm");
    expect(r.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 });
  });

  it("chat completion, streamed", async () => {
    const stream = await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], stream: true });
    let content = "";
    let reasoning = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      content += d?.content ?? "";
      reasoning += d?.reasoning_content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(content).toBe("Hi there");
    expect(reasoning).toBe("hmm");
    expect(finish).toBe("stop");
  });

  it("a streamed reply carries the prefill's progress as SSE comments before its first event", async () => {
    const res = await fetch(srv.url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], stream: true }) });
    const events = (await res.text()).split("\n\n").filter(Boolean);
    expect(events.slice(1, 3)).toEqual([": prefill 50.0% 2/4 tokens, 1.0 s, ETA 1 s", ": prefill 100.0% 4/4 tokens, 2.0 s, ETA 0 s"]);
    expect(events[0]).toMatch(/^data: .*"role":"assistant"/); // the role chunk is written before the job starts
    expect(events.slice(3).every((e) => e.startsWith("data: "))).toBe(true);
  });

  it("text completion", async () => {
    const r = await client.completions.create({ model: "tiny-test", prompt: "x", max_tokens: 2 });
    expect(r.choices[0].text).toBe("hmmHi");
    expect(r.choices[0].finish_reason).toBe("length");
  });

  it("models list and retrieve", async () => {
    const list = await client.models.list();
    expect(list.data.map((m) => m.id)).toEqual(["tiny-test"]);
    const one = await client.models.retrieve("tiny-test");
    expect(one).toMatchObject({ id: "tiny-test", object: "model", owned_by: "k3" });
    await expect(client.models.retrieve("gpt-4o")).rejects.toMatchObject({ status: 404, code: "model_not_found" });
  });

  it("an error surfaces as the client's APIError with the field", async () => {
    await expect(client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], temperature: 7 })).rejects.toMatchObject({ status: 400, param: "temperature" });
  });

  it("chat logprobs in OpenAI's shape, plain and streamed", async () => {
    const r = await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], logprobs: true, top_logprobs: 2 });
    const content = r.choices[0].logprobs!.content!;
    expect(content.map((c) => c.token)).toEqual(["Hi", " there"]);
    expect(content[0]).toEqual({ token: "Hi", logprob: -0.5, bytes: [72, 105], top_logprobs: [{ token: "alt0", logprob: -1, bytes: [97, 108, 116, 48] }, { token: "alt1", logprob: -2, bytes: [97, 108, 116, 49] }] });
    expect(r.choices[0].logprobs!.refusal).toBeNull();
    const stream = await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], logprobs: true, stream: true });
    const tokens: string[] = [];
    for await (const chunk of stream) for (const c of chunk.choices[0]?.logprobs?.content ?? []) tokens.push(c.token);
    expect(tokens).toEqual(["Hi", " there"]);
    // Off unless asked: null, as OpenAI's.
    const off = await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }] });
    expect(off.choices[0].logprobs).toBeNull();
  });

  it("completions logprobs: tokens, token_logprobs, top_logprobs (with the drawn token) and text_offset", async () => {
    const r = await client.completions.create({ model: "tiny-test", prompt: "x", logprobs: 1 });
    expect(r.choices[0].text).toBe("hmmHi there");
    expect(r.choices[0].logprobs).toEqual({ tokens: ["Hi", " there"], token_logprobs: [-0.5, -0.5], top_logprobs: [{ alt0: -1, Hi: -0.5 }, { alt0: -1, " there": -0.5 }], text_offset: [0, 2] });
    const stream = await client.completions.create({ model: "tiny-test", prompt: "x", logprobs: 0, stream: true });
    const tokens: string[] = [];
    for await (const chunk of stream) tokens.push(...(chunk.choices[0]?.logprobs?.tokens ?? []));
    expect(tokens).toEqual(["Hi", " there"]);
  });

  it("n = 3: three choices with their index, plain and streamed", async () => {
    const r = await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], n: 3 });
    expect(r.choices.map((c) => [c.index, c.message.content])).toEqual([[0, "Hi there"], [1, "Hi there!"], [2, "Hi there!!"]]);
    expect(r.usage!.completion_tokens).toBe(9);
    const stream = await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], n: 2, stream: true });
    const texts = ["", ""];
    const finished: number[] = [];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        texts[c.index] += c.delta?.content ?? "";
        if (c.finish_reason) finished.push(c.index);
      }
    }
    expect(texts).toEqual(["Hi there", "Hi there!"]);
    expect(finished).toEqual([0, 1]);
    const text = await client.completions.create({ model: "tiny-test", prompt: "x", n: 2 });
    expect(text.choices.map((c) => c.index)).toEqual([0, 1]);
  });

  it("penalties, n, logprobs and response_format reach the backend as parsed", async () => {
    await client.chat.completions.create({
      model: "tiny-test",
      messages: [{ role: "user", content: "hi" }],
      presence_penalty: 0.5,
      frequency_penalty: -1.25,
      n: 2,
      logprobs: true,
      top_logprobs: 4,
      response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: { type: "object", properties: { name: { type: "string" } }, required: ["name"], additionalProperties: false } } },
    });
    expect(backend.jobs.at(-1)).toMatchObject({ presencePenalty: 0.5, frequencyPenalty: -1.25, n: 2, logprobs: 4, responseFormat: { type: "json_schema", name: "person" } });
    await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], logit_bias: { "42": -100, "7": 2.5 } });
    expect(backend.jobs.at(-1)!.logitBias).toEqual({ "42": -100, "7": 2.5 });
    await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }], response_format: { type: "json_object" } });
    expect(backend.jobs.at(-1)).toMatchObject({ presencePenalty: 0, frequencyPenalty: 0, n: 1, logprobs: null, responseFormat: { type: "json_object" } });
  });

  it("developer messages are taken as system", async () => {
    await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "developer", content: "be brief" }, { role: "user", content: "hi" }] });
    expect(backend.jobs.at(-1)!.messages).toEqual([{ role: "system", content: "be brief" }, { role: "user", content: "hi" }]);
  });
});

describe("parameters that would change the reply are refused by name, never ignored", () => {
  const chat = { messages: [{ role: "user", content: "hi" }] };
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    ["tools", { tools: [{ type: "function", function: { name: "f", parameters: {} } }] }, "tools", /tool calling/],
    ["tool_choice", { tool_choice: "required" }, "tool_choice", /tool calling/],
    ["response_format of an unknown type", { response_format: { type: "yaml" } }, "response_format.type", /"yaml"/],
    ["json_schema without a name", { response_format: { type: "json_schema", json_schema: { schema: { type: "object" } } } }, "response_format.json_schema.name", /letters/],
    ["json_schema with unsupported keywords", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "string", pattern: "^a", minLength: 2 } } } } } }, "response_format.json_schema.schema", /properties\.a: unsupported keywords pattern, minLength/],
    ["json_schema whose top level is not an object", { response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "array" } } } }, "response_format.json_schema.schema", /top level/],
    ["logprobs that is not a boolean", { logprobs: 3 }, "logprobs", /true or false/],
    ["top_logprobs without logprobs", { top_logprobs: 3 }, "top_logprobs", /needs logprobs: true/],
    ["top_logprobs over 20", { logprobs: true, top_logprobs: 21 }, "top_logprobs", /0\.\.20/],
    ["presence_penalty out of range", { presence_penalty: 2.5 }, "presence_penalty", /\[-2, 2\]/],
    ["frequency_penalty not a number", { frequency_penalty: "x" }, "frequency_penalty", /\[-2, 2\]/],
    ["logit_bias out of range", { logit_bias: { "42": 500 } }, "logit_bias", /logit_bias\[42\] = 500: expected a number in \[-100, 100\]/],
    ["logit_bias with a key that is not a token id", { logit_bias: { abc: 1 } }, "logit_bias", /key "abc" is not a token id/],
    ["n = 0", { n: 0 }, "n", /1\.\.8/],
    ["n = 9", { n: 9 }, "n", /1\.\.8/],
  ];
  for (const [what, extra, param, message] of cases) {
    it(what, async () => {
      const r = await post("/v1/chat/completions", { ...chat, ...extra });
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe(param);
      expect(r.body.error.message).toMatch(message);
    });
  }

  it("tool messages and assistant tool_calls", async () => {
    const toolMsg = await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }, { role: "tool", content: "42", tool_call_id: "c1" }] });
    expect(toolMsg.status).toBe(400);
    expect(toolMsg.body.error.param).toBe("messages[1].role");
    const calls = await post("/v1/chat/completions", { messages: [{ role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] }] });
    expect(calls.status).toBe(400);
    expect(calls.body.error.param).toBe("messages[0].tool_calls");
  });

  it("text-completion only parameters", async () => {
    for (const [extra, param] of [[{ echo: true }, "echo"], [{ best_of: 3 }, "best_of"], [{ logprobs: 6 }, "logprobs"], [{ logprobs: true }, "logprobs"], [{ suffix: "end" }, "suffix"]] as const) {
      const r = await post("/v1/completions", { prompt: "x", ...extra });
      expect(r.status, param).toBe(400);
      expect(r.body.error.param).toBe(param);
    }
  });

  it("their do-nothing values pass", async () => {
    const r = await post("/v1/chat/completions", {
      ...chat,
      tools: [],
      tool_choice: "none",
      response_format: { type: "text" },
      logprobs: false,
      top_logprobs: 0,
      presence_penalty: 0,
      frequency_penalty: 0,
      logit_bias: {},
      n: 1,
      parallel_tool_calls: true,
    });
    expect(r.status).toBe(200);
  });
});

describe("queue, key, metrics", () => {
  it("a 429 says when to retry", async () => {
    backend.delayMs = 150;
    try {
      const first = post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] });
      await new Promise((r) => setTimeout(r, 40));
      const second = await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }] });
      expect(second.status).toBe(429);
      expect(Number(second.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
      expect((await first).status).toBe(200);
    } finally {
      backend.delayMs = 2;
    }
  });

  it("/metrics is Prometheus text with the figures that matter", async () => {
    const res = await fetch(srv.url + "/metrics");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/plain; version=0.0.4");
    const text = await res.text();
    for (const line of text.trim().split("\n")) expect(line).toMatch(/^(# (HELP|TYPE) k3_\w+ .+|k3_\w+(\{[^}]*\})? -?[0-9.e+-]+)$/);
    const value = (name: string) => Number(new RegExp(`^${name.replace(/[{}]/g, "\\$&")} (\\S+)$`, "m").exec(text)?.[1]);
    expect(value("k3_completion_tokens_total")).toBeGreaterThan(0);
    expect(value('k3_bytes_read_total{source="experts"}') % 2000).toBe(0);
    expect(value("k3_expert_hit_ratio")).toBeCloseTo(0.7, 10);
    expect(value("k3_decode_tokens_per_second")).toBe(4);
    expect(value("k3_process_resident_memory_bytes")).toBeGreaterThan(1e6);
    expect(value('k3_http_requests_total{route="/v1/chat/completions",status="429"}')).toBeGreaterThanOrEqual(1);
  });

  it("renders each counter once per generation", () => {
    const m = new ServerMetrics();
    const r: CompletionResult = { finishReason: "stop", promptTokens: 3, completionTokens: 2, expertDrops: 1, stats: { prefillTokensPerSecond: 9, decodeTokensPerSecond: 0, bytesRead: { trunk: 1, experts: 2, embedHead: 3 }, expertRequests: 4, expertResidentHits: 1 } };
    m.countCompletion(r);
    m.countCompletion(r);
    const text = m.render(0, 123);
    expect(text).toContain("k3_prompt_tokens_total 6\n");
    expect(text).toContain("k3_expert_drops_total 2\n");
    expect(text).toContain('k3_bytes_read_total{source="embed_head"} 6\n');
    expect(text).toContain("k3_expert_hit_ratio 0.25\n");
    expect(text).toContain("k3_decode_tokens_per_second 0\n");
    expect(text).toContain("k3_process_resident_memory_bytes 123\n");
  });

  it("--api-key: 401 without or with a wrong key (OpenAI-shaped), 200 with it; /health stays open", async () => {
    const keyed = await startServer(backend, { port: 0, apiKey: "s3cret-key-123" });
    try {
      const models = (auth?: string) => fetch(keyed.url + "/v1/models", { headers: auth ? { authorization: auth } : {} });
      const none = await models();
      expect(none.status).toBe(401);
      expect(none.headers.get("www-authenticate")).toContain("Bearer");
      expect(((await none.json()) as any).error.code).toBe("missing_api_key");
      const wrong = await models("Bearer s3cret-key-124");
      expect(wrong.status).toBe(401);
      expect(((await wrong.json()) as any).error.code).toBe("invalid_api_key");
      expect((await models("Bearer s3cret-key-123")).status).toBe(200);
      expect((await fetch(keyed.url + "/metrics")).status).toBe(401);
      expect((await fetch(keyed.url + "/health")).status).toBe(200);
      const good = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: "s3cret-key-123", maxRetries: 0 });
      expect((await good.chat.completions.create({ model: "tiny-test", messages: [{ role: "user", content: "hi" }] })).choices[0].message.content).toBe("Hi there");
      const bad = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: "nope", maxRetries: 0 });
      await expect(bad.models.list()).rejects.toMatchObject({ status: 401 });
    } finally {
      await keyed.close();
    }
  });
});

describe("k3 serve on a busy port", () => {
  it("exits 2 naming the address", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", () => r()));
    const port = (blocker.address() as { port: number }).port;
    try {
      const child = spawn(process.execPath, ["--import", "tsx", join(__dirname, "..", "src", "cli.ts"), "serve", "--port", String(port)], { cwd: join(__dirname, ".."), env: { ...process.env, K3_THREADS: "1" } });
      let stderr = "";
      child.stderr.on("data", (d) => (stderr += d));
      const code = await new Promise<number | null>((r) => child.on("exit", (c) => r(c)));
      expect(code, stderr).toBe(2);
      expect(stderr).toContain(`127.0.0.1:${port}`);
      expect(stderr).toContain("already in use");
    } finally {
      blocker.close();
    }
  }, 120_000);
});
