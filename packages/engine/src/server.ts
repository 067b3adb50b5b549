/**
 * OpenAI-compatible HTTP server: /v1/chat/completions and /v1/completions (JSON or SSE
 * streaming), /v1/models and /health. Loopback by default; one generation runs at a time behind a
 * bounded queue (429 when full); every bad request gets a 4xx JSON error naming the field. The
 * model runs in a worker thread (see backend.ts), so this event loop stays responsive.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { randomUUID } from "node:crypto";
import { CHAT_PAGE, CHAT_PAGE_CSP } from "./web-ui.js";
import { HttpGuard } from "./http-guard.js";

export type ChatRole = "system" | "user" | "assistant";
export interface ChatMessage {
  role: ChatRole;
  content: string;
}

/** A validated request, ready for the backend. */
export interface CompletionJob {
  kind: "chat" | "text";
  messages?: ChatMessage[];
  prompt?: string;
  maxTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  seed: number;
  stop: string[];
  thinking?: boolean;
  effort?: "low" | "high" | "max";
}

export interface CompletionResult {
  finishReason: "stop" | "length";
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens restored from the prompt cache (usage.prompt_tokens_details.cached_tokens). */
  cachedTokens?: number;
  /**
   * Routed experts left out because their bytes could not be had (the reply is not the model's):
   * reported as `x_k3.expert_drops` next to `usage` when non-zero.
   */
  expertDrops?: number;
}

/** Which part of a K3 chat reply a piece of text belongs to (the think channel is `reasoning`). */
export type TextChannel = "content" | "reasoning";

/** What the server needs from a model: streaming completion with cancellation. */
export interface CompletionBackend {
  readonly modelId: string;
  readonly contextLength: number;
  complete(job: CompletionJob, onText: (text: string, channel?: TextChannel) => void, signal: AbortSignal): Promise<CompletionResult>;
}

export interface ServeOptions {
  host?: string;
  port?: number;
  /** Requests allowed to wait while one runs (default 8); more get 429. */
  maxQueue?: number;
  /** Largest accepted body in bytes (default 1 MiB). */
  maxBodyBytes?: number;
  /** Largest max_tokens accepted (default 4096). */
  maxTokensLimit?: number;
  /** Serve the chat page (web-ui.ts) at / (default true). */
  webUi?: boolean;
  /** Extra Host names the server answers to (NAME or NAME:PORT), beside loopback and the bound address. */
  allowHosts?: string[];
  /** Origins allowed to call the server cross-origin ("*" = any); preflights are answered for them. */
  corsOrigins?: string[];
  log?: (line: string) => void;
}

