/**
 * The two measurements behind choices in presets.ts and floor.ts, rerunnable:
 *  1. the memory-read ceiling against its buffer size (floor.ts memCeilingBytes: a buffer the
 *     last-level cache can partly hold reads faster than the DRAM the weights stream from);
 *  2. the streamed lm_head read and multiplied as Model.headLogits does it (chunk c+1.. in flight
 *     while chunk c's GEMV runs), for the ring shape in use (presets.ts HEAD_READ_SLOTS x
 *     headChunkRowsFor) against the former one (2 slots of 4096 rows), interleaved round by round
 *     with the C-driven ceiling of the same reads;
 *  3. the same head in 4 MiB reads with nothing else to do, RangeReader (JS submits each read when
 *     one of its `depth` slots frees) against the read pool driven from C (measureReadEngine) at the
 *     same depth, interleaved: whether the JS-driven path itself costs bandwidth.
 *
 * Run (packages/engine, under the bench lock; K3_RW_MODEL = a `k3 synth` real-width checkpoint):
 *   K3_RW_MODEL=/work/rwdata/k3-L2-E896 /work/bin/k3-excl node --import tsx bench/stream-shapes.bench.ts
 */
import { gemvBf16, memoryReadCeiling } from "@k3/dense";
import { measureReadEngine, openCheckpointIndex, RangeReader } from "@k3/moe-stream";
import { ceilingPlans, lastLevelCacheBytes } from "../src/floor.js";
import { readConfig } from "../src/config.js";
import { HEAD_READ_SLOTS, headChunkRowsFor } from "../src/presets.js";
import { HEAD_PIECE_BYTES, HEAD_READERS } from "../src/model.js";

const MiB = 2 ** 20;
const dir = process.env.K3_RW_MODEL;
const rounds = Number(process.env.K3_ROUNDS ?? 4);

console.log(`last-level cache: ${(lastLevelCacheBytes() / MiB).toFixed(0)} MiB`);
console.log("\n| memory-ceiling buffer | GB/s (2 threads, best pass) |\n|---:|---:|");
for (let r = 0; r < 2; r++)
  for (const mib of [512, 2048, 4096]) {
    const g = memoryReadCeiling({ bytes: mib * MiB, threads: 2, reps: mib === 512 ? 8 : 3 }).gbPerSec;
    console.log(`| ${mib} MiB | ${g.toFixed(1)} |`);
  }

if (!dir) {
  console.log("\nK3_RW_MODEL is not set: no lm_head rows (point it at a `k3 synth` checkpoint).");
  process.exit(0);
}
const cfg = readConfig(dir);
const head = openCheckpointIndex(dir).tensors.get(cfg.tensorPrefix + "lm_head.weight")!;
const D = cfg.hiddenSize;
const V = cfg.vocabSize;
const x = new Float32Array(D).map((_, i) => Math.sin(i));
const y = new Float32Array(V);
const shapes = [
  { name: `in use: ${headChunkRowsFor(V, D * 2)} rows x ${HEAD_READ_SLOTS} slots`, rows: headChunkRowsFor(V, D * 2), slots: HEAD_READ_SLOTS },
  { name: "former: 4096 rows x 2 slots", rows: 4096, slots: 2 },
];
const readers = shapes.map((s) => RangeReader.open({ files: [head.file], maxRangeBytes: s.rows * D * 2, slots: s.slots, direct: true, readers: HEAD_READERS, pieceBytes: HEAD_PIECE_BYTES }));
const ceilPlan = ceilingPlans({ dir, cfg, experts: null, trunk: null, embedHead: { headChunkRows: shapes[0].rows, pieceBytes: HEAD_PIECE_BYTES, readers: HEAD_READERS, direct: true } }).find((p) => p.source === "lm_head")!;
const ceiling = () => measureReadEngine(ceilPlan.reads, { engine: "io_uring", queueDepth: HEAD_READERS, direct: true }).gbPerSec;

/** One lm_head pass as Model.headLogits streams it; returns GB/s of head bytes. */
async function stream(rr: RangeReader, R: number, SL: number): Promise<number> {
  const chunks = Math.ceil(V / R);
  const t0 = performance.now();
  const pending: Promise<Uint8Array>[] = [];
  const read = (c: number) => rr.read(head.file, head.offset + c * R * D * 2, Math.min(R, V - c * R) * D * 2, c % SL);
  for (let c = 0; c < Math.min(SL - 1, chunks); c++) pending.push(read(c));
  for (let c = 0; c < chunks; c++) {
    const bytes = await pending[c];
    const rows = Math.min(R, V - c * R);
    gemvBf16(bytes.subarray(0, rows * D * 2), x, y.subarray(c * R, c * R + rows), { rows, cols: D });
    if (c + SL - 1 < chunks) pending.push(read(c + SL - 1));
  }
  return head.byteLength / ((performance.now() - t0) / 1000) / 1e9;
}

console.log(`\nlm_head of ${dir} (${(head.byteLength / 1e9).toFixed(2)} GB), read + GEMV per chunk, GB/s:\n`);
console.log(`| round | C-driven ceiling before | ${shapes.map((s) => s.name).join(" | ")} | C-driven ceiling after |`);
console.log(`|---:|---:|${shapes.map(() => "---:|").join("")}---:|`);
for (let r = 0; r < rounds; r++) {
  const row = [String(r + 1), ceiling().toFixed(2)];
  for (let i = 0; i < shapes.length; i++) row.push((await stream(readers[i], shapes[i].rows, shapes[i].slots)).toFixed(2));
  row.push(ceiling().toFixed(2));
  console.log(`| ${row.join(" | ")} |`);
}
for (const rr of readers) rr.close();

/** The head in `n` 4 MiB reads through a RangeReader kept `depth` deep (each slot re-reads as soon as it lands); GB/s. */
async function rangeReaderOnly(depth: number, n: number): Promise<number> {
  const rr = RangeReader.open({ files: [head.file], maxRangeBytes: PIECE, slots: depth, direct: true, readers: depth, pieceBytes: PIECE });
  const t0 = performance.now();
  let next = 0;
  const lane = async (slot: number) => {
    for (let c = next++; c < n; c = next++) await rr.read(head.file, head.offset + c * PIECE, PIECE, slot);
  };
  await Promise.all(Array.from({ length: depth }, (_, slot) => lane(slot)));
  const gbps = (n * PIECE) / ((performance.now() - t0) / 1000) / 1e9;
  rr.close();
  return gbps;
}

const PIECE = 4 * MiB;
const pieces = Math.floor(head.byteLength / PIECE);
const poolReads = Array.from({ length: pieces }, (_, c) => ({ file: head.file, offset: head.offset + c * PIECE, length: PIECE }));
console.log(`
The head in ${pieces} reads of 4 MiB, no compute, GB/s (RangeReader vs the C-driven pool at the same depth):
`);
console.log("| round | depth | pool before | RangeReader | pool after |\n|---:|---:|---:|---:|---:|");
for (let r = 0; r < Math.max(1, rounds - 1); r++)
  for (const depth of [2, 4, 8]) {
    const pool = () => measureReadEngine(poolReads, { engine: "io_uring", queueDepth: depth, direct: true }).gbPerSec.toFixed(2);
    const before = pool();
    const js = (await rangeReaderOnly(depth, pieces)).toFixed(2);
    console.log(`| ${r + 1} | ${depth} | ${before} | ${js} | ${pool()} |`);
  }
