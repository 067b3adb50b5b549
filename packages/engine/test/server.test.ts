import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, validateRequest, type CompletionBackend, type CompletionJob, type RunningServer } from "../src/server.js";
import { request as httpRequest } from "node:http";
import { connect as netConnect } from "node:net";

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

describe("cancel during a long prefill and the prompt limit (issue #15)", () => {
  it("a client that disconnects during a long prefill frees the worker: the prefill stops, the next request is answered", async () => {
    const { WorkerBackend } = await import("../src/backend.js");
    const { TINY_K3 } = await import("./helpers.js");
    // No prompt cache: the second run of the prompt prefills all of it again.
    const backend = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop", promptCache: { slots: 0 } } }, new URL("../src/worker.ts", import.meta.url));
    const logs: string[] = [];
    backend.onLog = (l) => logs.push(l);
    const s = await startServer(backend, { port: 0 });
    const post = (body: unknown, signal?: AbortSignal) => fetch(s.url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal });
    const expertRequests = async () => Number(/^k3_expert_requests_total (\d+)$/m.exec(await (await fetch(s.url + "/metrics")).text())![1]);
    try {
      // ~6k tokens: seconds of single-threaded prefill on the tiny model.
      const messages = [{ role: "user", content: "The quick brown fox jumps over the lazy dog. ".repeat(550) }];
      // A first, complete run brings every expert this prompt routes to into memory: the second run
      // then never waits for a read, so nothing but the prefill itself can give the thread back (the
      // old worker's 20 ms cancel timer could only fire at such a wait).
      const first = await post({ messages, max_tokens: 1, temperature: 0 });
      expect(first.status).toBe(200);
      const full = await expertRequests();
      expect(full).toBeGreaterThan(5000);
      const ac = new AbortController();
      const long = await post({ messages, max_tokens: 4, temperature: 0, stream: true }, ac.signal);
      const reader = long.body!.getReader();
      // The role chunk is written just before the job goes to the worker: the prefill is starting.
      expect((await reader.read()).done).toBe(false);
      ac.abort();
      const next = await post({ messages: [{ role: "user", content: "Hi" }], max_tokens: 2, temperature: 0 });
      expect(next.status).toBe(200);
      // The cancelled run (and the short one) did a small part of a full prefill's expert requests.
      expect((await expertRequests()) - full).toBeLessThan(full / 4);
      expect(logs.filter((l) => /^request 2: cancelled by its client/.test(l))).toEqual([expect.stringMatching(/during the prefill \(\d{4} prompt tokens, stopped \d+\.\d\d s after it left\)$/)]);
    } finally {
      await s.close();
      await backend.close();
    }
  });

  it("one prompt limit for k3 run and the server: 32,769 tokens are refused before any prefill (a 400 naming the prompt)", async () => {
    const { WorkerBackend } = await import("../src/backend.js");
    const { TINY_K3 } = await import("./helpers.js");
    const backend = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop" } }, new URL("../src/worker.ts", import.meta.url));
    const logs: string[] = [];
    backend.onLog = (l) => logs.push(l);
    const s = await startServer(backend, { port: 0 });
    try {
      // Over 32,768 tokens (counted with the same tokenizer), well inside the KV plan and the body limit.
      const { Engine } = await import("../src/engine.js");
      const e = await Engine.load(TINY_K3, { threads: 1, preset: "laptop" });
      const prompt = "The quick brown fox jumps over the lazy dog. ".repeat(3300);
      const n = e.encodeText(prompt).length;
      e.close();
      expect(n).toBeGreaterThan(32768);
      expect(n).toBeLessThanOrEqual(backend.contextLength);
      const res = await fetch(s.url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt, max_tokens: 1 }) });
      const body: any = await res.json();
      expect(res.status).toBe(400);
      expect(body.error).toMatchObject({ type: "invalid_request_error", param: "prompt", code: "context_length_exceeded" });
      expect(body.error.message).toBe(`the prompt has ${n} tokens; at most 32768`);
      expect(logs.filter((l) => /^prompt cache: /.test(l))).toEqual([]);
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
    expect(html).toMatch(/(fetch|api)\("\/v1\/chat\/completions"/);
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

describe("server against bytes that are not a request (pnpm fuzz http)", () => {
  /** Writes `bytes` on a fresh connection and returns everything the server sends until it closes. */
  function rawBytes(bytes: string): Promise<string> {
    const u = new URL(srv.url);
    return new Promise((resolve, reject) => {
      const s = netConnect({ host: u.hostname, port: Number(u.port) }, () => s.write(bytes));
      let got = "";
      s.setEncoding("latin1");
      s.on("data", (d) => (got += d));
      s.on("error", reject);
      s.on("close", () => resolve(got));
      setTimeout(() => s.destroy(new Error(`no close in 10 s: ${JSON.stringify(got)}`)), 10_000).unref();
    });
  }
  function openAiError(reply: string, status: number) {
    const [head, body] = reply.split("\r\n\r\n");
    expect(head.split("\r\n")[0]).toBe(`HTTP/1.1 ${status} ${head.split("\r\n")[0].slice(13)}`);
    expect(head).toMatch(/content-type: application\/json/i);
    expect(Number(/content-length: (\d+)/i.exec(head)?.[1])).toBe(Buffer.byteLength(body));
    const e = JSON.parse(body).error;
    expect(typeof e.message).toBe("string");
    expect(e).toMatchObject({ type: "invalid_request_error" });
    expect(e).toHaveProperty("param");
    expect(e).toHaveProperty("code");
    return e;
  }
  const host = () => new URL(srv.url).host;

  it("a request line Node's parser refuses gets a 400 with an OpenAI-shaped error (it was a bare 400 with no body)", async () => {
    for (const line of ["G\u0000T /health HTTP/1.1", "GET /health HTTP/1.1x", "GET /he alth HTTP/1.1", "GET  HTTP/1.1"]) {
      const reply = await rawBytes(`${line}\r\nhost: ${host()}\r\nconnection: close\r\n\r\n`);
      expect(openAiError(reply, 400).message).toMatch(/malformed HTTP request/);
    }
    const badLength = await rawBytes(`POST /v1/completions HTTP/1.1\r\nhost: ${host()}\r\ncontent-type: application/json\r\ncontent-length: abc\r\n\r\n{}`);
    openAiError(badLength, 400);
  });

  it("found by the 10-minute run: a bad percent-encoding in /v1/models/ID is a 404 (was a 500), a declared body past the limit a 413 at once (was a wait for bytes that never come), a malformed HEAD gets no body", async () => {
    const bad = await rawBytes(`GET /v1/models/k3%ff%fe HTTP/1.1\r\nhost: ${host()}\r\nconnection: close\r\n\r\n`);
    expect(openAiError(bad, 404).param).toBe("model");
    const t0 = Date.now();
    const big = await rawBytes(`POST /v1/completions HTTP/1.1\r\nhost: ${host()}\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ${(1 << 20) + 1}\r\n\r\n{"prompt":"hi"}`);
    expect(openAiError(big, 413).message).toMatch(/exceeds 1048576 bytes/);
    expect(Date.now() - t0).toBeLessThan(5000);
    const chunked = await rawBytes(`POST /v1/completions HTTP/1.1\r\nhost: ${host()}\r\nconnection: close\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{"a":\r\nzz\r\n`);
    expect(openAiError(chunked, 400).message).toMatch(/malformed HTTP request/);
    const head = await rawBytes(`HEAD /health HTTP/1.1\r\nhost: ${host()}\r\ncontent-length: abc\r\n\r\n`);
    expect(head).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(head.endsWith("\r\n\r\n")).toBe(true); // headers only
  });

  it("headers past Node's limit get a 431 with an OpenAI-shaped error", async () => {
    const reply = await rawBytes(`GET /health HTTP/1.1\r\nhost: ${host()}\r\nx-long: ${"v".repeat(20_000)}\r\n\r\n`);
    expect(openAiError(reply, 431).message).toMatch(/headers/);
  });

  it("CONNECT gets a 405 and an Upgrade request a 400 (Node closed both connections without a reply)", async () => {
    const connect = await rawBytes(`CONNECT /v1/models HTTP/1.1\r\nhost: ${host()}\r\nconnection: close\r\n\r\n`);
    expect(openAiError(connect, 405).param).toBe("method");
    const upgrade = await rawBytes(`GET /v1/models HTTP/1.1\r\nhost: ${host()}\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n`);
    expect(openAiError(upgrade, 400).param).toBe("upgrade");
    // The server still answers.
    expect((await fetch(srv.url + "/health")).status).toBe(200);
  });
});

/** A raw HTTP request with exactly the headers given (Host included: fetch would set its own). */
function raw(url: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; headers: Record<string, unknown>; body: any }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, method, path, headers: body === undefined ? headers : { ...headers, "content-length": String(Buffer.byteLength(body)) }, setHost: false }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => {
        let parsed: any = text;
        try {
          parsed = JSON.parse(text);
        } catch {}
        resolve({ status: res.statusCode!, headers: res.headers, body: parsed });
      });
    });
    req.on("error", reject);
    req.end(body);
  });
}

