import { cpSync, mkdtempSync, readFileSync, truncateSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { PROBE_QUEUE_DEPTH, probeDisk, probeReads, runDoctor } from "../src/doctor.js";
import { TINY_K3 } from "./helpers.js";

async function doctor(dir: string | null) {
  const lines: string[] = [];
  const ok = await runDoctor({ dir, probeBytes: 1e6, out: (l) => lines.push(l) });
  return { ok, text: lines.join("\n") };
}

describe("k3 doctor", () => {
  it("passes the tiny checkpoint and suggests a preset", async () => {
    const r = await doctor(TINY_K3);
    expect(r.ok).toBe(true);
    expect(r.text).toMatch(/ok {4}RAM: .* suggested --preset \w+/);
    expect(r.text).toMatch(/3 shards, .*: every size matches its header/);
    expect(r.text).toMatch(/config: k3, 13 layers \(4 MLA\)/);
    // the chunk auto would plan, the same figure k3 run --preset auto prints
    const { budgetsFor, readMemInfo } = await import("../src/presets.js");
    const { censusOf } = await import("../src/census.js");
    const { readConfig } = await import("../src/config.js");
    const chunk = Number(/ok {4}prefill chunk: --preset auto plans (\d+) tokens for this model on this machine/.exec(r.text)?.[1]);
    expect([64, 128, 256, 512, 1024]).toContain(chunk);
    expect(chunk).toBe(budgetsFor("auto", censusOf(readConfig(TINY_K3)), readMemInfo()).chunkSize);
  });

  it("fails a truncated shard and a missing tokenizer, naming them", async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "k3-doctor-")), "m");
    cpSync(TINY_K3, dir, { recursive: true });
    const shard = join(dir, "model-00002-of-00003.safetensors");
    truncateSync(shard, statSync(shard).size - 100);
    writeFileSync(join(dir, "tiktoken.model.bak"), readFileSync(join(dir, "tiktoken.model")));
    const { rmSync } = await import("node:fs");
    rmSync(join(dir, "tiktoken.model"));
    const r = await doctor(dir);
    rmSync(join(dir, ".."), { recursive: true, force: true });
    expect(r.ok).toBe(false);
    expect(r.text).toMatch(/FAIL {2}.*model-00002-of-00003.safetensors: size \d+ but the header says \d+/);
    expect(r.text).toMatch(/FAIL {2}tiktoken.model is missing/);
  });

  it("checks the machine without a model", async () => {
    const r = await doctor(null);
    expect(r.ok).toBe(true);
    expect(r.text).toMatch(/SIMD: using/);
  });

  it("probes the disk with the engine's pattern: distinct expert-sized O_DIRECT reads at the store's depth", async () => {
    const { rmSync } = await import("node:fs");
    const dir = mkdtempSync(join(tmpdir(), "k3-doctor-probe-"));
    try {
      // Sparse shards (free on disk): the probe's pattern and engine, not the drive, are under test.
      const files = [join(dir, "a.safetensors"), join(dir, "b.safetensors")];
      for (const f of files) {
        writeFileSync(f, "");
        truncateSync(f, 10 * 17_547_264 + 12345);
      }
      const { reads, pattern } = probeReads(null, files, 8 * 17_547_264);
      expect(pattern).toBe("ranges");
      expect(reads).toHaveLength(8);
      expect(new Set(reads.map((r) => `${r.file}:${r.offset}`)).size).toBe(8);
      for (const r of reads) {
        expect(r.length).toBe(17_547_264);
        expect(r.offset % 4096).toBe(0);
        expect(r.offset + r.length).toBeLessThanOrEqual(statSync(r.file).size);
      }
      const p = probeDisk(null, files, 4 * 17_547_264)!;
      expect(p.reads).toBe(4);
      expect(p.readBytes).toBe(4 * 17_547_264);
      expect(["io_uring", "pread"]).toContain(p.engine.engine);
      expect(p.engine.gbPerSec).toBeGreaterThan(0);
      expect(p.ceiling.gbPerSec).toBeGreaterThan(0);
      expect(PROBE_QUEUE_DEPTH).toBe(16);
      // Files smaller than one expert read: nothing to probe.
      expect(probeDisk(null, [join(TINY_K3, "model-00001-of-00003.safetensors")], 1e9)).toBeNull();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
