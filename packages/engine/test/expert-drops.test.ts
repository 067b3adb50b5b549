/**
 * A routed expert whose bytes cannot be used (here: MXFP4 scales poked to 0xFF on disk, the way a
 * corrupt shard looks) is dropped: the run finishes, the report lists it, and `k3` exits 4 — the
 * reference engine's contract (docs/io.md §8). --on-expert-error fail stops at once with exit 1.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { TINY_K3, captureCli, patchTensor } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-drops-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const LAYER = 1;

/** Writes 0xFF into byte 0 of every `w2.weight_scale` of the layer's experts, in place. Returns how many. */
function corruptLayerScales(model: string, layer: number): number {
  const index = JSON.parse(readFileSync(join(model, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
  const suffix = /\.experts\.\d+\.w2\.weight_scale$/;
  const prefix = `language_model.model.layers.${layer}.block_sparse_moe.`;
  let poked = 0;
  for (const name of Object.keys(index.weight_map)) {
    if (!name.startsWith(prefix) || !suffix.test(name)) continue;
    patchTensor(model, name, () => [[0, Uint8Array.of(0xff)]]);
    poked++;
  }
  return poked;
}

const corrupt = join(dir, "tiny-k3-corrupt");
cpSync(TINY_K3, corrupt, { recursive: true });
const poked = corruptLayerScales(corrupt, LAYER);

const k3 = captureCli;

describe("dropped experts", () => {
  it("the fixture really has its layer-1 expert scales corrupted (16 experts)", () => {
    expect(poked).toBe(16);
  });

  it("k3 run finishes, reports every drop (layer, expert, reason) and exits 4", async () => {
    const json = join(dir, "dropped.json");
    const r = await k3(["run", "--model", corrupt, "--prompt", "hello", "--max-tokens", "4", "--json", json, "--threads", "1"]);
    expect(r.code).toBe(4);
    const report = JSON.parse(readFileSync(json, "utf8"));
    // Every layer-1 expert is corrupt, so every expert layer 1 routes to is dropped: each prefill
    // chunk's union (4..16 experts) plus 4 per decode forward (3 of them; the 4th token comes out
    // of the last).
    expect(report.generated_ids.length).toBe(4);
    const chunks = Math.ceil(report.prompt_tokens / 64);
    expect(report.expert_drops).toBeGreaterThanOrEqual(4 * chunks + 3 * 4);
    expect(report.expert_drops).toBeLessThanOrEqual(16 * chunks + 3 * 4);
    expect(report.expert_drop_details.length).toBe(Math.min(32, report.expert_drops));
    for (const d of report.expert_drop_details) {
      expect(d.layer).toBe(LAYER);
      expect(d.expert).toBeGreaterThanOrEqual(0);
      expect(d.reason).toMatch(new RegExp(`layer ${LAYER} expert ${d.expert} w2\\.weight_scale: scale 0xFF`));
    }
    expect(r.stderr).toMatch(/DROPPED layer 1 expert \d+ \(\d+ token\(s\)\): .*scale 0xFF/);
    expect(r.stderr).toContain(`${report.expert_drops} routed expert(s) were dropped`);
  });

  it("--on-expert-error fail stops at the first bad expert with exit 1, naming it", async () => {
    const r = await k3(["run", "--model", corrupt, "--prompt", "hello", "--max-tokens", "4", "--on-expert-error", "fail", "--threads", "1"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/layer 1 expert \d+ w2\.weight_scale: scale 0xFF/);
    const bad = await k3(["run", "--model", corrupt, "--prompt", "hello", "--on-expert-error", "skip"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--on-expert-error skip: expected drop or fail/);
  });

  it("the server flags the reply (x_k3.expert_drops) and logs the first drop; a clean reply has no such field", async () => {
    const { WorkerBackend } = await import("../src/backend.js");
    const { startServer } = await import("../src/server.js");
    const backend = await WorkerBackend.start({ dir: corrupt, options: { threads: 1, preset: "laptop" } }, new URL("../src/worker.ts", import.meta.url));
    const logs: string[] = [];
    backend.onLog = (l) => logs.push(l);
    const s = await startServer(backend, { port: 0 });
    try {
      const res = await fetch(s.url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "hello", max_tokens: 3 }) });
      const body: any = await res.json();
      expect(res.status).toBe(200);
      expect(body.x_k3.expert_drops).toBeGreaterThanOrEqual(4);
      expect(logs.join("\n")).toMatch(/routed expert\(s\) dropped, the reply is not the model's \(first: layer 1 expert \d+: .*scale 0xFF/);
    } finally {
      await s.close();
      await backend.close();
    }
    const clean = await WorkerBackend.start({ dir: TINY_K3, options: { threads: 1, preset: "laptop" } }, new URL("../src/worker.ts", import.meta.url));
    const s2 = await startServer(clean, { port: 0 });
    try {
      const body: any = await (await fetch(s2.url + "/v1/completions", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "hello", max_tokens: 3 }) })).json();
      expect(body.x_k3).toBeUndefined();
    } finally {
      await s2.close();
      await clean.close();
    }
  });

  it("a clean checkpoint drops nothing; the dropped run's output is a different, flagged one", async () => {
    const clean = await Engine.load(TINY_K3, { threads: 1 });
    const broken = await Engine.load(corrupt, { threads: 1 });
    try {
      const prompt = clean.encodeText("hello");
      const a = await clean.complete(prompt, { maxTokens: 4 });
      const b = await broken.complete(prompt, { maxTokens: 4 });
      expect(a.report.expert_drops).toBe(0);
      expect(a.report.expert_drop_details).toEqual([]);
      expect(b.report.expert_drops).toBeGreaterThanOrEqual(4 + 3 * 4);
      expect(b.report.expert_drop_details.every((d) => d.layer === LAYER)).toBe(true);
      // Layer 1's routed mix lost all its experts: the hidden state differs, so (with these random
      // weights) at least the logits differ; the ids may or may not, so compare the first logits.
      const la = await clean.model.forward(prompt, clean.newState());
      const lb = await broken.model.forward(prompt, broken.newState());
      expect(Buffer.from(la.buffer).equals(Buffer.from(lb.buffer))).toBe(false);
    } finally {
      clean.close();
      broken.close();
    }
  });
});
