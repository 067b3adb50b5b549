#!/usr/bin/env node
/**
 * The `k3` command: run, chat, serve, pack, doctor, bench. Exit codes: errors.ts (EXIT_KINDS).
 */
import { existsSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs, type ParseArgsConfig } from "node:util";
import { bestSimdLevel, simdLevel, threadCount, type SimdLevel } from "@k3/dense";
import { WorkerBackend } from "./backend.js";
import { ChatSession } from "./chat.js";
import { checkPromptLength, Engine, MAX_PROMPT_TOKENS, type EngineOptions } from "./engine.js";
import { formatNll } from "./perplexity.js";
import { EXIT_CODES_HELP, EXIT_DROPPED_EXPERT, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, exitCodeOf, UsageError } from "./errors.js";
import { validateSampling } from "./sampler.js";
import { runDoctor } from "./doctor.js";
import { EMBEDDED_DEFAULT_PROMPT, embeddedModelDir } from "./embedded.js";
import { fmtBytes, GB, PRESET_NAMES, PRESETS, type PresetName } from "./presets.js";
import { formatReport } from "./report.js";
import { startServer } from "./server.js";
import { formatTeacherForcing, loadReference, teacherForced } from "./teacher-forcing.js";
import { cacheSimReport, ExpertTraceRecorder, formatCacheSim } from "./cache-trace.js";
import { compareLogits, formatComparison, LogitsDumper, readLogits } from "./logits-dump.js";
import { downloadCheckpoint } from "./download.js";
import { CACHE_POLICIES, progressPrinter, type CachePolicy } from "@k3/moe-stream";

const here = dirname(fileURLToPath(import.meta.url));

function version(): string {
  return JSON.parse(readFileSync(join(here, "..", "package.json"), "utf8")).version;
}

const GLOBAL_HELP = `k3 — Kimi K3 / Kimi-Linear on one CPU

usage: k3 <command> [options]        (k3 <command> --help for details)

commands:
  run            generate from a prompt and print the run report (default model: the embedded tiny K3, trained)
  eval           perplexity of a text file (mean NLL per token, chunked prefill) and the run report
  chat           interactive chat REPL (/reset, /save FILE, /load FILE, /exit)
  serve          OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models)
  pack           pack the trunk (non-expert weights) into one aligned file for streaming
  doctor         check this machine and a checkpoint: toolchain, SIMD, RAM → preset, disk, shards
  plan           the memory plan of a model at a preset, and --project: published-K3 s/token per preset
  bench          prefill and decode speed on a model
  download       fetch a checkpoint from the hub: pinned revision, free-space check, resume, sha256-verified
  verify         hash every checkpoint file and compare with the sha256 the download recorded
  compare-logits compare two --dump-logits files (max/rel-L2 difference, first argmax change)
  cache-sim      replay a --dump-cache-trace through other expert-cache sizes and policies (no model)
  synth          write a synthetic checkpoint at the published K3 (or Kimi-Linear-48B) widths

global: --help, --version, --list-presets
${EXIT_CODES_HELP}
`;

const MODEL_OPTIONS = `model and memory:
  --model DIR          checkpoint directory (config.json, *.safetensors, tiktoken.model);
                       default $K3_MODEL_DIR, else the embedded tiny K3 (trained on the Rust book)
  --preset NAME        ${PRESET_NAMES.join("|")} (default auto)
  --trunk-gb X         trunk budget (overrides the preset; later flags win)
  --cache-gb X         expert cache budget
  --kv-gb X            KV (MLA latent cache) budget
  --threads N          compute threads (default: all cores; $K3_THREADS)
  --simd LEVEL         scalar|avx2|avx512 (default: best; $K3_SIMD)
  --chunk N            prefill chunk in tokens (default 64)
  --kda-core MODE      auto (chunked WY/UT prefill) | recurrent (bit-equal to decode)
  --trunk DIR          packed trunk from \`k3 pack\`: layers the plan does not pin stream through its ring
                       (without it the whole trunk is loaded resident)
  --piece-mb N         read each expert in in-order N MiB pieces (default 4; 0 = one read per expert)
  --no-prefetch        no lookahead: do not read the next MoE layer's predicted experts ahead
                       (default on; both change I/O only, never the output)
  --load-method M      pool (default): resident weights in one pass through the read pool (large aligned
                       O_DIRECT pieces into pre-faulted huge pages) | per-tensor: one read per tensor (former path)
  --load-ceiling       also measure the load's ceiling (the same reads, same engine, page cache dropped,
                       before and after) and report load GB/s as a fraction of it
  --shard-dirs D1,D2   further directories holding shards (a checkpoint spread over several drives;
                       each shard in exactly one of --model and these)
  --layers N           run only layers 0..N-1, then the final norm and lm_head: a smoke test of a partly
                       downloaded checkpoint (shards not on disk are allowed); the output is not the model's
  --spec N             exact n-gram speculative decoding: up to N (<= 8) tokens guessed from earlier
                       text are verified in the same forward pass; identical output (default 0 = off)
  --on-expert-error M  drop (default): an expert that cannot be read or is corrupt is left out of its
                       layer's mix, listed in the report, and the run exits 4 | fail: stop at once (exit 1)`;

const SAMPLING_OPTIONS = `sampling:
  --max-tokens N       tokens to generate (default 64)
  --temperature T      0 = greedy (default 0)
  --top-k K            0 = off (default 0)
  --top-p P            1 = off (default 1)
  --seed S             PCG32 seed (default 0)
  --presence-penalty P, --frequency-penalty F
                       OpenAI's penalties in [-2, 2] (default 0): each generated token's logit
                       is lowered by count * F + P before the next draw
  --stop STR           stop string (repeatable)
  --stop-id ID         extra stop id (repeatable; [EOS] and <|end_of_msg|> always stop K3)`;

