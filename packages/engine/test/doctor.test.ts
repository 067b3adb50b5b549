import { cpSync, mkdtempSync, readFileSync, truncateSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runDoctor } from "../src/doctor.js";
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
    expect(r.ok).toBe(false);
    expect(r.text).toMatch(/FAIL {2}.*model-00002-of-00003.safetensors: size \d+ but the header says \d+/);
    expect(r.text).toMatch(/FAIL {2}tiktoken.model is missing/);
  });

  it("checks the machine without a model", async () => {
    const r = await doctor(null);
    expect(r.ok).toBe(true);
    expect(r.text).toMatch(/SIMD: using/);
  });
});
