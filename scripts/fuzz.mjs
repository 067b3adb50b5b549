// `pnpm fuzz [--seconds 60] [--only NAME,...]`: the native parsers of untrusted bytes under libFuzzer
// with AddressSanitizer + UBSan (clang; Debian: apt-get install clang libclang-rt-14-dev), each for a
// bounded time from a seed corpus this script writes (valid files in the layouts the project reads),
// then prints per target: executions, seconds, corpus size, findings (crash/leak/timeout/oom files).
// Not part of `pnpm test`; the findings, once fixed, go to native/fuzz/regressions/ where the package
// tests replay them under gcc's sanitizers.
//
// Targets: native/fuzz/targets.mjs of @k3/safetensors (header scanner, index.json scanner) and
// @k3/tiktoken-bpe (rank-file parser -> rank table -> BPE encode/decode round trip); then, in
// process, the TypeScript readers of chat state files, packed-trunk manifests, config.json and
// tokenizer_config.json, and HTTP requests to `k3 serve` on loopback (scripts/fuzz-js.mjs): these
// print cases / accepted / refused / crashes / hangs / disagreements and need no clang.
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const work = join(root, ".fuzz");
const HELP = `usage: pnpm fuzz [--seconds 60] [--only NAME,...] [--jobs 1]

Builds every libFuzzer target with clang -fsanitize=fuzzer,address,undefined, writes a seed corpus,
runs each target for --seconds (corpus kept in .fuzz/corpus/NAME between runs), and prints the
executions and findings per target. Exit 1 when a target found something (files in .fuzz/findings/NAME).
`;

const { values } = parseArgs({ options: { seconds: { type: "string" }, only: { type: "string" }, help: { type: "boolean", short: "h" } }, strict: true });
if (values.help) {
  process.stdout.write(HELP);
  process.exit(0);
}
const seconds = Number(values.seconds ?? 60);
if (!Number.isInteger(seconds) || seconds < 1) {
  process.stderr.write(`--seconds ${values.seconds}: expected a whole number of seconds >= 1\n`);
  process.exit(2);
}

// ---------------------------------------------------------------- the toolchain

function clangOk() {
  const probe = join(work, "probe.c");
  mkdirSync(work, { recursive: true });
  writeFileSync(probe, "#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n");
  return spawnSync("clang", ["-fsanitize=fuzzer,address,undefined", probe, "-o", join(work, "probe")], { stdio: "ignore" }).status === 0;
}

const packages = [
  { pkg: "safetensors", seeds: safetensorsSeeds },
  { pkg: "tiktoken-bpe", seeds: rankSeeds },
];
const targets = [];
for (const p of packages) {
  const native = join(root, "packages", p.pkg, "native");
  const mod = await import(join(native, "fuzz", "targets.mjs"));
  for (const t of mod.targets) targets.push({ ...t, native, seeds: p.seeds });
}
const only = values.only ? new Set(String(values.only).split(",")) : null;
const JS_TARGETS = ["chat-state", "trunk-manifest", "config", "tokenizer-config", "http"];
if (only) for (const n of only) if (!targets.some((t) => t.name === n) && !JS_TARGETS.includes(n)) {
  process.stderr.write(`--only ${n}: no such target (${[...targets.map((t) => t.name), ...JS_TARGETS].join(", ")})\n`);
  process.exit(2);
}

// The libFuzzer targets need clang; the in-process stages do not (run them alone with --only).
if (targets.some((t) => !only || only.has(t.name)) && !clangOk()) {
  process.stderr.write("pnpm fuzz needs clang with libFuzzer for its native targets (Debian/Ubuntu: apt-get install clang libclang-rt-14-dev, or the version matching your clang); --only chat-state,trunk-manifest,config,tokenizer-config,http runs the in-process stages without it\n");
  process.exit(2);
}

const SAN = ["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-std=gnu11"];

function build(t) {
  const dir = join(work, "build", t.name);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const inc = t.include.map((d) => `-I${join(t.native, d)}`);
  // SIMD files apart (clang ignores #pragma GCC target), instrumented for coverage too.
  const objs = Object.entries(t.simd).map(([src, flags], i) => {
    const o = join(dir, `simd${i}.o`);
    execFileSync("clang", [...SAN, "-fsanitize=fuzzer-no-link", ...flags, ...inc, "-c", join(t.native, src), "-o", o]);
    return o;
  });
  const exe = join(dir, "fuzz");
  execFileSync("clang", [...SAN, "-fsanitize=fuzzer", ...inc, join(t.native, t.harness), ...t.sources.map((s) => join(t.native, s)), ...objs, ...t.libs, "-o", exe]);
  return exe;
}

// ---------------------------------------------------------------- seeds