const HELP: Record<string, string> = {
  run: `usage: k3 run [--prompt TEXT | --prompt-file PATH | --ids 1,2,3] [options]

Generates a continuation and prints the memory plan (before loading) and the run report (after).
A text prompt is wrapped as one user turn in the model's chat format (K3 XTML or Kimi-Linear im_*);
--raw encodes it verbatim after [BOS]. --ids are used verbatim.

prompt (exactly one; the embedded model has a default, "${EMBEDDED_DEFAULT_PROMPT}", completed raw):
  --prompt TEXT        --prompt-file PATH (read verbatim, UTF-8)     --ids 1,2,3
  --raw                no chat template; the prompt is printed before its continuation (the default
                       for the embedded model, which was not chat-trained)
  --chat               the chat template even for the embedded model
  --no-think           K3: thinking off          --effort low|high|max (K3, default max)
  --system TEXT        a system message
  --json FILE          write the run report as JSON ("-" = stdout)
  --quiet              no plan/report on stderr
  --floor              measure the memory-read ceiling and one disk-read ceiling per source the run
                       reads (experts, trunk, lm_head, embed; the run's own pattern) before loading
                       and again after the run (a few seconds each); the report then gives, per layer
                       kind, the floor max(bytes touched / memory ceiling, bytes read / its source's
                       ceiling) and time / floor (JSON: per_kind, floor)

checking against a reference (instead of generating):
  --tf-check REF       teacher-forced agreement: REF is a JSON run report (k3 run --json, or the
                       reference engine's; its generated_ids, and its prompt_ids when no prompt
                       flag is given) or comma-separated ids following the prompt. One prefill pass
                       over prompt + REF; at each REF position the model's argmax must equal REF's
                       token. Prints N/M and every position where they part; --json FILE writes it
  --tf-min X           agreement needed for exit 0 (default 1 = every position); below it exit 1

diagnostics:
  --dump-logits FILE   every step's logits as .safetensors (logits.<step> F32 [vocab], ids I32 [steps],
                       prompt ids in the metadata) for \`k3 compare-logits A B\` or any safetensors reader
  --dump-cache-trace DIR  write every MoE layer's expert request (DIR/expert_trace.bin) and the
                       per-expert counts (DIR/expert_hist.json) for \`k3 cache-sim --trace DIR\`

${MODEL_OPTIONS}

${SAMPLING_OPTIONS}
`,
  chat: `usage: k3 chat [--system TEXT] [--no-think] [--effort low|high|max] [options]

Interactive chat. The conversation state (KDA/conv state and MLA cache) stays in memory across
turns: a new turn prefills only its own tokens. Commands: /reset, /save FILE, /load FILE, /exit.
--load FILE starts from a saved conversation (refused if it was saved for another model/config).
Ctrl-C during a reply stops it (the partial reply stays in the conversation as the assistant's
turn, closed); Ctrl-C at the prompt exits. Up/Down recall earlier input (readline, on a terminal);
with a state file (--load FILE or /save FILE) the input history is kept in FILE.history.

${MODEL_OPTIONS}

${SAMPLING_OPTIONS}
`,
  serve: `usage: k3 serve [--host 127.0.0.1] [--port 8080] [--queue 8] [--prompt-cache 1] [--prompt-cache-mb 1024] [options]

OpenAI-compatible server: POST /v1/chat/completions, POST /v1/completions (JSON or "stream": true
SSE), GET /v1/models and /v1/models/{id}, GET /health, GET /metrics (Prometheus text: requests,
queue depth, tokens, prefill/decode tok/s, bytes read by source, expert hit rate, drops, RSS), and
a chat page at / (self-contained, works offline; --no-web-ui
turns it off). Binds loopback unless --host says otherwise. One generation runs at a time in a
worker thread; --queue more may wait, the rest get 429.

Any web page the user opens can send requests to this server, so: a request whose Host is not
localhost, 127.0.0.1, [::1] or the bound address (at the bound port) gets 403 (DNS rebinding); a
request with an Origin other than the server's own gets 403; a POST that is not
Content-Type: application/json gets 415.

  --allow-host NAME    also answer to Host NAME (any port) or NAME:PORT (repeatable; e.g. the
                       machine's LAN name when binding --host 0.0.0.0, or a reverse proxy's name)
  --cors ORIGIN        let pages from ORIGIN (e.g. http://localhost:3000; "*" = any) call the
                       server: their requests pass, get Access-Control-Allow-Origin, and OPTIONS
                       preflights are answered (repeatable)
  --api-key KEY        require 'Authorization: Bearer KEY' on /v1/* and /metrics (401 otherwise;
                       the chat page asks for the key). Default: $K3_API_KEY when set, else none

Also implemented: logprobs / top_logprobs, n (1..8), presence/frequency_penalty, logit_bias, seed,
stop, and response_format json_object / json_schema (constrained decoding; see the engine README).
Parameters that would change the reply but are not implemented get a 400 naming them, never
silently ignored: tools / tool_choice and tool messages, unsupported JSON Schema keywords; echo /
best_of / suffix on completions. role "developer" is taken as "system".
A 429 carries Retry-After. A busy --port exits 2 naming the address.

  --prompt-cache N     keep N prompt-state snapshots (default 1; 0 = off): a request whose prompt
                       starts with an earlier one (a chat resending its conversation) prefills only
                       the rest. Snapshots sit at multiples of the prefill chunk size, so the output
                       is bit-identical to a cold run; usage.prompt_tokens_details.cached_tokens
                       says how many prompt tokens were reused (also logged per request)
  --prompt-cache-mb M  cap on the bytes all snapshots hold (default 1024; one K3 snapshot is about
                       0.46 GB of KDA state + 55 kB per MLA-cached token; the memory plan reserves
                       min(this cap, N snapshots at the full context) and refuses if it does not fit)

${MODEL_OPTIONS}
`,
  eval: `usage: k3 eval --text FILE [--max-tokens N] [--json FILE] [options]

Perplexity of a text: [BOS] + the text (specials not interpreted), one chunked prefill keeping
every position's logits; each position scores the next token (log-softmax in float64). Prints the
number of tokens scored, the mean negative log-likelihood in nats, exp(mean) = perplexity, and the
run report (the sequence counts as prompt tokens).

  --text FILE          the text (UTF-8)          --ids 1,2,3   ids instead (used verbatim)
  --max-tokens N       score only the first N tokens after [BOS] (default: all; at most ${MAX_PROMPT_TOKENS - 1} in one pass)
  --json FILE          write {tokens, scored, mean_nll, perplexity, report} ("-" = stdout)
  --quiet              no plan/report on stderr

${MODEL_OPTIONS}
`,
  pack: `usage: k3 pack --model DIR --out DIR [--shard-dirs D1,D2]

Packs every non-expert tensor (the trunk) into one 4 KiB-aligned file plus a manifest, so the
streaming presets read each layer with one aligned read. Resumable; shows a progress bar in a TTY
and JSON lines otherwise. (@k3/moe-stream packTrunk.)
`,
  plan: `usage: k3 plan (--model DIR | --published-k3) [--preset P|all] [--trunk DIR | --packed]
               [--project] [--from-report run.json] [--disk-gbps X] [--probe-mb N] [--json FILE]

Prints the memory plan a run would make, before loading anything: parts, pinned layers, ring,
cache slots, and the bytes read per decoded token by source. Without a packed trunk (--trunk DIR
from \`k3 pack\`) the whole trunk is resident, as in the run; --packed plans as if one were given
(the default with --published-k3, the released K3 being larger than every preset but max).

--project: seconds per decoded and per prefilled token of the published K3 (93 layers: 69 KDA,
24 MLA, 1 dense, 92 MoE, 16 experts/token) at each preset (default all), next to kimi-k3-in-c's
published figures (26-33 s/token at 8 GB, 5.59 s with the trunk resident). Compute comes from the
per-layer-kind rates of a run report, resident or streamed (--from-report: k3 run --json's per_kind
and floor; each kind's reads charged at its source's ceiling); I/O is each preset's cold-cache plan
reads by source over the disk bandwidth: --disk-gbps for all, else the report's ceiling of each
source, else a probe of --model's shards with the engine's read pattern (as k3 doctor). Prefill is
at the report's prefill chunk (T tokens: trunk and lm_head read once, the distinct experts of T).
`,
  doctor: `usage: k3 doctor [--model DIR] [--probe-mb N]

Checks Node, the native addons and SIMD level, threads, RAM (MemAvailable → suggested preset), a
disk read probe with the engine's access pattern (expert-sized positioned reads at scattered
offsets of the checkpoint's shards), and the checkpoint itself (config, tokenizer, every shard's
size against its header). Exits 1 only for blocking problems.
`,
  download: `usage: k3 download OWNER/NAME --dir DIR [--revision REV] [--include GLOB]... [--concurrency 4]
                  [--verify size|full] [--endpoint URL] [--token TOKEN]

Fetches a checkpoint from a Hugging Face-compatible hub (default $HF_ENDPOINT or huggingface.co;
token: --token or $HF_TOKEN). The revision (default main) is pinned to one commit first and kept in
DIR/.k3-download.json, so a rerun resumes the same commit. Free space for what is left (+ 1 GiB) is
checked before writing. Each file goes to FILE.part with HTTP range resume, is hashed (SHA-256) as
it streams and is renamed into place only when its size and, for LFS files, its sha256 match the
hub's listing; a mismatch keeps the bytes as FILE.part.bad and fails (exit 1). Finally every shard
index.json names must be present. --include fetches only matching files (e.g. the first shards and
the small files, for --layers N); --verify full re-hashes files already on disk. Rerun to resume.
`,
  verify: `usage: k3 verify --model DIR [--manifest FILE] [--state FILE] [--restart] [--threads N] [--json FILE]

Hashes every file of the checkpoint (SHA-256) and compares it with the hash k3 download recorded in
DIR/.k3-download.json (every file it fetched), or a --manifest (SHA256SUMS lines '<hex>  <name>',
or JSON name -> hex), or DIR/SHA256SUMS. Files are hashed on worker threads (--threads, default all
cores) in 16 MiB reads with the next read in flight. A progress bar shows bytes, GB/s and ETA.
Resumable: each finished file is recorded in DIR/.k3-verify.json (--state FILE elsewhere) with its
size, mtime and inode, and a rerun skips files still matching; --restart hashes everything again.
Ctrl-C stops (the files already finished are kept). Exit 0 when every file matches; 1 naming each
bad (with the tensors of a bad shard), missing or unreadable file; 2 when there is nothing to
compare with.
`,
  "compare-logits": `usage: k3 compare-logits A.safetensors B.safetensors [--rtol 1e-3] [--json FILE]

Compares two logits dumps (k3 run --dump-logits, or a reference written in the same layout:
logits.<step> F32 [vocab] and ids I32 [steps]) step by step: max |a-b|, ||a-b|| / ||b||, and the
first step where the argmax differs. Refuses dumps of different prompts or vocabularies.
Exit 0 when the argmax agrees at every common step and the worst relative L2 is <= --rtol, else 1.
`,
  "cache-sim": `usage: k3 cache-sim --trace DIR [--slots 0,4,16,...] [--policy lru,s3fifo,belady,pinned] [--json FILE]

Replays the expert requests a run recorded (k3 run --dump-cache-trace DIR) through per-layer caches
of other sizes: the hit rate of the store's LRU, S3-FIFO, Belady's offline bound and a fixed set of
each layer's hottest experts, the cache size in GB and the expert bytes read per token under LRU,
so --cache-gb can be chosen without re-running the model. Default sizes: 0, 1, 2, 4, ... experts
per layer and the run's own.
`,
  synth: `usage: k3 synth --out DIR [--layers N] [--experts E] [--vocab V] [--dense-layers D] [--seed S]
                [--kimi-linear] [--tokenizer FILE] [--force]

Writes a checkpoint with random weights at the published widths: Kimi K3 (hidden 7168, 96 KDA heads
x 128, MLA q_lora 1536 / kv_lora 512, dense layer 0 of 33,792, 896 MXFP4 experts top-16, vocab
163,840) or with --kimi-linear Kimi-Linear-48B-A3B (hidden 2304, 32 heads, 256 bf16 experts top-8).
Only the layer count and, when given, the expert count, vocabulary and number of leading dense-MLP
layers (first_k_dense_replace, published 1) differ from the published config. Tensor names, dtypes, shapes, expert order, shards and index are laid out as released.
Same options and seed => byte-identical files. Progress: a bar on a TTY, a line every 5 s otherwise.

  --out DIR            output directory (created; refused if it holds a checkpoint, unless --force)
  --layers N           num_hidden_layers (default 4; K3 1..93, 48B 1..27). Layer 0 is KDA + the dense
                       MLP, the rest MoE; the MLA layers are the released ones (ONE-based 4, 8, ...)
                       that are <= N, or the last layer when N < 4 (N=4: layer 3 MLA; N=2: layer 1)
  --experts E          num_experts (default 896, 48B 256; at least num_experts_per_token: 16, 48B 8)
  --vocab V            vocab_size = ranks + 256 specials (default 163840; at least 512)
  --seed S             seed of every value (default 0)
  --kimi-linear        Kimi-Linear-48B-A3B shapes (flat config, model. prefix, bf16 experts)
  --tokenizer FILE     copy this tiktoken.model (e.g. the real Kimi one) instead of writing a
                       synthetic rank file; it must have vocab - 256 ranks
  --force              replace the checkpoint files already in DIR (other files are left alone)

Sizes (K3, full vocab): embed + lm_head 4.70 GB; layer 0 2.34 GB; an MoE layer 1.27 GB (KDA) or
0.84 GB (MLA) + 17.55 MB per expert. E.g. --layers 4 --experts 64: 13.75 GB; --layers 2 --experts 896: 23.61 GB; --kimi-linear
--layers 4 --experts 32: 3.33 GB.
`,
  bench: `usage: k3 bench [--prompt-tokens N] [--gen N] [--no-floor] [--json FILE] [options]

Prefill and decode speed on a model (default: the embedded tiny model), with the run report: per
layer kind the time, bytes touched and read, and the floor against the memory-read and disk-read
ceilings measured first in the same run (--no-floor skips them).

${MODEL_OPTIONS}
`,
};

