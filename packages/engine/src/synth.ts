/**
 * `k3 synth`: a synthetic checkpoint at the published widths (Kimi K3, or Kimi-Linear-48B with
 * `family: "kimi-linear"`), with only the layer count (and optionally the expert count and the
 * vocabulary) changed. Every tensor name, dtype, shape, shard and index layout follows the release
 * (docs/architecture.md §7; the same layout as fixtures/models/tiny-k3 from reference/make_tiny.py):
 *
 * - K3: nested config, `language_model.` prefix, bf16 trunk, F32 A_log/dt_bias/conv1d/o_norm/
 *   e_score_correction_bias, MXFP4 experts (`w{1,2,3}.weight_packed` U8 [out, in/2] and
 *   `weight_scale` U8 [out, in/32]); 48B: flat config, `model.` prefix, bf16 experts.
 * - Each layer: its trunk tensors sorted by name, then its experts in lexicographic id order
 *   (0, 1, 10, 100, …) with each expert's six (K3) or three (48B) tensors adjacent.
 * - Shards `model-000NN-of-000MM.safetensors`: shard 1 = embed_tokens + layer 0, then one shard per
 *   layer, then one for the final norm (+ K3 output AttnRes) and lm_head; model.safetensors.index.json.
 * - tiktoken.model (ranks = vocab − 256: the 256 single bytes, then deterministic merges of earlier
 *   tokens; or a real rank file copied with `tokenizer`) and tokenizer_config.json (the model's
 *   256 specials).
 *
 * Layer map: the released MLA list (ONE-based 4, 8, …, plus the last layer of the published
 * model) truncated to the first N layers, so the checkpoint is layer for layer the first N layers of
 * the published model; when that leaves no MLA layer (N < 4) the last layer is MLA (the engine
 * refuses a model without one). E.g. N = 4: layers 0-2 KDA, 3 MLA; N = 2: 0 KDA, 1 MLA; N = 8: 3, 7 MLA.
 * Layer 0 is the dense MLP (first_k_dense_replace 1), the others MoE.
 *
 * Data: weights ~ N(0, (gain/sqrt(fan_in))²) (Irwin-Hall of 4 uniforms), norms ~ 1 ± 0.05, the
 * AttnRes projections ~ 0.1, conv taps ~ 0.3 with the current tap + 1, A_log and dt_bias in the
 * ranges reference/make_tiny.py uses; MXFP4 nibbles uniform and E8M0 scales 2^(s−127) with s one of
 * two values chosen so a weight's rms is ~1/sqrt(fan_in) (never 0xFF). Deterministic from `seed`:
 * each tensor's stream depends only on the seed and its name. Generating every byte in JS would
 * run far below disk speed, so a tensor above 2^20 elements is written as a seeded rotation of one
 * precomputed block (4,194,301 elements, odd and prime to every width, so no two rows of a matrix
 * coincide) per distribution; smaller tensors are generated element by element.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statfsSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { DirectFileWriter, StagingBuffers, redrawLine, synthBlock } from "@k3/moe-stream";
import { ShardedCheckpointWriter, type ByteQueue, type Dtype, type TensorSpec } from "@k3/safetensors";
import { KIMI_K2_SPECIALS, KIMI_K3_SPECIALS } from "@k3/tiktoken-bpe";
import { K3Error, EXIT_IO, UsageError } from "./errors.js";
import { complementLayers, publishedK3Config, publishedKimiLinearConfig, releasedFullAttnLayers } from "./published.js";
import { formatBytes } from "@k3/native";

export type SynthFamily = "k3" | "kimi-linear";

/** How a tensor's values are drawn. */
export type SynthFill =
  | { kind: "normal"; mean: number; std: number }
  | { kind: "uniform"; lo: number; hi: number }
  /** Depthwise conv [C, 1, K]: taps ~ N(0, std²), the current-token tap (last) + 1. */
  | { kind: "conv"; std: number; taps: number }
  /** K3 A_log: `heads` values ~ U(lo, hi), then zeros up to the tensor length. */
  | { kind: "alog"; heads: number; lo: number; hi: number }
  /** MXFP4 codes: uniform random bytes (two E2M1 nibbles each). */
  | { kind: "nibbles" }
  /** E8M0 scale bytes: `s` or `s + 1`, uniformly. */
  | { kind: "e8m0"; s: number };

export interface SynthTensor {
  name: string;
  dtype: Extract<Dtype, "BF16" | "F32" | "U8">;
  shape: number[];
  fill: SynthFill;
}

export interface SynthShard {
  /** What the shard holds (for progress lines): "embed + layer 0", "layer 3", "head". */
  label: string;
  tensors: SynthTensor[];
}

export interface SynthOptions {
  /** Output directory (created). */
  out: string;
  family?: SynthFamily;
  /** num_hidden_layers, 1..published (default 4). */
  layers?: number;
  /** num_experts, top-k..published (default published: K3 896, 48B 256). */
  experts?: number;
  /** vocab_size (ranks + 256 specials), 512..163840 (default 163840). */
  vocab?: number;
  /**
   * first_k_dense_replace: how many leading layers use the dense MLP instead of MoE, 0..layers
   * (default published: 1). 0 drops K3's 1.45 GB dense MLP (the CI recipe).
   */
  denseLayers?: number;
  /**
   * Tests only: write just these layers' tensors (zero-based; no embed_tokens, final norm or
   * lm_head, no other layer). config.json still describes the whole model, so the engine refuses
   * to run the result: a fixture for per-layer checks at real widths whose bytes are only the
   * layers under test (K3's layer 0, KDA + dense MLP: 2.34 GB).
   */
  onlyLayers?: number[];
  /** Seed of every value (default 0): the same options give byte-identical files. */
  seed?: number;
  /** Replace an existing checkpoint in `out` (only the files synth writes are removed). */
  force?: boolean;
  /** A real tiktoken.model to copy instead of the synthetic rank file (needs vocab − 256 ranks). */
  tokenizer?: string;
  /** fsync the shards (all at the end, before the index is written; default true). */
  fsync?: boolean;
  onProgress?: (p: SynthProgress) => void;
  /**
   * "direct" (default): shards written with O_DIRECT from aligned staging buffers (@k3/moe-stream
   * DirectFileWriter), buffered where the filesystem refuses O_DIRECT (tmpfs; see SynthResult.io);
   * "buffered": through the page cache (the earlier path; the same bytes).
   */
  io?: "direct" | "buffered";
  /** Tests and benches: staging buffer bytes (multiple of 4096; default 32 MiB) and count (default 4), and a simulated O_DIRECT refusal. */
  writeBufferBytes?: number;
  writeBuffers?: number;
  refuseDirect?: "open" | "write";
  /**
   * Tests only: start from this config instead of the published one (any widths; the same
   * generator and layout). The published dimensions are the point of `k3 synth`.
   */
  baseConfig?: Record<string, any>;
}

