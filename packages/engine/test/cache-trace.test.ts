/** `k3 run --dump-cache-trace` + `k3 cache-sim`: the trace is what the store was asked, and the simulator replays the store under each policy. */
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
async function traced(name: string, cacheGb: string, extra: string[] = []) {
  const traceDir = join(dir, name);
  const report = join(dir, `${name}.json`);
  expect((await k3([...RUN, "--cache-gb", cacheGb, "--dump-cache-trace", traceDir, "--json", report, ...extra])).code).toBe(0);
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

  it("the simulator's lfu (the store's default) and lru at the run's cache size replay the store exactly, with and without evictions", async () => {
    const big = await traced("big2", "0.01");
    expect(big.hist.slots_per_layer).toBe(16); // every expert fits: only first uses miss
    expect(big.hist.cache_policy).toBe("lfu");
    const bigRow = big.sim.rows.find((r: { slots_per_layer: number }) => r.slots_per_layer === 16);
    expect(bigRow.hit_rate.lfu).toBe(big.run.resident_hit_rate);
    expect(bigRow.hit_rate.lru).toBe(big.run.resident_hit_rate);
    const tokens: number[][] = [];
    for (const policy of ["lfu", "lru"]) {
      const small = await traced(`small-${policy}`, "0.0004", ["--cache-policy", policy]);
      tokens.push(small.run.generated_ids);
      expect(small.hist.slots_per_layer).toBeLessThan(16);
      expect(small.hist.cache_policy).toBe(policy);
      expect(small.run.expert_cache_policy).toBe(policy);
      const simulated = small.sim.rows.find((r: { slots_per_layer: number }) => r.slots_per_layer === small.hist.slots_per_layer).hit_rate[policy];
      // The store decides a request's joiners in request order when the request is made, as the simulator does.
      expect(simulated, policy).toBe(small.run.resident_hit_rate);
      expect(small.sim.rows[0].hit_rate).toEqual({ lfu: 0, lru: 0, s3fifo: 0, belady: 0, pinned: 0 });
      expect(small.text).toMatch(/slots\/layer\s+cache\s+lfu\s+lru\s+s3fifo\s+belady\s+pinned\s+lfu expert reads\/token/);
      expect(small.text).toContain(`slots/layer (${policy})`);
    }
    expect(tokens[1]).toEqual(tokens[0]); // the policy moves reads, never the output
    const bad = await k3([...RUN, "--cache-policy", "arc"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--cache-policy arc: expected lfu or lru/);
  });

  it("cache-sim refuses a missing or mismatched trace, bad slots and unknown policies", async () => {
    const none = await k3(["cache-sim", "--trace", join(dir, "nope")]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/cannot read expert_hist\.json \(ENOENT\); write one with k3 run --dump-cache-trace/);
    expect((await k3(["cache-sim"])).stderr).toMatch(/--trace DIR is required/);
    const { traceDir } = await traced("bad", "0.0004");
    expect((await k3(["cache-sim", "--trace", traceDir, "--policy", "arc"])).stderr).toMatch(/--policy arc: expected some of lfu, lru, s3fifo, belady, pinned/);
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