/** A request error: status + OpenAI-style error body. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly type = status === 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error",
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown, close = false): void {
  const text = JSON.stringify(body);
  const headers: Record<string, string | number> = { "content-type": "application/json", "content-length": Buffer.byteLength(text) };
  // An unread request body would poison a kept-alive socket: close it instead.
  if (close) headers.connection = "close";
  res.writeHead(status, headers);
  res.end(text);
}

function sendError(res: ServerResponse, err: HttpError): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  // 403/413/415 are sent before the body is read (see sendJson on an unread body).
  const unread = err.status === 413 || err.status === 403 || err.status === 415;
  sendJson(res, err.status, { error: { message: err.message, type: err.type, param: err.param, code: err.code } }, unread);
}

async function readBody(req: IncomingMessage, limit: number): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) throw new HttpError(413, `request body exceeds ${limit} bytes`);
    chunks.push(chunk as Buffer);
  }
  const buf = Buffer.concat(chunks);
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(buf);
  } catch {
    throw new HttpError(400, "request body is not valid UTF-8");
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, `request body is not valid JSON: ${(err as Error).message}`);
  }
}

function num(body: Record<string, unknown>, key: string, def: number, ok: (x: number) => boolean, what: string): number {
  const v = body[key];
  if (v === undefined || v === null) return def;
  if (typeof v !== "number" || !ok(v)) throw new HttpError(400, `${key} = ${JSON.stringify(v)}: expected ${what}`, key);
  return v;
}

function messageText(content: unknown, where: string): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part, i) => {
        if (!part || typeof part !== "object" || (part as { type?: unknown }).type !== "text" || typeof (part as { text?: unknown }).text !== "string") {
          throw new HttpError(400, `${where}[${i}]: only {"type":"text","text":...} parts are supported`, where);
        }
        return (part as { text: string }).text;
      })
      .join("");
  }
  throw new HttpError(400, `${where}: expected a string or a list of text parts`, where);
}

/** Validates a /v1/chat/completions or /v1/completions body. */
export function validateRequest(body: unknown, kind: "chat" | "text", modelId: string, maxTokensLimit = 4096): CompletionJob & { stream: boolean } {
  if (!body || typeof body !== "object" || Array.isArray(body)) throw new HttpError(400, "request body must be a JSON object");
  const b = body as Record<string, unknown>;
  if (b.model !== undefined && b.model !== modelId && b.model !== "k3") {
    throw new HttpError(404, `model ${JSON.stringify(b.model)} is not served here (this server has ${JSON.stringify(modelId)})`, "model", "invalid_request_error", "model_not_found");
  }
  if (b.n !== undefined && b.n !== 1) throw new HttpError(400, "n: only n = 1 is supported", "n");
  const job: CompletionJob & { stream: boolean } = {
    kind,
    maxTokens: num(b, b.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens", 256, (x) => Number.isInteger(x) && x >= 1 && x <= maxTokensLimit, `an integer in 1..${maxTokensLimit}`),
    temperature: num(b, "temperature", 1, (x) => Number.isFinite(x) && x >= 0 && x <= 2, "a number in [0, 2]"),
    topP: num(b, "top_p", 1, (x) => Number.isFinite(x) && x > 0 && x <= 1, "a number in (0, 1]"),
    topK: num(b, "top_k", 0, (x) => Number.isInteger(x) && x >= 0, "an integer >= 0"),
    seed: num(b, "seed", 0, (x) => Number.isSafeInteger(x) && x >= 0, "a non-negative integer"),
    stop: [],
    stream: false,
  };
  if (b.stream !== undefined) {
    if (typeof b.stream !== "boolean") throw new HttpError(400, "stream: expected true or false", "stream");
    job.stream = b.stream;
  }
  if (b.stop !== undefined && b.stop !== null) {
    const stop = typeof b.stop === "string" ? [b.stop] : b.stop;
    if (!Array.isArray(stop) || stop.length > 4 || !stop.every((s) => typeof s === "string" && s.length > 0)) {
      throw new HttpError(400, "stop: expected a non-empty string or a list of at most 4 of them", "stop");
    }
    job.stop = stop as string[];
  }
  if (kind === "chat") {
    if (!Array.isArray(b.messages) || b.messages.length === 0) throw new HttpError(400, "messages: expected a non-empty list", "messages");
    job.messages = b.messages.map((m, i) => {
      if (!m || typeof m !== "object") throw new HttpError(400, `messages[${i}]: expected an object`, "messages");
      const role = (m as { role?: unknown }).role;
      if (role !== "system" && role !== "user" && role !== "assistant") {
        throw new HttpError(400, `messages[${i}].role = ${JSON.stringify(role)}: expected "system", "user" or "assistant"`, "messages");
      }
      return { role, content: messageText((m as { content?: unknown }).content, `messages[${i}].content`) };
    });
    if (b.reasoning_effort !== undefined) {
      if (b.reasoning_effort !== "low" && b.reasoning_effort !== "high" && b.reasoning_effort !== "max") {
        throw new HttpError(400, `reasoning_effort = ${JSON.stringify(b.reasoning_effort)}: expected "low", "high" or "max" ("medium" does not exist for K3)`, "reasoning_effort");
      }
      job.effort = b.reasoning_effort;
    }
    if (b.thinking !== undefined) {
      if (typeof b.thinking !== "boolean") throw new HttpError(400, "thinking: expected true or false", "thinking");
      job.thinking = b.thinking;
    }
  } else {
    if (typeof b.prompt !== "string") throw new HttpError(400, "prompt: expected a string", "prompt");
    job.prompt = b.prompt;
  }
  return job;
}

/** Runs one job at a time; at most `maxQueue` wait. */
class JobQueue {
  private running = false;
  private readonly waiting: (() => void)[] = [];
  constructor(private readonly maxQueue: number) {}

  get depth(): number {
    return this.waiting.length + (this.running ? 1 : 0);
  }

  async run<T>(fn: () => Promise<T>, signal: AbortSignal): Promise<T> {
    if (this.running) {
      if (this.waiting.length >= this.maxQueue) throw new HttpError(429, `server busy: ${this.waiting.length} request(s) already waiting`);
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal.removeEventListener("abort", onAbort);
          resolve();
        };
        const onAbort = () => {
          const i = this.waiting.indexOf(go);
          if (i >= 0) this.waiting.splice(i, 1);
          reject(new HttpError(499, "client closed the request"));
        };
        signal.addEventListener("abort", onAbort, { once: true });
        this.waiting.push(go);
      });
    }
    this.running = true;
    try {
      return await fn();
    } finally {
      this.running = false;
      this.waiting.shift()?.();
    }
  }
}

