/**
 * config.json reader that refuses to guess (docs/architecture.md §0).
 *
 * Accepts K3's nested layout (`text_config` + `text_config.linear_attn_config`, weights under
 * `language_model.`) and Kimi-Linear-48B's flat one. Every missing or inconsistent key is
 * collected and reported in ONE ConfigError, so a user fixes a config in one pass. Nothing that
 * changes the math is defaulted: a silently defaulted layer map turns every layer into KDA and
 * still produces fluent-looking garbage.
 */
import { join } from "node:path";
import { readRegularTextSync } from "@k3/native";
import { ConfigError, UsageError } from "./errors.js";

export type LayerKind = "kda" | "mla";
export type ModelFamily = "k3" | "kimi-linear";

export interface KdaConfig {
  numHeads: number;
  headDim: number;
  convKernel: number;
  /** K3's bounded gate g = lb·σ(e^A z); null = Kimi-Linear's −e^A softplus(z). */
  gateLowerBound: number | null;
  /** K3: full-rank g_proj output gate; else g_a_proj/g_b_proj. */
  fullRankGate: boolean;
}

export interface MlaConfig {
  numHeads: number;
  /** null = a plain q_proj (48B); else q_a_proj/q_a_layernorm/q_b_proj. */
  qLoraRank: number | null;
  kvLoraRank: number;
  qkNopeHeadDim: number;
  qkRopeHeadDim: number;
  vHeadDim: number;
  /** K3: sigmoid output gate (g_proj) before o_proj. */
  outputGate: boolean;
}

export interface MoeConfig {
  numExperts: number;
  topK: number;
  numShared: number;
  /** Expert intermediate width (w1/w3 rows). */
  intermediate: number;
  /** K3 latent MoE width (routed_expert_hidden_size); null = experts at full width. */
  latentDim: number | null;
  latentNorm: boolean;
  routedScalingFactor: number;
  renormalize: boolean;
  /** Routed experts stored as MXFP4 (compressed-tensors weight_packed/weight_scale). */
  mxfp4: boolean;
}

/** The typed, validated model configuration. */
export interface ModelConfig {
  family: ModelFamily;
  /** `language_model.` for K3, `` for Kimi-Linear. */
  tensorPrefix: string;
  hiddenSize: number;
  numLayers: number;
  vocabSize: number;
  rmsNormEps: number;
  bosTokenId: number;
  eosTokenId: number;
  padTokenId: number | null;
  hiddenAct: "situ" | "silu";
  situBeta: number;
  situLinearBeta: number;
  /** Zero-based layer kinds (from the ONE-based full_attn_layers). */
  layerKinds: LayerKind[];
  kda: KdaConfig;
  mla: MlaConfig;
  moe: MoeConfig;
  denseIntermediate: number;
  firstKDenseReplace: number;
  moeLayerFreq: number;
  /** K3 block attention residuals; null = plain additive residuals. */
  attnResBlockSize: number | null;
  maxPositionEmbeddings: number | null;
  /** The raw JSON (for the fingerprint and diagnostics). */
  raw: Record<string, unknown>;
}

/**
 * The first `n` layers of `cfg` (`--layers N`: a smoke test of a partly downloaded checkpoint; the
 * final norm and lm_head follow layer n-1, so the output is not the model's). The raw config gets
 * `k3_layers` so fingerprints (state files, prompt cache) never mix it with the full model.
 */
export function withLayers(cfg: ModelConfig, n: number | undefined): ModelConfig {
  if (n === undefined || n === cfg.numLayers) return cfg;
  if (!Number.isInteger(n) || n < 1 || n > cfg.numLayers) throw new UsageError(`layers ${n}: expected an integer in 1..${cfg.numLayers} (the config has ${cfg.numLayers} layers)`);
  return { ...cfg, numLayers: n, layerKinds: cfg.layerKinds.slice(0, n), raw: { ...cfg.raw, k3_layers: n } };
}

/** True when layer l (zero-based) has an MoE FFN rather than the dense MLP. */
export function isMoeLayer(cfg: ModelConfig, layer: number): boolean {
  return layer >= cfg.firstKDenseReplace && layer % cfg.moeLayerFreq === 0;
}

