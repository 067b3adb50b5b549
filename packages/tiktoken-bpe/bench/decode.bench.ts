// Side-by-side decode (single thread, same ids, one process): ours (native core; TypeScript
// fallback for whole-corpus rows) vs tiktoken@1.0.22 (WASM), for cl100k, o200k and Kimi on every
// corpus, as whole-corpus calls and as short calls of 1, 4 and 16 ids (a streaming server).
//   bytes:  decodeBytes(ids)  vs  tiktoken.decode(ids)                       (Uint8Array)
//   string: decode(ids)       vs  TextDecoder(ignoreBOM).decode(tiktoken.decode(ids))   (string)
// Outputs are checked identical before timing. Contenders run interleaved (one pass each per
// round), best round each. Ceiling: a plain copy (Uint8Array.set) of the same output bytes, timed
// in the same rounds: no decoder can write its bytes faster than that; for strings, Node's own
// UTF-8 → string conversion of the same bytes (TextDecoder / Buffer#toString) in the same rounds.
// Run: flock -x /tmp/k3-bench.lock pnpm bench:decode   (K3_BENCH_ROUNDS, K3_BENCH_QUICK=1)
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { get_encoding } from "tiktoken";
import { Tiktoken } from "tiktoken/lite";
// @ts-expect-error plain .mjs helper shared by every package
import { writeReport } from "../../../scripts/bench-report.mjs";
import { getEncoding, KIMI_PATTERN, loadKimiTokenizer, nativeLoadError, type Tokenizer } from "../src/index.js";
import { dataDir, loadCorpora } from "./corpus.js";

if (nativeLoadError()) throw new Error(`bench needs the native addon: ${nativeLoadError()?.message}`);
const quick = process.env.K3_BENCH_QUICK === "1";
const rounds = Number(process.env.K3_BENCH_ROUNDS ?? (quick ? 2 : 7));
/** Short calls decode the first SHORT_IDS ids of each corpus, call by call. */
const SHORT_IDS = quick ? 8192 : 65536;
const SIZES = [1, 4, 16];

const kimiDir = join(dataDir, "kimi-tokenizer");
const kimi = loadKimiTokenizer(kimiDir, { specials: "k2" });
const wasmKimi = new Tiktoken(readFileSync(join(kimiDir, "tiktoken.model"), "utf8"), Object.fromEntries(kimi.specialTokens), KIMI_PATTERN);
interface Wasm {
  decode(ids: Uint32Array): Uint8Array;
}
const encodings: Array<{ enc: string; ours: Tokenizer; oursTs: Tokenizer; wasm: Wasm }> = [
  { enc: "cl100k", ours: getEncoding("cl100k_base"), oursTs: getEncoding("cl100k_base", { backend: "typescript" }), wasm: get_encoding("cl100k_base") },
  { enc: "o200k", ours: getEncoding("o200k_base"), oursTs: getEncoding("o200k_base", { backend: "typescript" }), wasm: get_encoding("o200k_base") },
  { enc: "kimi", ours: kimi, oursTs: loadKimiTokenizer(kimiDir, { specials: "k2", backend: "typescript" }), wasm: wasmKimi },
];
const td = new TextDecoder("utf-8", { ignoreBOM: true });
const corpora = loadCorpora();

const sameBytes = (a: Uint8Array, b: Uint8Array) => a.length === b.length && Buffer.compare(a, b) === 0;

/** Interleaved rounds; returns the best ms of each contender. */
function race(contenders: Array<[string, () => unknown]>): Map<string, number> {
  const best = new Map<string, number>();
  for (const [, fn] of contenders) fn(); // warm-up
  for (let r = 0; r < rounds; r++)
    for (const [key, fn] of contenders) {
      const t0 = performance.now();
      fn();
      const ms = performance.now() - t0;
      if (ms < (best.get(key) ?? Infinity)) best.set(key, ms);
    }
  return best;
}

