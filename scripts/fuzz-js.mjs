// The TypeScript readers of untrusted files, fuzzed in process by `pnpm fuzz` (scripts/fuzz.mjs):
// valid files written by the project, mutated structurally (a JSON value replaced by a hostile one,
// a key dropped, an array element doubled) or byte-wise, then read through the public API. Each case
// must either load (and then run one token) or be refused with one of the project's typed errors
// (K3Error, MoeStreamError, ...); a plain Error / TypeError / RangeError or anything thrown from
// inside is a crash. Needs `pnpm build` (imports the packages' dist).
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const HOSTILE = [-1, 0, 1, 2 ** 31, 2 ** 53, 1e9, 1e308, -1e308, 0.5, "x", "", "abc", null, true, false, [], [-1], [1e9], ["a"], {}, { a: 1 }, "9".repeat(400), Array(64).fill(7)];
const PLAIN = [Error, TypeError, RangeError, ReferenceError, SyntaxError, EvalError, URIError];

/** Every path to a value inside a JSON value (capped). */
function paths(v, at = [], out = []) {
  if (out.length > 4000) return out;
  out.push(at);
  if (Array.isArray(v)) v.slice(0, 64).forEach((x, i) => paths(x, [...at, i], out));
  else if (v && typeof v === "object") for (const k of Object.keys(v)) paths(v[k], [...at, k], out);
  return out;
}

function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** One structural mutation of a JSON value (a fresh copy). */
function mutateJson(value, r) {
  const v = structuredClone(value);
  const all = paths(v).filter((p) => p.length > 0);
  const p = all[Math.floor(r() * all.length)];
  let parent = v;
  for (const k of p.slice(0, -1)) parent = parent[k];
  const key = p[p.length - 1];
  const op = r();
  if (op < 0.7) parent[key] = HOSTILE[Math.floor(r() * HOSTILE.length)];
  else if (op < 0.85) Array.isArray(parent) ? parent.splice(key, 1) : delete parent[key];
  else if (Array.isArray(parent)) parent.splice(key, 0, structuredClone(parent[key]));
  else if (typeof parent[key] === "number") parent[key] = parent[key] + (r() < 0.5 ? 1 : -1);
  else parent[key] = String(parent[key]);
  return v;
}

function flipBytes(buf, r, n = 1 + Math.floor(r() * 4)) {
  const b = Buffer.from(buf);
  for (let i = 0; i < n; i++) b[Math.floor(r() * b.length)] ^= 1 << Math.floor(r() * 8);
  return b;
}

function classify(err) {
  return PLAIN.includes(err?.constructor) ? "crash" : "refused";
}

/** A finding that is not a crash: the stage's oracle disagrees with what the reader did. */
class Disagreement extends Error {
  constructor(message, what = "") {
    super(message);
    this.what = what;
  }
}

/** A case the target refused as it should (a 4xx reply), counted with the refusals. */
class Refused extends Error {}

/**
 * Runs `one(r)` until `seconds` pass. The first call gets `pristine` = true and must accept the
 * unmutated input (a stage that refuses everything would find nothing and say so).
 */
async function runCases(name, seconds, one, log, slowMs = 10_000) {
  const r = rng(0x5eed);
  try {
    await one(r, true);
  } catch (err) {
    throw new Error(`${name}: the unmutated input is not accepted (${err?.message}): the stage would find nothing`);
  }
  const tally = { target: name, cases: 0, accepted: 0, refused: 0, crashes: [], disagreements: [], slow: 0 };
  const t0 = performance.now();
  while ((performance.now() - t0) / 1000 < seconds) {
    const c0 = performance.now();
    try {
      await one(r);
      tally.accepted++;
    } catch (err) {
      const entry = { case: tally.cases, what: String(err?.what ?? "").slice(0, 2000), error: `${err?.constructor?.name}: ${err?.message}`.slice(0, 600), stack: String(err?.stack).split("\n").slice(1, 4).join(" | ") };
      if (err instanceof Disagreement) tally.disagreements.push(entry);
      else if (classify(err) === "crash") tally.crashes.push(entry);
      else tally.refused++;
    }
    if (performance.now() - c0 > slowMs) tally.slow++;
    tally.cases++;
    // A turn of the event loop per case: N-API finalizers (a native tokenizer's tables, ~2 MB each)
    // run from it, and a stage whose cases never yield grew ~2.9 GB a minute until killed.
    await new Promise((res) => setImmediate(res));
  }
  tally.seconds = (performance.now() - t0) / 1000;
  log(`${name}: ${tally.cases} cases in ${tally.seconds.toFixed(0)} s: ${tally.accepted} accepted, ${tally.refused} refused, ${tally.crashes.length} crashes, ${tally.disagreements.length} disagreements, ${tally.slow} over ${slowMs / 1000} s`);
  return tally;
}

