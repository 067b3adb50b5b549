// What an OpenAI client expects of `k3 serve` beyond the basics (issue #17): the official `openai`
// npm client end to end, /v1/models/{id}, developer role, refused-not-ignored parameters,
// Retry-After, an API key, /metrics, and a busy port.
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type CompletionBackend, type CompletionJob, type CompletionResult, type RunningServer } from "../src/server.js";
import { ServerMetrics } from "../src/metrics.js";

/** Replies "Hi there" after a short think, and reports stats like the engine's worker does. */
class StatsBackend implements CompletionBackend {
  readonly modelId = "tiny-test";
  readonly contextLength = 2048;
  jobs: CompletionJob[] = [];
  delayMs = 2;
  async complete(job: CompletionJob, onText: (t: string, channel?: "content" | "reasoning") => void, signal: AbortSignal): Promise<CompletionResult> {
    this.jobs.push(job);
    const pieces: [string, "content" | "reasoning"][] = [["hmm", "reasoning"], ["Hi", "content"], [" there", "content"]];
    for (const [text, channel] of pieces.slice(0, job.maxTokens)) {
      if (signal.aborted) throw new Error("aborted");
      await new Promise((r) => setTimeout(r, this.delayMs));
      onText(text, channel);
    }
    const n = Math.min(3, job.maxTokens);
    return {
      finishReason: n < 3 ? "length" : "stop",
      promptTokens: 5,
      completionTokens: n,
      expertDrops: 0,
      stats: { prefillTokensPerSecond: 50, decodeTokensPerSecond: 4, bytesRead: { trunk: 100, experts: 2000, embedHead: 30 }, expertRequests: 10, expertResidentHits: 7 },
    };
  }
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

  it("developer messages are taken as system", async () => {
    await client.chat.completions.create({ model: "tiny-test", messages: [{ role: "developer", content: "be brief" }, { role: "user", content: "hi" }] });
    expect(backend.jobs.at(-1)!.messages).toEqual([{ role: "system", content: "be brief" }, { role: "user", content: "hi" }]);
  });
});

describe("parameters that would change the reply are refused by name, never ignored", () => {
  const chat = { messages: [{ role: "user", content: "hi" }] };
  const cases: [string, Record<string, unknown>, string][] = [
    ["tools", { tools: [{ type: "function", function: { name: "f", parameters: {} } }] }, "tools"],
    ["tool_choice", { tool_choice: "required" }, "tool_choice"],
    ["response_format json_object", { response_format: { type: "json_object" } }, "response_format"],
    ["response_format json_schema", { response_format: { type: "json_schema", json_schema: { name: "x", schema: {} } } }, "response_format"],
    ["logprobs", { logprobs: true }, "logprobs"],
    ["top_logprobs", { logprobs: false, top_logprobs: 3 }, "top_logprobs"],
    ["presence_penalty", { presence_penalty: 0.5 }, "presence_penalty"],
    ["frequency_penalty", { frequency_penalty: -1 }, "frequency_penalty"],
    ["logit_bias", { logit_bias: { "42": 5 } }, "logit_bias"],
    ["n = 2", { n: 2 }, "n"],
  ];
  for (const [what, extra, param] of cases) {
    it(what, async () => {
      const r = await post("/v1/chat/completions", { ...chat, ...extra });
      expect(r.status).toBe(400);
      expect(r.body.error.param).toBe(param);
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
    for (const [extra, param] of [[{ echo: true }, "echo"], [{ best_of: 3 }, "best_of"], [{ logprobs: 2 }, "logprobs"], [{ suffix: "end" }, "suffix"]] as const) {
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
