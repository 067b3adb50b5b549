/**
 * @k3/moe-stream benchmark on a synthetic K3-shaped checkpoint with REAL expert sizes
 * (17,547,264 B MXFP4 experts, six tensors each, lexicographic order, unaligned offsets).
 *
 *  1. read bandwidth: the ExpertStore decoding a routed trace (16 of 96 experts per layer, all of a
 *     layer's misses at once, no cache) against the disk's ceiling measured in the same run with the
 *     same reads (plain pread threads, O_DIRECT, QD16) and against fio (randread, bs = one expert,
 *     iodepth 16, direct) when fio is installed. Page cache dropped before every pass (O_DIRECT).
 *     Engines side by side: the same passes through io_uring and through the pread threads
 *     (interleaved P U U P P U), GB/s and process CPU seconds per GB read; SQPOLL too.
 *  2. bytes per token: device bytes (store counter and /proc/self/io read_bytes) / theoretical.
 *  3. overlap: the decode schedule MoeLayer runs (real MXFP4 kernels) computing expert j
 *     while j+1.. are read; overlap = (t_io + t_cpu - t_wall) / min(t_io, t_cpu).
 *  4. hit rate vs cache size: the real ExpertStore on a small-expert checkpoint (same policy, tiny
 *     reads) replaying a routing trace with temporal locality (bench/trace.ts), against one global
 *     LRU of the same total size (simulated).
 *
 * Disk use: ~6.7 GB in K3_BENCH_DIR (default /tmp/k3-moe-stream-bench), deleted at the end unless
 * K3_BENCH_KEEP=1. Run under `flock /tmp/k3-bench.lock pnpm bench`.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { join } from "node:path";
import { K3_SITU_BETAS } from "@k3/dense";
import { openCheckpointIndex, type ExpertLocation } from "../src/store/checkpoint.js";
import { mxfp4ExpertCompute } from "../src/moe/expert-compute.js";
import { ExpertStore } from "../src/store/expert-store.js";
import type { IoEngine } from "../src/io/io-engine.js";
import { dropPageCache, measureReadCeiling, measureReadEngine, peakRssBytes, procIo } from "../src/io/io-stats.js";
import { expertBytes, writeSyntheticK3 } from "../test/make-checkpoint.js";
import { globalLruHitRate, routingTrace } from "./trace.js";
// @ts-expect-error plain JS module shared by every package's bench
import { writeReport } from "../../../scripts/bench-report.mjs";

const GB = 1e9;
const LATENT = 3584;
const INTER = 3072;
const LAYERS = [1, 2, 3, 4];
const EXPERTS = 96;
const K = 16;
const TOKENS = Number(process.env.K3_BENCH_TOKENS ?? 8);
const dir = process.env.K3_BENCH_DIR ?? "/tmp/k3-moe-stream-bench";
const keep = process.env.K3_BENCH_KEEP === "1";
const EXPERT_BYTES = expertBytes(LATENT, INTER);
if (EXPERT_BYTES !== 17_547_264) throw new Error(`expert size ${EXPERT_BYTES}`);

/** What backs the bench dir: the block device and whether the CPU runs under a hypervisor. */
function diskNote(): string {
  const df = spawnSync("df", ["--output=source,fstype", dir], { encoding: "utf8" }).stdout?.trim().split("\n").at(-1) ?? "?";
  const hv = /\bhypervisor\b/.test(spawnSync("grep", ["-m1", "^flags", "/proc/cpuinfo"], { encoding: "utf8" }).stdout ?? "");
  return `${df.replace(/\s+/g, " ")}${hv ? ", virtio disk of a VM (CPU flag hypervisor)" : ""}`;
}

function log(s: string) {
  console.error(`[bench] ${s}`);
}

// ---------------------------------------------------------------- the checkpoint

