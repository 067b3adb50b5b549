/**
 * Runs a child process under a cgroup memory cap (no swap): cgroup v2 memory.max + memory.swap.max=0
 * where the memory controller is on v2, else v1 memory.limit_in_bytes (+ memsw when present).
 * The cap cgroup is a child of this process's own cgroup, created per run and removed after it.
 * `memoryCap()` says why not when neither is writable (not root, no controller, read-only mount).
 */
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

export interface MemoryCap {
  kind: "v2" | "v1";
  /** The parent directory the per-run cgroups are made in. */
  parent: string;
}

interface Mount {
  type: string;
  dir: string;
  options: string[];
}

function mounts(): Mount[] {
  try {
    return readFileSync("/proc/mounts", "utf8")
      .split("\n")
      .map((l) => l.split(" "))
      .filter((f) => f.length >= 4)
      .map((f) => ({ type: f[2], dir: f[1], options: f[3].split(",") }));
  } catch {
    return [];
  }
}

/** This process's path in a hierarchy: "0::/x" for v2, "N:memory:/x" for v1's memory controller. */
function ownPath(kind: "v2" | "v1"): string | null {
  try {
    for (const line of readFileSync("/proc/self/cgroup", "utf8").split("\n")) {
      const [, ctl, path] = line.split(":");
      if (path === undefined) continue;
      if (kind === "v2" && line.startsWith("0::")) return line.slice(3);
      if (kind === "v1" && ctl.split(",").includes("memory")) return path;
    }
  } catch {
    /* no /proc */
  }
  return null;
}

function tryDir(parent: string, probe: (dir: string) => void): string | null {
  const dir = join(parent, `k3-cap-probe-${process.pid}`);
  try {
    mkdirSync(dir);
  } catch (e) {
    return `cannot create a cgroup in ${parent}: ${(e as NodeJS.ErrnoException).code}`;
  }
  try {
    probe(dir);
    return null;
  } catch (e) {
    return `cannot set a memory limit in ${parent}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`;
  } finally {
    try {
      rmdirSync(dir);
    } catch {
      /* best effort */
    }
  }
}

/** A writable memory cgroup to cap children in, or the reason there is none. */
export function memoryCap(): MemoryCap | { skip: string } {
  if (process.platform !== "linux") return { skip: `cgroups are Linux-only (this is ${process.platform})` };
  const reasons: string[] = [];
  const v2 = mounts().find((m) => m.type === "cgroup2" && existsSync(join(m.dir, "cgroup.controllers")) && readFileSync(join(m.dir, "cgroup.controllers"), "utf8").split(/\s+/).includes("memory"));
  const p2 = ownPath("v2");
  if (v2 && p2 !== null) {
    // A v2 cgroup with processes cannot enable controllers for children: use the process's own
    // cgroup's parent when the own one has members (the usual case), trying both.
    for (const parent of [join(v2.dir, p2), join(v2.dir, p2, "..")]) {
      const why = tryDir(parent, (d) => {
        writeFileSync(join(d, "memory.max"), String(1 << 30));
        writeFileSync(join(d, "memory.swap.max"), "0");
      });
      if (why === null) return { kind: "v2", parent };
      reasons.push(why);
    }
  } else reasons.push("no cgroup v2 hierarchy with the memory controller");
  const v1 = mounts().find((m) => m.type === "cgroup" && m.options.includes("memory"));
  const p1 = ownPath("v1");
  if (v1 && p1 !== null) {
    const parent = join(v1.dir, p1);
    const why = tryDir(parent, (d) => writeFileSync(join(d, "memory.limit_in_bytes"), String(1 << 30)));
    if (why === null) return { kind: "v1", parent };
    reasons.push(why);
  } else reasons.push("no cgroup v1 memory hierarchy");
  return { skip: reasons.join("; ") };
}

export interface CappedResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** The cgroup's peak usage (v1 memory.max_usage_in_bytes / v2 memory.peak; page cache included), when readable. */
  cgroupPeakBytes: number | null;
  /** Times the cap was hit (v1 memory.failcnt, v2 memory.events max), when readable. */
  capHits: number | null;
  /** The OOM killer ran in the cgroup (v2 memory.events oom_kill; v1: SIGKILL with failcnt > 0). */
  oomKilled: boolean;
}

let seq = 0;

