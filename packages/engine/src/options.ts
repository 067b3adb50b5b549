/**
 * Every option's range, choices and default, once. The CLI (cli/table.ts), the server
 * (server.ts), `Engine` (engine.ts) and the sampler (sampler.ts) check values through these rules,
 * so a limit or a default cannot differ between them again (issue 16: `--threads` took 1024 where
 * the pool stops at 256, chat's help said 64 tokens where it used 512, the server capped the
 * temperature at 2 and the CLI did not).
 *
 * Two message styles, one per audience: engine options name the CLI flag ("--chunk 0: expected
 * ..."), sampling options name the OpenAI field ("temperature = 3: expected ..."), which the
 * server hands back as the 400's `param`.
 *
 * This module loads no native addon: `k3 --help` and `k3 download` import it.
 */
import { UsageError } from "./errors.js";

/** A numeric option: its bounds (inclusive unless `minOpen`) and what a bad value is told. */
export interface NumberRule {
  /** The CLI flag (engine options) or OpenAI field (sampling options) the message names. */
  readonly label: string;
  readonly integer: boolean;
  readonly min: number;
  readonly max: number;
  /** The lower bound itself is excluded (top_p > 0). */
  readonly minOpen?: boolean;
  /** What the message says the value should be, e.g. "an integer in 1..256". */
  readonly expected: string;
}

/** Threads of the shared compute pool: dense/native/src/pool.c MAX_THREADS (test/options.test.ts reads it there). */
export const MAX_THREADS = 256;
/** The longest prompt one generation takes (a prompt <= 32768 ids), for `k3 run`, eval, chat and the server alike. */
export const MAX_PROMPT_TOKENS = 32768;
/** Tokens one call generates at most: `k3 run`, `k3 chat`, the server and Engine.generate alike. */
export const MAX_NEW_TOKENS = 4096;
/** Largest sampling temperature (OpenAI's range is [0, 2]; above it the draw is noise). */
export const MAX_TEMPERATURE = 2;
/** Largest prefill chunk, in tokens. */
export const MAX_CHUNK = 4096;
/** The draft length bound (the reference engine's --spec accepts up to 8). */
export const MAX_SPEC_DRAFT = 8;
/** Largest expert read piece, in MiB. */
export const MAX_PIECE_MB = 1024;
/** Most prompt-cache snapshots. */
export const MAX_PROMPT_CACHE_SLOTS = 1024;

const int = (label: string, min: number, max: number, expected = max === Infinity ? `an integer >= ${min}` : `an integer in ${min}..${max}`): NumberRule => ({ label, integer: true, min, max, expected });
const real = (label: string, min: number, max: number, expected: string, minOpen = false): NumberRule => ({ label, integer: false, min, max, minOpen, expected });

/** Engine options (EngineOptions and the `k3` flags that set them). */
export const ENGINE_RULES = {
  threads: int("--threads", 1, MAX_THREADS),
  chunkSize: int("--chunk", 1, MAX_CHUNK),
  pieceMb: int("--piece-mb", 0, MAX_PIECE_MB, `an integer number of MiB in 0..${MAX_PIECE_MB} (0 = one read per expert)`),
  spec: int("--spec", 0, MAX_SPEC_DRAFT, `an integer draft length in 0..${MAX_SPEC_DRAFT} (0 = off)`),
  layers: int("--layers", 1, Infinity, "an integer number of layers >= 1"),
  promptCacheSlots: int("--prompt-cache", 0, MAX_PROMPT_CACHE_SLOTS, `an integer in 0..${MAX_PROMPT_CACHE_SLOTS} (0 = off)`),
} as const satisfies Record<string, NumberRule>;

/** Sampling and generation options (GenerateOptions, the OpenAI request fields, the `k3` sampling flags). */
export const SAMPLING_RULES = {
  maxTokens: int("max_tokens", 1, MAX_NEW_TOKENS),
  temperature: real("temperature", 0, MAX_TEMPERATURE, `a number in [0, ${MAX_TEMPERATURE}]`),
  topK: int("top_k", 0, Infinity),
  topP: real("top_p", 0, 1, "a number in (0, 1]", true),
  seed: int("seed", 0, Number.MAX_SAFE_INTEGER, "a non-negative integer"),
  presencePenalty: real("presence_penalty", -2, 2, "a number in [-2, 2]"),
  frequencyPenalty: real("frequency_penalty", -2, 2, "a number in [-2, 2]"),
  logitBias: real("logit_bias", -100, 100, "a number in [-100, 100]"),
} as const satisfies Record<string, NumberRule>;

/** The choices of the string-valued engine options. */
export const CHOICES = {
  simd: ["scalar", "avx2", "avx512"],
  kdaCore: ["auto", "recurrent", "chunked"],
  loadMethod: ["pool", "per-tensor"],
  warm: ["auto", "wait", "off"],
  cachePolicy: ["lfu", "lru"],
  onExpertError: ["drop", "fail"],
  effort: ["low", "high", "max"],
} as const;

/**
 * Defaults that differ by surface, side by side so the difference is a decision, not a drift:
 * the CLI is greedy for reproducible runs; the server follows OpenAI's documented default
 * temperature 1 (a client that omits it expects sampling); a chat reply gets more room than a
 * one-shot `k3 run` smoke test.
 */
export const DEFAULTS = {
  maxTokens: { run: 64, chat: 512, server: 256, engine: 256 },
  temperature: { cli: 0, server: 1, engine: 0 },
  topK: 0,
  topP: 1,
  seed: 0,
  presencePenalty: 0,
  frequencyPenalty: 0,
  chunkSize: 64,
  pieceMb: 4,
  spec: 0,
  promptCacheSlots: 1,
  promptCacheMb: 1024,
} as const;

/** True when `x` is within the rule (a number, an integer if it must be, inside the bounds). */
export function satisfies(rule: NumberRule, x: unknown): x is number {
  if (typeof x !== "number" || Number.isNaN(x)) return false;
  if (rule.integer ? !Number.isSafeInteger(x) : !Number.isFinite(x)) return false;
  return (rule.minOpen ? x > rule.min : x >= rule.min) && x <= rule.max;
}

/** An engine option: the value when within its rule, else a UsageError naming the flag ("--chunk 0: expected ..."). */
export function checkEngineOption(rule: NumberRule, x: unknown): number {
  if (!satisfies(rule, x)) throw new UsageError(`${rule.label} ${String(x)}: expected ${rule.expected}`);
  return x;
}

/** A sampling option: the value when within its rule, else a UsageError naming the field ("temperature = 3: expected ..."). */
export function checkSamplingOption(rule: NumberRule, x: unknown, label = rule.label): number {
  if (!satisfies(rule, x)) throw new UsageError(`${label} = ${typeof x === "string" ? JSON.stringify(x) : String(x)}: expected ${rule.expected}`);
  return x;
}

/** A string option: the value when it is one of `choices`, else a UsageError naming the flag. */
export function checkChoice<T extends string>(flag: string, choices: readonly T[], x: unknown, note = ""): T {
  if (typeof x !== "string" || !(choices as readonly string[]).includes(x)) {
    const list = choices.length === 2 ? `${choices[0]} or ${choices[1]}` : `${choices.slice(0, -1).join(", ")} or ${choices.at(-1)}`;
    throw new UsageError(`${flag} ${String(x)}: expected ${list}${note}`);
  }
  return x as T;
}
