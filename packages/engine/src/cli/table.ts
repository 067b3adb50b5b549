/**
 * The `k3` option table: every flag once, with its type, placeholder, help, default and parser.
 * The parser (args.ts) and each command's help (help.ts) are both made from it, so a flag cannot
 * be accepted without being documented, nor documented with a default it does not have. Ranges
 * come from ../options.ts, the rules the server, Engine and the sampler check too.
 *
 * A command lists the flags it takes (its `sections`); one that means something else there (e.g.
 * `--layers` for synth, `--threads` for verify) overrides the entry's help, default or parser.
 *
 * Loads no native addon (`k3 --help` imports it).
 */
import { UsageError } from "../errors.js";
import { CHOICES, DEFAULTS, ENGINE_RULES, MAX_NEW_TOKENS, SAMPLING_RULES, checkChoice, checkEngineOption, checkSamplingOption, type NumberRule } from "../options.js";
import { PRESET_NAMES } from "../presets.js";

export interface OptionSpec {
  type: "string" | "boolean";
  /** Repeatable: the values come back as an array. */
  multiple?: boolean;
  short?: string;
  /** The value's placeholder in the help ("N", "DIR"). */
  arg?: string;
  /** One or more lines; later lines are indented under the first. */
  help: string;
  /** Filled in when the flag is absent, and shown as "(default X)". */
  default?: unknown;
  /** Shown as "(default X)" when the default is decided elsewhere (the engine, an env variable). */
  shows?: string;
  /** Converts and checks the value; a bad one is a UsageError naming the flag. Absent: the string as given. */
  parse?: (raw: string, flag: string) => unknown;
}

const SAMPLING = new Set<NumberRule>(Object.values(SAMPLING_RULES));

/**
 * A number checked by `rule`: a value that is not a number names the flag; one outside the range
 * gets the rule's own message: the flag for engine and CLI options, the OpenAI field for sampling
 * options (the words the server and Engine use for the same value).
 */
export function numberBy(rule: NumberRule): (raw: string, flag: string) => number {
  return (raw, flag) => {
    const x = raw.trim() === "" ? NaN : Number(raw);
    if (!Number.isFinite(x)) throw new UsageError(`${flag} ${raw}: expected ${rule.expected}`);
    return SAMPLING.has(rule) ? checkSamplingOption(rule, x) : checkEngineOption({ ...rule, label: flag }, x);
  };
}

/** A CLI-only integer (no engine or server counterpart). */
export function integer(min: number, max = Infinity, expected = max === Infinity ? `an integer >= ${min}` : `an integer in ${min}..${max}`): (raw: string, flag: string) => number {
  return numberBy({ label: "", integer: true, min, max, expected });
}

/** A CLI-only real number in [min, max] (or (min, max] when `minOpen`). */
function real(min: number, max: number, expected: string, minOpen = false): (raw: string, flag: string) => number {
  return numberBy({ label: "", integer: false, min, max, minOpen, expected });
}

function choice(choices: readonly string[], note = ""): (raw: string, flag: string) => string {
  return (raw, flag) => checkChoice(flag, choices, raw, note);
}

/** A comma-separated list, each item parsed by `item`. */
export function listOf<T>(item: (raw: string, flag: string) => T): (raw: string, flag: string) => T[] {
  return (raw, flag) => raw.split(",").map((s) => item(s.trim(), flag));
}