export interface RunningServer {
  server: Server;
  url: string;
  close(): Promise<void>;
}

/** Starts the server; resolves once it listens. */
export async function startServer(backend: CompletionBackend, options: ServeOptions = {}): Promise<RunningServer> {
  const host = options.host ?? "127.0.0.1";
  const queue = new JobQueue(options.maxQueue ?? 8);
  const limit = options.maxBodyBytes ?? 1 << 20;
  const maxTokensLimit = options.maxTokensLimit ?? 4096;
  const log = options.log ?? (() => {});
  const created = Math.floor(Date.now() / 1000);
  // Set once the port is known (port 0 picks one); no request arrives before that.
  let guard: HttpGuard | null = null;

  const server = createServer((req, res) => {
    handle(req, res).catch((err) => {
      const e = err instanceof HttpError ? err : new HttpError(500, `internal error: ${(err as Error).message ?? String(err)}`);
      if (e.status >= 500) log(`error: ${e.message}`);
      sendError(res, e);
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    const refused = guard!.check({ host: req.headers.host, origin: req.headers.origin });
    if (refused) throw new HttpError(refused.status, refused.message, refused.param);
    const origin = req.headers.origin;
    if (origin !== undefined && guard!.corsAllowed(origin)) {
      res.setHeader("access-control-allow-origin", origin);
      res.setHeader("vary", "Origin");
      if (req.method === "OPTIONS") {
        res.writeHead(204, { "access-control-allow-methods": "GET, POST, OPTIONS", "access-control-allow-headers": "content-type, authorization", "access-control-max-age": "600", "content-length": 0 });
        res.end();
        return;
      }
    }
    if (req.method === "GET" && (path === "/" || path === "/index.html") && options.webUi !== false) {
      res.writeHead(200, { "content-type": "text/html; charset=utf-8", "content-length": Buffer.byteLength(CHAT_PAGE), "content-security-policy": CHAT_PAGE_CSP, "x-content-type-options": "nosniff", "referrer-policy": "no-referrer" });
      res.end(CHAT_PAGE);
      return;
    }
    if (req.method === "GET" && path === "/health") {
      sendJson(res, 200, { status: "ok", queue: queue.depth });
      return;
    }
    if (req.method === "GET" && path === "/v1/models") {
      sendJson(res, 200, { object: "list", data: [{ id: backend.modelId, object: "model", created, owned_by: "k3", context_length: backend.contextLength }] });
      return;
    }
    const kind = path === "/v1/chat/completions" ? "chat" : path === "/v1/completions" ? "text" : null;
    if (!kind) throw new HttpError(404, `no route ${req.method} ${path}`);
    if (req.method !== "POST") throw new HttpError(405, `${path} takes POST`);
    const badType = guard!.checkContentType(req.headers["content-type"]);
    if (badType) throw new HttpError(badType.status, badType.message, badType.param);
    const body = await readBody(req, limit);
    const job = validateRequest(body, kind, backend.modelId, maxTokensLimit);
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    const id = `${kind === "chat" ? "chatcmpl" : "cmpl"}-${randomUUID()}`;
    const stamp = Math.floor(Date.now() / 1000);
    const object = kind === "chat" ? "chat.completion" : "text_completion";
    await queue.run(async () => {
      if (job.stream) {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
        const event = (payload: unknown) => res.write(`data: ${JSON.stringify(payload)}\n\n`);
        const chunk = (text: string | null, finish: string | null, first = false, channel: TextChannel = "content") =>
          kind === "chat"
            ? {
                id,
                object: "chat.completion.chunk",
                created: stamp,
                model: backend.modelId,
                choices: [{ index: 0, delta: text === null ? {} : first ? { role: "assistant", content: text } : channel === "reasoning" ? { reasoning_content: text } : { content: text }, finish_reason: finish }],
              }
            : { id, object: "text_completion", created: stamp, model: backend.modelId, choices: [{ index: 0, text: text ?? "", finish_reason: finish }] };
        if (kind === "chat") event(chunk("", null, true));
        try {
          const result = await backend.complete(job, (text, channel) => event(chunk(text, null, false, channel)), abort.signal);
          event({ ...chunk(null, result.finishReason), usage: usage(result), ...extras(result) });
          res.write("data: [DONE]\n\n");
        } catch (err) {
          if (!abort.signal.aborted) event({ error: { message: (err as Error).message, type: "server_error" } });
        }
        res.end();
        return;
      }
      let text = "";
      let reasoning: string | null = null;
      const result = await backend.complete(job, (t, channel) => (channel === "reasoning" ? (reasoning = (reasoning ?? "") + t) : (text += t)), abort.signal);
      const choice =
        kind === "chat"
          ? { index: 0, message: { role: "assistant", content: text, ...(reasoning !== null ? { reasoning_content: reasoning } : {}) }, finish_reason: result.finishReason }
          : { index: 0, text, finish_reason: result.finishReason };
      sendJson(res, 200, { id, object, created: stamp, model: backend.modelId, choices: [choice], usage: usage(result), ...extras(result) });
    }, abort.signal);
  }

  /** Non-standard fields a client should see (OpenAI clients ignore unknown keys). */
  function extras(r: CompletionResult) {
    return r.expertDrops ? { x_k3: { expert_drops: r.expertDrops } } : {};
  }

  function usage(r: CompletionResult) {
    const u = { prompt_tokens: r.promptTokens, completion_tokens: r.completionTokens, total_tokens: r.promptTokens + r.completionTokens };
    return r.cachedTokens === undefined ? u : { ...u, prompt_tokens_details: { cached_tokens: r.cachedTokens } };
  }

  // A bad --allow-host is refused before the port is taken.
  new HttpGuard({ boundHosts: [host], boundPort: 0, allowHosts: options.allowHosts });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 8080, host, () => resolve());
  });
  const addr = server.address() as AddressInfo;
  guard = new HttpGuard({ boundHosts: [addr.address, host], boundPort: addr.port, allowHosts: options.allowHosts, corsOrigins: options.corsOrigins });
  const url = `http://${addr.family === "IPv6" ? `[${addr.address}]` : addr.address}:${addr.port}`;
  return {
    server,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
