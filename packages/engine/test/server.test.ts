import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, validateRequest, type CompletionBackend, type CompletionJob, type RunningServer } from "../src/server.js";

/** A scripted backend: emits the words of a fixed reply, one per tick, honouring the signal. */
class ScriptedBackend implements CompletionBackend {
  readonly modelId = "tiny-test";
  readonly contextLength = 1024;
  jobs: CompletionJob[] = [];
  delayMs = 5;
  async complete(job: CompletionJob, onText: (t: string) => void, signal: AbortSignal) {
    this.jobs.push(job);
    const words = ["Hello", " wor", "ld", "!"].slice(0, job.maxTokens);
    for (const w of words) {
      if (signal.aborted) throw new Error("aborted");
      await new Promise((r) => setTimeout(r, this.delayMs));
      onText(w);
    }
    return { finishReason: words.length < 4 ? ("length" as const) : ("stop" as const), promptTokens: 3, completionTokens: words.length };
  }
}

let srv: RunningServer;
const backend = new ScriptedBackend();
beforeAll(async () => {
  srv = await startServer(backend, { port: 0, maxQueue: 1 });
});
afterAll(async () => srv.close());

async function post(path: string, body: unknown, raw = false) {
  const res = await fetch(srv.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: raw ? (body as string) : JSON.stringify(body) });
  return { status: res.status, body: (res.headers.get("content-type")?.includes("json") ? await res.json() : await res.text()) as any };
}

describe("server", () => {
  it("listens on loopback and lists the model", async () => {
    expect(srv.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const res = await fetch(srv.url + "/v1/models");
    const body: any = await res.json();
    expect(body.data[0].id).toBe("tiny-test");
  });

  it("answers a chat completion", async () => {
    const r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 10, temperature: 0 });
    expect(r.status).toBe(200);
    expect(r.body.choices[0].message).toEqual({ role: "assistant", content: "Hello world!" });
    expect(r.body.choices[0].finish_reason).toBe("stop");
    expect(r.body.usage).toEqual({ prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
    expect(backend.jobs.at(-1)!.temperature).toBe(0);
  });

  it("streams a text completion as SSE", async () => {
    const r = await post("/v1/completions", { prompt: "x", max_tokens: 2, stream: true });
    expect(r.status).toBe(200);
    const events = (r.body as string).split("\n\n").filter(Boolean).map((e) => e.replace(/^data: /, ""));
    expect(events.at(-1)).toBe("[DONE]");
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(parsed.map((p) => p.choices[0].text).join("")).toBe("Hello wor");
    expect(parsed.at(-1).choices[0].finish_reason).toBe("length");
  });

  it("gives clean 4xx errors naming the problem", async () => {
    let r = await post("/v1/chat/completions", "{not json", true);
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(/not valid JSON/);
    r = await post("/v1/chat/completions", { messages: [{ role: "robot", content: "x" }] });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toMatch(/messages\[0\]\.role = "robot"/);
    r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], max_tokens: 0 });
    expect(r.body.error.param).toBe("max_tokens");
    r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], model: "gpt-9" });
    expect(r.status).toBe(404);
    r = await post("/v1/chat/completions", { messages: [{ role: "user", content: "x" }], reasoning_effort: "medium" });
    expect(r.body.error.message).toMatch(/medium/);
    r = await post("/v1/nope", {});
    expect(r.status).toBe(404);
    const big = await post("/v1/completions", { prompt: "x".repeat(2 << 20) });
    expect(big.status).toBe(413);
  });

  it("returns 429 when the queue is full and stays responsive", async () => {
    // Responsive means /health answers while both generations are still running: checked by
    // order of completion, not by a wall-clock bound (timings do not belong in tests).
    backend.delayMs = 300;
    const body = { prompt: "x", max_tokens: 4 };
    let settled = 0;
    const running = [post("/v1/completions", body), post("/v1/completions", body)].map((p) => p.finally(() => settled++));
    await new Promise((r) => setTimeout(r, 20));
    const health = await fetch(srv.url + "/health");
    expect(health.status).toBe(200);
    const third = await post("/v1/completions", body);
    expect(third.status).toBe(429);
    expect(settled).toBe(0);
    const done = await Promise.all(running);
    expect(done.map((d) => d.status)).toEqual([200, 200]);
    backend.delayMs = 5;
  });

  it("validates requests without a server", () => {
    expect(() => validateRequest({ prompt: 3 }, "text", "m")).toThrow(/prompt: expected a string/);
    expect(() => validateRequest({ prompt: "a", stop: ["a", "b", "c", "d", "e"] }, "text", "m")).toThrow(/stop/);
    expect(validateRequest({ messages: [{ role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }] }, "chat", "m").messages![0].content).toBe("ab");
  });
});