function safetensorsFile(header, dataBytes = 0) {
  const h = Buffer.from(JSON.stringify(header));
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  return Buffer.concat([len, h, Buffer.alloc(dataBytes)]);
}

/** The small tensors of a real shard's header, laid out again back to back (zero data). */
function relaid(file, maxBytes = 4096, maxTensors = 24) {
  const b = readFileSync(file);
  const n = Number(b.readBigUInt64LE(0));
  const h = JSON.parse(b.subarray(8, 8 + n).toString("utf8"));
  const out = {};
  if (h.__metadata__) out.__metadata__ = h.__metadata__;
  let at = 0;
  for (const [k, v] of Object.entries(h)) {
    if (k === "__metadata__") continue;
    const size = v.data_offsets[1] - v.data_offsets[0];
    if (size > maxBytes || Object.keys(out).length > maxTensors) continue;
    out[k] = { ...v, data_offsets: [at, at + size] };
    at += size;
  }
  return safetensorsFile(out, at);
}

function safetensorsSeeds(target) {
  const tiny = join(root, "fixtures", "models", "tiny-k3");
  if (target.name === "safetensors-index") {
    return [
      readFileSync(join(tiny, "model.safetensors.index.json")),
      Buffer.from(JSON.stringify({ metadata: { total_size: 12 }, weight_map: { "model.layers.0.mlp.experts.1.w1.weight": "model-00001-of-00002.safetensors", "b\u00e9": "model-00002-of-00002.safetensors" } })),
      Buffer.from('{"weight_map":{"a\\u0041":"x\\/y.safetensors","b":"x/y.safetensors"},"metadata":null}'),
      Buffer.from('{"weight_map":{}}'),
    ];
  }
  const seeds = [
    safetensorsFile({ __metadata__: { format: "pt", 'k"ey': "v\\al" }, "language_model.model.layers.3.block_sparse_moe.experts.10.w1.weight_packed": { dtype: "U8", shape: [4, 2], data_offsets: [0, 8] }, "model.layers.0.self_attn.A_log": { dtype: "F32", shape: [3], data_offsets: [8, 20] } }, 20),
    safetensorsFile({ "x\u00e9\u{1f600}": { dtype: "BF16", shape: [2, 1], data_offsets: [0, 4] }, f4: { dtype: "F4", shape: [2, 2], data_offsets: [4, 6] }, f6: { dtype: "F6_E2M3", shape: [4], data_offsets: [6, 9] }, scalar: { dtype: "F64", shape: [], data_offsets: [9, 17] }, empty: { dtype: "I64", shape: [0, 3], data_offsets: [17, 17] } }, 17),
    safetensorsFile({ __metadata__: null, a: { dtype: "U8", shape: [2], data_offsets: [0, 2] }, b: { dtype: "C64", shape: [1], data_offsets: [2, 10] } }, 10),
    safetensorsFile({ "model.layers.1.mlp.experts.w1": { dtype: "F8_E4M3", shape: [2], data_offsets: [0, 2] }, "model.layers.1.mlp.shared_experts.w2": { dtype: "I8", shape: [1], data_offsets: [2, 3] } }, 3),
    safetensorsFile({}),
  ];
  for (const f of readdirSync(tiny).filter((f) => f.endsWith(".safetensors")).sort()) seeds.push(relaid(join(tiny, f)));
  return seeds;
}

function rankSeeds() {
  const b64 = (bytes) => Buffer.from(bytes).toString("base64");
  const lines = [];
  for (let i = 0; i < 256; i++) lines.push(`${b64([i])} ${i}`);
  const merges = ["th", "he", "the", " t", " the", "in", "ing", "é", "中文", "  ", "\n\n", "ab", "abc"];
  merges.forEach((m, i) => lines.push(`${b64(Buffer.from(m))} ${256 + i}`));
  const plain = lines.join("\n") + "\n";
  return [
    readFileSync(join(root, "fixtures", "models", "tiny-k3", "tiktoken.model")),
    Buffer.from(plain),
    Buffer.from(lines.join("\r\n") + "\r\n\r\nthe them the\n"),
    Buffer.from(lines.slice().reverse().map((l) => l.replace(" ", "\t")).join("\n")),
  ];
}

// ---------------------------------------------------------------- run