/** Runs `argv` (argv[0] = executable) in a fresh cgroup capped at `capBytes` (no swap), then removes it. */
export async function runCapped(cap: MemoryCap, capBytes: number, argv: string[], opts: { env?: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number } = {}): Promise<CappedResult> {
  const dir = join(cap.parent, `k3-cap-${process.pid}-${++seq}`);
  mkdirSync(dir);
  try {
    const bytes = String(Math.floor(capBytes / 4096) * 4096);
    if (cap.kind === "v2") {
      writeFileSync(join(dir, "memory.max"), bytes);
      writeFileSync(join(dir, "memory.swap.max"), "0");
    } else {
      writeFileSync(join(dir, "memory.limit_in_bytes"), bytes);
      // No swap either: memory + swap capped at the same number (absent without swap accounting).
      if (existsSync(join(dir, "memory.memsw.limit_in_bytes"))) writeFileSync(join(dir, "memory.memsw.limit_in_bytes"), bytes);
    }
    // The shell joins the cgroup, then becomes the child: every byte the child maps is charged to it.
    const script = `echo $$ > "${join(dir, "cgroup.procs")}" && exec "$@"`;
    const child = spawn("/bin/sh", ["-c", script, "sh", ...argv], { env: opts.env ?? process.env, cwd: opts.cwd, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : null;
    const { code, signal } = await new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => child.on("close", (c, s) => res({ code: c, signal: s })));
    if (timer) clearTimeout(timer);
    const num = (f: string) => {
      try {
        return Number(readFileSync(join(dir, f), "utf8").trim());
      } catch {
        return null;
      }
    };
    let cgroupPeakBytes: number | null;
    let capHits: number | null;
    let oomKilled = false;
    if (cap.kind === "v2") {
      cgroupPeakBytes = num("memory.peak");
      let events = "";
      try {
        events = readFileSync(join(dir, "memory.events"), "utf8");
      } catch {
        /* absent */
      }
      capHits = Number(/^max (\d+)/m.exec(events)?.[1] ?? NaN);
      if (!Number.isFinite(capHits)) capHits = null;
      oomKilled = Number(/^oom_kill (\d+)/m.exec(events)?.[1] ?? 0) > 0;
    } else {
      cgroupPeakBytes = num("memory.max_usage_in_bytes");
      capHits = num("memory.failcnt");
      oomKilled = signal === "SIGKILL" && (capHits ?? 0) > 0;
    }
    return { code, signal, stdout, stderr, cgroupPeakBytes, capHits, oomKilled };
  } finally {
    for (let i = 0; i < 50; i++) {
      try {
        rmdirSync(dir);
        break;
      } catch {
        await new Promise((r) => setTimeout(r, 100)); // the last task may still be leaving the cgroup
      }
    }
  }
}

/**
 * What node, tsx and the CLI's modules have charged to a fresh cgroup when `k3` makes its memory
 * plan (which reads the cgroup: available = limit - charge): a `k3 plan --model MODEL` under a
 * 512 MB cap reports the headroom it saw. `k3 plan` imports only the planner, while `k3 run` plans
 * with the whole engine (its native addons) loaded, so the probe preloads the engine first. It
 * passes the run's own plan flags (`--trunk DIR`: the run reads trunk.json before it plans) and its
 * K3_THREADS. Plus CHARGE_SLACK for what `k3 run` does before planning that `k3 plan` does not
 * (argument parsing, a bigger index.json) and GC timing: the probe itself reads 40.5-55.5 MB from
 * one run to the next here (test output, `cgroup: the runtime's own charge`). Measured once per
 * distinct probe.
 * Throws when the plan did not see the cap (a reader of /proc/meminfo only).
 */
const chargeCache = new Map<string, number>();
/**
 * 16 MB was short once on a fresh CI machine (cgroup v1): a streamed-trunk run was refused with
 * "needs 2.26 GB but only 2.26 GB is usable". The cap still binds: peak RSS is checked against the plan.
 */
export const CHARGE_SLACK = 48 * 2 ** 20;
export async function runtimeChargeAtPlan(cap: MemoryCap, cli: string, model: string, cwd: string, planFlags: string[] = [], threads = "1"): Promise<number> {
  const key = JSON.stringify([cli, model, planFlags, threads]);
  const cached = chargeCache.get(key);
  if (cached !== undefined) return cached;
  const probeCap = 512 * 2 ** 20;
  const dir = mkdtempSync(join(tmpdir(), "k3-charge-"));
  try {
    const json = join(dir, "plan.json");
    const engine = pathToFileURL(join(dirname(cli), cli.endsWith(".ts") ? "engine.ts" : "index.js")).href;
    const node = cli.endsWith(".ts") ? [process.execPath, "--import", "tsx", "--import", engine] : [process.execPath, "--import", engine];
    const argv = [...node, cli, "plan", "--model", model, "--preset", "ultra", ...planFlags, "--json", json];
    const r = await runCapped(cap, probeCap, argv, { env: { ...process.env, K3_THREADS: threads }, cwd, timeoutMs: 120_000 });
    if (r.code !== 0) throw new Error(`k3 plan under a ${probeCap}-byte cap exited ${r.code}: ${r.stderr}`);
    const plan = JSON.parse(readFileSync(json, "utf8")).plans[0] as { availableBytes: number; cgroupLimitBytes?: number };
    if (plan.cgroupLimitBytes !== probeCap) throw new Error(`k3 plan under a ${probeCap}-byte cap saw cgroupLimitBytes ${plan.cgroupLimitBytes}: its memory figures ignore the cgroup`);
    const charge = probeCap - plan.availableBytes;
    console.log(`cgroup: the runtime's own charge when it plans${planFlags.length ? ` (${planFlags.join(" ")})` : ""}: ${(charge / 1e6).toFixed(1)} MB`);
    const withSlack = charge + CHARGE_SLACK;
    chargeCache.set(key, withSlack);
    return withSlack;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The smallest cap (page-rounded) under which a plan of `total` bytes is accepted: 95% of (cap - charge) >= total. */
export function capForPlan(total: number, charge: number): number {
  return Math.ceil((total / 0.95 + charge) / 4096) * 4096;
}