describe("server with the model in a worker thread", () => {
  it("streams a chat completion from the tiny model and answers /health while generating", async () => {
    const { WorkerBackend } = await import("../src/backend.js");
    const { TINY_K3 } = await import("./helpers.js");
    const backend = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop" } }, new URL("../src/worker.ts", import.meta.url));
    const s = await startServer(backend, { port: 0 });
    try {
      expect(backend.modelId).toBe("tiny-k3");
      const req = fetch(s.url + "/v1/chat/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "Write a function that adds two numbers." }], max_tokens: 200, temperature: 0, stream: true }),
      });
      // While the worker generates, the event loop must stay free: /health answers before the
      // stream ends (an order, not a wall-clock bound).
      let streamDone = false;
      const streamed = req.then((r) => r.text()).finally(() => (streamDone = true));
      await new Promise((r) => setTimeout(r, 50));
      const health = await fetch(s.url + "/health");
      expect(health.status).toBe(200);
      expect(streamDone).toBe(false);
      const text = await streamed;
      const events = text.split("\n\n").filter(Boolean).map((e) => e.replace(/^data: /, ""));
      expect(events.at(-1)).toBe("[DONE]");
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
      expect(chunks[0].choices[0].delta.role).toBe("assistant");
      const last = chunks.at(-1);
      expect(["stop", "length"]).toContain(last.choices[0].finish_reason);
      expect(last.usage.completion_tokens).toBeGreaterThan(0);
      // K3 with thinking on: the think channel streams as reasoning_content.
      expect(chunks.some((c) => typeof c.choices[0].delta.reasoning_content === "string" && c.choices[0].delta.reasoning_content.length > 0)).toBe(true);
      const plain = await fetch(s.url + "/v1/chat/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "Hi" }], max_tokens: 8, temperature: 0 }),
      });
      const body: any = await plain.json();
      expect(typeof body.choices[0].message.reasoning_content).toBe("string");
      expect(typeof body.choices[0].message.content).toBe("string");

      // A client that goes away cancels its generation: the next request is not stuck behind it.
      // Greedy (temperature 0) keeps this stream open well past its first chunk (the stream must
      // still be open at the abort, or the second read below resolves instead of rejecting).
      const ac = new AbortController();
      const long = await fetch(s.url + "/v1/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ prompt: "x", max_tokens: 4000, temperature: 0, stream: true }),
        signal: ac.signal,
      });
      const reader = long.body!.getReader();
      expect((await reader.read()).done).toBe(false);
      ac.abort();
      expect(await reader.read().then(() => "more data", () => "aborted")).toBe("aborted");
      const t1 = performance.now();
      const next = await fetch(s.url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "x", max_tokens: 2 }) });
      expect(next.status).toBe(200);
      expect(performance.now() - t1).toBeLessThan(10_000);
    } finally {
      await s.close();
      await backend.close();
    }
  });
});

describe("the chat page", () => {
  it("is served at / with a strict CSP, talks to the streaming endpoint, and its script parses; --no-web-ui turns it off", async () => {
    const res = await fetch(srv.url + "/");
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(res.headers.get("content-security-policy")).toMatch(/default-src 'none'.*connect-src 'self'/);
    const html = await res.text();
    expect(html).toMatch(/<title>k3 chat<\/title>/);
    expect(html).toContain('fetch("/v1/chat/completions"');
    expect(html).not.toMatch(/https?:\/\//); // no external resources: works offline
    expect(html).not.toMatch(/innerHTML/); // model text only through textContent
    const script = html.slice(html.indexOf("<script>") + 8, html.indexOf("</script>"));
    expect(() => new Function(script)).not.toThrow();
    const off = await startServer(backend, { port: 0, webUi: false });
    try {
      expect((await fetch(off.url + "/")).status).toBe(404);
    } finally {
      await off.close();
    }
  });
});
