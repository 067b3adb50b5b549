import { execFileSync, spawn } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { censusOf } from "../src/census.js";
import { configFingerprint, parseConfig, readConfig, checkTokenizerMatch, isMoeLayer } from "../src/config.js";
import { ConfigError } from "../src/errors.js";
import { publishedK3Config, rawConfig, TINY_48B, TINY_K3 } from "./helpers.js";
import { publishedKimiLinearConfig } from "../src/published.js";

function problemsOf(raw: unknown): string[] {
  try {
    parseConfig(raw);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error("expected a ConfigError");
}

describe("config reader", () => {
  it("reads the tiny K3 (nested) config", () => {
    const c = readConfig(TINY_K3);
    expect(c.family).toBe("k3");
    expect(c.tensorPrefix).toBe("language_model.");
    expect(c.layerKinds.map((k) => (k === "kda" ? "K" : "M")).join("")).toBe("KKKMKKKMKKKMM");
    expect(c.attnResBlockSize).toBe(3);
    expect(c.kda.gateLowerBound).toBe(-5);
    expect(c.kda.fullRankGate).toBe(true);
    expect(c.mla.qLoraRank).toBe(64);
    expect(c.mla.outputGate).toBe(true);
    expect(c.moe.latentDim).toBe(64);
    expect(c.moe.mxfp4).toBe(true);
    expect(c.hiddenAct).toBe("situ");
    expect([c.situBeta, c.situLinearBeta]).toEqual([4, 25]);
    expect(isMoeLayer(c, 0)).toBe(false);
    expect(isMoeLayer(c, 1)).toBe(true);
  });

  it("reads the tiny Kimi-Linear (flat) config", () => {
    const c = readConfig(TINY_48B);
    expect(c.family).toBe("kimi-linear");
    expect(c.tensorPrefix).toBe("");
    expect(c.layerKinds.map((k) => (k === "kda" ? "K" : "M")).join("")).toBe("KKKMKKM");
    expect(c.attnResBlockSize).toBeNull();
    expect(c.kda.gateLowerBound).toBeNull();
    expect(c.mla.qLoraRank).toBeNull();
    expect(c.moe.routedScalingFactor).toBe(2.446);
    expect(c.moe.mxfp4).toBe(false);
  });

  it("lists every missing key in one error", () => {
    const raw = rawConfig(TINY_48B);
    delete raw.hidden_size;
    delete raw.routed_scaling_factor;
    delete raw.linear_attn_config.full_attn_layers;
    const p = problemsOf(raw);
    expect(p.some((x) => x.includes("hidden_size is missing"))).toBe(true);
    expect(p.some((x) => x.includes("routed_scaling_factor is missing"))).toBe(true);
    expect(p.some((x) => x.includes("full_attn_layers is missing"))).toBe(true);
    expect(p.length).toBeGreaterThanOrEqual(3);
  });

  it("refuses a zero-based layer list", () => {
    const raw = rawConfig(TINY_K3);
    raw.text_config.linear_attn_config.full_attn_layers = [3, 7, 11, 12, 0];
    delete raw.text_config.linear_attn_config.kda_layers;
    expect(problemsOf(raw).join("\n")).toMatch(/ONE-based/);
  });

  it("refuses layers out of range and a kda_layers list that is not the complement", () => {
    const raw = rawConfig(TINY_K3);
    raw.text_config.linear_attn_config.full_attn_layers = [4, 8, 12, 14];
    const p = problemsOf(raw).join("\n");
    expect(p).toMatch(/\[14\] outside 1\.\.13/);
    const raw2 = rawConfig(TINY_K3);
    raw2.text_config.linear_attn_config.kda_layers = [1, 2, 3];
    expect(problemsOf(raw2).join("\n")).toMatch(/kda_layers is not the complement/);
  });

  it("refuses top-k above the expert count", () => {
    const raw = rawConfig(TINY_K3);
    raw.text_config.num_experts_per_token = 17;
    expect(problemsOf(raw).join("\n")).toMatch(/num_experts_per_token = 17 exceeds num_experts = 16/);
  });

  it("refuses inconsistent token ids between the two levels", () => {
    const raw = rawConfig(TINY_K3);
    raw.eos_token_id = 769;
    expect(problemsOf(raw).join("\n")).toMatch(/eos_token_id: top level says 769 but text_config says 770/);
  });

  it("refuses K3 without its K3-only keys, unknown activations and grouped routing", () => {
    const raw = rawConfig(TINY_K3);
    delete raw.text_config.attn_res_block_size;
    delete raw.text_config.linear_attn_config.gate_lower_bound;
    raw.text_config.hidden_act = "gelu";
    raw.text_config.num_expert_group = 4;
    const p = problemsOf(raw).join("\n");
    expect(p).toMatch(/attn_res_block_size is missing/);
    expect(p).toMatch(/gate_lower_bound is missing/);
    expect(p).toMatch(/hidden_act = "gelu"/);
    expect(p).toMatch(/num_expert_group = 4/);
  });

  it("refuses hostile JSON shapes without crashing", () => {
    expect(problemsOf(null)).toEqual(["the top level must be a JSON object"]);
    expect(problemsOf([1, 2])).toEqual(["the top level must be a JSON object"]);
    expect(problemsOf({ text_config: "x" })).toEqual(["text_config must be an object"]);
    const p = problemsOf({ hidden_size: "7168", num_hidden_layers: -1, linear_attn_config: { full_attn_layers: "4,8" } });
    expect(p.join("\n")).toMatch(/hidden_size = "7168"/);
    expect(p.join("\n")).toMatch(/num_hidden_layers = -1/);
    expect(p.join("\n")).toMatch(/full_attn_layers: expected a list of integers/);
  });

  it("bounds every numeric field, finite and in range, naming it (1e400 parses as Infinity)", () => {
    const cases: [string, (raw: any) => void, RegExp][] = [
      ["routed_scaling_factor", (r) => (r.text_config.routed_scaling_factor = JSON.parse("1e400")), /text_config\.routed_scaling_factor = Infinity: expected a number in \(0, 1000\]/],
      ["attn_res_block_size", (r) => (r.text_config.attn_res_block_size = 1e9), /text_config\.attn_res_block_size = 1000000000: expected an integer in 1\.\.1024/],
      ["max_position_embeddings", (r) => (r.text_config.max_position_embeddings = 1e300), /text_config\.max_position_embeddings = 1e\+300: expected an integer in 1\.\.16777216/],
      ["num_hidden_layers", (r) => (r.text_config.num_hidden_layers = 1e9), /text_config\.num_hidden_layers = 1000000000: expected an integer in 1\.\.1024/],
      ["hidden_size 1e308", (r) => (r.text_config.hidden_size = 1e308), /text_config\.hidden_size = 1e\+308: expected an integer in 1\.\.65536/],
      ["hidden_size 2^53", (r) => (r.text_config.hidden_size = 2 ** 53), /text_config\.hidden_size = 9007199254740992: expected an integer/],
      ["activation_situ_beta", (r) => (r.text_config.activation_situ_beta = JSON.parse("1e400")), /activation_situ_beta = Infinity/],
      ["gate_lower_bound", (r) => (r.text_config.linear_attn_config.gate_lower_bound = JSON.parse("-1e400")), /gate_lower_bound = -Infinity/],
      ["vocab_size", (r) => (r.text_config.vocab_size = 2 ** 40), /vocab_size = 1099511627776: expected an integer in 1\.\.4194304/],
      ["num_experts", (r) => (r.text_config.num_experts = 1e12), /num_experts = 1000000000000/],
      ["intermediate_size", (r) => (r.text_config.intermediate_size = 1e15), /intermediate_size = 1000000000000000/],
      ["kv_lora_rank", (r) => (r.text_config.kv_lora_rank = 1e7), /kv_lora_rank = 10000000/],
      ["num_heads", (r) => (r.text_config.linear_attn_config.num_heads = 1e6), /linear_attn_config\.num_heads = 1000000/],
      ["rms_norm_eps", (r) => (r.text_config.rms_norm_eps = JSON.parse("1e400")), /rms_norm_eps = Infinity/],
    ];
    for (const [name, edit, want] of cases) {
      const raw = rawConfig(TINY_K3);
      edit(raw);
      expect(problemsOf(raw).join("\n"), name).toMatch(want);
    }
    // The published configs stay inside the bounds.
    expect(() => parseConfig(publishedK3Config())).not.toThrow();
    expect(() => parseConfig(publishedKimiLinearConfig())).not.toThrow();
  });

  it("refuses a FIFO as config.json instead of hanging", () => {
    const dir = mkdtempSync(join(tmpdir(), "k3-fifo-"));
    try {
      execFileSync("mkfifo", [join(dir, "config.json")]);
      // A writer that closes the FIFO after 1 s without writing: a reader that blocks (the old
      // code) then ends with an empty file instead of hanging the test run.
      const writer = spawn("sh", ["-c", 'exec 3>"$1"; sleep 1', "sh", join(dir, "config.json")], { stdio: "ignore" });
      try {
        expect(() => readConfig(dir)).toThrow(/config\.json: .*cannot read it \(ENOTREG: a FIFO, not a regular file\)/s);
      } finally {
        writer.kill();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("names the file when config.json is missing", () => {
    expect(() => readConfig("/nonexistent-dir")).toThrow(/\/nonexistent-dir\/config.json: .*cannot read it \(ENOENT\)/s);
  });

  it("checks the vocabulary against the tokenizer", () => {
    const c = readConfig(TINY_K3);
    expect(() => checkTokenizerMatch(c, { nVocab: 1024, nRanks: 768 })).not.toThrow();
    expect(() => checkTokenizerMatch(c, { nVocab: 1000, nRanks: 768 })).toThrow(/vocab_size = 1024 but the tokenizer has 1000 ids/);
  });

  it("refuses a rank file cut at a line boundary (its specials stretch to the same vocab_size), naming both numbers", async () => {
    const { Engine } = await import("../src/engine.js");
    const dir = mkdtempSync(join(tmpdir(), "k3-cut-ranks-"));
    try {
      for (const f of ["config.json", "tokenizer_config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"]) {
        copyFileSync(join(TINY_K3, f), join(dir, f));
      }
      const lines = readFileSync(join(TINY_K3, "tiktoken.model"), "utf8").split("\n").filter(Boolean);
      expect(lines.length).toBe(768);
      writeFileSync(join(dir, "tiktoken.model"), lines.slice(0, 767).join("\n") + "\n");
      await expect(Engine.load(dir, { threads: 1, preset: "laptop" })).rejects.toThrow(/tiktoken.model has 767 ranks but vocab_size = 1024 needs 768/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("fingerprints what changes the math", () => {
    const a = configFingerprint(readConfig(TINY_K3));
    const raw = rawConfig(TINY_K3);
    raw.text_config.attn_res_block_size = 4;
    expect(configFingerprint(parseConfig(raw))).not.toBe(a);
    expect(configFingerprint(readConfig(TINY_K3))).toBe(a);
  });

  it("computes the real K3 census from its published config numbers", () => {
    const raw = rawConfig(TINY_K3);
    const t = raw.text_config;
    Object.assign(t, {
      hidden_size: 7168, num_hidden_layers: 93, vocab_size: 163840, bos_token_id: 163584, eos_token_id: 163586, pad_token_id: 163839,
      num_attention_heads: 96, num_key_value_heads: 96, q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64,
      v_head_dim: 128, num_experts: 896, num_experts_per_token: 16, moe_intermediate_size: 3072, routed_expert_hidden_size: 3584,
      intermediate_size: 33792, attn_res_block_size: 12,
    });
    Object.assign(raw, { bos_token_id: 163584, eos_token_id: 163586, pad_token_id: 163839 });
    const full = [];
    for (let l = 4; l <= 92; l += 4) full.push(l);
    full.push(93);
    t.linear_attn_config = { ...t.linear_attn_config, num_heads: 96, head_dim: 128, full_attn_layers: full };
    delete t.linear_attn_config.kda_layers;
    const cfg = parseConfig(raw);
    expect(cfg.layerKinds.filter((k) => k === "mla").length).toBe(24);
    const c = censusOf(cfg);
    expect(c.expertBytes).toBe(17_547_264); // docs/architecture.md §7
    expect(c.expertBytesPerToken).toBe(92 * 16 * 17_547_264); // 25.83 GB
    expect(c.embedBytes).toBe(163840 * 7168 * 2);
    // MLA latent cache: 24 layers x 576 fp32
    expect(c.kvBytesPerToken).toBe(24 * 576 * 4);
    // trunk 113.5 GB within 1% (exact byte census 113,509,540,864 includes embed+head)
    const trunkTotal = c.trunkBytes + c.embedBytes + c.headBytes + c.modelVectorBytes;
    expect(Math.abs(trunkTotal - 113_509_540_864) / 113_509_540_864).toBeLessThan(0.01);
  });
});