const COMMON: ParseArgsConfig["options"] = {
  help: { type: "boolean", short: "h" },
  model: { type: "string" },
  preset: { type: "string" },
  "trunk-gb": { type: "string" },
  "cache-gb": { type: "string" },
  "kv-gb": { type: "string" },
  threads: { type: "string" },
  simd: { type: "string" },
  chunk: { type: "string" },
  "kda-core": { type: "string" },
  trunk: { type: "string" },
  "piece-mb": { type: "string" },
  "no-prefetch": { type: "boolean" },
  "load-method": { type: "string" },
  "load-ceiling": { type: "boolean" },
  "on-expert-error": { type: "string" },
  spec: { type: "string" },
  layers: { type: "string" },
  "shard-dirs": { type: "string" },
};
const SAMPLING: ParseArgsConfig["options"] = {
  "max-tokens": { type: "string" },
  temperature: { type: "string" },
  "top-k": { type: "string" },
  "top-p": { type: "string" },
  seed: { type: "string" },
  "presence-penalty": { type: "string" },
  "frequency-penalty": { type: "string" },
  stop: { type: "string", multiple: true },
  "stop-id": { type: "string", multiple: true },
};

function parse(command: string, argv: string[], extra: ParseArgsConfig["options"]): { values: Values; tokens: { kind: string; name?: string }[] } {
  try {
    const r = parseArgs({ args: argv, options: { ...COMMON, ...extra }, allowPositionals: false, strict: true, tokens: true });
    return { values: r.values as Values, tokens: r.tokens ?? [] };
  } catch (err) {
    throw new UsageError(`k3 ${command}: ${(err as Error).message}\n(see k3 ${command} --help)`);
  }
}

type Values = Record<string, string | boolean | string[] | undefined>;

/** Commands that take file or repository arguments and none of the model options. */
function parsePositional(command: string, argv: string[], options: ParseArgsConfig["options"]): { values: Values; positionals: string[] } {
  try {
    const r = parseArgs({ args: argv, options: { help: { type: "boolean", short: "h" }, ...options }, allowPositionals: true, strict: true });
    return { values: r.values as Values, positionals: r.positionals };
  } catch (err) {
    throw new UsageError(`k3 ${command}: ${(err as Error).message}\n(see k3 ${command} --help)`);
  }
}

function num(values: Values, key: string, def: number, check: (x: number) => boolean, what: string): number {
  const v = values[key];
  if (v === undefined) return def;
  const x = Number(v);
  if (typeof v !== "string" || v.trim() === "" || !check(x)) throw new UsageError(`--${key} ${v}: expected ${what}`);
  return x;
}

/** --shard-dirs D1,D2 as absolute paths (undefined when absent). */
function shardDirsOf(values: Values): string[] | undefined {
  return values["shard-dirs"] === undefined ? undefined : String(values["shard-dirs"]).split(",").filter(Boolean).map((d) => resolve(d));
}

function engineOptions(values: Values, tokens: { kind: string; name?: string }[], log: (l: string) => void): EngineOptions {
  const opts: EngineOptions = { log };
  if (values.preset !== undefined) {
    if (!(PRESET_NAMES as readonly string[]).includes(values.preset as string)) throw new UsageError(`--preset ${values.preset}: expected one of ${PRESET_NAMES.join(", ")}`);
    opts.preset = values.preset as PresetName;
  }
  // Budget flags apply left to right after the preset (a later flag overrides).
  const budgets: EngineOptions["budgets"] = {};
  for (const t of tokens) {
    if (t.kind !== "option") continue;
    const gb = (key: string) => num(values, key, 0, (x) => Number.isFinite(x) && x >= 0, "a number of GB >= 0") * GB;
    if (t.name === "trunk-gb") budgets.trunkBytes = gb("trunk-gb");
    if (t.name === "cache-gb") budgets.cacheBytes = gb("cache-gb");
    if (t.name === "kv-gb") budgets.kvBytes = gb("kv-gb");
  }
  if (Object.keys(budgets).length) opts.budgets = budgets;
  const threads = values.threads ?? process.env.K3_THREADS;
  if (threads !== undefined) opts.threads = num({ threads }, "threads", 0, (x) => Number.isInteger(x) && x >= 1 && x <= 1024, "an integer in 1..1024");
  if (values.simd !== undefined) {
    if (!["scalar", "avx2", "avx512"].includes(values.simd as string)) throw new UsageError(`--simd ${values.simd}: expected scalar, avx2 or avx512`);
    opts.simd = values.simd as SimdLevel;
  }
  if (values.chunk !== undefined) opts.chunkSize = num(values, "chunk", 64, (x) => Number.isInteger(x) && x >= 1 && x <= 4096, "an integer in 1..4096");
  if (values["kda-core"] !== undefined) {
    if (!["auto", "recurrent", "chunked"].includes(values["kda-core"] as string)) throw new UsageError(`--kda-core ${values["kda-core"]}: expected auto, recurrent or chunked`);
    opts.kdaCore = values["kda-core"] as EngineOptions["kdaCore"];
  }
  if (values.trunk !== undefined) opts.trunkDir = resolve(String(values.trunk));
  if (values["piece-mb"] !== undefined) opts.pieceMb = num(values, "piece-mb", 4, (x) => Number.isInteger(x) && x >= 0 && x <= 1024, "an integer number of MiB in 0..1024 (0 = one read per expert)");
  if (values["no-prefetch"]) opts.prefetch = false;
  if (values["load-method"] !== undefined) {
    if (!["pool", "per-tensor"].includes(values["load-method"] as string)) throw new UsageError(`--load-method ${values["load-method"]}: expected pool or per-tensor`);
    opts.loadMethod = values["load-method"] as "pool" | "per-tensor";
  }
  if (values["load-ceiling"]) opts.loadCeiling = true;
  if (!values.quiet) opts.onLoadProgress = progressPrinter(process.stderr);
  opts.shardDirs = shardDirsOf(values);
  if (values.layers !== undefined) opts.layers = num(values, "layers", 0, (x) => Number.isInteger(x) && x >= 1, "an integer number of layers >= 1");
  if (values.spec !== undefined) opts.spec = num(values, "spec", 0, (x) => Number.isInteger(x) && x >= 0 && x <= 8, "an integer draft length in 0..8 (0 = off)");
  if (values["on-expert-error"] !== undefined) {
    if (!["drop", "fail"].includes(values["on-expert-error"] as string)) throw new UsageError(`--on-expert-error ${values["on-expert-error"]}: expected drop or fail`);
    opts.onExpertError = values["on-expert-error"] as "drop" | "fail";
  }
  return opts;
}