export interface SynthProgress {
  item: string;
  bytesDone: number;
  bytesTotal: number;
  /** Bytes per second so far. */
  rate: number;
  etaSeconds: number | null;
  done: boolean;
}

export interface SynthResult {
  dir: string;
  config: Record<string, any>;
  /** Tensor data bytes (the index total_size). */
  dataBytes: number;
  /** Bytes of every file written (shards with headers, index, config, tokenizer). */
  fileBytes: number;
  tensors: number;
  shards: string[];
  seconds: number;
  /** Layer kinds, zero-based ("kda" | "mla"), and which layers are dense. */
  layerMap: string;
  /** How the shards were written: "O_DIRECT", or "buffered" with the reason (a refused O_DIRECT, or io: "buffered"). */
  io: { mode: "O_DIRECT" | "buffered"; note: string | null };
  /** Seconds of setup (config, tokenizer files, checks), of the shard data, and of the last flush + fsync + index. */
  phases: { setup: number; data: number; finish: number };
}

/** The files `k3 synth` writes (besides shards); --force removes exactly these and stale shards. */
const OWN_FILES = ["config.json", "tokenizer_config.json", "tiktoken.model", "synth.json", "model.safetensors.index.json"];
const SHARD_RE = /^(model-\d{5}-of-\d{5}\.safetensors|\.shard-\d+\..*\.safetensors(\.tmp(\.2)?)?|\.index\..*\.json|\..*\.tmp(\.2)?)$/;

// ---------------------------------------------------------------- config

/** The MLA layers (ONE-based) of an N-layer prefix of a model whose released list is `released`. */
export function synthFullAttnLayers(released: readonly number[], numLayers: number): number[] {
  const kept = released.filter((l) => l <= numLayers);
  return kept.length ? kept : [numLayers];
}

function int(name: string, v: number | undefined, def: number, lo: number, hi: number, what: string): number {
  if (v === undefined) return def;
  if (!Number.isInteger(v) || v < lo || v > hi) throw new UsageError(`synth: --${name} ${v}: expected ${what} in ${lo}..${hi}`);
  return v;
}

/** The config.json synth writes for `options` (the published config with the counts changed). */
export function synthConfig(options: Omit<SynthOptions, "out">): Record<string, any> {
  const family = options.family ?? "k3";
  if (family !== "k3" && family !== "kimi-linear") throw new UsageError(`synth: family ${JSON.stringify(family)}: expected k3 or kimi-linear`);
  const cfg = options.baseConfig ? structuredClone(options.baseConfig) : family === "k3" ? publishedK3Config() : publishedKimiLinearConfig();
  const nested = cfg.text_config !== undefined;
  const tc = nested ? cfg.text_config : cfg;
  const published = tc.num_hidden_layers as number;
  const name = family === "k3" ? "K3" : "Kimi-Linear-48B";
  const layers = int("layers", options.layers, Math.min(4, published), 1, published, `an integer number of layers (${name} has ${published})`);
  const topK = tc.num_experts_per_token as number;
  const experts = int("experts", options.experts, tc.num_experts, topK, tc.num_experts, `an integer number of experts (at least num_experts_per_token = ${topK}, at most ${name}'s ${tc.num_experts})`);
  const maxVocab = tc.vocab_size as number;
  const vocab = int("vocab", options.vocab, maxVocab, Math.min(512, maxVocab), maxVocab, "an integer vocabulary size (ranks + 256 specials; the ranks include the 256 single bytes)");
  const released = releasedFullAttnLayers(published);
  const base = tc.linear_attn_config.full_attn_layers as number[];
  // A base config (tests) keeps its own released list when it has one.
  const full = synthFullAttnLayers(base.length && base[base.length - 1] === published ? base : released, layers);
  const dense = int("dense-layers", options.denseLayers, Math.min(tc.first_k_dense_replace as number, layers), 0, layers, "an integer number of leading dense-MLP layers");
  tc.num_hidden_layers = layers;
  tc.first_k_dense_replace = dense;
  tc.num_experts = experts;
  tc.vocab_size = vocab;
  tc.linear_attn_config.full_attn_layers = full;
  tc.linear_attn_config.kda_layers = complementLayers(full, layers);
  const ranks = vocab - 256;
  const ids = { bos_token_id: ranks, eos_token_id: ranks + 2, pad_token_id: ranks + 255 };
  Object.assign(tc, ids);
  if (nested) {
    Object.assign(cfg, ids);
    if (cfg.media_placeholder_token_id !== undefined) cfg.media_placeholder_token_id = ranks + 21;
  }
  return cfg;
}

// ---------------------------------------------------------------- tensor plan

/** E8M0 exponent s such that uniform E2M1 codes times 2^(s−127 or s−126) have rms ≈ std. */
export function e8m0For(std: number): number {
  // rms of the 16 E2M1 codes uniformly: sqrt(mean(v²)) = sqrt(68.5 / 8) = 2.926; the scale is
  // 2^(s−127) or 2^(s−126) with equal odds: rms factor sqrt((1 + 4) / 2) = 1.581.
  const s = Math.round(127 + Math.log2(std / (2.926 * 1.581)));
  return Math.max(1, Math.min(253, s));
}

