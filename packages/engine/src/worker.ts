/**
 * Worker-thread side of the server backend: loads the Engine once, then runs jobs one at a time,
 * posting text as it streams. A cancel flag in shared memory becomes an AbortSignal, which the
 * model checks between layers.
 */
import { parentPort, workerData } from "node:worker_threads";
import type { WorkerInit } from "./backend.js";
import { Engine } from "./engine.js";
import { exitCodeOf } from "./errors.js";
import type { CompletionJob } from "./server.js";

const port = parentPort!;
let cancel: Int32Array | null = null;

async function main(): Promise<void> {
  const init = workerData as WorkerInit;
  let engine: Engine;
  let plan = "";
  try {
    engine = await Engine.load(init.dir, { ...init.options, log: (l) => (plan += l + "\n") });
  } catch (err) {
    port.postMessage({ type: "fatal", message: (err as Error).message, exitCode: exitCodeOf(err) });
    return;
  }
  const contextLength = Math.min(engine.plan.kvCapacityTokens, engine.config.maxPositionEmbeddings ?? Number.MAX_SAFE_INTEGER);
  port.postMessage({ type: "ready", modelId: engine.modelId, contextLength, plan });

  let queue = Promise.resolve();
  port.on("message", (m: { type: string; id: number; job: CompletionJob; buffer: SharedArrayBuffer }) => {
    if (m.type === "cancel-buffer") cancel = new Int32Array(m.buffer);
    if (m.type !== "job") return;
    queue = queue.then(() => run(engine, m.id, m.job));
  });
}

async function run(engine: Engine, id: number, job: CompletionJob): Promise<void> {
  const ac = new AbortController();
  // Poll the shared cancel flag between tokens and layers (cheap: one atomic load).
  const timer = setInterval(() => {
    if (cancel && Atomics.load(cancel, 0) === id) ac.abort();
  }, 20);
  try {
    const prompt =
      job.kind === "chat"
        ? engine.encodeChat(job.messages!, { thinking: job.thinking ?? true, effort: job.effort })
        : engine.encodeText(job.prompt!);
    const gen = engine.generate(prompt, {
      maxTokens: job.maxTokens,
      temperature: job.temperature,
      topK: job.topK,
      topP: job.topP,
      seed: job.seed,
      stop: job.stop,
      signal: ac.signal,
    });
    let r = await gen.next();
    while (!r.done) {
      if (r.value.text) port.postMessage({ type: "text", id, text: r.value.text });
      // Let the cancel poller run between tokens.
      await new Promise((res) => setImmediate(res));
      if (cancel && Atomics.load(cancel, 0) === id) ac.abort();
      r = await gen.next();
    }
    const res = r.value;
    port.postMessage({
      type: "done",
      id,
      result: { finishReason: res.stopReason === "stop" ? "stop" : "length", promptTokens: prompt.length, completionTokens: res.ids.length },
    });
  } catch (err) {
    port.postMessage({ type: "error", id, message: (err as Error).message });
  } finally {
    clearInterval(timer);
  }
}

void main();