const t0 = performance.now();
let files: string[];
if (existsSync(join(dir, "model.safetensors.index.json"))) {
  files = LAYERS.map((_, i) => join(dir, `model-${String(i + 1).padStart(5, "0")}-of-${String(LAYERS.length).padStart(5, "0")}.safetensors`));
  log(`reusing ${dir}`);
} else {
  mkdirSync(dir, { recursive: true });
  files = writeSyntheticK3({ dir, layers: LAYERS, experts: EXPERTS, hidden: 256, latent: LATENT, inter: INTER, content: "fast" });
  log(`wrote ${files.length} shards in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
const ckpt = openCheckpointIndex(dir);
const experts: ExpertLocation[] = LAYERS.flatMap((l) => ckpt.experts(l));
const totalBytes = files.reduce((a, f) => a + statSync(f).size, 0);
log(`${experts.length} experts, ${(totalBytes / GB).toFixed(2)} GB on disk`);
const dropAll = () => files.forEach(dropPageCache);

// A decode trace: per token and layer, 16 distinct experts of 96 (uniform: no reuse to exploit).
const trace = routingTrace({ layers: LAYERS.length, experts: EXPERTS, k: K, tokens: TOKENS, reuse: 0, zipf: 0, seed: 7 });
const reads = trace.flatMap((tok) => tok.flatMap((ids, li) => ids.map((id) => ckpt.experts(LAYERS[li])[id]))).map((e) => ({ file: e.file, offset: e.offset, length: e.byteLength }));
const theoreticalPerToken = LAYERS.length * K * EXPERT_BYTES;

// ---------------------------------------------------------------- 1. bandwidth

function ceilingPass() {
  dropAll();
  return measureReadCeiling(reads, { queueDepth: 16 });
}

async function storePass(pieceBytes = 0, ioEngine: IoEngine = "auto", sqpoll = false) {
  dropAll();
  const before = process.env.K3_SQPOLL;
  if (sqpoll) process.env.K3_SQPOLL = "1";
  else delete process.env.K3_SQPOLL;
  const store = ExpertStore.open({ experts, ioSlots: K + 2, readers: 16, slotsPerLayer: 0, pieceBytes, ioEngine });
  if (before === undefined) delete process.env.K3_SQPOLL;
  else process.env.K3_SQPOLL = before;
  const io0 = procIo().readBytes;
  const cpu0 = process.cpuUsage();
  const w0 = performance.now();
  for (const tok of trace)
    for (let li = 0; li < LAYERS.length; li++)
      for await (const h of store.request(LAYERS[li], tok[li]).completed()) h.release();
  const seconds = (performance.now() - w0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const s = store.stats();
  const procBytes = procIo().readBytes - io0;
  store.close();
  // Whole-process CPU (every thread: readers, io_uring's kernel workers and SQPOLL thread, JS).
  const cpuSecPerGB = (cpu.user + cpu.system) / 1e6 / (s.deviceBytes / GB);
  return { seconds, gbPerSec: s.deviceBytes / seconds / GB, busyGbPerSec: s.deviceBytes / (s.ioBusyNs / 1e9) / GB, cpuSecPerGB, engine: s.engine, s, procBytes };
}

function fioPass(): number | null {
  if (spawnSync("fio", ["--version"]).status !== 0) return null;
  let best: number | null = null;
  for (const engine of ["io_uring", "libaio"]) {
    dropAll();
    const r = spawnSync("fio", [
      "--name=k3", `--filename=${files[0]}`, "--rw=randread", `--bs=${EXPERT_BYTES}`, "--iodepth=16", "--direct=1",
      `--ioengine=${engine}`, `--io_size=${128 * EXPERT_BYTES}`, "--output-format=json",
    ], { encoding: "utf8", maxBuffer: 1 << 26 });
    try {
      const bw = JSON.parse(r.stdout).jobs[0].read.bw_bytes / GB;
      if (best === null || bw > best) best = bw;
    } catch {
      /* engine unavailable */
    }
  }
  return best;
}

log(`bandwidth: ${reads.length} reads of ${EXPERT_BYTES} B, ABBA order`);
const median = (a: number[]) => [...a].sort((x, y) => x - y)[a.length >> 1];
type Pass = Awaited<ReturnType<typeof storePass>>;
const medianPass = (ps: Pass[]) => [...ps].sort((a, b) => a.gbPerSec - b.gbPerSec)[ps.length >> 1];
const c1 = ceilingPass();
const s1 = await storePass();
const s2 = await storePass();
const c2 = ceilingPass();
const c3 = ceilingPass();
const s3 = await storePass();
const sp = await storePass(4 << 20);
const fio = fioPass();
const ceiling = median([c1.gbPerSec, c2.gbPerSec, c3.gbPerSec]);
const store = medianPass([s1, s2, s3]);
log(`ceiling ${[c1, c2, c3].map((c) => c.gbPerSec.toFixed(2)).join("/")} GB/s, store (${store.engine}) ${[s1, s2, s3].map((c) => c.gbPerSec.toFixed(2)).join("/")} GB/s, fio ${fio?.toFixed(2)}`);

// ---------------------------------------------------------------- 2. engines side by side

/** Interleaved passes (P U U P P U) so drift in the host's cache or load hits both engines alike. */
async function enginePasses(pieceBytes: number) {
  const order: Array<"pread" | "io_uring"> = ["pread", "io_uring", "io_uring", "pread", "pread", "io_uring"];
  const got: Record<string, Pass[]> = { pread: [], io_uring: [] };
  for (const e of order) got[e].push(await storePass(pieceBytes, e));
  const show = (ps: Pass[]) => ps.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(3)} cpu-s/GB`).join(", ");
  log(`engines, ${pieceBytes ? `${pieceBytes >> 20} MiB pieces` : "one read per expert"}: pread ${show(got.pread)}; io_uring ${show(got.io_uring)}`);
  const cpu = (ps: Pass[]) => median(ps.map((p) => p.cpuSecPerGB));
  return { pieceBytes, pread: medianPass(got.pread), uring: medianPass(got.io_uring), preadCpu: cpu(got.pread), uringCpu: cpu(got.io_uring), all: got };
}
const engineRuns = [await enginePasses(0), await enginePasses(4 << 20)];