/** Every shard and tensor of the checkpoint `config` describes, in file order. */
export function synthPlan(config: Record<string, any>): SynthShard[] {
  const nested = config.text_config !== undefined;
  const tc = nested ? config.text_config : config;
  const k3 = nested;
  const P = k3 ? "language_model." : "";
  const D: number = tc.hidden_size;
  const V: number = tc.vocab_size;
  const NL: number = tc.num_hidden_layers;
  const la = tc.linear_attn_config;
  const H: number = la.num_heads;
  const dk: number = la.head_dim;
  const K: number = la.short_conv_kernel_size;
  const full: number[] = la.full_attn_layers;
  const E: number = tc.num_experts;
  const inter: number = tc.moe_intermediate_size;
  const din: number = tc.routed_expert_hidden_size ?? D;
  const nShared: number = tc.num_shared_experts;
  const mxfp4 = (config.quantization_config ?? tc.quantization_config)?.format === "mxfp4-pack-quantized";
  const PK = H * dk;

  const normal = (std: number, mean = 0): SynthFill => ({ kind: "normal", mean, std });
  const bf = (name: string, shape: number[], fill: SynthFill): SynthTensor => ({ name, dtype: "BF16", shape, fill });
  const f32 = (name: string, shape: number[], fill: SynthFill): SynthTensor => ({ name, dtype: "F32", shape, fill });
  const lin = (name: string, out: number, inp: number, gain = 1): SynthTensor => bf(name, [out, inp], normal(gain / Math.sqrt(inp)));
  const normW = (name: string, n: number, dtype: "BF16" | "F32" = "BF16"): SynthTensor => ({ name, dtype, shape: [n], fill: normal(0.05, 1) });

  const kda = (): SynthTensor[] => {
    const t: SynthTensor[] = [];
    for (const n of ["q_proj", "k_proj", "v_proj"]) t.push(lin(`${n}.weight`, PK, D));
    for (const n of ["q_conv1d", "k_conv1d", "v_conv1d"]) t.push({ name: `${n}.weight`, dtype: k3 ? "F32" : "BF16", shape: [PK, 1, K], fill: { kind: "conv", std: 0.3, taps: K } });
    t.push(lin("f_a_proj.weight", dk, D), lin("f_b_proj.weight", PK, dk));
    if (k3) {
      t.push(f32("dt_bias", [PK], normal(1, -1)));
      t.push(f32("A_log", [dk], { kind: "alog", heads: H, lo: -0.5, hi: 1.0 }));
      t.push(lin("g_proj.weight", PK, D));
    } else {
      t.push(f32("dt_bias", [PK], normal(1, -2.5)));
      t.push(f32("A_log", [1, 1, H, 1], { kind: "uniform", lo: 0, hi: 1.5 }));
      t.push(lin("g_a_proj.weight", dk, D), lin("g_b_proj.weight", PK, dk));
    }
    t.push(lin("b_proj.weight", H, D));
    t.push(normW("o_norm.weight", dk, k3 ? "F32" : "BF16"));
    t.push(lin("o_proj.weight", D, PK));
    return t;
  };
  const mla = (): SynthTensor[] => {
    const heads: number = tc.num_attention_heads;
    const n: number = tc.qk_nope_head_dim;
    const r: number = tc.qk_rope_head_dim;
    const dv: number = tc.v_head_dim;
    const L: number = tc.kv_lora_rank;
    const q: number | null = tc.q_lora_rank ?? null;
    const t: SynthTensor[] = [];
    if (q) t.push(lin("q_a_proj.weight", q, D), normW("q_a_layernorm.weight", q), lin("q_b_proj.weight", heads * (n + r), q, 1.5));
    else t.push(lin("q_proj.weight", heads * (n + r), D, 1.5));
    t.push(lin("kv_a_proj_with_mqa.weight", L + r, D), normW("kv_a_layernorm.weight", L), lin("kv_b_proj.weight", heads * (n + dv), L, 1.5));
    t.push(lin("o_proj.weight", D, heads * dv));
    if (tc.mla_use_output_gate) t.push(lin("g_proj.weight", heads * dv, D));
    return t;
  };

  const layers: { trunk: SynthTensor[]; experts: SynthTensor[] }[] = [];
  for (let l = 0; l < NL; l++) {
    const pre = `${P}model.layers.${l}.`;
    const trunk: SynthTensor[] = [normW("input_layernorm.weight", D), normW("post_attention_layernorm.weight", D)];
    if (k3) {
      trunk.push(normW("self_attention_res_norm.weight", D), bf("self_attention_res_proj.weight", [D], normal(0.1)));
      trunk.push(normW("mlp_res_norm.weight", D), bf("mlp_res_proj.weight", [D], normal(0.1)));
    }
    for (const t of full.includes(l + 1) ? mla() : kda()) trunk.push({ ...t, name: "self_attn." + t.name });
    const experts: SynthTensor[] = [];
    if (l >= tc.first_k_dense_replace && l % tc.moe_layer_freq === 0) {
      const m = "block_sparse_moe.";
      trunk.push(lin(m + "gate.weight", E, D), f32(m + "gate.e_score_correction_bias", [E], normal(0.05)));
      const si = inter * nShared;
      trunk.push(lin(m + "shared_experts.gate_proj.weight", si, D), lin(m + "shared_experts.up_proj.weight", si, D), lin(m + "shared_experts.down_proj.weight", D, si, 0.5));
      if (tc.routed_expert_hidden_size) {
        trunk.push(lin(m + "routed_expert_down_proj.weight", din, D), normW(m + "routed_expert_norm.weight", din), lin(m + "routed_expert_up_proj.weight", D, din, 0.5));
      }
      const ids = Array.from({ length: E }, (_, e) => String(e)).sort();
      for (const e of ids) {
        for (const [w, out, inp] of [["w1", inter, din], ["w2", din, inter], ["w3", inter, din]] as const) {
          const base = `${pre}${m}experts.${e}.${w}.`;
          if (mxfp4) {
            experts.push({ name: base + "weight_packed", dtype: "U8", shape: [out, inp / 2], fill: { kind: "nibbles" } });
            experts.push({ name: base + "weight_scale", dtype: "U8", shape: [out, inp / 32], fill: { kind: "e8m0", s: e8m0For(1 / Math.sqrt(inp)) } });
          } else {
            experts.push(bf(base + "weight", [out, inp], normal(1 / Math.sqrt(inp))));
          }
        }
      }
    } else {
      const I: number = tc.intermediate_size;
      trunk.push(lin("mlp.gate_proj.weight", I, D), lin("mlp.up_proj.weight", I, D), lin("mlp.down_proj.weight", D, I, 0.5));
    }
    trunk.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    layers.push({ trunk: trunk.map((t) => ({ ...t, name: pre + t.name })), experts });
  }
  const shards: SynthShard[] = [];
  shards.push({ label: "embed + layer 0", tensors: [bf(`${P}model.embed_tokens.weight`, [V, D], normal(1)), ...layers[0].trunk, ...layers[0].experts] });
  for (let l = 1; l < NL; l++) shards.push({ label: `layer ${l}`, tensors: [...layers[l].trunk, ...layers[l].experts] });
  const tail = [normW(`${P}model.norm.weight`, D)];
  if (k3) tail.push(normW(`${P}model.output_attn_res_norm.weight`, D), bf(`${P}model.output_attn_res_proj.weight`, [D], normal(0.1)));
  tail.push(lin(`${P}lm_head.weight`, V, D, 2));
  shards.push({ label: "norm + lm_head", tensors: tail });
  return shards;
}

