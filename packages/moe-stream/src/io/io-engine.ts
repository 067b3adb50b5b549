/**
 * Which engine runs the store's reads, and opening the native store with it.
 *
 * - "io_uring": one ring of depth = readers and one submitter/reaper thread (raw syscalls, no
 *   liburing). Fewer threads and context switches than pread threads for the same queue depth.
 * - "pread": `readers` threads blocking in pread(2). Works wherever Linux does.
 * - "auto" (default): io_uring when the kernel lets us set a ring up; where seccomp or the
 *   kernel.io_uring_disabled sysctl block it, the pread threads, with the reason in stats().
 *
 * Environment (as the reference engine): K3_NOURING=1 turns "auto" into "pread"; K3_SQPOLL=1 asks
 * io_uring for a kernel submission-polling thread (plain io_uring when refused). An explicit
 * `ioEngine: "io_uring"` in code is kept even under K3_NOURING, and fails when io_uring cannot run.
 */
import { MoeStreamError } from "../errors.js";
import { native, type NativeExpertStore, type NativeReadDone } from "../native.js";

export type IoEngine = "auto" | "io_uring" | "pread";
/** The engine actually serving reads. */
export type IoEngineInUse = "io_uring" | "io_uring+sqpoll" | "pread";

const ENGINES: readonly IoEngine[] = ["auto", "io_uring", "pread"];

const envFlag = (v: string | undefined) => v !== undefined && v !== "" && v !== "0";

/** The engine and SQPOLL wish for an option value and the environment. */
export function resolveIoEngine(requested: IoEngine | undefined, env: Record<string, string | undefined> = process.env): { engine: IoEngine; sqpoll: boolean } {
  if (requested !== undefined && !ENGINES.includes(requested))
    throw new MoeStreamError(`ioEngine must be "auto", "io_uring" or "pread", got ${JSON.stringify(requested)}`);
  const engine = (requested ?? "auto") === "auto" && envFlag(env.K3_NOURING) ? "pread" : (requested ?? "auto");
  return { engine, sqpoll: engine !== "pread" && envFlag(env.K3_SQPOLL) };
}

export interface NativeStoreOptions {
  files: string[];
  slotBytes: number;
  slots: number;
  readers: number;
  direct: boolean;
  maxPrefetchInflight: number;
  prefault: boolean;
  ioEngine?: IoEngine;
  onDone: (d: NativeReadDone) => void;
}

/** Opens the native store (files, arena, engine); an unavailable explicit io_uring is a MoeStreamError. */
export function openNativeStore(o: NativeStoreOptions): NativeExpertStore {
  const { engine, sqpoll } = resolveIoEngine(o.ioEngine);
  try {
    return new native.NativeExpertStore(o.files, o.slotBytes, o.slots, o.readers, o.direct, o.maxPrefetchInflight, o.prefault, o.onDone, engine, sqpoll);
  } catch (e) {
    if (e instanceof Error && /io_uring was requested/.test(e.message)) throw new MoeStreamError(e.message, "io", { cause: e });
    throw e;
  }
}
