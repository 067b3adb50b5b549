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
import { Engine, type PrefillProgress } from "./engine.js";
import { throttledProgress } from "./progress-throttle.js";
import { secondsSinceCancel } from "./cancel-flag.js";
import { exitCodeOf } from "./errors.js";
import { completionStats } from "./metrics.js";
import type { ChoiceResult, CompletionJob, CompletionResult, CompletionStats, LogprobEntry, TextChannel } from "./server.js";
import type { SchemaNode } from "./json-grammar.js";
import { jsonConstraint, K3Channels, schemaFor } from "./json-mode.js";
import { logprobsOf } from "./sampler.js";
import { tokenString } from "./token-text.js";

const port = parentPort!;
let cancel: Int32Array | null = null;
/** When a prefill's progress is posted (WorkerInit.prefillProgress). */
let progressEvery = { afterSeconds: 1, everySeconds: 1 };

/** Job `id`'s prefill progress, posted at the WorkerInit.prefillProgress cadence. */
function prefillPoster(id: number): (p: PrefillProgress) => void {
  return throttledProgress(progressEvery, (p) => port.postMessage({ type: "prefill", id, progress: p }));
}

async function main(): Promise<void> {
  const init = workerData as WorkerInit;
  if (init.prefillProgress) progressEvery = init.prefillProgress;
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
    const schema = schemaFor(job.responseFormat);
    const choices: ChoiceResult[] = [];
    let cachedTokens: number | undefined;
    let drops = 0;
    const stats: CompletionStats[] = [];
    // n choices, one after another: choice i draws from random stream i (n = 1 is stream 0, as before).
    for (let index = 0; index < (job.n ?? 1); index++) {
      const r = await runChoice(engine, id, job, prompt, index, schema, cancelled);
      choices.push(r.choice);
      cachedTokens ??= r.cachedTokens;
      drops += r.drops;
      stats.push(r.stats);
      if (r.aborted) break;
    }
    port.postMessage({
      type: "done",
      id,
      result: {
        finishReason: choices[0].finishReason,
        promptTokens: prompt.length,
        completionTokens: choices.reduce((a, c) => a + c.completionTokens, 0),
        cachedTokens,
        expertDrops: drops,
        stats: sumStats(stats),
        choices,
      } satisfies CompletionResult,
    });
  } catch (err) {
    port.postMessage({ type: "error", id, message: (err as Error).message, exitCode: exitCodeOf(err), name: (err as Error).name });
  }
}

/** The per-run figures of several choices as one: bytes and expert counts add up, rates are the last run's. */
function sumStats(all: CompletionStats[]): CompletionStats {
  const out = { ...all[all.length - 1], bytesRead: { trunk: 0, experts: 0, embedHead: 0 }, expertRequests: 0, expertResidentHits: 0 };
  for (const s of all) {
    out.bytesRead.trunk += s.bytesRead.trunk;
    out.bytesRead.experts += s.bytesRead.experts;
    out.bytesRead.embedHead += s.bytesRead.embedHead;
    out.expertRequests += s.expertRequests;
    out.expertResidentHits += s.expertResidentHits;
  }
  return out;
}