/** Bytes of one tensor. */
export function tensorByteSize(t: Pick<SynthTensor, "dtype" | "shape">): number {
  return t.shape.reduce((a, b) => a * b, 1) * (t.dtype === "BF16" ? 2 : t.dtype === "F32" ? 4 : 1);
}

// ---------------------------------------------------------------- random data

/** 32-bit FNV-1a of a string. */
function fnv32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** sfc32 (the state of a stream). */
class Sfc32 {
  constructor(public a: number, public b: number, public c: number, public d: number) {}
  next(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }
}

/** sfc32 seeded through splitmix32 from (seed, key): a stream that depends only on both. */
function rngState(seed: number, key: string): Sfc32 {
  let s = (fnv32(key) ^ Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.floor(seed / 2 ** 32)) >>> 0;
  const mix = () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
  const a = mix();
  const b = mix();
  const c = mix();
  const r = new Sfc32(a, b, c, mix() | 1);
  for (let i = 0; i < 12; i++) r.next();
  return r;
}

function rng(seed: number, key: string): () => number {
  const r = rngState(seed, key);
  return () => r.next();
}

/**
 * out[i] = mean + std·irwinHall4(next(), next()) for i < n, with the sfc32 steps inlined (the hot
 * loop of block building: the same values as the generic path, bit for bit).
 */
function normalInto(r: Sfc32, n: number, mean: number, std: number, out: Float32Array): void {
  let a = r.a;
  let b = r.b;
  let c = r.c;
  let d = r.d;
  for (let i = 0; i < n; i++) {
    let t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    const w1 = t >>> 0;
    t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    const w2 = t >>> 0;
    const sum = (w1 & 0xffff) + (w1 >>> 16) + (w2 & 0xffff) + (w2 >>> 16) + 2;
    out[i] = mean + std * (SQRT3 * (sum * INV16 - 2));
  }
  r.a = a;
  r.b = b;
  r.c = c;
  r.d = d;
}

const INV32 = 1 / 4294967296;
const SQRT3 = Math.sqrt(3);

/**
 * ~N(0, 1) from two 32-bit words: the sum of their four 16-bit halves (Irwin-Hall, 4 terms)
 * centred and scaled to unit variance; |x| < 3.47. Pure integer/float arithmetic, so the same
 * bits on every machine.
 */
function irwinHall4(a: number, b: number): number {
  const sum = (a & 0xffff) + (a >>> 16) + (b & 0xffff) + (b >>> 16) + 2; // + 4 half-steps
  return SQRT3 * (sum * INV16 - 2);
}
const INV16 = 1 / 65536;

/** Float values of a fill, n of them, from the stream `r`. */
function values(fill: SynthFill, n: number, r: Sfc32): Float32Array {
  const out = new Float32Array(n);
  const next = () => r.next();
  switch (fill.kind) {
    case "normal":
      normalInto(r, n, fill.mean, fill.std, out);
      break;
    case "uniform":
      for (let i = 0; i < n; i++) out[i] = fill.lo + (fill.hi - fill.lo) * next() * INV32;
      break;
    case "conv":
      for (let i = 0; i < n; i++) out[i] = fill.std * irwinHall4(next(), next()) + (i % fill.taps === fill.taps - 1 ? 1 : 0);
      break;
    case "alog":
      for (let i = 0; i < n; i++) out[i] = i < fill.heads ? fill.lo + (fill.hi - fill.lo) * next() * INV32 : 0;
      break;
    default:
      throw new Error(`values: ${fill.kind} is a byte fill`);
  }
  return out;
}