/** The same reads in pieces cut as the store cuts them (boundaries every `piece` bytes from the aligned start). */
function inPieces(list: typeof reads, piece: number): typeof reads {
  return list.flatMap((r) => {
    const base = Math.floor(r.offset / 4096) * 4096;
    const out: typeof reads = [];
    for (let s = base; s < r.offset + r.length; s += piece) {
      const from = Math.max(r.offset, s);
      out.push({ file: r.file, offset: from, length: Math.min(r.offset + r.length, s + piece) - from });
    }
    return out;
  });
}

/** The read pool alone, driven from C (no JS in the loop): the engines' own CPU per GB. */
function cEnginePasses(pieceBytes: number) {
  const list = pieceBytes ? inPieces(reads, pieceBytes) : reads;
  const order: Array<"pread" | "io_uring"> = ["pread", "io_uring", "io_uring", "pread", "pread", "io_uring"];
  const got: Record<string, Array<ReturnType<typeof measureReadEngine>>> = { pread: [], io_uring: [] };
  for (const e of order) {
    dropAll();
    got[e].push(measureReadEngine(list, { engine: e, queueDepth: 16 }));
  }
  const show = (ps: Array<ReturnType<typeof measureReadEngine>>) => ps.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(4)} cpu-s/GB`).join(", ");
  log(`engines from C, ${pieceBytes ? `${pieceBytes >> 20} MiB pieces` : "one read per expert"} (${list.length} reads): pread ${show(got.pread)}; io_uring ${show(got.io_uring)}`);
  const med = (ps: Array<ReturnType<typeof measureReadEngine>>) => ({ gbPerSec: median(ps.map((p) => p.gbPerSec)), cpu: median(ps.map((p) => p.cpuSecPerGB)) });
  return { pieceBytes, reads: list.length, pread: med(got.pread), uring: med(got.io_uring), all: got };
}
const cRuns = [cEnginePasses(0), cEnginePasses(4 << 20)];
const sq = [await storePass(4 << 20, "io_uring", true), await storePass(4 << 20, "io_uring", true)];
const sqPass = medianPass(sq);
log(`SQPOLL (${sqPass.engine}): ${sq.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(3)} cpu-s/GB`).join(", ")}`);

// ---------------------------------------------------------------- 3. overlap

/**
 * Decode pipeline on the real K3-size experts: per layer, request the 16 experts and run each with
 * the MXFP4 kernels as it lands (what MoeLayer does). `lookahead`: while layer L computes, prefetch
 * layer L+1's experts with this accuracy (1 = an oracle; 0.7 = 30% of the predictions wrong, the
 * rest of L+1's experts are demand-read). Routing is the trace, so modes are comparable.
 */
