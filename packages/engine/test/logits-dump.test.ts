/** `k3 run --dump-logits` and `k3 compare-logits`: the file holds exactly the sampled-from logits; comparisons and refusals. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SafetensorsWriter } from "@k3/safetensors";
import { Engine } from "../src/engine.js";
import { compareLogits, readLogits } from "../src/logits-dump.js";
import { TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-logits-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const k3 = captureCli;

const RUN = ["run", "--model", TINY_K3, "--prompt", "hello", "--max-tokens", "6", "--quiet"];

describe("logits dumps", () => {
  it("hold exactly the logits each token was sampled from, and the sampled ids", async () => {
    const file = join(dir, "a.safetensors");
    expect((await k3([...RUN, "--threads", "1", "--dump-logits", file])).code).toBe(0);
    const dump = readLogits(file);
    const engine = await Engine.load(TINY_K3, { threads: 1 });
    try {
      const rows: Float32Array[] = [];
      const prompt = dump.promptIds!;
      const r = await engine.complete(prompt, { maxTokens: 6, onLogits: (l) => rows.push(l.slice()) });
      expect(dump.ids).toEqual([...r.ids, ...(r.stopId !== null ? [r.stopId] : [])]);
      expect(dump.steps).toBe(rows.length);
      expect(dump.vocab).toBe(engine.config.vocabSize);
      for (let s = 0; s < rows.length; s++) expect(Buffer.from(dump.row(s).buffer, dump.row(s).byteOffset, dump.row(s).byteLength).equals(Buffer.from(rows[s].buffer))).toBe(true);
    } finally {
      engine.close();
    }
  });

  it("compare-logits: 1 vs 2 threads bit-identical (exit 0); chunked vs recurrent KDA prefill close, same argmax", async () => {
    const [a, b, c] = ["t1", "t2", "rec"].map((n) => join(dir, `${n}.safetensors`));
    expect((await k3([...RUN, "--threads", "1", "--dump-logits", a])).code).toBe(0);
    expect((await k3([...RUN, "--threads", "2", "--dump-logits", b])).code).toBe(0);
    expect((await k3([...RUN, "--threads", "1", "--kda-core", "recurrent", "--dump-logits", c])).code).toBe(0);
    const same = await k3(["compare-logits", a, b]);
    expect(same.code).toBe(0);
    expect(same.stdout).toMatch(/bit-identical/);
    const close = await k3(["compare-logits", a, c, "--json", join(dir, "cmp.json")]);
    expect(close.code).toBe(0);
    expect(close.stdout).toMatch(/argmax agrees at every step/);
    const cmp = compareLogits(readLogits(a), readLogits(c));
    expect(cmp.identical).toBe(false); // the chunked WY/UT prefill differs in the last bits...
    expect(cmp.worstRelL2).toBeLessThan(1e-4); // ...and only there
  });

  it("a changed argmax or a too-large difference exits 1; different prompts and non-dumps are refused", async () => {
    const ref = readLogits(join(dir, "t1.safetensors"));
    // A doctored copy: step 2's runner-up lifted above the winner.
    const doctored = join(dir, "doctored.safetensors");
    const w = new SafetensorsWriter(doctored, { metadata: { format: "k3-logits-v1", prompt_ids: JSON.stringify(ref.promptIds) }, fsync: false });
    for (let s = 0; s < ref.steps; s++) {
      const row = ref.row(s).slice();
      if (s === 2) {
        const top = row.indexOf(Math.max(...row));
        row[(top + 1) % row.length] = row[top] + 1;
      }
      w.add(`logits.${s}`, "F32", [row.length], row);
    }
    w.add("ids", "I32", [ref.steps], Int32Array.from(ref.ids));
    w.finish();
    const bad = await k3(["compare-logits", join(dir, "t1.safetensors"), doctored]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/argmax first differs at step 2/);
    // Same argmax everywhere but a tolerance tighter than the chunked/recurrent difference.
    expect((await k3(["compare-logits", join(dir, "t1.safetensors"), join(dir, "rec.safetensors"), "--rtol", "0"])).code).toBe(1);

    const other = join(dir, "other.safetensors");
    expect((await k3(["run", "--model", TINY_K3, "--prompt", "goodbye", "--max-tokens", "2", "--quiet", "--threads", "1", "--dump-logits", other])).code).toBe(0);
    const diff = await k3(["compare-logits", join(dir, "t1.safetensors"), other]);
    expect(diff.code).toBe(2);
    expect(diff.stderr).toMatch(/were made from different prompts/);
    const notDump = await k3(["compare-logits", join(dir, "t1.safetensors"), join(TINY_K3, "model-00001-of-00003.safetensors")]);
    expect(notDump.code).toBe(2);
    expect(notDump.stderr).toMatch(/no "ids" tensor \(not a logits dump/);
    expect((await k3(["compare-logits", join(dir, "t1.safetensors")])).stderr).toMatch(/give two files \(got 1\)/);
    expect((await k3(["compare-logits", join(dir, "missing.safetensors"), other])).code).toBe(2);
  });
});