/** Bytes of n elements of `fill` in `dtype`. */
function encode(fill: SynthFill, dtype: SynthTensor["dtype"], n: number, r: Sfc32): Uint8Array {
  const next = () => r.next();
  if (dtype === "U8") {
    const out = new Uint8Array(n);
    if (fill.kind === "nibbles") {
      for (let i = 0; i + 4 <= n; i += 4) {
        const r = next();
        out[i] = r;
        out[i + 1] = r >>> 8;
        out[i + 2] = r >>> 16;
        out[i + 3] = r >>> 24;
      }
      for (let i = n & ~3; i < n; i++) out[i] = next();
    } else if (fill.kind === "e8m0") {
      for (let i = 0; i < n; i += 32) {
        const r = next();
        for (let j = 0; j < 32 && i + j < n; j++) out[i + j] = fill.s + ((r >>> j) & 1);
      }
    } else throw new Error(`encode: ${fill.kind} cannot fill U8`);
    return out;
  }
  const f = values(fill, n, r);
  if (dtype === "F32") return new Uint8Array(f.buffer);
  const bits = new Uint32Array(f.buffer);
  const out = new Uint16Array(n);
  for (let i = 0; i < n; i++) {
    const u = bits[i];
    out[i] = (u + 0x7fff + ((u >>> 16) & 1)) >>> 16; // round to nearest even (no NaN/Inf in these fills)
  }
  return new Uint8Array(out.buffer);
}

/** Elements per precomputed block: odd, and prime to 3, 7 and 11 (every K3/48B width is 2^a·3^b·7^c·11^d). */
export const BLOCK_ELEMENTS = 4_194_301;
/** Bytes per write of the shards (writes cut at multiples of it in the file). */
const WRITE_BATCH = 32 << 20;
/** Tensors above this many elements are rotations of a block; smaller ones are drawn directly. */
const DIRECT_MAX = 1 << 20;

function fillKey(fill: SynthFill, dtype: string): string {
  return `${dtype}:${JSON.stringify(fill)}`;
}

/** True when tensor `t` is written as rotations of a block (see tensorChunks). */
function usesBlock(t: SynthTensor): boolean {
  return t.fill.kind === "nibbles" || t.fill.kind === "e8m0" || t.shape.reduce((a, b) => a * b, 1) > DIRECT_MAX;
}

/** The native builder's kind for a block fill (@k3/moe-stream synthBlock), or -1 (built in JS). */
function nativeKind(fill: SynthFill, dtype: SynthTensor["dtype"]): number {
  if (fill.kind === "normal") return dtype === "BF16" ? 0 : dtype === "F32" ? 1 : -1;
  if (fill.kind === "nibbles") return dtype === "U8" ? 2 : -1;
  if (fill.kind === "e8m0") return dtype === "U8" ? 3 : -1;
  return -1;
}

/**
 * `n` elements of a block fill from the stream state `r`, twice over: in JS (encode, the reference)
 * or by the native builder on a libuv thread. Exported for the test that they agree bit for bit.
 */
export async function blockBytes(fill: SynthFill, dtype: SynthTensor["dtype"], seed: number, key: string, n: number, native: boolean): Promise<Uint8Array> {
  const r = rngState(seed, key);
  const kind = nativeKind(fill, dtype);
  if (native && kind >= 0) {
    const f = fill as { mean?: number; std?: number; s?: number };
    return new Uint8Array(await synthBlock(kind, new Uint32Array([r.a, r.b, r.c, r.d]), n, f.mean ?? 0, f.std ?? 0, f.s ?? 0));
  }
  const one = encode(fill, dtype, n, r);
  const b = new Uint8Array(one.length * 2);
  b.set(one, 0);
  b.set(one, one.length);
  return b;
}

/**
 * Blocks of the current run: element data twice over, so any window of <= B elements is contiguous.
 * `prefetch` builds the blocks a list of tensors needs, one after another in list order on a libuv
 * thread (native builder), so the JS thread keeps feeding the writes meanwhile; `get` builds in JS
 * what was not prefetched (the same bytes).
 */
class BlockCache {
  private readonly blocks = new Map<string, Uint8Array>();
  private readonly pending = new Map<string, Promise<Uint8Array>>();
  private chain: Promise<unknown> = Promise.resolve();
  constructor(private readonly seed: number) {}
  prefetch(tensors: readonly SynthTensor[]): void {
    for (const t of tensors) {
      const key = fillKey(t.fill, t.dtype);
      if (!usesBlock(t) || nativeKind(t.fill, t.dtype) < 0 || this.blocks.has(key) || this.pending.has(key)) continue;
      const p = this.chain.then(() => blockBytes(t.fill, t.dtype, this.seed, "block " + key, BLOCK_ELEMENTS, true));
      const done = p.then((b) => {
        this.blocks.set(key, b);
        this.pending.delete(key);
        return b;
      });
      this.chain = done.catch(() => {});
      this.pending.set(key, done);
    }
  }
  /** Waits for t's block when it is being prefetched. */
  async ready(t: SynthTensor): Promise<void> {
    const p = this.pending.get(fillKey(t.fill, t.dtype));
    if (p) await p;
  }
  get(fill: SynthFill, dtype: SynthTensor["dtype"]): Uint8Array {
    const key = fillKey(fill, dtype);
    let b = this.blocks.get(key);
    if (!b) {
      const one = encode(fill, dtype, BLOCK_ELEMENTS, rngState(this.seed, "block " + key));
      b = new Uint8Array(one.length * 2);
      b.set(one, 0);
      b.set(one, one.length);
      this.blocks.set(key, b);
    }
    return b;
  }
}

/** The bytes of tensor `t`, in pieces of at most one block (≈ 8 MB of bf16). */
function* tensorChunks(t: SynthTensor, seed: number, blocks: BlockCache): Generator<Uint8Array> {
  const n = t.shape.reduce((a, b) => a * b, 1);
  const r = rngState(seed, t.name);
  const next = () => r.next();
  const byteFill = t.fill.kind === "nibbles" || t.fill.kind === "e8m0";
  if (n <= DIRECT_MAX && !byteFill) {
    yield encode(t.fill, t.dtype, n, r);
    return;
  }
  const esize = t.dtype === "BF16" ? 2 : t.dtype === "F32" ? 4 : 1;
  const block = blocks.get(t.fill, t.dtype);
  let pos = Math.floor(next() * INV32 * BLOCK_ELEMENTS);
  // e8m0 rows of 32 scales share one random word; keep the rotation on that grid so that runs of
  // scales stay whole (any offset would be valid data too).
  if (t.fill.kind === "e8m0") pos -= pos % 32;
  let left = n;
  while (left > 0) {
    const len = Math.min(left, BLOCK_ELEMENTS);
    yield block.subarray(pos * esize, (pos + len) * esize);
    pos = (pos + len) % BLOCK_ELEMENTS;
    left -= len;
  }
}

