/**
 * How long after its client leaves a streamed request's prefill stops: `k3 serve`'s backend and HTTP
 * server on a checkpoint, a long prompt streamed, the client gone `delay` seconds in (fetch aborted,
 * as a closed browser tab or curl --max-time), then the figure the server logs for it
 * (`request N: cancelled by its client during the prefill (..., stopped X s after it left)`).
 * Each delay lands somewhere else in the prefill: a mixer's 64-token piece, the shared experts, a
 * group of routed experts. No prompt cache, so every request prefills the whole prompt.
 * Run (packages/engine): K3_RW_MODEL=DIR /work/bin/k3-excl node --import tsx bench/cancel-latency.bench.ts
 *   [--delays=3,6,9,...] [--words=N]   (default: the embedded tiny model, which stops within milliseconds)
 */
// @ts-expect-error: plain .mjs helper shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";
import { WorkerBackend } from "../src/backend.js";
import { embeddedModelDir, startServer } from "../src/index.js";

const arg = (name: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const dir = process.env.K3_RW_MODEL ?? embeddedModelDir();
const delays = (arg("delays") ?? "3,6,9,11,12,13,14,15,16,17,18,20,22,24,26,28").split(",").map(Number);
const words = Number(arg("words") ?? 2000);

const backend = await WorkerBackend.start({ dir, options: { preset: "auto", promptCache: { slots: 0 } } }, new URL("../src/worker.ts", import.meta.url));
const logs: string[] = [];
backend.onLog = (line) => logs.push(line);
const server = await startServer(backend, { port: 0 });
const words9 = "The quick brown fox jumps over the lazy dog again. ";
const rows: Record<string, string | number>[] = [];
try {
  for (const delay of delays) {
    const ac = new AbortController();
    // a fresh first word per request: nothing is shared between them
    const content = `${delay} ${words9.repeat(Math.ceil(words / 10))}`;
    const res = await fetch(server.url + "/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content }], max_tokens: 4, stream: true }),
      signal: ac.signal,
    });
    await res.body!.getReader().read(); // the role chunk: the job is with the worker
    await new Promise((r) => setTimeout(r, delay * 1000));
    const before = logs.length;
    ac.abort();
    // the next request waits for the worker, so its answer comes after the cancelled job's log line
    await (await fetch(server.url + "/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ messages: [{ role: "user", content: "Hi" }], max_tokens: 1 }) })).json();
    const line = logs.slice(before).find((l) => /cancelled by its client/.test(l)) ?? "";
    const stopped = /stopped ([\d.]+) s after it left/.exec(line)?.[1];
    const during = /during the prefill/.test(line) ? "prefill" : line ? "decode" : "not cancelled (done before the client left)";
    rows.push({ "client left after (s)": delay, phase: during, "stopped after (s)": stopped ?? "-", "prompt tokens": /\((\d+) prompt tokens/.exec(line)?.[1] ?? "-" });
  }
} finally {
  await server.close();
  await backend.close();
}
const prefill = rows.filter((r) => r.phase === "prefill").map((r) => Number(r["stopped after (s)"]));
writeReport("engine-cancel-latency", {
  title: `cancel latency: a streamed request's client leaves during the prefill (${dir})`,
  command: "K3_RW_MODEL=DIR /work/bin/k3-excl node --import tsx bench/cancel-latency.bench.ts",
  rows,
  notes: [`Preset auto (its prefill chunk), no prompt cache. During the prefill: stopped ${prefill.length ? `${Math.min(...prefill).toFixed(2)}-${Math.max(...prefill).toFixed(2)} s` : "(none)"} after the client left, over ${prefill.length} of ${rows.length} delays.`],
});
