/** `--layers N` on a partly downloaded checkpoint: runs with the shards on disk, names the missing one otherwise. */
import { cpSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "../src/engine.js";
import { TINY_K3, captureCli } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-partial-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// tiny-k3's shards: 1 = embed + layers 0-5, 2 = layers 6-12 (part of 12), 3 = the rest of 12 + norm, lm_head.
const partial = join(dir, "tiny-k3-partial");
cpSync(TINY_K3, partial, { recursive: true });
rmSync(join(partial, "model-00002-of-00003.safetensors"));

const RUN = ["run", "--prompt", "hello", "--max-tokens", "4", "--threads", "1"];

describe("--layers N (partial shard sets)", () => {
  it("runs the first N layers from the shards on disk: the same tokens as the full checkpoint cut at N", async () => {
    const a = join(dir, "partial.json");
    const b = join(dir, "full.json");
    const r = await captureCli([...RUN, "--model", partial, "--layers", "6", "--json", a]);
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/--layers 6: running layers 0\.\.5 of 13, then the final norm and lm_head; shards not on disk are allowed; the output is NOT the model's/);
    expect((await captureCli([...RUN, "--model", TINY_K3, "--layers", "6", "--json", b, "--quiet"])).code).toBe(0);
    const [pa, fb] = [a, b].map((f) => JSON.parse(readFileSync(f, "utf8")));
    expect(pa.generated_ids.length).toBe(4);
    expect(pa.generated_ids).toEqual(fb.generated_ids);
    const whole = join(dir, "whole.json");
    expect((await captureCli([...RUN, "--model", TINY_K3, "--json", whole, "--quiet"])).code).toBe(0);
    // 6 of 13 layers is a different network (random weights: the logits differ, so do the ids here).
    expect(JSON.parse(readFileSync(whole, "utf8")).generated_ids).not.toEqual(pa.generated_ids);
  });

  it("names the missing shard: without --layers, and when a needed layer lives in it", async () => {
    const none = await captureCli([...RUN, "--model", partial]);
    expect(none.code).toBe(5);
    expect(none.stderr).toMatch(/shard "model-00002-of-00003\.safetensors" listed in weight_map does not exist/);
    const seven = await captureCli([...RUN, "--model", partial, "--layers", "7"]);
    expect(seven.code).toBe(5);
    expect(seven.stderr).toMatch(/the tensor is in shard "model-00002-of-00003\.safetensors", which is not on disk \(partial checkpoint\).*layers\.6\.input_layernorm/);
  });

  it("refuses a layer count outside 1..num_hidden_layers", async () => {
    expect((await captureCli([...RUN, "--model", TINY_K3, "--layers", "0"])).stderr).toMatch(/--layers 0: expected an integer number of layers >= 1/);
    const big = await captureCli([...RUN, "--model", TINY_K3, "--layers", "14"]);
    expect(big.code).toBe(2);
    expect(big.stderr).toMatch(/layers 14: expected an integer in 1\.\.13/);
    const e = await Engine.load(TINY_K3, { threads: 1, layers: 13 });
    expect(e.config.numLayers).toBe(13); // all of them: the full model
    e.close();
  });
});