/**
 * Produces every byte of the checkpoint `config` describes without writing it (the generator's
 * own rate, for the benchmark): returns the bytes produced and an xor of one byte per piece.
 */
export function generateOnly(config: Record<string, any>, seed = 0, onPiece?: (piece: Uint8Array) => void): { bytes: number; check: number } {
  const blocks = new BlockCache(seed);
  let bytes = 0;
  let check = 0;
  for (const shard of synthPlan(config)) {
    for (const t of shard.tensors) {
      for (const c of tensorChunks(t, seed, blocks)) {
        bytes += c.length;
        check ^= c[c.length >> 1];
        onPiece?.(c);
      }
    }
  }
  return { bytes, check };
}

// ---------------------------------------------------------------- tokenizer

/**
 * A valid synthetic rank file of `ranks` lines ("base64 rank"), deterministic: the 256 single
 * bytes; then every pair and triple of " a-z" (so ordinary English text encodes to about as many
 * tokens as with a real vocabulary, not one per byte); then tokens that concatenate two earlier
 * ones (short ones more often, at most 16 bytes), all distinct. Every multi-byte token is the
 * concatenation of two lower-ranked tokens.
 */
export function syntheticRankFile(ranks: number): Buffer {
  if (!Number.isInteger(ranks) || ranks < 256) throw new UsageError(`synth: a rank file needs at least the 256 single bytes (got ${ranks} ranks)`);
  const tokens: Buffer[] = [];
  const seen = new Set<string>();
  const push = (t: Buffer) => {
    const key = t.toString("latin1");
    if (tokens.length >= ranks || seen.has(key)) return;
    seen.add(key);
    tokens.push(t);
  };
  for (let b = 0; b < 256; b++) push(Buffer.from([b]));
  const abc = " etaoinshrdlcumwfgypbvkjxqz";
  for (const x of abc) for (const y of abc) push(Buffer.from(x + y, "latin1"));
  for (const x of abc) for (const y of abc) for (const z of abc) if (!(y === " " || z === " ")) push(Buffer.from(x + y + z, "latin1"));
  const next = rng(0x5eed, "tiktoken.model");
  while (tokens.length < ranks) {
    const u = next() * INV32;
    const v = next() * INV32;
    const a = tokens[Math.floor(u * u * tokens.length)];
    const b = tokens[Math.floor(v * v * tokens.length)];
    if (a.length + b.length > 16) continue;
    push(Buffer.concat([a, b]));
  }
  return Buffer.from(tokens.map((t, r) => `${t.toString("base64")} ${r}\n`).join(""), "latin1");
}

function tokenizerConfig(family: SynthFamily, ranks: number): Record<string, unknown> {
  const named = family === "k3" ? KIMI_K3_SPECIALS : KIMI_K2_SPECIALS;
  const notSpecial = new Set(family === "k3" ? [] : [11, 12, 13, 14, 15]); // tool tokens: special=false (Kimi tokenizer_config)
  const dec: Record<string, unknown> = {};
  for (let i = 0; i < 256; i++) {
    dec[String(ranks + i)] = { content: named[i] ?? `<|reserved_token_${ranks + i}|>`, lstrip: false, normalized: false, rstrip: false, single_word: false, special: !notSpecial.has(i) };
  }
  return {
    added_tokens_decoder: dec,
    bos_token: "[BOS]",
    eos_token: "[EOS]",
    pad_token: "[PAD]",
    unk_token: "[UNK]",
    model_max_length: 1048576,
    tokenizer_class: "TikTokenTokenizer",
    auto_map: { AutoTokenizer: ["tokenization_kimi.TikTokenTokenizer", null] },
    num_reserved_special_tokens: 256,
  };
}

function countRanks(data: Buffer): number {
  let n = 0;
  let lineStart = 0;
  for (let i = 0; i <= data.length; i++) {
    if (i === data.length || data[i] === 0x0a) {
      if (i > lineStart && data.subarray(lineStart, i).toString("latin1").trim()) n++;
      lineStart = i + 1;
    }
  }
  return n;
}

// ---------------------------------------------------------------- write

/**
 * Writes the checkpoint. Rejects with UsageError for bad options (nothing written). The pieces go
 * through one queue per shard, no wait between tensors, so the next pieces are produced while
 * earlier ones are written: by default @k3/moe-stream's DirectFileWriter (copied into 4 aligned
 * 32 MiB staging buffers, each written O_DIRECT while the next fills; buffered where O_DIRECT is
 * refused, reported in `io`), or with io: "buffered" @k3/safetensors' WriteQueue (32 MiB writev
 * batches through the page cache, 4 in flight). The same bytes either way.
 */
