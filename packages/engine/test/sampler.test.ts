import { describe, expect, it } from "vitest";
import { argmax, logprobsOf, Pcg32, Sampler, sortByLogit } from "../src/sampler.js";

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
    // A flat draw (the highest temperature any caller may ask for: options.ts MAX_TEMPERATURE).
    const s = new Sampler({ temperature: 2, topK: 2, seed: 1 });
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

describe("presence / frequency penalties (OpenAI's formula)", () => {
  it("lowers each generated token's logit by count * frequency + presence, on a copy", () => {
    const s = new Sampler({ temperature: 1, presencePenalty: 0.5, frequencyPenalty: 0.25, seed: 1 });
    const logits = Float32Array.from([1, 2, 3, 4]);
    expect(s.adjust(logits)).toBe(logits); // nothing generated yet: the row itself
    s.accept(2);
    s.accept(2);
    s.accept(0);
    const row = s.adjust(logits);
    // Hand-computed: id 0 once: 1 - 0.25 - 0.5 = 0.25; id 2 twice: 3 - 0.5 - 0.5 = 2.
    expect(Array.from(row)).toEqual([0.25, 2, 2, 4]);
    expect(Array.from(logits)).toEqual([1, 2, 3, 4]);
  });

  it("a negative presence penalty favours repeats; zero penalties leave the row alone", () => {
    const s = new Sampler({ presencePenalty: -2 });
    s.accept(0);
    const row = Float32Array.from([1, 2.5]);
    expect(s.sample(s.adjust(row))).toBe(0); // 3 > 2.5
    const plain = new Sampler({});
    plain.accept(1);
    expect(plain.adjust(row)).toBe(row);
  });

  it("refuses penalties outside [-2, 2] naming the field", () => {
    expect(() => new Sampler({ presencePenalty: 2.5 })).toThrow(/presence_penalty = 2.5: expected a number in \[-2, 2\]/);
    expect(() => new Sampler({ frequencyPenalty: Number.NaN })).toThrow(/frequency_penalty/);
  });

  it("seeded draws with penalties repeat exactly", () => {
    const draw = () => {
      const s = new Sampler({ temperature: 0.8, topP: 0.9, seed: 42, presencePenalty: 0.7, frequencyPenalty: 0.3 });
      const out: number[] = [];
      const base = Float32Array.from({ length: 50 }, (_, i) => Math.sin(i) * 3);
      for (let k = 0; k < 40; k++) {
        const id = s.sample(s.adjust(base));
        s.accept(id);
        out.push(id);
      }
      return out;
    };
    const a = draw();
    expect(draw()).toEqual(a);
    // The penalties spread the draws: no token dominates 40 draws from a fixed row.
    expect(new Set(a).size).toBeGreaterThan(5);
  });
});

describe("logprobsOf", () => {
  it("is the log-softmax (hand-computed) with the top ids in order, masked ids left out", () => {
    const row = Float32Array.from([0, Math.log(3), -Infinity, Math.log(6)]);
    // softmax = [1, 3, 0, 6] / 10
    const r = logprobsOf(row, 1, 3);
    expect(r.logprob).toBeCloseTo(Math.log(0.3), 6);
    expect(r.top.map((t) => t.id)).toEqual([3, 1, 0]);
    expect(r.top[0].logprob).toBeCloseTo(Math.log(0.6), 6);
    expect(r.top[2].logprob).toBeCloseTo(Math.log(0.1), 6);
    expect(logprobsOf(row, 2, 10).logprob).toBe(-Infinity);
    expect(logprobsOf(row, 2, 10).top).toHaveLength(3);
    expect(logprobsOf(row, 0).top).toEqual([]);
  });
});

describe("sortByLogit", () => {
  it("gives exactly the comparator sort's order (ties, -0/+0, huge and tiny logits, infinities)", () => {
    const rng = new Pcg32(3, 4);
    for (let trial = 0; trial < 30; trial++) {
      const n = 1 + Math.floor(rng.nextUnit() * 5000);
      const special = [0, -0, 1e-42, -1e-42, 3.4e38, -3.4e38, Infinity, 1, -1, 0.5];
      const logits = Float32Array.from({ length: n }, () => (rng.nextUnit() < 0.3 ? special[Math.floor(rng.nextUnit() * special.length)] : Math.round((rng.nextUnit() - 0.5) * 40) / 4));
      const ids = Array.from({ length: n }, (_, i) => i);
      const want = [...ids].sort((a, b) => logits[b] - logits[a] || a - b);
      expect(Array.from(sortByLogit(logits, ids))).toEqual(want);
    }
  });
});

describe("logit_bias", () => {
  it("adds each bias to its logit (hand-computed), with the penalties after it; bad maps are refused naming the key", () => {
    const s = new Sampler({ logitBias: { 0: 5, 2: -100 }, presencePenalty: 1 });
    const row = Float32Array.from([1, 2, 3]);
    expect(Array.from(s.adjust(row))).toEqual([6, 2, -97]);
    s.accept(0);
    expect(Array.from(s.adjust(row))).toEqual([5, 2, -97]);
    expect(s.sample(s.adjust(row))).toBe(0);
    expect(() => new Sampler({ logitBias: { 1: 101 } })).toThrow(/logit_bias\[1\] = 101: expected a number in \[-100, 100\]/);
    expect(() => new Sampler({ logitBias: { x: 1 } as never })).toThrow(/logit_bias: key "x" is not a token id/);
    expect(() => new Sampler({ logitBias: { 7: 1 } }).adjust(row)).toThrow(/token id 7 is not in the vocabulary \(0\.\.2\)/);
  });
});
