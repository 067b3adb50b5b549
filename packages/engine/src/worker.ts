/**
 * Worker-thread side of the server backend: loads the Engine once, then runs jobs one at a time,
 * posting text as it streams. A cancel flag in shared memory is read (one atomic load) by the
 * model between layers and by the engine between tokens: a prefill holds this thread, so no
 * timer or message could turn the flag into an abort before it ends. The engine keeps a prompt cache (default 1 slot): a chat client
 * resending the conversation prefills only what is new since the last chunk-aligned snapshot.
 */
import { parentPort, workerData } from "node:worker_threads";
import type { WorkerInit } from "./backend.js";
import { parseK3Output } from "@k3/tiktoken-bpe";
import { Engine } from "./engine.js";
import { exitCodeOf } from "./errors.js";
import { completionStats } from "./metrics.js";
import type { CompletionJob } from "./server.js";

const port = parentPort!;
let cancel: Int32Array | null = null;

async function main(): Promise<void> {
  const init = workerData as WorkerInit;
  let engine: Engine;
  let plan = "";
  // Load-time lines make up the plan the backend prints; later lines (per-request prompt cache
  // reuse) go to the backend's log as they come.
  let ready = false;
  const log = (l: string) => (ready ? port.postMessage({ type: "log", line: l }) : (plan += l + "\n"));
  try {
    engine = await Engine.load(init.dir, { ...init.options, promptCache: init.options.promptCache ?? { slots: 1 }, log });
  } catch (err) {
    port.postMessage({ type: "fatal", message: (err as Error).message, exitCode: exitCodeOf(err) });
    return;
  }
  const contextLength = Math.min(engine.plan.kvCapacityTokens, engine.config.maxPositionEmbeddings ?? Number.MAX_SAFE_INTEGER);
  port.postMessage({ type: "ready", modelId: engine.modelId, contextLength, plan });
  ready = true;

  let queue = Promise.resolve();
  port.on("message", (m: { type: string; id: number; job: CompletionJob; buffer: SharedArrayBuffer }) => {
    if (m.type === "cancel-buffer") cancel = new Int32Array(m.buffer);
    if (m.type !== "job") return;
    queue = queue.then(() => run(engine, m.id, m.job));
  });
}

async function run(engine: Engine, id: number, job: CompletionJob): Promise<void> {
  // The backend stores this job's id in the flag when its client goes away.
  const cancelled = () => cancel !== null && Atomics.load(cancel, 0) === id;
  let prompt: number[] = [];
  try {
    prompt =
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
      cancelled,
    });
    // K3 chat replies are split into the think channel (reasoning_content) and the response
    // (content) on token ids, so literal tag text in the output cannot fake a boundary.
    const split = job.kind === "chat" && engine.chatFormat === "k3";
    const ids: number[] = [];
    const sent = { reasoning: 0, content: 0 };
    const emitSplit = (final: boolean) => {
      const out = parseK3Output(engine.tokenizer, ids, { thinking: job.thinking ?? true });
      for (const [channel, text] of [["reasoning", out.reasoning ?? ""], ["content", out.content]] as const) {
        // Hold back a trailing U+FFFD: it may be half a UTF-8 character that the next token completes.
        const upto = !final && text.endsWith("\uFFFD") ? text.length - 1 : text.length;
        if (upto > sent[channel]) {
          port.postMessage({ type: "text", id, text: text.slice(sent[channel], upto), channel });
          sent[channel] = upto;
        }
      }
    };
    let r = await gen.next();
    while (!r.done) {
      if (split) {
        if (r.value.token >= 0) ids.push(r.value.token);
        emitSplit(false);
      } else if (r.value.text) port.postMessage({ type: "text", id, text: r.value.text });
      r = await gen.next();
    }
    const res = r.value;
    if (res.stopReason === "abort") {
      // The first token is yielded before any cancel check after the prefill: none means it was cut.
      const during = res.ids.length === 0 ? "during the prefill" : `after ${res.ids.length} generated token(s)`;
      port.postMessage({ type: "log", line: `request ${id}: cancelled by its client ${during} (${prompt.length} prompt tokens)` });
    }
    if (split) emitSplit(true);
    if (res.report.expert_drops > 0) {
      const d = res.report.expert_drop_details[0];
      port.postMessage({ type: "log", line: `request ${id}: ${res.report.expert_drops} routed expert(s) dropped, the reply is not the model's (first: layer ${d.layer} expert ${d.expert}: ${d.reason})` });
    }
    port.postMessage({
      type: "done",
      id,
      result: { finishReason: res.stopReason === "stop" ? "stop" : "length", promptTokens: prompt.length, completionTokens: res.ids.length, cachedTokens: res.cachedTokens, expertDrops: res.report.expert_drops, stats: completionStats(res.report) },
    });
  } catch (err) {
    port.postMessage({ type: "error", id, message: (err as Error).message, exitCode: exitCodeOf(err), name: (err as Error).name });
  }
}

void main();