/** The MoE layers' indices, in order. */
export function moeLayersOf(cfg: ModelConfig): number[] {
  return [...Array(cfg.numLayers).keys()].filter((l) => isMoeLayer(cfg, l));
}

type Json = Record<string, unknown>;

/** A value as a refusal shows it: JSON.stringify turns Infinity (what 1e400 parses to) into "null". */
function shown(v: unknown): string {
  return typeof v === "number" && !Number.isFinite(v) ? String(v) : JSON.stringify(v);
}

/**
 * Upper bounds on the config's sizes: far above any Kimi model (K3 in brackets), far below what
 * would overflow an allocation or a 2^53 index product. A value past them is a broken or hostile
 * config, refused before anything is allocated from it (num_hidden_layers 1e9 was a V8 fatal error).
 */
const MAX = {
  hidden: 1 << 16, // hidden_size [7168]
  layers: 1024, // num_hidden_layers [93]
  vocab: 1 << 22, // vocab_size [163840]
  heads: 1024, // KDA / MLA heads [96]
  headDim: 4096, // head dims [128]
  convKernel: 64, // short_conv_kernel_size [4]
  rank: 1 << 16, // q_lora_rank / kv_lora_rank [1536 / 512]
  experts: 1 << 16, // num_experts [896]
  shared: 64, // num_shared_experts [2]
  ffn: 1 << 20, // intermediate sizes [33792 / 3072]
  positions: 1 << 24, // max_position_embeddings [1048576]
  scale: 1000, // routed_scaling_factor, SiTU betas, |gate_lower_bound| [1 / 4 / 25 / 5]
} as const;

/** Collects problems while reading fields, so that all of them are reported together. */
class FieldReader {
  readonly problems: string[] = [];
  constructor(private readonly obj: Json, private readonly path: string) {}

  private where(key: string): string {
    return this.path ? `${this.path}.${key}` : key;
  }

  has(key: string): boolean {
    return this.obj[key] !== undefined;
  }

  /** An integer in [min, max]: every size is bounded here, before anything is allocated from it. */
  int(key: string, min: number, max: number): number {
    const v = this.obj[key];
    if (v === undefined) {
      this.problems.push(`${this.where(key)} is missing (an integer in ${min}..${max} is required)`);
      return NaN;
    }
    if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) {
      this.problems.push(`${this.where(key)} = ${shown(v)}: expected an integer in ${min}..${max}`);
      return NaN;
    }
    return v;
  }

  optionalInt(key: string, min: number, max: number): number | null {
    const v = this.obj[key];
    if (v === undefined || v === null) return null;
    return this.int(key, min, max);
  }

  /** A key that must be present but may be null (e.g. q_lora_rank: null selects q_proj). */
  nullableInt(key: string, min: number, max: number): number | null {
    if (!(key in this.obj)) {
      this.problems.push(`${this.where(key)} is missing (an integer, or null)`);
      return null;
    }
    return this.optionalInt(key, min, max);
  }

  /** A finite number that also passes `check` (1e400 parses as Infinity: refused here, whatever the check). */
  num(key: string, check: (x: number) => boolean, what: string): number {
    const v = this.obj[key];
    if (v === undefined) {
      this.problems.push(`${this.where(key)} is missing (${what} is required)`);
      return NaN;
    }
    if (typeof v !== "number" || !Number.isFinite(v) || !check(v)) {
      this.problems.push(`${this.where(key)} = ${shown(v)}: expected ${what}`);
      return NaN;
    }
    return v;
  }

  optionalNum(key: string, check: (x: number) => boolean, what: string): number | null {
    if (this.obj[key] === undefined || this.obj[key] === null) return null;
    return this.num(key, check, what);
  }

  bool(key: string): boolean {
    const v = this.obj[key];
    if (v === undefined) {
      this.problems.push(`${this.where(key)} is missing (true or false is required)`);
      return false;
    }
    if (typeof v !== "boolean") {
      this.problems.push(`${this.where(key)} = ${JSON.stringify(v)}: expected true or false`);
      return false;
    }
    return v;
  }

  optionalBool(key: string, absent: boolean): boolean {
    if (this.obj[key] === undefined) return absent;
    return this.bool(key);
  }

  str(key: string, allowed: readonly string[]): string {
    const v = this.obj[key];
    if (v === undefined) {
      this.problems.push(`${this.where(key)} is missing (one of ${allowed.map((a) => JSON.stringify(a)).join(", ")})`);
      return "";
    }
    if (typeof v !== "string" || !allowed.includes(v)) {
      this.problems.push(
        `${this.where(key)} = ${JSON.stringify(v)}: supported values are ${allowed.map((a) => JSON.stringify(a)).join(", ")}`,
      );
      return "";
    }
    return v;
  }

  object(key: string): Json | null {
    const v = this.obj[key];
    if (v === undefined) {
      this.problems.push(`${this.where(key)} is missing (an object is required)`);
      return null;
    }
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      this.problems.push(`${this.where(key)}: expected an object, got ${JSON.stringify(v)}`);
      return null;
    }
    return v as Json;
  }

  intList(key: string, required: boolean): number[] | null {
    const v = this.obj[key];
    if (v === undefined) {
      if (required) this.problems.push(`${this.where(key)} is missing (a list of ONE-based layer numbers is required)`);
      return null;
    }
    if (!Array.isArray(v) || !v.every((x) => typeof x === "number" && Number.isInteger(x))) {
      this.problems.push(`${this.where(key)}: expected a list of integers, got ${JSON.stringify(v).slice(0, 80)}`);
      return null;
    }
    return v as number[];
  }
}