function samplingOptions(values: Values) {
  const sampling = {
    maxTokens: num(values, "max-tokens", 64, (x) => Number.isInteger(x) && x >= 1 && x <= 4096, "an integer in 1..4096"),
    temperature: num(values, "temperature", 0, (x) => Number.isFinite(x) && x >= 0, "a number >= 0"),
    topK: num(values, "top-k", 0, (x) => Number.isInteger(x) && x >= 0, "an integer >= 0"),
    topP: num(values, "top-p", 1, (x) => x > 0 && x <= 1, "a number in (0, 1]"),
    seed: num(values, "seed", 0, (x) => Number.isSafeInteger(x) && x >= 0, "a non-negative integer"),
    stop: (values.stop as string[] | undefined) ?? [],
    stopIds: ((values["stop-id"] as string[] | undefined) ?? []).map((s) => num({ s }, "s", 0, (x) => Number.isInteger(x) && x >= 0, "a token id")),
    presencePenalty: num(values, "presence-penalty", 0, Number.isFinite, "a number in [-2, 2]"),
    frequencyPenalty: num(values, "frequency-penalty", 0, Number.isFinite, "a number in [-2, 2]"),
  };
  // The ranges the Engine and the server check too (one path: sampler.ts).
  validateSampling(sampling);
  return sampling;
}

function modelDir(values: Values): { dir: string; embedded: boolean } {
  if (typeof values.model === "string") return { dir: resolve(values.model), embedded: false };
  if (process.env.K3_MODEL_DIR) return { dir: resolve(process.env.K3_MODEL_DIR), embedded: false };
  return { dir: embeddedModelDir(), embedded: true };
}

const EMBEDDED_NOTE =
  "note: no --model given, so this runs the embedded tiny K3: K3's graph and released layout at hidden 128\n" +
  "      (8 layers, 7.9 M parameters), trained for 34 minutes on The Rust Programming Language book. It writes\n" +
  "      book-like text, not answers, and was not trained on chat: prompts are completed raw unless --chat.\n" +
  "      For a real model: k3 run --model /path/to/Kimi-K3 --prompt \"...\"";

/** What chat and serve add for the embedded model: its replies continue the transcript as book text. */
const EMBEDDED_CHAT_NOTE = "      Chat and serve use the chat template anyway: replies continue the transcript as book-like text.";

// ---------------------------------------------------------------- run

async function cmdRun(argv: string[]): Promise<number> {
  const { values, tokens } = parse("run", argv, {
    ...SAMPLING,
    prompt: { type: "string" },
    "prompt-file": { type: "string" },
    ids: { type: "string" },
    raw: { type: "boolean" },
    chat: { type: "boolean" },
    "no-think": { type: "boolean" },
    effort: { type: "string" },
    system: { type: "string" },
    json: { type: "string" },
    quiet: { type: "boolean" },
    floor: { type: "boolean" },
    "tf-check": { type: "string" },
    "tf-min": { type: "string" },
    "dump-cache-trace": { type: "string" },
    "dump-logits": { type: "string" },
  });
  if (values.help) return print(HELP.run);
  const err = (l: string) => values.quiet || process.stderr.write(l + "\n");
  const given = ["prompt", "prompt-file", "ids"].filter((k) => values[k] !== undefined);
  if (given.length > 1) throw new UsageError(`k3 run: give exactly one of --prompt, --prompt-file, --ids (got ${given.map((g) => "--" + g).join(", ")})`);
  const { dir, embedded } = modelDir(values);
  const reference = values["tf-check"] !== undefined ? loadReference(String(values["tf-check"])) : null;
  const tfMin = num(values, "tf-min", 1, (x) => x >= 0 && x <= 1, "a fraction in 0..1");
  if (given.length === 0 && !embedded && !reference?.prompt) throw new UsageError("k3 run: give exactly one of --prompt, --prompt-file, --ids");
  const effort = values.effort as string | undefined;
  if (effort !== undefined && !["low", "high", "max"].includes(effort)) throw new UsageError(`--effort ${effort}: expected low, high or max ("medium" does not exist for K3)`);
  const sampling = samplingOptions(values);
  if (embedded) err(EMBEDDED_NOTE);
  const eo = engineOptions(values, tokens, err);
  if (values.floor) eo.floor = true;
  // The tiny model's matrices are too small to split across threads profitably.
  if (embedded && eo.threads === undefined) eo.threads = 1;
  const engine = await Engine.load(dir, eo);
  try {
    return await runLoaded(engine, values, { dir, embedded, given, reference, tfMin, effort, sampling, eo, err });
  } finally {
    engine.close(); // the stores' reader threads stop here, not in Node's teardown
  }
}

async function runLoaded(
  engine: Engine,
  values: Values,
  o: { dir: string; embedded: boolean; given: string[]; reference: ReturnType<typeof loadReference> | null; tfMin: number; effort: string | undefined; sampling: ReturnType<typeof samplingOptions>; eo: EngineOptions; err: (l: string) => unknown },
): Promise<number> {
  const { dir, embedded, given, reference, tfMin, effort, sampling, eo, err } = o;
  let prompt: number[];
  if (values.ids !== undefined) {
    prompt = String(values.ids)
      .split(",")
      .map((s) => s.trim())
      .map((s) => {
        const x = Number(s);
        if (s === "" || !Number.isInteger(x) || x < 0 || x >= engine.config.vocabSize) throw new UsageError(`--ids: ${JSON.stringify(s)} is not a token id in 0..${engine.config.vocabSize - 1}`);
        return x;
      });
  } else {
    let text: string;
    if (values["prompt-file"] !== undefined) {
      try {
        text = new TextDecoder("utf-8", { fatal: true }).decode(readFileSync(String(values["prompt-file"])));
      } catch (e) {
        throw new UsageError(`--prompt-file ${values["prompt-file"]}: ${(e as NodeJS.ErrnoException).code ?? "not valid UTF-8"}`);
      }
    } else text = (values.prompt as string | undefined) ?? (embedded ? EMBEDDED_DEFAULT_PROMPT : "Write a function that adds two numbers.");
    if (values.raw && values.chat) throw new UsageError("k3 run: --raw and --chat exclude each other");
    // The embedded model learnt raw text only: completing the prompt is what it can do.
    if (values.raw || (embedded && !values.chat)) {
      prompt = engine.encodeText(text);
      if (!reference) process.stdout.write(text); // a completion reads on from its prompt
    }
    else {
      const messages = [...(values.system ? [{ role: "system", content: String(values.system) }] : []), { role: "user", content: text }];
      prompt = engine.encodeChat(messages, { thinking: !values["no-think"], effort: (effort as "low" | "high" | "max" | undefined) ?? (embedded ? null : undefined) });
    }
  }
  if (reference && given.length === 0 && reference.prompt) prompt = reference.prompt;
  // The same limit Engine.generate applies (the server's requests go through it); checked here too for --reference.
  checkPromptLength(prompt.length);
  if (reference) return tfCheck(engine, prompt, reference.continuation, { chunkSize: eo.chunkSize, json: values.json as string | undefined, min: tfMin, err });
  err(`prompt: ${prompt.length} tokens; generating up to ${sampling.maxTokens} (${sampling.temperature === 0 ? "greedy" : `temperature ${sampling.temperature}, top-k ${sampling.topK}, top-p ${sampling.topP}, seed ${sampling.seed}`})`);
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.once("SIGINT", onSigint);
  const trace = values["dump-cache-trace"] !== undefined ? (engine.model.expertTrace = new ExpertTraceRecorder()) : null;
  const dump = values["dump-logits"] !== undefined ? new LogitsDumper(resolve(String(values["dump-logits"])), { model: dir, fingerprint: engine.fingerprint, promptIds: prompt }) : null;
  const gen = engine.generate(prompt, { ...sampling, signal: ac.signal, onLogits: dump ? (l, step) => dump.add(l, step) : undefined });
  let r = await gen.next();
  while (!r.done) {
    process.stdout.write(r.value.text);
    await signalsRun();
    r = await gen.next();
  }
  process.off("SIGINT", onSigint);
  process.stdout.write("\n");
  // With --floor: every ceiling measured again now, the floor judged against the higher of the two.
  const report = engine.floorAfterRun(r.value.report);
  err(formatReport(report));
  if (dump) {
    if (r.value.stopReason === "abort") dump.abort();
    else err(`logits: ${dump.finish([...r.value.ids, ...(r.value.stopId !== null ? [r.value.stopId] : [])])}`);
  }
  if (trace) {
    const traceDir = resolve(String(values["dump-cache-trace"]));
    trace.write(traceDir, {
      model: dir,
      fingerprint: engine.fingerprint,
      expert_bytes: engine.census.expertBytes,
      num_experts: engine.config.moe.numExperts,
      top_k: engine.config.moe.topK,
      slots_per_layer: engine.plan.cacheSlotsPerLayer,
      resident_hit_rate: report.resident_hit_rate,
      tokens: report.prompt_tokens + report.generated_tokens,
    });
    err(`expert trace: ${trace.requests.length} requests -> ${traceDir} (replay: k3 cache-sim --trace ${traceDir})`);
  }
  writeJson(values.json as string | undefined, report);
  if (report.expert_drops > 0) {
    err(`error: ${report.expert_drops} routed expert(s) were dropped; the output is not the model's`);
    return EXIT_DROPPED_EXPERT;
  }
  return r.value.stopReason === "abort" ? EXIT_RUNTIME : EXIT_OK;
}