async function runChoice(engine: Engine, id: number, job: CompletionJob, prompt: number[], index: number, schema: SchemaNode | null, cancelled: () => boolean) {
  const tok = engine.tokenizer;
  // K3 chat replies are split into the think channel (reasoning_content) and the response
  // (content) on token ids, so literal tag text in the output cannot fake a boundary.
  const split = job.kind === "chat" && engine.chatFormat === "k3";
  const thinking = job.thinking ?? true;
  const channels = split ? new K3Channels(tok, thinking) : null;
  const constraint = schema ? jsonConstraint(tok, engine.config.vocabSize, schema, split && thinking) : undefined;
  // Logprobs: of the content tokens, from the row each was drawn from (see GenerateOptions.onSample).
  const top = job.logprobs ?? null;
  let drawn: { id: number; row: Float32Array } | null = null;
  let pending: LogprobEntry[] = [];
  const offsetDecoder = new TextDecoder("utf-8", { ignoreBOM: true });
  let offset = 0;
  const entryOf = (tid: number, row: Float32Array): LogprobEntry => {
    const lp = logprobsOf(row, tid, top!);
    const bytes = tok.tokenBytes(tid);
    const entry: LogprobEntry = { token: tokenString(bytes), bytes: Array.from(bytes), logprob: lp.logprob, offset, top: lp.top.map((t) => {
      const b = tok.tokenBytes(t.id);
      return { token: tokenString(b), bytes: Array.from(b), logprob: t.logprob };
    }) };
    offset += offsetDecoder.decode(bytes, { stream: true }).length;
    return entry;
  };
  const gen = engine.generate(prompt, {
    maxTokens: job.maxTokens,
    temperature: job.temperature,
    topK: job.topK,
    topP: job.topP,
    seed: job.seed,
    stream: index,
    presencePenalty: job.presencePenalty,
    frequencyPenalty: job.frequencyPenalty,
    logitBias: job.logitBias,
    stop: job.stop,
    cancelled,
    constraint,
    onSample: top === null ? undefined : (tid, row) => (drawn = { id: tid, row }),
    onPrefillProgress: prefillPoster(id),
  });
  const send = (text: string, channel: TextChannel | undefined) => {
    const logprobs = channel !== "reasoning" && pending.length > 0 ? pending : undefined;
    if (logprobs) pending = [];
    if (text || logprobs) port.postMessage({ type: "text", id, text, channel, index, logprobs });
  };
  const ids: number[] = [];
  const sent = { reasoning: 0, content: 0 };
  const emitSplit = (final: boolean) => {
    const out = parseK3Output(tok, ids, { thinking });
    for (const [channel, text] of [["reasoning", out.reasoning ?? ""], ["content", out.content]] as const) {
      // Hold back a trailing U+FFFD: it may be half a UTF-8 character that the next token completes.
      const upto = !final && text.endsWith("\uFFFD") ? text.length - 1 : text.length;
      if (upto > sent[channel] || (channel === "content" && pending.length > 0 && final)) {
        send(text.slice(sent[channel], Math.max(upto, sent[channel])), channel);
        sent[channel] = Math.max(upto, sent[channel]);
      }
    }
  };
  let r = await gen.next();
  while (!r.done) {
    const tid = r.value.token;
    if (tid >= 0) {
      const channel = channels ? channels.push(tid) : "response";
      const d = drawn as { id: number; row: Float32Array } | null;
      if (d && d.id === tid && channel === "response") pending.push(entryOf(tid, d.row));
      drawn = null;
    }
    if (split) {
      if (tid >= 0) ids.push(tid);
      emitSplit(false);
    } else send(r.value.text, undefined);
    r = await gen.next();
  }
  const res = r.value;
  if (res.stopReason === "abort") {
    // The first token is yielded before any cancel check after the prefill: none means it was cut.
    const during = res.ids.length === 0 ? "during the prefill" : `after ${res.ids.length} generated token(s)`;
    const since = cancel ? secondsSinceCancel(cancel) : null;
    const stopped = since !== null ? `, stopped ${since.toFixed(2)} s after it left` : "";
    port.postMessage({ type: "log", line: `request ${id}: cancelled by its client ${during} (${prompt.length} prompt tokens${stopped})` });
  }
  if (split) emitSplit(true);
  else if (pending.length > 0) send("", undefined);
  if (res.report.expert_drops > 0) {
    const d = res.report.expert_drop_details[0];
    port.postMessage({ type: "log", line: `request ${id}: ${res.report.expert_drops} routed expert(s) dropped, the reply is not the model's (first: layer ${d.layer} expert ${d.expert}: ${d.reason})` });
  }
  // A JSON value closed to fit max_tokens reports "length", as a cut reply would.
  const closedEarly = constraint ? constraint.closedEarly : false;
  const finishReason: "stop" | "length" = res.stopReason === "stop" && !closedEarly ? "stop" : "length";
  return {
    choice: { index, finishReason, completionTokens: res.ids.length },
    cachedTokens: res.cachedTokens,
    drops: res.report.expert_drops,
    stats: completionStats(res.report),
    aborted: res.stopReason === "abort",
  };
}

void main();
