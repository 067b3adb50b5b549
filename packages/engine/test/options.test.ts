/** options.ts: the one set of limits the CLI, the server, Engine and the sampler check. */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setThreadCount, threadCount } from "@k3/dense";
import { describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { DEFAULTS, MAX_NEW_TOKENS, MAX_TEMPERATURE, MAX_THREADS } from "../src/options.js";
import { validateSampling } from "../src/sampler.js";
import { validateRequest } from "../src/server.js";
import { REPO, TINY_K3 } from "./helpers.js";

describe("one set of option limits", () => {
  it("MAX_THREADS is the compute pool's own limit (dense/native/src/pool.c), and the pool refuses one more", () => {
    const pool = readFileSync(join(REPO, "packages", "dense", "native", "src", "pool.c"), "utf8");
    expect(Number(/#define MAX_THREADS (\d+)/.exec(pool)?.[1])).toBe(MAX_THREADS);
    const before = threadCount();
    expect(() => setThreadCount(MAX_THREADS + 1)).toThrow(/between 1 and 256/);
    expect(threadCount()).toBe(before);
  });

  it("Engine.load refuses threads past the pool before touching it", async () => {
    await expect(Engine.load(TINY_K3, { threads: MAX_THREADS + 1 })).rejects.toThrow(/--threads 257: expected an integer in 1\.\.256/);
    await expect(Engine.load(TINY_K3, { kdaCore: "fast" as never })).rejects.toThrow(/--kda-core fast: expected auto, recurrent or chunked/);
  });

  it("the temperature cap is the same for the sampler (Engine, CLI) and the server", () => {
    expect(() => validateSampling({ temperature: MAX_TEMPERATURE })).not.toThrow();
    expect(() => validateSampling({ temperature: MAX_TEMPERATURE + 0.5 })).toThrow(/temperature = 2.5: expected a number in \[0, 2\]/);
    expect(() => validateRequest({ prompt: "x", temperature: MAX_TEMPERATURE + 0.5 }, "text", "m")).toThrow(/temperature = 2.5: expected a number in \[0, 2\]/);
  });

  it("max tokens: one ceiling for the server and Engine; the defaults are the documented ones", async () => {
    expect(() => validateRequest({ prompt: "x", max_tokens: MAX_NEW_TOKENS + 1 }, "text", "m")).toThrow(/max_tokens/);
    const job = validateRequest({ prompt: "x" }, "text", "m");
    expect([job.maxTokens, job.temperature]).toEqual([DEFAULTS.maxTokens.server, DEFAULTS.temperature.server]);
    const engine = await Engine.load(TINY_K3, { threads: 1 });
    try {
      await expect(engine.complete([1, 2], { maxTokens: MAX_NEW_TOKENS + 1 })).rejects.toThrow(/max_tokens = 4097: expected an integer in 1\.\.4096/);
    } finally {
      engine.close();
    }
  });
});
