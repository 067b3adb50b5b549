// The decode probes: per-thread CPU groups (thread-cpu.ts) and the GEMV engine-vs-replay summary (gemv-probe.ts).
import { gemvBf16, setThreadCount, threadCount } from "@k3/dense";
import { describe, expect, it } from "vitest";
import { summarizeGemvProbe, formatGemvProbe } from "../src/gemv-probe.js";
import { cpuSnapshot, threadCpuBetween, threadGroup, type CpuSnapshot } from "../src/thread-cpu.js";

describe("thread-cpu", () => {
  it("groups threads by tid and name", () => {
    expect(threadGroup(100, 100, "node")).toBe("main");
    expect(threadGroup(101, 100, "k3-pool")).toBe("pool");
    expect(threadGroup(102, 100, "k3-read")).toBe("readers");
    expect(threadGroup(103, 100, "k3-uring")).toBe("readers");
    expect(threadGroup(104, 100, "iou-wrk-104")).toBe("readers");
    expect(threadGroup(105, 100, "node")).toBe("other");
  });

  it("sums each group's CPU and wait between two snapshots; other processes = machine busy less ours", () => {
    const snap = (atMs: number, t: Array<[number, "main" | "pool" | "other", number, number]>, busy: number): CpuSnapshot => ({
      atMs,
      threads: new Map(t.map(([tid, group, cpuNs, waitNs]) => [tid, { group, cpuNs, waitNs }])),
      machine: { busy, idle: 0, steal: 3 },
    });
    const a = snap(0, [[1, "main", 1e9, 0], [2, "pool", 0, 0]], 1000);
    const b = snap(500, [[1, "main", 1.4e9, 1e8], [2, "pool", 3e8, 2e7], [3, "other", 5e7, 0]], 1000 + 100);
    const r = threadCpuBetween(a, b, 2);
    expect(r.wall_seconds).toBeCloseTo(0.5);
    expect(r.groups.main).toEqual({ cpu_seconds: expect.closeTo(0.4), wait_seconds: expect.closeTo(0.1), threads: 1 });
    expect(r.groups.pool.cpu_seconds).toBeCloseTo(0.3);
    expect(r.groups.other).toEqual({ cpu_seconds: expect.closeTo(0.05), wait_seconds: 0, threads: 1 });
    expect(r.groups.readers.threads).toBe(0);
    // 100 ticks = 1.0 s busy on the machine, 0.75 s of it ours
    expect(r.other_processes_seconds).toBeCloseTo(0.25);
    expect(r.steal_seconds).toBe(0);
  });

  it("on Linux sees this process's main thread and the dense pool's workers by name", () => {
    const before = threadCount();
    setThreadCount(2);
    try {
      const w = new Uint16Array(1024 * 1024).fill(0x3c00);
      const a = cpuSnapshot();
      if (!a) return void console.log("skipped: no /proc/self/task/<tid>/schedstat here");
      const x = new Float32Array(1024).fill(1);
      for (let i = 0; i < 200; i++) gemvBf16(w, x, new Float32Array(1024), { rows: 1024, cols: 1024 });
      const b = cpuSnapshot()!;
      const r = threadCpuBetween(a, b, 2);
      expect(r.groups.main.cpu_seconds).toBeGreaterThan(0);
      expect(r.groups.pool.threads).toBe(1);
      expect(r.groups.pool.cpu_seconds).toBeGreaterThan(0);
    } finally {
      setThreadCount(before);
    }
  });
});

describe("gemv-probe", () => {
  it("groups calls by shape, largest engine-over-replay first, and counts what was not recorded", () => {
    const p = summarizeGemvProbe([4, 8, 4], [16, 16, 16], [0.003, 0.002, 0.001], [0.001, 0.0015, 0.001], 5, 7);
    expect(p.calls).toBe(3);
    expect(p.dropped).toBe(2);
    expect(p.in_task_calls).toBe(7);
    expect(p.engine_seconds).toBeCloseTo(0.006);
    expect(p.replay_seconds).toBeCloseTo(0.0035);
    expect(p.bytes).toBe((4 + 8 + 4) * 16 * 2);
    expect(p.shapes.map((s) => [s.rows, s.calls])).toEqual([[4, 2], [8, 1]]);
    expect(p.shapes[0].engine_seconds).toBeCloseTo(0.004);
    const lines = formatGemvProbe(p, 1, 1);
    expect(lines[0]).toMatch(/3 calls, engine 6.0 ms, replayed back to back 3.5 ms \(engine\/replay 1.71\)/);
    expect(lines[1]).toMatch(/^  4x16: 2.0 calls\/token/);
  });
});