// ---------------------------------------------------------------- eval

async function cmdEval(argv: string[]): Promise<number> {
  const { values, tokens } = parse("eval", argv, {
    text: { type: "string" },
    ids: { type: "string" },
    "max-tokens": { type: "string" },
    json: { type: "string" },
    quiet: { type: "boolean" },
  });
  if (values.help) return print(HELP.eval);
  const err = (l: string) => values.quiet || process.stderr.write(l + "\n");
  if ((values.text === undefined) === (values.ids === undefined)) throw new UsageError("k3 eval: give exactly one of --text FILE, --ids 1,2,3");
  const maxTokens = num(values, "max-tokens", MAX_PROMPT_TOKENS - 1, (x) => Number.isInteger(x) && x >= 1 && x < MAX_PROMPT_TOKENS, `an integer in 1..${MAX_PROMPT_TOKENS - 1}`);
  let text = "";
  if (values.text !== undefined) {
    try {
      text = new TextDecoder("utf-8", { fatal: true }).decode(readFileSync(String(values.text)));
    } catch (e) {
      throw new UsageError(`--text ${values.text}: ${(e as NodeJS.ErrnoException).code ?? "not valid UTF-8"}`);
    }
  }
  const { dir, embedded } = modelDir(values);
  if (embedded) err(EMBEDDED_NOTE);
  const eo = engineOptions(values, tokens, err);
  if (embedded && eo.threads === undefined) eo.threads = 1;
  const engine = await Engine.load(dir, eo);
  try {
    let ids: number[];
    if (values.ids !== undefined) {
      ids = String(values.ids).split(",").map((s) => {
        const x = Number(s.trim());
        if (s.trim() === "" || !Number.isInteger(x) || x < 0 || x >= engine.config.vocabSize) throw new UsageError(`--ids: ${JSON.stringify(s)} is not a token id in 0..${engine.config.vocabSize - 1}`);
        return x;
      });
    } else ids = engine.encodeText(text);
    if (ids.length > maxTokens + 1) {
      if (values["max-tokens"] === undefined) throw new UsageError(`k3 eval: the text is ${ids.length - 1} tokens; at most ${MAX_PROMPT_TOKENS - 1} in one pass (pass --max-tokens N to score the first N)`);
      ids = ids.slice(0, maxTokens + 1);
    }
    checkPromptLength(ids.length);
    const r = await engine.evaluate(ids);
    err(formatReport(r.report));
    process.stdout.write(formatNll(r, r.report.wall_seconds) + "\n");
    writeJson(values.json as string | undefined, { model: dir, tokens: r.tokens, scored: r.nll.length, mean_nll: r.meanNll, perplexity: r.perplexity, report: r.report });
    return r.report.expert_drops > 0 ? EXIT_DROPPED_EXPERT : EXIT_OK;
  } finally {
    engine.close();
  }
}

/** `k3 run --tf-check`: teacher-forced agreement with a reference; exit 0 when it reaches `min`. */
async function tfCheck(engine: Engine, prompt: number[], continuation: number[], o: { chunkSize?: number; json?: string; min: number; err: (l: string) => unknown }): Promise<number> {
  o.err(`teacher forcing: ${prompt.length} prompt tokens + ${continuation.length} reference tokens, one prefill pass`);
  const r = await teacherForced(engine.model, prompt, continuation, { chunkSize: o.chunkSize });
  process.stdout.write(formatTeacherForcing(r) + "\n");
  writeJson(o.json, { prompt_ids: prompt, reference_ids: continuation, ...r });
  return r.agreement >= o.min ? EXIT_OK : EXIT_RUNTIME;
}

// ---------------------------------------------------------------- download

async function cmdDownload(argv: string[]): Promise<number> {
  const parsed = parsePositional("download", argv, {
    dir: { type: "string" },
    revision: { type: "string" },
    include: { type: "string", multiple: true },
    concurrency: { type: "string" },
    verify: { type: "string" },
    endpoint: { type: "string" },
    token: { type: "string" },
  });
  const values = parsed.values as Values;
  if (values.help) return print(HELP.download);
  if (parsed.positionals.length !== 1) throw new UsageError(`k3 download: give one repository (owner/name), got ${parsed.positionals.length}\n(see k3 download --help)`);
  if (typeof values.dir !== "string") throw new UsageError("k3 download: --dir DIR is required");
  if (values.verify !== undefined && values.verify !== "size" && values.verify !== "full") throw new UsageError(`--verify ${values.verify}: expected size or full`);
  const { progressPrinter } = await import("@k3/moe-stream");
  const bar = progressPrinter(process.stderr);
  const r = await downloadCheckpoint({
    repo: parsed.positionals[0],
    dir: String(values.dir),
    revision: values.revision as string | undefined,
    include: values.include as string[] | undefined,
    concurrency: num(values, "concurrency", 4, (x) => Number.isInteger(x) && x >= 1 && x <= 64, "an integer in 1..64"),
    verify: values.verify as "size" | "full" | undefined,
    endpoint: values.endpoint as string | undefined,
    token: values.token as string | undefined,
    log: (l) => process.stderr.write(l + "\n"),
    onProgress: (p) => bar({ phase: "download", item: p.file, ...p }),
  });
  process.stderr.write(`done: ${r.files.length} files at ${r.revision}, ${fmtBytes(r.fetchedBytes)} fetched, ${fmtBytes(r.resumedBytes)} already there, ${r.seconds.toFixed(1)} s\n`);
  return EXIT_OK;
}

// ---------------------------------------------------------------- verify