/** A chat state file: header JSON mutated (or its bytes), then ChatSession.load and one token. */
export async function fuzzChatState(root, work, seconds, log) {
  const { Engine, ChatSession, embeddedModelDir } = await import(join(root, "packages", "engine", "dist", "index.js"));
  const engine = await Engine.load(embeddedModelDir(), { threads: 1 });
  try {
    const dir = join(work, "js", "chat-state");
    mkdirSync(dir, { recursive: true });
    const seed = join(dir, "seed.k3st");
    const s = new ChatSession(engine);
    for await (const _ of s.send("hello", { maxTokens: 3 }));
    for await (const _ of s.send("again", { maxTokens: 3 }));
    s.save(seed);
    const bytes = readFileSync(seed);
    const hlen = bytes.readUInt32LE(8);
    const header = JSON.parse(bytes.subarray(12, 12 + hlen).toString("utf8"));
    const body = bytes.subarray(12 + hlen);
    const file = join(dir, "case.k3st");
    return await runCases("chat-state", seconds, async (r, pristine) => {
      let out;
      if (pristine) out = bytes;
      else if (r() < 0.8) {
        const h = Buffer.from(JSON.stringify(mutateJson(header, r)));
        const pre = Buffer.from(bytes.subarray(0, 12));
        pre.writeUInt32LE(h.length, 8);
        out = Buffer.concat([pre, h, body]);
      } else out = flipBytes(bytes, r);
      writeFileSync(file, out);
      const session = new ChatSession(engine);
      session.load(file);
      for await (const _ of session.send("next", { maxTokens: 1 }));
    }, log);
  } finally {
    engine.close();
  }
}

/** A packed trunk's manifest mutated, then readTrunkManifest and, when it passes, a run on it. */
export async function fuzzTrunkManifest(root, work, seconds, log) {
  const { Engine, embeddedModelDir } = await import(join(root, "packages", "engine", "dist", "index.js"));
  const { packTrunk, readTrunkManifest } = await import(join(root, "packages", "moe-stream", "dist", "index.js"));
  const model = embeddedModelDir();
  const dir = join(work, "js", "trunk");
  rmSync(dir, { recursive: true, force: true });
  await packTrunk(model, join(dir, "seed"));
  const manifest = JSON.parse(readFileSync(join(dir, "seed", "trunk.json"), "utf8"));
  // The pristine trunk's tokens: a mutated manifest that is accepted must give the same ones
  // (the bytes did not change), or it is a silent wrong answer.
  const opts = { threads: 1, budgets: { trunkBytes: 0.0012e9 } };
  const ref = await Engine.load(model, { ...opts, trunkDir: join(dir, "seed") });
  const want = (await ref.complete(ref.encodeText("hi"), { maxTokens: 3 })).ids.join(",");
  ref.close();
  const caseDir = join(dir, "case");
  mkdirSync(caseDir, { recursive: true });
  copyFileSync(join(dir, "seed", "trunk.bin"), join(caseDir, "trunk.bin"));
  return await runCases("trunk-manifest", seconds, async (r, pristine) => {
    writeFileSync(join(caseDir, "trunk.json"), pristine ? JSON.stringify(manifest) : r() < 0.85 ? JSON.stringify(mutateJson(manifest, r)) : flipBytes(readFileSync(join(dir, "seed", "trunk.json")), r));
    readTrunkManifest(caseDir);
    // Passed the reader: the engine must use it or refuse it, never crash (a small trunk budget streams).
    const engine = await Engine.load(model, { ...opts, trunkDir: caseDir });
    try {
      const got = (await engine.complete(engine.encodeText("hi"), { maxTokens: 3 })).ids.join(",");
      if (got !== want) throw Object.assign(new Error(`silent wrong answer: tokens ${got}, the pristine trunk gives ${want}`), { what: readFileSync(join(caseDir, "trunk.json"), "utf8") });
    } finally {
      engine.close();
    }
  }, log);
}

