/**
 * Non-finite weights (issue #15): copies of tiny-k3 with one tensor damaged run to a clear error
 * naming where the NaN / infinity first appeared, and a non-zero exit, instead of exit 0 and
 * tokens sampled from garbage.
 */
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { firstNonFinite } from "../src/finite.js";
import { captureCli, patchTensor, TINY_K3 } from "./helpers.js";

const root = mkdtempSync(join(tmpdir(), "k3-nonfinite-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const P = "language_model.";
const BF16_INF = 0x7f80;
const BF16_NAN = 0x7fc0;

/** A copy of tiny-k3 whose tensor `name` has `bits` written at the given elements (all when null). */
function damaged(label: string, name: string, bits: number, elements: number[] | null): string {
  const dir = join(root, label);
  cpSync(TINY_K3, dir, { recursive: true });
  const two = Uint8Array.of(bits & 0xff, bits >>> 8); // little-endian bf16 bits
  patchTensor(dir, name, (dtype, byteLength) => {
    expect(dtype).toBe("BF16");
    return (elements ?? [...Array(byteLength / 2).keys()]).map((e): [number, Uint8Array] => [2 * e, two]);
  });
  return dir;
}

const run = (dir: string) => captureCli(["run", "--model", dir, "--ids", "1,2,3,4,5", "--max-tokens", "3", "--threads", "1"]);

describe("non-finite weights stop the run, naming the first place and the tensor", () => {
  it("firstNonFinite finds NaN, +Inf and -Inf anywhere, and nothing in finite data (largest floats included)", () => {
    const x = new Float32Array(1000).map((_, i) => (i % 7) - 3);
    x[999] = 3.4028234663852886e38;
    x[998] = -3.4028234663852886e38;
    expect(firstNonFinite(x)).toBe(-1);
    for (const v of [NaN, Infinity, -Infinity]) {
      const y = x.slice();
      y[417] = v;
      y[900] = v;
      expect(firstNonFinite(y)).toBe(417);
      expect(firstNonFinite(y, 417)).toBe(-1);
    }
  });

  it("embed_tokens all bf16 +Inf: the embedding rows, naming the row of the first token", async () => {
    const r = await run(damaged("embed-inf", P + "model.embed_tokens.weight", BF16_INF, null));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/non-finite value \(\+Inf\) in the embedding rows at position 0, element 0: model\.embed_tokens\.weight row 1 \(token id\) holds it/);
  });

  it("a post-attention norm weight NaN: layer 2's MoE output, naming the tensor and element", async () => {
    const r = await run(damaged("norm-nan", P + "model.layers.2.post_attention_layernorm.weight", BF16_NAN, [7]));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/non-finite value \(NaN\) in the hidden state after layer 2 at position 0, element \d+: the MoE output is non-finite; language_model\.model\.layers\.2\.post_attention_layernorm\.weight\[7\] = NaN/);
  });

  it("a KDA projection weight NaN (not kept as a vector in memory): named from the checkpoint", async () => {
    const r = await run(damaged("oproj-nan", P + "model.layers.2.self_attn.o_proj.weight", BF16_NAN, [300]));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/in the hidden state after layer 2 at position 0, .*: the KDA mixer's output is non-finite; language_model\.model\.layers\.2\.self_attn\.o_proj\.weight\[300\] = NaN/);
  });

  it("the final norm weight NaN: the final norm's output, naming model.norm.weight", async () => {
    const r = await run(damaged("final-nan", P + "model.norm.weight", BF16_NAN, [3]));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/non-finite value \(NaN\) in the final norm's output at position 4, element 3: language_model\.model\.norm\.weight\[3\] = NaN/);
  });

  it("lm_head NaN: the logits, naming the lm_head row and element", async () => {
    const D = 128;
    const r = await run(damaged("head-nan", P + "lm_head.weight", BF16_NAN, [5 * D + 3]));
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/non-finite value \(NaN\) in the logits at position 4, element 5: language_model\.lm_head\.weight row 5 holds it \(element 3\)/);
  });
});
