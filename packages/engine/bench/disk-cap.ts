/**
 * A fixed disk speed for a benchmark (K3_RW_DISK_CAP_GBPS): a cgroup whose reads from the disk
 * holding a path are throttled (v1 blkio.throttle.read_bps_device, or v2 io.max rbps), and argv
 * wrapped so the command runs inside it.
 *
 * Why: a floor divides the bytes read by a disk ceiling measured before and after the run, and a
 * virtual disk that changes speed by 2x within a minute (this VM's: 1.5-3.5 GB/s) makes a
 * disk-bound row's ratio say more about when the disk changed than about the engine. Capped below
 * the disk's slowest phase, the ceilings and the run see one speed. The cap also makes the disk
 * slower than the real one, so compute weighs less against it: say so next to capped rows.
 */
import { existsSync, mkdirSync, readFileSync, realpathSync, rmdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

export interface DiskCap {
  /** "MAJ:MIN" of the whole disk throttled. */
  device: string;
  bytesPerSecond: number;
  /** The cgroup directory, and the file holding the throttle in it. */
  dir: string;
  setting: string;
  /** argv run inside the cgroup (a shell joins it, then execs argv). */
  wrap(argv: string[]): string[];
  close(): void;
}

/** The whole disk ("MAJ:MIN") a path lives on: a partition's parent, since throttles apply to disks. */
export function diskOf(path: string): string {
  const dev = statSync(path).dev;
  const major = (dev >> 8) & 0xfff;
  const minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
  const sys = `/sys/dev/block/${major}:${minor}`;
  if (!existsSync(sys)) throw new Error(`${path}: device ${major}:${minor} is not a block device in /sys/dev/block (a network or overlay filesystem?): no disk to cap`);
  if (!existsSync(join(sys, "partition"))) return `${major}:${minor}`;
  return readFileSync(join(dirname(realpathSync(sys)), "dev"), "utf8").trim();
}

function mounts(): Array<{ dir: string; type: string; options: string[] }> {
  return readFileSync("/proc/mounts", "utf8")
    .split("\n")
    .map((l) => l.split(" "))
    .filter((f) => f.length >= 4)
    .map((f) => ({ dir: f[1], type: f[2], options: f[3].split(",") }));
}

function ownCgroup(match: (controllers: string) => boolean): string | null {
  for (const line of readFileSync("/proc/self/cgroup", "utf8").split("\n")) {
    const [, ctl, path] = line.split(":");
    if (path !== undefined && match(ctl)) return path;
  }
  return null;
}

/** Creates the throttled cgroup, or throws naming why it cannot (no writable blkio/io controller). */
export function openDiskCap(path: string, gbps: number): DiskCap {
  if (!(gbps > 0) || !Number.isFinite(gbps)) throw new Error(`K3_RW_DISK_CAP_GBPS=${gbps}: expected a positive number of GB/s`);
  const device = diskOf(path);
  const bytesPerSecond = Math.round(gbps * 1e9);
  const name = `k3-disk-cap-${process.pid}`;
  const v1 = mounts().find((m) => m.type === "cgroup" && m.options.includes("blkio"));
  const v2 = mounts().find((m) => m.type === "cgroup2");
  let dir: string;
  let setting: string;
  let line: string;
  if (v1) {
    dir = join(v1.dir, ownCgroup((c) => c.split(",").includes("blkio")) ?? "/", name);
    setting = join(dir, "blkio.throttle.read_bps_device");
    line = `${device} ${bytesPerSecond}`;
  } else if (v2) {
    // A v2 cgroup with processes cannot have children with controllers: use the parent of ours.
    dir = join(v2.dir, ownCgroup((c) => c === "") ?? "/", "..", name);
    setting = join(dir, "io.max");
    line = `${device} rbps=${bytesPerSecond}`;
  } else throw new Error("no cgroup blkio (v1) or io (v2) controller mounted: the disk cannot be capped here");
  try {
    mkdirSync(dir);
  } catch (e) {
    throw new Error(`cannot create the cgroup ${dir} (${(e as NodeJS.ErrnoException).code}): the disk cannot be capped here`);
  }
  try {
    writeFileSync(setting, line);
  } catch (e) {
    rmdirSync(dir);
    throw new Error(`cannot throttle disk ${device} in ${setting} (${(e as NodeJS.ErrnoException).code}): the disk cannot be capped here`);
  }
  return {
    device,
    bytesPerSecond,
    dir,
    setting,
    wrap: (argv) => ["/bin/sh", "-c", `echo $$ > "${join(dir, "cgroup.procs")}" && exec "$@"`, "sh", ...argv],
    close: () => {
      try {
        rmdirSync(dir);
      } catch {
        /* a child may still be leaving it; the directory is empty of settings worth keeping */
      }
    },
  };
}
