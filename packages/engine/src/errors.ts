/**
 * Typed errors with the exit code the CLI maps them to. Every failure is one of four kinds, so a
 * script can tell who has to act: usage (the command line or request), config (config.json, or a
 * checkpoint/state file that does not match it), io (a file or download missing, unreadable or with
 * the wrong bytes), runtime (everything else: a plan that does not fit, a NaN, an abort, a bug).
 * Exit 4 is not a failure kind: the run finished, but a routed expert was dropped (docs/io.md §8).
 */

import { PackageError } from "@k3/native";

export const EXIT_OK = 0;
export const EXIT_RUNTIME = 1;
export const EXIT_USAGE = 2;
export const EXIT_CONFIG = 3;
export const EXIT_DROPPED_EXPERT = 4;
export const EXIT_IO = 5;

/** The failure kinds and their exit codes (documented in `k3 --help` and the engine README). */
export const EXIT_KINDS = { runtime: EXIT_RUNTIME, usage: EXIT_USAGE, config: EXIT_CONFIG, io: EXIT_IO } as const;
export type ExitKind = keyof typeof EXIT_KINDS;

/** The `k3 --help` lines that document the exit codes (one text, also quoted by the README). */
export const EXIT_CODES_HELP = `exit codes: 0 ok; 1 runtime (memory plan exceeds 95% of MemAvailable, non-finite values, Ctrl-C, a bug);
            2 usage (bad flag or value, a context that does not fit); 3 config (config.json, or a
            checkpoint / state file that does not match it); 4 finished but a routed expert was dropped;
            5 io (a file missing, unreadable or corrupt; a download or checksum that does not match)`;

/**
 * Base class: every engine error carries the exit code the CLI should use. `code` is the class's
 * kind in kebab case ("usage", "config", "non-finite", "state-file", ...), `package` "@k3/engine".
 */
export class K3Error extends PackageError {
  readonly exitCode: number;
  constructor(message: string, exitCode: number, options?: { cause?: unknown }) {
    super("@k3/engine", kindOf(new.target.name), message, options);
    this.exitCode = exitCode;
  }
}

/** "NonFiniteError" -> "non-finite"; the base itself is "engine". */
function kindOf(className: string): string {
  const kind = className.replace(/Error$/, "").replace(/([a-z0-9])([A-Z])/g, "$1-$2").toLowerCase();
  return kind === "k3" || kind === "" ? "engine" : kind;
}

/** Bad command line or request (exit 2). */
export class UsageError extends K3Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, EXIT_USAGE, options);
  }
}

/** config.json is missing keys or inconsistent; `problems` lists every one of them (exit 3). */
export class ConfigError extends K3Error {
  readonly problems: string[];
  readonly file: string;
  constructor(file: string, problems: string[], options?: { cause?: unknown }) {
    super(`${file}: ${problems.length} problem(s), refusing to guess:\n  - ${problems.join("\n  - ")}`, EXIT_CONFIG, options);
    this.problems = problems;
    this.file = file;
  }
}

/** The memory plan does not fit the machine (exit 1); the message shows both numbers. */
export class PlanError extends K3Error {
  readonly neededBytes: number;
  readonly availableBytes: number;
  constructor(message: string, neededBytes: number, availableBytes: number) {
    super(message, EXIT_RUNTIME);
    this.neededBytes = neededBytes;
    this.availableBytes = availableBytes;
  }
}

/** The context (KV cache) would not fit: a refusal, like a config error (exit 2). */
export class ContextError extends K3Error {
  constructor(message: string) {
    super(message, EXIT_USAGE);
  }
}

/** A state file that does not belong to this model/config, or is corrupt (exit 3). */
export class StateFileError extends K3Error {
  constructor(file: string, message: string, options?: { cause?: unknown }) {
    super(`${file}: ${message}`, EXIT_CONFIG, options);
  }
}

/** A NaN or an infinity appeared in the hidden state or the logits (exit 1): the message names the first layer, and the tensor when known. */
export class NonFiniteError extends K3Error {
  constructor(message: string) {
    super(message, EXIT_RUNTIME);
  }
}

/** Generation was cancelled through its AbortSignal. */
export class AbortError extends K3Error {
  constructor(message = "generation aborted") {
    super(message, EXIT_RUNTIME);
  }
}

/**
 * The I/O error classes of the packages below the engine, by name: the engine cannot import them
 * here without loading their native addons (`k3 --help` loads none). A test checks each name is
 * still an exported class of its package.
 */
export const IO_ERROR_NAMES: Readonly<Record<string, string>> = {
  SafetensorsError: "@k3/safetensors",
  CheckpointError: "@k3/moe-stream",
  ExpertReadError: "@k3/moe-stream",
  ChecksumError: "@k3/moe-stream",
  PackError: "@k3/moe-stream",
  FileRefusedError: "@k3/native",
};

/** True for Node's system errors (ENOENT, EIO, ENOSPC, ...): they carry an errno code and a syscall. */
function isSystemError(err: unknown): boolean {
  const e = err as { code?: unknown; syscall?: unknown } | null;
  return !!e && typeof e.code === "string" && /^E[A-Z0-9]+$/.test(e.code) && typeof e.syscall === "string";
}

/**
 * What the CLI prints for a thrown value: its message, then each error of its `cause` chain whose
 * message the text does not hold yet, one "caused by:" line each. Most wrappers already quote their
 * cause's message (so nothing is printed twice); a cause they summarise (an errno code for Node's
 * full "ENOENT: no such file or directory, open ..." message) gets its own line.
 */
export function errorText(err: unknown): string {
  const messageOf = (e: unknown) => (e instanceof Error ? e.message : String(e));
  let text = messageOf(err);
  const seen = new Set<unknown>([err]);
  for (let c = (err as { cause?: unknown } | null)?.cause; c !== undefined && c !== null && !seen.has(c); c = (c as { cause?: unknown }).cause) {
    seen.add(c);
    const m = messageOf(c);
    if (m !== "" && !text.includes(m)) text += `\n  caused by: ${m}`;
  }
  return text;
}

/** Gives the exit code for any thrown value: K3Error's own, io for file errors, else runtime. */
export function exitCodeOf(err: unknown): number {
  if (err instanceof K3Error) return err.exitCode;
  if (isSystemError(err) || (err instanceof Error && Object.hasOwn(IO_ERROR_NAMES, err.name))) return EXIT_IO;
  return EXIT_RUNTIME;
}