export async function synthesize(options: SynthOptions): Promise<SynthResult> {
  const t0 = performance.now();
  if (typeof options.out !== "string" || options.out === "") throw new UsageError("synth: --out DIR is required");
  const seed = int("seed", options.seed, 0, 0, Number.MAX_SAFE_INTEGER, "an integer seed");
  const family = options.family ?? "k3";
  const config = synthConfig(options);
  const tc = config.text_config ?? config;
  const ranks = (tc.vocab_size as number) - 256;
  let rankFile: Buffer | null = null;
  if (options.tokenizer !== undefined) {
    try {
      rankFile = readFileSync(options.tokenizer);
    } catch (err) {
      throw new UsageError(`synth: --tokenizer ${options.tokenizer}: cannot read it (${(err as NodeJS.ErrnoException).code ?? err})`);
    }
    const have = countRanks(rankFile);
    if (have !== ranks) throw new UsageError(`synth: --tokenizer ${options.tokenizer} has ${have} ranks but vocab ${tc.vocab_size} needs ${ranks} (vocab − 256 specials)`);
  }
  const dir = resolve(options.out);
  const plan = onlyLayersOf(synthPlan(config), options.onlyLayers, tc.num_hidden_layers as number);
  const dataBytes = plan.reduce((a, s) => a + s.tensors.reduce((b, t) => b + tensorByteSize(t), 0), 0);

  if (existsSync(dir)) {
    const ours = readdirSync(dir).filter((f) => OWN_FILES.includes(f) || SHARD_RE.test(f));
    if (ours.length && !options.force) throw new UsageError(`synth: ${dir} already holds a checkpoint (${ours.slice(0, 3).join(", ")}${ours.length > 3 ? ", …" : ""}); pass --force to replace it`);
    for (const f of ours) rmSync(join(dir, f), { force: true });
  }
  mkdirSync(dir, { recursive: true });
  const fs = statfsSync(dir);
  const free = Number(fs.bavail) * Number(fs.bsize);
  if (free < dataBytes + 256e6) {
    throw new K3Error(`synth: ${dir} has ${(free / 1e9).toFixed(2)} GB free but the checkpoint needs ${(dataBytes / 1e9).toFixed(2)} GB (+0.26 GB margin)`, EXIT_IO);
  }

  writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 2) + "\n");
  writeFileSync(join(dir, "tiktoken.model"), rankFile ?? syntheticRankFile(ranks));
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(tokenizerConfig(family, ranks), null, 2) + "\n");
  const layerKinds = Array.from({ length: tc.num_hidden_layers as number }, (_, l) => (tc.linear_attn_config.full_attn_layers.includes(l + 1) ? "mla" : "kda"));
  const layerMap = layerKinds.map((k, l) => `${l}:${k}${l < tc.first_k_dense_replace ? "+dense" : "+moe"}`).join(" ");
  writeFileSync(
    join(dir, "synth.json"),
    JSON.stringify({ generator: "k3 synth", family, layers: tc.num_hidden_layers, experts: tc.num_experts, vocab: tc.vocab_size, seed, tokenizer: options.tokenizer ? "copied" : "synthetic", layer_map: layerMap, ...(options.onlyLayers ? { only_layers: options.onlyLayers } : {}) }, null, 2) + "\n",
  );

  // Shards are synced together at the end (before the index): a per-shard fsync would stop the
  // writes while each shard drains (measured 1.4x slower on this disk).
  const direct = (options.io ?? "direct") === "direct";
  const staging = direct ? new StagingBuffers(options.writeBufferBytes ?? WRITE_BATCH, options.writeBuffers ?? 4) : null;
  // Each shard's queue, and the header bytes it carries (progress counts tensor data written).
  const queues: { q: DirectFileWriter; header: number }[] = [];
  const queue = staging
    ? (fd: number, file: string): ByteQueue => {
        const q = new DirectFileWriter(fd, file, { staging, refuseDirect: options.refuseDirect });
        const entry = { q, header: -1 };
        queues.push(entry);
        return {
          push: (v, p) => {
            if (entry.header < 0) entry.header = v.length; // the planned header comes first
            return q.push(v, p);
          },
          drain: () => q.drain(),
          get idle() {
            return q.idle;
          },
          close: () => q.close(),
        };
      }
    : undefined;
  const writer = new ShardedCheckpointWriter(dir, { shardMetadata: { format: "pt" }, fsync: (options.fsync ?? true) ? "finish" : false, queue });
  const blocks = new BlockCache(seed);
  blocks.prefetch(plan.flatMap((sh) => sh.tensors));
  // Progress: tensor bytes on their way to disk. O_DIRECT: bytes whose write completed (at most the
  // 4 staging buffers behind what was generated); buffered: bytes generated, as before (the page
  // cache takes them at once and the fsync at the end holds the rest). Rate and ETA are from the
  // first shard's start, so setup (tokenizer, first blocks) does not dilute the rate.
  let produced = 0;
  const written = () => (staging ? queues.reduce((a, e) => a + Math.max(0, e.q.written - Math.max(0, e.header)), 0) : produced);
  let lastReport = 0;
  let tWrite = 0;
  const report = (item: string, finished: boolean) => {
    if (!options.onProgress) return;
    const now = performance.now();
    if (!finished && now - lastReport < 200) return;
    lastReport = now;
    const done = finished ? dataBytes : Math.min(dataBytes, written());
    const secs = (now - tWrite) / 1000;
    const rate = secs > 0 ? done / secs : 0;
    options.onProgress({ item, bytesDone: done, bytesTotal: dataBytes, rate, etaSeconds: finished ? 0 : rate > 0 ? (dataBytes - done) / rate : null, done: finished });
  };
  let shards: string[];
  const phase = { setup: (performance.now() - t0) / 1000, data: 0, finish: 0 };
  try {
    tWrite = performance.now();
    for (const shard of plan) {
      await writer.startShardAsync(shard.tensors.map((t): TensorSpec => ({ name: t.name, dtype: t.dtype, shape: t.shape })));
      for (const t of shard.tensors) {
        const counted = function* (): Generator<Uint8Array> {
          for (const c of tensorChunks(t, seed, blocks)) {
            yield c;
            produced += c.length;
            report(shard.label, false);
          }
        };
        // One write queue per shard across its tensors: no wait at a tensor's end (K3's MoE
        // layer is 5,376 expert tensors of 0.34-5.5 MB). O_DIRECT: pieces copied into 4 staging
        // buffers of 32 MiB, each written while the next fills; buffered: batches of 32 MiB, 4 in flight.
        await blocks.ready(t);
        await writer.addChunksAsync(t.name, t.dtype, t.shape, counted(), { queued: true, inFlight: 4, batchBytes: WRITE_BATCH });
      }
    }
    report("fsync", false);
    const tFinish = performance.now();
    phase.data = (tFinish - tWrite) / 1000;
    shards = await writer.finishAsync();
    phase.finish = (performance.now() - tFinish) / 1000;
  } catch (err) {
    writer.abort();
    throw err;
  }
  const fellBack = queues.find((e) => e.q.fallback !== null)?.q.fallback ?? null;
  const io: SynthResult["io"] = !direct ? { mode: "buffered", note: "io: buffered was asked" } : fellBack ? { mode: "buffered", note: fellBack } : { mode: "O_DIRECT", note: null };
  report("done", true);
  let fileBytes = 0;
  for (const f of readdirSync(dir)) if (OWN_FILES.includes(f) || SHARD_RE.test(f)) fileBytes += statSizeOf(join(dir, f));
  return {
    dir,
    config,
    dataBytes,
    fileBytes,
    tensors: plan.reduce((a, s) => a + s.tensors.length, 0),
    shards,
    seconds: (performance.now() - t0) / 1000,
    layerMap,
    io,
    phases: phase,
  };
}

