/** Teacher-forced agreement (`k3 run --tf-check`): against our own greedy runs, a doctored reference, bad input. */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { teacherForced } from "../src/teacher-forcing.js";
import { TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-tf-"));
let engine: Engine;
beforeAll(async () => {
  engine = await Engine.load(TINY_K3, { threads: 1 });
});
afterAll(() => {
  engine.close();
  rmSync(dir, { recursive: true, force: true });
});

const k3 = captureCli;

describe("teacher forcing", () => {
  it("a greedy generation agrees with itself at every position (prompts across chunk boundaries)", async () => {
    for (const [text, chunkSize] of [["hello", 64], ["a longer prompt that spans more than one small chunk", 4]] as const) {
      const prompt = engine.encodeText(text);
      const gen = await engine.complete(prompt, { maxTokens: 12 });
      expect(gen.ids.length).toBe(12);
      const r = await teacherForced(engine.model, prompt, gen.ids, { chunkSize });
      expect(r.predicted).toEqual(gen.ids);
      expect([r.agreed, r.positions, r.agreement, r.mismatches]).toEqual([12, 12, 1, []]);
    }
  });

  it("a doctored last token is the one mismatch, with both logits reported", async () => {
    const prompt = engine.encodeText("hello");
    const gen = await engine.complete(prompt, { maxTokens: 10 });
    const doctored = [...gen.ids];
    doctored[9] = (doctored[9] + 1) % engine.config.vocabSize;
    const r = await teacherForced(engine.model, prompt, doctored);
    expect([r.agreed, r.positions]).toEqual([9, 10]);
    expect(r.mismatches.length).toBe(1);
    const m = r.mismatches[0];
    expect([m.index, m.reference, m.model]).toEqual([9, doctored[9], gen.ids[9]]);
    expect(m.modelLogit).toBeGreaterThanOrEqual(m.referenceLogit);
  });

  it("k3 run --tf-check REPORT: exit 0 at full agreement, 1 below --tf-min, the JSON names the positions", async () => {
    const report = join(dir, "run.json");
    expect((await k3(["run", "--model", TINY_K3, "--prompt", "hello", "--max-tokens", "8", "--json", report, "--threads", "1", "--quiet"])).code).toBe(0);
    const ok = await k3(["run", "--model", TINY_K3, "--tf-check", report, "--threads", "1"]);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/teacher-forced agreement: 8\/8 \(100\.0%\) after a \d+-token prompt/);

    const run = JSON.parse(readFileSync(report, "utf8"));
    run.generated_ids[7] = (run.generated_ids[7] + 1) % 1024;
    const doctored = join(dir, "doctored.json");
    writeFileSync(doctored, JSON.stringify(run));
    const out = join(dir, "tf.json");
    const bad = await k3(["run", "--model", TINY_K3, "--tf-check", doctored, "--json", out, "--threads", "1"]);
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/7\/8 \(87\.5%\)/);
    expect(bad.stdout).toContain(`position 7: reference ${run.generated_ids[7]}`);
    const tf = JSON.parse(readFileSync(out, "utf8"));
    expect(tf.prompt_ids).toEqual(run.prompt_ids);
    expect(tf.mismatches.map((m: { index: number }) => m.index)).toEqual([7]);
    expect((await k3(["run", "--model", TINY_K3, "--tf-check", doctored, "--tf-min", "0.8", "--threads", "1"])).code).toBe(0);

    // Ids on the command line follow the prompt given with --ids.
    const ids = (await k3(["run", "--model", TINY_K3, "--ids", run.prompt_ids.join(","), "--tf-check", run.generated_ids.slice(0, 7).join(","), "--threads", "1"])).stdout;
    expect(ids).toMatch(/7\/7/);
  });

  it("bad references are usage errors naming what is wrong", async () => {
    const missing = await k3(["run", "--model", TINY_K3, "--tf-check", join(dir, "nope.json")]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/--tf-check .*nope\.json: not a list of ids, and not a readable JSON run report \(ENOENT\)/);
    const noIds = join(dir, "noids.json");
    writeFileSync(noIds, JSON.stringify({ prompt_ids: [1, 2] }));
    expect((await k3(["run", "--model", TINY_K3, "--tf-check", noIds])).stderr).toMatch(/has no generated_ids/);
    const wrong = join(dir, "wrong.json");
    writeFileSync(wrong, JSON.stringify({ generated_ids: [1, "x"] }));
    expect((await k3(["run", "--model", TINY_K3, "--prompt", "a", "--tf-check", wrong])).stderr).toMatch(/generated_ids must be an array of token ids/);
    const far = await k3(["run", "--model", TINY_K3, "--prompt", "a", "--tf-check", "1,999999"]);
    expect(far.code).toBe(2);
    expect(far.stderr).toMatch(/999999 is not a token id in 0\.\.1023/);
    expect((await k3(["run", "--model", TINY_K3, "--prompt", "a", "--tf-check", "1", "--tf-min", "2"])).stderr).toMatch(/--tf-min/);
  });
});