async function overlapPass(pieceBytes: number, readers: number, lookahead: number | null) {
  dropAll();
  const store = ExpertStore.open({ experts, ioSlots: 2 * K + 2, prefetchSlots: K, readers, pieceBytes, maxPrefetchInflight: Math.max(1, readers >> 1) });
  const compute = mxfp4ExpertCompute({ inDim: LATENT, interDim: INTER, situBetas: K3_SITU_BETAS });
  const X = new Float32Array(LATENT).map((_, i) => Math.sin(i) * 0.1);
  const Y = new Float32Array(LATENT);
  const tokens = Math.min(TOKENS, 3);
  let cpu = 0n;
  let wait = 0n;
  let rnd = 12345;
  const rand = () => ((rnd = (Math.imul(rnd, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  const io0 = store.stats().ioBusyNs;
  const w0 = process.hrtime.bigint();
  const steps = trace.slice(0, tokens).flatMap((tok) => tok.map((ids, li) => ({ layer: LAYERS[li], ids })));
  for (let i = 0; i < steps.length; i++) {
    const req = store.request(steps[i].layer, steps[i].ids);
    const next = steps[i + 1];
    if (lookahead !== null && next) {
      const guess = next.ids.map((id) => (rand() < lookahead ? id : Math.floor(rand() * EXPERTS)));
      store.prefetch(next.layer, [...new Set(guess)]);
    }
    const it = req.completed();
    for (;;) {
      const t0 = process.hrtime.bigint();
      const n = await it.next();
      wait += process.hrtime.bigint() - t0;
      if (n.done) break;
      const c0 = process.hrtime.bigint();
      compute.run(n.value.bytes, n.value.location, X, 1, Y, n.value.readId);
      n.value.release();
      cpu += process.hrtime.bigint() - c0;
    }
    store.cancelPrefetch(); // wrong guesses: drop them before the next layer
  }
  const wall = Number(process.hrtime.bigint() - w0);
  const st = store.stats();
  const io = st.ioBusyNs - io0;
  store.close();
  const c = Number(cpu);
  return { io, cpu: c, wall, wait: Number(wait), tokens, pieceBytes, readers, lookahead, prefetchHits: st.prefetchHits, requests: st.requests, overlap: (io + c - wall) / Math.min(io, c) };
}

const overlaps = [
  await overlapPass(0, 16, null),
  await overlapPass(4 << 20, 16, null),
  await overlapPass(4 << 20, 16, 1),
  await overlapPass(4 << 20, 16, 0.7),
];
for (const ov of overlaps)
  log(`overlap pieces=${ov.pieceBytes} readers=${ov.readers} lookahead=${ov.lookahead}: ${ov.overlap.toFixed(3)} (io ${(ov.io / 1e9).toFixed(2)} s, cpu ${(ov.cpu / 1e9).toFixed(2)} s, wall ${(ov.wall / 1e9).toFixed(2)} s, prefetch hits ${ov.prefetchHits}/${ov.requests})`);

// ---------------------------------------------------------------- 4. hit rate vs cache size

async function hitRates() {
  const small = join(dir, "small");
  const layers = Array.from({ length: 16 }, (_, i) => i + 1);
  const E = 896;
  if (!existsSync(join(small, "model.safetensors.index.json")))
    writeSyntheticK3({ dir: small, layers, experts: E, hidden: 64, latent: 64, inter: 32, content: "fast" });
  const c = openCheckpointIndex(small);
  const ex = layers.flatMap((l) => c.experts(l));
  const tr = routingTrace({ layers: layers.length, experts: E, k: K, tokens: 200, seed: 3 });
  const rows: Array<{ slots: number; resident: number; globalLru: number }> = [];
  for (const slots of [0, 8, 16, 32, 64, 128, 256]) {
    const st = ExpertStore.open({ experts: ex, slotsPerLayer: slots, ioSlots: K + 2, readers: 8 });
    for (const tok of tr)
      for (let li = 0; li < layers.length; li++) for await (const h of st.request(layers[li], tok[li]).completed()) h.release();
    rows.push({ slots, resident: st.stats().residentHitRate, globalLru: globalLruHitRate(tr, slots * layers.length) });
    st.close();
  }
  return rows;
}
const hits = await hitRates();

// ---------------------------------------------------------------- report

const perToken = store.s.deviceBytes / TOKENS;
const rows: Array<Record<string, string | number>> = [
  { metric: `expert read bandwidth (store on ${store.engine}, decode trace, no cache; median of 3)`, ours: `${store.gbPerSec.toFixed(2)} GB/s`, reference: `${ceiling.toFixed(2)} GB/s (plain pread x16, O_DIRECT, same reads and buffers; median of 3)`, ratio: store.gbPerSec / ceiling, target: ">= 0.9" },
  { metric: "  same, while reads are in flight (I/O busy time)", ours: `${store.busyGbPerSec.toFixed(2)} GB/s`, reference: `${ceiling.toFixed(2)} GB/s`, ratio: store.busyGbPerSec / ceiling, target: "" },
  { metric: "  same, 4 MiB pieces per expert", ours: `${sp.gbPerSec.toFixed(2)} GB/s`, reference: `${ceiling.toFixed(2)} GB/s`, ratio: sp.gbPerSec / ceiling, target: "" },
  ...engineRuns.flatMap((r) => {
    const what = r.pieceBytes ? `${r.pieceBytes >> 20} MiB pieces` : "one read per expert";
    return [
      { metric: `io_uring vs pread threads, ${what}, QD16, O_DIRECT (median of 3, interleaved)`, ours: `${r.uring.gbPerSec.toFixed(2)} GB/s`, reference: `${r.pread.gbPerSec.toFixed(2)} GB/s (pread threads x16)`, ratio: r.uring.gbPerSec / r.pread.gbPerSec, target: ">= 1" },
      { metric: `  CPU seconds per GB read (whole process), ${what}`, ours: `${r.uringCpu.toFixed(3)} s/GB`, reference: `${r.preadCpu.toFixed(3)} s/GB (pread threads)`, ratio: r.uringCpu / r.preadCpu, target: "< 1" },
    ];
  }),
  ...cRuns.flatMap((r) => {
    const what = r.pieceBytes ? `${r.pieceBytes >> 20} MiB pieces` : "one read per expert";
    return [
      { metric: `read pool alone from C (no JS), ${what}: io_uring vs pread threads (median of 3, interleaved)`, ours: `${r.uring.gbPerSec.toFixed(2)} GB/s`, reference: `${r.pread.gbPerSec.toFixed(2)} GB/s (pread threads x16)`, ratio: r.uring.gbPerSec / r.pread.gbPerSec, target: ">= 1" },
      { metric: `  CPU seconds per GB read, pool alone, ${what}`, ours: `${r.uring.cpu.toFixed(4)} s/GB`, reference: `${r.pread.cpu.toFixed(4)} s/GB (pread threads)`, ratio: r.uring.cpu / r.pread.cpu, target: "< 1" },
    ];
  }),
  { metric: `  io_uring + SQPOLL (${sqPass.engine}), 4 MiB pieces (median of 2)`, ours: `${sqPass.gbPerSec.toFixed(2)} GB/s, ${median(sq.map((p) => p.cpuSecPerGB)).toFixed(3)} s/GB`, reference: `${engineRuns[1].uring.gbPerSec.toFixed(2)} GB/s, ${engineRuns[1].uringCpu.toFixed(3)} s/GB (io_uring)`, ratio: sqPass.gbPerSec / engineRuns[1].uring.gbPerSec, target: "" },
  ...(fio !== null ? [{ metric: "  fio randread bs=17547264 iodepth=16 direct io_uring", ours: `${store.gbPerSec.toFixed(2)} GB/s`, reference: `${fio.toFixed(2)} GB/s (fio, best of io_uring/libaio, its own 4 KiB-page buffers)`, ratio: store.gbPerSec / fio, target: "" }] : []),
  { metric: "bytes per token, store counter (no cache)", ours: `${(perToken / 1e6).toFixed(1)} MB`, reference: `${(theoreticalPerToken / 1e6).toFixed(1)} MB (4 layers x 16 x 17,547,264)`, ratio: perToken / theoreticalPerToken, target: "<= 1.01" },
  { metric: "bytes per token, /proc/self/io read_bytes", ours: `${(store.procBytes / TOKENS / 1e6).toFixed(1)} MB`, reference: `${(theoreticalPerToken / 1e6).toFixed(1)} MB`, ratio: store.procBytes / TOKENS / theoreticalPerToken, target: "<= 1.01" },
  ...overlaps.flatMap((ov) => [
    {
      metric: `compute/I-O overlap, decode + MXFP4 (${ov.pieceBytes ? `${ov.pieceBytes >> 20} MiB pieces` : "one read per expert"}, ${ov.readers} readers, ${ov.lookahead === null ? "no lookahead" : ov.lookahead === 1 ? "oracle lookahead" : `${ov.lookahead * 100}%-accurate lookahead`})`,
      ours: ov.overlap.toFixed(3),
      reference: `1.0; t_io ${(ov.io / 1e9 / ov.tokens).toFixed(2)} s, t_cpu ${(ov.cpu / 1e9 / ov.tokens).toFixed(2)} s, wall ${(ov.wall / 1e9 / ov.tokens).toFixed(2)} s per token`,
      ratio: ov.overlap,
      target: ">= 0.8",
    },
    { metric: "  I/O wait share of wall", ours: `${((ov.wait / ov.wall) * 100).toFixed(1)} %`, reference: `prefetch hits ${ov.prefetchHits} of ${ov.requests}`, ratio: ov.wait / ov.wall, target: "" },
  ]),
  ...hits.map((h) => ({
    metric: `resident hit rate, ${h.slots} slots/layer (16 layers x 896, trace: reuse 0.25, window 8, Zipf 0.3)`,
    ours: `${(h.resident * 100).toFixed(1)} %`,
    reference: `${(h.globalLru * 100).toFixed(1)} % (one global LRU, same total size, simulated)`,
    ratio: h.globalLru > 0 ? h.resident / h.globalLru : h.resident > 0 ? Infinity : NaN,
    target: "",
  })),
];
writeReport("moe-stream", {
  title: "@k3/moe-stream: expert streaming on a synthetic K3-shaped checkpoint (4 layers x 96 experts x 17.5 MB)",
  command: "flock /tmp/k3-bench.lock pnpm --filter @k3/moe-stream bench",
  rows,
  notes: [
    `Disk: ${(totalBytes / GB).toFixed(2)} GB checkpoint in ${dir}; page cache dropped (fdatasync + POSIX_FADV_DONTNEED) before every pass; ${TOKENS} decode tokens x ${LAYERS.length} layers x 16 experts.`,
    `Store direct reads ${store.s.directReads}/${store.s.reads}. Ceiling passes ${[c1, c2, c3].map((c) => c.gbPerSec.toFixed(2)).join(" / ")} GB/s, store passes ${[s1, s2, s3].map((c) => c.gbPerSec.toFixed(2)).join(" / ")} GB/s (order C S S C C S; medians compared; the disk is a virtual one, so the host may cache). Peak RSS ${(peakRssBytes() / 1e6).toFixed(0)} MB.`,
    `Engines, every pass (order P U U P P U, then 2 x SQPOLL): ${engineRuns.map((r) => `${r.pieceBytes ? `${r.pieceBytes >> 20} MiB pieces` : "one read per expert"}: pread ${r.all.pread.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(3)} s/GB`).join(", ")}; io_uring ${r.all.io_uring.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(3)} s/GB`).join(", ")}`).join(". ")}. SQPOLL ${sq.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(3)} s/GB`).join(", ")}. Pool alone from C: ${cRuns.map((r) => `${r.pieceBytes ? `${r.pieceBytes >> 20} MiB pieces` : "one read per expert"}: pread ${r.all.pread.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(4)} s/GB`).join(", ")}; io_uring ${r.all.io_uring.map((p) => `${p.gbPerSec.toFixed(2)} GB/s ${p.cpuSecPerGB.toFixed(4)} s/GB`).join(", ")}`).join(". ")}. CPU = process.cpuUsage() (getrusage from C for the pool-alone rows) user + system over the pass (all threads, io_uring's kernel workers included), per GB the device transferred.`,
    `The disk is virtualised (${diskNote()}): the host may cache, so absolute GB/s are not an NVMe figure; the ratios of passes interleaved in one run are what is measured. Load average at the end ${loadavg().map((x) => x.toFixed(2)).join(" / ")} on ${cpus().length} cores shared with other engineers' builds and tests: figures are from a busy machine.`,
  ],
});
if (!keep) rmSync(dir, { recursive: true, force: true });
