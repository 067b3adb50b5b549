import { describe, expect, it } from "vitest";
import { argmax, Pcg32, Sampler } from "../src/sampler.js";

describe("PCG32", () => {
  it("matches the reference pcg32 demo sequence (seed 42, stream 54)", () => {
    // pcg32-demo from the PCG C reference: pcg32_srandom_r(&rng, 42u, 54u)
    const r = new Pcg32(42, 54);
    const got = Array.from({ length: 6 }, () => r.nextU32().toString(16).padStart(8, "0"));
    expect(got).toEqual(["a15c02b7", "7b47f409", "ba1d3330", "83d2f293", "bfa4784b", "cbed606e"]);
  });
});

describe("sampler", () => {
  const logits = new Float32Array([0.1, 2.0, 1.9, -1, 2.0, 0.5]);

  it("greedy takes the first maximum", () => {
    expect(argmax(logits)).toBe(1);
    expect(new Sampler({ temperature: 0 }).sample(logits)).toBe(1);
    expect(new Sampler({ temperature: 1, topK: 1 }).sample(logits)).toBe(1);
    expect(argmax(new Float32Array([NaN, -Infinity, -5]))).toBe(2);
  });

  it("is deterministic for a seed and differs across seeds", () => {
    const run = (seed: number) => {
      const s = new Sampler({ temperature: 1.5, seed });
      return Array.from({ length: 40 }, () => s.sample(logits)).join(",");
    };
    expect(run(7)).toBe(run(7));
    expect(run(7)).not.toBe(run(8));
  });

  it("top-k and top-p restrict the candidates", () => {
    const s = new Sampler({ temperature: 5, topK: 2, seed: 1 });
    for (let i = 0; i < 200; i++) expect([1, 4]).toContain(s.sample(logits));
    const p = new Sampler({ temperature: 1, topP: 0.3, seed: 3 });
    // 1 and 4 tie at the top (prob ~0.3 each): top-p 0.3 keeps just the first of them... or both when < 0.3
    const seen = new Set(Array.from({ length: 200 }, () => p.sample(logits)));
    for (const t of seen) expect([1, 4]).toContain(t);
  });

  it("samples in proportion to the probabilities", () => {
    const two = new Float32Array([Math.log(3), 0]);
    const s = new Sampler({ temperature: 1, seed: 123 });
    let zero = 0;
    for (let i = 0; i < 4000; i++) if (s.sample(two) === 0) zero++;
    expect(zero / 4000).toBeGreaterThan(0.72);
    expect(zero / 4000).toBeLessThan(0.78);
  });

  it("rejects bad options by name", () => {
    expect(() => new Sampler({ temperature: -1 })).toThrow(/temperature = -1/);
    expect(() => new Sampler({ topP: 0 })).toThrow(/top_p = 0/);
    expect(() => new Sampler({ topK: 1.5 })).toThrow(/top_k = 1.5/);
    expect(() => new Sampler({ seed: -3 })).toThrow(/seed = -3/);
  });
});