const rows: Record<string, string | number>[] = [];
for (const { enc, ours, oursTs, wasm } of encodings) {
  for (const { name, text } of corpora) {
    const ids = ours.encode(text, { disallowedSpecial: [] });
    const bytes = wasm.decode(ids);
    const str = td.decode(bytes);
    // Same output from every contender before any timing.
    if (!sameBytes(ours.decodeBytes(ids), bytes) || !sameBytes(oursTs.decodeBytes(ids), bytes))
      throw new Error(`${enc}/${name}: decodeBytes differs from tiktoken`);
    if (ours.decode(ids) !== str || oursTs.decode(ids) !== str || ours.decode(Array.from(ids)) !== str)
      throw new Error(`${enc}/${name}: decode differs from tiktoken + TextDecoder`);
    const MB = bytes.length / 1e6;

    // Whole corpus, one call.
    const copyDst = new Uint8Array(bytes.length);
    const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
    const whole = race([
      ["copy", () => copyDst.set(bytes)],
      ["TextDecoder only", () => td.decode(bytes)],
      ["Buffer utf8 only", () => buf.toString("utf8")],
      ["ours bytes", () => ours.decodeBytes(ids)],
      ["tiktoken bytes", () => wasm.decode(ids)],
      ["ours TS bytes", () => oursTs.decodeBytes(ids)],
      ["ours string", () => ours.decode(ids)],
      ["tiktoken string", () => td.decode(wasm.decode(ids))],
      ["ours TS string", () => oursTs.decode(ids)],
    ]);
    const mbps = (k: string) => MB / (whole.get(k)! / 1000);
    const row = (what: string, extra: Record<string, string | number>) => {
      const r = { encoding: enc, corpus: name, call: what, ...extra };
      rows.push(r);
      console.log(JSON.stringify(r));
    };
    row(`whole (${ids.length} ids, ${MB.toFixed(2)} MB)`, {
      unit: "MB/s",
      "ours bytes": mbps("ours bytes"),
      "tiktoken bytes": mbps("tiktoken bytes"),
      "× bytes": mbps("ours bytes") / mbps("tiktoken bytes"),
      "ours string": mbps("ours string"),
      "tiktoken string": mbps("tiktoken string"),
      "× string": mbps("ours string") / mbps("tiktoken string"),
      "ours string, number[]": "–",
      "ours TS bytes": mbps("ours TS bytes"),
      "ours TS string": mbps("ours TS string"),
      "copy ceiling": mbps("copy"),
      "string ceiling": Math.max(mbps("TextDecoder only"), mbps("Buffer utf8 only")),
    });

    // Short calls: the same chunks for everyone (Uint32Array views; ours also from number[]).
    const prefix = ids.subarray(0, Math.min(ids.length, SHORT_IDS));
    for (const k of SIZES) {
      const chunks: Uint32Array[] = [];
      for (let i = 0; i + k <= prefix.length; i += k) chunks.push(prefix.subarray(i, i + k));
      const arrays = chunks.map((c) => Array.from(c));
      const chunkBytes = chunks.map((c) => wasm.decode(c));
      for (let i = 0; i < chunks.length; i++) {
        const s = td.decode(chunkBytes[i]);
        if (!sameBytes(ours.decodeBytes(chunks[i]), chunkBytes[i]) || ours.decode(chunks[i]) !== s || ours.decode(arrays[i]) !== s)
          throw new Error(`${enc}/${name}: short call ${i} (size ${k}) differs from tiktoken`);
      }
      const copyOut = new Uint8Array(4096);
      const chunkBufs = chunkBytes.map((b) => Buffer.from(b.buffer, b.byteOffset, b.length));
      let sink = 0;
      const short = race([
        ["copy", () => { for (const b of chunkBytes) copyOut.set(b); }],
        ["TextDecoder only", () => { for (const b of chunkBytes) sink += td.decode(b).length; }],
        ["Buffer utf8 only", () => { for (const b of chunkBufs) sink += b.toString("utf8").length; }],
        ["ours bytes", () => { for (const c of chunks) sink += ours.decodeBytes(c).length; }],
        ["tiktoken bytes", () => { for (const c of chunks) sink += wasm.decode(c).length; }],
        ["ours string", () => { for (const c of chunks) sink += ours.decode(c).length; }],
        ["ours string number[]", () => { for (const a of arrays) sink += ours.decode(a).length; }],
        ["tiktoken string", () => { for (const c of chunks) sink += td.decode(wasm.decode(c)).length; }],
      ]);
      if (sink < 0) console.log(sink);
      const ns = (key: string) => (short.get(key)! * 1e6) / chunks.length;
      row(`${k} id${k > 1 ? "s" : ""} per call`, {
        unit: "ns/call",
        "ours bytes": ns("ours bytes"),
        "tiktoken bytes": ns("tiktoken bytes"),
        "× bytes": ns("tiktoken bytes") / ns("ours bytes"),
        "ours string": ns("ours string"),
        "tiktoken string": ns("tiktoken string"),
        "× string": ns("tiktoken string") / ns("ours string"),
        "ours string, number[]": ns("ours string number[]"),
        "ours TS bytes": "–",
        "ours TS string": "–",
        "copy ceiling": ns("copy"),
        "string ceiling": Math.min(ns("TextDecoder only"), ns("Buffer utf8 only")),
      });
    }
    // Streaming: one id per push through a decoder that holds back unfinished characters.
    {
      const one = new Uint32Array(1);
      const tdStream = new TextDecoder("utf-8", { ignoreBOM: true });
      let a = "";
      const d = ours.streamDecoder();
      for (const id of prefix) a += d.push(id);
      a += d.flush();
      let b = "";
      for (const id of prefix) b += ((one[0] = id), tdStream.decode(wasm.decode(one), { stream: true }));
      b += tdStream.decode();
      if (a !== b) throw new Error(`${enc}/${name}: streamDecoder differs from tiktoken + streaming TextDecoder`);
      let sink = 0;
      const stream = race([
        ["ours", () => { const d = ours.streamDecoder(); for (const id of prefix) sink += d.push(id).length; sink += d.flush().length; }],
        ["tiktoken", () => { for (const id of prefix) sink += ((one[0] = id), tdStream.decode(wasm.decode(one), { stream: true })).length; sink += tdStream.decode().length; }],
        ["TextDecoder only", () => { for (let i = 0; i < prefix.length; i++) sink += tdStream.decode(bytes.subarray(i, i + 1), { stream: true }).length; sink += tdStream.decode().length; }],
      ]);
      if (sink < 0) console.log(sink);
      const ns = (key: string) => (stream.get(key)! * 1e6) / prefix.length;
      row("stream: 1 id per push", {
        unit: "ns/push",
        "ours bytes": "–",
        "tiktoken bytes": "–",
        "× bytes": "–",
        "ours string": ns("ours"),
        "tiktoken string": ns("tiktoken"),
        "× string": ns("tiktoken") / ns("ours"),
        "ours string, number[]": "–",
        "ours TS bytes": "–",
        "ours TS string": "–",
        "copy ceiling": "–",
        "string ceiling": ns("TextDecoder only"),
      });
    }
  }
}