// ---------------------------------------------------------------- config.json

/** Value at a path of a JSON value, and a copy with it replaced. */
function getAt(v, p) {
  for (const k of p) v = v?.[k];
  return v;
}
function setAt(v, p, x) {
  const c = structuredClone(v);
  let o = c;
  for (const k of p.slice(0, -1)) o = o[k];
  o[p[p.length - 1]] = x;
  return c;
}

/** Numeric literals a config may hold that JSON.stringify cannot write (1e400 parses as Infinity), and edges. */
const RAW_NUMBERS = ["1e400", "-1e400", "1e-400", "-0", "0", "-1", "0.5", "1.5", "2e9", "4294967297", "9007199254740993", "1e308", "65537", "1048577", "16777217", "1e-300"];
/** Config keys the engine does not read (a hostile value there is ignored, not refused). */
const CONFIG_IGNORED = new Set(["architectures", "torch_dtype", "media_placeholder_token_id", "num_key_value_heads", "use_grouped_topk", "quant_method", "quantization_status", "config_groups", "ignore", "num_bits", "group_size", "type", "strategy", "symmetric", "dynamic", "scale_dtype", "observer", "targets", "weights", "input_activations", "output_activations"]);

/** Every number in a parsed config (raw left out) that is not finite (NaN marks an unused field). */
function infinities(v, at = "", out = []) {
  if (typeof v === "number" && (v === Infinity || v === -Infinity)) out.push(at);
  else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) if (k !== "raw") infinities(x, at ? `${at}.${k}` : k, out);
  return out;
}

/**
 * config.json: a numeric field set to a raw literal (Infinity, 2^53 + 1, a fraction, a size past
 * any Kimi model), a JSON value replaced / dropped / doubled, or flipped bytes; then readConfig and,
 * when it passes, Engine.load and one token. A refusal of a numeric field must name that field; an
 * accepted config must hold no infinite number.
 */
export async function fuzzConfig(root, work, seconds, log) {
  const { Engine, embeddedModelDir, readConfig, ConfigError } = await import(join(root, "packages", "engine", "dist", "index.js"));
  const model = embeddedModelDir();
  const dir = join(work, "js", "config");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  // Copies (the tiny model is 2 MB): the engine refuses shards that resolve outside the directory.
  for (const f of readdirSync(model)) if (f !== "config.json") copyFileSync(join(model, f), join(dir, f));
  const text = readFileSync(join(model, "config.json"), "utf8");
  const seed = JSON.parse(text);
  const numeric = paths(seed).filter((p) => typeof getAt(seed, p) === "number");
  return await runCases("config", seconds, async (r, pristine) => {
    let out;
    let field = null; // the key named by a refusal of this case
    const op = pristine ? -1 : r();
    if (pristine) out = text;
    else if (op < 0.5) {
      const p = numeric[Math.floor(r() * numeric.length)];
      const lit = RAW_NUMBERS[Math.floor(r() * RAW_NUMBERS.length)];
      out = JSON.stringify(setAt(seed, p, "__K3_FUZZ__"), null, 1).replace('"__K3_FUZZ__"', lit);
      const key = [...p].reverse().find((k) => typeof k === "string");
      if (!CONFIG_IGNORED.has(key) && !p.includes("quantization_config")) field = { key, path: p.join("."), lit };
    } else if (op < 0.9) out = JSON.stringify(mutateJson(seed, r), null, 1);
    else out = flipBytes(Buffer.from(text), r);
    writeFileSync(join(dir, "config.json"), out);
    let cfg;
    try {
      cfg = readConfig(dir);
    } catch (e) {
      if (e instanceof ConfigError && field && !e.message.includes(field.key)) throw new Disagreement(`${field.path} = ${field.lit} refused without naming ${field.key}: ${e.message}`, out);
      throw e;
    }
    const inf = infinities(cfg);
    if (inf.length) throw new Disagreement(`accepted with non-finite ${inf.join(", ")}`, out);
    if (field && !Number.isFinite(Number(field.lit))) throw new Disagreement(`${field.path} = ${field.lit} (not finite) accepted`, out);
    const engine = await Engine.load(dir, { threads: 1 });
    try {
      await engine.complete(engine.encodeText("hi"), { maxTokens: 1 });
    } finally {
      engine.close();
    }
  }, log);
}

