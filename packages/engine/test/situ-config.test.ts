/**
 * The config's SiTU bounds (activation_situ_beta / activation_situ_linear_beta) reach every GLU of
 * the model: dense layer 0, and the shared and routed experts of every MoE layer (they were 4 / 25
 * there whatever the config said). The experts' output with other bounds is checked against the
 * PyTorch reference in @k3/moe-stream (moe.test.ts, moe_k3_latent situ.*); here, that the model
 * hands the config's values to each of them and that they change the logits.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GluMlp } from "@k3/dense";
import { MoeFfn } from "../src/layers/moe.js";
import { Model } from "../src/model.js";
import { TINY_K3 } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "k3-situ-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("SiTU bounds from the config", () => {
  it("reach dense layer 0 and every MoE layer's shared and routed experts, and move the logits", async () => {
    cpSync(TINY_K3, dir, { recursive: true });
    const cfgFile = join(dir, "config.json");
    const raw = JSON.parse(readFileSync(cfgFile, "utf8"));
    raw.text_config.activation_situ_beta = 1.5;
    raw.text_config.activation_situ_linear_beta = 3;
    writeFileSync(cfgFile, JSON.stringify(raw));
    const k3 = Model.load(TINY_K3);
    const other = Model.load(dir);
    try {
      const layers = (other as unknown as { layers: ({ ffn: GluMlp | MoeFfn } | null)[] }).layers.filter((l) => l !== null);
      let moe = 0;
      for (const L of layers) {
        if (L!.ffn instanceof MoeFfn) {
          moe++;
          expect(L!.ffn.layer.opts.situBetas).toEqual({ beta: 1.5, linearBeta: 3 });
        } else {
          expect(L!.ffn).toBeInstanceOf(GluMlp);
          expect((L!.ffn as GluMlp).betas).toEqual({ beta: 1.5, linearBeta: 3 });
        }
      }
      expect(moe).toBeGreaterThan(0);
      const ids = [1, 2, 3, 4];
      const a = await k3.forward(ids, k3.newState());
      const b = await other.forward(ids, other.newState());
      let diff = 0;
      for (let i = 0; i < a.length; i++) diff = Math.max(diff, Math.abs(a[i] - b[i]));
      expect(diff).toBeGreaterThan(1e-3);
    } finally {
      k3.close();
      other.close();
    }
  });
});
