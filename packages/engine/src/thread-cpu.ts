/**
 * Where a phase's CPU went, per thread group (issue 13 item 3: decode above its floor on 2 cores).
 * Two compute threads (the JS main thread and the @k3/dense pool worker) share the machine with
 * the expert readers (io_uring submitter, pread threads, the kernel's io-wq workers), V8/libuv
 * threads and other processes; any of them running during a layer takes a core from its GEMVs.
 *
 * Linux only (null elsewhere): each thread's /proc/self/task/<tid>/schedstat gives nanoseconds on a
 * CPU and nanoseconds runnable but waiting for one (CONFIG_SCHED_INFO); /proc/stat gives the
 * machine's busy, idle and steal ticks (USER_HZ), so other processes' CPU is the machine's busy
 * time less this process's. Threads are grouped by name: the native pools name theirs (k3-pool,
 * k3-read, k3-uring); the kernel names io_uring's workers iou-wrk-* / iou-sqp-*.
 */
import { readdirSync, readFileSync } from "node:fs";

export const THREAD_GROUPS = ["main", "pool", "readers", "other"] as const;
export type ThreadGroup = (typeof THREAD_GROUPS)[number];

interface ThreadSample {
  group: ThreadGroup;
  cpuNs: number;
  waitNs: number;
}

export interface CpuSnapshot {
  atMs: number;
  threads: Map<number, ThreadSample>;
  /** /proc/stat "cpu" line: busy (user+nice+system+irq+softirq), idle (+iowait), steal, in ticks. */
  machine: { busy: number; idle: number; steal: number } | null;
}

/** Seconds on a CPU and seconds runnable-but-waiting, per group, over an interval. */
export interface ThreadCpuReport {
  wall_seconds: number;
  groups: Record<ThreadGroup, { cpu_seconds: number; wait_seconds: number; threads: number }>;
  /** CPU seconds of other processes (machine busy minus this process; USER_HZ resolution), and hypervisor steal. */
  other_processes_seconds: number | null;
  steal_seconds: number | null;
  cpus: number;
}

const USER_HZ = 100;

/** The group a thread belongs to, from its tid and name. */
export function threadGroup(tid: number, pid: number, comm: string): ThreadGroup {
  if (tid === pid) return "main";
  if (comm === "k3-pool") return "pool";
  if (comm === "k3-read" || comm === "k3-uring" || comm.startsWith("iou-")) return "readers";
  return "other";
}

function readMachine(): CpuSnapshot["machine"] {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0];
    const f = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal
    return { busy: f[0] + f[1] + f[2] + f[5] + f[6], idle: f[3] + f[4], steal: f[7] ?? 0 };
  } catch {
    return null;
  }
}

/** A snapshot of every thread of this process, or null where /proc/self/task/<tid>/schedstat is not there. */
export function cpuSnapshot(): CpuSnapshot | null {
  const pid = process.pid;
  const threads = new Map<number, ThreadSample>();
  let tids: string[];
  try {
    tids = readdirSync("/proc/self/task");
  } catch {
    return null;
  }
  for (const t of tids) {
    const tid = Number(t);
    try {
      const [cpu, wait] = readFileSync(`/proc/self/task/${t}/schedstat`, "utf8").trim().split(/\s+/).map(Number);
      const comm = readFileSync(`/proc/self/task/${t}/comm`, "utf8").trim();
      threads.set(tid, { group: threadGroup(tid, pid, comm), cpuNs: cpu, waitNs: wait });
    } catch {
      // The thread exited between the listing and the read.
    }
  }
  if (!threads.has(pid)) return null;
  return { atMs: performance.now(), threads, machine: readMachine() };
}

/** What happened between two snapshots (threads that appeared count from 0; threads that exited are lost). */
export function threadCpuBetween(a: CpuSnapshot, b: CpuSnapshot, cpus: number): ThreadCpuReport {
  const groups = Object.fromEntries(THREAD_GROUPS.map((g) => [g, { cpu_seconds: 0, wait_seconds: 0, threads: 0 }])) as ThreadCpuReport["groups"];
  let ours = 0;
  for (const [tid, s] of b.threads) {
    const p = a.threads.get(tid);
    const cpu = (s.cpuNs - (p?.cpuNs ?? 0)) / 1e9;
    const wait = (s.waitNs - (p?.waitNs ?? 0)) / 1e9;
    if (cpu <= 0 && wait <= 0) continue;
    const g = groups[s.group];
    g.cpu_seconds += cpu;
    g.wait_seconds += wait;
    g.threads++;
    ours += cpu;
  }
  const m0 = a.machine;
  const m1 = b.machine;
  return {
    wall_seconds: (b.atMs - a.atMs) / 1000,
    groups,
    other_processes_seconds: m0 && m1 ? Math.max(0, (m1.busy - m0.busy) / USER_HZ - ours) : null,
    steal_seconds: m0 && m1 ? (m1.steal - m0.steal) / USER_HZ : null,
    cpus,
  };
}

/** One line: each group's CPU and runqueue wait in ms per token. */
export function formatThreadCpu(r: ThreadCpuReport, tokens: number): string {
  const per = (s: number) => ((s * 1000) / Math.max(1, tokens)).toFixed(1);
  const g = THREAD_GROUPS.filter((k) => r.groups[k].threads > 0).map((k) => `${k} ${per(r.groups[k].cpu_seconds)} cpu / ${per(r.groups[k].wait_seconds)} wait`);
  const extra = [r.other_processes_seconds !== null ? `other processes ${per(r.other_processes_seconds)}` : null, r.steal_seconds !== null ? `steal ${per(r.steal_seconds)}` : null].filter(Boolean);
  return `${per(r.wall_seconds)} ms/token wall on ${r.cpus} cpus: ${[...g, ...extra].join(", ")} (ms/token)`;
}