async function cmdVerify(argv: string[]): Promise<number> {
  const parsed = parsePositional("verify", argv, {
    model: { type: "string" },
    manifest: { type: "string" },
    state: { type: "string" },
    restart: { type: "boolean" },
    threads: { type: "string" },
    json: { type: "string" },
  });
  const values = parsed.values as Values;
  if (values.help) return print(HELP.verify);
  if (parsed.positionals.length) throw new UsageError(`k3 verify: unexpected argument ${JSON.stringify(parsed.positionals[0])} (see k3 verify --help)`);
  const model = (values.model as string | undefined) ?? process.env.K3_MODEL_DIR;
  if (!model) throw new UsageError("k3 verify: --model DIR is required (see k3 verify --help)");
  const { verifyCheckpoint, formatVerify, VerifyError } = await import("./verify.js");
  const { progressPrinter } = await import("@k3/moe-stream");
  const bar = progressPrinter(process.stderr);
  const ac = new AbortController();
  const onSigint = () => ac.abort();
  process.once("SIGINT", onSigint);
  let r;
  try {
    r = await verifyCheckpoint({
      dir: model,
      manifest: values.manifest as string | undefined,
      stateFile: values.state as string | undefined,
      restart: !!values.restart,
      threads: values.threads === undefined ? undefined : num(values, "threads", 0, (x) => Number.isInteger(x) && x >= 1 && x <= 256, "an integer in 1..256"),
      signal: ac.signal,
      log: (l) => process.stderr.write(l + "\n"),
      onProgress: (p) => bar({ phase: "verify", item: p.file, ...p }),
    });
  } finally {
    process.off("SIGINT", onSigint);
  }
  const { lines, bad } = formatVerify(r);
  process.stdout.write(lines.join("\n") + "\n");
  writeJson(values.json as string | undefined, r);
  if (bad.length) throw new VerifyError(`k3 verify: ${bad.length} file(s) bad or missing: ${bad.map((f) => f.name).join(", ")}`, bad);
  return r.interrupted ? EXIT_RUNTIME : EXIT_OK;
}

// ---------------------------------------------------------------- compare-logits

async function cmdCompareLogits(argv: string[]): Promise<number> {
  const parsed = parsePositional("compare-logits", argv, { rtol: { type: "string" }, json: { type: "string" } });
  const values = parsed.values as Values;
  if (values.help) return print(HELP["compare-logits"]);
  if (parsed.positionals.length !== 2) throw new UsageError(`k3 compare-logits: give two files (got ${parsed.positionals.length})\n(see k3 compare-logits --help)`);
  const rtol = num(values, "rtol", 1e-3, (x) => x >= 0, "a relative L2 tolerance >= 0");
  const [a, b] = parsed.positionals.map((f) => readLogits(resolve(f)));
  const c = compareLogits(a, b);
  process.stdout.write(formatComparison(a, b, c) + "\n");
  writeJson(values.json as string | undefined, c);
  return c.firstArgmaxDiff === null && c.worstRelL2 <= rtol ? EXIT_OK : EXIT_RUNTIME;
}

// ---------------------------------------------------------------- cache-sim

async function cmdCacheSim(argv: string[]): Promise<number> {
  const { values } = parse("cache-sim", argv, { trace: { type: "string" }, slots: { type: "string" }, policy: { type: "string" }, json: { type: "string" } });
  if (values.help) return print(HELP["cache-sim"]);
  if (typeof values.trace !== "string") throw new UsageError("k3 cache-sim: --trace DIR is required (a directory written by k3 run --dump-cache-trace DIR)");
  const slots =
    values.slots === undefined
      ? null
      : String(values.slots)
          .split(",")
          .map((s) => num({ s: s.trim() }, "s", 0, (x) => Number.isInteger(x) && x >= 0, "slot counts: integers >= 0"));
  const policies = values.policy === undefined ? CACHE_POLICIES : String(values.policy).split(",").map((p) => p.trim());
  for (const p of policies) if (!(CACHE_POLICIES as readonly string[]).includes(p)) throw new UsageError(`--policy ${p}: expected some of ${CACHE_POLICIES.join(", ")}`);
  const report = cacheSimReport(resolve(values.trace), slots, policies as CachePolicy[]);
  process.stdout.write(formatCacheSim(report, policies as CachePolicy[]) + "\n");
  writeJson(values.json as string | undefined, report);
  return EXIT_OK;
}

// ---------------------------------------------------------------- chat

async function cmdChat(argv: string[]): Promise<number> {
  const { values, tokens } = parse("chat", argv, {
    ...SAMPLING,
    system: { type: "string" },
    "no-think": { type: "boolean" },
    effort: { type: "string" },
    load: { type: "string" },
  });
  if (values.help) return print(HELP.chat);
  const { dir, embedded } = modelDir(values);
  if (embedded) process.stderr.write(EMBEDDED_NOTE + "\n" + EMBEDDED_CHAT_NOTE + "\n");
  const engine = await Engine.load(dir, engineOptions(values, tokens, (l) => process.stderr.write(l + "\n")));
  try {
    return await chatLoop(engine, values);
  } finally {
    engine.close();
  }
}

/**
 * Lets the event loop run signal handlers (Ctrl-C) between two tokens: a forward pass on this
 * thread resolves without ever yielding to it, so a SIGINT would otherwise wait for the whole reply.
 */
function signalsRun(): Promise<void> {
  return new Promise((res) => setImmediate(res));
}

/** Lines of REPL history kept (in memory and in the file). */
const HISTORY_MAX = 1000;

/** The history file kept beside a conversation state file. */
function historyPathOf(stateFile: string): string {
  return `${resolve(stateFile)}.history`;
}

/** History lines, oldest first (a missing or unreadable file is an empty history). */
function readHistory(file: string): string[] {
  try {
    return readFileSync(file, "utf8").split("\n").filter(Boolean).slice(-HISTORY_MAX);
  } catch {
    return [];
  }
}

async function chatLoop(engine: Engine, values: Values): Promise<number> {
  const session = new ChatSession(engine, {
    system: values.system as string | undefined,
    thinking: !values["no-think"],
    effort: values.effort as "low" | "high" | "max" | undefined,
  });
  if (values.load) session.load(String(values.load));
  const sampling = { ...samplingOptions(values), maxTokens: num(values, "max-tokens", 512, (x) => Number.isInteger(x) && x >= 1, "an integer >= 1") };
  // Up-arrow history (readline on a TTY), kept in STATE.history beside the state file once there is
  // one (--load FILE or /save FILE); without one it lives for this session only.
  let historyFile = values.load ? historyPathOf(String(values.load)) : null;
  const history = historyFile ? readHistory(historyFile) : [];
  const tty = !!process.stdin.isTTY && !!process.stdout.isTTY;
  // The async line iterator buffers input, so piped lines typed ahead of a reply are not lost.
  const rl = createInterface({ input: process.stdin, output: tty ? process.stdout : undefined, terminal: tty, history: [...history].reverse(), historySize: HISTORY_MAX, prompt: "> " });
  const remember = (line: string) => {
    history.push(line);
    if (history.length > HISTORY_MAX) history.splice(0, history.length - HISTORY_MAX);
    if (historyFile) writeFileSync(historyFile, history.join("\n") + "\n");
  };
  // Ctrl-C: during a reply it stops the reply; at the prompt it exits. On a TTY readline reports
  // it as its own SIGINT event; piped (or `kill -INT`) it is the process signal.
  let reply: AbortController | null = null;
  const interrupt = () => {
    if (reply) return void reply.abort();
    process.stdout.write("\n(Ctrl-C at the prompt: exit)\n");
    rl.close();
  };
  rl.on("SIGINT", interrupt);
  process.on("SIGINT", interrupt);
  const prompt = () => (tty ? rl.prompt() : undefined);
  process.stderr.write("type a message; /reset, /save FILE, /load FILE, /exit; Ctrl-C stops a reply, Ctrl-C at the prompt exits\n");
  prompt();
  try {
    for await (const line of rl) {
      const cmd = line.trim();
      if (cmd) remember(line);
      if (cmd === "/exit") break;
      try {
        if (cmd === "/reset") {
          session.reset();
          process.stdout.write("(conversation reset)\n");
        } else if (cmd.startsWith("/save ")) {
          const file = cmd.slice(6).trim();
          session.save(file);
          historyFile = historyPathOf(file);
          writeFileSync(historyFile, history.join("\n") + "\n");
          process.stdout.write(`(saved to ${file})\n(input history in ${historyFile})\n`);
        } else if (cmd.startsWith("/load ")) {
          session.load(cmd.slice(6).trim());
          process.stdout.write(`(loaded ${session.messages.length} messages)\n`);
        } else if (cmd.startsWith("/")) {
          process.stdout.write("commands: /reset, /save FILE, /load FILE, /exit\n");
        } else if (cmd) {
          reply = new AbortController();
          const gen = session.send(line, { ...sampling, signal: reply.signal });
          let r = await gen.next();
          while (!r.done) {
            process.stdout.write(r.value.text);
            await signalsRun();
            r = await gen.next();
          }
          const rep = r.value.report;
          if (r.value.stopReason === "abort") {
            // The partial reply stays in the conversation as the assistant's (closed) turn; the
            // model state holds it unfinished, so the next turn re-reads the whole conversation.
            process.stdout.write(`\n[stopped by Ctrl-C after ${rep.generated_tokens} tokens: the partial reply is kept as the assistant's turn, closed; the next turn re-reads the conversation]\n`);
          } else {
            process.stdout.write(`\n[${session.lastPrefillTokens} new prompt tokens, ${rep.generated_tokens} generated, ${rep.decode_tokens_per_second.toFixed(1)} tok/s]\n`);
          }
        }
      } catch (e) {
        process.stdout.write(`error: ${(e as Error).message}\n`);
      } finally {
        reply = null;
      }
      prompt();
    }
  } finally {
    process.off("SIGINT", interrupt);
    rl.close();
  }
  return EXIT_OK;
}

