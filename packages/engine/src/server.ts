/**
 * OpenAI-compatible HTTP server: /v1/chat/completions and /v1/completions (JSON or SSE
 * streaming), /v1/models (and /v1/models/{id}), /health and /metrics (Prometheus text). Loopback by
 * default, optionally behind an API key (Bearer); one generation runs at a time behind a
 * bounded queue (429 when full); every bad request gets a 4xx JSON error naming the field. The
 * model runs in a worker thread (see backend.ts), so this event loop stays responsive.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { createHash, randomUUID, timingSafeEqual } from "node:crypto";
import type { PrefillProgress } from "./engine.js";
import { CHAT_PAGE, CHAT_PAGE_CSP } from "./web-ui.js";
import { HttpGuard } from "./http-guard.js";
import { METRICS_CONTENT_TYPE, ServerMetrics } from "./metrics.js";
import { schemaFor, type ResponseFormat } from "./json-mode.js";
import { validateSampling } from "./sampler.js";
import { UsageError } from "./errors.js";
import { PackageError } from "@k3/native";
import { DEFAULTS, MAX_NEW_TOKENS, SAMPLING_RULES, satisfies } from "./options.js";

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
  /** Choices to generate (default 1): choice i draws from random stream i of the seed. */
  n?: number;
  /** OpenAI's penalties in [-2, 2] (see SamplingOptions). */
  presencePenalty?: number;
  frequencyPenalty?: number;
  /** Log-probabilities of the content tokens with this many alternatives each; null/absent: none. */
  logprobs?: number | null;
  /** JSON mode (json-mode.ts); absent or text: free text. */
  responseFormat?: ResponseFormat;
  /** OpenAI's logit_bias (token id → [-100, 100]), checked by validateSampling. */
  logitBias?: Record<number, number>;
}

/** One generated content token's log-probability (OpenAI's shape is built from it). */
export interface LogprobEntry {
  /** The token's text, or `bytes:\\xNN...` when its bytes are not UTF-8 on their own. */
  token: string;
  bytes: number[];
  logprob: number;
  /** UTF-16 offset of the token's text in the choice's text (text completions' text_offset). */
  offset: number;
  top: { token: string; bytes: number[]; logprob: number }[];
}

/** How one of the n choices ended. */
export interface ChoiceResult {
  index: number;
  finishReason: "stop" | "length";
  completionTokens: number;
}

/** What comes with a piece of text besides its channel: the choice it belongs to, and its tokens' logprobs. */
export interface TextExtra {
  index?: number;
  logprobs?: LogprobEntry[];
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
  /** The run report's figures /metrics exports (absent from backends without a report). */
  stats?: CompletionStats;
  /** Each choice's end when n > 1 (finishReason and completionTokens above are choice 0's and the sum). */
  choices?: ChoiceResult[];
}

/** Per-generation figures from the engine's run report, for /metrics. */
export interface CompletionStats {
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  bytesRead: { trunk: number; experts: number; embedHead: number };
  expertRequests: number;
  expertResidentHits: number;
}

/** Which part of a K3 chat reply a piece of text belongs to (the think channel is `reasoning`). */
export type TextChannel = "content" | "reasoning";

/** What the server needs from a model: streaming completion with cancellation. */
export interface CompletionBackend {
  readonly modelId: string;
  readonly contextLength: number;
  /** `onPrefill`: the prefill's progress, as often as the backend reports it (a streamed reply writes it as SSE comments). */
  complete(
    job: CompletionJob,
    onText: (text: string, channel?: TextChannel, extra?: TextExtra) => void,
    signal: AbortSignal,
    onPrefill?: (p: PrefillProgress) => void,
  ): Promise<CompletionResult>;
}

/**
 * A streamed reply's prefill progress: an SSE comment line, which every SSE client skips (the
 * official openai client included), so a long prefill keeps the connection busy for proxies and
 * tells a client that reads comments (the chat page) how far it is.
 */
