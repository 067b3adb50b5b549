/**
 * The server's model backend: an Engine in a worker thread, so a generation (seconds per token on
 * real K3) never blocks the HTTP event loop. Messages: {type:"job"} in; {type:"text"|"prefill"|"done"|"error"} out.
 * Cancellation goes through a SharedArrayBuffer flag the worker's model reads between layers.
 */
import { Worker } from "node:worker_threads";
import type { EngineOptions, PrefillProgress } from "./engine.js";
import { cancelFlag, markCancelled } from "./cancel-flag.js";
import { EXIT_USAGE } from "./errors.js";
import { HttpError, type CompletionBackend, type CompletionJob, type CompletionResult, type LogprobEntry, type TextChannel, type TextExtra } from "./server.js";

export interface WorkerInit {
  dir: string;
  /** Engine options; `promptCache` defaults to {slots: 1} here ({slots: 0} turns it off). */
  options: Omit<EngineOptions, "log">;
  /** When the worker reports a prefill's progress: from `afterSeconds` in, every `everySeconds` (default 1 and 1; 0 and 0: every layer). */
  prefillProgress?: { afterSeconds: number; everySeconds: number };
}

type FromWorker =
  | { type: "ready"; modelId: string; contextLength: number; plan: string }
  | { type: "text"; id: number; text: string; channel?: TextChannel; index?: number; logprobs?: LogprobEntry[] }
  | { type: "prefill"; id: number; progress: PrefillProgress }
  | { type: "done"; id: number; result: CompletionResult }
  | { type: "error"; id: number; message: string; exitCode?: number; name?: string }
  | { type: "log"; line: string }
  | { type: "fatal"; message: string; exitCode: number };

/**
 * A job's error as the server should answer it: the engine's refusals of the request itself (a
 * prompt over the limit or the KV plan, an empty prompt: exit code 2) are 400s naming the prompt,
 * anything else stays an internal error.
 */
function requestError(m: { message: string; exitCode?: number; name?: string }, kind: CompletionJob["kind"]): Error {
  if (m.exitCode !== EXIT_USAGE) return new Error(m.message);
  const param = m.message.startsWith("logit_bias") ? "logit_bias" : kind === "chat" ? "messages" : "prompt";
  return new HttpError(400, m.message, param, "invalid_request_error", m.name === "ContextError" ? "context_length_exceeded" : null);
}

export class WorkerBackend implements CompletionBackend {
  modelId = "";
  contextLength = 0;
  plan = "";
  /** Receives the engine's log lines after loading (per-request prompt cache reuse); default: dropped. */
  onLog: (line: string) => void = () => {};
  private nextId = 1;
  private readonly pending = new Map<
    number,
    {
      kind: CompletionJob["kind"];
      onText: (t: string, channel?: TextChannel, extra?: TextExtra) => void;
      onPrefill?: (p: PrefillProgress) => void;
      resolve: (r: CompletionResult) => void;
      reject: (e: Error) => void;
    }
  >();
  private readonly cancel = cancelFlag();

  private constructor(private readonly worker: Worker) {
    worker.on("message", (m: FromWorker) => {
      if (m.type === "text") this.pending.get(m.id)?.onText(m.text, m.channel, { index: m.index, logprobs: m.logprobs });
      else if (m.type === "prefill") this.pending.get(m.id)?.onPrefill?.(m.progress);
      else if (m.type === "log") this.onLog(m.line);
      else if (m.type === "done") {
        this.pending.get(m.id)?.resolve(m.result);
        this.pending.delete(m.id);
      } else if (m.type === "error") {
        const p = this.pending.get(m.id);
        p?.reject(requestError(m, p.kind));
        this.pending.delete(m.id);
      }
    });
    worker.on("error", (err) => {
      for (const p of this.pending.values()) p.reject(err);
      this.pending.clear();
    });
  }

  /** Starts the worker and waits until the model is loaded (rejects with the load error). */
  static async start(init: WorkerInit, workerUrl: URL = new URL(import.meta.url.endsWith(".ts") ? "./worker.ts" : "./worker.js", import.meta.url)): Promise<WorkerBackend> {
    // Under tsx (tests, dev) the worker is TypeScript: register tsx's loader inside the worker first.
    const worker = workerUrl.pathname.endsWith(".ts")
      ? new Worker(`import("tsx/esm/api").then((m) => { m.register(); return import(${JSON.stringify(workerUrl.href)}); });`, { eval: true, workerData: init })
      : new Worker(workerUrl, { workerData: init });
    const backend = new WorkerBackend(worker);
    await new Promise<void>((resolve, reject) => {
      const onMessage = (m: FromWorker) => {
        if (m.type === "ready") {
          backend.modelId = m.modelId;
          backend.contextLength = m.contextLength;
          backend.plan = m.plan;
          worker.off("message", onMessage);
          resolve();
        } else if (m.type === "fatal") {
          worker.off("message", onMessage);
          reject(Object.assign(new Error(m.message), { exitCode: m.exitCode }));
        }
      };
      worker.on("message", onMessage);
      worker.once("error", reject);
      worker.once("exit", (code) => reject(new Error(`model worker exited with code ${code} while loading`)));
    });
    worker.removeAllListeners("exit");
    worker.postMessage({ type: "cancel-buffer", buffer: backend.cancel.buffer });
    return backend;
  }

  complete(job: CompletionJob, onText: (text: string, channel?: TextChannel, extra?: TextExtra) => void, signal: AbortSignal, onPrefill?: (p: PrefillProgress) => void): Promise<CompletionResult> {
    const id = this.nextId++;
    Atomics.store(this.cancel, 0, 0);
    const onAbort = () => markCancelled(this.cancel, id);
    signal.addEventListener("abort", onAbort, { once: true });
    return new Promise<CompletionResult>((resolve, reject) => {
      this.pending.set(id, {
        kind: job.kind,
        onText,
        onPrefill,
        resolve: (r) => {
          signal.removeEventListener("abort", onAbort);
          resolve(r);
        },
        reject: (e) => {
          signal.removeEventListener("abort", onAbort);
          reject(e);
        },
      });
      this.worker.postMessage({ type: "job", id, job });
    });
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}