const load = readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
writeReport("tiktoken-bpe-decode", {
  title: "@k3/tiktoken-bpe: decode vs tiktoken@1.0.22 (WASM), single thread, best round",
  command: "flock -x /tmp/k3-bench.lock pnpm --filter @k3/tiktoken-bpe bench:decode",
  rows,
  notes: [
    `Whole rows: MB/s of decoded UTF-8 (higher is better). Short rows: ns per call over the first ${SHORT_IDS} ids of the corpus cut into calls of 1, 4 or 16 ids (lower is better). × = ours / tiktoken speed (> 1: ours faster). ${rounds} interleaved rounds, best each; outputs checked identical first.`,
    "tiktoken string = `new TextDecoder('utf-8', { ignoreBOM: true })` (one instance, reused) over tiktoken's bytes. Short-call ids are Uint32Array views (tiktoken takes nothing else); the `ours string, number[]` column is ours decoding the same calls from plain arrays. copy ceiling = Uint8Array.set of the same output bytes; string ceiling = the faster of TextDecoder.decode and Buffer#toString('utf8') on the same bytes, i.e. making the string alone, with no ids to look up (whole: MB/s; short: ns per call). Stream rows: \`streamDecoder().push(id)\` per id over the same prefix vs a streaming TextDecoder over tiktoken.decode of a reused 1-id Uint32Array; their string ceiling is a streaming TextDecoder fed one byte of the output per call.",
    `Load average at the end: ${load} (2 vCPUs, shared).`,
  ],
});