export function prefillComment(p: PrefillProgress): string {
  const eta = p.etaSeconds === null ? "--" : `${Math.round(p.etaSeconds)} s`;
  return `: prefill ${(p.fraction * 100).toFixed(1)}% ${p.tokensDone}/${p.tokens} tokens, ${p.seconds.toFixed(1)} s, ETA ${eta}\n\n`;
}

export interface ServeOptions {
  host?: string;
  port?: number;
  /** Requests allowed to wait while one runs (default 8); more get 429. */
  maxQueue?: number;
  /** Largest accepted body in bytes (default 1 MiB). */
  maxBodyBytes?: number;
  /** Largest max_tokens accepted (default and ceiling: options.ts MAX_NEW_TOKENS, 4096). */
  maxTokensLimit?: number;
  /** Serve the chat page (web-ui.ts) at / (default true). */
  webUi?: boolean;
  /** Extra Host names the server answers to (NAME or NAME:PORT), beside loopback and the bound address. */
  allowHosts?: string[];
  /** Origins allowed to call the server cross-origin ("*" = any); preflights are answered for them. */
  corsOrigins?: string[];
  /** When set, every /v1 route and /metrics need `Authorization: Bearer <apiKey>` (401 otherwise). */
  apiKey?: string;
  log?: (line: string) => void;
}

/**
 * A request error: status + OpenAI-style error body. A k3 error like the others (`package`
 * "@k3/engine", `code` "http"); the body's own `type` and `code` are OpenAI's wire fields, kept
 * apart as `type` and `wireCode` ("context_length_exceeded", "model_not_found" or null).
 */
export class HttpError extends PackageError {
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly type = status === 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error",
    readonly wireCode: string | null = null,
    /** Extra response headers (Retry-After on 429, WWW-Authenticate on 401). */
    readonly headers: Record<string, string> = {},
    options?: { cause?: unknown },
  ) {
    super("@k3/engine", "http", message, options);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown, close = false, extra: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  const headers: Record<string, string | number> = { ...extra, "content-type": "application/json", "content-length": Buffer.byteLength(text) };
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
  // 401/403/413/415 are sent before the body is read (see sendJson on an unread body).
  const unread = err.status === 413 || err.status === 403 || err.status === 415 || err.status === 401;
  sendJson(res, err.status, { error: { message: err.message, type: err.type, param: err.param, code: err.wireCode } }, unread, err.headers);
}

/**
 * A reply written straight to the socket, for what never reaches the request handler: bytes Node's
 * parser refuses (its own reply is a bare 400 with no body), CONNECT and Upgrade requests (Node
 * drops those connections unanswered when nobody listens). The same OpenAI-shaped error as every
 * other refusal, then the connection is closed.
 */