// ---------------------------------------------------------------- tokenizer_config.json

/** Special-token texts a hostile tokenizer_config.json may name. */
const HOSTILE_CONTENT = ["", " ", "a", "hello", "hi", "\n", "\u0000", "<|open|>", "[BOS]", "[EOS]", ".*", "(?:", "\\", "\ud800", "\u{1f600}", "x".repeat(5000), "<|reserved_token_800|>", "é", "\r\n"];
const TOKENIZER_SAMPLES = ["hello world", "[BOS]hi<|end_of_msg|>", "<|open|>x<|close|> y", "<|reserved_token_800|> a", "a\n\nb  c\u00e9\u4e2d\u6587 \u{1f600}", "hihello hi", ".*\\(?:x"];

/**
 * tokenizer_config.json: JSON values replaced / dropped / doubled, special-token texts set to
 * hostile strings, ids moved, or flipped bytes; then loadKimiTokenizer with the native and the
 * TypeScript backends side by side. Both must accept or refuse alike, and when they accept, encode
 * the samples (specials allowed) to the same ids and decode them back to the same text.
 */
export async function fuzzTokenizerConfig(root, work, seconds, log) {
  const { loadKimiTokenizer } = await import(join(root, "packages", "tiktoken-bpe", "dist", "index.js"));
  // The random tiny K3's tokenizer files: its mutated ids (767, 768, 1023, ...) sit on its 768-rank edges.
  const model = join(root, "fixtures", "models", "tiny-k3");
  const dir = join(work, "js", "tokenizer-config");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(model, "tiktoken.model"), join(dir, "tiktoken.model"));
  const text = readFileSync(join(model, "tokenizer_config.json"), "utf8");
  const seed = JSON.parse(text);
  const ids = Object.keys(seed.added_tokens_decoder);
  const load = (backend) => {
    try {
      return { tok: loadKimiTokenizer(dir, { backend }) };
    } catch (e) {
      if (classify(e) === "crash") throw e;
      return { err: e };
    }
  };
  return await runCases("tokenizer-config", seconds, async (r, pristine) => {
    let out;
    const op = pristine ? -1 : r();
    if (pristine) out = text;
    else if (op < 0.35) {
      const v = structuredClone(seed);
      const id = ids[Math.floor(r() * ids.length)];
      if (r() < 0.7) v.added_tokens_decoder[id].content = HOSTILE_CONTENT[Math.floor(r() * HOSTILE_CONTENT.length)];
      else {
        const to = String([-1, 0, 767, 768, 1023, 1024, 1279, 66303, 66304, 1e9, 2 ** 53][Math.floor(r() * 11)]);
        v.added_tokens_decoder[to] = v.added_tokens_decoder[id];
        if (r() < 0.5) delete v.added_tokens_decoder[id];
      }
      if (r() < 0.2) v.num_reserved_special_tokens = [1, 255, 256, 257, 65536, 65537, 0, -1, 1.5, "256", null][Math.floor(r() * 11)];
      out = JSON.stringify(v);
    } else if (op < 0.85) out = JSON.stringify(mutateJson(seed, r));
    else out = flipBytes(Buffer.from(text), r);
    writeFileSync(join(dir, "tokenizer_config.json"), out);
    const a = load("native");
    const b = load("typescript");
    try {
      compareLoads(a, b, out);
    } finally {
      a.tok?.dispose(); // the native encoder now, not at a later finalizer
      b.tok?.dispose();
    }
  }, log);
}

