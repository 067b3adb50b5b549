/**
 * `k3 synth`: the published config with only the counts changed, the released layout and byte
 * census at real widths (from the plan, nothing written), and — at the tiny fixture widths through
 * the same generator — files that @k3/safetensors and the engine accept, determinism by seed,
 * valid MXFP4 scales, and refused arguments.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statfsSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setThreadCount } from "@k3/dense";
import { openCheckpointSync } from "@k3/safetensors";
import { loadKimiTokenizer } from "@k3/tiktoken-bpe";
import { afterAll, describe, expect, it } from "vitest";
import { parseConfig } from "../src/config.js";
import { Engine } from "../src/engine.js";
import { GB } from "../src/presets.js";
import { publishedK3Config, publishedKimiLinearConfig } from "../src/published.js";
import { blockBytes, ciCheckpointOptions, e8m0For, synthConfig, synthesize, synthPlan, syntheticRankFile, tensorByteSize, type SynthOptions, type SynthProgress, type SynthTensor } from "../src/synth.js";
import { captureCli, rawConfig, REPO, TINY_48B, TINY_K3 } from "./helpers.js";

const realRanks = join(process.env.K3_TEST_DATA ?? join(REPO, "..", "shared", "data"), "kimi-tokenizer", "tiktoken.model");
const realPresent = existsSync(realRanks);
if (!realPresent) console.log(`skipping the --tokenizer copy test: ${realRanks} is absent (set K3_TEST_DATA)`);

const bigBox = { totalBytes: 256 * GB, availableBytes: 250 * GB };
const dirs: string[] = [];
function temp(): string {
  const d = mkdtempSync(join(tmpdir(), "k3-synth-"));
  dirs.push(d);
  return d;
}
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const sum = (ts: SynthTensor[]) => ts.reduce((a, t) => a + tensorByteSize(t), 0);

describe("published configs", () => {
  it("K3 holds the docs/architecture.md §0 values and parses", () => {
    const c = publishedK3Config();
    const t = c.text_config;
    expect([c.model_type, c.bos_token_id, c.eos_token_id, c.pad_token_id, c.media_placeholder_token_id, c.tie_word_embeddings]).toEqual(["kimi_k3", 163584, 163586, 163839, 163605, false]);
    expect([t.hidden_size, t.num_hidden_layers, t.vocab_size, t.rms_norm_eps, t.max_position_embeddings]).toEqual([7168, 93, 163840, 1e-5, 1048576]);
    expect([t.hidden_act, t.activation_situ_beta, t.activation_situ_linear_beta]).toEqual(["situ", 4, 25]);
    const la = t.linear_attn_config;
    expect([la.num_heads, la.head_dim, la.short_conv_kernel_size, la.gate_lower_bound, la.use_full_rank_gate]).toEqual([96, 128, 4, -5, true]);
    expect(la.full_attn_layers).toHaveLength(24);
    expect(la.full_attn_layers.slice(-3)).toEqual([88, 92, 93]);
    expect(la.kda_layers).toHaveLength(69);
    expect([t.num_attention_heads, t.num_key_value_heads, t.q_lora_rank, t.kv_lora_rank, t.qk_nope_head_dim, t.qk_rope_head_dim, t.v_head_dim]).toEqual([96, 96, 1536, 512, 128, 64, 128]);
    expect([t.num_experts, t.num_experts_per_token, t.num_shared_experts, t.routed_expert_hidden_size, t.moe_intermediate_size]).toEqual([896, 16, 2, 3584, 3072]);
    expect([t.intermediate_size, t.first_k_dense_replace, t.moe_layer_freq, t.routed_scaling_factor, t.attn_res_block_size, t.num_nextn_predict_layers]).toEqual([33792, 1, 1, 1, 12, 0]);
    expect(c.quantization_config.format).toBe("mxfp4-pack-quantized");
    const cfg = parseConfig(c);
    expect(cfg.family).toBe("k3");
    expect(cfg.layerKinds.filter((k) => k === "mla")).toHaveLength(24);
  });

  it("Kimi-Linear-48B holds the docs/architecture.md §0 values and parses", () => {
    const c = publishedKimiLinearConfig();
    expect([c.hidden_size, c.num_hidden_layers, c.vocab_size, c.intermediate_size, c.kv_lora_rank, c.q_lora_rank]).toEqual([2304, 27, 163840, 9216, 512, null]);
    expect([c.linear_attn_config.num_heads, c.linear_attn_config.head_dim, c.num_attention_heads]).toEqual([32, 128, 32]);
    expect(c.linear_attn_config.full_attn_layers).toEqual([4, 8, 12, 16, 20, 24, 27]);
    expect([c.num_experts, c.num_experts_per_token, c.num_shared_experts, c.moe_intermediate_size, c.routed_scaling_factor, c.hidden_act]).toEqual([256, 8, 1, 1024, 2.446, "silu"]);
    expect(parseConfig(c).family).toBe("kimi-linear");
  });

  it("synthConfig changes only the counts (and the special ids that follow the vocabulary)", () => {
    const pub = publishedK3Config();
    const c = synthConfig({ layers: 4, experts: 64 });
    const t = c.text_config;
    expect([t.num_hidden_layers, t.num_experts, t.linear_attn_config.full_attn_layers, t.linear_attn_config.kda_layers]).toEqual([4, 64, [4], [1, 2, 3]]);
    const strip = (x: any) => {
      const y = structuredClone(x);
      for (const k of ["num_hidden_layers", "num_experts"]) delete y.text_config[k];
      delete y.text_config.linear_attn_config.full_attn_layers;
      delete y.text_config.linear_attn_config.kda_layers;
      return y;
    };
    expect(strip(c)).toEqual(strip(pub));
    const v = synthConfig({ layers: 2, vocab: 4096 });
    expect([v.text_config.vocab_size, v.bos_token_id, v.eos_token_id, v.pad_token_id, v.media_placeholder_token_id, v.text_config.eos_token_id]).toEqual([4096, 3840, 3842, 4095, 3861, 3842]);
    expect(v.text_config.linear_attn_config.full_attn_layers).toEqual([2]); // N < 4: the last layer is MLA
    expect(synthConfig({ layers: 9 }).text_config.linear_attn_config.full_attn_layers).toEqual([4, 8]);
    expect(synthConfig({ layers: 93 }).text_config.linear_attn_config.full_attn_layers).toEqual(pub.text_config.linear_attn_config.full_attn_layers);
    const kl = synthConfig({ family: "kimi-linear", layers: 4, experts: 32 });
    expect([kl.num_hidden_layers, kl.num_experts, kl.linear_attn_config.full_attn_layers, kl.hidden_size]).toEqual([4, 32, [4], 2304]);
  });
});

describe("plan at real widths (nothing written)", () => {
  const plan = synthPlan(synthConfig({ layers: 4, experts: 64 }));
  const all = plan.flatMap((s) => s.tensors);
  const layer = (l: number) => all.filter((t) => t.name.startsWith(`language_model.model.layers.${l}.`));

  it("matches the byte census of the release (docs/architecture.md §7)", () => {
    const attnAndNorms = (l: number) => sum(layer(l).filter((t) => /self_attn\.|layernorm|_res_/.test(t.name)));
    expect(attnAndNorms(1)).toBe(887_886_848); // a KDA layer
    expect(attnAndNorms(3)).toBe(464_478_208); // an MLA layer (its attention + the six norms, as the census counts it)
    const moe = (re: RegExp) => sum(layer(2).filter((t) => re.test(t.name)));
    expect(moe(/block_sparse_moe\.gate\./)).toBe(64 * (7168 * 2 + 4)); // 12,848,640 B with the released 896
    const released = synthPlan(synthConfig({ layers: 2 })).flatMap((s) => s.tensors);
    expect(sum(released.filter((t) => /layers\.1\.block_sparse_moe\.gate\./.test(t.name)))).toBe(12_848_640);
    expect(sum(released.filter((t) => /layers\.1\.block_sparse_moe\.experts\./.test(t.name)))).toBe(896 * 17_547_264);
    expect(moe(/routed_expert_/)).toBe(102_767_616);
    expect(moe(/shared_experts/)).toBe(264_241_152);
    expect(moe(/experts\.17\./)).toBe(17_547_264);
    expect(sum(layer(0).filter((t) => t.name.includes(".mlp."))) + attnAndNorms(0)).toBe(887_886_848 + 3 * 33792 * 7168 * 2);
    expect(sum(all.filter((t) => /embed_tokens|lm_head/.test(t.name)))).toBe(2 * 163840 * 7168 * 2);
    const w1 = all.find((t) => t.name.endsWith("layers.1.block_sparse_moe.experts.0.w1.weight_packed"))!;
    const s2 = all.find((t) => t.name.endsWith("layers.1.block_sparse_moe.experts.0.w2.weight_scale"))!;
    expect([w1.dtype, w1.shape, s2.dtype, s2.shape]).toEqual(["U8", [3072, 1792], "U8", [3584, 96]]);
  });

  it("dtypes as released: bf16 matrices and norms, F32 small KDA/router vectors", () => {
    const f32 = all.filter((t) => t.dtype === "F32").map((t) => t.name.replace(/.*\./, ""));
    expect(new Set(f32)).toEqual(new Set(["A_log", "dt_bias", "weight", "e_score_correction_bias"]));
    for (const t of all.filter((t) => t.dtype === "F32" && t.name.endsWith("weight"))) expect(t.name).toMatch(/(conv1d|o_norm)\.weight$/);
    for (const t of all.filter((t) => t.dtype === "U8")) expect(t.name).toMatch(/experts\.\d+\.w[123]\.weight_(packed|scale)$/);
  });

  it("layout: shard 1 = embed + layer 0, one shard per layer, then the head; trunk sorted, then experts 0,1,10,… with six adjacent", () => {
    expect(plan.map((s) => s.label)).toEqual(["embed + layer 0", "layer 1", "layer 2", "layer 3", "norm + lm_head"]);
    const s1 = plan[1].tensors.map((t) => t.name);
    const firstExpert = s1.findIndex((n) => n.includes(".experts."));
    const trunk = s1.slice(0, firstExpert);
    expect(trunk).toEqual([...trunk].sort());
    expect(s1.slice(firstExpert).every((n) => n.includes(".experts."))).toBe(true);
    const ids = s1.slice(firstExpert).map((n) => n.match(/experts\.(\d+)\./)![1]);
    const order = [...new Set(ids)];
    expect(order.slice(0, 4)).toEqual(["0", "1", "10", "11"]);
    expect(order).toEqual([...order].sort());
    for (let i = 0; i < ids.length; i += 6) expect(new Set(ids.slice(i, i + 6)).size).toBe(1);
    expect(s1.slice(firstExpert, firstExpert + 6).map((n) => n.replace(/.*experts\.0\./, ""))).toEqual([
      "w1.weight_packed", "w1.weight_scale", "w2.weight_packed", "w2.weight_scale", "w3.weight_packed", "w3.weight_scale",
    ]);
    // With 4 layers, layer 3 is the one MLA layer.
    expect(layer(3).some((t) => t.name.endsWith("self_attn.kv_b_proj.weight"))).toBe(true);
    expect(layer(2).some((t) => t.name.endsWith("self_attn.A_log"))).toBe(true);
  });

  it("Kimi-Linear-48B: model. prefix, bf16 experts, g_a/g_b gate, q_proj", () => {
    const kl = synthPlan(synthConfig({ family: "kimi-linear", layers: 4, experts: 32 })).flatMap((s) => s.tensors);
    const get = (n: string) => kl.find((t) => t.name === n);
    expect(get("model.embed_tokens.weight")?.shape).toEqual([163840, 2304]);
    expect(get("lm_head.weight")?.shape).toEqual([163840, 2304]);
    expect(get("model.layers.1.block_sparse_moe.experts.10.w1.weight")).toMatchObject({ dtype: "BF16", shape: [1024, 2304] });
    expect(get("model.layers.1.self_attn.A_log")).toMatchObject({ dtype: "F32", shape: [1, 1, 32, 1] });
    expect(get("model.layers.1.self_attn.g_b_proj.weight")?.shape).toEqual([4096, 128]);
    expect(get("model.layers.3.self_attn.q_proj.weight")?.shape).toEqual([32 * 192, 2304]);
    expect(get("model.layers.3.self_attn.kv_b_proj.weight")?.shape).toEqual([32 * 256, 512]);
    expect(get("model.layers.0.mlp.gate_proj.weight")?.shape).toEqual([9216, 2304]);
    expect(get("model.layers.1.block_sparse_moe.shared_experts.down_proj.weight")?.shape).toEqual([2304, 1024]);
  });

  it("the CI fixture recipe: 1 real-width layer (MLA + MoE, no dense MLP), 16 experts, vocab 4096, under 3 GB written with its pack; \"full\": KDA + dense, MLA + MoE", () => {
    const plan = (o: ReturnType<typeof ciCheckpointOptions>) => synthPlan(synthConfig(o)).flatMap((s) => s.tensors);
    const small = plan(ciCheckpointOptions("/nowhere"));
    const bytes = sum(small);
    const trunk = sum(small.filter((t) => !/\.experts\.\d+\./.test(t.name)));
    expect(bytes + trunk).toBeLessThan(2.3e9); // the checkpoint + the pack's trunk.bin
    expect(bytes).toBeGreaterThan(1.2e9);
    const c = synthConfig(ciCheckpointOptions("/nowhere"));
    expect(parseConfig(c).layerKinds).toEqual(["mla"]);
    expect([c.text_config.hidden_size, c.text_config.q_lora_rank, c.text_config.kv_lora_rank, c.text_config.first_k_dense_replace]).toEqual([7168, 1536, 512, 0]);
    expect(small.some((t) => /\.mlp\./.test(t.name))).toBe(false);
    const full = plan(ciCheckpointOptions("/nowhere", 0, "full"));
    expect(sum(full)).toBeGreaterThan(3.5e9);
    expect(sum(full)).toBeLessThan(3.65e9);
    expect(parseConfig(synthConfig(ciCheckpointOptions("/nowhere", 0, "full"))).layerKinds).toEqual(["kda", "mla"]);
  });

  it("the per-layer CI fixtures: \"kda-dense\" is K3's layer 0 only (KDA + dense MLP, under 3 GB, no pack); \"kimi-linear\" is KDA + dense, MLA + bf16 MoE under 3 GB with its pack", async () => {
    const o = ciCheckpointOptions("/nowhere", 0, "kda-dense");
    expect(o.onlyLayers).toEqual([0]);
    const c = synthConfig(o);
    expect(parseConfig(c).layerKinds).toEqual(["kda", "mla"]);
    expect([c.text_config.hidden_size, c.text_config.intermediate_size, c.text_config.linear_attn_config.num_heads]).toEqual([7168, 33792, 96]);
    const kl = synthPlan(synthConfig(ciCheckpointOptions("/nowhere", 0, "kimi-linear"))).flatMap((s) => s.tensors);
    expect(sum(kl) + sum(kl.filter((t) => !/\.experts\.\d+\./.test(t.name)))).toBeLessThan(3e9);
    expect(kl.filter((t) => /experts\.\d+\.w1\.weight$/.test(t.name)).every((t) => t.dtype === "BF16")).toBe(true);
    expect(parseConfig(synthConfig(ciCheckpointOptions("/nowhere", 0, "kimi-linear"))).layerKinds).toEqual(["kda", "mla"]);
    // onlyLayers writes just those layers' tensors, and refuses a layer the config lacks.
    const dir = temp();
    {
      const base = rawConfig(TINY_K3);
      await expect(synthesize({ out: join(dir, "bad"), baseConfig: base, layers: 2, experts: 8, vocab: 512, onlyLayers: [2] })).rejects.toThrow(/onlyLayers \[2\]: expected zero-based layer numbers in 0\.\.1/);
      const r = await synthesize({ out: join(dir, "only"), baseConfig: base, layers: 2, experts: 8, vocab: 512, onlyLayers: [1], fsync: false });
      const index = JSON.parse(readFileSync(join(r.dir, "model.safetensors.index.json"), "utf8")) as { weight_map: Record<string, string> };
      const names = Object.keys(index.weight_map);
      const all = synthPlan(r.config).flatMap((s) => s.tensors.map((t) => t.name));
      expect(names.sort()).toEqual(all.filter((n) => n.includes(".layers.1.")).sort());
      expect(names.length).toBeGreaterThan(0);
    }
  });
});

describe("MXFP4 scales", () => {
  it("give expert weights an rms near 1/sqrt(fan_in), and are never 0xFF", () => {
    const lut = [0, 0.5, 1, 1.5, 2, 3, 4, 6];
    const ms = lut.reduce((a, v) => a + v * v, 0) / 8;
    for (const fanIn of [3584, 3072, 64, 32]) {
      const s = e8m0For(1 / Math.sqrt(fanIn));
      expect(s).toBeLessThan(254);
      const rms = Math.sqrt(ms * (2 ** (2 * (s - 127)) + 2 ** (2 * (s - 126))) / 2);
      expect(rms * Math.sqrt(fanIn)).toBeGreaterThan(0.7);
      expect(rms * Math.sqrt(fanIn)).toBeLessThan(1.42);
    }
  });
});

describe("blocks built natively (off the JS thread)", () => {
  it("equal the JS generator bit for bit for every block fill, odd lengths included", async () => {
    const fills: [SynthTensor["fill"], SynthTensor["dtype"]][] = [
      [{ kind: "normal", mean: 0, std: 1 / Math.sqrt(7168) }, "BF16"],
      [{ kind: "normal", mean: 1, std: 0.05 }, "BF16"],
      [{ kind: "normal", mean: -1, std: 1 }, "F32"],
      [{ kind: "nibbles" }, "U8"],
      [{ kind: "e8m0", s: e8m0For(1 / Math.sqrt(3072)) }, "U8"],
    ];
    for (const [fill, dtype] of fills) {
      for (const n of [1, 31, 33, 4099, 65537]) {
        const js = await blockBytes(fill, dtype, 5, `block ${dtype} ${n}`, n, false);
        const nat = await blockBytes(fill, dtype, 5, `block ${dtype} ${n}`, n, true);
        expect(nat.length, `${JSON.stringify(fill)} ${n}`).toBe(js.length);
        expect(Buffer.compare(nat, js), `${JSON.stringify(fill)} ${dtype} n=${n}`).toBe(0);
      }
    }
    // Another seed or key gives other bytes (the state reaches the native builder).
    const a = await blockBytes({ kind: "normal", mean: 0, std: 1 }, "BF16", 5, "k", 1000, true);
    const b = await blockBytes({ kind: "normal", mean: 0, std: 1 }, "BF16", 6, "k", 1000, true);
    expect(Buffer.compare(a, b)).not.toBe(0);
  });
});

describe("writing at the tiny widths (same generator and layout)", async () => {
  setThreadCount(1);
  const base = rawConfig(TINY_K3);
  const a = temp();
  const b = temp();
  const c = temp();
  const ra = await synthesize({ out: a, layers: 5, experts: 8, seed: 7, baseConfig: base, fsync: false });
  await synthesize({ out: b, layers: 5, experts: 8, seed: 7, baseConfig: base, fsync: false });
  await synthesize({ out: c, layers: 5, experts: 8, seed: 8, baseConfig: base, fsync: false });

  it("is byte-identical for the same seed and differs for another", () => {
    const files = readdirSync(a).sort();
    expect(files).toEqual(readdirSync(b).sort());
    expect(files).toContain("model-00006-of-00006.safetensors");
    for (const f of files) expect(readFileSync(join(a, f)).equals(readFileSync(join(b, f))), f).toBe(true);
    expect(readFileSync(join(a, "model-00002-of-00006.safetensors")).equals(readFileSync(join(c, "model-00002-of-00006.safetensors")))).toBe(false);
    // The same bytes as every earlier version of the generator and writer (recorded before the
    // shared write queue): sha256 over (name, bytes) of every file in name order.
    const h = createHash("sha256");
    for (const f of files) h.update(f).update(readFileSync(join(a, f)));
    expect(h.digest("hex")).toBe("61c3760dc30532fa9a3b21204002de4c8aab838cd2cf4c36809d30d7d0749ec1");
  });

  it("O_DIRECT (default), buffered, a refused O_DIRECT and tmpfs write the same files; the fallback is reported", async () => {
    expect(ra.io).toEqual({ mode: "O_DIRECT", note: null });
    const files = readdirSync(a).sort();
    // Shard tails that are not 4 KiB aligned (the padded last write is cut back).
    expect(files.filter((f) => f.endsWith(".safetensors")).some((f) => statSync(join(a, f)).size % 4096 !== 0)).toBe(true);
    const shm = existsSync("/dev/shm") && statfsSync("/dev/shm").type === 0x01021994 ? mkdtempSync("/dev/shm/k3-synth-") : null;
    if (shm) dirs.push(shm);
    const runs: [string, Partial<SynthOptions>, RegExp | null | undefined][] = [
      [temp(), { io: "buffered" }, /io: buffered was asked/],
      [temp(), { writeBufferBytes: 16384 }, null], // many staging buffers per shard
      [temp(), { writeBufferBytes: 16384, refuseDirect: "write" }, /EINVAL writing at 0, simulated/],
      [temp(), { refuseDirect: "open" }, /EINVAL at open, simulated/],
      ...(shm ? [[shm, { writeBufferBytes: 16384 }, undefined] as [string, Partial<SynthOptions>, undefined]] : []),
    ];
    for (const [out, extra, note] of runs) {
      const r = await synthesize({ out, layers: 5, experts: 8, seed: 7, baseConfig: base, fsync: true, ...extra });
      if (note === undefined) expect(r.io.note === null || /EINVAL/.test(r.io.note), JSON.stringify(r.io)).toBe(true); // tmpfs: O_DIRECT on Linux >= 6.6, else the fallback
      else if (note === null) expect(r.io).toEqual({ mode: "O_DIRECT", note: null });
      else expect(r.io.mode === "buffered" && note.test(r.io.note ?? ""), `${JSON.stringify(extra)}: ${JSON.stringify(r.io)}`).toBe(true);
      expect(readdirSync(out).sort()).toEqual(files);
      for (const f of files) expect(readFileSync(join(out, f)).equals(readFileSync(join(a, f))), `${JSON.stringify(extra)} ${f}`).toBe(true);
    }
  });

  it("progress: bytes written rise to the total, with a rate and an ETA", async () => {
    const seen: SynthProgress[] = [];
    const r = await synthesize({ out: temp(), layers: 5, experts: 8, seed: 7, baseConfig: base, fsync: false, writeBufferBytes: 16384, onProgress: (p) => seen.push(p) });
    const last = seen.at(-1)!;
    expect(last).toMatchObject({ done: true, bytesDone: r.dataBytes, bytesTotal: r.dataBytes, etaSeconds: 0 });
    expect(last.rate).toBeGreaterThan(0);
    for (let i = 1; i < seen.length; i++) expect(seen[i].bytesDone).toBeGreaterThanOrEqual(seen[i - 1].bytesDone);
    for (const p of seen.slice(0, -1)) expect(p.bytesDone).toBeLessThanOrEqual(r.dataBytes);
  });

  it("validates through @k3/safetensors: every planned tensor present with its dtype and shape, index total", () => {
    const ck = openCheckpointSync(a);
    const plan = synthPlan(ra.config).flatMap((s) => s.tensors);
    expect([...ck.names()].sort()).toEqual(plan.map((t) => t.name).sort());
    for (const t of plan) {
      const info = ck.get(t.name);
      expect([info.dtype, info.shape]).toEqual([t.dtype, t.shape]);
    }
    const index = JSON.parse(readFileSync(join(a, "model.safetensors.index.json"), "utf8"));
    expect(index.metadata.total_size).toBe(ra.dataBytes);
    // Scales: only the two chosen exponents.
    for (const n of plan.filter((t) => t.name.endsWith("weight_scale")).map((t) => t.name)) {
      const bytes = ck.readSync(n);
      const want = e8m0For(1 / Math.sqrt(n.includes(".w2.") ? 32 : 64));
      for (const x of bytes) expect(x === want || x === want + 1).toBe(true);
    }
    ck.closeSync();
  });

  it("the engine loads it and generates finite logits (K3 and Kimi-Linear)", async () => {
    const kl = temp();
    await synthesize({ out: kl, family: "kimi-linear", layers: 4, experts: 4, seed: 1, baseConfig: rawConfig(TINY_48B), fsync: false });
    for (const dir of [a, kl]) {
      const engine = await Engine.load(dir, { mem: bigBox, preset: "laptop" });
      let finite = true;
      const r = await engine.complete(engine.encodeText("hello world"), { maxTokens: 2, stopIds: [], onLogits: (l) => (finite &&= l.every(Number.isFinite)) });
      expect(r.ids).toHaveLength(2);
      expect(finite).toBe(true);
      engine.close();
    }
  });

  it("refuses an existing checkpoint without --force and replaces it with", async () => {
    await expect(synthesize({ out: a, layers: 5, experts: 8, seed: 7, baseConfig: base, fsync: false })).rejects.toThrow(/already holds a checkpoint.*--force/);
    writeFileSync(join(a, "notes.txt"), "mine");
    await synthesize({ out: a, layers: 4, experts: 8, seed: 7, baseConfig: base, fsync: false, force: true });
    const files = readdirSync(a);
    expect(files).toContain("notes.txt");
    expect(files.filter((f) => f.endsWith(".safetensors"))).toHaveLength(5);
  });
});

describe("tokenizer", () => {
  it("the synthetic rank file is valid and round-trips text", () => {
    const dir = temp();
    writeFileSync(join(dir, "tiktoken.model"), syntheticRankFile(3840));
    expect(syntheticRankFile(3840).equals(syntheticRankFile(3840))).toBe(true);
    const tok = loadKimiTokenizer(dir, { specials: "k3" });
    expect(tok.nRanks).toBe(3840);
    const text = "hello world, 12 € ünïcode";
    const ids = tok.encode(text);
    expect(tok.decode(ids)).toBe(text);
    expect(ids.length).toBeLessThan(text.length);
  });

  it("--tokenizer must have vocab - 256 ranks", async () => {
    const dir = temp();
    const f = join(dir, "tiktoken.model");
    writeFileSync(f, syntheticRankFile(300));
    await expect(synthesize({ out: join(dir, "x"), layers: 2, vocab: 4096, tokenizer: f })).rejects.toThrow(/has 300 ranks but vocab 4096 needs 3840/);
  });
});

describe.skipIf(!realPresent)("--tokenizer with the real Kimi rank file", () => {
  it("is copied byte for byte and the engine encodes with it at vocab 163840", async () => {
    const base = rawConfig(TINY_K3);
    base.text_config.vocab_size = 163840; // tiny widths, full vocabulary (embed + head 84 MB)
    const dir = temp();
    await synthesize({ out: dir, layers: 4, experts: 4, baseConfig: base, tokenizer: realRanks, fsync: false });
    expect(readFileSync(join(dir, "tiktoken.model")).equals(readFileSync(realRanks))).toBe(true);
    const engine = await Engine.load(dir, { mem: bigBox, preset: "laptop" });
    expect(engine.config.vocabSize).toBe(163840);
    expect(engine.encodeText("Hello world", false)).toHaveLength(2); // "Hello", " world"
    engine.close();
  });
});

describe("bad arguments", () => {
  it("are refused naming the option and the allowed range", async () => {
    const out = join(temp(), "never");
    await expect(synthesize({ out, layers: 0 })).rejects.toThrow(/--layers 0: expected an integer number of layers \(K3 has 93\) in 1\.\.93/);
    await expect(synthesize({ out, layers: 94 })).rejects.toThrow(/--layers 94/);
    await expect(synthesize({ out, family: "kimi-linear", layers: 28 })).rejects.toThrow(/Kimi-Linear-48B has 27/);
    await expect(synthesize({ out, experts: 8 })).rejects.toThrow(/--experts 8: .*num_experts_per_token = 16/);
    await expect(synthesize({ out, experts: 897 })).rejects.toThrow(/--experts 897: .*896/);
    await expect(synthesize({ out, vocab: 300 })).rejects.toThrow(/--vocab 300: .*512\.\.163840/);
    await expect(synthesize({ out, seed: -1 })).rejects.toThrow(/--seed -1/);
    await expect(synthesize({ out, layers: 2, denseLayers: 3 })).rejects.toThrow(/--dense-layers 3: .*dense-MLP layers in 0\.\.2/);
  });

  it("the CLI: usage errors exit 2 with the reason, --help exits 0", async () => {
    const none = await captureCli(["synth"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/--out DIR is required/);
    const bad = await captureCli(["synth", "--out", join(temp(), "x"), "--layers", "two"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--layers two: expected a non-negative integer/);
    const unknown = await captureCli(["synth", "--out", "x", "--widths", "7"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/widths/);
    const help = await captureCli(["synth", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/--kimi-linear/);
  });
});