function refuseOnSocket(socket: Duplex, status: number, reason: string, message: string, param: string | null = null, head = false): void {
  if (!socket.writable || socket.destroyed) return;
  const text = JSON.stringify({ error: { message, type: "invalid_request_error", param, code: null } });
  socket.end(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${head ? "" : text}`);
}

/** The status Node's parser error maps to (llhttp codes: HPE_*), and its reason phrase. */
function parseErrorStatus(code: string | undefined): [number, string, string] {
  if (code === "HPE_HEADER_OVERFLOW") return [431, "Request Header Fields Too Large", "the request's headers exceed the server's limit"];
  if (code === "ERR_HTTP_REQUEST_TIMEOUT") return [408, "Request Timeout", "the request did not arrive in time"];
  return [400, "Bad Request", `malformed HTTP request (${code ?? "parse error"})`];
}

async function readBody(req: IncomingMessage, limit: number): Promise<unknown> {
  // A declared length past the limit is refused before any of it is read (waiting for 1 MiB that
  // never comes held the connection open until Node's request timeout).
  const declared = Number(req.headers["content-length"]);
  if (Number.isFinite(declared) && declared > limit) throw new HttpError(413, `request body of ${declared} bytes exceeds ${limit} bytes`);
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

/** A parameter that is absent or has a do-nothing value (null and [] count as absent, as in OpenAI's API). */
function unset(v: unknown, neutral: unknown[] = []): boolean {
  return v === undefined || v === null || (Array.isArray(v) ? v.length === 0 : neutral.includes(v));
}

/**
 * Parameters that would change what the client gets but are not implemented: refused by name
 * (400) rather than silently ignored. Their do-nothing values pass.
 */
function refuseUnsupported(b: Record<string, unknown>, kind: "chat" | "text"): void {
  const refuse = (param: string, why: string) => {
    throw new HttpError(400, `${param}: ${why}`, param);
  };
  for (const p of ["tools", "functions"]) if (!unset(b[p])) refuse(p, "tool calling is not supported (K3's tool-call template is not published)");
  for (const p of ["tool_choice", "function_call"]) if (!unset(b[p], ["none"])) refuse(p, "tool calling is not supported (K3's tool-call template is not published)");
  if (!unset(b.parallel_tool_calls, [false, true])) refuse("parallel_tool_calls", "expected true or false (tool calling is not supported)");
  if (kind === "text") {
    if (!unset(b.echo, [false])) refuse("echo", "echoing the prompt is not supported");
    if (!unset(b.best_of, [1])) refuse("best_of", "only best_of = 1 is supported");
    if (!unset(b.suffix, [""])) refuse("suffix", "insertion (suffix) is not supported");
  }
}

/** Most choices one request may ask for (each is a full generation, run one after another). */
export const MAX_CHOICES = 8;

/** `logprobs` / `top_logprobs` (chat: true + 0..20 alternatives; completions: 0..5 alternatives) as the job's count, null when off. */
function logprobsParam(b: Record<string, unknown>, kind: "chat" | "text"): number | null {
  if (kind === "text") {
    const v = num(b, "logprobs", -1, (x) => Number.isInteger(x) && x >= 0 && x <= 5, "an integer in 0..5");
    return v < 0 ? null : v;
  }
  if (b.logprobs !== undefined && b.logprobs !== null && typeof b.logprobs !== "boolean") throw new HttpError(400, "logprobs: expected true or false", "logprobs");
  const top = num(b, "top_logprobs", -1, (x) => Number.isInteger(x) && x >= 0 && x <= 20, "an integer in 0..20");
  if (top > 0 && b.logprobs !== true) throw new HttpError(400, "top_logprobs: needs logprobs: true", "top_logprobs");
  return b.logprobs === true ? Math.max(top, 0) : null;
}

/** `response_format`: text, json_object, or json_schema with a schema in the subset json-schema.ts enforces. */
function responseFormatParam(b: Record<string, unknown>): ResponseFormat | undefined {
  const rf = b.response_format;
  if (rf === undefined || rf === null) return undefined;
  const bad = (why: string, param = "response_format") => new HttpError(400, `${param}: ${why}`, param);
  if (typeof rf !== "object" || Array.isArray(rf)) throw bad('expected {"type": "text" | "json_object" | "json_schema", ...}');
  const r = rf as { type?: unknown; json_schema?: unknown };
  if (r.type === "text") return { type: "text" };
  if (r.type === "json_object") return { type: "json_object" };
  if (r.type !== "json_schema") throw bad(`type ${JSON.stringify(r.type)}: expected "text", "json_object" or "json_schema"`, "response_format.type");
  const js = r.json_schema as { name?: unknown; schema?: unknown; strict?: unknown } | undefined;
  if (!js || typeof js !== "object" || Array.isArray(js)) throw bad('expected {"name": ..., "schema": {...}}', "response_format.json_schema");
  if (typeof js.name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(js.name)) throw bad("expected 1-64 letters, digits, _ or -", "response_format.json_schema.name");
  if (js.strict !== undefined && js.strict !== null && typeof js.strict !== "boolean") throw bad("expected true or false", "response_format.json_schema.strict");
  if (js.schema === undefined) throw bad("a schema is required (JSON mode without one is json_object)", "response_format.json_schema.schema");
  const format: ResponseFormat = { type: "json_schema", name: js.name, schema: js.schema };
  try {
    schemaFor(format);
  } catch (e) {
    if (e instanceof UsageError) throw new HttpError(400, e.message, "response_format.json_schema.schema");
    throw e;
  }
  return format;
}

/** Validates a /v1/chat/completions or /v1/completions body. */
export function validateRequest(body: unknown, kind: "chat" | "text", modelId: string, maxTokensLimit: number = MAX_NEW_TOKENS): CompletionJob & { stream: boolean } {
  if (!body || typeof body !== "object" || Array.isArray(body)) throw new HttpError(400, "request body must be a JSON object");
  const b = body as Record<string, unknown>;
  if (b.model !== undefined && b.model !== modelId && b.model !== "k3") {
    throw new HttpError(404, `model ${JSON.stringify(b.model)} is not served here (this server has ${JSON.stringify(modelId)})`, "model", "invalid_request_error", "model_not_found");
  }
  refuseUnsupported(b, kind);
  const job: CompletionJob & { stream: boolean } = {
    kind,
    maxTokens: num(b, b.max_completion_tokens !== undefined ? "max_completion_tokens" : "max_tokens", DEFAULTS.maxTokens.server, (x) => satisfies(SAMPLING_RULES.maxTokens, x) && x <= maxTokensLimit, `an integer in 1..${maxTokensLimit}`),
    temperature: num(b, "temperature", DEFAULTS.temperature.server, (x) => satisfies(SAMPLING_RULES.temperature, x), SAMPLING_RULES.temperature.expected),
    topP: num(b, "top_p", DEFAULTS.topP, (x) => satisfies(SAMPLING_RULES.topP, x), SAMPLING_RULES.topP.expected),
    topK: num(b, "top_k", DEFAULTS.topK, (x) => satisfies(SAMPLING_RULES.topK, x), SAMPLING_RULES.topK.expected),
    seed: num(b, "seed", DEFAULTS.seed, (x) => satisfies(SAMPLING_RULES.seed, x), SAMPLING_RULES.seed.expected),
    stop: [],
    stream: false,
    n: num(b, "n", 1, (x) => Number.isInteger(x) && x >= 1 && x <= MAX_CHOICES, `an integer in 1..${MAX_CHOICES}`),
    presencePenalty: num(b, "presence_penalty", DEFAULTS.presencePenalty, (x) => satisfies(SAMPLING_RULES.presencePenalty, x), SAMPLING_RULES.presencePenalty.expected),
    frequencyPenalty: num(b, "frequency_penalty", DEFAULTS.frequencyPenalty, (x) => satisfies(SAMPLING_RULES.frequencyPenalty, x), SAMPLING_RULES.frequencyPenalty.expected),
    logprobs: logprobsParam(b, kind),
    responseFormat: responseFormatParam(b),
    logitBias: (b.logit_bias ?? undefined) as Record<number, number> | undefined,
  };
  // One validation path for sampling (the CLI's and Engine's): its messages name the OpenAI field.
  try {
    validateSampling(job);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    throw new HttpError(400, e.message, /^[a-z_]+/.exec(e.message)?.[0] ?? null);
  }
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
      const msg = m as { role?: unknown; content?: unknown; tool_calls?: unknown; function_call?: unknown };
      const role = msg.role;
      if (role === "tool" || role === "function") {
        throw new HttpError(400, `messages[${i}].role = ${JSON.stringify(role)}: tool results are not supported (K3's tool-call template is not published)`, `messages[${i}].role`);
      }
      if (msg.tool_calls !== undefined && msg.tool_calls !== null) throw new HttpError(400, `messages[${i}].tool_calls: tool calls are not supported (K3's tool-call template is not published)`, `messages[${i}].tool_calls`);
      if (msg.function_call !== undefined && msg.function_call !== null) throw new HttpError(400, `messages[${i}].function_call: function calls are not supported`, `messages[${i}].function_call`);
      // "developer" is OpenAI's current name for the system role.
      if (role !== "system" && role !== "developer" && role !== "user" && role !== "assistant") {
        throw new HttpError(400, `messages[${i}].role = ${JSON.stringify(role)}: expected "system", "developer", "user" or "assistant"`, "messages");
      }
      return { role: role === "developer" ? "system" : role, content: messageText(msg.content, `messages[${i}].content`) };
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

/** Each choice's end: the backend's list, or the one choice of a backend that does not list them. */
function choiceEnds(r: CompletionResult, n: number): ChoiceResult[] {
  if (r.choices && r.choices.length > 0) return r.choices;
  return Array.from({ length: Math.min(n, 1) }, (_, index) => ({ index, finishReason: r.finishReason, completionTokens: r.completionTokens }));
}

/** Chat completions' `logprobs`: {content: [{token, logprob, bytes, top_logprobs: [...]}], refusal: null}. */
export function chatLogprobs(entries: LogprobEntry[]) {
  return {
    content: entries.map((e) => ({ token: e.token, logprob: e.logprob, bytes: e.bytes, top_logprobs: e.top.map((t) => ({ token: t.token, logprob: t.logprob, bytes: t.bytes })) })),
    refusal: null,
  };
}

/**
 * Completions' `logprobs`: parallel lists of tokens, their logprobs, the alternatives (a map that
 * also holds the drawn token, as OpenAI's: up to logprobs + 1 entries) and text offsets.
 */
export function textLogprobs(entries: LogprobEntry[]) {
  return {
    tokens: entries.map((e) => e.token),
    token_logprobs: entries.map((e) => e.logprob),
    top_logprobs: entries.map((e) => Object.fromEntries([...e.top.map((t) => [t.token, t.logprob] as const), [e.token, e.logprob] as const])),
    text_offset: entries.map((e) => e.offset),
  };
}

function digest(key: string): Buffer {
  return createHash("sha256").update(key, "utf8").digest();
}

/** The route a request counts under in /metrics (a fixed set, so labels stay bounded). */
function routeLabel(path: string): string {
  if (path === "/" || path === "/index.html") return "/";
  if (path.startsWith("/v1/models/")) return "/v1/models/:id";
  return ["/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions"].includes(path) ? path : "other";
}

/** Runs one job at a time; at most `maxQueue` wait. */
class JobQueue {
  private running = false;
  private readonly waiting: (() => void)[] = [];
  /** Mean seconds of the last jobs (for Retry-After). */
  private meanSeconds = 5;
  constructor(private readonly maxQueue: number) {}

  get depth(): number {
    return this.waiting.length + (this.running ? 1 : 0);
  }

  async run<T>(fn: () => Promise<T>, signal: AbortSignal): Promise<T> {
    if (this.running) {
      if (this.waiting.length >= this.maxQueue) {
        // A client should come back once the jobs ahead of it have likely run.
        const retry = Math.max(1, Math.ceil(this.meanSeconds * (this.waiting.length + 1)));
        throw new HttpError(429, `server busy: ${this.waiting.length} request(s) already waiting`, null, "rate_limit_error", null, { "retry-after": String(retry) });
      }
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
    const t0 = performance.now();
    try {
      return await fn();
    } finally {
      this.meanSeconds = 0.7 * this.meanSeconds + 0.3 * ((performance.now() - t0) / 1000);
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
  const maxTokensLimit = options.maxTokensLimit ?? MAX_NEW_TOKENS;
  const log = options.log ?? (() => {});
  const created = Math.floor(Date.now() / 1000);
  // Set once the port is known (port 0 picks one); no request arrives before that.
  let guard: HttpGuard | null = null;
  const metrics = new ServerMetrics();
  const keyDigest = options.apiKey !== undefined ? digest(options.apiKey) : null;
  if (options.apiKey !== undefined && options.apiKey.length === 0) throw new Error("apiKey: expected a non-empty string");

  // requireHostHeader off: Node's own refusal of a Host-less HTTP/1.1 request is a bare 400 with no
  // body; handle() refuses it with the usual JSON error instead.
  const server = createServer({ requireHostHeader: false }, (req, res) => {
    res.on("finish", () => metrics.countRequest(routeLabel((req.url ?? "/").split("?")[0]), res.statusCode));
    handle(req, res).catch((err) => {
      const e = err instanceof HttpError ? err : new HttpError(500, `internal error: ${(err as Error).message ?? String(err)}`, null, undefined, null, {}, { cause: err });
      if (e.status >= 500) log(`error: ${e.message}`);
      sendError(res, e);
    });
  });

  server.on("clientError", (err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Duplex) => {
    if (err.code === "ECONNRESET") return socket.destroy();
    const [status, reason, message] = parseErrorStatus(err.code);
    // A reply to HEAD has no body; a response already being written on this socket (pipelined
    // requests) goes out whole first, else the two would interleave. One that has sent nothing yet
    // (its handler still reading the broken body) is answered now: waiting for it hung (pnpm fuzz).
    const head = /^HEAD /i.test(err.rawPacket?.toString("latin1", 0, 5) ?? "");
    const inflight = (socket as Duplex & { _httpMessage?: ServerResponse | null })._httpMessage;
    const refuse = () => refuseOnSocket(socket, status, reason, message, null, head);
    if (inflight && inflight.headersSent && !inflight.writableFinished) {
      inflight.once("finish", refuse);
      inflight.once("close", () => socket.destroy());
    } else refuse();
  });
  server.on("connect", (_req: IncomingMessage, socket: Duplex) => refuseOnSocket(socket, 405, "Method Not Allowed", "CONNECT is not served here", "method"));
  server.on("upgrade", (_req: IncomingMessage, socket: Duplex) => refuseOnSocket(socket, 400, "Bad Request", "protocol upgrades are not served here", "upgrade"));

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0];
    if (req.headers.host === undefined && req.httpVersion === "1.1") throw new HttpError(400, "the request has no Host header (HTTP/1.1 requires one)", "host");
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
    if (path.startsWith("/v1/") || path === "/metrics") checkApiKey(req.headers.authorization);
    if (req.method === "GET" && path === "/metrics") {
      const text = metrics.render(queue.depth, process.memoryUsage.rss());
      res.writeHead(200, { "content-type": METRICS_CONTENT_TYPE, "content-length": Buffer.byteLength(text) });
      res.end(text);
      return;
    }
    const model = { id: backend.modelId, object: "model", created, owned_by: "k3", context_length: backend.contextLength };
    if (req.method === "GET" && path === "/v1/models") {
      sendJson(res, 200, { object: "list", data: [model] });
      return;
    }
    if (req.method === "GET" && path.startsWith("/v1/models/")) {
      let id: string;
      try {
        id = decodeURIComponent(path.slice("/v1/models/".length));
      } catch {
        throw new HttpError(404, `model ${JSON.stringify(path.slice("/v1/models/".length))} is not a valid percent-encoded name`, "model", "invalid_request_error", "model_not_found");
      }
      if (id !== backend.modelId && id !== "k3") throw new HttpError(404, `model ${JSON.stringify(id)} is not served here (this server has ${JSON.stringify(backend.modelId)})`, "model", "invalid_request_error", "model_not_found");
      sendJson(res, 200, model);
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
    const n = job.n ?? 1;
    const withLogprobs = job.logprobs !== null && job.logprobs !== undefined;
    await queue.run(async () => {
      if (job.stream) {
        res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
        const event = (payload: unknown) => res.write(`data: ${JSON.stringify(payload)}\n\n`);
        const chunk = (index: number, text: string | null, finish: string | null, channel: TextChannel = "content", lp?: LogprobEntry[], role = false) => {
          const logprobs = lp ? (kind === "chat" ? chatLogprobs(lp) : textLogprobs(lp)) : withLogprobs && text !== null && channel === "content" && !role ? (kind === "chat" ? chatLogprobs([]) : textLogprobs([])) : null;
          return kind === "chat"
            ? {
                id,
                object: "chat.completion.chunk",
                created: stamp,
                model: backend.modelId,
                choices: [{ index, delta: text === null ? {} : role ? { role: "assistant", content: text } : channel === "reasoning" ? { reasoning_content: text } : { content: text }, ...(withLogprobs ? { logprobs } : {}), finish_reason: finish }],
              }
            : { id, object: "text_completion", created: stamp, model: backend.modelId, choices: [{ index, text: text ?? "", logprobs, finish_reason: finish }] };
        };
        if (kind === "chat") for (let i = 0; i < n; i++) event(chunk(i, "", null, "content", undefined, true));
        try {
          const result = await backend.complete(
            job,
            (text, channel, extra) => {
              const index = extra?.index ?? 0;
              event(chunk(index, text, null, channel, extra?.logprobs));
            },
            abort.signal,
            (p) => res.write(prefillComment(p)),
          );
          metrics.countCompletion(result);
          const ends = choiceEnds(result, n);
          ends.forEach((c, i) => event({ ...chunk(c.index, null, c.finishReason), ...(i === ends.length - 1 ? { usage: usage(result), ...extras(result) } : {}) }));
          res.write("data: [DONE]\n\n");
        } catch (err) {
          if (!abort.signal.aborted) event({ error: { message: (err as Error).message, type: "server_error" } });
        }
        res.end();
        return;
      }
      const texts = new Array<string>(n).fill("");
      const reasonings = new Array<string | null>(n).fill(null);
      const entries: LogprobEntry[][] = Array.from({ length: n }, () => []);
      // A text completion has no channels: everything the model wrote is its text (as when streamed).
      const result = await backend.complete(
        job,
        (t, channel, extra) => {
          const i = extra?.index ?? 0;
          if (kind === "chat" && channel === "reasoning") reasonings[i] = (reasonings[i] ?? "") + t;
          else texts[i] += t;
          if (extra?.logprobs) entries[i].push(...extra.logprobs);
        },
        abort.signal,
      );
      metrics.countCompletion(result);
      const choices = choiceEnds(result, n).map(({ index, finishReason }) =>
        kind === "chat"
          ? { index, message: { role: "assistant", content: texts[index], ...(reasonings[index] !== null ? { reasoning_content: reasonings[index] } : {}) }, logprobs: withLogprobs ? chatLogprobs(entries[index]) : null, finish_reason: finishReason }
          : { index, text: texts[index], logprobs: withLogprobs ? textLogprobs(entries[index]) : null, finish_reason: finishReason },
      );
      sendJson(res, 200, { id, object, created: stamp, model: backend.modelId, choices, usage: usage(result), ...extras(result) });
    }, abort.signal);
  }

  /** 401 unless the request carries the key (compared in constant time, over fixed-size digests). */
  function checkApiKey(authorization: string | undefined): void {
    if (!keyDigest) return;
    const m = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? "");
    if (m && timingSafeEqual(digest(m[1]), keyDigest)) return;
    throw new HttpError(
      401,
      m ? "Incorrect API key provided." : "You didn't provide an API key: send it as 'Authorization: Bearer KEY'.",
      null,
      "invalid_request_error",
      m ? "invalid_api_key" : "missing_api_key",
      { "www-authenticate": 'Bearer realm="k3"' },
    );
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