function run(t, exe) {
  const corpus = join(work, "corpus", t.name);
  const findings = join(work, "findings", t.name);
  mkdirSync(corpus, { recursive: true });
  mkdirSync(findings, { recursive: true });
  t.seeds(t).forEach((s, i) => writeFileSync(join(corpus, `seed-${i}`), s));
  const reg = join(t.native, t.regressions);
  if (existsSync(reg)) for (const f of readdirSync(reg)) copyFileSync(join(reg, f), join(corpus, `regression-${f}`));
  const before = new Set(readdirSync(findings));
  const t0 = performance.now();
  const r = spawnSync(exe, [
    `-max_total_time=${seconds}`, "-timeout=10", "-rss_limit_mb=2048", "-malloc_limit_mb=2048", "-max_len=65536",
    "-print_final_stats=1", `-artifact_prefix=${findings}/`, corpus,
  ], { encoding: "utf8", maxBuffer: 256 << 20, env: { ...process.env, ASAN_OPTIONS: "detect_leaks=1", UBSAN_OPTIONS: "print_stacktrace=1" } });
  const secs = (performance.now() - t0) / 1000;
  const log = r.stderr ?? "";
  writeFileSync(join(work, `${t.name}.log`), log);
  const execs = Number(/stat::number_of_executed_units:\s*(\d+)/.exec(log)?.[1] ?? NaN);
  const found = readdirSync(findings).filter((f) => !before.has(f));
  const errors = [...log.matchAll(/(runtime error: .*|ERROR: \w+Sanitizer: .*|ERROR: libFuzzer: .*)/g)].map((m) => m[1]);
  return { target: t.name, execs, seconds: secs, corpus: readdirSync(corpus).length, findings: found, errors, status: r.status };
}

const jsTargets = [
  { name: "chat-state", run: (w, s, log) => import("./fuzz-js.mjs").then((m) => m.fuzzChatState(root, w, s, log)) },
  { name: "trunk-manifest", run: (w, s, log) => import("./fuzz-js.mjs").then((m) => m.fuzzTrunkManifest(root, w, s, log)) },
  { name: "config", run: (w, s, log) => import("./fuzz-js.mjs").then((m) => m.fuzzConfig(root, w, s, log)) },
  { name: "tokenizer-config", run: (w, s, log) => import("./fuzz-js.mjs").then((m) => m.fuzzTokenizerConfig(root, w, s, log)) },
  { name: "http", run: (w, s, log) => import("./fuzz-js.mjs").then((m) => m.fuzzHttp(root, w, s, log)) },
];

const results = [];
for (const t of targets) {
  if (only && !only.has(t.name)) continue;
  process.stderr.write(`${t.name}: building ... `);
  const exe = build(t);
  process.stderr.write(`fuzzing ${seconds} s\n`);
  const r = run(t, exe);
  results.push(r);
  process.stderr.write(`${t.name}: ${r.execs} execs in ${r.seconds.toFixed(0)} s, ${r.findings.length} finding(s)${r.errors.length ? `: ${r.errors[0]}` : ""}\n`);
}

const jsResults = [];
for (const t of jsTargets) {
  if (only && !only.has(t.name)) continue;
  process.stderr.write(`${t.name}: ${seconds} s in process (TypeScript reader + the engine)\n`);
  const r = await t.run(work, seconds, (l) => process.stderr.write(l + "\n"));
  writeFileSync(join(work, `${t.name}.json`), JSON.stringify(r, null, 1));
  jsResults.push(r);
}

console.log("\ntarget               execs        seconds  exec/s   corpus  findings");
for (const r of results) {
  console.log(`${r.target.padEnd(20)} ${String(r.execs).padStart(11)}  ${r.seconds.toFixed(0).padStart(7)}  ${String(Math.round(r.execs / r.seconds)).padStart(6)}  ${String(r.corpus).padStart(6)}  ${r.findings.length ? r.findings.map((f) => join(".fuzz", "findings", r.target, f)).join(" ") : "0"}`);
}
if (jsResults.length) console.log("\nin process           cases        seconds  case/s  accepted  refused  crashes  hangs  disagreements");
for (const r of jsResults) {
  console.log(`${r.target.padEnd(20)} ${String(r.cases).padStart(11)}  ${r.seconds.toFixed(0).padStart(7)}  ${String(Math.round(r.cases / r.seconds)).padStart(6)}  ${String(r.accepted).padStart(8)}  ${String(r.refused).padStart(7)}  ${String(r.crashes.length).padStart(7)}  ${String(r.slow).padStart(5)}  ${String(r.disagreements.length).padStart(13)}`);
}
const bad = results.filter((r) => r.findings.length || r.errors.length || (r.status !== 0 && r.status !== null));
for (const r of bad) console.log(`\n${r.target}: ${r.errors.join("\n  ") || `exit ${r.status}`} (log: .fuzz/${r.target}.log)`);
for (const r of jsResults) for (const c of r.crashes.slice(0, 5)) console.log(`\n${r.target} case ${c.case}: ${c.error}\n  ${c.stack} (all: .fuzz/${r.target}.json)`);
for (const r of jsResults) for (const c of r.disagreements.slice(0, 5)) console.log(`\n${r.target} case ${c.case} disagrees: ${c.error} (all: .fuzz/${r.target}.json)`);
process.exit(bad.length || jsResults.some((r) => r.crashes.length || r.slow || r.disagreements.length) ? 1 : 0);