/**
 * Parses and validates a config object. `file` names the source in error messages.
 * Throws ConfigError listing every problem found.
 */
export function parseConfig(raw: unknown, file = "config.json"): ModelConfig {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ConfigError(file, ["the top level must be a JSON object"]);
  }
  const top = raw as Json;
  const nested = top.text_config !== undefined;
  const problems: string[] = [];
  let tc: Json = top;
  if (nested) {
    if (typeof top.text_config !== "object" || top.text_config === null || Array.isArray(top.text_config)) {
      throw new ConfigError(file, ["text_config must be an object"]);
    }
    tc = top.text_config as Json;
  }
  const base = nested ? "text_config" : "";
  const r = new FieldReader(tc, base);

  const hiddenSize = r.int("hidden_size", 1, MAX.hidden);
  const numLayers = r.int("num_hidden_layers", 1, MAX.layers);
  const vocabSize = r.int("vocab_size", 1, MAX.vocab);
  const rmsNormEps = r.num("rms_norm_eps", (x) => x > 0 && x < 1, "a number in (0, 1)");

  // Token ids: the nested layout repeats them at the top; they must agree.
  const ids: Record<string, number | null> = {};
  for (const key of ["bos_token_id", "eos_token_id", "pad_token_id"] as const) {
    const inner = tc[key];
    const outer = top[key];
    if (nested && inner !== undefined && outer !== undefined && inner !== outer) {
      problems.push(`${key}: top level says ${JSON.stringify(outer)} but text_config says ${JSON.stringify(inner)}`);
    }
    const v = inner ?? outer;
    if (v === undefined || v === null) {
      if (key !== "pad_token_id") problems.push(`${key} is missing`);
      ids[key] = null;
    } else if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
      problems.push(`${key} = ${JSON.stringify(v)}: expected a non-negative integer`);
      ids[key] = null;
    } else {
      ids[key] = v;
      if (Number.isInteger(vocabSize) && v >= vocabSize) problems.push(`${key} = ${v} is outside the vocabulary (vocab_size ${vocabSize})`);
    }
  }

  const hiddenAct = r.str("hidden_act", ["situ", "silu"]) as "situ" | "silu" | "";
  let situBeta = NaN;
  let situLinearBeta = NaN;
  if (hiddenAct === "situ") {
    situBeta = r.num("activation_situ_beta", (x) => x > 0 && x <= MAX.scale, `a number in (0, ${MAX.scale}]`);
    situLinearBeta = r.num("activation_situ_linear_beta", (x) => x > 0 && x <= MAX.scale, `a number in (0, ${MAX.scale}]`);
  }

  // KDA and the layer map.
  const la = r.object("linear_attn_config");
  const layerKinds: LayerKind[] = [];
  const kda: KdaConfig = { numHeads: NaN, headDim: NaN, convKernel: NaN, gateLowerBound: null, fullRankGate: false };
  let laProblems: string[] = [];
  if (la) {
    const lr = new FieldReader(la, base ? `${base}.linear_attn_config` : "linear_attn_config");
    kda.numHeads = lr.int("num_heads", 1, MAX.heads);
    kda.headDim = lr.int("head_dim", 1, MAX.headDim);
    kda.convKernel = lr.int("short_conv_kernel_size", 1, MAX.convKernel);
    kda.gateLowerBound = lr.optionalNum("gate_lower_bound", (x) => x < 0 && x >= -MAX.scale, `a number in [-${MAX.scale}, 0)`);
    kda.fullRankGate = lr.optionalBool("use_full_rank_gate", false);
    const full = lr.intList("full_attn_layers", true);
    const kdaList = lr.intList("kda_layers", false);
    laProblems = lr.problems;
    if (full && Number.isInteger(numLayers)) {
      const bad = full.filter((x) => x < 1 || x > numLayers);
      const dup = full.filter((x, i) => full.indexOf(x) !== i);
      if (full.includes(0)) {
        laProblems.push(
          `linear_attn_config.full_attn_layers contains 0: the list is ONE-based (layer numbers 1..${numLayers}); a zero-based list would shift every MLA layer`,
        );
      } else if (bad.length) {
        laProblems.push(`linear_attn_config.full_attn_layers has ${JSON.stringify(bad)} outside 1..${numLayers} (the list is ONE-based)`);
      }
      if (dup.length) laProblems.push(`linear_attn_config.full_attn_layers repeats ${JSON.stringify([...new Set(dup)])}`);
      if (full.length === 0) laProblems.push("linear_attn_config.full_attn_layers is empty: a model with no MLA layer is not a Kimi model");
      for (let l = 0; l < numLayers; l++) layerKinds.push(full.includes(l + 1) ? "mla" : "kda");
      if (kdaList) {
        const want = layerKinds.flatMap((k, l) => (k === "kda" ? [l + 1] : []));
        const got = [...kdaList].sort((a, b) => a - b);
        if (got.length !== want.length || got.some((x, i) => x !== want[i])) {
          laProblems.push(
            `linear_attn_config.kda_layers is not the complement of full_attn_layers (expected ${JSON.stringify(want)}, got ${JSON.stringify(kdaList)})`,
          );
        }
      }
    }
  }

  // MLA.
  if (tc.mla_use_nope !== true) {
    problems.push(
      tc.mla_use_nope === undefined
        ? `${base ? base + "." : ""}mla_use_nope is missing (only NoPE MLA exists in Kimi models; set it to true)`
        : `${base ? base + "." : ""}mla_use_nope = ${JSON.stringify(tc.mla_use_nope)}: only NoPE MLA is supported`,
    );
  }
  const mla: MlaConfig = {
    numHeads: r.int("num_attention_heads", 1, MAX.heads),
    qLoraRank: r.nullableInt("q_lora_rank", 1, MAX.rank),
    kvLoraRank: r.int("kv_lora_rank", 1, MAX.rank),
    qkNopeHeadDim: r.int("qk_nope_head_dim", 1, MAX.headDim),
    qkRopeHeadDim: r.int("qk_rope_head_dim", 0, MAX.headDim),
    vHeadDim: r.int("v_head_dim", 1, MAX.headDim),
    outputGate: r.optionalBool("mla_use_output_gate", false),
  };

  // MoE.
  const quant = (top.quantization_config ?? tc.quantization_config) as Json | undefined;
  const mxfp4 = !!quant && typeof quant === "object" && quant.format === "mxfp4-pack-quantized";
  if (quant && typeof quant === "object" && !mxfp4) {
    problems.push(`quantization_config.format = ${JSON.stringify(quant.format)}: only "mxfp4-pack-quantized" (routed experts) is supported`);
  }
  const moe: MoeConfig = {
    numExperts: r.int("num_experts", 1, MAX.experts),
    topK: r.int("num_experts_per_token", 1, MAX.experts),
    numShared: r.int("num_shared_experts", 0, MAX.shared),
    intermediate: r.int("moe_intermediate_size", 1, MAX.ffn),
    latentDim: r.optionalInt("routed_expert_hidden_size", 1, MAX.hidden),
    latentNorm: false,
    routedScalingFactor: r.num("routed_scaling_factor", (x) => x > 0 && x <= MAX.scale, `a number in (0, ${MAX.scale}]`),
    renormalize: r.bool("moe_renormalize"),
    mxfp4,
  };
  if (moe.latentDim !== null) moe.latentNorm = r.bool("latent_moe_use_norm");
  if (Number.isInteger(moe.topK) && Number.isInteger(moe.numExperts) && moe.topK > moe.numExperts) {
    problems.push(`num_experts_per_token = ${moe.topK} exceeds num_experts = ${moe.numExperts}`);
  }
  r.str("moe_router_activation_func", ["sigmoid"]);
  for (const key of ["num_expert_group", "topk_group"]) {
    if (tc[key] !== undefined && tc[key] !== 1) {
      problems.push(`${base ? base + "." : ""}${key} = ${JSON.stringify(tc[key])}: grouped routing with more than one group is not implemented`);
    }
  }
  if (tc.topk_method !== undefined && tc.topk_method !== "noaux_tc") {
    problems.push(`${base ? base + "." : ""}topk_method = ${JSON.stringify(tc.topk_method)}: only "noaux_tc" is supported`);
  }
  const denseIntermediate = r.int("intermediate_size", 1, MAX.ffn);
  const firstKDenseReplace = r.int("first_k_dense_replace", 0, MAX.layers);
  const moeLayerFreq = r.int("moe_layer_freq", 1, MAX.layers);
  if (Number.isInteger(firstKDenseReplace) && Number.isInteger(numLayers) && firstKDenseReplace > numLayers) {
    problems.push(`first_k_dense_replace = ${firstKDenseReplace} exceeds num_hidden_layers = ${numLayers}`);
  }
  const attnResBlockSize = r.optionalInt("attn_res_block_size", 1, MAX.layers);
  const maxPositionEmbeddings = r.optionalInt("max_position_embeddings", 1, MAX.positions);
  if (tc.num_nextn_predict_layers !== undefined && tc.num_nextn_predict_layers !== 0) {
    problems.push(`num_nextn_predict_layers = ${JSON.stringify(tc.num_nextn_predict_layers)}: MTP heads are not supported`);
  }
  if (tc.tie_word_embeddings === true || top.tie_word_embeddings === true) {
    problems.push("tie_word_embeddings = true: Kimi models have a separate lm_head");
  }

  // K3 is identified by its features; each K3-only feature must be fully specified.
  const family: ModelFamily = top.model_type === "kimi_k3" || nested ? "k3" : "kimi-linear";
  if (family === "k3") {
    if (attnResBlockSize === null) problems.push("text_config.attn_res_block_size is missing (K3 uses block attention residuals)");
    if (la && kda.gateLowerBound === null) problems.push("text_config.linear_attn_config.gate_lower_bound is missing (K3 uses the bounded KDA gate)");
  }
  if (kda.numHeads && mla.numHeads && la && !Number.isNaN(kda.headDim) && kda.headDim < 1) {
    problems.push("linear_attn_config.head_dim must be positive");
  }

  const all = [...r.problems, ...laProblems, ...problems];
  if (all.length) throw new ConfigError(file, all);

  return {
    family,
    tensorPrefix: nested ? "language_model." : "",
    hiddenSize,
    numLayers,
    vocabSize,
    rmsNormEps,
    bosTokenId: ids.bos_token_id as number,
    eosTokenId: ids.eos_token_id as number,
    padTokenId: ids.pad_token_id,
    hiddenAct: hiddenAct as "situ" | "silu",
    situBeta,
    situLinearBeta,
    layerKinds,
    kda,
    mla,
    moe,
    denseIntermediate,
    firstKDenseReplace,
    moeLayerFreq,
    attnResBlockSize,
    maxPositionEmbeddings,
    raw: top,
  };
}

