// The GEMV probe (gemvTrace): records top-level gemvBf16 calls, replays them on the same weights,
// and leaves the kernel's results untouched.
import { readdirSync, readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { gemvBf16, gemvTrace, setThreadCount, threadCount } from "../src/index.js";

const weights = (rows: number, cols: number, seed: number) => {
  const w = new Uint16Array(rows * cols);
  for (let i = 0; i < w.length; i++) w[i] = 0x3c00 + ((i * 2654435761 + seed) >>> 24);
  return w;
};

describe("gemvTrace", () => {
  const before = threadCount();
  afterEach(() => setThreadCount(before));

  it("records each call's shape in order, replays every recorded call, and changes no output bit", () => {
    for (const threads of [1, 2, 3]) {
      setThreadCount(threads);
      const shapes = [
        [48, 64],
        [130, 96],
        [16, 2304],
      ];
      const ws = shapes.map(([r, c], i) => weights(r, c, i));
      const x = new Float32Array(2304).map((_, i) => ((i % 17) - 8) / 9);
      const plain = shapes.map(([r, c], i) => gemvBf16(ws[i], x, new Float32Array(r), { rows: r, cols: c }));
      gemvTrace.start(2);
      const traced = shapes.map(([r, c], i) => gemvBf16(ws[i], x, new Float32Array(r), { rows: r, cols: c }));
      const t = gemvTrace.stop();
      traced.forEach((y, i) => expect(Array.from(y), `call ${i}, ${threads} threads`).toEqual(Array.from(plain[i])));
      // capacity 2: the third call is seen, not recorded
      expect(t.seen).toBe(3);
      expect(t.inTasks).toBe(0);
      expect(Array.from(t.rows)).toEqual([48, 130]);
      expect(Array.from(t.cols)).toEqual([64, 96]);
      expect(t.seconds.every((s) => s > 0 && s < 1)).toBe(true);
      const replay = gemvTrace.replay();
      expect(replay.length).toBe(2);
      expect(replay.every((s) => s > 0 && s < 1)).toBe(true);
      // stopped: later calls are not recorded
      gemvBf16(ws[0], x, new Float32Array(48), { rows: 48, cols: 64 });
      expect(gemvTrace.stop().seen).toBe(3);
    }
  });

  it("names the pool's worker threads k3-pool (the engine's per-thread CPU report groups by it)", () => {
    setThreadCount(3);
    gemvBf16(weights(64, 64, 1), new Float32Array(64), new Float32Array(64), { rows: 64, cols: 64 });
    const names = readdirSync("/proc/self/task").map((t) => readFileSync(`/proc/self/task/${t}/comm`, "utf8").trim());
    expect(names.filter((n) => n === "k3-pool").length).toBe(2);
  });

  it("refuses a capacity above 2^24, naming it", () => {
    expect(() => gemvTrace.start(2 ** 25)).toThrow(/gemvTraceStart.*capacity/);
  });
});
