// k3 plan --project: the published K3's s/token per preset from a fixed report's per-kind rates.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { censusOf, kindCensus, kdaLayerBytes, mlaLayerBytes } from "../src/census.js";
import { budgetsFor, GB, planMemory, readMemInfo } from "../src/presets.js";
import { distinctExperts, formatProjection, projectK3, publishedK3, ratesFromReport } from "../src/projection.js";
import { captureCli, TINY_K3 } from "./helpers.js";
import { parseConfig } from "../src/config.js";
import { formatBytes } from "@k3/native";

const FIXTURE = join(__dirname, "fixtures", "per-kind-report.json");
const report = JSON.parse(readFileSync(FIXTURE, "utf8"));
const box = { totalBytes: 512 * GB, availableBytes: 500 * GB };

describe("published-K3 projection", () => {
  it("splits the K3 census by the report's layer kinds: 69 KDA, 24 MLA, 1 dense, 92 MoE, 16 experts/token", () => {
    const cfg = publishedK3();
    const kc = kindCensus(cfg);
    expect([kc.kda.layers, kc.mla.layers, kc.dense_mlp.layers, kc.moe_trunk.layers, kc.moe_experts.layers]).toEqual([69, 24, 1, 92, 92]);
    expect(kc.moe_experts.bytesPerLayer).toBe(16 * 17_547_264);
    expect(kc.dense_mlp.bytesPerLayer).toBe(3 * 33_792 * 7168 * 2);
    expect(kc.lm_head.bytesPerLayer).toBe(163_840 * 7168 * 2);
    // The kinds add up to the census trunk (norms and AttnRes vectors are attn_res).
    const c = censusOf(cfg);
    const trunk = 69 * kdaLayerBytes(cfg) + 24 * mlaLayerBytes(cfg) + kc.dense_mlp.bytesPerLayer + 92 * kc.moe_trunk.bytesPerLayer + 93 * kc.attn_res.bytesPerLayer;
    expect(trunk).toBe(c.trunkBytes);
  });

  it("derives each kind's compute rate: seconds less its reads at the disk ceiling; I/O-bound kinds at the memory ceiling", () => {
    const { rates, memCeilingGbps, diskCeilingGbps } = ratesFromReport(report);
    expect([memCeilingGbps, diskCeilingGbps]).toEqual([10, 2]);
    expect(rates.kda!.gbps).toBeCloseTo(8e9 / 2.0 / GB, 12); // 4 GB/s, no reads
    // 3.36 GB read at 2 GB/s = 1.68 s of the 4 s: compute 2.32 s for 3.36 GB touched.
    expect(rates.moe_experts!.gbps).toBeCloseTo(3.36 / 2.32, 12);
    expect(rates.moe_experts!.note).toMatch(/4\.000 s less 1\.680 s of reads at the disk ceiling 2\.00 GB\/s/);
    // 9.4 GB at 2 GB/s = 4.7 s > the 4 s measured: the head's compute is hidden; taken at 10 GB/s.
    expect(rates.lm_head!.gbps).toBe(10);
    expect(rates.lm_head!.note).toMatch(/I\/O-bound/);
    // A kind whose reads overlapped its compute can come out above the memory ceiling: capped.
    const fast = ratesFromReport({ ...report, per_kind: { ...report.per_kind, mla: { decode: { seconds: 0.5, bytes_touched: 8e9, bytes_read: 0, tokens: 4 } } } });
    expect(fast.rates.mla!.gbps).toBe(10);
    expect(fast.rates.mla!.note).toMatch(/16\.0 GB\/s, above the memory ceiling .* taken at 10\.00 GB\/s/);
  });

  it("projects compute = sum of K3 bytes per kind / rate, I/O = plan reads / disk, and the anchors' figures", () => {
    const { rates } = ratesFromReport(report);
    const p = projectK3({ rates, diskGbps: 7, diskSource: "test", mem: box });
    const kc = kindCensus(publishedK3());
    const want =
      (69 * kc.kda.bytesPerLayer) / (4 * GB) +
      (24 * kc.mla.bytesPerLayer) / (2 * GB) +
      kc.dense_mlp.bytesPerLayer / (5 * GB) +
      (92 * kc.moe_trunk.bytesPerLayer) / (5 * GB) +
      (92 * kc.moe_experts.bytesPerLayer) / ((3.36 / 2.32) * GB) +
      (93 * kc.attn_res.bytesPerLayer) / (1 * GB) +
      kc.lm_head.bytesPerLayer / (10 * GB) +
      // embed: 57,344 B read in 0.4 ms, 0.029 ms of it reading at 2 GB/s.
      kc.embed.bytesPerLayer / ((57344 / (0.0004 - 57344 / 2e9)) );
    expect(p.computeSeconds!).toBeCloseTo(want, 9);
    const laptop = p.rows.find((r) => r.preset === "laptop")!;
    const resident = p.rows.find((r) => r.preset === "resident")!;
    // docs/io.md §1 at 7 GB/s: 19.2 s/token with the trunk streamed, 3.7 s with it resident.
    expect(laptop.ioSeconds).toBeCloseTo(19.2, 1);
    expect(resident.ioSeconds).toBeCloseTo(3.7, 1);
    expect(laptop.overlappedSeconds).toBeCloseTo(Math.max(laptop.ioSeconds, want), 9);
    expect(laptop.serialSeconds!).toBeCloseTo(laptop.ioSeconds + want, 9);
    expect(laptop.anchor).toMatch(/26-33 s\/token/);
    expect(resident.anchor).toMatch(/5\.59 s\/token/);
    expect(formatProjection(p)).toMatch(/laptop .* kimi-k3-in-c 8 GB preset/);
    // Without rates: the I/O floor only, and the table says what is missing.
    const bare = projectK3({ rates: {}, diskGbps: 7, diskSource: "test", mem: box, presets: ["ultra"] });
    expect(bare.computeSeconds).toBeNull();
    expect(formatProjection(bare)).toMatch(/give --from-report/);
    expect(() => projectK3({ rates: {}, diskGbps: 0, diskSource: "test", mem: box })).toThrow(/--disk-gbps 0: expected a bandwidth/);
  });

  it("a streamed-run report: each kind's reads at its source's ceiling; prefill scaled by K3's bytes; I/O by source", () => {
    const streamed = {
      prompt_tokens: 64,
      prompt_cached_tokens: 0,
      per_kind: {
        // 1 KDA layer read from the packed trunk: 0.9 GB at the trunk's 3 GB/s = 0.3 s of the 1 s.
        kda: { prefill: { seconds: 0.64, bytes_touched: 0.9e9, bytes_read: 0.9e9 }, decode: { seconds: 1.0, bytes_touched: 0.9e9, bytes_read: 0.9e9, tokens: 1 } },
        // experts: 0.28 GB at the experts' 1 GB/s = 0.28 s of 0.5 s.
        moe_experts: { prefill: { seconds: 6.4, bytes_touched: 0.1e9, bytes_read: 0 }, decode: { seconds: 0.5, bytes_touched: 0.28e9, bytes_read: 0.28e9, tokens: 1 } },
      },
      floor: { mem_ceiling_gbps: 50, disk_ceiling_gbps: 1.5, prefill_tokens: 64, sources: [{ source: "trunk", ceiling_gbps: 3 }, { source: "experts", ceiling_gbps: 1 }] },
    };
    const r = ratesFromReport(streamed);
    expect(r.sourceCeilings).toEqual({ trunk: 3, experts: 1 });
    expect(r.rates.kda!.gbps).toBeCloseTo(0.9 / 0.7, 12);
    expect(r.rates.kda!.note).toMatch(/less 0\.300 s of reads at the trunk ceiling 3\.00/);
    expect(r.rates.moe_experts!.gbps).toBeCloseTo(0.28 / 0.22, 12);
    expect(r.prefillTokens).toBe(64);
    // kda prefill: (0.64 - 0.3) / 64 s per token for 0.9 GB of weights per token.
    expect(r.prefill.kda!.secondsPerTokenPerByte).toBeCloseTo((0.34 / 64) / 0.9e9, 20);
    expect(r.prefill.moe_experts!.runSecondsPerToken).toBeCloseTo(0.1, 12);
    const p = projectK3({ rates: r.rates, prefill: r.prefill, prefillT: 64, diskGbps: 1.5, sourceGbps: { trunk: 3, experts: 1 }, diskSource: "test", mem: box, presets: ["laptop"] });
    const kc = kindCensus(publishedK3());
    const kda = p.kinds.find((k) => k.kind === "kda")!;
    expect(kda.prefillSeconds!).toBeCloseTo((0.34 / 64 / 0.9e9) * 69 * kc.kda.bytesPerLayer, 9);
    expect(p.kinds.find((k) => k.kind === "moe_experts")!.prefillSeconds!).toBeCloseTo(0.1 * (92 * kc.moe_experts.bytesPerLayer) / 0.28e9, 9);
    expect(p.prefillComputeSeconds).toBeNull(); // mla etc. are not in this report
    const laptop = p.rows[0];
    const reads = planMemory(censusOf(publishedK3()), budgetsFor("laptop", censusOf(publishedK3()), box), "laptop", box, { packedTrunk: true }).expectedReads;
    expect(laptop.ioSeconds).toBeCloseTo(reads.trunk / 3e9 + reads.experts / 1e9 + reads.embedHead / 1.5e9, 9);
    // Prefill at T = 64: trunk and lm_head once per chunk, the distinct experts of 64 tokens.
    const share = distinctExperts(896, 16, 64) / (64 * 16);
    expect(share).toBeCloseTo((896 * (1 - Math.pow(1 - 16 / 896, 64))) / 1024, 12);
    expect(laptop.prefill.readBytesPerToken).toBeCloseTo(reads.trunk / 64 + reads.experts * share + (reads.embedHead > 0 ? censusOf(publishedK3()).headBytes / 64 + 7168 * 2 : 0), 0);
    expect(formatProjection(p)).toMatch(/disk trunk 3\.00, experts 1\.00, embed\/head 1\.50 GB\/s/);
  });

  it("projects prefill at --chunk T, else the report's chunk (its prompt when shorter), with the plan holding T tokens' buffers", async () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-proj-"));
    try {
      const project = async (extra: string[], rep = FIXTURE) => {
        const out = join(dir, "p.json");
        const r = await captureCli(["plan", "--published-k3", "--project", "--preset", "laptop", "--from-report", rep, "--disk-gbps", "3", "--json", out, ...extra]);
        expect(r.code).toBe(0);
        return JSON.parse(readFileSync(out, "utf8")) as ReturnType<typeof projectK3>;
      };
      const census = censusOf(publishedK3());
      for (const T of [256, 1024]) {
        const p = await project(["--chunk", String(T)]);
        expect(p.prefillT).toBe(T);
        const plan = planMemory(census, budgetsFor("laptop", census, readMemInfo()), "laptop", readMemInfo(), { packedTrunk: true, chunkSize: T });
        expect(p.rows[0].memoryBytes).toBe(plan.totalBytes);
        const r = plan.expectedReads;
        const want = r.trunk / T + r.experts * (distinctExperts(896, 16, T) / (T * 16)) + (r.embedHead > 0 ? census.headBytes / T + census.embedRowBytes : 0);
        expect(p.rows[0].prefill.readBytesPerToken).toBeCloseTo(want, 0);
      }
      // A report of a 584-token prompt run at chunk 64 projects chunks of 64, not one of 584.
      const rep = join(dir, "r.json");
      writeFileSync(rep, JSON.stringify({ ...report, chunk_size: 64, prompt_tokens: 584, prompt_cached_tokens: 0, floor: { ...report.floor, prefill_tokens: 584 } }));
      expect((await project([], rep)).prefillT).toBe(64);
      const older = { ...report, prompt_tokens: 48, prompt_cached_tokens: 0, floor: { ...report.floor, prefill_tokens: 48 } };
      delete (older as { chunk_size?: number }).chunk_size;
      writeFileSync(rep, JSON.stringify(older));
      expect((await project([], rep)).prefillT).toBe(48); // a report without chunk_size: its prompt, as before
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("without --chunk or a report, each preset's row projects the chunk its run would plan: auto's pick by memory, the named presets 64", async () => {
    const census = censusOf(publishedK3());
    for (const gb of [24, 64, 256]) {
      const mem = { totalBytes: gb * 1e9, availableBytes: gb * 0.9e9 };
      const p = projectK3({ rates: {}, diskGbps: 3, diskSource: "test", mem, presets: ["auto", "laptop"] });
      expect(p.prefillT).toBeNull();
      const [auto, laptop, resident] = p.rows;
      const pick = budgetsFor("auto", census, mem).chunkSize!;
      expect(auto.prefillT).toBe(pick);
      expect(laptop.prefillT).toBe(64);
      expect(resident.prefillT).toBe(64);
      const plan = planMemory(census, budgetsFor("auto", census, mem), "auto", mem, { packedTrunk: true });
      expect(plan.chunkSize).toBe(pick);
      expect(auto.memoryBytes).toBe(plan.totalBytes);
      const r = plan.expectedReads;
      expect(auto.prefill.readBytesPerToken).toBeCloseTo(r.trunk / pick + r.experts * (distinctExperts(896, 16, pick) / (pick * 16)) + (r.embedHead > 0 ? census.headBytes / pick + census.embedRowBytes : 0), 0);
      // --chunk (or a report's chunk) still sets every row
      const given = projectK3({ rates: {}, prefillT: 256, diskGbps: 3, diskSource: "test", mem, presets: ["auto", "laptop"] });
      expect(given.prefillT).toBe(256);
      expect(given.rows.map((x) => x.prefillT)).toEqual([256, 256, 256]);
    }
    // auto picks more than 64 on a large machine, so the rule is seen to act
    expect(budgetsFor("auto", census, { totalBytes: 256e9, availableBytes: 230e9 }).chunkSize).toBeGreaterThan(64);
    const out = await captureCli(["plan", "--published-k3", "--project", "--preset", "laptop", "--disk-gbps", "3"]);
    expect(out.code).toBe(0);
    expect(out.stdout).toMatch(/prefill at each preset's chunk: auto's pick by memory, else 64/);
    expect(out.stdout).toMatch(/^\s+laptop\s.*\s64\s/m);
  });

  it("k3 run notes a larger --chunk when a multi-chunk prompt streams experts and none was given; the report records the chunk", async () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-hint-"));
    try {
      const ids = Array.from({ length: 300 }, (_, i) => (i * 37) % 900 + 10).join(",");
      const json = join(dir, "r.json");
      // laptop: a named preset keeps the default chunk (auto may pick a larger one: below)
      const streamed = await captureCli(["run", "--model", TINY_K3, "--ids", ids, "--max-tokens", "1", "--preset", "laptop", "--cache-gb", "0", "--json", json]);
      expect(streamed.code).toBe(0);
      expect(streamed.stderr).toMatch(/note: the 300-token prompt prefills in 5 chunks of 64, each reading the experts it needs from disk; --chunk 320 reads them once per layer for .* more work buffers \(k3 plan --chunk 320\), with the same output/);
      expect(JSON.parse(readFileSync(json, "utf8")).chunk_size).toBe(64);
      const given = await captureCli(["run", "--model", TINY_K3, "--ids", ids, "--max-tokens", "1", "--cache-gb", "0", "--chunk", "64"]);
      expect(given.code).toBe(0);
      expect(given.stderr).not.toMatch(/note: the .*-token prompt prefills/);
      // auto (the default preset): the report's chunk is the one its printed plan names
      const auto = await captureCli(["run", "--model", TINY_K3, "--ids", ids, "--max-tokens", "1", "--json", json]);
      expect(auto.code).toBe(0);
      const planned = Number(/prefill chunk: (\d+) tokens/.exec(auto.stderr)?.[1]);
      expect([64, 128, 256, 512, 1024]).toContain(planned);
      expect(JSON.parse(readFileSync(json, "utf8")).chunk_size).toBe(planned);
      const cached = await captureCli(["run", "--model", TINY_K3, "--ids", ids, "--max-tokens", "1", "--preset", "desktop"]);
      expect(cached.code).toBe(0);
      expect(cached.stderr).not.toMatch(/note: the .*-token prompt prefills/); // every expert has a cache slot
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses a report without per_kind or with a bad figure, naming it", () => {
    expect(() => ratesFromReport({})).toThrow(/no per_kind figures/);
    expect(() => ratesFromReport({ per_kind: { kda: { decode: { seconds: -1, bytes_touched: 1, bytes_read: 0, tokens: 1 } } } })).toThrow(/per_kind\.kda\.decode\.seconds is -1/);
    expect(() => ratesFromReport({ per_kind: { mla: { decode: { seconds: 1, bytes_touched: 1, bytes_read: 0 } } } })).toThrow(/per_kind\.mla\.decode\.tokens/);
  });

  it("k3 plan --published-k3 --project --from-report --disk-gbps 7 prints the table; k3 plan --model prints the run's plan", async () => {
    const r = await captureCli(["plan", "--published-k3", "--project", "--from-report", FIXTURE, "--disk-gbps", "7"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/projection for Kimi K3 \(93 layers: 69 KDA, 24 MLA, 1 dense, 92 MoE, 16 experts\/token\), disk 7\.00 GB\/s/);
    expect(r.stdout).toMatch(/resident .* 25\.84 GB .* 3\.69/);
    const m = await captureCli(["plan", "--model", TINY_K3, "--preset", "ultra"]);
    expect(m.code).toBe(0);
    expect(m.stdout).toMatch(/memory plan \(ultra\)/);
    expect(m.stdout).toMatch(/expected read per decoded token \(cold cache\): .* = trunk 0 B \+ experts/);
    // --chunk above 64 plans its work buffers: runtime + scratch grows by (chunk - 64) tokens' worth.
    expect(m.stdout).toMatch(/runtime \+ scratch\s+250\.00 MB/);
    const big = await captureCli(["plan", "--model", TINY_K3, "--preset", "ultra", "--chunk", "4096"]);
    expect(big.code).toBe(0);
    const perToken = censusOf(parseConfig(JSON.parse(readFileSync(join(TINY_K3, "config.json"), "utf8")))).chunkScratchBytesPerToken;
    expect(big.stdout).toContain(`runtime + scratch       ${formatBytes(0.25 * GB + 4032 * perToken)}`);
    expect((await captureCli(["plan", "--project"])).code).toBe(2);
  });
});