/** Both backends refuse the same config with the same message, or encode and decode alike. */
function compareLoads(a, b, out) {
  if (!!a.err !== !!b.err) throw new Disagreement(`native ${a.err ? `refuses (${a.err.message})` : "accepts"}, typescript ${b.err ? `refuses (${b.err.message})` : "accepts"}`, out);
  if (a.err) {
    if (a.err.message !== b.err.message) throw new Disagreement(`refusals differ: native "${a.err.message}", typescript "${b.err.message}"`, out);
    throw a.err;
  }
  if (a.tok.nVocab !== b.tok.nVocab) throw new Disagreement(`vocabularies differ: native ${a.tok.nVocab}, typescript ${b.tok.nVocab}`, out);
  for (const s of TOKENIZER_SAMPLES) {
    const x = [...a.tok.encode(s, { allowedSpecial: "all" })];
    const y = [...b.tok.encode(s, { allowedSpecial: "all" })];
    if (x.join(",") !== y.join(",")) throw new Disagreement(`${JSON.stringify(s)}: native [${x}] typescript [${y}]`, out);
    const back = [a.tok.decode(Uint32Array.from(x)), b.tok.decode(Uint32Array.from(y))];
    if (back[0] !== s || back[1] !== s) throw new Disagreement(`${JSON.stringify(s)} decodes back to ${JSON.stringify(back[0])} (native), ${JSON.stringify(back[1])} (typescript)`, out);
  }
}

// ---------------------------------------------------------------- HTTP requests to k3 serve

