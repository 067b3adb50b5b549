// pnpm bench (in packages/dense), under `flock /tmp/k3-bench.lock`.
// bf16 GEMV and GEMM against the memory-read ceiling measured in the same process; the weights cycle
// through >= 512 MiB of distinct copies so they stream from DRAM.
import { bestSimdLevel, gemmBf16, gemvBf16, memoryReadCeiling, setSimdLevel, setThreadCount } from "../src/index.js";
// @k3/test-utils depends on @k3/dense (a cycle in turbo's graph), so its dependency-free bench module is imported by path.
import { AdjacentCeiling, writeReport } from "../../test-utils/src/bench.js";

const MiB = 2 ** 20;
const quick = process.argv.includes("--quick");
const TARGET = (quick ? 64 : 512) * MiB;

function bf16Copies(rows: number, cols: number): Uint16Array[] {
  const n = Math.max(2, Math.ceil(TARGET / (rows * cols * 2)));
  return Array.from({ length: n }, (_, c) => {
    const w = new Uint16Array(rows * cols);
    let s = (c + 1) * 2654435761 >>> 0;
    for (let i = 0; i < w.length; i++) {
      s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
      w[i] = (s & 0x80ff) | 0x3c00; // finite values around +-0.01
    }
    return w;
  });
}

/** The read ceiling (512 MiB, best of 3) right before and after each row; the row uses their mean. */
const ceilings = new AdjacentCeiling((threads) => memoryReadCeiling({ threads, bytes: 2 ** 29, reps: 3 }).gbPerSec);

setSimdLevel(bestSimdLevel());
const rows: Array<Record<string, string | number>> = [];
for (const [r, c] of [[3072, 3584], [3584, 3072], [7168, 7168]] as const) {
  const ws = bf16Copies(r, c);
  const bytes = r * c * 2 * ws.length;
  for (const batch of [1, 8, 32]) {
    const X = new Float32Array(batch * c).map((_, i) => Math.sin(i * 0.37));
    const Y = new Float32Array(batch * r);
    for (const threads of batch === 1 ? [1, 2] : [2]) {
      setThreadCount(threads);
      const { timing: t, seconds, ceiling: ceil } = await ceilings.time(
        threads,
        () => {
          for (const w of ws) batch === 1 ? gemvBf16(w, X, Y, { rows: r, cols: c }) : gemmBf16(w, X, Y, { rows: r, cols: c, batch });
        },
        { minRuns: 3, minMs: 1500 },
      );
      const gb = bytes / seconds / 1e9;
      rows.push({
        kernel: `bf16 ${batch === 1 ? "gemv" : "gemm"} ${r}x${c}`,
        batch,
        threads,
        "us/matrix": (t.best * 1e3) / ws.length,
        "weight GB/s": gb,
        "ceiling GB/s (adjacent)": ceil,
        "ratio": gb / ceil,
        "GFLOP/s": (2 * r * c * batch * ws.length) / seconds / 1e9,
      });
    }
  }
}
writeReport("dense", {
  title: "@k3/dense bf16 GEMV/GEMM vs the memory-read ceiling",
  command: "flock /tmp/k3-bench.lock pnpm bench",
  rows,
  notes: [
    `Ceiling: memoryReadCeiling (512 MiB, 8 accumulators, best of 3) measured right before and after each row; the row uses their mean. Range over this run: ${ceilings.range()}. GB = 1e9 B; weights cycle through >= 512 MiB of distinct copies.`,
  ],
});