const CONFIG_MAX_BYTES = 16 << 20;

/** Reads `<dir>/config.json`; a missing file or bad JSON is a ConfigError naming the file. */
export function readConfig(dir: string): ModelConfig {
  const file = join(dir, "config.json");
  let text: string;
  try {
    // A regular file only (a FIFO hung the reader forever); K3's is 4 kB, so 16 MiB is generous.
    text = readRegularTextSync(file, CONFIG_MAX_BYTES);
  } catch (err) {
    const e = err as { code?: string; message?: string };
    throw new ConfigError(file, [`cannot read it (${e.code ?? String(err)}${e.code === "ENOTREG" || e.code === "EFBIG" ? `: ${e.message}` : ""}); a model directory needs config.json`], { cause: err });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new ConfigError(file, [`not valid JSON: ${(err as Error).message}`], { cause: err });
  }
  return parseConfig(raw, file);
}

/** Special ids K3 and Kimi-Linear reserve after the ranks (num_reserved_special_tokens, docs/formats.md §2.1). */
export const KIMI_SPECIAL_IDS = 256;

/**
 * Checks the config against the tokenizer it ships with: the vocabularies must match exactly
 * (ranks + specials), otherwise ids would index the wrong embedding rows. The rank count is checked
 * on its own: the tokenizer stretches its special range to the highest named special id, so a
 * rank file cut at a line boundary still totals vocab_size, with every special shifted.
 */