/** Starts `k3 serve` on the tiny model on a free loopback port; resolves with the child and its URL. */
async function startServe(root, log) {
  const { spawn } = await import("node:child_process");
  const { embeddedModelDir } = await import(join(root, "packages", "engine", "dist", "index.js"));
  const cli = join(root, "packages", "engine", "dist", "cli.js");
  const child = spawn(process.execPath, [cli, "serve", "--model", embeddedModelDir(), "--host", "127.0.0.1", "--port", "0", "--queue", "2"], { env: { ...process.env, K3_THREADS: "1" }, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  const url = await new Promise((res, rej) => {
    const t = setTimeout(() => rej(new Error(`k3 serve did not start in 60 s: ${err.slice(-500)}`)), 60_000);
    child.stderr.on("data", (d) => {
      err = (err + d).slice(-20_000);
      const m = /serving .* at (http:\/\/[^\s/]+)\/v1/.exec(err);
      if (m) {
        clearTimeout(t);
        res(m[1]);
      }
    });
    child.on("exit", (code, sig) => {
      clearTimeout(t);
      rej(new Error(`k3 serve exited (${code ?? sig}) before listening: ${err.slice(-500)}`));
    });
  });
  log(`http: k3 serve (pid ${child.pid}) at ${url}`);
  return { child, url, stderr: () => err };
}

/**
 * Sends raw bytes on a fresh connection and collects the reply until the server closes it (requests
 * say `connection: close`; a half-close would make Node's server drop the request unanswered).
 */
async function exchange(port, bytes, timeoutMs) {
  const { connect } = await import("node:net");
  return await new Promise((res) => {
    const chunks = [];
    const s = connect({ host: "127.0.0.1", port });
    const t = setTimeout(() => {
      s.destroy();
      res({ bytes: Buffer.concat(chunks), timedOut: true });
    }, timeoutMs);
    s.on("connect", () => {
      s.write(bytes);
    });
    s.on("data", (d) => chunks.push(d));
    s.on("error", () => undefined);
    s.on("close", () => {
      clearTimeout(t);
      res({ bytes: Buffer.concat(chunks), timedOut: false });
    });
  });
}

/** Splits a byte stream into HTTP/1.x responses; a string saying what is wrong when it is not one. */
function parseResponses(buf, isHead = false) {
  const out = [];
  let at = 0;
  while (at < buf.length) {
    const end = buf.indexOf("\r\n\r\n", at);
    if (end < 0) return `response ${out.length + 1}: no end of headers in ${JSON.stringify(buf.subarray(at, at + 200).toString("latin1"))}`;
    const head = buf.subarray(at, end).toString("latin1").split("\r\n");
    const m = /^HTTP\/1\.[01] (\d{3}) [^\r\n]*$/.exec(head[0]);
    if (!m) return `response ${out.length + 1}: bad status line ${JSON.stringify(head[0].slice(0, 200))}`;
    const headers = {};
    for (const h of head.slice(1)) {
      const i = h.indexOf(":");
      if (i <= 0) return `response ${out.length + 1}: bad header line ${JSON.stringify(h.slice(0, 200))}`;
      headers[h.slice(0, i).trim().toLowerCase()] = h.slice(i + 1).trim();
    }
    at = end + 4;
    let body;
    const interim = Number(m[1]) >= 100 && Number(m[1]) < 200; // 100 Continue: the real reply follows
    if (interim || (isHead && out.every((x) => x.status < 200))) body = Buffer.alloc(0); // a reply to HEAD has none, whatever content-length says
    else if (headers["content-length"] !== undefined) {
      const n = Number(headers["content-length"]);
      if (!Number.isSafeInteger(n) || n < 0 || at + n > buf.length) return `response ${out.length + 1}: content-length ${headers["content-length"]} with ${buf.length - at} bytes left`;
      body = buf.subarray(at, at + n);
      at += n;
    } else if (/chunked/i.test(headers["transfer-encoding"] ?? "")) {
      const parts = [];
      for (;;) {
        const eol = buf.indexOf("\r\n", at);
        if (eol < 0) return `response ${out.length + 1}: chunked body cut off`;
        const size = parseInt(buf.subarray(at, eol).toString("latin1"), 16);
        if (!Number.isInteger(size) || size < 0) return `response ${out.length + 1}: bad chunk size`;
        at = eol + 2;
        if (size === 0) {
          const fin = buf.indexOf("\r\n", at);
          if (fin < 0) return `response ${out.length + 1}: chunked body not terminated`;
          at = fin + 2;
          break;
        }
        if (at + size + 2 > buf.length) return `response ${out.length + 1}: chunk cut off`;
        parts.push(buf.subarray(at, at + size));
        at += size + 2;
      }
      body = Buffer.concat(parts);
    } else if (Number(m[1]) === 204 || Number(m[1]) === 304) body = Buffer.alloc(0);
    else {
      body = buf.subarray(at);
      at = buf.length;
    }
    out.push({ status: Number(m[1]), headers, body });
  }
  return out;
}

/** What is wrong with one reply, or null: a 4xx/5xx carries an OpenAI-shaped error; a 200 completion its choices. */
function checkReply(rsp, path, isHead) {
  const json = /application\/json/.test(rsp.headers["content-type"] ?? "");
  if (isHead) return null; // no body to check
  if (rsp.status >= 400) {
    if (!json) return `${rsp.status} without a JSON error body (content-type ${rsp.headers["content-type"] ?? "none"})`;
    let e;
    try {
      e = JSON.parse(rsp.body.toString("utf8")).error;
    } catch {
      return `${rsp.status} whose body is not JSON`;
    }
    if (!e || typeof e.message !== "string" || typeof e.type !== "string" || !("param" in e) || !("code" in e)) return `${rsp.status} error body is not OpenAI-shaped: ${rsp.body.toString("utf8").slice(0, 200)}`;
    return null;
  }
  if (rsp.status === 200 && /completions$/.test(path)) {
    if (/text\/event-stream/.test(rsp.headers["content-type"] ?? "")) {
      const text = rsp.body.toString("utf8");
      if (!/data: \[DONE\]\n\n$/.test(text) && !/data: \{"error"/.test(text)) return `stream ends without [DONE] or an error event: ${JSON.stringify(text.slice(-200))}`;
      return null;
    }
    if (!json) return `200 completion without JSON`;
    try {
      if (!Array.isArray(JSON.parse(rsp.body.toString("utf8")).choices)) return "200 completion without choices";
    } catch {
      return "200 completion whose body is not JSON";
    }
  }
  return null;
}

const METHODS = ["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "post", "G\u0000T", "X".repeat(200), "CONNECT", "TRACE", ""];
const PATH_TAILS = ["%", "%zz", "%ff%fe", "/../../etc/passwd", "?a=%", "#x", "\u00e9", " ", "\t", "//", "/" + "a".repeat(9000), "*", "?" + "b".repeat(70_000)];
const VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/1.2", "HTTP/2.0", "HTTP/9.9", "HTTP/1", "", "http/1.1", "HTTP/1.1 x"];
const HEADER_EDITS = [
  ["content-type", "text/plain"], ["content-type", "application/x-www-form-urlencoded"], ["content-type", "application/json; charset=utf-16"], ["content-type", ""], ["content-type", "application/json\u0000"],
  ["host", "evil.example"], ["host", "127.0.0.1:1"], ["host", ""], ["host", "[::1]"], ["host", "localhost:80"],
  ["origin", "http://evil.example"], ["origin", "null"], ["origin", "http://127.0.0.1"],
  ["authorization", "Bearer x"], ["authorization", "Basic " + "A".repeat(5000)],
  ["content-length", "-1"], ["content-length", "abc"], ["content-length", "99999999999999999999"], ["content-length", "0"], ["content-length", "1"], ["content-length", "1048577"],
  ["transfer-encoding", "chunked"], ["transfer-encoding", "gzip"], ["transfer-encoding", "chunked, identity"],
  ["expect", "100-continue"], ["connection", "upgrade"], ["upgrade", "websocket"],
  ["x y", "1"], ["x-bad", "a\u0001b"], ["x-long", "v".repeat(20_000)], ["accept", "*/*"],
];

/** The requests the fuzzer starts from (each mutated before it is sent). */
function httpSeeds() {
  const chat = { model: "k3", messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }], max_tokens: 2, temperature: 0.7, top_p: 0.9, seed: 1 };
  return [
    { method: "POST", path: "/v1/chat/completions", body: chat },
    { method: "POST", path: "/v1/chat/completions", body: { ...chat, stream: true, logprobs: true, top_logprobs: 2 } },
    { method: "POST", path: "/v1/chat/completions", body: { ...chat, n: 2, stop: ["x"], response_format: { type: "json_object" } } },
    { method: "POST", path: "/v1/completions", body: { model: "k3", prompt: "hi", max_tokens: 2, logit_bias: { 5: 1 } } },
    { method: "POST", path: "/v1/completions", body: { model: "k3", prompt: ["a", "b"], max_tokens: 1, stream: true } },
    { method: "GET", path: "/v1/models" },
    { method: "GET", path: "/v1/models/k3" },
    { method: "GET", path: "/health" },
    { method: "GET", path: "/metrics" },
    { method: "GET", path: "/" },
    { method: "OPTIONS", path: "/v1/chat/completions" },
  ];
}

/** One request as bytes: a seed with 1-3 mutations of its line, headers and body. */
function httpCase(r, port, seeds, pristine = false) {
  const s = seeds[Math.floor(r() * seeds.length)];
  let method = s.method;
  let path = s.path;
  let version = "HTTP/1.1";
  let body = s.body ? Buffer.from(JSON.stringify(s.body)) : Buffer.alloc(0);
  const headers = [["host", `127.0.0.1:${port}`], ["connection", "close"], ...(s.body ? [["content-type", "application/json"]] : [])];
  let length = true; // a correct content-length added at the end
  let chunked = false;
  const n = pristine ? 0 : 1 + Math.floor(r() * 3);
  for (let i = 0; i < n; i++) {
    const op = r();
    if (op < 0.35 && s.body) body = Buffer.from(JSON.stringify(mutateJson(s.body, r)));
    else if (op < 0.45 && body.length) body = r() < 0.5 ? flipBytes(body, r) : body.subarray(0, Math.floor(r() * body.length));
    else if (op < 0.52) method = METHODS[Math.floor(r() * METHODS.length)];
    else if (op < 0.6) path += PATH_TAILS[Math.floor(r() * PATH_TAILS.length)];
    else if (op < 0.65) version = VERSIONS[Math.floor(r() * VERSIONS.length)];
    else if (op < 0.72 && headers.length) headers.splice(Math.floor(r() * headers.length), 1);
    else if (op < 0.95) {
      const [k, v] = HEADER_EDITS[Math.floor(r() * HEADER_EDITS.length)];
      if (k === "content-length") length = false;
      if (k === "transfer-encoding" && v === "chunked") chunked = true;
      const at = headers.findIndex((h) => h[0] === k);
      if (at >= 0 && r() < 0.7) headers[at] = [k, v];
      else headers.push([k, v]);
    } else for (let j = 0; j < 1 + Math.floor(r() * 3000); j++) headers.push([`x-h${j}`, "1"]);
  }
  if (chunked) body = body.length ? Buffer.concat([Buffer.from(body.length.toString(16) + "\r\n"), body, Buffer.from(r() < 0.8 ? "\r\n0\r\n\r\n" : "\r\nzz\r\n")]) : Buffer.from("0\r\n\r\n");
  else if (length && (body.length || method === "POST")) headers.push(["content-length", String(body.length)]);
  const head = `${method} ${path} ${version}\r\n${headers.map(([k, v]) => `${k}: ${v}\r\n`).join("")}\r\n`;
  return { bytes: Buffer.concat([Buffer.from(head, "utf8"), body]), path, head: method === "HEAD", what: head.slice(0, 1500) + body.toString("utf8").slice(0, 500) };
}

/**
 * HTTP requests to `k3 serve` (the tiny model, a child process on a loopback port): request lines,
 * headers and bodies mutated, each on a fresh connection. Every reply must be well-formed HTTP/1.x;
 * a 4xx/5xx carries an OpenAI-shaped JSON error; no 5xx; every case answered within 60 s; the
 * server never dies (a death is a crash, and it is restarted) and still answers /health.
 */
export async function fuzzHttp(root, work, seconds, log) {
  const seeds = httpSeeds();
  let serve = await startServe(root, log);
  const portOf = () => Number(new URL(serve.url).port);
  try {
    return await runCases("http", seconds, async (r, pristine) => {
      const c = httpCase(r, portOf(), pristine ? seeds.slice(0, 1) : seeds, pristine);
      const got = await exchange(portOf(), c.bytes, 60_000);
      if (serve.child.exitCode !== null || serve.child.signalCode !== null) {
        const why = `k3 serve died (${serve.child.exitCode ?? serve.child.signalCode}): ${serve.stderr().slice(-800)}`;
        serve = await startServe(root, log);
        throw Object.assign(new Error(why), { what: c.what });
      }
      if (got.timedOut) throw new Disagreement(`no complete reply in 60 s (${got.bytes.length} bytes so far)`, c.what);
      if (got.bytes.length === 0) throw new Disagreement("connection closed without a reply", c.what);
      const rsps = parseResponses(got.bytes, c.head);
      if (typeof rsps === "string") throw new Disagreement(rsps, c.what);
      for (const rsp of rsps) {
        if (rsp.status >= 500) throw Object.assign(new Error(`${rsp.status}: ${rsp.body.toString("utf8").slice(0, 300)}`), { what: c.what });
        const bad = checkReply(rsp, c.path, c.head && rsp === rsps.find((x) => x.status >= 200));
        if (bad) throw new Disagreement(bad, c.what);
      }
      const health = parseResponses((await exchange(portOf(), Buffer.from(`GET /health HTTP/1.1\r\nhost: 127.0.0.1:${portOf()}\r\nconnection: close\r\n\r\n`), 60_000)).bytes);
      if (typeof health === "string" || health[0]?.status !== 200) throw new Disagreement(`/health after the case: ${typeof health === "string" ? health : health[0]?.status}`, c.what);
      if (rsps.some((x) => x.status >= 400)) throw new Refused(`${rsps.find((x) => x.status >= 400).status}`);
    }, log, 60_000);
  } finally {
    serve.child.kill("SIGTERM");
  }
}