describe("server against a hostile web page", () => {
  const chatBody = JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 4 });
  const host = () => new URL(srv.url).host;

  it("refuses a cross-origin text/plain POST (a 'simple' request) before the model runs", async () => {
    const before = backend.jobs.length;
    const r = await raw(srv.url, "POST", "/v1/chat/completions", { host: host(), origin: "http://evil.example", "content-type": "text/plain" }, chatBody);
    expect(r.status).toBe(403);
    expect(r.body.error).toMatchObject({ type: "invalid_request_error", param: "origin" });
    expect(r.body.error.message).toMatch(/evil\.example/);
    // Same-origin text/plain: refused on the Content-Type alone.
    const t = await raw(srv.url, "POST", "/v1/chat/completions", { host: host(), origin: srv.url, "content-type": "text/plain" }, chatBody);
    expect(t.status).toBe(415);
    expect(t.body.error).toMatchObject({ type: "invalid_request_error", param: "content-type" });
    expect(backend.jobs.length).toBe(before);
  });

  it("refuses a form-encoded body with Origin: null, and a form body without Origin", async () => {
    const before = backend.jobs.length;
    const form = `messages=${encodeURIComponent('[{"role":"user","content":"hi"}]')}`;
    const r = await raw(srv.url, "POST", "/v1/completions", { host: host(), origin: "null", "content-type": "application/x-www-form-urlencoded" }, form);
    expect(r.status).toBe(403);
    expect(r.body.error.param).toBe("origin");
    const noOrigin = await raw(srv.url, "POST", "/v1/completions", { host: host(), "content-type": "application/x-www-form-urlencoded" }, JSON.stringify({ prompt: "x" }));
    expect(noOrigin.status).toBe(415);
    expect(noOrigin.body.error.message).toMatch(/application\/json/);
    expect(backend.jobs.length).toBe(before);
  });

  it("refuses a foreign Host (DNS rebinding) on every route, and accepts the loopback names at the bound port", async () => {
    const before = backend.jobs.length;
    const port = new URL(srv.url).port;
    for (const [method, path, body] of [["POST", "/v1/chat/completions", chatBody], ["GET", "/v1/models", undefined], ["GET", "/", undefined]] as const) {
      const r = await raw(srv.url, method, path, { host: "evil.example", "content-type": "application/json" }, body);
      expect(r.status).toBe(403);
      expect(r.body.error).toMatchObject({ type: "invalid_request_error", param: "host" });
    }
    expect((await raw(srv.url, "GET", "/v1/models", { host: `evil.example:${port}` })).status).toBe(403);
    // The right name at another port is another origin.
    expect((await raw(srv.url, "GET", "/v1/models", { host: "127.0.0.1:1" })).status).toBe(403);
    const noHost = await raw(srv.url, "GET", "/v1/models", {});
    expect(noHost.status).toBe(400); // Node's own refusal had no body (pnpm fuzz http): now the JSON error
    expect(noHost.body.error).toMatchObject({ type: "invalid_request_error", param: "host" });
    expect(backend.jobs.length).toBe(before);
    for (const h of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `LOCALHOST:${port}`]) {
      expect((await raw(srv.url, "GET", "/v1/models", { host: h })).status).toBe(200);
    }
  });

  it("the chat page's own requests (same-origin, application/json) still run", async () => {
    const r = await raw(srv.url, "POST", "/v1/chat/completions", { host: host(), origin: srv.url, "content-type": "application/json" }, chatBody);
    expect(r.status).toBe(200);
    expect(r.body.choices[0].message.content).toBe("Hello world!");
    expect(r.headers["access-control-allow-origin"]).toBeUndefined();
    const page = await raw(srv.url, "GET", "/", { host: host() });
    expect(page.status).toBe(200);
  });

  it("--allow-host adds a name; --cors lets one origin in and answers its preflight", async () => {
    const s = await startServer(backend, { port: 0, allowHosts: ["k3.lan", "proxy.lan:443"], corsOrigins: ["http://localhost:3000"] });
    try {
      const port = new URL(s.url).port;
      expect((await raw(s.url, "GET", "/v1/models", { host: "k3.lan" })).status).toBe(200);
      expect((await raw(s.url, "GET", "/v1/models", { host: `k3.lan:${port}` })).status).toBe(200);
      expect((await raw(s.url, "GET", "/v1/models", { host: "proxy.lan:443" })).status).toBe(200);
      expect((await raw(s.url, "GET", "/v1/models", { host: "proxy.lan:8443" })).status).toBe(403);
      const h = { host: new URL(s.url).host };
      const pre = await raw(s.url, "OPTIONS", "/v1/chat/completions", { ...h, origin: "http://localhost:3000", "access-control-request-method": "POST", "access-control-request-headers": "content-type" });
      expect(pre.status).toBe(204);
      expect(pre.headers["access-control-allow-origin"]).toBe("http://localhost:3000");
      expect(String(pre.headers["access-control-allow-headers"])).toMatch(/content-type/);
      expect(String(pre.headers["access-control-allow-methods"])).toMatch(/POST/);
      const ok = await raw(s.url, "POST", "/v1/chat/completions", { ...h, origin: "http://localhost:3000", "content-type": "application/json" }, chatBody);
      expect(ok.status).toBe(200);
      expect(ok.headers["access-control-allow-origin"]).toBe("http://localhost:3000");
      const evil = await raw(s.url, "OPTIONS", "/v1/chat/completions", { ...h, origin: "http://evil.example", "access-control-request-method": "POST" });
      expect(evil.status).toBe(403);
      expect(evil.headers["access-control-allow-origin"]).toBeUndefined();
      // Even an allowed origin cannot send a simple (non-JSON) POST.
      expect((await raw(s.url, "POST", "/v1/completions", { ...h, origin: "http://localhost:3000", "content-type": "text/plain" }, JSON.stringify({ prompt: "x" }))).status).toBe(415);
    } finally {
      await s.close();
    }
    await expect(startServer(backend, { port: 0, allowHosts: ["bad host/"] })).rejects.toThrow(/--allow-host/);
  });
});
