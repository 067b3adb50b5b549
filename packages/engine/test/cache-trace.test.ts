/** `k3 run --dump-cache-trace` + `k3 cache-sim`: the trace is what the store was asked, and LRU replays the store. */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { parseCacheTrace } from "@k3/moe-stream";
import { TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-trace-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const k3 = captureCli;

// A cold cache, as the simulator's: no warm filling it ahead of the run.
const RUN = ["run", "--model", TINY_K3, "--prompt", "hello there", "--max-tokens", "10", "--threads", "1", "--quiet", "--warm", "off"];

/** One traced run at `cacheGb`; returns the run report, the trace and the cache-sim JSON at the run's own size. */
async function traced(name: string, cacheGb: string) {
  const traceDir = join(dir, name);
  const report = join(dir, `${name}.json`);
  expect((await k3([...RUN, "--cache-gb", cacheGb, "--dump-cache-trace", traceDir, "--json", report])).code).toBe(0);
  const run = JSON.parse(readFileSync(report, "utf8"));
  const hist = JSON.parse(readFileSync(join(traceDir, "expert_hist.json"), "utf8"));
  const trace = parseCacheTrace(readFileSync(join(traceDir, "expert_trace.bin")));
  const simJson = join(dir, `${name}-sim.json`);
  const sim = await k3(["cache-sim", "--trace", traceDir, "--slots", `0,${hist.slots_per_layer}`, "--json", simJson]);
  expect(sim.code).toBe(0);
  return { run, hist, trace, traceDir, sim: JSON.parse(readFileSync(simJson, "utf8")), text: sim.stdout };
}

describe("expert traces and the cache simulator", () => {
  it("the trace holds every expert request of the run; tracing does not change the output", async () => {
    const { run, hist, trace } = await traced("big", "0.01");
    const plain = join(dir, "plain.json");
    expect((await k3([...RUN, "--cache-gb", "0.01", "--json", plain])).code).toBe(0);
    expect(run.generated_ids).toEqual(JSON.parse(readFileSync(plain, "utf8")).generated_ids);
    // expert_requests counts the unique experts of every MoE layer forward: the trace's entries.
    expect(trace.reduce((n, r) => n + r.experts.length, 0)).toBe(run.expert_requests);
    expect(hist.requests).toBe(trace.length);
    expect(hist.tokens).toBe(run.prompt_tokens + run.generated_tokens);
    const counted = Object.values(hist.histogram as Record<string, Record<string, number>>).reduce((n, h) => n + Object.values(h).reduce((a, b) => a + b, 0), 0);
    expect(counted).toBe(run.expert_requests);
    for (const r of trace) expect(r.experts.length).toBeGreaterThanOrEqual(4); // top-k 4 per token
  });

  it("LRU at the run's cache size replays the store: exactly when nothing is evicted, within 2 points otherwise", async () => {
    const big = await traced("big2", "0.01");
    expect(big.hist.slots_per_layer).toBe(16); // every expert fits: only first uses miss
    const lruBig = big.sim.rows.find((r: { slots_per_layer: number }) => r.slots_per_layer === 16).hit_rate.lru;
    expect(lruBig).toBe(big.run.resident_hit_rate);
    const small = await traced("small", "0.0004");
    expect(small.hist.slots_per_layer).toBeLessThan(16);
    const lruSmall = small.sim.rows.find((r: { slots_per_layer: number }) => r.slots_per_layer === small.hist.slots_per_layer).hit_rate.lru;
    // The store admits a request's misses in read-completion order, the simulator in request order.
    expect(Math.abs(lruSmall - small.run.resident_hit_rate)).toBeLessThanOrEqual(0.02);
    expect(small.sim.rows[0].hit_rate).toEqual({ lru: 0, s3fifo: 0, belady: 0, pinned: 0 });
    expect(small.text).toMatch(/slots\/layer\s+cache\s+lru\s+s3fifo\s+belady\s+pinned/);
  });

  it("cache-sim refuses a missing or mismatched trace, bad slots and unknown policies", async () => {
    const none = await k3(["cache-sim", "--trace", join(dir, "nope")]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/cannot read expert_hist\.json \(ENOENT\); write one with k3 run --dump-cache-trace/);
    expect((await k3(["cache-sim"])).stderr).toMatch(/--trace DIR is required/);
    const { traceDir } = await traced("bad", "0.0004");
    expect((await k3(["cache-sim", "--trace", traceDir, "--policy", "arc"])).stderr).toMatch(/--policy arc: expected some of lru, s3fifo, belady, pinned/);
    expect((await k3(["cache-sim", "--trace", traceDir, "--slots", "4,x"])).stderr).toMatch(/expected slot counts/);
    const bin = readFileSync(join(traceDir, "expert_trace.bin"));
    writeFileSync(join(traceDir, "expert_trace.bin"), bin.subarray(0, bin.length - 5));
    expect((await k3(["cache-sim", "--trace", traceDir])).stderr).toMatch(/expert_trace\.bin: \d+ bytes is not a whole number of \(request, layer, expert\) int32 triples/);
    writeFileSync(join(traceDir, "expert_trace.bin"), bin.subarray(0, bin.length - 12 * 20));
    expect((await k3(["cache-sim", "--trace", traceDir])).stderr).toMatch(/requests, but expert_hist\.json says \d+ \(files from different runs\?\)/);
    writeFileSync(join(traceDir, "expert_hist.json"), "{not json");
    expect((await k3(["cache-sim", "--trace", traceDir])).stderr).toMatch(/expert_hist\.json: not JSON/);
  });
});
