/**
 * MoE layer compute at real widths, experts already in memory (what a run whose experts are all
 * cached does: the 48B auto/desktop presets), against the memory-read floor measured in the same
 * process: bytes touched per token (router + shared expert + the k routed experts) / ceiling.
 *
 *   48B: hidden 2304, 256 bf16 experts of inter 1024, top-8, one shared expert of 1024, SiLU-GLU.
 *
 * The provider serves POOL distinct expert buffers (id % POOL), more bytes than the L3, so every
 * token reads its experts from memory. Decode (T = 1) tokens are independent random vectors.
 *
 * Then K3's routed experts alone (docs/architecture.md §4.3/§4.4): 16 MXFP4 experts per token on the 3584
 * latent, inter 3072, SiTU-GLU (17.5 MB each, K3_POOL distinct ones), one decode row per expert:
 * runMany (one native call, two pool dispatches) against run() per expert (3 @k3/mxfp4 matmuls +
 * a GLU call each: the path before runMany), each against the same memory-read floor.
 *
 * Run: /work/bin/k3-excl node --import tsx bench/compute.bench.ts [--tokens N] [--threads N]
 */
import { K3_SITU_BETAS, Linear, memoryReadCeiling, setThreadCount, simdLevel, threadCount } from "@k3/dense";
import type { ExpertLocation } from "../src/store/checkpoint.js";
import { denseExpertCompute, mxfp4ExpertCompute } from "../src/moe/expert-compute.js";
import type { ExpertHandle, ExpertRequest } from "../src/store/expert-store.js";
import { MoeLayer, type ExpertProvider } from "../src/moe/moe-layer.js";
import { Router } from "../src/moe/router.js";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const TOKENS = arg("tokens", 64);
const POOL = arg("pool", 48);
if (process.argv.includes("--threads")) setThreadCount(arg("threads", 2));

const D = 2304;
const I = 1024;
const E = 256;
const K = 8;

let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) - 0.5;
/** bf16 bits of small random values (|w| < 0.03), so activations stay finite. */
function bf16Random(n: number, scale = 0.06): Uint8Array {
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = rnd() * scale;
  const u = new Uint32Array(f.buffer);
  const out = new Uint16Array(n);
  for (let i = 0; i < n; i++) out[i] = u[i] >>> 16;
  return new Uint8Array(out.buffer);
}

const matBytes = I * D * 2;
const tensors: ExpertLocation["tensors"] = {
  "w1.weight": { offset: 0, byteLength: matBytes, dtype: "BF16", shape: [I, D] },
  "w2.weight": { offset: matBytes, byteLength: matBytes, dtype: "BF16", shape: [D, I] },
  "w3.weight": { offset: 2 * matBytes, byteLength: matBytes, dtype: "BF16", shape: [I, D] },
};
const expertBytes = 3 * matBytes;
const pool = Array.from({ length: POOL }, () => bf16Random(3 * I * D));

const provider: ExpertProvider = {
  request(layer, ids): ExpertRequest {
    const hs = Array.from(ids, (id, i): ExpertHandle => ({
      layer,
      id,
      location: { layer, id, file: "mem", offset: 0, byteLength: expertBytes, tensors },
      bytes: pool[id % POOL],
      source: "resident",
      readId: id % POOL,
      release() {},
    }));
    const handles = hs.map((h) => Promise.resolve(h));
    return {
      handles,
      async *completed() {
        for (const h of hs) yield h;
      },
    };
  },
};

const mat = (rows: number, cols: number, name: string) => new Linear(name, { dtype: "BF16", data: bf16Random(rows * cols) }, rows, cols);
const router = new Router({ numExperts: E, topK: K, routedScalingFactor: 2.446 }, mat(E, D, "gate"), new Float32Array(E));
const shared = { gate: mat(I, D, "sg"), up: mat(I, D, "su"), down: mat(D, I, "sd") };
const layer = new MoeLayer({ layer: 1, hidden: D, router, experts: provider, compute: denseExpertCompute({ inDim: D, interDim: I, activation: "silu" }), shared, activation: "silu" });

const xs = Array.from({ length: TOKENS }, () => Float32Array.from({ length: D }, () => rnd() * 2));
const out = new Float32Array(D);
for (let t = 0; t < 8; t++) await layer.forward(xs[t], 1, { out }); // warm-up

const ceiling = memoryReadCeiling({ bytes: 512 * 2 ** 20, threads: threadCount(), reps: 8 }).gbPerSec;
let wall = 0;
let trunk = 0;
let experts = 0;
for (let t = 0; t < TOKENS; t++) {
  const t0 = performance.now();
  await layer.forward(xs[t], 1, { out });
  wall += performance.now() - t0;
  const s = layer.lastStats!;
  trunk += (s.cpuNs - s.expertCpuNs) / 1e6;
  experts += s.expertCpuNs / 1e6;
}
const touchedTrunk = E * D * 2 + 3 * I * D * 2;
const touchedExperts = K * expertBytes;
const ms = (b: number) => (b / (ceiling * 1e9)) * 1e3;
const row = (name: string, t: number, floor: number) => `| ${name} | ${(t / TOKENS).toFixed(3)} | ${floor.toFixed(3)} | ${(t / TOKENS / floor).toFixed(2)} |`;
console.log(`48B MoE layer decode, ${TOKENS} tokens, ${threadCount()} threads, ${simdLevel()}, memory ceiling ${ceiling.toFixed(1)} GB/s (same run)`);
console.log("| part | ms/token | floor ms | ratio |\n|---|---:|---:|---:|");
console.log(row("moe_trunk (router + shared)", trunk, ms(touchedTrunk)));
console.log(row("routed experts", experts, ms(touchedExperts)));
console.log(row("layer wall", wall, ms(touchedTrunk + touchedExperts)));


