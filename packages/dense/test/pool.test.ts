// The shared pool: workers spin a bounded time between jobs (K3_POOL_SPIN_US, default 200 us), then sleep.
import { describe, expect, it } from "vitest";
import { gemvBf16, poolStats, setThreadCount, threadCount } from "../src/index.js";

const busyWait = (ms: number) => {
  const t0 = performance.now();
  while (performance.now() - t0 < ms);
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("thread pool", () => {
  it("an idle process stops spinning: the worker sleeps and uses almost no CPU", async () => {
    const before = threadCount();
    setThreadCount(2);
    try {
      const rows = 512, cols = 512;
      const w = new Uint16Array(rows * cols).fill(0x3c00);
      const x = new Float32Array(cols).fill(1), y = new Float32Array(rows);
      for (let i = 0; i < 50; i++) gemvBf16(w, x, y, { rows, cols });
      const s0 = poolStats();
      await sleep(50); // longer than any spin bound the default allows
      const c0 = process.cpuUsage();
      const t0 = performance.now();
      await sleep(400);
      const cpuMs = (process.cpuUsage(c0).user + process.cpuUsage(c0).system) / 1e3;
      const wallMs = performance.now() - t0;
      const s1 = poolStats();
      // a worker spinning through the window would burn ~wallMs of CPU
      expect(cpuMs, `process CPU ${cpuMs.toFixed(1)} ms over ${wallMs.toFixed(0)} ms idle`).toBeLessThan(0.25 * wallMs);
      expect(s1.sleeps, "the worker went to sleep after the burst").toBeGreaterThan(s0.sleeps);
      expect(s1.jobs).toBeGreaterThanOrEqual(s0.jobs);
    } finally {
      setThreadCount(before);
    }
  });

  it("counts jobs and the worker's help, and keeps the worker hot across a burst of calls", (ctx) => {
    const before = threadCount();
    setThreadCount(2);
    try {
      const rows = 4096, cols = 1024;
      const w = new Uint16Array(rows * cols).fill(0x3c00);
      const x = new Float32Array(cols).fill(1), y = new Float32Array(rows);
      gemvBf16(w, x, y, { rows, cols });
      // The caller busy-waits and the worker computes or spins, so a process that had both cores
      // burns ~2x its wall time. When other processes hold the second core (vitest runs packages in
      // parallel), the caller finishes the tasks before the worker is scheduled: that says nothing
      // about the pool. So bursts are repeated (up to ~3 s) until one had both cores, and judged there.
      const burst = () => {
        const s0 = poolStats();
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < 200; i++) {
          gemvBf16(w, x, y, { rows, cols });
          busyWait(0.02); // a short gap between calls, as between a layer's kernels
        }
        const wallMs = performance.now() - t0;
        const cpu = process.cpuUsage(c0);
        const s1 = poolStats();
        return { jobs: s1.jobs - s0.jobs, helped: s1.helped - s0.helped, cores: (cpu.user + cpu.system) / 1e3 / wallMs };
      };
      let best = burst();
      const tEnd = performance.now() + 3000;
      while (best.cores < 1.6 && performance.now() < tEnd) {
        const b = burst();
        expect(b.jobs).toBe(200);
        if (b.cores > best.cores) best = b;
      }
      expect(best.jobs).toBe(200);
      expect(y[0]).toBe(cols / 128); // bf16 0x3c00 = 2^-7
      if (best.cores < 1.6) {
        console.warn(`pool test: skipped the worker-help check, no burst in 3 s got both cores (best ${best.cores.toFixed(2)} of 2: machine busy)`);
        ctx.skip();
      }
      expect(best.helped, `a worker ran tasks in most jobs (process had ${best.cores.toFixed(2)} cores)`).toBeGreaterThan(100);
    } finally {
      setThreadCount(before);
    }
  });
});
