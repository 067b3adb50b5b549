// A K3-shaped slice of one layer on @k3/dense: RMSNorm of a hidden state, a bf16 projection (the
// trunk's weights are bf16), SiTU-GLU, then a router-like softmax + top-k. Runs it at every SIMD
// level this CPU has and at 1 and 2 threads, and shows the outputs are byte-identical.
// `--quick` uses smaller shapes (the smoke test).
import {
  bestSimdLevel,
  f32ToBf16,
  gemvBf16,
  rmsNorm,
  setSimdLevel,
  setThreadCount,
  simdLevel,
  situGlu,
  softmax,
  threadCount,
  topK,
  type SimdLevel,
} from "@k3/dense";

const quick = process.argv.includes("--quick");
const hidden = quick ? 512 : 7168;
const inter = quick ? 256 : 3072;
const experts = quick ? 64 : 896;

// Deterministic inputs, so every run prints the same numbers.
const wave = (n: number, f: number, a: number) => Float32Array.from({ length: n }, (_, i) => a * Math.sin(i * f));
const x = wave(hidden, 0.37, 1.5);
const norm = wave(hidden, 0.011, 0.2).map((v) => 1 + v);
const wGate = f32ToBf16(wave(inter * hidden, 0.618, 0.02));
const wUp = f32ToBf16(wave(inter * hidden, 0.414, 0.02));
const wRouter = f32ToBf16(wave(experts * hidden, 0.271, 0.02));

function step(): { act: Float32Array; experts: Int32Array } {
  const h = rmsNorm(x, norm, 1e-5, new Float32Array(hidden), hidden);
  const gate = gemvBf16(wGate, h, new Float32Array(inter), { rows: inter, cols: hidden });
  const up = gemvBf16(wUp, h, new Float32Array(inter), { rows: inter, cols: hidden });
  const act = situGlu(gate, up, new Float32Array(inter));
  const logits = gemvBf16(wRouter, h, new Float32Array(experts), { rows: experts, cols: hidden });
  const probs = softmax(logits, new Float32Array(experts), experts);
  return { act, experts: topK(probs, 16).indices };
}

const levels: SimdLevel[] = ["scalar", "avx2", "avx512"];
const available = levels.slice(0, levels.indexOf(bestSimdLevel()) + 1);
const [level0, threads0] = [simdLevel(), threadCount()];
let reference: Buffer | null = null;
for (const level of available)
  for (const threads of [1, 2]) {
    setSimdLevel(level);
    setThreadCount(threads);
    const t0 = performance.now();
    const { act, experts: chosen } = step();
    const ms = performance.now() - t0;
    const bytes = Buffer.concat([Buffer.from(act.buffer), Buffer.from(chosen.buffer)]);
    reference ??= bytes;
    const same = bytes.equals(reference);
    console.log(`${level.padEnd(6)} x${threads}: ${ms.toFixed(2)} ms, top experts ${Array.from(chosen.slice(0, 4)).join(",")}..., ` + `output ${same ? "identical" : "DIFFERENT"}`);
    if (!same) process.exitCode = 1;
  }
setSimdLevel(level0);
setThreadCount(threads0);