// ---------------------------------------------------------------- K3 MXFP4 routed experts

const KL = 3584; // routed_expert_hidden_size (the latent)
const KI = 3072; // moe_intermediate_size
const KK = 16; // num_experts_per_token
const K3_POOL = arg("k3-pool", 40);
const K3_TOKENS = arg("k3-tokens", 24);
const mxTensors: ExpertLocation["tensors"] = {};
let mxBytes = 0;
for (const [w, rows, cols] of [["w1", KI, KL], ["w2", KL, KI], ["w3", KI, KL]] as const)
  for (const [part, n, shape] of [["weight_packed", (rows * cols) / 2, [rows, cols / 2]], ["weight_scale", (rows * cols) / 32, [rows, cols / 32]]] as const) {
    mxTensors[`${w}.${part}`] = { offset: mxBytes, byteLength: n, dtype: "U8", shape: [...shape] };
    mxBytes += n;
  }
/** Random codes; scales 2^-8 .. 2^-5 (118..121): never 0xFF, activations stay finite. */
function mxRandom(): Uint8Array {
  const b = new Uint8Array(mxBytes);
  const words = new Uint32Array(b.buffer);
  for (let i = 0; i < words.length; i++) words[i] = (rnd() * 2 ** 32) >>> 0;
  for (const [name, t] of Object.entries(mxTensors)) if (name.endsWith("scale")) for (let i = 0; i < t.byteLength; i++) b[t.offset + i] = 118 + (b[t.offset + i] & 3);
  return b;
}
const mxPool = Array.from({ length: K3_POOL }, mxRandom);
const situ = { inDim: KL, interDim: KI, activation: "situ" as const, situBetas: K3_SITU_BETAS };
const batched = mxfp4ExpertCompute(situ);
const perExpert = mxfp4ExpertCompute({ ...situ, batched: false });
const u = Float32Array.from({ length: KL }, () => rnd() * 2);
const ys = new Float32Array(KK * KL);
const xRow = new Int32Array(KK);
const yRow = Int32Array.from({ length: KK }, (_, i) => i);
const itemsAt = (t: number) =>
  Array.from({ length: KK }, (_, j) => {
    const id = (t * KK + j) % K3_POOL;
    return { bytes: mxPool[id], location: { layer: 1, id, file: "mem", offset: 0, byteLength: mxBytes, tensors: mxTensors }, rows: 1 };
  });
const runBatched = (t: number) => batched.runMany!(itemsAt(t), u, xRow, ys, yRow);
const runPerExpert = (t: number) => itemsAt(t).forEach((it, j) => perExpert.run(it.bytes, it.location, u, 1, ys.subarray(j * KL, (j + 1) * KL)));
for (let t = 0; t < 4; t++) (runBatched(t), runPerExpert(t)); // warm-up
const k3Ceiling = memoryReadCeiling({ bytes: 512 * 2 ** 20, threads: threadCount(), reps: 8 }).gbPerSec;
const timeTokens = (f: (t: number) => void) => {
  const t0 = performance.now();
  for (let t = 0; t < K3_TOKENS; t++) f(t);
  return (performance.now() - t0) / K3_TOKENS;
};
// Interleaved halves, so drift (another process, frequency) hits both paths alike.
let tb = 0;
let tp = 0;
for (let h = 0; h < 2; h++) {
  tb += timeTokens(runBatched) / 2;
  tp += timeTokens(runPerExpert) / 2;
}
const k3Floor = ((KK * mxBytes) / (k3Ceiling * 1e9)) * 1e3;
const k3Row = (name: string, t: number) => `| ${name} | ${t.toFixed(2)} | ${k3Floor.toFixed(2)} | ${(t / k3Floor).toFixed(2)} |`;
console.log(`\nK3 routed experts decode (16 MXFP4 experts, latent ${KL}, inter ${KI}, SiTU; ${(mxBytes / 1e6).toFixed(2)} MB each, pool of ${K3_POOL}), ${K3_TOKENS} tokens x 2, ${threadCount()} threads, ${simdLevel()}, memory ceiling ${k3Ceiling.toFixed(1)} GB/s (same run)`);
console.log("| path | ms/token | floor ms | ratio |\n|---|---:|---:|---:|");
console.log(k3Row("runMany (one native call)", tb));
console.log(k3Row("run() per expert (3 matmuls + GLU each)", tp));
