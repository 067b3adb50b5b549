// Closing a server's worker while a reply is being generated (expert reads in flight, their
// completions queued for the worker's JS thread, a kernel call running) must not kill the process.
// Before, such a close ended in "FATAL ERROR: Error::ThrowAsJavaScriptException napi_throw" (exit
// 134): a node-addon-api call that fails because the worker's JS can no longer run throws, and that
// throw fails too. Every addon now builds with NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS (node-addon-api
// drops a throw that cannot happen) and the read completions use raw N-API that gives up quietly.
import { describe, expect, it } from "vitest";
import { WorkerBackend } from "../src/backend.js";
import { TINY_K3 } from "./helpers.js";

const job = { kind: "text" as const, prompt: "hello", maxTokens: 200, temperature: 0, topP: 1, topK: 0, seed: 1, stop: [] };

describe("WorkerBackend.close during a reply", () => {
  it("terminates the worker mid-generation, 12 times, at different points, and the process lives on", async () => {
    for (let i = 0; i < 12; i++) {
      const backend = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop" } }, new URL("../src/worker.ts", import.meta.url));
      let texts = 0;
      const reply = backend.complete(job, () => texts++, new AbortController().signal).catch((e: Error) => e);
      await new Promise((r) => setTimeout(r, 5 + i * 7));
      await backend.close();
      await Promise.race([reply, new Promise((r) => setTimeout(r, 200))]);
    }
    // The process (this test's) survived every close; a new worker still answers in full.
    const backend = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop" } }, new URL("../src/worker.ts", import.meta.url));
    try {
      const r = await backend.complete({ ...job, maxTokens: 3 }, () => {}, new AbortController().signal);
      expect(r.completionTokens).toBe(3);
      expect(r.finishReason).toBe("length");
    } finally {
      await backend.close();
    }
  }, 120_000);
});
