/** bench/disk-cap.ts: the disk a path lives on, and a throttled cgroup the wrapped command joins. */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { diskOf, openDiskCap } from "../bench/disk-cap.js";
import { memoryCap } from "./cgroup.js";

const here = import.meta.dirname;

describe("disk cap (K3_RW_DISK_CAP_GBPS)", () => {
  it("finds the whole disk under a path (never a partition) or says why there is none", () => {
    let dev: string;
    try {
      dev = diskOf(here);
    } catch (e) {
      expect((e as Error).message).toMatch(/is not a block device in \/sys\/dev\/block/);
      console.log(`disk-cap: ${(e as Error).message}`);
      return;
    }
    expect(dev).toMatch(/^\d+:\d+$/);
    expect(existsSync(`/sys/dev/block/${dev}`)).toBe(true);
    expect(existsSync(`/sys/dev/block/${dev}/partition`)).toBe(false);
  });

  it("runs the wrapped command inside a cgroup carrying the throttle; refuses a bad speed", () => {
    expect(() => openDiskCap(here, 0)).toThrow(/expected a positive number of GB\/s/);
    expect(() => openDiskCap(here, Number("x"))).toThrow(/expected a positive number of GB\/s/);
    const writable = memoryCap(); // the same permission question: can this process make cgroups?
    if ("skip" in writable) {
      console.log(`disk-cap: skipped, no writable cgroup (${writable.skip})`);
      return;
    }
    let cap;
    try {
      cap = openDiskCap(here, 1.5);
    } catch (e) {
      console.log(`disk-cap: skipped, ${(e as Error).message}`);
      return;
    }
    try {
      expect(cap.bytesPerSecond).toBe(1.5e9);
      expect(readFileSync(cap.setting, "utf8")).toMatch(new RegExp(`^${cap.device} (rbps=)?1500000000\\b`, "m"));
      const [cmd, ...args] = cap.wrap(["cat", "/proc/self/cgroup"]);
      const out = execFileSync(cmd, args, { encoding: "utf8" });
      expect(out).toMatch(new RegExp(`k3-disk-cap-${process.pid}`));
    } finally {
      cap.close();
    }
  });
});
