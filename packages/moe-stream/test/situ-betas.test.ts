// The config's SiTU bounds (activation_situ_beta / _linear_beta) reach the routed and shared experts,
// not only dense layer 0: with bounds other than K3's 4 / 25 the experts' GLU must use them, and a
// SiTU expert or layer without bounds is refused (no silent 4 / 25). Against the PyTorch reference:
// moe.test.ts (moe_k3_latent situ.*).
import { describe, expect, it } from "vitest";
import { gemvF32, K3_SITU_BETAS, Linear, situGlu } from "@k3/dense";
import type { ExpertLocation } from "../src/store/checkpoint.js";
import { denseExpertCompute, mxfp4ExpertCompute } from "../src/moe/expert-compute.js";
import { MoeLayer } from "../src/moe/moe-layer.js";
import { Router } from "../src/moe/router.js";

const IN = 16, INTER = 24;

function rand(n: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32 - 0.5) * 6);
}

/** One expert with F32 w1/w3 [INTER, IN] and w2 [IN, INTER], laid out back to back as on disk. */
function expert(): { bytes: Uint8Array; loc: ExpertLocation; w1: Float32Array; w3: Float32Array; w2: Float32Array } {
  const w1 = rand(INTER * IN, 1), w3 = rand(INTER * IN, 2), w2 = rand(IN * INTER, 3);
  const all = new Float32Array([...w1, ...w3, ...w2]);
  const t = (offset: number, shape: number[]) => ({ offset: offset * 4, byteLength: shape[0] * shape[1] * 4, dtype: "F32" as const, shape });
  const loc: ExpertLocation = {
    layer: 1, id: 0, file: "memory", offset: 0, byteLength: all.byteLength,
    tensors: { "w1.weight": t(0, [INTER, IN]), "w3.weight": t(INTER * IN, [INTER, IN]), "w2.weight": t(2 * INTER * IN, [IN, INTER]) },
  };
  return { bytes: new Uint8Array(all.buffer), loc, w1, w3, w2 };
}

function reference(e: ReturnType<typeof expert>, x: Float32Array, beta: number, linearBeta: number): Float32Array {
  const g = gemvF32(e.w1, x, new Float32Array(INTER), { rows: INTER, cols: IN });
  const u = gemvF32(e.w3, x, new Float32Array(INTER), { rows: INTER, cols: IN });
  situGlu(g, u, g, beta, linearBeta);
  return gemvF32(e.w2, g, new Float32Array(IN), { rows: IN, cols: INTER });
}

describe("SiTU bounds of the experts", () => {
  it("a routed expert uses the bounds it is given", () => {
    const e = expert();
    const x = rand(IN, 9);
    const run = (situBetas: { beta: number; linearBeta: number }) => {
      const y = new Float32Array(IN);
      denseExpertCompute({ inDim: IN, interDim: INTER, activation: "situ", situBetas }).run(e.bytes, e.loc, x, 1, y);
      return y;
    };
    const custom = run({ beta: 1.5, linearBeta: 3 });
    expect(Array.from(custom)).toEqual(Array.from(reference(e, x, 1.5, 3)));
    expect(Array.from(run(K3_SITU_BETAS))).toEqual(Array.from(reference(e, x, 4, 25)));
    expect(Array.from(custom)).not.toEqual(Array.from(run(K3_SITU_BETAS))); // the bounds matter for these inputs
  });

  it("SiTU without its bounds is refused by the expert computes and the layer; SiLU needs none", () => {
    expect(() => denseExpertCompute({ inDim: IN, interDim: INTER, activation: "situ" })).toThrow(/denseExpertCompute: SiTU needs its bounds \(config activation_situ_beta/);
    expect(() => mxfp4ExpertCompute({ inDim: 32, interDim: 32 })).toThrow(/mxfp4ExpertCompute: SiTU needs its bounds/);
    expect(() => denseExpertCompute({ inDim: IN, interDim: INTER, activation: "situ", situBetas: { beta: 0, linearBeta: 25 } })).toThrow(/SiTU needs its bounds/);
    expect(() => denseExpertCompute({ inDim: IN, interDim: INTER, activation: "silu" })).not.toThrow();
    const router = new Router({ numExperts: 2, topK: 1, routedScalingFactor: 1 }, new Linear("gate", new Float32Array(2 * IN), 2, IN), null);
    const compute = denseExpertCompute({ inDim: IN, interDim: INTER, activation: "silu" });
    const experts = { request: () => ({ handles: [], async *completed() {} }) };
    expect(() => new MoeLayer({ layer: 3, hidden: IN, router, experts, compute, activation: "situ" })).toThrow(/layer 3: SiTU needs its bounds/);
    expect(() => new MoeLayer({ layer: 3, hidden: IN, router, experts, compute, activation: "silu" })).not.toThrow();
  });
});