export const OPTIONS = {
  help: { type: "boolean", short: "h", help: "this help" },

  // ---------------------------------------------------------------- model and memory
  model: { type: "string", arg: "DIR", help: "checkpoint directory (config.json, *.safetensors, tiktoken.model);\ndefault $K3_MODEL_DIR, else the embedded tiny K3 (trained on the Rust book)" },
  preset: { type: "string", arg: "NAME", help: PRESET_NAMES.join("|"), shows: "auto", parse: choice(PRESET_NAMES) },
  "trunk-gb": { type: "string", arg: "X", help: "trunk budget (overrides the preset; later flags win)", parse: real(0, Infinity, "a number of GB >= 0") },
  "cache-gb": { type: "string", arg: "X", help: "expert cache budget", parse: real(0, Infinity, "a number of GB >= 0") },
  "kv-gb": { type: "string", arg: "X", help: "KV (MLA latent cache) budget", parse: real(0, Infinity, "a number of GB >= 0") },
  threads: { type: "string", arg: "N", help: `compute threads, 1..${ENGINE_RULES.threads.max}: the pool's limit`, shows: "all cores; $K3_THREADS", parse: numberBy(ENGINE_RULES.threads) },
  simd: { type: "string", arg: "LEVEL", help: CHOICES.simd.join("|"), shows: "best; $K3_SIMD", parse: choice(CHOICES.simd) },
  chunk: { type: "string", arg: "N", help: `prefill chunk in tokens, 1..${ENGINE_RULES.chunkSize.max}; every multiple of 64 gives the same\noutput; a larger chunk reads each streamed expert once for more tokens\n(more memory: k3 plan --chunk N); --preset auto picks up to 1024 by memory`, shows: `${DEFAULTS.chunkSize}, auto's pick`, parse: numberBy(ENGINE_RULES.chunkSize) },
  "kda-core": { type: "string", arg: "MODE", help: "auto|chunked: the chunked WY/UT prefill | recurrent: bit-equal to decode", shows: "auto", parse: choice(CHOICES.kdaCore) },
  trunk: { type: "string", arg: "DIR", help: "packed trunk from `k3 pack`: layers the plan does not pin stream through its ring\n(without it the whole trunk is loaded resident)" },
  "piece-mb": { type: "string", arg: "N", help: "read each expert in in-order N MiB pieces, 0 = one read per expert", shows: String(DEFAULTS.pieceMb), parse: numberBy(ENGINE_RULES.pieceMb) },
  "no-prefetch": { type: "boolean", help: "no lookahead: do not read the next MoE layer's predicted experts ahead\n(default on; both change I/O only, never the output)" },
  "expert-profile": { type: "string", arg: "FILE", help: "how often each layer's experts were requested in earlier runs of this\ncheckpoint: read at load when FILE exists (seeds the lfu cache; the warm reads\neach layer's most requested experts), written at exit; I/O only, never the output" },
  "cache-policy": { type: "string", arg: "P", help: "which experts a full expert-cache layer keeps: lfu (the most requested;\na miss joins only when requested more often than the least-requested\nresident one) | lru (the most recent); I/O only, never the output", shows: "lfu", parse: choice(CHOICES.cachePolicy) },
  warm: { type: "string", arg: "W", help: "fill the expert cache's empty slots ahead of use: auto (in the background,\nbehind the run's own reads, when the cache holds at least half of each\nlayer's experts) | wait (before the run, with a progress bar) | off;\nI/O only, never the output", shows: "auto", parse: choice(CHOICES.warm) },
  "load-method": { type: "string", arg: "M", help: "pool: resident weights in one pass through the read pool (large aligned\nO_DIRECT pieces into pre-faulted huge pages) | per-tensor: one read per\ntensor (the former path)", shows: "pool", parse: choice(CHOICES.loadMethod) },
  "load-ceiling": { type: "boolean", help: "also measure the load's ceiling (the same reads, same engine, page cache dropped,\nbefore and after) and report load GB/s as a fraction of it" },
  "shard-dirs": { type: "string", arg: "D1,D2", help: "further directories holding shards (a checkpoint spread over several drives;\neach shard in exactly one of --model and these)" },
  layers: { type: "string", arg: "N", help: "run only layers 0..N-1, then the final norm and lm_head: a smoke test of a partly\ndownloaded checkpoint (shards not on disk are allowed); the output is not the model's", parse: numberBy(ENGINE_RULES.layers) },
  spec: { type: "string", arg: "N", help: `exact n-gram speculative decoding: up to N (<= ${ENGINE_RULES.spec.max}) tokens guessed from earlier\ntext are verified in the same forward pass; identical output (0 = off)`, shows: String(DEFAULTS.spec), parse: numberBy(ENGINE_RULES.spec) },
  "on-expert-error": { type: "string", arg: "M", help: "drop: an expert that cannot be read or is corrupt is left out of its\nlayer's mix, listed in the report, and the run exits 4 | fail: stop at once (exit 5 or 1)", shows: "drop", parse: choice(CHOICES.onExpertError) },

  // ---------------------------------------------------------------- sampling
  "max-tokens": { type: "string", arg: "N", help: `tokens to generate, 1..${MAX_NEW_TOKENS}`, default: DEFAULTS.maxTokens.run, parse: numberBy(SAMPLING_RULES.maxTokens) },
  temperature: { type: "string", arg: "T", help: `0 = greedy; at most ${SAMPLING_RULES.temperature.max}`, default: DEFAULTS.temperature.cli, parse: numberBy(SAMPLING_RULES.temperature) },
  "top-k": { type: "string", arg: "K", help: "0 = off", default: DEFAULTS.topK, parse: numberBy(SAMPLING_RULES.topK) },
  "top-p": { type: "string", arg: "P", help: "1 = off", default: DEFAULTS.topP, parse: numberBy(SAMPLING_RULES.topP) },
  seed: { type: "string", arg: "S", help: "PCG32 seed", default: DEFAULTS.seed, parse: numberBy(SAMPLING_RULES.seed) },
  "presence-penalty": { type: "string", arg: "P", help: "OpenAI's presence penalty in [-2, 2]: each generated token's logit\nis lowered by P before the next draw", default: DEFAULTS.presencePenalty, parse: numberBy(SAMPLING_RULES.presencePenalty) },
  "frequency-penalty": { type: "string", arg: "F", help: "OpenAI's frequency penalty in [-2, 2]: each generated token's logit\nis lowered by count * F before the next draw", default: DEFAULTS.frequencyPenalty, parse: numberBy(SAMPLING_RULES.frequencyPenalty) },
  stop: { type: "string", multiple: true, arg: "STR", help: "stop string (repeatable)" },
  "stop-id": { type: "string", multiple: true, arg: "ID", help: "extra stop id (repeatable; [EOS] and <|end_of_msg|> always stop K3)", parse: integer(0, Infinity, "a token id") },

  // ---------------------------------------------------------------- prompt and output
  prompt: { type: "string", arg: "TEXT", help: "the prompt" },
  "prompt-file": { type: "string", arg: "PATH", help: "the prompt, read verbatim (UTF-8)" },
  ids: { type: "string", arg: "1,2,3", help: "token ids, used verbatim" },
  raw: { type: "boolean", help: "no chat template: the text is encoded verbatim after [BOS] and printed before its\ncontinuation (the default for the embedded model, which was not chat-trained)" },
  chat: { type: "boolean", help: "the chat template even for the embedded model" },
  "no-think": { type: "boolean", help: "K3: thinking off" },
  effort: { type: "string", arg: "low|high|max", help: "K3 thinking effort", shows: "max", parse: choice(CHOICES.effort, ' ("medium" does not exist for K3)') },
  system: { type: "string", arg: "TEXT", help: "a system message" },
  json: { type: "string", arg: "FILE", help: 'write the result as JSON ("-" = stdout)' },
  quiet: { type: "boolean", help: "no plan/report on stderr" },
  floor: { type: "boolean", help: "measure the memory-read ceiling and one disk-read ceiling per source the run\nreads (experts, trunk, lm_head, embed; the run's own pattern) before loading\nand again after the run (a few seconds each); the report then gives, per layer\nkind, the floor max(bytes touched / memory ceiling, bytes read / its source's\nceiling) and time / floor (JSON: per_kind, floor)" },
  "tf-check": { type: "string", arg: "REF", help: "teacher-forced agreement: REF is a JSON run report (k3 run --json, or the\nreference engine's; its generated_ids, and its prompt_ids when no prompt\nflag is given) or comma-separated ids following the prompt. One prefill pass\nover prompt + REF; at each REF position the model's argmax must equal REF's\ntoken. Prints N/M and every position where they part; --json FILE writes it" },
  "tf-min": { type: "string", arg: "X", help: "agreement needed for exit 0, 1 = every position; below it exit 1", default: 1, parse: real(0, 1, "a fraction in 0..1") },
  "dump-logits": { type: "string", arg: "FILE", help: "every step's logits as .safetensors (logits.<step> F32 [vocab], ids I32 [steps],\nprompt ids in the metadata) for `k3 compare-logits A B` or any safetensors reader" },
  "dump-cache-trace": { type: "string", arg: "DIR", help: "write every MoE layer's expert request (DIR/expert_trace.bin) and the\nper-expert counts (DIR/expert_hist.json) for `k3 cache-sim --trace DIR`" },
  load: { type: "string", arg: "FILE", help: "start from a saved conversation (refused if saved for another model/config)" },
  text: { type: "string", arg: "FILE", help: "the text (UTF-8)" },

  // ---------------------------------------------------------------- serve
  host: { type: "string", arg: "ADDR", help: "address to bind (loopback unless this says otherwise)", default: "127.0.0.1" },
  port: { type: "string", arg: "N", help: "port (0 = any free one)", default: 8080, parse: integer(0, 65535, "a port number") },
  queue: { type: "string", arg: "N", help: "requests that may wait while one runs; more get 429", default: 8, parse: integer(0) },
  "prompt-cache": { type: "string", arg: "N", help: "keep N prompt-state snapshots (0 = off): a request whose prompt\nstarts with an earlier one (a chat resending its conversation) prefills only\nthe rest. Snapshots sit at multiples of 64 tokens (of --chunk when it is not\none), where a cut leaves the output bit-identical to a cold run; usage.prompt_tokens_details.cached_tokens\nsays how many prompt tokens were reused (also logged per request)", default: DEFAULTS.promptCacheSlots, parse: numberBy(ENGINE_RULES.promptCacheSlots) },
  "prompt-cache-mb": { type: "string", arg: "M", help: "cap on the bytes all snapshots hold (one K3 snapshot is about\n0.46 GB of KDA state + 55 kB per MLA-cached token; the memory plan reserves\nmin(this cap, N snapshots at the full context) and refuses if it does not fit)", default: DEFAULTS.promptCacheMb, parse: integer(0, 1 << 20, "an integer number of MiB in 0..1048576") },
  "no-web-ui": { type: "boolean", help: "no chat page at /" },
  "allow-host": { type: "string", multiple: true, arg: "NAME", help: "also answer to Host NAME (any port) or NAME:PORT (repeatable; e.g. the\nmachine's LAN name when binding --host 0.0.0.0, or a reverse proxy's name)" },
  cors: { type: "string", multiple: true, arg: "ORIGIN", help: 'let pages from ORIGIN (e.g. http://localhost:3000; "*" = any) call the\nserver: their requests pass, get Access-Control-Allow-Origin, and OPTIONS\npreflights are answered (repeatable)' },
  "api-key": { type: "string", arg: "KEY", help: "require 'Authorization: Bearer KEY' on /v1/* and /metrics (401 otherwise;\nthe chat page asks for the key); at least 8 printable characters", shows: "$K3_API_KEY when set, else none", parse: (raw, flag) => {
    if (!/^[\x21-\x7e]{8,}$/.test(raw)) throw new UsageError(`${flag}: expected at least 8 printable characters without spaces`);
    return raw;
  } },

  // ---------------------------------------------------------------- pack, doctor, plan, bench
  out: { type: "string", arg: "DIR", help: "output directory" },
  "probe-mb": { type: "string", arg: "N", help: "bytes of the disk read probe, in MB", default: 512, parse: integer(1) },
  "published-k3": { type: "boolean", help: "plan the published K3 (93 layers) instead of a --model" },
  packed: { type: "boolean", help: "plan as if a packed trunk were given (the default with --published-k3)" },
  project: { type: "boolean", help: "seconds per decoded and prefilled token of the published K3 at each preset" },
  "from-report": { type: "string", arg: "FILE", help: "per-layer-kind rates from a run report (k3 run --json's per_kind and floor)" },
  "disk-gbps": { type: "string", arg: "X", help: "disk bandwidth for every source (else the report's ceilings, else a probe)", parse: real(0, Infinity, "a bandwidth in GB/s > 0", true) },
  "prompt-tokens": { type: "string", arg: "N", help: "prompt length", default: 128, parse: integer(1) },
  gen: { type: "string", arg: "N", help: "tokens to decode", default: 32, parse: integer(1) },
  "no-floor": { type: "boolean", help: "skip the memory and disk ceiling measurements" },

  // ---------------------------------------------------------------- download, verify, compare-logits, cache-sim
  dir: { type: "string", arg: "DIR", help: "where the checkpoint goes (required)" },
  revision: { type: "string", arg: "REV", help: "branch, tag or commit, pinned to a commit first", shows: "main, or the commit a previous run pinned" },
  include: { type: "string", multiple: true, arg: "GLOB", help: "fetch only matching files (repeatable)" },
  concurrency: { type: "string", arg: "N", help: "files fetched at once", default: 4, parse: integer(1, 64) },
  verify: { type: "string", arg: "size|full", help: "full re-hashes files already on disk", shows: "size", parse: choice(["size", "full"]) },
  endpoint: { type: "string", arg: "URL", help: "the hub", shows: "$HF_ENDPOINT or https://huggingface.co" },
  token: { type: "string", arg: "TOKEN", help: "hub token", shows: "$HF_TOKEN" },
  manifest: { type: "string", arg: "FILE", help: "SHA256SUMS lines '<hex>  <name>', or JSON name -> hex" },
  state: { type: "string", arg: "FILE", help: "where finished files are recorded", shows: "DIR/.k3-verify.json" },
  restart: { type: "boolean", help: "hash every file again" },
  rtol: { type: "string", arg: "X", help: "worst relative L2 allowed for exit 0", default: 1e-3, parse: real(0, Infinity, "a relative L2 tolerance >= 0") },
  trace: { type: "string", arg: "DIR", help: "a directory written by k3 run --dump-cache-trace DIR (required)" },
  slots: { type: "string", arg: "0,4,16,...", help: "cache sizes in experts per layer", shows: "0, 1, 2, 4, ... and the run's own", parse: listOf(integer(0, Infinity, "slot counts: integers >= 0")) },
  policy: { type: "string", arg: "lru,s3fifo,...", help: "policies to replay", shows: "lru,s3fifo,belady,pinned" },

  // ---------------------------------------------------------------- synth
  experts: { type: "string", arg: "E", help: "num_experts (default 896, 48B 256; at least num_experts_per_token: 16, 48B 8)", parse: integer(0, Number.MAX_SAFE_INTEGER, "a non-negative integer") },
  vocab: { type: "string", arg: "V", help: "vocab_size = ranks + 256 specials (default 163840; at least 512)", parse: integer(0, Number.MAX_SAFE_INTEGER, "a non-negative integer") },
  "dense-layers": { type: "string", arg: "D", help: "leading dense-MLP layers (first_k_dense_replace, published 1)", parse: integer(0, Number.MAX_SAFE_INTEGER, "a non-negative integer") },
  "kimi-linear": { type: "boolean", help: "Kimi-Linear-48B-A3B shapes (flat config, model. prefix, bf16 experts)" },
  tokenizer: { type: "string", arg: "FILE", help: "copy this tiktoken.model (e.g. the real Kimi one) instead of writing a\nsynthetic rank file; it must have vocab - 256 ranks" },
  force: { type: "boolean", help: "replace the checkpoint files already in DIR (other files are left alone)" },
} as const satisfies Record<string, OptionSpec>;

export type OptionName = keyof typeof OPTIONS;

/** A flag as a command takes it: the table's entry, or the entry with some fields replaced. */
export type OptionUse = OptionName | [OptionName, Partial<OptionSpec>];

/** The model and memory flags of every command that loads a model. */
export const MODEL_FLAGS: OptionName[] = ["model", "preset", "trunk-gb", "cache-gb", "kv-gb", "threads", "simd", "chunk", "kda-core", "trunk", "piece-mb", "no-prefetch", "warm", "cache-policy", "expert-profile", "load-method", "load-ceiling", "shard-dirs", "layers", "spec", "on-expert-error"];

/** The sampling flags of run and chat. */
export const SAMPLING_FLAGS: OptionName[] = ["max-tokens", "temperature", "top-k", "top-p", "seed", "presence-penalty", "frequency-penalty", "stop", "stop-id"];