// ---------------------------------------------------------------- serve

async function cmdServe(argv: string[]): Promise<number> {
  const { values, tokens } = parse("serve", argv, {
    host: { type: "string" },
    port: { type: "string" },
    queue: { type: "string" },
    "prompt-cache": { type: "string" },
    "prompt-cache-mb": { type: "string" },
    "no-web-ui": { type: "boolean" },
    "allow-host": { type: "string", multiple: true },
    cors: { type: "string", multiple: true },
    "api-key": { type: "string" },
  });
  if (values.help) return print(HELP.serve);
  const apiKey = (values["api-key"] as string | undefined) ?? (process.env.K3_API_KEY || undefined);
  if (apiKey !== undefined && !/^[\x21-\x7e]{8,}$/.test(apiKey)) throw new UsageError("--api-key: expected at least 8 printable characters without spaces");
  const port = num(values, "port", 8080, (x) => Number.isInteger(x) && x >= 0 && x < 65536, "a port number");
  const maxQueue = num(values, "queue", 8, (x) => Number.isInteger(x) && x >= 0, "an integer >= 0");
  const cacheSlots = num(values, "prompt-cache", 1, (x) => Number.isInteger(x) && x >= 0 && x <= 1024, "an integer in 0..1024 (0 = off)");
  const cacheMb = num(values, "prompt-cache-mb", 1024, (x) => Number.isInteger(x) && x >= 0 && x <= 1 << 20, "an integer number of MiB in 0..1048576");
  const { dir, embedded } = modelDir(values);
  if (embedded) process.stderr.write(EMBEDDED_NOTE + "\n" + EMBEDDED_CHAT_NOTE + "\n");
  const { log: _log, onLoadProgress: _progress, ...options } = engineOptions(values, tokens, () => {});
  const workerUrl = new URL(import.meta.url.endsWith(".ts") ? "./worker.ts" : "./worker.js", import.meta.url);
  const backend = await WorkerBackend.start({ dir, options: { ...options, promptCache: { slots: cacheSlots, maxBytes: cacheMb * 2 ** 20 } } }, workerUrl);
  backend.onLog = (l) => process.stderr.write(l + "\n");
  process.stderr.write(backend.plan);
  const host = (values.host as string | undefined) ?? "127.0.0.1";
  let server;
  try {
    server = await startServer(backend, {
      host,
      port,
      maxQueue,
      webUi: !values["no-web-ui"],
      allowHosts: values["allow-host"] as string[] | undefined,
      corsOrigins: values.cors as string[] | undefined,
      apiKey,
      log: (l) => process.stderr.write(l + "\n"),
    });
  } catch (err) {
    await backend.close();
    const code = (err as { code?: string }).code;
    if (code === "EADDRINUSE" || code === "EACCES" || code === "EADDRNOTAVAIL") {
      throw new UsageError(`k3 serve: cannot listen on ${host.includes(":") ? `[${host}]` : host}:${port}: ${code === "EADDRINUSE" ? "the address is already in use (another server? pick another --port)" : code === "EACCES" ? "permission denied (ports below 1024 need privileges)" : "no such local address (--host)"}`);
    }
    throw err;
  }
  process.stderr.write(`serving ${backend.modelId} at ${server.url}/v1${values["no-web-ui"] ? "" : `; chat page at ${server.url}/`} (Ctrl-C to stop)\n`);
  await new Promise<void>((res) => {
    const stop = () => res();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  await server.close();
  await backend.close();
  return EXIT_OK;
}

// ---------------------------------------------------------------- pack, doctor, bench

async function cmdPack(argv: string[]): Promise<number> {
  const { values } = parse("pack", argv, { out: { type: "string" } });
  if (values.help) return print(HELP.pack);
  if (typeof values.model !== "string" || typeof values.out !== "string") throw new UsageError("k3 pack: --model DIR and --out DIR are required");
  const { packTrunk, progressPrinter } = await import("@k3/moe-stream");
  const t0 = performance.now();
  const result = await packTrunk(resolve(values.model), resolve(values.out), { onProgress: progressPrinter(process.stderr), shardDirs: shardDirsOf(values) });
  const seconds = (performance.now() - t0) / 1000;
  process.stderr.write(
    `packed ${result.manifest.groups?.length ?? "?"} groups, ${(result.writtenBytes / GB).toFixed(3)} GB written (${result.resumedGroups} resumed) in ${seconds.toFixed(1)} s (${(result.writtenBytes / GB / seconds).toFixed(2)} GB/s; read ${result.io.read}, write ${result.io.write}) → ${result.file}\n`,
  );
  return EXIT_OK;
}

async function cmdDoctor(argv: string[]): Promise<number> {
  const { values } = parse("doctor", argv, { "probe-mb": { type: "string" } });
  if (values.help) return print(HELP.doctor);
  const dir = typeof values.model === "string" ? resolve(values.model) : process.env.K3_MODEL_DIR ? resolve(process.env.K3_MODEL_DIR) : null;
  const probeMb = num(values, "probe-mb", 512, (x) => Number.isInteger(x) && x >= 1, "an integer >= 1");
  const ok = await runDoctor({ dir, shardDirs: shardDirsOf(values), probeBytes: probeMb * 1e6, out: (l) => process.stdout.write(l + "\n") });
  return ok ? EXIT_OK : EXIT_RUNTIME;
}

async function cmdPlan(argv: string[]): Promise<number> {
  const { values, tokens } = parse("plan", argv, {
    "published-k3": { type: "boolean" },
    packed: { type: "boolean" },
    project: { type: "boolean" },
    "from-report": { type: "string" },
    "disk-gbps": { type: "string" },
    "probe-mb": { type: "string" },
    json: { type: "string" },
  });
  if (values.help) return print(HELP.plan);
  const { censusOf } = await import("./census.js");
  const { readConfig, withLayers } = await import("./config.js");
  const { budgetsFor, formatPlan, planMemory, readMemInfo } = await import("./presets.js");
  const { formatProjection, projectK3, publishedK3, ratesFromReport } = await import("./projection.js");
  const published = values["published-k3"] === true;
  if (published === (typeof values.model === "string")) throw new UsageError("k3 plan: give exactly one of --model DIR and --published-k3");
  const dir = typeof values.model === "string" ? resolve(values.model) : null;
  const cfg = dir ? withLayers(readConfig(dir), values.layers === undefined ? undefined : num(values, "layers", 0, (x) => Number.isInteger(x) && x >= 1, "an integer >= 1")) : publishedK3();
  const presetArg = (values.preset as string | undefined) ?? (values.project ? "all" : "auto");
  if (presetArg !== "all" && !(PRESET_NAMES as readonly string[]).includes(presetArg)) throw new UsageError(`--preset ${presetArg}: expected all or one of ${PRESET_NAMES.join(", ")}`);
  const presets = presetArg === "all" ? [...PRESET_NAMES] : [presetArg as PresetName];
  const mem = readMemInfo();
  const census = censusOf(cfg);
  const eo = engineOptions(values, tokens, () => {});
  const packed = values.packed === true || values.trunk !== undefined || published;
  const out: Record<string, unknown> = {};
  if (!values.project) {
    const plans = presets.map((p) => {
      const plan = planMemory(census, { ...budgetsFor(p, census, mem), ...eo.budgets }, eo.budgets ? "custom" : p, mem, { prefetch: eo.prefetch ?? true, packedTrunk: packed });
      process.stdout.write(formatPlan(plan, cfg.numLayers) + "\n");
      return plan;
    });
    writeJson(values.json as string | undefined, { model: dir ?? "published K3", plans });
    return EXIT_OK;
  }
  let report: Parameters<typeof ratesFromReport>[0] | null = null;
  if (values["from-report"] !== undefined) {
    try {
      report = JSON.parse(readFileSync(resolve(String(values["from-report"])), "utf8"));
    } catch (e) {
      throw new UsageError(`--from-report ${values["from-report"]}: ${(e as Error).message}`);
    }
  }
  const fromReport = report ? ratesFromReport(report) : { rates: {}, prefill: {}, prefillTokens: null, memCeilingGbps: null, diskCeilingGbps: null, sourceCeilings: {} };
  let diskGbps: number;
  let diskSource: string;
  let sourceGbps: { trunk?: number; experts?: number; embedHead?: number } | undefined;
  const sc = fromReport.sourceCeilings;
  if (values["disk-gbps"] !== undefined) {
    diskGbps = num(values, "disk-gbps", 0, (x) => Number.isFinite(x) && x > 0, "a bandwidth in GB/s > 0");
    diskSource = "--disk-gbps";
  } else if (fromReport.diskCeilingGbps !== null) {
    diskGbps = fromReport.diskCeilingGbps;
    sourceGbps = { trunk: sc.trunk, experts: sc.experts, embedHead: sc.lm_head };
    const named = Object.entries(sourceGbps).filter(([, v]) => v !== undefined).map(([k]) => k);
    diskSource = `the report's measured ceilings${named.length ? ` (${named.join(", ")}: their own; the rest at its overall disk ceiling)` : ""}`;
  } else if (dir) {
    const { probeDisk, PROBE_QUEUE_DEPTH } = await import("./doctor.js");
    const { readdirSync } = await import("node:fs");
    const files = readdirSync(dir).filter((f) => f.endsWith(".safetensors")).map((f) => join(dir, f));
    const p = probeDisk(dir, files, num(values, "probe-mb", 512, (x) => Number.isInteger(x) && x >= 1, "an integer >= 1") * 1e6, shardDirsOf(values));
    if (!p) throw new UsageError(`k3 plan --project: ${dir}'s shards are too small to probe the disk; give --disk-gbps X`);
    diskGbps = Math.max(p.engine.gbPerSec, p.ceiling.gbPerSec);
    diskSource = `measured here: ${p.reads} expert-sized O_DIRECT reads of ${dir}, ${PROBE_QUEUE_DEPTH} in flight`;
  } else throw new UsageError("k3 plan --project: give --disk-gbps X, a --from-report with floor.disk_ceiling_gbps, or --model DIR to measure the disk");
  const projection = projectK3({ rates: fromReport.rates, prefill: fromReport.prefill, prefillT: fromReport.prefillTokens ?? 64, diskGbps, sourceGbps, diskSource, mem, presets });
  process.stdout.write(formatProjection(projection) + "\n");
  out.projection = projection;
  writeJson(values.json as string | undefined, projection);
  return EXIT_OK;
}

async function cmdSynth(argv: string[]): Promise<number> {
  const { values, positionals } = parsePositional("synth", argv, {
    out: { type: "string" },
    layers: { type: "string" },
    experts: { type: "string" },
    vocab: { type: "string" },
    "dense-layers": { type: "string" },
    seed: { type: "string" },
    "kimi-linear": { type: "boolean" },
    tokenizer: { type: "string" },
    force: { type: "boolean" },
  });
  if (values.help) return print(HELP.synth);
  if (positionals.length) throw new UsageError(`k3 synth: unexpected argument ${JSON.stringify(positionals[0])} (see k3 synth --help)`);
  if (typeof values.out !== "string" || values.out === "") throw new UsageError("k3 synth: --out DIR is required (see k3 synth --help)");
  const count = (key: string) => (values[key] === undefined ? undefined : num(values, key, 0, (x) => Number.isSafeInteger(x) && x >= 0, "a non-negative integer"));
  const { synthesize, synthProgressPrinter } = await import("./synth.js");
  const r = await synthesize({
    out: values.out,
    family: values["kimi-linear"] ? "kimi-linear" : "k3",
    layers: count("layers"),
    experts: count("experts"),
    vocab: count("vocab"),
    denseLayers: count("dense-layers"),
    seed: count("seed"),
    tokenizer: values.tokenizer as string | undefined,
    force: !!values.force,
    onProgress: synthProgressPrinter(process.stderr),
  });
  process.stderr.write(
    `wrote ${r.dir}: ${r.tensors} tensors in ${r.shards.length} shards, ${(r.fileBytes / GB).toFixed(3)} GB in ${r.seconds.toFixed(1)} s ` +
      `(${(r.fileBytes / 1e9 / r.seconds).toFixed(2)} GB/s, ${r.io.mode}${r.io.note ? `: ${r.io.note}` : ""}); layers ${r.layerMap}\n`,
  );
  return EXIT_OK;
}

async function cmdBench(argv: string[]): Promise<number> {
  const { values, tokens } = parse("bench", argv, { "prompt-tokens": { type: "string" }, gen: { type: "string" }, "no-floor": { type: "boolean" }, json: { type: "string" } });
  if (values.help) return print(HELP.bench);
  const { dir, embedded } = modelDir(values);
  if (embedded) process.stderr.write("(embedded tiny model: 7.9 M parameters at hidden 128; measures the pipeline, not K3's speed)\n");
  const n = num(values, "prompt-tokens", 128, (x) => Number.isInteger(x) && x >= 1, "an integer >= 1");
  const gen = num(values, "gen", 32, (x) => Number.isInteger(x) && x >= 1, "an integer >= 1");
  const engine = await Engine.load(dir, { ...engineOptions(values, tokens, (l) => process.stderr.write(l + "\n")), floor: !values["no-floor"] });
  try {
    // A deterministic prompt of ordinary ids (no specials).
    const prompt = Array.from({ length: n }, (_, i) => (i * 7919 + 13) % engine.tokenizer.nRanks);
    const r = await engine.complete(prompt, { maxTokens: gen, stopIds: [], temperature: 0 });
    const report = engine.floorAfterRun(r.report);
    process.stdout.write(formatReport(report) + "\n");
    writeJson(values.json as string | undefined, report);
    return EXIT_OK;
  } finally {
    engine.close();
  }
}

/** --json FILE: the value as indented JSON into FILE, or to stdout for "-"; nothing when absent. */
function writeJson(target: string | undefined, value: unknown): void {
  if (target === undefined) return;
  const text = JSON.stringify(value, null, 2) + "\n";
  if (target === "-") process.stdout.write(text);
  else writeFileSync(target, text);
}

function print(text: string): number {
  process.stdout.write(text);
  return EXIT_OK;
}

/** Runs the CLI; returns the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case undefined:
      case "help":
      case "--help":
      case "-h":
        return print(GLOBAL_HELP);
      case "--version":
      case "-v":
        return print(`k3 ${version()} (SIMD ${simdLevel()}, best ${bestSimdLevel()}, ${threadCount()} threads)\n`);
      case "--list-presets":
        return print(
          "preset       trunk GB  cache GB  KV GB  notes\n" +
            Object.entries(PRESETS)
              .map(([n, p]) => `${n.padEnd(12)} ${String(p.trunkGb).padStart(8)}  ${String(p.cacheGb).padStart(8)}  ${String(p.kvGb).padStart(5)}  ${p.note}`)
              .join("\n") +
            "\nauto         from MemAvailable: the whole trunk when it fits, else pinning capped at 0.55 x MemTotal\n",
        );
      case "run":
        return await cmdRun(rest);
      case "eval":
      case "perplexity":
        return await cmdEval(rest);
      case "chat":
        return await cmdChat(rest);
      case "serve":
        return await cmdServe(rest);
      case "pack":
        return await cmdPack(rest);
      case "doctor":
        return await cmdDoctor(rest);
      case "plan":
        return await cmdPlan(rest);
      case "bench":
        return await cmdBench(rest);
      case "cache-sim":
        return await cmdCacheSim(rest);
      case "compare-logits":
        return await cmdCompareLogits(rest);
      case "download":
        return await cmdDownload(rest);
      case "verify":
        return await cmdVerify(rest);
      case "synth":
        return await cmdSynth(rest);
      default:
        throw new UsageError(`k3: unknown command ${JSON.stringify(command)}\n\n${GLOBAL_HELP}`);
    }
  } catch (err) {
    const code = exitCodeOf(err);
    const e = err as Error & { exitCode?: number };
    process.stderr.write(`${code === EXIT_USAGE ? "" : "error: "}${e.message}\n`);
    return typeof e.exitCode === "number" ? e.exitCode : code;
  }
}

function invokedDirectly(): boolean {
  try {
    return !!process.argv[1] && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}
if (invokedDirectly()) {
  main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
