// The TypeScript readers of untrusted files, fuzzed in process by `pnpm fuzz` (scripts/fuzz.mjs):
// valid files written by the project, mutated structurally (a JSON value replaced by a hostile one,
// a key dropped, an array element doubled) or byte-wise, then read through the public API. Each case
// must either load (and then run one token) or be refused with one of the project's typed errors
// (K3Error, MoeStreamError, ...); a plain Error / TypeError / RangeError or anything thrown from
// inside is a crash. Needs `pnpm build` (imports the packages' dist).
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
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

async function runCases(name, seconds, one, log) {
  const r = rng(0x5eed);
  const tally = { target: name, cases: 0, accepted: 0, refused: 0, crashes: [], slow: 0 };
  const t0 = performance.now();
  while ((performance.now() - t0) / 1000 < seconds) {
    const c0 = performance.now();
    let what = "";
    try {
      what = await one(r);
      tally.accepted++;
    } catch (err) {
      if (classify(err) === "crash") tally.crashes.push({ case: tally.cases, what: err?.what ?? "", error: `${err?.constructor?.name}: ${err?.message}`.slice(0, 300), stack: String(err?.stack).split("\n").slice(1, 4).join(" | ") });
      else tally.refused++;
    }
    if (performance.now() - c0 > 10_000) tally.slow++;
    tally.cases++;
  }
  tally.seconds = (performance.now() - t0) / 1000;
  log(`${name}: ${tally.cases} cases in ${tally.seconds.toFixed(0)} s: ${tally.accepted} accepted, ${tally.refused} refused, ${tally.crashes.length} crashes, ${tally.slow} over 10 s`);
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
    return await runCases("chat-state", seconds, async (r) => {
      let out;
      if (r() < 0.8) {
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
  return await runCases("trunk-manifest", seconds, async (r) => {
    writeFileSync(join(caseDir, "trunk.json"), r() < 0.85 ? JSON.stringify(mutateJson(manifest, r)) : flipBytes(readFileSync(join(dir, "seed", "trunk.json")), r));
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