export function checkTokenizerMatch(cfg: ModelConfig, tok: { nVocab: number; nRanks: number }, file = "config.json"): void {
  const ranks = cfg.vocabSize - KIMI_SPECIAL_IDS;
  if (tok.nRanks !== ranks) {
    throw new ConfigError(file, [
      `tiktoken.model has ${tok.nRanks} ranks but vocab_size = ${cfg.vocabSize} needs ${ranks} (+ ${KIMI_SPECIAL_IDS} specials); the rank file is cut or belongs to another model`,
    ]);
  }
  if (tok.nVocab !== cfg.vocabSize) {
    throw new ConfigError(file, [
      `vocab_size = ${cfg.vocabSize} but the tokenizer has ${tok.nVocab} ids (ranks + specials); the checkpoint and tokenizer do not belong together`,
    ]);
  }
}

/** A short stable fingerprint of everything in the config that changes the math (for state files). */
export function configFingerprint(cfg: ModelConfig): string {
  const essential = {
    family: cfg.family,
    d: cfg.hiddenSize,
    n: cfg.numLayers,
    v: cfg.vocabSize,
    eps: cfg.rmsNormEps,
    act: [cfg.hiddenAct, cfg.situBeta, cfg.situLinearBeta],
    map: cfg.layerKinds.map((k) => (k === "kda" ? "K" : "M")).join(""),
    kda: cfg.kda,
    mla: cfg.mla,
    moe: cfg.moe,
    dense: [cfg.denseIntermediate, cfg.firstKDenseReplace, cfg.moeLayerFreq],
    res: cfg.attnResBlockSize,
  };
  return fnv1a64(JSON.stringify(essential));
}

/** FNV-1a 64-bit of a string's UTF-16 code units, as 16 hex digits. */
export function fnv1a64(text: string): string {
  let h = 0xcbf29ce484222325n;
  const prime = 0x100000001b3n;
  const mask = 0xffffffffffffffffn;
  for (let i = 0; i < text.length; i++) {
    h ^= BigInt(text.charCodeAt(i));
    h = (h * prime) & mask;
  }
  return h.toString(16).padStart(16, "0");
}
