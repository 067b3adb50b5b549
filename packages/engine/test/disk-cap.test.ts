/** bench/disk-cap.ts: the disk a path lives on, and a throttled cgroup the wrapped command joins. */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { afterAll, describe, expect, it } from "vitest";
import { diskOf, openDiskCap, type DiskCap } from "../bench/disk-cap.js";

const here = import.meta.dirname;

// Opened once: where this process cannot make a throttled cgroup (no controller, not root, a
// checkpoint disk that is not a block device), the test below is skipped with the reason.
const opened: { cap: DiskCap } | { skip: string } = (() => {
  try {
    return { cap: openDiskCap(here, 1.5) };
  } catch (e) {
    return { skip: (e as Error).message };
  }
})();
if ("skip" in opened) console.log(`disk-cap: the cgroup test is skipped: ${opened.skip}`);
afterAll(() => {
  if ("cap" in opened) opened.cap.close();
});

describe("disk cap (K3_RW_DISK_CAP_GBPS)", () => {
  it("finds the whole disk under a path (never a partition), or says why there is none; refuses a bad speed", () => {
    expect(() => openDiskCap(here, 0)).toThrow(/expected a positive number of GB\/s/);
    expect(() => openDiskCap(here, Number("x"))).toThrow(/expected a positive number of GB\/s/);
    let dev: string;
    try {
      dev = diskOf(here);
    } catch (e) {
      expect((e as Error).message).toMatch(/is not a block device in \/sys\/dev\/block/);
      return;
    }
    expect(dev).toMatch(/^\d+:\d+$/);
    expect(existsSync(`/sys/dev/block/${dev}`)).toBe(true);
    expect(existsSync(`/sys/dev/block/${dev}/partition`)).toBe(false);
  });

  it.skipIf("skip" in opened)("runs the wrapped command inside a cgroup carrying the throttle", () => {
    const cap = (opened as { cap: DiskCap }).cap;
    expect(cap.bytesPerSecond).toBe(1.5e9);
    expect(readFileSync(cap.setting, "utf8")).toMatch(new RegExp(`^${cap.device} (rbps=)?1500000000\\b`, "m"));
    const [cmd, ...args] = cap.wrap(["cat", "/proc/self/cgroup"]);
    expect(execFileSync(cmd, args, { encoding: "utf8" })).toMatch(new RegExp(`k3-disk-cap-${process.pid}`));
  });
});