/** `plan` restricted to the tensors of `layers` (empty shards dropped), or `plan` when not given. */
function onlyLayersOf(plan: SynthShard[], layers: number[] | undefined, numLayers: number): SynthShard[] {
  if (layers === undefined) return plan;
  if (!Array.isArray(layers) || layers.length === 0 || layers.some((l) => !Number.isInteger(l) || l < 0 || l >= numLayers)) {
    throw new UsageError(`synth: onlyLayers ${JSON.stringify(layers)}: expected zero-based layer numbers in 0..${numLayers - 1}`);
  }
  const keep = new Set(layers);
  const layerOf = (name: string) => Number(/\.layers\.(\d+)\./.exec(name)?.[1] ?? -1);
  return plan.map((s) => ({ ...s, tensors: s.tensors.filter((t) => keep.has(layerOf(t.name))) })).filter((s) => s.tensors.length > 0);
}

function statSizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

// ---------------------------------------------------------------- progress


/**
 * An onProgress callback: a bar redrawn in place on a TTY, otherwise one plain line every
 * `intervalMs` (default 5 s) with bytes, rate and ETA.
 */
export function synthProgressPrinter(stream: NodeJS.WriteStream = process.stderr, opts: { tty?: boolean; intervalMs?: number } = {}): (p: SynthProgress) => void {
  const tty = opts.tty ?? !!stream.isTTY;
  const interval = opts.intervalMs ?? (tty ? 250 : 5000);
  let last = -Infinity;
  return (p) => {
    const now = performance.now();
    if (!p.done && now - last < interval) return;
    last = now;
    const frac = p.bytesTotal > 0 ? p.bytesDone / p.bytesTotal : 1;
    const eta = p.etaSeconds === null ? "--" : `${Math.round(p.etaSeconds)} s`;
    const text = `${formatBytes(p.bytesDone)} / ${formatBytes(p.bytesTotal)} (${(frac * 100).toFixed(1)}%) ${(p.rate / 1e9).toFixed(2)} GB/s ETA ${eta} ${p.item}`;
    if (tty) {
      const width = 30;
      const bar = "#".repeat(Math.round(frac * width)).padEnd(width, ".");
      redrawLine(stream, `synth [${bar}] ${text}`, p.done);
    } else stream.write(`synth: ${text}\n`);
  };
}

// ---------------------------------------------------------------- CI fixture

/**
 * The real-width checkpoints of the CI test (issue 13 item 6: each under ~3 GB written, pack
 * included), every matrix at the published width, vocab 4096:
 *
 * - "small" (default): K3, 1 layer, MLA + MoE (`denseLayers: 0`; hidden 7168, MLA q_lora 1536 /
 *   kv_lora 512 / 96 heads, 16 = top-k MXFP4 experts of 17.5 MB, 2 shared experts, router
 *   16 x 7168): 1.23 GB, whose trunk (0.95 GB) the pack writes again: 2.18 GB in all.
 * - "kda-dense": K3's layer 0 only (`onlyLayers: [0]` of a 2-layer K3: KDA 96 x 128 with short
 *   conv and gates + the dense MLP of 33,792): 2.34 GB and no pack; the engine cannot run it (no
 *   embed, no MLA), the test checks each layer against a float64 reference. Packed and run, a KDA
 *   layer (0.89 GB) and the dense MLP (1.45 GB) would be written twice: not under 3 GB.
 * - "kimi-linear": Kimi-Linear-48B, 2 layers (0 = KDA 32 x 128 + dense MLP 9,216, 1 = MLA 32 heads
 *   + MoE with 8 = top-k bf16 experts and 1 shared expert), hidden 2304: 0.36 GB + its pack.
 * - "full": K3, 2 layers (0 = KDA + dense MLP, 1 = MLA + MoE), 3.57 GB + a 3.29 GB pack
 *   (`K3_REALWIDTH_CI=full` in the test).
 *
 * `synthCiCheckpoint` writes one.
 */
export type CiFixture = "small" | "kda-dense" | "kimi-linear" | "full";

export function ciCheckpointOptions(out: string, seed = 0, size: CiFixture = "small"): SynthOptions {
  const common = { out, seed, vocab: 4096, force: true };
  switch (size) {
    case "full":
      return { ...common, family: "k3", layers: 2, experts: 16 };
    case "kda-dense":
      return { ...common, family: "k3", layers: 2, experts: 16, onlyLayers: [0] };
    case "kimi-linear":
      return { ...common, family: "kimi-linear", layers: 2, experts: 8 };
    default:
      return { ...common, family: "k3", layers: 1, denseLayers: 0, experts: 16 };
  }
}

/** Writes one of the CI-sized real-width checkpoints into `out` (replacing an earlier one). */
export function synthCiCheckpoint(out: string, options: { seed?: number; size?: CiFixture; onProgress?: SynthOptions["onProgress"]; fsync?: boolean } = {}): Promise<SynthResult> {
  return synthesize({ ...ciCheckpointOptions(out, options.seed, options.size), onProgress: options.onProgress, fsync: options.fsync });
}
