/**
 * The memory ceiling's buffer (floor.ts memCeilingBytes): larger than the last-level cache, so it
 * measures the DRAM the weights stream from (bench/stream-shapes.bench.ts: 512 MiB read 35.6-36.3 GB/s
 * on a VM with 480 MiB of L3, 2-4 GiB 34.0-34.1), within what the machine has free.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { lastLevelCacheBytes, MEM_CEILING_BYTES, MEM_CEILING_MAX_BYTES, memCeilingBytes } from "../src/floor.js";

const MiB = 2 ** 20;
const GB = 1e9;
const roots: string[] = [];
afterAll(() => roots.forEach((r) => rmSync(r, { recursive: true, force: true })));

/** A fake sysfs with CPU 0's caches as (level, size) pairs. */
function sysfs(caches: Array<[string, string]>): string {
  const root = mkdtempSync(join(tmpdir(), "k3-sysfs-"));
  roots.push(root);
  caches.forEach(([level, size], i) => {
    const d = join(root, "sys/devices/system/cpu/cpu0/cache", `index${i}`);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, "level"), level + "\n");
    writeFileSync(join(d, "size"), size + "\n");
  });
  return root;
}

describe("memory ceiling buffer", () => {
  it("reads the last-level cache from sysfs (the highest level), 0 when absent or unreadable", () => {
    expect(lastLevelCacheBytes(sysfs([["1", "48K"], ["1", "32K"], ["2", "2048K"], ["3", "491520K"]]))).toBe(480 * MiB);
    expect(lastLevelCacheBytes(sysfs([["1", "32K"], ["2", "1M"], ["3", "32M"]]))).toBe(32 * MiB);
    expect(lastLevelCacheBytes(sysfs([["1", "48K"], ["2", "2048K"]]))).toBe(2 * MiB);
    expect(lastLevelCacheBytes(sysfs([["3", "lots"]]))).toBe(0);
    expect(lastLevelCacheBytes(join(tmpdir(), "k3-no-such-root"))).toBe(0);
  });

  it("is 4x the last-level cache, at least 512 MiB, at most 4 GiB, the caller's bound and a quarter of what is available", () => {
    expect(memCeilingBytes(24 * GB, 480 * MiB)).toBe(1920 * MiB);
    expect(memCeilingBytes(24 * GB, 32 * MiB)).toBe(MEM_CEILING_BYTES);
    expect(memCeilingBytes(24 * GB, 0)).toBe(MEM_CEILING_BYTES);
    expect(memCeilingBytes(64 * GB, 2048 * MiB)).toBe(MEM_CEILING_MAX_BYTES);
    expect(memCeilingBytes(4 * GB, 480 * MiB)).toBe(Math.floor(1 * GB / (2 * MiB)) * 2 * MiB);
    expect(memCeilingBytes(1 * GB, 480 * MiB)).toBe(MEM_CEILING_BYTES);
    // Capped by the caller's bound (the engine: half its plan), never below 512 MiB.
    expect(memCeilingBytes(24 * GB, 480 * MiB, 1.51 * GB / 2)).toBe(Math.floor(0.755 * GB / (2 * MiB)) * 2 * MiB);
    expect(memCeilingBytes(24 * GB, 480 * MiB, 0.2 * GB)).toBe(MEM_CEILING_BYTES);
    for (const b of [memCeilingBytes(24 * GB, 480 * MiB), memCeilingBytes(3 * GB, 100 * MiB)]) expect(b % (2 * MiB)).toBe(0);
  });
});
